"""Reading each side's result, and checking that both sides did the same work.

The kit's throughput is its session's record (the window the kit always measures), its window
on this host's clock is read from its step log; the bare loop prints one result line saying
what it applied, read back from the framework. Every round fails unless that equals what the
kit's header of that round records (:func:`check_same_work`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from driver.model.case import Case
from driver.model.measure import LogParseError, Window, parse_logs
from driver.model.results import RECORD, RecordError, load_record
from driver.studies.bareloop import TAG as BARE_TAG
from driver.studies.parity.handing import handed_options
from driver.studies.parity.records import ParityError, ParityRequest, SideRun

SHAPE_KEYS = ("image_size", "num_classes", "channels_last")  # the shape columns of a side


def read_kit(session: Path, case: Case, request: ParityRequest, load: float) -> SideRun:
    """The kit's throughput from its session's record, as every reader takes it."""
    path = session / "cases" / case.id / "repeat-01" / RECORD
    try:
        record = load_record(path)
    except RecordError as error:
        raise ParityError(f"the kit's session gives no measurement: {error}") from None
    if not record.ok or record.measurement is None:
        raise ParityError(
            f"the kit's session gives no measurement: its repeat ended {record.verdict}: "
            f"{record.detail} ({path})"
        )
    measured = record.measurement
    header = record.header
    options = dict(header.get("options") or {})
    return SideRun(
        side="kit",
        throughput=measured.throughput,
        seconds=measured.duration_s,
        samples=measured.samples,
        model=str(header.get("model")),
        batch_size=int(options.get("batch_size", 0)),
        precision=str(options.get("precision")),
        parameters=int(options.get("parameters", 0)),
        device=str(options.get("device")),
        shape={key: options[key] for key in SHAPE_KEYS if key in options},
        options=handed_options(header, request.model),
        load_1min=load,
        session=str(session),
    )


def kit_window(session: Path, case: Case, request: ParityRequest) -> tuple[float, float]:
    """(start, end) of the kit's measured window on this host's monotonic clock."""
    repeat = session / "cases" / case.id / "repeat-01"
    try:
        logs = {p.name: p.read_text(errors="replace") for p in sorted(repeat.glob("node*.log"))}
        parsed = parse_logs("dlperf-jsonl", logs)
        window = Window(request.warmup_steps, request.measured_steps)
        points = {point.step: point.t for point in parsed.ranks[min(parsed.ranks)].points}
        return points[window.first], points[window.last]
    except (OSError, LogParseError, KeyError, ValueError) as error:
        raise ParityError(f"the kit's log in {repeat} has no window: {error}") from None


def read_bare(stdout: str, load: float) -> SideRun:
    records = []
    for line in stdout.splitlines():
        if BARE_TAG in line:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and BARE_TAG in record:
                records.append(record)
    if len(records) != 1:
        raise ParityError(
            f"the bare loop printed {len(records)} result lines ({BARE_TAG!r}), expected one"
        )
    record = records[0]
    try:
        # Several ranks: the slowest rank's window, every rank's samples (as the kit measures).
        seconds, steps = float(record["seconds"]), int(record["steps"])
        world = int(record.get("world_size") or 1)
        samples = steps * int(record["batch_size"]) * world
        if not (math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"seconds {seconds} is not a positive finite number")
        applied = dict(record.get("applied") or record.get("options") or {})
        cpu_seconds, threads = record.get("cpu_seconds"), int(record.get("threads") or 0)
        share = cpu_seconds / (seconds * threads * world) if cpu_seconds and threads else 0.0
        return SideRun(
            side="bare",
            throughput=samples / seconds,
            seconds=seconds,
            samples=samples,
            model=str(record["model"]),
            batch_size=int(record["batch_size"]),
            precision=str(record["precision"]),
            parameters=int(record["parameters"]),
            device=str(record["device"]),
            shape={key: applied[key] for key in SHAPE_KEYS if key in applied},
            options=applied,
            load_1min=load,
            cpu_share=max(0.0, float(share)),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ParityError(f"the bare loop's result line is malformed ({error}): {record}") from None


def check_same_work(bare: SideRun, kit: SideRun) -> None:
    """Both sides trained the same model at the same batch and precision, with every option
    the kit's header records for the computation applied alike by the bare loop."""
    for name in ("model", "batch_size", "precision", "parameters", "samples"):
        if getattr(bare, name) != getattr(kit, name):
            raise ParityError(
                f"the two sides differ in {name}: bare {getattr(bare, name)!r}, "
                f"kit {getattr(kit, name)!r}"
            )
    for key in sorted(set(bare.shape) & set(kit.shape)):
        if bare.shape[key] != kit.shape[key]:
            raise ParityError(
                f"the two sides differ in option {key}: bare {bare.shape[key]!r}, "
                f"kit {kit.shape[key]!r}"
            )
    differ = [
        f"{key}: bare {bare.options.get(key, '(not applied)')!r}, kit {kit.options[key]!r}"
        for key in sorted(kit.options)
        if key not in bare.options or not _same(bare.options[key], kit.options[key])
    ]
    if differ:
        raise ParityError(f"the two sides differ in option {'; '.join(differ)}")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        # Equal to a float32's precision: a framework may hold the learning rate in float32.
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=0.0)
    return bool(a == b)
