"""The launcher plug-in interface.

A launcher turns the benchmark script's command into the command that starts every process of
one node, given the rank environment of that node. Registered in ``LAUNCHERS`` (below).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from driver.registry import Registry


@dataclass(frozen=True)
class NodeRank:
    """Where one node sits in a multi-node job; filled by the driver, never hand-edited."""

    node_rank: int
    nodes: int
    procs_per_node: int
    master_addr: str
    master_port: int
    node_addrs: tuple[str, ...] = ()  # every node's address, for launchers that want the list

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    @property
    def node_addr(self) -> str | None:
        """This node's own address (from the inventory), for launchers that would otherwise
        guess it from the host name, which on a multi-homed host names another interface."""
        return self.node_addrs[self.node_rank] if self.node_addrs else None

    def rendezvous_flags(self, separator: str = "-") -> dict[str, object]:
        """The node's rendezvous as most launchers spell it: ``--nnodes``, ``--node-rank``,
        ``--nproc-per-node``, ``--master-addr``, ``--master-port`` (``separator`` "_": OneFlow)."""
        return {
            "nnodes": self.nodes,
            f"node{separator}rank": self.node_rank,
            f"nproc{separator}per{separator}node": self.procs_per_node,
            f"master{separator}addr": self.master_addr,
            f"master{separator}port": self.master_port,
        }

    def environment(self) -> dict[str, str]:
        """The variables every runtime exports on the node (scripts and launchers read them)."""
        return {
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "DLPERF_NODE_RANK": str(self.node_rank),
            "DLPERF_NNODES": str(self.nodes),
            "DLPERF_NPROC_PER_NODE": str(self.procs_per_node),
            "DLPERF_NODE_ADDRS": ",".join(self.node_addrs),
        }


class Launcher(Protocol):
    name: str
    # Optional class attribute ``nodes_told_apart_by_address = True``: the launcher knows which
    # ranks share a node only from the address they connect from, so several nodes on one
    # host's loopback addresses cannot run (driver.core.command.check_placement refuses them).

    def command(self, python: str, script_argv: list[str], rank: NodeRank) -> list[str]:
        """argv that starts all ``rank.procs_per_node`` processes of this node.

        ``python`` is the interpreter of the framework environment; ``script_argv`` starts with
        the script path followed by its arguments.
        """
        ...


LAUNCHERS: Registry[type[Launcher]] = Registry("launcher")  # each plug-in module registers
