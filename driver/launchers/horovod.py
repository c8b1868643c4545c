"""Horovod's launcher, ``horovodrun``: the second TensorFlow engine, for GPU images.

horovodrun starts every rank of the job from one place: on node 0 it runs the local ranks and
reaches the other nodes over SSH (MPI or gloo, whichever the image's Horovod was built with),
as DLPerf's Horovod runs did. So node 0 gets the whole job's command and the other nodes get a
no-op that only says where their ranks come from; all ranks' records end up in node 0's log.
Multi-node runs need passwordless SSH between the nodes (the NGC images have the client; the
nodes need an sshd reachable from node 0).

Horovod 0.28.1 does not build against TensorFlow 2.21 on CPU (see TensorFlow/README.md), so
this launcher is for the NGC TensorFlow images, which ship a working Horovod.
"""

from __future__ import annotations

from driver.launchers.base import LAUNCHERS, NodeRank
from driver.launchers.builtin import single_process

NOT_HEAD = 'print("dlperf: horovodrun on node 0 starts this node\'s ranks over SSH")'


def host_list(rank: NodeRank) -> str:
    """``-H`` value: every node with its process count (one entry when all share an address)."""
    addresses = list(rank.node_addrs) or [rank.master_addr] * rank.nodes
    if len(set(addresses)) == 1:  # the local runtime's nodes are all this host
        return f"{addresses[0]}:{rank.world_size}"
    return ",".join(f"{address}:{rank.procs_per_node}" for address in addresses)


@LAUNCHERS.register("horovodrun")
class HorovodRun:
    name = "horovodrun"

    def command(self, python: str, script_argv: list[str], rank: NodeRank) -> list[str]:
        single = single_process(python, script_argv, rank)
        if single is not None:
            return single
        if rank.node_rank != 0:
            return [python, "-c", NOT_HEAD]
        return [
            "horovodrun",
            "-np", str(rank.world_size),
            "-H", host_list(rank),
            python, *script_argv,
        ]  # fmt: skip
