"""The device mesh a case runs on and how each array is laid over it (no JAX import: the
driver's tests read the plan without the framework).

Two axes, ``data`` and ``fsdp``: the batch is split over both, a parameter over ``fsdp``
only. ``ddp`` is a (devices, 1) mesh: every parameter replicated, the gradients averaged;
``fsdp`` is (1, devices): every parameter sharded over all devices (ZeRO-3-like, as PyTorch's
FSDP2); ``hsdp`` is (nodes, devices per node): sharded within a node, replicated across nodes.
``fsdp_size`` sets the fsdp axis itself (it must divide the devices).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from driver.workloads.base import check_fsdp_size, resolve_parallelism

AXES = ("data", "fsdp")


@dataclass(frozen=True)
class MeshPlan:
    parallelism: str  # none | ddp | fsdp | hsdp
    data: int
    fsdp: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.data, self.fsdp

    @property
    def sharded(self) -> bool:
        return self.fsdp > 1


def plan_mesh(model: str, requested: str, fsdp_size: int, devices: int, per_node: int) -> MeshPlan:
    """The mesh of ``devices`` (``per_node`` on each node) for the requested parallelism;
    a WorkloadOptionError names the field that cannot be."""
    check_fsdp_size(model, requested, fsdp_size, devices)
    parallelism = resolve_parallelism(model, requested, devices)
    if parallelism == "none":
        return MeshPlan("none", 1, 1)
    if parallelism == "ddp":
        return MeshPlan("ddp", devices, 1)
    default = devices if parallelism == "fsdp" else per_node
    fsdp = fsdp_size or default
    return MeshPlan(parallelism, devices // fsdp, fsdp)


def shard_dimension(shape: Sequence[int], fsdp: int) -> int | None:
    """The dimension of a parameter (or optimizer moment) of ``shape`` split over the fsdp axis:
    the largest one it divides (the first such on ties); None: too small or indivisible, so
    replicated (norm weights, biases, scalars)."""
    if fsdp <= 1:
        return None
    candidates = [(size, -index) for index, size in enumerate(shape) if size % fsdp == 0]
    if not candidates:
        return None
    size, negative_index = max(candidates)
    return -negative_index if size >= fsdp else None
