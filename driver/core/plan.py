"""The typed repeat plan: everything a runtime needs to run one repeat of one case.

The runner (and the batch=max search, and the all-reduce probe) build a :class:`RepeatPlan`
and hand the whole of it to ``Runtime.run``: a runtime never re-derives the case, the
framework, the device count or the session from paths, argv or the environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from driver.core.case import Case
from driver.core.command import node_commands, parser_for
from driver.runtimes.base import NodeCommand, Runtime


@dataclass(frozen=True)
class RepeatPlan:
    case: Case
    repeat: int  # 1-based; 0 for a batch=max probe or an all-reduce probe
    batch_size: int  # the resolved per-device batch
    commands: tuple[NodeCommand, ...]  # one per node, rank environment included
    repeat_dir: Path  # node<i>.log files and record.json go here
    session_root: Path  # results/<session>
    parser: str  # the log parser plug-in of the case
    probe: bool = False  # a short probe run (batch search, all-reduce), not a measured repeat

    @property
    def framework(self) -> str:
        return self.case.framework

    @property
    def source(self) -> str:
        return self.case.source

    @property
    def timeout_s(self) -> float:
        return self.case.timeout_s

    @property
    def case_id(self) -> str:
        return self.case.id

    @property
    def devices_per_node(self) -> int:
        return self.case.topology.devices_per_node

    @property
    def label(self) -> str:
        """How messages name this repeat."""
        what = "probe" if self.probe else f"repeat {self.repeat}"
        return f"{self.case.id} {what} ({self.repeat_dir.name})"


def plan_repeat(
    case: Case,
    runtime: Runtime,
    *,
    batch_size: int,
    repeat_dir: Path,
    session_root: Path,
    repeat: int = 0,
    probe: bool = False,
    master_port: int | None = None,
) -> RepeatPlan:
    """The plan of one repeat of ``case`` (``batch_size`` resolved: 'max' is searched first)."""
    return RepeatPlan(
        case=case,
        repeat=repeat,
        batch_size=batch_size,
        commands=tuple(node_commands(case, runtime, batch_size, master_port=master_port)),
        repeat_dir=Path(repeat_dir),
        session_root=Path(session_root),
        parser=parser_for(case),
        probe=probe,
    )


def dry_run_plan(case: Case, runtime: Runtime, batch_size: int) -> RepeatPlan:
    """A plan for ``--dry-run``: nothing is written, so its folders are placeholders."""
    root = Path("results") / "<session>"
    return plan_repeat(
        case,
        runtime,
        batch_size=batch_size,
        repeat_dir=root / "cases" / case.id / "repeat-01",
        session_root=root,
        repeat=1,
        master_port=29500,
    )
