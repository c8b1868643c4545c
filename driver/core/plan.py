"""Building the repeat plan (``driver.runtimes.plan.RepeatPlan``) of one repeat of a case.

The runner (and the batch=max search) build plans here and hand the whole of each to
``Runtime.run``; the plan type itself lives in ``driver.runtimes.plan`` so that the runtimes
read it without importing this module, which needs the plug-in registry.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from driver.core.command import node_commands, parser_for
from driver.model.case import Case
from driver.runtimes.plan import RepeatPlan

if TYPE_CHECKING:  # the runtime is only passed through: planning does not import runtimes
    from driver.runtimes.base import Runtime


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
