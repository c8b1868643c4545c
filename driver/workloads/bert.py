"""BERT-base pre-training (masked LM and next-sentence prediction).

The scripts of PyTorch, TensorFlow, Paddle, MXNet, OneFlow and JAX each define their own layers,
but the numbers those layers are built with (BERT's depth and widths, the masked-LM batch
layout) are read from the resolved options here, once (:class:`BertShape`), so that every
framework's model has the same shape and rejects the same bad shape the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from driver.workloads.base import COUNT, SIZE, WORKLOADS, Option, Workload

# Rows of BERT's position table: the reference's 512, or more when a longer sequence needs them.
# (The parameter count of BERT-base, 110,106,428, assumes the 512 rows.)
REFERENCE_MAX_POSITION = 512


@dataclass(frozen=True)
class BertShape:
    """BERT pre-training's sizes and its masked-LM batch layout (defaults: BERT-base)."""

    vocab_size: int = 30522
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    intermediate: int = 3072
    seq_len: int = 128
    max_predictions: int = 20
    type_vocab_size: int = 2
    dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    init_std: float = 0.02

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise ValueError(
                f"bert_hidden {self.hidden} is not a multiple of bert_heads {self.heads}"
            )

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> BertShape:
        """The shape named by the resolved options (:data:`BERT_OPTIONS`)."""
        return cls(
            vocab_size=int(options["vocab_size"]),
            hidden=int(options["bert_hidden"]),
            layers=int(options["bert_layers"]),
            heads=int(options["bert_heads"]),
            intermediate=int(options["bert_intermediate"]),
            seq_len=int(options["seq_len"]),
            max_predictions=int(options["max_predictions"]),
        )

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def max_position(self) -> int:
        """Rows of a reference-sized position table that still covers ``seq_len``."""
        return max(REFERENCE_MAX_POSITION, self.seq_len)

    @property
    def predictions(self) -> int:
        """Masked positions per sequence: never the [CLS] slot, so at most ``seq_len - 1``."""
        return min(self.max_predictions, self.seq_len - 1)


BERT_OPTIONS = {
    "seq_len": Option(128, SIZE),
    "vocab_size": Option(30522, SIZE),
    "bert_layers": Option(12, SIZE),
    "bert_hidden": Option(768, SIZE),
    "bert_heads": Option(12, SIZE),
    "bert_intermediate": Option(3072, SIZE),
    "max_predictions": Option(20, COUNT),  # masked positions per sequence for the MLM head
}


@dataclass(frozen=True)
class BertWorkload(Workload):
    def shape(self, options: Mapping[str, Any]) -> BertShape:
        return BertShape.from_options(options)

    def option_problem(self, options: Mapping[str, Any]) -> str:
        if not 0 < int(options["max_predictions"]) < int(options["seq_len"]):
            return "max_predictions must be between 1 and seq_len - 1"
        return ""


BERT = WORKLOADS.add(
    "bert",
    BertWorkload(
        name="bert",
        title="BERT-base pre-training",
        options=BERT_OPTIONS,
        # ``dlperf data``'s BERT formats (driver/datasets/bert.py FORMATS), one per source.
        data_formats=(
            "bert-hdf5", "bert-tfrecord", "bert-ofrecord", "bert-gluonnlp", "bert-paddle",
            "bert-kit",
        ),  # fmt: skip
        listed=3,
        flops_at_default_shape=69_928_989_696.0,  # sequence 128, 20 masked positions
        gpu_batch={"fp32": 32, "amp": 64},  # DLPerf's fixed batches
    ),
)
