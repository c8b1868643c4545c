"""Model shapes every framework's benchmark builds from the same options (stdlib only).

The scripts of PyTorch, TensorFlow, Paddle, MXNet and OneFlow each define their own layers, but
the numbers those layers are built with (BERT's depth and widths, the masked-LM batch layout, an
image model's classes) are one concept: they are read from the resolved options here, once, so
that every framework's model has the same shape and rejects the same bad shape the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

# Rows of BERT's position table: the reference's 512, or more when a longer sequence needs them.
# (The parameter count of BERT-base, 110,106,428, assumes the 512 rows.)
REFERENCE_MAX_POSITION = 512

Model = TypeVar("Model")


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
        """The shape named by the resolved options (``contract.SHAPE_OPTIONS``' BERT keys)."""
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


def build_registered(
    builders: Mapping[str, Callable[[Mapping[str, Any]], Model]],
    name: str,
    options: Mapping[str, Any],
) -> Model:
    """``builders[name](options)``; an unknown name is a ValueError that lists the known ones."""
    if name not in builders:
        raise ValueError(f"unknown model {name!r} (this framework has: {', '.join(builders)})")
    return builders[name](options)
