"""What a benchmark process asks of its host: cores, threads per process, the CPU's name.

stdlib only, like the rest of ``driver.bench``: it runs inside framework environments.
"""

from __future__ import annotations

import os

from driver.bench import fingerprint

# Processes on this node, as each launcher names it (spawn/torchrun, paddle, horovod, MPI).
_LOCAL_SIZE_VARS = (
    "LOCAL_WORLD_SIZE",
    "PADDLE_LOCAL_SIZE",
    "HOROVOD_LOCAL_SIZE",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "DLPERF_NPROC_PER_NODE",
)


def physical_cores() -> int:
    """Physical cores of this node (hyper-threads counted once), from /proc/cpuinfo."""
    return fingerprint.physical_cores() or os.cpu_count() or 1


def local_process_count() -> int:
    for name in _LOCAL_SIZE_VARS:
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def resolve_loader_workers(value: str | int) -> int:
    """The Dell guide's default: physical cores per device on this node minus 4, at least 1."""
    if str(value) != "auto":
        workers = int(value)
        if workers < 0:
            raise SystemExit(f"--loader-workers must be >= 0 or auto, got {value}")
        return workers
    local_procs = int(
        os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("DLPERF_NPROC_PER_NODE") or 1
    )
    return max(1, physical_cores() // max(1, local_procs) - 4)


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
    """The CPU's name as the node's fingerprint reads it (``model name`` of /proc/cpuinfo)."""
    return fingerprint.cpu_model_name()
