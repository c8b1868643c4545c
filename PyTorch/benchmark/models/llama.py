"""Llama 3 decoder (Meta, arXiv:2407.21783) for pre-training throughput, randomly initialised.

RMSNorm before attention and feed-forward, rotary position embeddings (theta 500,000) on the
query and key heads, grouped-query attention through ``scaled_dot_product_attention`` (causal;
flash or memory-efficient kernels where the device has them; key/value heads shared by
``heads // kv_heads`` query heads), a SwiGLU feed-forward and an output projection, untied or
tied to the token embeddings. The sizes are ``driver.workloads.llama.LLAMA_SIZES``; nothing is
downloaded. The loss is next-token cross-entropy over every position.

Activation checkpointing (``checkpointing``): ``full`` recomputes each block's forward in the
backward pass; ``selective`` keeps the outputs of attention and of every other matmul and
recomputes the rest (the other matmuls and the element-wise ops: norms, rotary, SiLU), the
op-level selection torchtitan calls selective.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

from driver.workloads.base import CHECKPOINTING
from driver.workloads.llama import LlamaShape

__all__ = ["Llama", "causal_lm_loss"]

# Selective checkpointing keeps the outputs of attention and of every other matmul of a block
# and recomputes the rest (torchtitan's op-level selection).
_ATTENTION_OPS = {
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
    torch.ops.aten._scaled_dot_product_cudnn_attention.default,
}
_MATMUL_OPS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default}


def _selective_contexts() -> tuple[object, object]:
    """Fresh contexts for one block's checkpoint: the forward and its recomputation count the
    matmuls apart, so that both keep the same ones."""
    counts = {False: 0, True: 0}

    def policy(ctx: Any, op: object, *args: object, **kwargs: object) -> CheckpointPolicy:
        if op in _ATTENTION_OPS:
            return CheckpointPolicy.MUST_SAVE
        if op in _MATMUL_OPS:
            counts[ctx.is_recompute] += 1
            if counts[ctx.is_recompute] % 2:
                return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def rotary_tables(shape: LlamaShape, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every position's rotation angles, (seq_len, head_dim / 2)."""
    half = shape.head_dim // 2
    inv_freq = 1.0 / (shape.rope_theta ** (torch.arange(0, half, dtype=torch.float32) / half))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (batch, heads, seq, head_dim) by position, the two halves as a pair (HF layout)."""
    first, second = x.float().chunk(2, dim=-1)
    rotated = torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)
    return rotated.type_as(x)


class Attention(nn.Module):
    def __init__(self, shape: LlamaShape) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = shape.heads, shape.kv_heads, shape.head_dim
        self.wq = nn.Linear(shape.dim, shape.heads * shape.head_dim, bias=False)
        self.wk = nn.Linear(shape.dim, shape.kv_heads * shape.head_dim, bias=False)
        self.wv = nn.Linear(shape.dim, shape.kv_heads * shape.head_dim, bias=False)
        self.wo = nn.Linear(shape.heads * shape.head_dim, shape.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.wq(x).view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        groups = self.heads // self.kv_heads
        if groups > 1:  # grouped-query attention: each key/value head serves `groups` queries
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    def __init__(self, shape: LlamaShape) -> None:
        super().__init__()
        self.w1 = nn.Linear(shape.dim, shape.ffn_dim, bias=False)  # gate
        self.w3 = nn.Linear(shape.dim, shape.ffn_dim, bias=False)  # up
        self.w2 = nn.Linear(shape.ffn_dim, shape.dim, bias=False)  # down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, shape: LlamaShape) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(shape.dim, eps=shape.norm_eps)
        self.attention = Attention(shape)
        self.ffn_norm = nn.RMSNorm(shape.dim, eps=shape.norm_eps)
        self.feed_forward = FeedForward(shape)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    """Token ids (batch, seq) -> logits (batch, seq, vocab)."""

    def __init__(self, shape: LlamaShape, seq_len: int, checkpointing: str = "none") -> None:
        super().__init__()
        if checkpointing not in CHECKPOINTING:
            raise ValueError(f"activation_checkpointing must be one of {CHECKPOINTING}")
        problems = shape.problems()
        if problems:
            raise ValueError("; ".join(problems))
        self.shape, self.checkpointing = shape, checkpointing
        self.tok_embeddings = nn.Embedding(shape.vocab_size, shape.dim)
        self.layers = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.norm = nn.RMSNorm(shape.dim, eps=shape.norm_eps)
        self.output = nn.Linear(shape.dim, shape.vocab_size, bias=False)
        if shape.tied_embeddings:
            self.output.weight = self.tok_embeddings.weight
        self.seq_len = seq_len
        # Not parameters and not saved: FSDP leaves buffers whole on every rank.
        half = shape.head_dim // 2  # shapes right on the meta device too (FLOP counting)
        self.register_buffer("rope_cos", torch.empty(seq_len, half), persistent=False)
        self.register_buffer("rope_sin", torch.empty(seq_len, half), persistent=False)
        self.initialize()

    def initialize(self) -> None:
        """The rotary tables and random weights, where the model has storage: a model built on
        the meta device (to be sharded before it is materialised, as a 70B model must be) calls
        this after ``to_empty``."""
        if self.tok_embeddings.weight.device.type == "meta":
            return
        cos, sin = rotary_tables(self.shape, self.seq_len)
        device = self.tok_embeddings.weight.device
        self.rope_cos, self.rope_sin = cos.to(device), sin.to(device)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal(0, 0.02) for embeddings, the residual projections scaled by depth (GPT-2)."""
        std = 0.02
        residual_std = std / math.sqrt(2 * self.shape.layers)
        for name, param in self.named_parameters():
            if param.ndim == 1:
                nn.init.ones_(param)
            elif name.endswith(("wo.weight", "w2.weight")):
                nn.init.normal_(param, std=residual_std)
            else:
                nn.init.normal_(param, std=std)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        cos, sin = self.rope_cos[:seq], self.rope_sin[:seq]
        x = self.tok_embeddings(tokens)
        for block in self.layers:
            if self.checkpointing == "full":
                x = checkpoint(block, x, cos, sin, use_reentrant=False)
            elif self.checkpointing == "selective":
                x = checkpoint(
                    block, x, cos, sin, use_reentrant=False, context_fn=_selective_contexts
                )
            else:
                x = block(x, cos, sin)
        return self.output(self.norm(x))


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy (``labels`` are the inputs shifted by one), in fp32."""
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
