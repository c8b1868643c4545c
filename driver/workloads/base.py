"""The workload plug-in: what the kit knows of one model, in one place (stdlib only).

A workload is the model a case trains. Everything about it that is not a framework's own layers
lives in its module here (``driver/workloads/<model>.py``, registered in :data:`WORKLOADS`):
the shape options it reads with their defaults and kinds, how a sample counts in tokens and
FLOPs, its table title, the data formats it reads, which options parity hands to its bare
loop, and what plans and tables ask of a model (the shape a figure holds for, where a batch
search starts, its memory and start-up on a GPU, its scaling baseline, its MFU note). The
driver, every framework's benchmark script and a release read the same entry and name no
model, so a new model is its module here, the framework's model file and a matrix entry.

The parallelism options every case takes (:func:`check_case_options`) are checked here too:
which parallelism a model may take is its workload's answer (:attr:`Workload.shards`).

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
PARALLELISMS = ("auto", "none", "ddp", "fsdp", "hsdp")
CHECKPOINTING = ("none", "selective", "full")


class WorkloadOptionError(ValueError):
    """An option a case's model or parallelism cannot take; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class MemoryPlan:
    """What one device holds of a case by a planning estimate: not a measurement, and no
    substitute for ``batch_size: max``'s search, which starts near it."""

    state: float  # bytes of training state (weights, gradients, optimizer moments) a device holds
    per_sample: float  # bytes of activations one sample keeps
    shards: int  # over how many devices the training state is sharded
    usable: float  # the share of a device's memory a plan counts on (allocator, CUDA context)

    def largest_batch(self, device_bytes: float) -> int:
        """The largest per-device batch that fits ``device_bytes`` (0 where not even one sample
        does; the training state alone may not)."""
        room = device_bytes * self.usable - self.state
        return max(0, int(room // self.per_sample))


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
    # What a release's README says of its MFU cells beyond the common note ("" nothing).
    flops_note: str = ""
    # DLPerf's fixed batch per precision: where a ``batch_size: max`` search starts on a GPU (a
    # GPU fits it, and each probe saved is a process start); none: the search's own start.
    gpu_batch: Mapping[str, int] = field(default_factory=dict)
    # Probes a search takes that starts a few samples under its end (an LLM at a long
    # sequence: one doubling that fails, a bisection or two), planned at its GPU batch; None:
    # the kit's search from 16, doubling then bisecting.
    search_probes: int | None = None
    # Its layers are built for sharded parameters (FSDP, HSDP: what ``auto`` picks on several
    # ranks) and activation checkpointing; the other models train replicated (DDP).
    shards: bool = False
    # A series with no 1n1g case scales against its smallest topology measured (a model that
    # does not fit one device); False: DLPerf's speedup against 1n1g only.
    scales_from_smallest_topology: bool = False
    sample_name: str = "sample"  # what one sample is called in a plan's memory notes

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

    def check_options(self, options: Mapping[str, Any]) -> None:
        """A case's shape options checked before anything runs (unresolved: a matrix entry's or
        the command line's): a :class:`WorkloadOptionError` names the field its layers cannot
        be built with."""

    def flops_by_count(
        self, options: Mapping[str, Any], count: str | None = None
    ) -> tuple[float | None, str]:
        """(FLOPs of one sample, the words of the count that gave them) by the count ``count``
        names where the workload has that count (a release names its count in its manifest,
        and an audit recomputes a version by its own), else by :attr:`flops_source`'s."""
        return self.flops_per_sample(options), self.flops_source

    def figure_shape(self, options: Mapping[str, Any]) -> str:
        """What a figure of this model must share with a case beyond model and precision to
        time it (an LLM's size and sequence length: a 1B figure says nothing of 8B); "" where
        every figure of the model does."""
        return ""

    def search_start(self, precision: str) -> int | None:
        """Where a ``batch_size: max`` search of this model starts on a GPU (:attr:`gpu_batch`);
        None: the search's own start."""
        return self.gpu_batch.get(precision)

    def gpu_startup(self, options: Mapping[str, Any]) -> tuple[float, str] | None:
        """(seconds a repeat's start is assumed to take on a GPU, for what, in words) where the
        model's start-up is its own (an LLM's by size); None: the kit's GPU assumption."""
        return None

    def memory(
        self, options: Mapping[str, Any], ranks: int, ranks_per_node: int
    ) -> MemoryPlan | None:
        """What a device holds of a case of ``options`` on ``ranks`` ranks, ``ranks_per_node``
        a node, by a planning estimate; None where the workload has none (nothing is then
        sized or left out by memory). A bad option is a :class:`WorkloadOptionError`."""
        return None

    def resident_samples(self, options: Mapping[str, Any], batch: int) -> float:
        """Samples whose activations a device holds at once at per-device ``batch``."""
        return float(batch)

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


# --- the parallelism options every case takes -----------------------------------------------


def sharding_models() -> tuple[str, ...]:
    """The models built for sharded parameters (:attr:`Workload.shards`), in the kit's order."""
    return tuple(w.name for w in in_order() if w.shards)


def _shards(model: str) -> bool:
    workload = find_workload(model)
    return workload is not None and workload.shards


def check_case_options(model: str, options: Mapping[str, Any], ranks: int) -> None:
    """What a case's options ask of the model and its parallelism, checked before anything
    runs (the driver, at ``ranks`` processes) and again by the script; a
    :class:`WorkloadOptionError` names the field."""
    parallelism = options.get("parallelism", "auto")
    if parallelism not in PARALLELISMS:
        raise WorkloadOptionError(
            "parallelism", f"{parallelism!r} is not one of {', '.join(PARALLELISMS)}"
        )
    if parallelism == "none" and ranks > 1:
        raise WorkloadOptionError(
            "parallelism",
            f"none with {ranks} ranks would train {ranks} unsynchronised copies; "
            "use auto, ddp or fsdp",
        )
    checkpointing = options.get("activation_checkpointing", "none")
    if checkpointing not in CHECKPOINTING:
        raise WorkloadOptionError(
            "activation_checkpointing",
            f"{checkpointing!r} is not one of {', '.join(CHECKPOINTING)}",
        )
    check_fsdp_size(model, parallelism, options.get("fsdp_size", 0), ranks)
    workload = find_workload(model)
    if workload is None or not workload.shards:
        sharded = ", ".join(sharding_models())
        if parallelism in ("fsdp", "hsdp"):
            raise WorkloadOptionError(
                "parallelism", f"{parallelism} is built for {sharded}; use ddp or auto"
            )
        if checkpointing != "none":
            raise WorkloadOptionError("activation_checkpointing", f"applies to {sharded} only")
        return
    workload.check_options(options)


def check_fsdp_size(model: str, parallelism: str, fsdp_size: Any, ranks: int) -> None:
    """JAX's ``fsdp_size`` (the mesh axis a parameter is sharded over; 0: by the parallelism)
    must divide the case's devices, and shards only where the parallelism shards."""
    if fsdp_size in (0, None):
        return
    if isinstance(fsdp_size, bool) or not isinstance(fsdp_size, int) or fsdp_size < 0:
        raise WorkloadOptionError("fsdp_size", f"must be an integer >= 0, got {fsdp_size!r}")
    if ranks % fsdp_size:
        raise WorkloadOptionError(
            "fsdp_size",
            f"a mesh axis of {fsdp_size} does not divide the case's {ranks} devices; give a "
            f"divisor of {ranks} (or 0: the parallelism's own)",
        )
    sharded = parallelism in ("fsdp", "hsdp") or (parallelism == "auto" and _shards(model))
    if fsdp_size > 1 and not sharded:
        raise WorkloadOptionError(
            "fsdp_size",
            f"{fsdp_size} shards parameters, which parallelism {parallelism} of {model} does "
            f"not; use parallelism fsdp or hsdp ({', '.join(sharding_models())}), or fsdp_size 0",
        )


def resolve_parallelism(model: str, requested: str, ranks: int) -> str:
    """The parallelism a case runs with: nothing on one rank; auto is FSDP2 for the models
    built for sharding and DDP for the others."""
    if ranks == 1:
        return "none"
    if requested == "auto":
        return "fsdp" if _shards(model) else "ddp"
    return requested
