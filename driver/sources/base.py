"""The upstream-source plug-in interface (the "Source" column of DLPerf's tables).

A source is pinned upstream code (repository + full commit) in a pinned image, started with its
own launcher and flags, whose log is read by a parser of its format. The driver fills ranks and
hosts from the inventory; nobody edits upstream files or per-node flags by hand.
"""

from __future__ import annotations

from typing import Protocol

from driver.core.case import Case
from driver.launchers.base import NodeRank
from driver.parsers._upstream import RunHeader


class Source(Protocol):
    name: str  # matrix `source:` value, e.g. "ngc-pytorch"
    framework: str  # FRAMEWORKS name whose column it belongs to
    models: tuple[str, ...]
    repository: str  # e.g. https://github.com/NVIDIA/DeepLearningExamples
    commit: str  # a full 40-hex commit
    image: str  # images.lock key of the image that holds the code at that commit
    parser: str  # PARSERS name for its log format
    workdir: str  # where the code lives inside the image

    def command(self, case: Case, rank: NodeRank, batch_size: int) -> list[str]:
        """argv that runs ``case`` on the node ``rank`` (their launcher, their flags)."""
        ...


def run_header(
    source: str, case: Case, rank: NodeRank, batch_size: int, logging: str, step_offset: int
) -> RunHeader:
    """The run header a source's node command prints first: what its parser needs to know
    about the case (window, batch, ranks) that the upstream log itself does not say."""
    warmup, measured, _total = case.window_for(batch_size)
    return RunHeader(
        source=source,
        model=case.model,
        node_rank=rank.node_rank,
        nodes=rank.nodes,
        procs_per_node=rank.procs_per_node,
        batch=batch_size,
        logging=logging,
        step_offset=step_offset,
        warmup_steps=warmup,
        measured_steps=measured,
    )
