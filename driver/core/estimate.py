"""What a selection will cost before it runs: expected wall time per case and in total.

Each case's step time comes from the nearest figure for the same model and precision on the
same hardware: the kit's released measurements (``reports/*/results.json``), else published
ones (``published/*/*.yaml``), preferring the same framework, then the nearest per-device
batch; a figure's per-device throughput is assumed to hold at the case's batch and device
count. Without such a figure, a FLOP estimate: training FLOPs per sample (the formula of the
model's workload, ``driver/workloads/``, else the kit's counted FLOPs of its released runs) at
:data:`ASSUMED_MFU` of the device's dense peak (``reports/peaks.yaml``). Every repeat adds
the kit's start-up, measured on its own released runs (a repeat's wall time less its steps).
A ``batch_size: max`` case adds its search (:data:`SEARCH_PROBES` short runs); an epoch case
(``epochs``/``epoch_samples``) counts the epoch's steps.

An estimate is a planning figure, not a measurement: a session records it beside what the run
took (``report/estimate.json``) so the next estimate can be judged.
"""

from __future__ import annotations

import json
import math
import re
import stat
import statistics
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any

from driver.core.released import Results, ResultsError
from driver.files import write_text
from driver.model.case import Case
from driver.model.figures import Figure, load_figures, load_peaks, match_device, peak_precision
from driver.model.plausible import Implausible, check_throughput
from driver.model.results import RecordError, RepeatRecord, load_record
from driver.parsers._upstream import PARALLEL_FIELDS
from driver.schema import ConfigError
from driver.workloads.base import find_workload
from driver.workloads.llama import DEFAULT_SIZE, LLAMA_WORKLOAD
from driver.workloads.llama import MODEL as LLAMA

REPO_ROOT = Path(__file__).resolve().parents[2]
# Fraction of the dense peak a FLOP estimate assumes: ResNet-50 and BERT training reach 30-50%
# on recent GPUs with AMP; lower is the cautious side for booking.
ASSUMED_MFU = 0.3
DEFAULT_STARTUP_S = 30.0  # when no released run of the kit shows its start-up
# A repeat's start-up (a process started, a framework imported, a model built) is taken as 1 s
# at least and a day at most: a record past that holds times no run has.
MIN_STARTUP_S = 1.0
MAX_STARTUP_S = 24 * 3600.0
MAX_RECORD_BYTES = 64 << 20  # a record is kilobytes; a larger file is not one
SEARCH_PROBES = 8  # batch=max: doubling from 16, then bisecting (driver.core.batchsearch)
# Llama's search on a GPU starts at the matrix's fixed batch (batchsearch.GPU_START) and the
# largest batch is a few sequences: one doubling that fails, one or two bisections.
LLAMA_SEARCH_PROBES = 3
# A Llama repeat's start on GPUs (process group, the model built and sharded, the first
# all-gathers) and a torch.compile warm-up, per size: assumed, not measured (no run of the kit
# on a GPU yet, and neither torchtitan nor NeMo publish one); the CPU runs' start-up does not
# stand for them. A measured start-up longer than these wins.
ASSUMED_LLAMA_STARTUP_S = {"llama3-1b": 30.0, "llama3-8b": 60.0, "llama3-70b": 180.0}
ASSUMED_COMPILE_S = 120.0
# The other models' repeat start on GPUs (the container, the framework's CUDA and NCCL set-up,
# cuDNN's autotuning in the first steps), on one node and across nodes: assumed, not measured,
# where the kit's measured start-up (CPU runs) is shorter.
ASSUMED_GPU_STARTUP_S = {"one node": 30.0, "several nodes": 60.0}
# One framework image made a container on every node of a Slurm job under pyxis (an NGC image
# of 10-20 GB pulled and squashed by enroot, the nodes in parallel): once per image and job,
# assumed, not measured.
ASSUMED_IMAGE_IMPORT_S = 300.0
# A validation sample costs its forward pass: a third of a training sample's FLOPs.
VALIDATION_COST = 1 / 3
SEARCH_STEPS = 5  # steps of one probe (batchsearch.PROBE_STEPS and its warm-up)
# A published figure of FP8 linear layers (NeMo's 8b-fp8, torchtitan's 8b-compile-float8) is
# imported as precision amp and marked so in its variant: the estimate of a bf16 case skips it.
FP8_VARIANT = re.compile(r"fp8|float8", re.IGNORECASE)
NOISE_WORDS = {"processor", "cpu"}  # in CPU model names, naming no model


def _llama_options(options: dict) -> dict:
    return {**LLAMA_WORKLOAD.planned_options, **options}


def shape_key(model: str, options: dict) -> str:
    """What a figure must share with a case beyond model and precision: a Llama figure holds
    for its size and sequence length only (a 1B figure says nothing of 8B); "" otherwise."""
    if model != LLAMA:
        return ""
    merged = _llama_options(options)
    return f"{merged['llama_size']} at {merged['seq_len']} tokens"




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
    shape: str = ""  # shape_key: a Llama figure's size and sequence length
    # what tells the peak column it computed in (amp_dtype, tf32: model.figures.peak_precision)
    peak_options: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class CaseEstimate:
    case_id: str
    seconds: float | None  # None: nothing to estimate from
    step_s: float | None
    basis: str  # where the step time came from, in words
    devices: int = 1  # the case's devices, for the device-hours it uses
    # "case", or "setup": a session's own cost that is no case's (a pyxis image import)
    kind: str = "case"


@dataclass(frozen=True)
class Knowledge:
    """What estimates are made from: figures, FLOPs per sample, device peaks, the start-up."""

    figures: list[KnownRate]
    flops_per_sample: dict[str, float]  # model -> measured by the kit's FLOP counter
    peaks: list[dict]
    startup_s: float
    startup_basis: str


def _startup(times: dict, steps: dict, where: str = "") -> float | None:
    """A repeat's start-up: its wall time (``times``: start to finish) less its steps
    (``steps``: the measured window, warm-up at the measured pace). None where that is not a
    start-up: not positive, or not finite; an Implausible naming ``where`` past a day."""
    warmup, measured = int(steps["warmup_steps"]), int(steps["measured_steps"])
    wall = float(times["finished_at"]) - float(times["started_at"])
    spent = wall - float(steps["duration_s"]) * (warmup + measured) / measured
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
            startup = _startup(record.model_dump(), record.measurement.model_dump(), str(path))
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
            _peak_tflops(figure.hardware, figure.precision, figure.peak_options, peaks)
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
            startup = _startup(repeat.model_dump(), measured.model_dump())
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
        options = {"llama_size": figure.llama_size, "seq_len": figure.seq_len}
        shape = {key: value for key, value in options.items() if value is not None}
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


def _published_per_device(figure: Figure) -> float:
    """Samples/s per device of a published figure: its throughput, or its tokens/s per device
    over the sequence length (``dlperf import``'s conversion)."""
    if figure.tokens_per_device is not None and figure.seq_len is not None:
        return figure.tokens_per_device / figure.seq_len
    return figure.throughput / figure.devices


def _words(text: str) -> set[str]:
    """A device name's words: "Tesla V100-SXM2-16GB" -> tesla, v100, sxm2, 16gb."""
    plain = text.lower().replace("(r)", "").replace("(tm)", "")
    return set(re.findall(r"[a-z0-9]+", plain)) - NOISE_WORDS


def _same_hardware(asked: str, named: str) -> bool:
    """``asked`` (what the user said or this host is) and a figure's device names are one
    hardware: the words of one are all in the other ("H100" in "NVIDIA H100 80GB HBM3", the
    label "AMD EPYC" in "AMD EPYC 7B13")."""
    mine, theirs = _words(asked), _words(named)
    return bool(mine and theirs) and (mine <= theirs or theirs <= mine)


def _nearest_figure(
    case: Case, batch: int, hardware: str, figures: list[KnownRate]
) -> KnownRate | None:
    usable = [
        f
        for f in figures
        if f.model == case.model
        and f.precision == case.precision
        and f.shape == shape_key(case.model, dict(case.options))
        and _same_hardware(hardware, f.hardware)
    ]
    if not usable:
        return None

    def distance(f: KnownRate) -> tuple:
        return (
            f.case_id != case.id,  # the very case measured before
            f.framework != case.framework,
            round(abs(math.log(f.batch_per_device / batch)), 9),
        )

    best = min(distance(f) for f in usable)
    nearest = [f for f in usable if distance(f) == best]  # every repeat or release of it
    places = sorted({f.where for f in nearest})
    where = places[0] if len(places) == 1 else f"{places[0]} and {len(places) - 1} more"
    return replace(
        nearest[0],
        per_device=statistics.median(f.per_device for f in nearest),
        where=f"median of {len(nearest)}, {where}" if len(nearest) > 1 else where,
    )


def _device_entry(hardware: str, peaks: list[dict]) -> dict | None:
    """The first ``reports/peaks.yaml`` entry a hardware name matches (either way round: "H100"
    names the SXM entry, "NVIDIA H100 80GB HBM3" holds its match)."""
    return match_device(hardware, peaks, either_way=True)


def _peak_tflops(
    hardware: str, precision: str, options: Mapping[str, Any], peaks: list[dict]
) -> float | None:
    """The dense peak of ``hardware`` in the column a run of ``precision`` and ``options``
    computes in (the release's rule: model.figures.peak_precision)."""
    entry = _device_entry(hardware, peaks) or {}
    return (entry.get("peaks") or {}).get(peak_precision(precision, options, entry))


def _case_peak(case: Case, hardware: str, peaks: list[dict]) -> float | None:
    """The dense peak ``case`` will compute at on ``hardware`` (its options and autocast dtype,
    auto before its run picks one); None where no hardware is named or no peak is known."""
    options = {**case.options, "amp_dtype": case.amp_dtype}
    return _peak_tflops(hardware, case.precision, options, peaks) if hardware else None


def _flops(case: Case, knowledge: Knowledge) -> float | None:
    """A sample's training FLOPs: its workload's formula at the options the case is planned
    with, else the kit's count of its released runs."""
    workload = find_workload(case.model)
    if workload is not None and workload.has_formula:
        return workload.flops_per_sample({**workload.planned_options, **case.options})
    return knowledge.flops_per_sample.get(case.model)


def step_seconds(
    case: Case, batch: int, hardware: str, knowledge: Knowledge
) -> tuple[float | None, str]:
    """Seconds of one training step of ``case`` at ``batch`` on ``hardware``, and where the
    figure came from. ``batch`` is a data-parallel replica's: a model-parallel layout's devices
    (the case's ``tensor_parallel`` x ``pipeline_parallel`` x ``context_parallel``) share each
    replica's samples, so a step trains batch x world / that product samples."""
    figure = _nearest_figure(case, batch, hardware, knowledge.figures)
    batch_per_device = batch / math.prod(int(case.options.get(n, 1)) for n in PARALLEL_FIELDS)
    if figure is not None:
        return batch_per_device / figure.per_device, (
            f"{figure.framework} bs{figure.batch_per_device} on {figure.hardware}: "
            f"{figure.per_device:.3g} samples/s per device ({figure.where})"
        )
    flops = _flops(case, knowledge)
    peak = _case_peak(case, hardware, knowledge.peaks)
    if flops and peak:
        return batch_per_device * flops / (peak * 1e12 * ASSUMED_MFU), (
            f"{flops / 1e9:.3g} GFLOP/sample at {ASSUMED_MFU:.0%} of {peak:g} TFLOP/s "
            "(reports/peaks.yaml)"
        )
    missing = "no figure for this model, precision and hardware"
    if not hardware:
        return None, f"{missing}; name the hardware (--hardware)"
    return None, f"{missing} yet, no peak for it: a first run there gives one"


def estimate_case(case: Case, hardware: str, knowledge: Knowledge) -> CaseEstimate:
    """Expected wall time of every repeat of ``case`` on ``hardware`` (a device name such as
    "H100" or "AMD EPYC"), its batch search included."""
    searched = case.batch_size == "max"
    # batch=max: its size is found at run time; the estimate takes twice the smallest fixed
    # batch the searches start from (a GPU's max is usually well above it); a Llama case's, the
    # largest batch its memory estimate fits on the device.
    batch = 2 * 16 if searched else int(case.batch_size)
    probes, startup, notes = SEARCH_PROBES, knowledge.startup_s, []
    if case.model == LLAMA:
        batch, probes, startup, notes = _llama_plan(case, batch, hardware, knowledge)
    elif _case_peak(case, hardware, knowledge.peaks):
        where = "one node" if case.topology.nodes == 1 else "several nodes"
        if ASSUMED_GPU_STARTUP_S[where] > startup:
            startup = ASSUMED_GPU_STARTUP_S[where]  # a GPU: the CPU runs' start-up is shorter
            notes.append(f"start-up {startup:.0f} s per repeat (assumed for GPUs on {where})")
    step, basis = step_seconds(case, batch, hardware, knowledge)
    if step is None:
        return CaseEstimate(
            case.id, None, None, "; ".join([basis, *notes]), case.topology.world_size
        )
    _warmup, _measured, total_steps = case.window_for(batch)
    epoch = _source_epoch(case)
    if epoch is not None:
        trained, validated = epoch
        global_batch = batch * case.topology.world_size
        total_steps = math.ceil(trained / global_batch) + VALIDATION_COST * math.ceil(
            validated / global_batch
        )
        notes.append(
            f"its code trains a whole epoch per repeat ({trained:,} samples, then "
            f"{validated:,} validated): {total_steps:,.0f} steps' time"
        )
    seconds = case.repeats * (startup + total_steps * step)
    if searched:
        seconds += probes * (startup + SEARCH_STEPS * step)
        basis += f"; batch search of {probes} probes, measured at batch {batch}"
    return CaseEstimate(
        case.id, seconds, step, "; ".join([basis, *notes]), case.topology.world_size
    )


def _source_epoch(case: Case) -> tuple[int, int] | None:
    """(samples trained, samples validated) per run of an upstream source whose pinned code
    trains a whole epoch whatever the window (``epoch_samples`` in its source.yaml); None for
    the others."""
    from driver.sources.base import SOURCES

    if case.source not in SOURCES:
        return None
    launches = getattr(getattr(SOURCES.get(case.source)(), "spec", None), "launches", {})
    launch = launches.get(case.model)
    if launch is None or launch.epoch_samples is None:
        return None
    return int(launch.epoch_samples), int(launch.validation_samples)


def image_import_estimates(cases: Iterable[Case], devices: int) -> list[CaseEstimate]:
    """Under pyxis, the job's first step of each framework image makes its named container on
    every node at once: one import per image per job (:data:`ASSUMED_IMAGE_IMPORT_S`), held by
    the job's ``devices``. Upstream sources' images are imported once on the login node
    beforehand (``make images``), not in the job."""
    from driver.core.matrix import KIT_SOURCE

    frameworks = sorted({case.framework for case in cases if case.source == KIT_SOURCE})
    return [
        CaseEstimate(
            f"image import: {framework} (pyxis, every node at once)",
            ASSUMED_IMAGE_IMPORT_S,
            None,
            "assumed: an NGC image of 10-20 GB pulled and squashed by enroot, once per job",
            devices,
            kind="setup",
        )
        for framework in frameworks
    ]


def _llama_plan(
    case: Case, batch: int, hardware: str, knowledge: Knowledge
) -> tuple[int, int, float, list[str]]:
    """A Llama case's (batch, search probes, start-up per repeat, notes): its batch ``max``
    from the memory estimate where the device's memory is known, its fit said where it is not
    sure, its start-up by size (assumed) where the kit has measured none as long."""
    from driver.workloads.llama import (
        USABLE_MEMORY,
        case_memory_bytes,
        largest_batch,
        memory_shards,
        resident_sequences,
    )

    options = dict(case.options)
    topology = case.topology
    notes = []
    size = str(options.get("llama_size", DEFAULT_SIZE))
    assumed = ASSUMED_LLAMA_STARTUP_S.get(size, 0.0)
    assumed += ASSUMED_COMPILE_S if options.get("compile") else 0.0
    startup = knowledge.startup_s
    if _case_peak(case, hardware, knowledge.peaks) and assumed > startup:
        startup = assumed  # a GPU: the CPU runs' start-up does not stand for it
        notes.append(f"start-up {assumed:.0f} s per repeat (assumed for {size} on GPUs)")
    memory = _device_memory(hardware, knowledge.peaks) if hardware else None
    if memory is None or "seq_len" not in options:
        return (2 if case.batch_size == "max" else batch), LLAMA_SEARCH_PROBES, startup, notes
    shards = memory_shards(options, topology.world_size, topology.devices_per_node)
    state, per_sequence = case_memory_bytes(options, topology.world_size, topology.devices_per_node)
    gib = 2**30
    if case.batch_size == "max":
        batch = largest_batch(options, topology.world_size, topology.devices_per_node, memory)
        if batch < 1:
            notes.append(
                f"by the memory estimate not one sequence fits {memory / gib:.0f} GiB "
                f"({state / gib:.0f} GiB of training state, {per_sequence / gib:.1f} GiB a "
                "sequence): planned at batch 1, which may run out of memory"
            )
            batch = 1
        else:
            notes.append(f"batch {batch} by the memory estimate on {memory / gib:.0f} GiB")
    elif state > memory * USABLE_MEMORY:
        notes.append(
            f"cannot fit: by the memory estimate its training state alone (weights, gradients "
            f"and AdamW moments over {shards} shard(s)) is {state / gib:.1f} GiB of the device's "
            f"{memory / gib:.0f} GiB; give it more devices to shard over"
        )
    else:
        need = state + resident_sequences(options, batch) * per_sequence
        if need > memory:
            notes.append(
                f"by the memory estimate it needs {need / gib:.1f} GiB of the device's "
                f"{memory / gib:.0f} GiB: it may run out of memory (a larger device, full "
                "checkpointing, more devices to shard over, or batch_size: max)"
            )
    return batch, LLAMA_SEARCH_PROBES, startup, notes


def largest_device_memory(root: Path = REPO_ROOT) -> float | None:
    """The largest device memory ``reports/peaks.yaml`` lists, in bytes (None: it lists none)."""
    devices = load_peaks(root / "reports" / "peaks.yaml")
    sizes = [d["memory_gib"] for d in devices if isinstance(d.get("memory_gib"), (int, float))]
    return max(sizes) * 2**30 if sizes else None


def _device_memory(hardware: str, peaks: list[dict]) -> float | None:
    """One device's memory in bytes (``reports/peaks.yaml``'s ``memory_gib``), where known."""
    gib = (_device_entry(hardware, peaks) or {}).get("memory_gib")
    return float(gib) * 2**30 if isinstance(gib, (int, float)) else None


def estimate_cases(
    cases: list[Case], hardware: str, knowledge: Knowledge | None = None
) -> list[CaseEstimate]:
    knowledge = knowledge or load_knowledge()
    return [estimate_case(case, hardware, knowledge) for case in cases]


def total_seconds(estimates: list[CaseEstimate]) -> float:
    """The estimated cases' sum (cases without an estimate count nothing: a lower bound)."""
    return sum(e.seconds for e in estimates if e.seconds is not None)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def plan_lines(estimates: list[CaseEstimate], startup_basis: str = "") -> list[str]:
    """The estimate as printed: one line per case, then the total."""
    lines = [f"{duration(e.seconds):>8}  {e.case_id}  ({e.basis})" for e in estimates]
    unknown = sum(e.seconds is None for e in estimates)
    total = duration(total_seconds(estimates))
    tail = f"; {unknown} case(s) not estimated: at least that" if unknown else ""
    start = f"; start-up per repeat: {startup_basis}" if startup_basis else ""
    cases = sum(e.kind == "case" for e in estimates)
    setup = len(estimates) - cases
    also = f" and {setup} image import(s)" if setup else ""
    lines.append(f"{total:>8}  total, {cases} case(s){also}{tail}{start}")
    known = [e for e in estimates if e.seconds is not None]
    if known and max(e.devices for e in known) > 1:
        used = sum(e.seconds * e.devices for e in known) / 3600  # type: ignore[operator]
        held = total_seconds(estimates) * max(e.devices for e in estimates) / 3600
        lines.append(
            f"{'':>8}  device-hours: {used:,.1f} used by the cases, {held:,.1f} held by a job "
            f"that keeps the largest topology's {max(e.devices for e in estimates)} devices "
            "throughout (a Slurm session's job)"
        )
    return lines


def repeat_seconds(estimate: CaseEstimate, repeats: int) -> float | None:
    """One repeat's share of a case's estimate (its start-up included)."""
    return None if estimate.seconds is None else estimate.seconds / max(1, repeats)


def setup_seconds(estimates: list[CaseEstimate]) -> float:
    """The session's own cost that is no case's (an image import), which every job repeats."""
    return sum(e.seconds or 0.0 for e in estimates if e.kind == "setup")


def split_job_count(
    estimates: list[CaseEstimate], limit_s: int, repeats: dict[str, int]
) -> int:
    """The jobs slurm.split_jobs would take for the selection, as the runtime splits it: the
    repeats in order, a new job (its setup first) whenever the next repeat does not fit."""
    setup = setup_seconds(estimates)
    jobs, left = 1, limit_s - setup
    for estimate in estimates:
        count = repeats.get(estimate.case_id, 1)
        one = repeat_seconds(estimate, count)
        if estimate.kind != "case" or one is None:
            continue
        for _ in range(max(1, count)):
            if one > left:
                jobs, left = jobs + 1, limit_s - setup
            left -= one
    return jobs


def time_limit_problem(
    estimates: list[CaseEstimate],
    limit_s: int,
    where: str,
    split: bool = False,
    repeats: dict[str, int] | None = None,
) -> str | None:
    """Why the estimated cases cannot fit a Slurm job of ``limit_s`` seconds, with the fix;
    None when they fit. ``split`` (slurm.split_jobs): the selection may take several jobs, so
    only a repeat (with the session's setup, which every job repeats) must fit one."""
    if split:
        setup = setup_seconds(estimates)
        for estimate in estimates:
            if estimate.kind != "case":
                continue
            one = repeat_seconds(estimate, (repeats or {}).get(estimate.case_id, 1))
            if one is not None and one + setup > limit_s:
                return (
                    f"a repeat of {estimate.case_id} is estimated at {duration(one + setup)} "
                    f"(the session's setup included), longer than slurm.time_limit "
                    f"{duration(limit_s)} ({where}): no job of the split selection could hold "
                    f"it; raise time_limit there to at least {math.ceil((one + setup) * 1.2 / 60)}"
                    " minutes, or measure fewer steps"
                )
        return None
    total = total_seconds(estimates)
    if total <= limit_s:
        return None
    return (
        f"the estimate, {duration(total)}, exceeds slurm.time_limit {duration(limit_s)} "
        f"({where}): raise time_limit there to at least {math.ceil(total * 1.2 / 60)} minutes "
        "(the estimate plus 20%), run fewer cases per job (--nodes/--gpus, --model, --amp, "
        "--repeats), or set split_jobs: true there to run the selection as several jobs"
    )


def record_actual(
    path: Path, estimates: list[CaseEstimate], actual_s: dict[str, float], wall_s: float
) -> dict:
    """``estimate.json``: each case's estimate beside the wall time its repeats took (a batch
    search's probes not included), and the session's estimate beside its wall time."""
    rows = [{**asdict(e), "actual_s": actual_s.get(e.case_id)} for e in estimates]
    data = {
        "cases": rows,
        "estimate_s": total_seconds(estimates),
        "repeats_s": sum(actual_s.values()),
        "wall_s": wall_s,
    }
    write_text(path, json.dumps(data, indent=2) + "\n")
    return data
