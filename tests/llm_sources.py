"""What the LLM upstream sources' tests (torchtitan, megatron) share: a source's matrix cases,
a node's rank on made-up addresses, the argv a node runs and a flag's one value in it."""

from __future__ import annotations

from dataclasses import dataclass

from driver.core.matrix import load_matrix
from driver.launchers.base import NodeRank
from driver.model.case import Case
from driver.sources.spec import SourceSpec
from driver.sources.upstream import UpstreamSource


def node_rank(case: Case, node: int) -> NodeRank:
    """Node ``node`` of the case's topology, the nodes at 10.0.0.11 on, the master the first."""
    topo = case.topology
    addrs = tuple(f"10.0.0.{11 + i}" for i in range(topo.nodes))
    return NodeRank(node, topo.nodes, topo.devices_per_node, addrs[0], 29500, addrs)


def value(argv: list[str], flag: str) -> str:
    """The value after ``flag``, which the argv holds once."""
    assert argv.count(flag) == 1, (flag, argv)
    return argv[argv.index(flag) + 1]


@dataclass(frozen=True)
class SourceCases:
    spec: SourceSpec

    def cases(self) -> list[Case]:
        return load_matrix(self.spec.matrix_file).cases

    def case_of(self, topology: str, variant: str) -> Case:
        """The matrix's first case of that topology and variant."""
        return next(
            c for c in self.cases() if c.topology.label == topology and c.variant == variant
        )

    def argv_of(self, case: Case, node: int) -> list[str]:
        source = UpstreamSource(self.spec)
        return source.launch_argv(case, node_rank(case, node), int(case.batch_size))
