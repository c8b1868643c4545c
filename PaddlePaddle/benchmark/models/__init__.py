"""The DLPerf models in paddle.nn (ResNet-50 v1.5, BERT-base), synthetic inputs and losses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import paddle
import paddle.nn.functional as F
from paddle import nn

from driver.workloads.bert import BertShape
from PaddlePaddle.benchmark.models.bert import BertPretraining, pretraining_loss
from PaddlePaddle.benchmark.models.resnet import ResNet50

IMAGE_MODELS = ("resnet50",)

Batch = dict[str, paddle.Tensor]

__all__ = [
    "IMAGE_MODELS",
    "Batch",
    "BertPretraining",
    "ResNet50",
    "build_model",
    "synthetic_batch",
    "training_loss",
]


def build_model(name: str, options: Mapping[str, Any], data_format: str = "NCHW") -> nn.Layer:
    """The model ``name`` at the shapes in ``options`` (contract.SHAPE_OPTIONS)."""
    if name == "resnet50":
        return ResNet50(
            num_classes=int(options["num_classes"]),
            data_format=data_format,
            zero_init_residual=bool(options.get("zero_init_residual", False)),
        )
    if name == "bert":
        return BertPretraining(BertShape.from_options(options))
    raise ValueError(f"unknown model {name!r}")


def synthetic_batch(
    model: str, options: Mapping[str, Any], batch_size: int, data_format: str = "NCHW"
) -> Batch:
    """A random batch with the real inputs' shapes and dtypes, made on the current device."""
    if model in IMAGE_MODELS:
        size = int(options["image_size"])
        shape = (
            [batch_size, 3, size, size] if data_format == "NCHW" else [batch_size, size, size, 3]
        )
        return {
            "images": paddle.randn(shape, dtype="float32"),
            "labels": paddle.randint(0, int(options["num_classes"]), [batch_size], dtype="int64"),
        }
    if model == "bert":
        shape = BertShape.from_options(options)
        seq_len, vocab, predictions = shape.seq_len, shape.vocab_size, shape.predictions
        # Distinct masked positions per sequence, never the [CLS] slot 0, in increasing order.
        order = paddle.argsort(paddle.rand([batch_size, seq_len - 1]), axis=1)
        positions = paddle.sort(order[:, :predictions], axis=1) + 1
        half = seq_len // 2
        segment_ids = paddle.concat(
            [
                paddle.zeros([batch_size, half], dtype="int64"),
                paddle.ones([batch_size, seq_len - half], dtype="int64"),
            ],
            axis=1,
        )
        return {
            "input_ids": paddle.randint(0, vocab, [batch_size, seq_len], dtype="int64"),
            "segment_ids": segment_ids,
            "input_mask": paddle.ones([batch_size, seq_len], dtype="int64"),
            "masked_lm_positions": positions.astype("int64"),
            "masked_lm_ids": paddle.randint(0, vocab, [batch_size, predictions], dtype="int64"),
            "next_sentence_labels": paddle.randint(0, 2, [batch_size], dtype="int64"),
        }
    raise ValueError(f"unknown model {model!r}")


def training_loss(name: str, model: nn.Layer, batch: Batch) -> paddle.Tensor:
    """The mean loss of ``batch`` over this rank's samples (float32)."""
    if name in IMAGE_MODELS:
        logits = model(batch["images"])
        return F.cross_entropy(logits.astype("float32"), batch["labels"])
    return pretraining_loss(batch, model(batch))
