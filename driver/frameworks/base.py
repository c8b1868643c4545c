"""The framework plug-in: only what is really a framework's own.

Everything else (matrix, command line, parsing, statistics, results) is shared. A framework
declares where its folder and script are, which launcher starts its processes, how its
environment is installed, and which modules name its version. Registered in
``FRAMEWORKS`` (below) by ``driver/frameworks/<name>.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError

from driver.registry import Registry
from driver.workloads.base import COUNT, SIZE, in_order, shape_option_kinds

REPO_ROOT = Path(__file__).resolve().parents[2]

# Option value types (``--option key=value`` and a matrix's ``variants``): strict, so that a
# list, a string or a bool is never read as a number, and NaN/infinity are refused.
Flag = Annotated[bool, Field(strict=True)]
Count = Annotated[int, Field(strict=True, ge=0, le=1_000_000)]
Size = Annotated[int, Field(strict=True, gt=0, le=10_000_000)]
Real = Annotated[float, Field(strict=True, ge=0, le=1e9, allow_inf_nan=False)]
PositiveReal = Annotated[float, Field(strict=True, gt=0, le=1e9, allow_inf_nan=False)]

# The value type of each kind of shape option a workload declares (driver.workloads.base.Option).
SHAPE_OPTION_KINDS: dict[str, Any] = {SIZE: Size, COUNT: Count}


def _shape_option_type(kind: str | tuple[str, ...]) -> Any:
    return SHAPE_OPTION_KINDS[kind] if isinstance(kind, str) else Literal[kind]


# The shape options every script reads (driver.bench.contract.SHAPE_OPTIONS), typed by their
# workloads' kinds (llama_size: the names of driver.workloads.llama.LLAMA_SIZES).
SHAPE_OPTION_TYPES: dict[str, Any] = {
    name: _shape_option_type(kind) for name, kind in shape_option_kinds().items()
}
# The training knobs every framework script resolves (driver.bench.contract.TRAINING_OPTIONS).
TRAINING_OPTION_TYPES: dict[str, Any] = {
    "optimizer": Literal["sgd", "adamw"],
    "lr": PositiveReal,
    "momentum": Real,
    "weight_decay": Real,
    "grad_clip": Real,
    "num_threads": Count,
    "dali": Flag,
    "weights_checksum": Flag,
    "step_sync": Literal["every", "boundary"],
}


class OptionError(ValueError):
    """An option a framework does not declare, or a value of the wrong type."""


@dataclass(frozen=True)
class Framework:
    name: str  # matrix and case-id name: "pytorch"
    display: str  # table column: "PyTorch"
    folder: str  # repository folder: "PyTorch"
    launcher: str  # LAUNCHERS name used when a node runs more than one process
    # The models its script trains (a workload naming this framework adds itself: see
    # trained_models).
    models: tuple[str, ...] = ("resnet50", "bert")
    # Benchmark entry, relative to the repository root; "": <folder>/benchmark/train.py.
    script: str = ""
    parser: str = "dlperf-jsonl"
    python: str = "3.11"  # interpreter version for the local virtual environment
    # The package an install of the framework imports ("torch"): `dlperf run --python` checks
    # that the interpreter it is given has it. "": nothing to check (the calibration workload).
    module: str = ""
    has_xla: bool = False
    has_amp_on_cpu: bool = True  # False: AMP is a no-op on CPU (recorded, footnoted)
    # Environment for every process (e.g. OMP_NUM_THREADS for frameworks that use 1 thread).
    env: dict[str, str] = field(default_factory=dict)
    # Extra library folders inside the venv to put on LD_LIBRARY_PATH (glob patterns).
    venv_library_globs: tuple[str, ...] = ()
    # The script's own ``--option`` names and value types (its *_OPTIONS dict); the shape and
    # training options above are added unless ``shared_options`` is False.
    options: Mapping[str, Any] = field(default_factory=dict)
    shared_options: bool = True
    # Each rank trains on a device of its own (a GPU; a CPU on a CPU node): pre-flight refuses
    # more ranks per node than devices. False only for workloads that use none (calibration).
    occupies_device: bool = True

    def __post_init__(self) -> None:
        if not (REPO_ROOT / self.folder).is_dir():
            raise ValueError(f"framework {self.name}: folder {self.folder!r} does not exist")
        if not self.script:  # frozen: the derived default is set once, here
            object.__setattr__(self, "script", f"{self.folder}/benchmark/train.py")

    def check_option(self, name: str, value: Any) -> Any:
        """``value`` if ``name`` is an option of this framework's script and the value fits;
        else :class:`OptionError` saying what is allowed (with a did-you-mean)."""
        from driver.schema import did_you_mean

        shared = {**SHAPE_OPTION_TYPES, **TRAINING_OPTION_TYPES} if self.shared_options else {}
        types = {**shared, **self.options}
        if name not in types:
            raise OptionError(
                f"{self.name} has no option {name!r}{did_you_mean(name, types)}; "
                f"its options: {', '.join(sorted(types))}"
            )
        try:
            return TypeAdapter(types[name]).validate_python(value, strict=True)
        except ValidationError as error:
            detail = error.errors()[0]["msg"]
            raise OptionError(
                f"{self.name} option {name!r}: {detail}, got {value!r}"
            ) from None

    def trained_models(self) -> tuple[str, ...]:
        """The models its script trains: those it lists, then the workloads that name it."""
        named = [w.name for w in in_order() if self.name in w.frameworks]
        return (*self.models, *(name for name in named if name not in self.models))

    @property
    def path(self) -> Path:
        return REPO_ROOT / self.folder

    @property
    def matrix_file(self) -> Path:
        return self.path / "matrix.yaml"

    @property
    def cpu_requirements(self) -> Path:
        return self.path / "requirements-cpu.txt"


# Every framework, by name; also found by its folder and display names (``make
# resnet50-paddlepaddle``). Each plug-in module registers its own.
FRAMEWORKS: Registry[Framework] = Registry("framework", alias_fields=("folder", "display"))


def register(framework: Framework) -> Framework:
    """Register ``framework`` in :data:`FRAMEWORKS` under its own name."""
    return FRAMEWORKS.add(framework.name, framework)
