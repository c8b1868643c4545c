"""OneFlow models of the benchmark: ResNet-50 v1.5 and BERT pre-training, with their losses.

``oneflow.nn`` mirrors ``torch.nn``, so both networks are the kit's PyTorch definitions
(``PyTorch.benchmark.torchlike``) built on oneflow: the same layers, shapes, initialisation and
parameter counts (25,557,032 and 110,106,428 at full size). Where oneflow 0.9.0 lacks a PyTorch
function (``scaled_dot_product_attention``), the computation is spelled out here. Each training
model's ``forward`` returns the loss and the logits, so one module serves eager mode and
``nn.Graph``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import oneflow as flow
import oneflow.nn.functional as F
from oneflow import nn

from driver.workloads.base import build_registered
from driver.workloads.bert import BertShape
from driver.workloads.images import ImageShape
from PyTorch.benchmark.torchlike import bert_classes, resnet_classes

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


def scaled_dot_product_attention(
    q: flow.Tensor, k: flow.Tensor, v: flow.Tensor, attn_mask: flow.Tensor, dropout_p: float
) -> flow.Tensor:
    """torch's ``scaled_dot_product_attention`` for a boolean key mask, which oneflow 0.9 lacks."""
    scores = flow.matmul(q * (1.0 / math.sqrt(q.shape[-1])), k.transpose(-1, -2))
    # Masked keys get a large negative additive bias before the softmax.
    scores = scores + (1.0 - attn_mask.to(flow.float32)) * -10000.0
    probs = F.dropout(F.softmax(scores, dim=-1), p=dropout_p, training=dropout_p > 0)
    return flow.matmul(probs, v)


# The network is the PyTorch benchmark's own definition, built on oneflow.nn.
BertForPreTraining, pretraining_loss = bert_classes(flow, scaled_dot_product_attention)


class BertPretrainingLoss(nn.Module):
    """BERT with its heads and their loss: ``forward(*features) -> (loss, mlm_logits)``."""

    def __init__(self, shape: BertShape) -> None:
        super().__init__()
        self.bert = BertForPreTraining(shape)

    def forward(
        self,
        input_ids: flow.Tensor,
        segment_ids: flow.Tensor,
        input_mask: flow.Tensor,
        masked_lm_positions: flow.Tensor,
        masked_lm_ids: flow.Tensor,
        next_sentence_labels: flow.Tensor,
    ) -> tuple[flow.Tensor, flow.Tensor]:
        mlm_logits, nsp_logits = self.bert(input_ids, segment_ids, input_mask, masked_lm_positions)
        loss = pretraining_loss(mlm_logits, nsp_logits, masked_lm_ids, next_sentence_labels)
        return loss, mlm_logits


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
