"""How the processes of a JAX case find each other: the arguments of
``jax.distributed.initialize``, decided without importing JAX (so the choice is testable
anywhere).

Three ways, first that applies:
- **Slurm, one task per process** (the kit's ``slurm.tasks: device``, or a node-mode step with
  one process per node): JAX's own Slurm detection. Its coordinator is the
  step's first node at a port derived from the job id, its ranks ``SLURM_PROCID`` of
  ``SLURM_NTASKS``; they are the ranks the kit was given (checked), so the mesh is the same.
- **The kit's rank environment** (its spawner, torchrun-like launchers, several processes per
  Slurm task): the coordinator at MASTER_ADDR:MASTER_PORT, detection turned off so no variable of
  an enclosing Slurm step (one task per node) is taken for this process's.
- **Neither** (several processes, but no coordinator exported): JAX's detection alone (Slurm,
  Open MPI, ...), as a bare ``initialize()``.

On a GPU each process sees one device, always named: JAX's detection would otherwise pick
``SLURM_LOCALID``, a device that does not exist where Slurm's binding left one visible GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# What JAX's SlurmCluster requires before it recognises a Slurm step (jax/_src/clusters).
SLURM_STEP_VARIABLES = (
    "SLURM_JOB_ID",
    "SLURM_STEP_NODELIST",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "SLURM_LOCALID",
)


def slurm_task_per_process(rank: int, world_size: int, environ: Mapping[str, str]) -> bool:
    """This process is a Slurm task of a step with one task per process, with the kit's rank."""
    if not all(environ.get(name) for name in SLURM_STEP_VARIABLES):
        return False
    return environ["SLURM_PROCID"] == str(rank) and environ["SLURM_NTASKS"] == str(world_size)


def gpu_device_ids(local_rank: int, environ: Mapping[str, str]) -> list[int]:
    """The one GPU of this process, as JAX numbers the devices CUDA shows it."""
    visible = [d for d in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
    # One visible GPU (Slurm's binding, or a container's): it is device 0 to CUDA.
    return [0] if len(visible) == 1 else [local_rank]


def join_arguments(
    rank: int, world_size: int, local_rank: int, on_gpu: bool, environ: Mapping[str, str]
) -> dict[str, Any]:
    """The keyword arguments of ``jax.distributed.initialize`` for this process."""
    devices: dict[str, Any] = (
        {"local_device_ids": gpu_device_ids(local_rank, environ)} if on_gpu else {}
    )
    if slurm_task_per_process(rank, world_size, environ):
        return {"cluster_detection_method": "slurm", **devices}
    if environ.get("MASTER_ADDR"):
        port = environ.get("MASTER_PORT") or "29500"
        return {
            "coordinator_address": f"{environ['MASTER_ADDR']}:{port}",
            "num_processes": world_size,
            "process_id": rank,
            "cluster_detection_method": "deactivate",
            **devices,
        }
    return devices


def coordinator_source(arguments: Mapping[str, Any]) -> str:
    """How the processes met, for the header: ``slurm``, ``kit`` or ``detected``."""
    method = arguments.get("cluster_detection_method")
    return {"slurm": "slurm", "deactivate": "kit"}.get(str(method), "detected")
