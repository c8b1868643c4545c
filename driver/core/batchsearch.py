"""``batch_size: max``: find the largest per-device batch that fits, as DLPerf's bsz=max tables.

Short probe runs (a few steps) double the batch until one runs out of memory (the scripts exit
86; on a GPU a cuBLAS/cuDNN allocation failure counts too, its words kept in the probe's
``verdict.json``), then bisect between the last fit and the first failure down to
``granularity``, or to a sixteenth of the batch that fits when that is coarser (a GPU's max is
in the thousands: each probe is a process start, and the last few percent are not worth three
more). Every probe keeps its log under ``<case>/batch-search/`` so the choice can be audited.

On a GPU the search starts at the DLPerf fixed batch of the model (the matrix's other batch
size: 256 for ResNet-50 AMP), not at 16: a GPU fits it, and each probe saved is a process
start. Where a probe ran out of memory, the case is measured at :data:`MARGIN` of the largest
batch that fitted: a probe runs a few steps, a repeat 120, and the allocator's fragmentation
can fail a later step at the very edge. ``batch-search/found.json`` records both numbers.

The search plans its probes but does not run them itself: the caller hands it the function
that runs a plan (the runner's ``run_plan``), so a probe fails, times out or runs out of memory
exactly as a measured repeat does, and this module does not import the runner that calls it.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from driver.core.plan import plan_repeat
from driver.model.case import Case
from driver.model.results import Session, write_json
from driver.runtimes.base import RepeatOutcome, Runtime, Verdict
from driver.runtimes.plan import RepeatPlan
from driver.workloads.base import find_workload

# Runs one plan in a runtime; whatever goes wrong ends as a verdict (``runner.run_plan``).
PlanRunner = Callable[[RepeatPlan, Runtime], tuple[RepeatOutcome, Verdict]]

PROBE_STEPS = 3
START = 16
MARGIN = 0.95  # measured at this share of the largest fit when a probe ran out of memory
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
    record: dict[str, object] = {"verdict": verdict.value, "detail": outcome.detail}
    if verdict == Verdict.OOM:
        record["words"] = oom_words(directory)
    write_json(directory / "verdict.json", record)
    if verdict not in (Verdict.OK, Verdict.OOM):
        raise BatchSearchFailed(
            verdict,
            f"batch search: the probe at batch {batch} failed for another reason than memory: "
            f"{outcome.detail or verdict.value} (log: {directory})",
        )
    return verdict == Verdict.OK


def oom_words(directory: Path) -> str:
    """The allocator's own message from a probe's OOM record (which failure it was)."""
    for log in sorted(directory.glob("node*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if '"oom"' in line and "{" in line:
                with contextlib.suppress(ValueError, AttributeError):
                    message = json.loads(line[line.index("{") :]).get("message")
                    if message:
                        return str(message)[:500]
    return ""


def search_start(case: Case, on_gpu: bool) -> int:
    """Where the search starts: the model's DLPerf fixed batch on a GPU (its workload's
    :meth:`~driver.workloads.base.Workload.search_start`), else :data:`START`."""
    workload = find_workload(case.model) if on_gpu else None
    start = None if workload is None else workload.search_start(case.precision)
    return START if start is None else start


def with_margin(largest_fit: int, first_failure: int | None) -> int:
    """The batch to measure at: the largest fit, less :data:`MARGIN` when memory was the limit."""
    if first_failure is None:
        return largest_fit
    return max(1, math.floor(largest_fit * MARGIN))


def search_max_batch(
    case: Case,
    session: Session,
    runtime: Runtime,
    run_plan: PlanRunner,
    printer: Callable[[str], None] = print,
    start: int | None = None,
    ceiling: int = CEILING,
    granularity: int = GRANULARITY,
) -> int | None:
    """The per-device batch to measure ``case`` at: the largest whose probe fits (``run_plan``
    runs each probe), less the margin when a probe ran out of memory; None when not even batch
    1 fits. Raises BatchSearchFailed when a probe fails for another reason than memory.
    ``start``: the first probe (default: :func:`search_start`, by the runtime's GPUs)."""
    if start is None:
        start = search_start(case, runtime_has_gpu(runtime))
    largest, first_failure = _search(
        case, session, runtime, run_plan, printer, start, ceiling, granularity
    )
    if largest is None:
        return None
    measured = with_margin(largest, first_failure)
    write_json(
        session.case_dir(case) / "batch-search" / "found.json",
        {"largest_fit": largest, "first_failure": first_failure, "measured_at": measured,
         "margin": MARGIN if first_failure is not None else 1.0, "start": start},
    )  # fmt: skip
    if measured != largest:
        printer(f"[{case.id}] batch search: {largest} fits; measured at {measured} ({MARGIN:.0%})")
    return measured


def runtime_has_gpu(runtime: Runtime) -> bool:
    """Whether the runtime's machine has a GPU, where the runtime can tell (the local one)."""
    return runtime.has_gpu()


def _search(
    case: Case,
    session: Session,
    runtime: Runtime,
    run_plan: PlanRunner,
    printer: Callable[[str], None],
    start: int,
    ceiling: int,
    granularity: int,
) -> tuple[int | None, int | None]:
    """(largest batch that fits or None, the smallest that failed or None)."""
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
        return fits_at or None, None
    if fits_at == 0:  # even the start failed: go down
        low = 1
        while low < fails_at:
            batch = max(1, fails_at // 2)
            if _fits(case, session, runtime, run_plan, batch):
                fits_at = batch
                break
            fails_at = batch
            if batch == 1:
                return None, 1
    while fails_at - fits_at > max(granularity, fits_at // RELATIVE_GRANULARITY):
        middle = (fits_at + fails_at) // 2
        if _fits(case, session, runtime, run_plan, middle):
            fits_at = middle
        else:
            fails_at = middle
        printer(f"[{case.id}] batch search: between {fits_at} and {fails_at}")
    return fits_at, fails_at
