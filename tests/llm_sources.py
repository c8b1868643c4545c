"""What the LLM upstream sources' tests (torchtitan, megatron) share: a source's matrix cases,
a node's rank on made-up addresses, the argv a node runs and a flag's one value in it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from driver.core.matrix import load_matrix
from driver.frameworks.envs import VENVS
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


def source_python(variable: str, venv: str) -> Path | None:
    """The interpreter of a source's own environment (a release the kit's venvs cannot hold):
    ``$variable``, else ``.venvs/<venv>``; None where neither exists (its tests skip)."""
    given = os.environ.get(variable)
    candidate = Path(given) if given else VENVS / venv / "bin" / "python"
    return candidate if candidate.exists() else None


def assert_torchtitan_window_and_switches(
    argv: list[str], case: Case, assets: str, dataset: str, off: tuple[str, ...]
) -> None:
    """What both torchtitan releases' commands hold, by each release's flag names: the case's
    batch and sequence, the LLM protocol's 50 steps each logged, the data folder's tokenizer
    (``assets``) and C4 (``dataset``), every switch of ``off`` once, compile where asked."""
    assert value(argv, "--training.local-batch-size") == str(case.batch_size)
    assert value(argv, "--training.seq-len") == "8192"
    assert value(argv, "--training.steps") == "50"  # the LLM protocol: 10 warm-up + 40
    assert value(argv, "--metrics.log-freq") == "1"
    assert value(argv, assets) == f"{case.data_dir}/tokenizer"
    assert value(argv, dataset) == f"{case.data_dir}/c4"
    for switch in off:
        assert argv.count(switch) == 1, switch
    assert ("--compile.enable" in argv) == bool(case.options.get("compile"))
