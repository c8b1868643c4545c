"""The workload plug-in: what the kit knows of one model, in one place (stdlib only).

A workload is the model a case trains. Everything about it that is not a framework's own layers
lives in its module here (``driver/workloads/<model>.py``, registered in :data:`WORKLOADS`):
the shape options it reads with their defaults and kinds, how a sample counts in tokens and
FLOPs, its table title, the data formats it reads, and which options parity hands to its bare
loop. The driver, every framework's benchmark script and a release read the same entry, so a
new model is its module here, the framework's model file and a matrix entry.

stdlib only: the benchmark scripts import it inside framework environments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from driver.registry import Registry

# The kinds of a shape option's value (the frameworks' option check turns them into types):
SIZE = "size"  # an integer > 0
COUNT = "count"  # an integer >= 0
# How a workload's FLOPs are known when it has no formula of its sizes: PyTorch's FLOP counter
# counts its model (``PyTorch/benchmark/flops.py``, at release).
COUNTED = "counted by its framework"

Model = TypeVar("Model")


@dataclass(frozen=True)
class Option:
    """A shape option: its default and the kind of value it takes (:data:`SIZE`,
    :data:`COUNT`, or the names allowed)."""

    default: Any
    kind: str | tuple[str, ...]


@dataclass(frozen=True)
class Workload:
    """One model the kit trains. Subclasses give the counts a formula of the sizes can give."""

    name: str  # the matrix's and the case id's key: "resnet50"
    title: str  # a report table's title: "ResNet-50 v1.5"
    options: Mapping[str, Option] = field(default_factory=dict)  # the shape options it reads
    # Formats of ``dlperf data`` whose output its scripts read as real data (--dataset real).
    data_formats: tuple[str, ...] = ()
    listed: int = 99  # where it stands in the kit's lists (error messages name models in order)
    framework_model: bool = True  # False: the calibration workload, a script of its own
    # Frameworks that train it beyond those whose plug-in lists it: a new model names here the
    # frameworks it has a model file in, and their plug-ins stay as they are.
    frameworks: tuple[str, ...] = ()
    image_size: int | None = None  # an image model's default input side
    optimizer: str = "adamw"  # the training default (image models: sgd with momentum)
    grad_clip: float = 1.0  # the default max gradient norm (image models: 0, off)
    # Options a case's matrix entry is planned with where it names none (the estimate).
    planned_options: Mapping[str, Any] = field(default_factory=dict)
    # Parity: header options its bare loop is not handed (other models' shape options, options
    # it does not use), and options handed although parity's NOT_HANDED lists them.
    parity_not_handed: tuple[str, ...] = ()
    parity_handed: tuple[str, ...] = ()
    flops_source: str = COUNTED  # a formula's words, COUNTED, or "" (no FLOPs: calibration)
    # A COUNTED workload's training FLOPs per sample at its default shape, as PyTorch's FLOP
    # counter counts them (torch 2.13, ``PyTorch/benchmark/flops.py``): a session's table shows
    # MFU with no torch in the driver; tests/test_mfu.py recounts it. A release counts its own.
    flops_at_default_shape: float | None = None

    def shape(self, options: Mapping[str, Any]) -> Any:
        """The sizes its layers are built with, read from the resolved options (a ValueError
        names what makes them unbuildable); None for a workload without layers."""
        return None

    def tokens_per_sample(self, options: Mapping[str, Any]) -> int | None:
        """Tokens in one sample (a sequence's length); None for models whose samples are not
        token sequences."""
        return None

    def flops_per_sample(self, options: Mapping[str, Any]) -> float | None:
        """Training (forward + backward) FLOPs of one sample by the formula of its sizes; None
        where they are :data:`COUNTED` or the options name no buildable shape."""
        return None

    def counted_flops_per_sample(self, options: Mapping[str, Any]) -> float | None:
        """:attr:`flops_at_default_shape` where the resolved ``options`` give this model its
        default shape (every shape option it reads at its default); None elsewhere."""
        if self.flops_at_default_shape is None:
            return None
        for key, option in self.options.items():
            default = self.image_size if key == "image_size" else option.default
            value = options.get(key)  # None: the model's own (an image model's side)
            if value is not None and value != default:
                return None
        return self.flops_at_default_shape

    def parameters(self, options: Mapping[str, Any]) -> int | None:
        """Its parameter count by formula; None where counted from the built model."""
        return None

    def option_problem(self, options: Mapping[str, Any]) -> str:
        """What makes the resolved options unusable for this model ("" when nothing does)."""
        return ""

    @property
    def counted(self) -> bool:
        """Its FLOPs are counted by its framework from the built model, not by a formula."""
        return self.flops_source == COUNTED

    @property
    def has_formula(self) -> bool:
        """Its FLOPs are :meth:`flops_per_sample`'s formula of its sizes (no framework needed)."""
        return self.flops_source not in (COUNTED, "")


WORKLOADS: Registry[Workload] = Registry("workload")


def load_workloads() -> Registry[Workload]:
    """:data:`WORKLOADS` with every module of ``driver/workloads/`` registered."""
    from driver import plugins

    plugins.load("workloads")
    return WORKLOADS


def find_workload(model: str) -> Workload | None:
    """The workload of ``model``; None for a name no module registers."""
    workloads = load_workloads()
    return workloads.get(model) if model in workloads else None


def in_order() -> list[Workload]:
    """Every workload in the kit's order (:attr:`Workload.listed`, then name)."""
    workloads = load_workloads()
    return sorted((workloads.get(name) for name in workloads), key=lambda w: (w.listed, w.name))


def framework_models() -> tuple[str, ...]:
    """The models the frameworks' scripts build, in the kit's order."""
    return tuple(w.name for w in in_order() if w.framework_model)


def shape_options() -> dict[str, Any]:
    """Every shape option a framework script reads, with its default (the first workload in
    the kit's order to declare an option gives its default)."""
    merged: dict[str, Any] = {}
    for workload in in_order():
        for name, option in workload.options.items():
            merged.setdefault(name, option.default)
    return merged


def shape_option_kinds() -> dict[str, str | tuple[str, ...]]:
    """Every shape option's kind (see :class:`Option`)."""
    kinds: dict[str, str | tuple[str, ...]] = {}
    for workload in in_order():
        for name, option in workload.options.items():
            kinds.setdefault(name, option.kind)
    return kinds


def default_image_size(model: str) -> int | None:
    """An image model's default input side; None for the others."""
    workload = find_workload(model)
    return None if workload is None else workload.image_size


def model_title(model: str) -> str:
    """A model's table title; an unknown model by its key."""
    workload = find_workload(model)
    return model if workload is None else workload.title


def build_registered(
    builders: Mapping[str, Callable[[Mapping[str, Any]], Model]],
    name: str,
    options: Mapping[str, Any],
) -> Model:
    """``builders[name](options)``; an unknown name is a ValueError that lists the known ones."""
    if name not in builders:
        raise ValueError(f"unknown model {name!r} (this framework has: {', '.join(builders)})")
    return builders[name](options)
