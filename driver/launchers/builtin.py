"""Launchers that need nothing beyond the framework itself: torchrun and the kit's spawner."""

from __future__ import annotations

from driver.launchers.base import NodeRank
from driver.registry import LAUNCHERS


def single_process(python: str, script_argv: list[str], rank: NodeRank) -> list[str] | None:
    """A 1-process job needs no launcher: every launcher starts it the same way."""
    if rank.world_size == 1:
        return [python, *script_argv]
    return None


@LAUNCHERS.register("torchrun")
class TorchRun:
    """PyTorch's elastic launcher with a static rendezvous at the master address."""

    name = "torchrun"

    def command(self, python: str, script_argv: list[str], rank: NodeRank) -> list[str]:
        return single_process(python, script_argv, rank) or [
            python, "-m", "torch.distributed.run",
            f"--nnodes={rank.nodes}",
            f"--node-rank={rank.node_rank}",
            f"--nproc-per-node={rank.procs_per_node}",
            f"--master-addr={rank.master_addr}",
            f"--master-port={rank.master_port}",
            *script_argv,
        ]  # fmt: skip


@LAUNCHERS.register("spawn")
class Spawn:
    """The kit's own spawner (``driver.spawn``): sets RANK/WORLD_SIZE/LOCAL_RANK per process.

    Used by frameworks whose scripts build their own cluster spec from the rank environment
    (TensorFlow's TF_CONFIG) and by the framework-free calibration workload.
    """

    name = "spawn"

    def command(self, python: str, script_argv: list[str], rank: NodeRank) -> list[str]:
        return single_process(python, script_argv, rank) or [
            python, "-m", "driver.spawn",
            f"--nproc-per-node={rank.procs_per_node}",
            f"--node-rank={rank.node_rank}",
            f"--nnodes={rank.nodes}",
            "--", *script_argv,
        ]  # fmt: skip
