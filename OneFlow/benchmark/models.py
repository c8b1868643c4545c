"""OneFlow models of the benchmark: ResNet-50 v1.5 and BERT pre-training, written out.

``oneflow.nn`` mirrors ``torch.nn``, so these follow the kit's PyTorch definitions layer for layer
(same shapes, initialisation and parameter counts: 25,557,032 and 110,106,428 at full size).
Where oneflow 0.9.0 lacks a PyTorch function (``scaled_dot_product_attention``), the
computation is spelled out. Each model's ``forward`` returns the training loss and the logits,
so the same module serves eager mode and ``nn.Graph``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import oneflow as flow
import oneflow.nn.functional as F
from oneflow import nn

from driver.bench.shapes import BertShape, ImageShape, build_registered
from PyTorch.benchmark.torchlike import resnet_classes

IMAGE_MODELS = ("resnet50",)

# --------------------------------------------------------------------------------------------
# ResNet-50 v1.5


# The network is the PyTorch benchmark's own definition, built on oneflow.nn (the same layers,
# shapes and initialisation: one definition, no copy to drift).
Bottleneck, ResNet = resnet_classes(flow)


class ImageClassifierLoss(nn.Module):
    """Model + cross entropy: ``forward(images, labels) -> (loss, logits)``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: flow.Tensor, labels: flow.Tensor) -> tuple[flow.Tensor, flow.Tensor]:
        logits = self.model(images)
        return F.cross_entropy(logits.float(), labels), logits


# --------------------------------------------------------------------------------------------
# BERT pre-training


class BertEmbeddings(nn.Module):
    def __init__(self, config: BertShape) -> None:
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.hidden)
        self.position = nn.Embedding(config.max_position, config.hidden)
        self.token_type = nn.Embedding(config.type_vocab_size, config.hidden)
        self.norm = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, input_ids: flow.Tensor, segment_ids: flow.Tensor) -> flow.Tensor:
        # The position row block is sliced from the table (no arange: a global tensor would
        # need a placement of its own in nn.Graph).
        positions = self.position.weight[: input_ids.shape[1]].unsqueeze(0)
        x = self.word(input_ids) + positions + self.token_type(segment_ids)
        return self.dropout(self.norm(x))


class BertLayer(nn.Module):
    """Post-LayerNorm transformer block, as in the original BERT."""

    def __init__(self, config: BertShape) -> None:
        super().__init__()
        self.heads = config.heads
        self.scale = 1.0 / math.sqrt(config.hidden // config.heads)
        self.qkv = nn.Linear(config.hidden, 3 * config.hidden)
        self.attn_out = nn.Linear(config.hidden, config.hidden)
        self.attn_norm = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.hidden, config.intermediate)
        self.output = nn.Linear(config.intermediate, config.hidden)
        self.out_norm = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)
        self.attn_dropout = nn.Dropout(config.dropout)

    def forward(self, x: flow.Tensor, mask_bias: flow.Tensor) -> flow.Tensor:
        batch, seq, hidden = x.shape
        # [B, S, 3H] -> 3 x [B, heads, S, head_dim]
        qkv = self.qkv(x).reshape(batch, seq, 3, self.heads, hidden // self.heads)
        qkv = qkv.permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = flow.matmul(q * self.scale, k.transpose(-1, -2)) + mask_bias
        probs = self.attn_dropout(F.softmax(scores, dim=-1))
        context = flow.matmul(probs, v).transpose(1, 2).reshape(batch, seq, hidden)
        x = self.attn_norm(x + self.dropout(self.attn_out(context)))
        y = self.output(F.gelu(self.intermediate(x)))
        return self.out_norm(x + self.dropout(y))


class BertPretrainingLoss(nn.Module):
    """BERT + masked-LM and next-sentence heads + their loss: ``forward(...) -> (loss, logits)``.

    The MLM head transforms only the gathered masked positions, and its decoder shares the
    word-embedding matrix (weight tying), as the reference does.
    """

    def __init__(self, config: BertShape) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList([BertLayer(config) for _ in range(config.layers)])
        self.pooler = nn.Linear(config.hidden, config.hidden)
        self.nsp = nn.Linear(config.hidden, 2)
        self.mlm_transform = nn.Linear(config.hidden, config.hidden)
        self.mlm_norm = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
        self.mlm_bias = nn.Parameter(flow.zeros(config.vocab_size))
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=self.config.init_std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(
        self,
        input_ids: flow.Tensor,
        segment_ids: flow.Tensor,
        input_mask: flow.Tensor,
        masked_lm_positions: flow.Tensor,
        masked_lm_ids: flow.Tensor,
        next_sentence_labels: flow.Tensor,
    ) -> tuple[flow.Tensor, flow.Tensor]:
        # Additive mask over the keys, broadcast over heads and queries: [B, 1, 1, S].
        mask_bias = ((1.0 - input_mask.to(flow.float32)) * -10000.0).unsqueeze(1).unsqueeze(2)
        x = self.embeddings(input_ids, segment_ids)
        for layer in self.layers:
            x = layer(x, mask_bias)
        nsp_logits = self.nsp(flow.tanh(self.pooler(x[:, 0])))
        # Gather the masked positions first: the vocabulary projection is the head's big matmul.
        index = masked_lm_positions.unsqueeze(-1).expand(-1, -1, x.shape[-1])
        masked = flow.gather(x, 1, index)
        masked = self.mlm_norm(F.gelu(self.mlm_transform(masked)))
        mlm_logits = flow.matmul(masked, self.embeddings.word.weight, transpose_b=True)
        mlm_logits = mlm_logits + self.mlm_bias
        mlm = F.cross_entropy(
            mlm_logits.reshape(-1, mlm_logits.shape[-1]).float(), masked_lm_ids.reshape(-1)
        )
        nsp = F.cross_entropy(nsp_logits.float(), next_sentence_labels)
        return mlm + nsp, mlm_logits


# --------------------------------------------------------------------------------------------


def _resnet50(options: Mapping[str, Any]) -> nn.Module:
    image = ImageShape.from_options(options)
    return ImageClassifierLoss(
        ResNet(num_classes=image.num_classes, zero_init_residual=image.zero_init_residual)
    )


BUILDERS = {
    "resnet50": _resnet50,
    "bert": lambda options: BertPretrainingLoss(BertShape.from_options(options)),
}


def build_training_model(name: str, options: Mapping[str, Any]) -> nn.Module:
    """The model ``name`` with its loss, at the shapes in ``options``."""
    return build_registered(BUILDERS, name, options)


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters; the tied decoder weight counts once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
