"""Run a list of cases into a session: repeats, resume, batch search, progress.

A failed repeat ends its case (the remaining repeats are left for a later resume) and the
matrix goes on; Ctrl-C records the repeat in flight as interrupted, cleans up and stops.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from driver.bench.protocol import has_oom_record
from driver.core.batchsearch import BatchSearchFailed, search_max_batch
from driver.core.plan import plan_repeat
from driver.core.progress import Progress
from driver.datasets.manifest import dataset_sha256
from driver.files import write_text
from driver.model.case import Case
from driver.model.measure import RepeatMeasurement
from driver.model.plausible import Implausible, measure_checked
from driver.model.results import (
    RUNTIME_ERROR_LOG,
    RepeatLogs,
    RepeatRecord,
    Session,
    write_json,
)
from driver.parsers.base import LogParseError, ParsedLog
from driver.plugins import load
from driver.runtimes.base import (
    INTERRUPTED_DETAIL,
    RepeatOutcome,
    Runtime,
    Verdict,
)
from driver.runtimes.plan import RepeatPlan
from driver.sources.base import PINNED, image_differs, source_image

Printer = Callable[[str], None]


@dataclass
class RunSummary:
    finished: int = 0
    skipped: int = 0  # already finished in an earlier run of the session
    failed: list[tuple[str, int, str, str]] = field(default_factory=list)  # id, repeat, verdict

    @property
    def ok(self) -> bool:
        return not self.failed


CACHE_DROP_MARK = "dlperf-cache-drop: "


def refine_verdict(outcome: RepeatOutcome, logs: RepeatLogs) -> Verdict:
    """A launcher (torchrun) may turn a rank's out-of-memory exit 86 into a plain 1; the rank's
    ``{"dlperf": "oom"}`` record in the log still tells it, and the batch search relies on it."""
    if outcome.verdict == Verdict.FAILED and any(
        has_oom_record(text) for text in logs.texts.values()
    ):
        return Verdict.OOM
    return outcome.verdict


def cache_drop_status(logs: RepeatLogs) -> dict[str, str]:
    """What the page-cache drop did on each node (only cases with drop_caches print it)."""
    status = {}
    for name, text in logs.texts.items():
        for line in text.splitlines():
            if line.startswith(CACHE_DROP_MARK):
                status[name] = line[len(CACHE_DROP_MARK) :]
                break
    return status


def launch(plan: RepeatPlan, runtime: Runtime) -> RepeatOutcome:
    """Run one plan; whatever goes wrong in the runtime ends as a verdict, never a traceback.

    A runtime reports failing commands as verdicts itself; an exception escaping it (a node
    that vanished mid-setup, a bug) becomes a FAILED verdict naming the error, with the
    traceback kept beside the logs for whoever debugs it. Ctrl-C still propagates.
    """
    try:
        return runtime.run(plan)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as error:  # noqa: BLE001 - the verdict names it; the traceback is kept
        import traceback

        now = time.time()
        write_text(plan.repeat_dir / RUNTIME_ERROR_LOG, traceback.format_exc())
        detail = (
            f"the {runtime.name} runtime failed: {type(error).__name__}: {error} "
            f"(traceback: {plan.repeat_dir / RUNTIME_ERROR_LOG})"
        )
        return RepeatOutcome(Verdict.FAILED, [], now, now, detail)


def run_plan(plan: RepeatPlan, runtime: Runtime) -> tuple[RepeatOutcome, Verdict]:
    """``launch``, and the verdict its logs refine (what the batch search's probes need)."""
    outcome = launch(plan, runtime)
    return outcome, refine_verdict(outcome, RepeatLogs.read(plan.repeat_dir, len(plan.commands)))


def evaluate(
    case: Case, parser_name: str, texts: Mapping[str, str], batch_size: int
) -> tuple[RepeatMeasurement, ParsedLog]:
    """Parse a repeat's raw logs and measure its window with the door's plausibility checks, so
    a record never holds what every reader would refuse (raises LogParseError)."""
    try:
        return measure_checked(case, parser_name, texts, batch_size)
    except Implausible as error:
        raise LogParseError(f"not a plausible measurement: {error}") from None


def run_repeat(
    case: Case,
    repeat: int,
    session: Session,
    runtime: Runtime,
    batch_size: int,
) -> RepeatRecord:
    directory = session.fresh_repeat_dir(case, repeat)
    plan = plan_repeat(
        case,
        runtime,
        batch_size=batch_size,
        repeat_dir=directory,
        session_root=session.root,
        repeat=repeat,
    )
    interrupted = False
    try:
        outcome = launch(plan, runtime)
    except KeyboardInterrupt:
        interrupted = True
        now = time.time()
        outcome = RepeatOutcome(Verdict.INTERRUPTED, [], now, now, INTERRUPTED_DETAIL)
    runtime_wrote(session, runtime)
    # read and parsed once: verdict, measurement, checksums, cache drop, the ranks' headers
    logs = RepeatLogs.read(directory, len(plan.commands))
    verdict = refine_verdict(outcome, logs)
    measurement, parsed, detail = None, None, outcome.detail
    if verdict == Verdict.OK:
        try:
            measurement, parsed = evaluate(case, plan.parser, logs.texts, batch_size)
        except LogParseError as error:
            verdict, detail = Verdict.PARSE_ERROR, str(error)
    record = session.record(
        plan,
        outcome,
        logs,
        verdict=verdict.value,
        runtime=runtime.name,
        measurement=measurement,
        parsed=parsed,
        detail=detail,
        extra=_provenance_extra(case, logs),
    )
    if interrupted:
        raise KeyboardInterrupt
    return record


def runtime_wrote(session: Session, runtime: Runtime) -> None:
    """Tell the run's warrant what ``runtime`` wrote into the session folder itself (its
    ``session_writes``: an SSH runtime's node provenance), so that the seal takes it as the
    run's."""
    for name in runtime.session_writes:
        session.wrote(session.root / name)


def _provenance_extra(case: Case, logs: RepeatLogs) -> dict[str, Any] | None:
    """Facts of the repeat beyond the runtime's: the page-cache drop where asked, the
    identity of a data set ``dlperf data`` prepared (its manifest's SHA-256), so that runs on
    two different copies of "ImageNet" are told apart, and an upstream source's current image
    with the software that differs from its pinned one."""
    extra: dict[str, Any] = {}
    if case.drop_caches:
        extra["cache_drop"] = cache_drop_status(logs)
    identity = dataset_sha256(case.data_dir)
    if identity:
        extra["dataset_sha256"] = identity
    if case.image != PINNED:  # the software difference the case runs with (`dlperf factor`)
        extra["image"] = {
            "choice": case.image,
            "name": source_image(case.source, case.image),
            "differs": image_differs(case),
        }
    return extra or None


def run_cases(
    cases: list[Case],
    session: Session,
    runtime: Runtime,
    *,
    printer: Printer = print,
    batch_resolver: Callable[[Case], int] | None = None,
    progress: str = "auto",
) -> RunSummary:
    """Run every repeat of every case into ``session``; ``progress``: auto (a rich bar on a
    terminal, plain lines elsewhere), plain, rich or off (lines without the summary)."""
    load("parsers", "launchers", "frameworks", "sources")
    summary = RunSummary()
    for message in runtime.clean_leftovers(session.root):
        printer(f"resume: {message}")
    with Progress(cases, printer, progress) as report:
        tracker = report.tracker
        for index, case in enumerate(cases, start=1):
            where = f"[case {index}/{len(cases)} {case.id}]"
            session.save_case(case)
            try:
                batch = _resolve_batch(case, session, runtime, printer, batch_resolver)
            except BatchSearchFailed as failure:
                summary.failed.append((case.id, 0, failure.verdict.value, failure.detail))
                tracker.stopped(case)
                report.line(f"{where} {failure.verdict.value.upper()}: {failure.detail}")
                continue  # the matrix goes on
            if batch is None:
                summary.failed.append((case.id, 0, "oom", "no batch size fits"))
                tracker.stopped(case)
                report.line(f"{where} OOM: no batch size fits")
                continue
            _run_repeats(case, batch, where, session, runtime, summary, report)
    return summary


def _run_repeats(
    case: Case,
    batch: int,
    where: str,
    session: Session,
    runtime: Runtime,
    summary: RunSummary,
    report: Progress,
) -> None:
    """The case's repeats not finished yet, in order, until one fails."""
    tracker = report.tracker
    for repeat in range(1, case.repeats + 1):
        prefix = f"{where} repeat {repeat}/{case.repeats}"
        done = session.finished(case, repeat)
        if done:
            summary.skipped += 1
            tracker.skipped(case)
            report.line(f"{prefix}: already finished ({done.throughput:.2f} samples/s), skipped")
            continue
        record = run_repeat(case, repeat, session, runtime, batch)
        wall_s = record.finished_at - record.started_at
        if record.ok:
            summary.finished += 1
            tracker.finished(case, wall_s)
            report.line(f"{prefix}: {record.throughput:.2f} samples/s ({wall_s:.1f} s)")
        else:
            summary.failed.append((case.id, repeat, record.verdict, record.detail))
            tracker.stopped(case)
            report.line(
                f"{prefix}: {record.verdict.upper()}: {record.detail} "
                f"(log: {session.repeat_dir(case, repeat)})"
            )
            break  # the case's remaining repeats wait for a resume; the matrix goes on


def _resolve_batch(
    case: Case,
    session: Session,
    runtime: Runtime,
    printer: Printer,
    resolver: Callable[[Case], int] | None,
) -> int | None:
    if case.batch_size != "max":
        return int(case.batch_size)
    path = session.case_dir(case) / "max-batch.json"
    # a batch size found earlier is taken only where the run may sign it (its seal held it as
    # it is): one written into the folder since is no measurement of this kit's
    if path.exists() and (session.warrant is None or session.warrant.holds(path)):
        import json

        return json.loads(path.read_text())["batch_size"]
    try:
        if resolver is None:  # the search runs its probes through this module's run_plan
            found = search_max_batch(case, session, runtime, run_plan, printer)
        else:
            found = resolver(case)
    finally:  # its probes are the run's, interrupted or not
        session.wrote(session.case_dir(case) / "batch-search")
        runtime_wrote(session, runtime)
    if found is not None:
        write_json(path, {"batch_size": found})
        session.wrote(path)
    return found
