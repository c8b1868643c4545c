"""What estimates are made from: the figures measured or published for a model, precision and
hardware, the FLOPs per sample the kit counted, the devices' peaks and the kit's start-up.

Read from the user's own sessions first (``cases/**/record.json`` through the kit's record
type, the newest sessions first), then the kit's released measurements
(``reports/*/results.json``, through the release's reader), published figures
(``published/*/*.yaml``, through ``dlperf import``'s loader) and the device peaks
(``reports/peaks.yaml``). A figure past the plausible bounds or faster than its device can
compute is left out with one warning naming its file, never a traceback. The estimate made from
them is :mod:`driver.core.estimate`.
"""

from __future__ import annotations

import math
import re
import stat
import statistics
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from driver.core.released import Results, ResultsError
from driver.model.figures import Figure, load_figures, load_peaks, match_device, peak_precision
from driver.model.measure import RepeatMeasurement
from driver.model.plausible import Implausible, check_throughput
from driver.model.results import RecordError, RepeatRecord, load_record
from driver.schema import ConfigError
from driver.workloads.base import find_workload

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_STARTUP_S = 30.0  # when no released run of the kit shows its start-up
# A repeat's start-up (a process started, a framework imported, a model built) is taken as 1 s
# at least and a day at most: a record past that holds times no run has.
MIN_STARTUP_S = 1.0
MAX_STARTUP_S = 24 * 3600.0
MAX_RECORD_BYTES = 64 << 20  # a record is kilobytes; a larger file is not one
# A published figure of FP8 linear layers (NeMo's 8b-fp8, torchtitan's 8b-compile-float8) is
# imported as precision amp and marked so in its variant: the estimate of a bf16 case skips it.
FP8_VARIANT = re.compile(r"fp8|float8", re.IGNORECASE)


def shape_key(model: str, options: dict) -> str:
    """What a figure must share with a case beyond model and precision (its workload's
    :meth:`~driver.workloads.base.Workload.figure_shape`); "" for a model no module knows."""
    workload = find_workload(model)
    return "" if workload is None else workload.figure_shape(options)


@dataclass(frozen=True)
class KnownRate:
    """One measured or published throughput per device, as the estimate scales it: a rate, not
    a figure (the published figure itself, with its publisher and citation, is
    model.figures.Figure; a measured one is its session's record or its release's row)."""

    model: str
    framework: str
    precision: str
    hardware: str
    batch_per_device: int
    per_device: float  # samples/s per device
    where: str  # the file it came from
    case_id: str = ""  # the kit's case it measured ("" for a published figure)
    shape: str = ""  # shape_key: what the figure holds for (an LLM's size and sequence length)
    # what tells the peak column it computed in (amp_dtype, tf32: model.figures.peak_precision)
    peak_options: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Knowledge:
    """What estimates are made from: figures, FLOPs per sample, device peaks, the start-up."""

    figures: list[KnownRate]
    flops_per_sample: dict[str, float]  # model -> measured by the kit's FLOP counter
    peaks: list[dict]
    startup_s: float
    startup_basis: str


def _startup(started_at: float, finished_at: float, steps: RepeatMeasurement) -> float | None:
    """A repeat's start-up: its wall time (start to finish) less its steps (``steps``: the
    measured window, warm-up at the measured pace). None where that is not a start-up: not
    positive, or not finite; an Implausible past a day. Read from the fields, not from a dump
    of each whole model (two per repeat, 640 over the kit's releases)."""
    warmup, measured = int(steps.warmup_steps), int(steps.measured_steps)
    wall = float(finished_at) - float(started_at)
    spent = wall - float(steps.duration_s) * (warmup + measured) / measured
    if not math.isfinite(spent) or spent <= 0:
        return None
    if spent > MAX_STARTUP_S:
        raise Implausible(
            f"a start-up of {spent:.3g} s (wall time less the steps) is over a day: the "
            "record's times are wrong"
        )
    return spent


def _warn(where: object, why: object) -> None:
    print(f"warning: {where}: {why}; left out of the estimate", file=sys.stderr)


def _read_record(path: Path) -> RepeatRecord:
    """A session's ``record.json`` read through the kit's record type: a FIFO, a device or a
    file too large to be a record is refused before any read (a FIFO would block it)."""
    try:
        info = path.stat()
    except OSError as error:
        raise RecordError(f"{path}: cannot be read ({error.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise RecordError(f"{path}: not a regular file (a FIFO, a device?)")
    if info.st_size > MAX_RECORD_BYTES:
        raise RecordError(f"{path}: {info.st_size} bytes, more than a record ({MAX_RECORD_BYTES})")
    return load_record(path)


def _record_figure(record: RepeatRecord, where: str) -> KnownRate:
    """The figure of a finished repeat's record (its header's model, framework, precision and
    devices; its measured per-device throughput, held to ``plausible``'s bounds)."""
    measured, header = record.measurement, record.header
    assert measured is not None
    options = header.get("options")
    devices = header.get("devices") or []
    if not (
        isinstance(header.get("model"), str)
        and isinstance(header.get("framework"), str)
        and isinstance(options, dict)
        and isinstance(options.get("precision"), str)
        and isinstance(devices, list)
        and all(isinstance(d, str) for d in devices)
    ):
        raise RecordError("field header: no model, framework, options.precision or devices")
    check_throughput(measured.throughput, measured.world_size)
    return KnownRate(
        header["model"],
        header["framework"],
        options["precision"],
        " ".join(devices),
        record.batch_size,
        measured.throughput / measured.world_size,
        where,
        record.case_id,
        shape_key(header["model"], dict(options)),
        dict(options),
    )


def _session_figures(
    results: Path, limit: int = 2000, warn: Callable[[object, object], None] = _warn
) -> tuple[list[KnownRate], list[float]]:
    """Figures and start-ups of the finished repeats of the sessions under ``results`` (the
    user's own earlier runs: measured on the very hardware), newest sessions first and at most
    ``limit`` records read: every ``dlperf run`` starts with this, so its cost must not grow with
    the user's history. Each record is read through the kit's record type and its figures held
    to the plausibility bounds: one that fails (a FIFO, an unreadable or malformed file, a zero,
    negative or non-finite throughput, times no run has) is left out with one warning naming
    it (``warn``), never a traceback."""
    figures, startups = [], []
    for path in islice(_newest_records(results), limit):
        try:
            record = _read_record(path)
            if not record.ok or record.measurement is None:
                continue  # an unfinished or failed repeat: no figure, nothing wrong
            figure = _record_figure(record, f"session {path.relative_to(results).parts[0]}")
            startup = _startup(record.started_at, record.finished_at, record.measurement)
        except (RecordError, Implausible, ZeroDivisionError) as error:
            message = str(error).removeprefix(f"{path}: ")  # named once, by the warning
            warn(path, message)
            continue
        figures.append(figure)
        if startup is not None:
            startups.append(startup)
    return figures, startups


def _newest_records(results: Path) -> Iterator[Path]:
    """Every ``record.json`` under ``results``, the sessions last changed first (a name given
    with ``--session`` sorts anywhere); an older session is walked only while the newer ones
    did not reach the limit."""
    sessions = []
    for path in results.iterdir():
        try:
            if path.is_dir():
                sessions.append((path.stat().st_mtime, path))
        except OSError:
            continue  # vanished, or a symlink loop: no session
    for _mtime, session in sorted(sessions, key=lambda item: item[0], reverse=True):
        yield from sorted(session.glob("cases/**/record.json"))


def load_knowledge(root: Path = REPO_ROOT, results: Path | None = None) -> Knowledge:
    """The figures, FLOP counts, peaks and start-up under the kit folder ``root``, the user's
    own sessions under ``results`` first."""
    figures: list[KnownRate] = []
    startups: list[float] = []
    if results is not None and results.is_dir():
        figures, startups = _session_figures(results)
    flops: dict[str, float] = {}  # model -> measured by the kit's FLOP counter
    for path in sorted(root.glob("reports/*/results.json")):
        figures.extend(_released_rates(path, root, flops, startups))
    for path in sorted(root.glob("published/*/*.yaml")):
        figures.extend(_published_rates(path, root))
    peaks = load_peaks(root / "reports" / "peaks.yaml")
    figures = _within_peaks(figures, flops, peaks)
    if startups:
        startup = max(MIN_STARTUP_S, statistics.median(startups))
        basis = f"{startup:.0f} s, the median of {len(startups)} measured repeats"
    else:
        startup, basis = DEFAULT_STARTUP_S, "assumed (no released run)"
    return Knowledge(figures, flops, peaks, startup, basis)


def _within_peaks(
    figures: list[KnownRate], flops: dict[str, float], peaks: list[dict]
) -> list[KnownRate]:
    """The figures no faster than their device can compute: samples/s per device times the
    model's training FLOPs per sample at most the device's dense peak (reports/peaks.yaml). A
    figure past it is a forged or mislabelled one, left out with a warning naming it (it would
    make a Slurm job's time limit look ample)."""
    kept = []
    for figure in figures:
        per_sample = flops.get(figure.model)
        peak = (
            peak_tflops(figure.hardware, figure.precision, figure.peak_options, peaks)
            if figure.hardware
            else None
        )
        if per_sample and peak and figure.per_device * per_sample > peak * 1e12:
            _warn(
                figure.where,
                f"{figure.model} at {figure.per_device:.4g} samples/s per {figure.hardware} is "
                f"{figure.per_device * per_sample / 1e12:.4g} TFLOP/s, past the device's peak "
                f"{peak:g} TFLOP/s: no run measures that",
            )
            continue
        kept.append(figure)
    return kept


def _released_rates(
    path: Path, root: Path, flops: dict[str, float], startups: list[float]
) -> list[KnownRate]:
    """The per-device rates of a released version's cases (its ``results.json``, read by the
    release's own reader), adding to ``flops`` the FLOPs per sample its counter measured and to
    ``startups`` its local repeats' start-ups. A version it refuses, or a figure or start-up
    past the plausible bounds, is left out with one warning naming it. A rate names the
    version's results.csv: the same rows, as a person reads them."""
    table = path.with_name("results.csv").relative_to(root)
    try:
        results = Results.load(path)
    except ResultsError as error:
        _warn(path.relative_to(root), str(error).removeprefix(f"{path}: "))
        return []
    rates = []
    for row in results.cases:
        if not row.throughput_median:
            continue
        try:
            check_throughput(row.throughput_median, row.devices)
        except Implausible as error:
            _warn(f"{table} ({row.case_id})", error)
            continue
        rates.append(
            KnownRate(
                row.model,
                row.framework,
                row.precision,
                " ".join(row.device_names),
                row.batch_per_device,
                row.throughput_median / max(1, row.devices),
                str(table),
                row.case_id,
                shape_key(row.model, row.options),
                dict(row.options),
            )
        )
        if row.flops_per_sample:
            flops.setdefault(row.model, row.flops_per_sample)
    startups.extend(_released_startups(results, table))
    return rates


def _released_startups(results: Results, table: Path) -> list[float]:
    """The start-ups of a released version's local repeats that finished (one past a day is
    left out with a warning naming the version's ``table`` and the case)."""
    startups = []
    for repeat in results.repeats:
        measured = repeat.measurement
        if repeat.runtime != "local" or repeat.verdict != "ok" or not measured:
            continue
        if not measured.measured_steps:
            continue  # no measured step: no pace to take the start-up's steps from
        try:
            startup = _startup(repeat.started_at, repeat.finished_at, measured)
        except Implausible as error:
            _warn(f"{table} ({repeat.case_id})", error)
            continue
        if startup is not None:
            startups.append(startup)
    return startups


def _published_rates(path: Path, root: Path) -> list[KnownRate]:
    """The per-device rates of a file of published figures (``published/*/*.yaml``), read by
    ``dlperf import``'s loader: a file it refuses, or a figure past the plausible bounds, is
    left out with one warning naming it."""
    where = path.relative_to(root)
    try:
        loaded = load_figures(path)
    except ConfigError as error:
        _warn(where, f"{error.field_path}: {error.message}")
        return []
    rates = []
    for figure in loaded.figures:
        if FP8_VARIANT.search(figure.variant):
            continue  # an FP8 run (precision amp, marked in its variant) times no bf16 step
        per_device = _published_per_device(figure)
        try:
            check_throughput(per_device, 1, "per-device throughput")
        except Implausible as error:
            _warn(where, error)
            continue
        shape = _figure_options(figure)
        rates.append(
            KnownRate(
                figure.model,
                figure.framework,
                figure.precision,
                figure.hardware,
                figure.batch,
                per_device,
                str(where),
                shape=shape_key(figure.model, shape),
            )
        )
    return rates


def _figure_options(figure: Figure) -> dict[str, Any]:
    """The shape options a published figure states: its fields named as its workload's
    options (a Llama figure's size and sequence length)."""
    workload, fields = find_workload(figure.model), Figure.model_fields
    names = [name for name in (workload.options if workload else ()) if name in fields]
    stated = {name: getattr(figure, name) for name in names}
    return {name: value for name, value in stated.items() if value is not None}


def _published_per_device(figure: Figure) -> float:
    """Samples/s per device of a published figure: its throughput, or its tokens/s per device
    over the sequence length (``dlperf import``'s conversion)."""
    if figure.tokens_per_device is not None and figure.seq_len is not None:
        return figure.tokens_per_device / figure.seq_len
    return figure.throughput / figure.devices


def device_entry(hardware: str, peaks: list[dict]) -> dict | None:
    """The first ``reports/peaks.yaml`` entry a hardware name matches (either way round: "H100"
    names the SXM entry, "NVIDIA H100 80GB HBM3" holds its match)."""
    return match_device(hardware, peaks, either_way=True)


def peak_tflops(
    hardware: str, precision: str, options: Mapping[str, Any], peaks: list[dict]
) -> float | None:
    """The dense peak of ``hardware`` in the column a run of ``precision`` and ``options``
    computes in (the release's rule: model.figures.peak_precision)."""
    entry = device_entry(hardware, peaks) or {}
    return (entry.get("peaks") or {}).get(peak_precision(precision, options, entry))
