"""What the image classifiers share: their shape options and the knobs their layers read
(registers no workload of its own)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from driver.workloads.base import SIZE, WORKLOADS, Option, Workload

IMAGE_OPTIONS = {
    "image_size": Option(None, SIZE),  # None: the model's own (Workload.image_size)
    "num_classes": Option(1000, SIZE),
}
# ``dlperf data`` formats of ImageNet the frameworks' scripts read.
IMAGE_FORMATS = ("raw", "tfrecord", "recordio", "ofrecord", "paddle-lists", "dali-index")
# Header options of the sequence models, which an image model's bare loop is not handed.
SEQUENCE_KEYS = (
    "seq_len", "vocab_size", "bert_layers", "bert_hidden", "bert_heads", "bert_intermediate",
    "max_predictions", "llama_size", "activation_checkpointing",
)  # fmt: skip


@dataclass(frozen=True)
class ImageShape:
    """An image classifier's knobs from the resolved options."""

    num_classes: int
    zero_init_residual: bool = False
    aux_logits: bool = False

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> ImageShape:
        return cls(
            num_classes=int(options["num_classes"]),
            zero_init_residual=bool(options.get("zero_init_residual", False)),
            aux_logits=bool(options.get("aux_logits", False)),
        )


@dataclass(frozen=True)
class ImageWorkload(Workload):
    def shape(self, options: Mapping[str, Any]) -> ImageShape:
        return ImageShape.from_options(options)


def image_workload(name: str, title: str, listed: int, image_size: int, **more: Any) -> Workload:
    """An image classifier's workload, registered: ImageNet's options and formats, trained with
    SGD and momentum, no gradient clipping."""
    workload = ImageWorkload(
        name=name, title=title, options=IMAGE_OPTIONS, data_formats=IMAGE_FORMATS, listed=listed,
        image_size=image_size, optimizer="sgd", grad_clip=0.0, **more,
    )  # fmt: skip
    return WORKLOADS.add(name, workload)
