"""``batch_size: max``: find the largest per-device batch that fits, as DLPerf's bsz=max tables.

Short probe runs (a few steps) double the batch until one runs out of memory (the scripts exit
86), then bisect between the last fit and the first failure down to ``granularity``, or to a
sixteenth of the batch that fits when that is coarser (a GPU's max is in the thousands: each
probe is a process start, and the last few percent are not worth three more). Every probe keeps
its log under ``<case>/batch-search/`` so the choice can be audited.

The search plans its probes but does not run them itself: the caller hands it the function
that runs a plan (the runner's ``run_plan``), so a probe fails, times out or runs out of memory
exactly as a measured repeat does, and this module does not import the runner that calls it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

from driver.core.plan import plan_repeat
from driver.model.case import Case
from driver.model.results import Session, write_json
from driver.runtimes.base import RepeatOutcome, Runtime, Verdict
from driver.runtimes.plan import RepeatPlan

# Runs one plan in a runtime; whatever goes wrong ends as a verdict (``runner.run_plan``).
PlanRunner = Callable[[RepeatPlan, Runtime], tuple[RepeatOutcome, Verdict]]

PROBE_STEPS = 3
START = 16
CEILING = 4096  # on CPU nothing runs out of memory early; stop there
GRANULARITY = 8
RELATIVE_GRANULARITY = 16  # stop bisecting within fits / 16 (6%) when that is more than 8


class BatchSearchFailed(Exception):
    """A probe failed for another reason than memory: the case ends with this verdict."""

    def __init__(self, verdict: Verdict, detail: str) -> None:
        super().__init__(detail)
        self.verdict, self.detail = verdict, detail


def _fits(case: Case, session: Session, runtime: Runtime, run_plan: PlanRunner, batch: int) -> bool:
    probe_case = replace(case, warmup_steps=0, measured_steps=PROBE_STEPS, total_steps=PROBE_STEPS)
    directory = session.case_dir(case) / "batch-search" / f"bs{batch}"
    if directory.exists():  # a probe from an interrupted search: read its verdict
        verdict_file = directory / "verdict.json"
        if verdict_file.exists():
            return json.loads(verdict_file.read_text())["verdict"] == "ok"
    directory.mkdir(parents=True, exist_ok=True)
    plan = plan_repeat(
        probe_case,
        runtime,
        batch_size=batch,
        repeat_dir=directory,
        session_root=session.root,
        probe=True,
    )
    outcome, verdict = run_plan(plan, runtime)
    write_json(directory / "verdict.json", {"verdict": verdict.value, "detail": outcome.detail})
    if verdict not in (Verdict.OK, Verdict.OOM):
        raise BatchSearchFailed(
            verdict,
            f"batch search: the probe at batch {batch} failed for another reason than memory: "
            f"{outcome.detail or verdict.value} (log: {directory})",
        )
    return verdict == Verdict.OK


def search_max_batch(
    case: Case,
    session: Session,
    runtime: Runtime,
    run_plan: PlanRunner,
    printer: Callable[[str], None] = print,
    start: int = START,
    ceiling: int = CEILING,
    granularity: int = GRANULARITY,
) -> int | None:
    """The largest per-device batch of ``case`` whose probe fits (``run_plan`` runs each
    probe), or None when not even batch 1 does; raises BatchSearchFailed when a probe fails for
    another reason than memory."""
    fits_at, fails_at = 0, None
    batch = start
    while batch <= ceiling:
        ok = _fits(case, session, runtime, run_plan, batch)
        printer(f"[{case.id}] batch search: {batch} {'fits' if ok else 'out of memory'}")
        if not ok:
            fails_at = batch
            break
        fits_at, batch = batch, batch * 2
    if fails_at is None:
        return fits_at or None
    if fits_at == 0:  # even the start failed: go down
        low = 1
        while low < fails_at:
            batch = max(1, fails_at // 2)
            if _fits(case, session, runtime, run_plan, batch):
                fits_at = batch
                break
            fails_at = batch
            if batch == 1:
                return None
    while fails_at - fits_at > max(granularity, fits_at // RELATIVE_GRANULARITY):
        middle = (fits_at + fails_at) // 2
        if _fits(case, session, runtime, run_plan, middle):
            fits_at = middle
        else:
            fails_at = middle
        printer(f"[{case.id}] batch search: between {fits_at} and {fails_at}")
    return fits_at
