"""Framework-free pieces every benchmark script needs (stdlib only, like ``driver.steplog``).

Scripts run inside framework environments without the driver's dependencies. What lives here is
what would otherwise be copied between frameworks: the out-of-memory exit the ``max`` batch
search relies on, CPU threads per process, the CPU's name for the header, and the DLPerf
training knobs (optimizer, learning rate, weight decay, gradient clipping, DALI) resolved the
same way for every framework.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from driver.steplog import PROTOCOL_VERSION, TAG

EXIT_OOM = 86  # the driver's max-batch search reads this exit code as "batch does not fit"
IMAGE_MODELS = ("resnet50", "inception3")

# Training knobs shared by the frameworks' scripts; None means "depends on the model".
TRAINING_OPTIONS: dict[str, Any] = {
    "optimizer": None,  # sgd (CNNs: momentum 0.9) | adamw (BERT)
    "lr": None,  # sgd: 0.1 x global batch / 256 (Goyal et al.); adamw: 1e-4
    "momentum": 0.9,
    "weight_decay": None,  # sgd: 1e-4, adamw: 0.01; never on biases and norm weights
    "grad_clip": None,  # max global gradient norm, 0 = off ("W/O clip" rows); BERT 1.0, CNNs 0
    "num_threads": 0,  # CPU threads per process; 0 = OMP_NUM_THREADS, else cores / local procs
    "dali": False,  # NVIDIA DALI input pipeline: GPU and real data only
    "weights_checksum": False,  # print sum(|w|) per rank at the end (tests: ranks in sync?)
}

# Processes on this node, as each launcher names it (spawn/torchrun, paddle, horovod, MPI).
_LOCAL_SIZE_VARS = (
    "LOCAL_WORLD_SIZE",
    "PADDLE_LOCAL_SIZE",
    "HOROVOD_LOCAL_SIZE",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "DLPERF_NPROC_PER_NODE",
)


class OptionError(SystemExit):
    """A bad option or option combination: a one-line message and exit status 2 (argparse's)."""

    def __init__(self, message: str, prog: str = "train.py") -> None:
        print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
        super().__init__(2)


def warn(message: str, prog: str = "train.py") -> None:
    print(f"{prog}: warning: {message}", file=sys.stderr, flush=True)


def local_process_count() -> int:
    for name in _LOCAL_SIZE_VARS:
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def cpu_count() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def threads_per_process(requested: int = 0) -> tuple[int, str]:
    """CPU threads for one training process, and where the number came from.

    The option wins, then OMP_NUM_THREADS, then the node's cores split between its processes
    (two processes with all cores each would oversubscribe the node and measure contention).
    """
    if requested > 0:
        return requested, "option"
    value = os.environ.get("OMP_NUM_THREADS", "")
    if value.isdigit() and int(value) > 0:
        return int(value), "OMP_NUM_THREADS"
    return max(1, cpu_count() // local_process_count()), "cores/local processes"


def cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def is_oom(error: BaseException, oom_types: Iterable[type[BaseException]] = ()) -> bool:
    """An allocator failure: a framework's OOM type, MemoryError, or a message that says so."""
    if isinstance(error, (MemoryError, *oom_types)):
        return True
    text = str(error).lower()
    return isinstance(error, Exception) and any(
        marker in text
        for marker in ("out of memory", "can't allocate memory", "resourceexhausted", "oom when")
    )


def oom_exit(error: BaseException, rank: int, batch_size: int | None) -> NoReturn:
    """Print the ``{"dlperf": "oom"}`` record and leave with :data:`EXIT_OOM` at once.

    ``os._exit``: peers may be stuck in a collective, and interpreter teardown (atexit hooks,
    collective library shutdown) could hang instead of exiting.
    """
    lines = str(error).strip().splitlines()
    record = {
        TAG: "oom",  # first key: the parser looks for '"dlperf":'
        "v": PROTOCOL_VERSION,
        "rank": rank,
        "batch_size": batch_size,
        "error": type(error).__name__,
        "message": lines[0][:500] if lines else "",
    }
    print(json.dumps(record), flush=True)
    print(f"out of memory at batch size {batch_size}: {record['message']}", file=sys.stderr)
    sys.stderr.flush()
    os._exit(EXIT_OOM)


def print_weights_checksum(rank: int, value: float) -> None:
    """The line the tests compare across ranks: equal sums mean the gradients were reduced."""
    print(f"dlperf-weights-checksum rank={rank} sum={value:.6f}", flush=True)


def training_options(
    model: str,
    options: Mapping[str, Any],
    *,
    batch_size: int,
    world_size: int,
    dataset: str,
    on_gpu: bool,
    known: Iterable[str] = (),
) -> dict[str, Any]:
    """The shared knobs with their model defaults filled in and checked (options win).

    ``known`` names the calling framework's own options, so that only really unknown ones are
    warned about (they are recorded in the header either way).
    """
    from driver.benchargs import SHAPE_OPTIONS

    resolved = {**TRAINING_OPTIONS, **options}
    shared = {*TRAINING_OPTIONS, *SHAPE_OPTIONS, "loader_workers"}  # benchargs records the last
    unknown = sorted(set(resolved) - shared - set(known))
    if unknown:
        warn(f"options this script does not use (recorded anyway): {unknown}")
    image_model = model in IMAGE_MODELS
    optimizer = resolved["optimizer"] or ("sgd" if image_model else "adamw")
    if optimizer not in ("sgd", "adamw"):
        raise OptionError(f"optimizer must be sgd or adamw, got {optimizer!r}")
    resolved["optimizer"] = optimizer
    if resolved["lr"] is None:
        resolved["lr"] = 0.1 * batch_size * world_size / 256 if optimizer == "sgd" else 1e-4
    if resolved["weight_decay"] is None:
        resolved["weight_decay"] = 1e-4 if optimizer == "sgd" else 0.01
    if resolved["grad_clip"] is None:
        resolved["grad_clip"] = 0.0 if image_model else 1.0
    for key in ("lr", "momentum", "weight_decay", "grad_clip"):
        resolved[key] = float(resolved[key])
    if resolved["grad_clip"] < 0:
        raise OptionError(f"grad_clip must be >= 0 (0 = off), got {resolved['grad_clip']}")
    resolved["num_threads"] = int(resolved["num_threads"])
    resolved["dali"] = bool(resolved["dali"])
    resolved["weights_checksum"] = bool(resolved["weights_checksum"])
    if resolved["dali"]:
        if not on_gpu:
            raise OptionError(
                "dali=true needs a GPU: DALI is NVIDIA's GPU input pipeline (no CPU runs)"
            )
        if dataset != "real" or not image_model:
            raise OptionError("dali=true applies to real image data (--dataset real)")
    return resolved
