"""BERT pre-training (masked LM + next-sentence prediction) in Flax (linen).

The network of PyTorch/benchmark/models/bert.py and the Keras one, at the sizes of
``driver.workloads.bert.BertShape``: post-LayerNorm encoder layers, exact (erf) GELU, dropout
0.1, LayerNorm epsilon 1e-12, truncated-normal(0.02) initialisation, a fused QKV projection,
and the masked-LM decoder tied to the word embeddings, run only at the masked positions. The
position table has ``BertShape.max_position`` rows, as PyTorch's (BERT-base's 110,106,428
parameters). Parameters float32; ``dtype`` computes (bfloat16 under AMP); logits and losses
float32.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import linen as nn

from driver.workloads.bert import BertShape

IGNORE_ID = -1  # masked_lm_ids of padded prediction slots


def _init() -> Any:
    return nn.initializers.truncated_normal(0.02)


class EncoderLayer(nn.Module):
    shape: BertShape
    dtype: Any

    @nn.compact
    def __call__(self, x: jnp.ndarray, mask_bias: jnp.ndarray, train: bool) -> jnp.ndarray:
        shape, dtype = self.shape, self.dtype
        batch, seq, _ = x.shape
        dense = lambda features, name: nn.Dense(  # noqa: E731
            features, kernel_init=_init(), dtype=dtype, name=name
        )
        qkv = dense(3 * shape.hidden, "qkv")(x).reshape(batch, seq, 3, shape.heads, shape.head_dim)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # [B, S, H, D]
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * jnp.asarray(shape.head_dim**-0.5, dtype)
        probs = jax.nn.softmax(scores.astype(jnp.float32) + mask_bias, axis=-1).astype(dtype)
        probs = nn.Dropout(shape.dropout, deterministic=not train)(probs)
        context = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(batch, seq, shape.hidden)
        attended = nn.Dropout(shape.dropout, deterministic=not train)(
            dense(shape.hidden, "out")(context)
        )
        x = nn.LayerNorm(epsilon=shape.layer_norm_eps, dtype=dtype, name="attention_ln")(
            x + attended
        )
        ffn = dense(shape.hidden, "ffn_out")(
            nn.gelu(dense(shape.intermediate, "ffn_in")(x), approximate=False)
        )
        ffn = nn.Dropout(shape.dropout, deterministic=not train)(ffn)
        return nn.LayerNorm(epsilon=shape.layer_norm_eps, dtype=dtype, name="ffn_ln")(x + ffn)


class BertPretraining(nn.Module):
    """Inputs: the shard format's feature dict; outputs: (masked-LM logits, NSP logits)."""

    shape: BertShape
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(
        self, features: dict[str, jnp.ndarray], train: bool = True
    ) -> tuple[jnp.ndarray, jnp.ndarray]:
        shape, dtype = self.shape, self.dtype

        def embedding(rows: int, name: str) -> nn.Embed:
            return nn.Embed(rows, shape.hidden, embedding_init=_init(), dtype=dtype, name=name)

        words = embedding(shape.vocab_size, "word_embeddings")
        positions = embedding(shape.max_position, "position_embeddings")
        types = embedding(shape.type_vocab_size, "token_type_embeddings")
        input_ids = features["input_ids"]
        seq = input_ids.shape[1]
        x = words(input_ids) + positions(jnp.arange(seq))[None] + types(features["segment_ids"])
        x = nn.LayerNorm(epsilon=shape.layer_norm_eps, dtype=dtype, name="embedding_ln")(x)
        x = nn.Dropout(shape.dropout, deterministic=not train)(x)
        # Padding gets a large negative bias before the softmax: [B, 1, 1, S].
        mask = features["input_mask"].astype(jnp.float32)[:, None, None, :]
        mask_bias = (1.0 - mask) * -10000.0
        for index in range(shape.layers):
            x = EncoderLayer(shape, dtype, name=f"layer_{index}")(x, mask_bias, train)
        pooled = jnp.tanh(
            nn.Dense(shape.hidden, kernel_init=_init(), dtype=dtype, name="pooler")(x[:, 0])
        )
        nsp_logits = nn.Dense(2, kernel_init=_init(), dtype=jnp.float32, name="nsp")(
            pooled.astype(jnp.float32)
        )
        # Masked LM on the masked positions only, decoded with the tied word embeddings.
        masked = jnp.take_along_axis(x, features["masked_lm_positions"][:, :, None], axis=1)
        masked = nn.Dense(shape.hidden, kernel_init=_init(), dtype=dtype, name="mlm_dense")(masked)
        masked = nn.LayerNorm(epsilon=shape.layer_norm_eps, dtype=dtype, name="mlm_ln")(
            nn.gelu(masked, approximate=False)
        )
        bias = self.param("mlm_bias", nn.initializers.zeros, (shape.vocab_size,))
        mlm_logits = words.attend(masked).astype(jnp.float32) + bias
        return mlm_logits, nsp_logits


def pretraining_loss(
    features: dict[str, jnp.ndarray], outputs: tuple[jnp.ndarray, jnp.ndarray]
) -> jnp.ndarray:
    """Mean masked-LM cross entropy over the real (non-padded) predictions + NSP loss."""
    mlm_logits, nsp_logits = outputs
    ids = features["masked_lm_ids"]
    weights = (ids != IGNORE_ID).astype(jnp.float32)
    per_token = optax.softmax_cross_entropy_with_integer_labels(mlm_logits, jnp.maximum(ids, 0))
    mlm = jnp.sum(per_token * weights) / jnp.maximum(jnp.sum(weights), 1.0)
    nsp = optax.softmax_cross_entropy_with_integer_labels(
        nsp_logits, features["next_sentence_labels"]
    )
    return mlm + jnp.mean(nsp)
