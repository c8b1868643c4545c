"""Gluon models of the MXNet benchmark: ResNet-50 v1.5 and BERT pre-training, written out.

The Gluon model zoo of MXNet 1.9.1 has ResNet-50 v1 and v2 but not v1.5 (the variant DLPerf
and NVIDIA measure), and BERT lives in GluonNLP, which is not maintained for MXNet 1.9 and
Python 3.11; so both are our own HybridBlocks, written to match the PyTorch definitions of the
kit (same layer shapes and parameter counts: 25,557,032 and 110,106,428 at full size).

Every input channel count is given up front (``in_channels``/``in_units``), so parameters are
allocated at ``initialize()`` rather than deferred to the first forward pass; the parameter
count is then known before training starts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import mxnet as mx
from mxnet.gluon import HybridBlock, nn

from driver.workloads.base import build_registered
from driver.workloads.bert import BertShape
from driver.workloads.images import ImageShape

IMAGE_MODELS = ("resnet50",)
# Kaiming-normal, fan-out, for ReLU networks (as torchvision and NVIDIA initialise ResNet).
CONV_INIT = mx.init.Xavier(rnd_type="gaussian", factor_type="out", magnitude=2)

# --------------------------------------------------------------------------------------------
# ResNet-50 v1.5


class Bottleneck(HybridBlock):
    """1x1 -> 3x3 -> 1x1 with a residual; v1.5 puts the stride on the 3x3 convolution."""

    expansion = 4

    def __init__(
        self, in_channels: int, width: int, stride: int, zero_init_residual: bool, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        out_channels = width * self.expansion
        with self.name_scope():
            self.body = nn.HybridSequential(prefix="")
            self.body.add(
                nn.Conv2D(width, 1, use_bias=False, in_channels=in_channels),
                nn.BatchNorm(in_channels=width),
                nn.Activation("relu"),
                # v1.5: the stride sits here, not on the first 1x1 (as in v1).
                nn.Conv2D(width, 3, strides=stride, padding=1, use_bias=False, in_channels=width),
                nn.BatchNorm(in_channels=width),
                nn.Activation("relu"),
                nn.Conv2D(out_channels, 1, use_bias=False, in_channels=width),
                # zero gamma: each residual branch starts as identity (Goyal et al.).
                nn.BatchNorm(
                    in_channels=out_channels,
                    gamma_initializer="zeros" if zero_init_residual else "ones",
                ),
            )
            self.downsample: nn.HybridSequential | None = None
            if stride != 1 or in_channels != out_channels:
                self.downsample = nn.HybridSequential(prefix="")
                self.downsample.add(
                    nn.Conv2D(
                        out_channels, 1, strides=stride, use_bias=False, in_channels=in_channels
                    ),
                    nn.BatchNorm(in_channels=out_channels),
                )

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        residual = x if self.downsample is None else self.downsample(x)
        return F.Activation(self.body(x) + residual, act_type="relu")


class ResNet50V15(HybridBlock):
    def __init__(
        self,
        num_classes: int = 1000,
        layers: tuple[int, ...] = (3, 4, 6, 3),
        zero_init_residual: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        with self.name_scope():
            self.features = nn.HybridSequential(prefix="")
            self.features.add(
                nn.Conv2D(64, 7, strides=2, padding=3, use_bias=False, in_channels=3),
                nn.BatchNorm(in_channels=64),
                nn.Activation("relu"),
                nn.MaxPool2D(pool_size=3, strides=2, padding=1),
            )
            in_channels = 64
            for stage, blocks in enumerate(layers):
                width = 64 * 2**stage  # 64, 128, 256, 512
                for index in range(blocks):
                    stride = 2 if stage > 0 and index == 0 else 1
                    self.features.add(Bottleneck(in_channels, width, stride, zero_init_residual))
                    in_channels = width * Bottleneck.expansion
            self.features.add(nn.GlobalAvgPool2D(), nn.Flatten())
            self.output = nn.Dense(num_classes, in_units=in_channels)

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return self.output(self.features(x))


class ImageClassifierLoss(HybridBlock):
    """Model + softmax cross entropy in one hybridized graph; returns (mean loss, logits)."""

    def __init__(self, model: HybridBlock, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        with self.name_scope():
            self.model = model

    def hybrid_forward(self, F: Any, images: Any, labels: Any) -> tuple[Any, Any]:
        logits = self.model(images)
        # log_softmax is on AMP's fp32 list: the loss is computed in fp32 under bf16/fp16 AMP.
        log_probs = F.log_softmax(logits, axis=-1)
        loss = -F.pick(log_probs, labels, axis=-1)
        return F.mean(loss), logits


# --------------------------------------------------------------------------------------------
# BERT pre-training


class BertLayer(HybridBlock):
    """Post-LayerNorm transformer block, as in the original BERT; Q, K, V from one projection."""

    def __init__(self, config: BertShape, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.heads = config.heads
        self.scale = 1.0 / math.sqrt(config.hidden // config.heads)
        init = mx.init.Normal(config.init_std)
        hidden, eps = config.hidden, config.layer_norm_eps
        with self.name_scope():
            self.qkv = nn.Dense(3 * hidden, flatten=False, in_units=hidden, weight_initializer=init)
            self.attn_out = nn.Dense(
                hidden, flatten=False, in_units=hidden, weight_initializer=init
            )
            self.attn_norm = nn.LayerNorm(epsilon=eps, in_channels=hidden)
            self.intermediate = nn.Dense(
                config.intermediate, flatten=False, in_units=hidden, weight_initializer=init
            )
            self.gelu = nn.GELU()
            self.output = nn.Dense(
                hidden, flatten=False, in_units=config.intermediate, weight_initializer=init
            )
            self.out_norm = nn.LayerNorm(epsilon=eps, in_channels=hidden)
            self.dropout = nn.Dropout(config.dropout)
            self.attn_dropout = nn.Dropout(config.dropout)

    def hybrid_forward(self, F: Any, x: Any, mask_bias: Any) -> Any:
        # x: [B, S, H]; mask_bias: [B*heads, 1, S], 0 where a key may be attended, else -1e4.
        qkv = F.reshape(self.qkv(x), shape=(0, 0, 3, self.heads, -1))  # [B, S, 3, h, d]
        qkv = F.transpose(qkv, axes=(2, 0, 3, 1, 4))  # [3, B, h, S, d]
        qkv = F.reshape(qkv, shape=(0, -3, 0, 0))  # [3, B*h, S, d]
        q, k, v = F.split(qkv, num_outputs=3, axis=0, squeeze_axis=True)
        scores = F.batch_dot(q * self.scale, k, transpose_b=True)  # [B*h, S, S]
        scores = F.broadcast_add(scores, mask_bias)
        probs = self.attn_dropout(F.softmax(scores, axis=-1))
        context = F.batch_dot(probs, v)  # [B*h, S, d]
        context = F.reshape(context, shape=(-4, -1, self.heads, 0, 0))  # [B, h, S, d]
        context = F.reshape(F.transpose(context, axes=(0, 2, 1, 3)), shape=(0, 0, -3))
        x = self.attn_norm(x + self.dropout(self.attn_out(context)))
        y = self.output(self.gelu(self.intermediate(x)))
        return self.out_norm(x + self.dropout(y))


class BertPretrainingLoss(HybridBlock):
    """BERT with its masked-LM and next-sentence heads and their loss, one hybridized graph.

    The MLM head transforms only the ``max_predictions`` gathered masked positions, and its
    decoder shares the word-embedding matrix (weight tying), as the reference does. Inputs:
    input_ids, segment_ids, input_mask [B, S]; masked_lm_positions, masked_lm_ids [B, P];
    next_sentence_labels [B]. Returns (mean MLM loss + mean NSP loss, MLM logits).
    """

    def __init__(self, config: BertShape, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config = config
        init = mx.init.Normal(config.init_std)
        hidden = config.hidden
        with self.name_scope():
            # Owned here (not by an nn.Embedding) so the decoder can use the same Parameter.
            self.word_weight = self.params.get(
                "word_embed_weight", shape=(config.vocab_size, hidden), init=init
            )
            self.position_weight = self.params.get(
                "position_embed_weight", shape=(config.max_position, hidden), init=init
            )
            self.token_type = nn.Embedding(config.type_vocab_size, hidden, weight_initializer=init)
            self.embed_norm = nn.LayerNorm(epsilon=config.layer_norm_eps, in_channels=hidden)
            self.embed_dropout = nn.Dropout(config.dropout)
            self.layers = nn.HybridSequential(prefix="")
            for _ in range(config.layers):
                self.layers.add(BertLayer(config))
            self.pooler = nn.Dense(
                hidden, flatten=False, in_units=hidden, activation="tanh", weight_initializer=init
            )
            self.nsp = nn.Dense(2, flatten=False, in_units=hidden, weight_initializer=init)
            self.mlm_transform = nn.Dense(
                hidden, flatten=False, in_units=hidden, weight_initializer=init
            )
            self.mlm_gelu = nn.GELU()
            self.mlm_norm = nn.LayerNorm(epsilon=config.layer_norm_eps, in_channels=hidden)
            self.mlm_bias = self.params.get("mlm_bias", shape=(config.vocab_size,), init="zeros")

    def hybrid_forward(
        self,
        F: Any,
        input_ids: Any,
        segment_ids: Any,
        input_mask: Any,
        masked_lm_positions: Any,
        masked_lm_ids: Any,
        next_sentence_labels: Any,
        word_weight: Any,
        position_weight: Any,
        mlm_bias: Any,
    ) -> tuple[Any, Any]:
        config = self.config
        seq_len = config.seq_len
        words = F.Embedding(
            input_ids, word_weight, input_dim=config.vocab_size, output_dim=config.hidden
        )
        positions = F.slice_axis(position_weight, axis=0, begin=0, end=seq_len)  # [S, H]
        x = F.broadcast_add(words, F.expand_dims(positions, axis=0)) + self.token_type(segment_ids)
        x = self.embed_dropout(self.embed_norm(x))
        # Additive attention mask, one row per (sequence, head): [B*h, 1, S].
        mask_bias = (1.0 - F.cast(input_mask, dtype="float32")) * -10000.0
        mask_bias = F.broadcast_axis(F.reshape(mask_bias, shape=(0, 1, 1, -1)), axis=1,
                                     size=config.heads)  # fmt: skip
        mask_bias = F.reshape(mask_bias, shape=(-3, 0, 0))
        for layer in self.layers:
            x = layer(x, mask_bias)

        first = F.squeeze(F.slice_axis(x, axis=1, begin=0, end=1), axis=1)  # [B, H] ([CLS])
        nsp_logits = self.nsp(self.pooler(first))
        # Gather the masked positions of the flattened [B*S, H] sequence output.
        offsets = F.contrib.arange_like(masked_lm_positions, axis=0) * seq_len  # [B]
        flat_index = F.broadcast_add(masked_lm_positions, F.reshape(offsets, shape=(-1, 1)))
        masked = F.take(F.reshape(x, shape=(-3, 0)), F.reshape(flat_index, shape=(-1,)))
        masked = self.mlm_norm(self.mlm_gelu(self.mlm_transform(masked)))  # [B*P, H]
        mlm_logits = F.FullyConnected(
            masked, word_weight, mlm_bias, num_hidden=config.vocab_size, flatten=False
        )
        mlm_loss = -F.pick(F.log_softmax(mlm_logits, axis=-1), F.reshape(masked_lm_ids,
                           shape=(-1,)), axis=-1)  # fmt: skip
        nsp_loss = -F.pick(F.log_softmax(nsp_logits, axis=-1), next_sentence_labels, axis=-1)
        return F.mean(mlm_loss) + F.mean(nsp_loss), mlm_logits


# --------------------------------------------------------------------------------------------


def _resnet50(options: Mapping[str, Any]) -> HybridBlock:
    image = ImageShape.from_options(options)
    return ImageClassifierLoss(
        ResNet50V15(num_classes=image.num_classes, zero_init_residual=image.zero_init_residual)
    )


BUILDERS = {
    "resnet50": _resnet50,
    "bert": lambda options: BertPretrainingLoss(BertShape.from_options(options)),
}


def build_training_net(model: str, options: Mapping[str, Any]) -> HybridBlock:
    """The model with its loss: ``net(*inputs) -> (loss, logits)``."""
    return build_registered(BUILDERS, model, options)


def initialize(net: HybridBlock, ctx: mx.Context) -> None:
    """Kaiming for the ResNet convolutions, the blocks' own initialisers everywhere else."""
    for name, param in net.collect_params().items():
        if name.endswith("weight") and len(param.shape) == 4:
            param.initialize(CONV_INIT, ctx=ctx)
        else:
            param.initialize(ctx=ctx)


def count_parameters(net: HybridBlock) -> int:
    """Trainable parameters (BatchNorm running statistics excluded)."""
    return sum(
        int(math.prod(p.shape)) for p in net.collect_params().values() if p.grad_req != "null"
    )
