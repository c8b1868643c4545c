"""Launchers that need nothing beyond the framework itself: torchrun and the kit's spawner."""

from __future__ import annotations

from collections.abc import Mapping

from driver.launchers.base import LAUNCHERS, NodeRank


def single_process(python: str, script_argv: list[str], rank: NodeRank) -> list[str] | None:
    """A 1-process job needs no launcher: every launcher starts it the same way."""
    if rank.world_size == 1:
        return [python, *script_argv]
    return None


def module_command(
    python: str,
    module: str,
    flags: Mapping[str, object | None],
    script_argv: list[str],
    *,
    separator: bool = True,
) -> list[str]:
    """``python -m module --flag=value ... [--] script argv``; a None value leaves its flag out.
    ``separator``: the ``--`` before the script, for our own supervisors' argument parsers."""
    return [
        python, "-m", module,
        *(f"--{flag}={value}" for flag, value in flags.items() if value is not None),
        *(["--"] if separator else []),
        *script_argv,
    ]  # fmt: skip


@LAUNCHERS.register("torchrun")
class TorchRun:
    """PyTorch's elastic launcher with a static rendezvous at the master address."""

    name = "torchrun"

    def command(self, python: str, script_argv: list[str], rank: NodeRank) -> list[str]:
        return single_process(python, script_argv, rank) or module_command(
            python, "torch.distributed.run", rank.rendezvous_flags(), script_argv, separator=False
        )


@LAUNCHERS.register("spawn")
class Spawn:
    """The kit's own spawner (``driver.spawn``): sets RANK/WORLD_SIZE/LOCAL_RANK per process.

    Used by frameworks whose scripts build their own cluster spec from the rank environment
    (TensorFlow's TF_CONFIG) and by the framework-free calibration workload.
    """

    name = "spawn"

    def command(self, python: str, script_argv: list[str], rank: NodeRank) -> list[str]:
        flags = {"nproc-per-node": rank.procs_per_node, "node-rank": rank.node_rank,
                 "nnodes": rank.nodes}  # fmt: skip
        return single_process(python, script_argv, rank) or module_command(
            python, "driver.spawn", flags, script_argv
        )
