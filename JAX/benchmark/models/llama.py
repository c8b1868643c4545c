"""Llama 3 decoder in Flax (linen) for pre-training throughput, randomly initialised.

The network of PyTorch/benchmark/models/llama.py at the sizes of
``driver.workloads.llama.LLAMA_SIZES``: RMSNorm before attention and feed-forward, rotary
embeddings (theta from the shape) on the query and key heads, causal grouped-query attention
(``jax.nn.dot_product_attention``: key/value heads shared by ``heads // kv_heads`` query
heads), a SwiGLU feed-forward and an output projection, untied or tied to the token
embeddings. The loss is next-token cross-entropy over every position, in float32.

Activation checkpointing: ``full`` rematerialises each block in the backward pass; ``selective``
keeps every matmul's output (``jax.checkpoint_policies.checkpoint_dots``) and recomputes the
element-wise ops (norms, rotary, SiLU). PyTorch's selective keeps attention and every other
matmul; the header names the policy that ran.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import linen as nn

from driver.workloads.llama import LlamaShape

INIT = nn.initializers.normal(0.02)
REMAT_POLICIES = {"selective": "checkpoint_dots", "full": "nothing_saveable"}


class RMSNorm(nn.Module):
    eps: float
    dtype: Any

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        weight = self.param("weight", nn.initializers.ones, (x.shape[-1],))
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return (normed * weight).astype(self.dtype)


def rotary(x: jnp.ndarray, theta: float) -> jnp.ndarray:
    """Rotate [B, S, H, D] by each position's angles (pairs of the head dimension's halves)."""
    seq, dim = x.shape[1], x.shape[-1]
    inverse = 1.0 / (theta ** (jnp.arange(0, dim, 2, dtype=jnp.float32) / dim))
    angles = jnp.outer(jnp.arange(seq, dtype=jnp.float32), inverse)  # [S, D/2]
    cos, sin = jnp.cos(angles)[None, :, None, :], jnp.sin(angles)[None, :, None, :]
    x32 = x.astype(jnp.float32)
    first, second = x32[..., : dim // 2], x32[..., dim // 2 :]
    rotated = jnp.concatenate([first * cos - second * sin, first * sin + second * cos], axis=-1)
    return rotated.astype(x.dtype)


class Block(nn.Module):
    shape: LlamaShape
    dtype: Any

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        shape, dtype = self.shape, self.dtype
        batch, seq, _ = x.shape
        dense = lambda features, name: nn.Dense(  # noqa: E731
            features, use_bias=False, kernel_init=INIT, dtype=dtype, name=name
        )
        h = RMSNorm(shape.norm_eps, dtype, name="attention_norm")(x)
        q = dense(shape.heads * shape.head_dim, "wq")(h).reshape(batch, seq, shape.heads, -1)
        k = dense(shape.kv_heads * shape.head_dim, "wk")(h).reshape(batch, seq, shape.kv_heads, -1)
        v = dense(shape.kv_heads * shape.head_dim, "wv")(h).reshape(batch, seq, shape.kv_heads, -1)
        q, k = rotary(q, shape.rope_theta), rotary(k, shape.rope_theta)
        attended = jax.nn.dot_product_attention(q, k, v, is_causal=True)
        x = x + dense(shape.dim, "wo")(attended.reshape(batch, seq, -1))
        h = RMSNorm(shape.norm_eps, dtype, name="ffn_norm")(x)
        gated = nn.silu(dense(shape.ffn_dim, "w1")(h)) * dense(shape.ffn_dim, "w3")(h)
        return x + dense(shape.dim, "w2")(gated)


class Llama(nn.Module):
    shape: LlamaShape
    checkpointing: str = "none"
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, tokens: jnp.ndarray) -> jnp.ndarray:
        shape, dtype = self.shape, self.dtype
        embed = nn.Embed(
            shape.vocab_size, shape.dim, embedding_init=INIT, dtype=dtype, name="tok_embeddings"
        )
        block = Block
        if self.checkpointing != "none":
            policy = getattr(jax.checkpoint_policies, REMAT_POLICIES[self.checkpointing])
            block = nn.remat(Block, policy=policy)
        x = embed(tokens)
        for index in range(shape.layers):
            x = block(shape, dtype, name=f"layer_{index}")(x)
        x = RMSNorm(shape.norm_eps, dtype, name="norm")(x)
        if shape.tied_embeddings:
            return embed.attend(x)
        return nn.Dense(
            shape.vocab_size, use_bias=False, kernel_init=INIT, dtype=dtype, name="output"
        )(x)


def causal_lm_loss(logits: jnp.ndarray, labels: jnp.ndarray) -> jnp.ndarray:
    """Mean next-token cross-entropy (``labels``: the inputs shifted by one), in float32."""
    return jnp.mean(
        optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)
    )
