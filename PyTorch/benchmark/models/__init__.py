"""The DLPerf models (and Llama 3), built from the shared shape options, and their training losses.

Every model's training step consumes a batch dict (see ``PyTorch.benchmark.data``): images take
``images``/``labels``; BERT takes the pre-training features of NVIDIA's shard format; Llama
``tokens``/``labels`` (the tokens shifted by one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from driver.workloads.base import build_registered
from driver.workloads.bert import BertShape
from driver.workloads.images import ImageShape
from driver.workloads.llama import llama_shape
from PyTorch.benchmark.models.bert import BertForPreTraining, pretraining_loss
from PyTorch.benchmark.models.inception import Inception3, inception_v3
from PyTorch.benchmark.models.llama import Llama, causal_lm_loss
from PyTorch.benchmark.models.resnet import ResNet, resnet50

IMAGE_MODELS = ("resnet50", "inception3")
AUX_LOSS_WEIGHT = 0.4  # Inception v3's auxiliary classifier weight (Szegedy et al.)

Batch = dict[str, torch.Tensor]

__all__ = [
    "IMAGE_MODELS",
    "Batch",
    "BertForPreTraining",
    "Inception3",
    "Llama",
    "ResNet",
    "build_model",
    "count_parameters",
    "training_loss",
]


def _resnet50(options: Mapping[str, Any]) -> nn.Module:
    image = ImageShape.from_options(options)
    return resnet50(num_classes=image.num_classes, zero_init_residual=image.zero_init_residual)


def _inception3(options: Mapping[str, Any]) -> nn.Module:
    image = ImageShape.from_options(options)
    return inception_v3(num_classes=image.num_classes, aux_logits=image.aux_logits)


def _llama(options: Mapping[str, Any]) -> nn.Module:
    checkpointing = str(options.get("activation_checkpointing", "none"))
    return Llama(llama_shape(options), int(options["seq_len"]), checkpointing)


BUILDERS = {
    "resnet50": _resnet50,
    "inception3": _inception3,
    "bert": lambda options: BertForPreTraining(BertShape.from_options(options)),
    "llama": _llama,
}


def build_model(name: str, options: Mapping[str, Any]) -> nn.Module:
    """The model ``name`` at the shapes in ``options`` (contract.SHAPE_OPTIONS and friends)."""
    return build_registered(BUILDERS, name, options)


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of parameters; tied weights (BERT's decoder) count once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def training_loss(name: str, model: nn.Module, batch: Batch) -> torch.Tensor:
    """Forward pass and loss of one training step (run under autocast by the caller)."""
    if name in IMAGE_MODELS:
        output = model(batch["images"])
        if isinstance(output, tuple):  # Inception v3 with its auxiliary head, in training
            logits, aux = output
            return F.cross_entropy(logits, batch["labels"]) + AUX_LOSS_WEIGHT * F.cross_entropy(
                aux, batch["labels"]
            )
        return F.cross_entropy(output, batch["labels"])
    if name == "bert":
        mlm_logits, nsp_logits = model(
            batch["input_ids"],
            batch["segment_ids"],
            batch["input_mask"],
            batch["masked_lm_positions"],
        )
        return pretraining_loss(
            mlm_logits, nsp_logits, batch["masked_lm_ids"], batch["next_sentence_labels"]
        )
    if name == "llama":
        return causal_lm_loss(model(batch["tokens"]), batch["labels"])
    raise ValueError(f"unknown model {name!r}")
