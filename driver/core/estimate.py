"""What a selection will cost before it runs: expected wall time per case and in total.

Each case's step time comes from the nearest figure for the same model and precision on the
same hardware: the kit's released measurements (``reports/*/results.json``), else published
ones (``published/*/*.yaml``), preferring the same framework, then the nearest per-device
batch; a figure's per-device throughput is assumed to hold at the case's batch and device
count. Without such a figure, a FLOP estimate: training FLOPs per sample (the formula of the
model's workload, ``driver/workloads/``, else the kit's counted FLOPs of its released runs) at
:data:`ASSUMED_MFU` of the device's dense peak (``reports/peaks.yaml``). Every repeat adds
the kit's start-up, measured on its own released runs (a repeat's wall time less its steps).
A ``batch_size: max`` case adds its search (:data:`SEARCH_PROBES` short runs, or its workload's
own count where its search starts near its end); an epoch case (``epochs``/``epoch_samples``)
counts the epoch's steps. A model's own start-up on GPUs and its memory (the batch a device
fits, a case that cannot fit) are its workload's answers (``driver/workloads/``).

What it is made from (figures, FLOP counts, peaks, the start-up) is read by
:mod:`driver.core.knowledge`. An estimate is a planning figure, not a measurement: a session
records it beside what the run took (``report/estimate.json``) so the next estimate can be
judged.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from driver.core.knowledge import (
    REPO_ROOT,
    Knowledge,
    KnownRate,
    device_entry,
    load_knowledge,
    peak_tflops,
    shape_key,
)
from driver.files import write_text
from driver.model.case import Case
from driver.model.figures import load_peaks
from driver.parsers._runheader import PARALLEL_FIELDS
from driver.workloads.base import Workload, find_workload

# Fraction of the dense peak a FLOP estimate assumes: ResNet-50 and BERT training reach 30-50%
# on recent GPUs with AMP; lower is the cautious side for booking.
ASSUMED_MFU = 0.3
SEARCH_PROBES = 8  # batch=max: doubling from 16, then bisecting (driver.core.batchsearch)
# A repeat's start on GPUs where its workload assumes none of its own (the container, the
# framework's CUDA and NCCL set-up, cuDNN's autotuning in the first steps), on one node and
# across nodes: assumed, not measured, where the kit's measured start-up (CPU runs) is shorter.
ASSUMED_GPU_STARTUP_S = {"one node": 30.0, "several nodes": 60.0}
# One framework image made a container on every node of a Slurm job under pyxis (an NGC image
# of 10-20 GB pulled and squashed by enroot, the nodes in parallel): once per image and job,
# assumed, not measured.
ASSUMED_IMAGE_IMPORT_S = 300.0
# A validation sample costs its forward pass: a third of a training sample's FLOPs.
VALIDATION_COST = 1 / 3
SEARCH_STEPS = 5  # steps of one probe (batchsearch.PROBE_STEPS and its warm-up)
NOISE_WORDS = {"processor", "cpu"}  # in CPU model names, naming no model


@dataclass(frozen=True)
class CaseEstimate:
    case_id: str
    seconds: float | None  # None: nothing to estimate from
    step_s: float | None
    basis: str  # where the step time came from, in words
    devices: int = 1  # the case's devices, for the device-hours it uses
    # "case", or "setup": a session's own cost that is no case's (a pyxis image import)
    kind: str = "case"


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


def _case_peak(case: Case, hardware: str, peaks: list[dict]) -> float | None:
    """The dense peak ``case`` will compute at on ``hardware`` (its options and autocast dtype,
    auto before its run picks one); None where no hardware is named or no peak is known."""
    options = {**case.options, "amp_dtype": case.amp_dtype}
    return peak_tflops(hardware, case.precision, options, peaks) if hardware else None


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
    workload = find_workload(case.model)
    # batch=max: its size is found at run time; the estimate takes twice the smallest fixed
    # batch the searches start from (a GPU's max is usually well above it); a workload whose
    # search starts near its end, its GPU start, or the largest batch its memory estimate fits.
    batch = 2 * 16 if searched else int(case.batch_size)
    probes = SEARCH_PROBES
    if workload is not None and workload.search_probes is not None:
        probes = workload.search_probes
        batch = (workload.search_start(case.precision) or batch) if searched else batch
    startup, notes = _startup(case, workload, hardware, knowledge)
    if workload is not None:
        batch, memory_notes = _memory_plan(case, workload, batch, hardware, knowledge.peaks)
        notes += memory_notes
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


def _startup(
    case: Case, workload: Workload | None, hardware: str, knowledge: Knowledge
) -> tuple[float, list[str]]:
    """A repeat's start-up and its note: the kit's measured one, or on a GPU (a peak known for
    the case) what is assumed there where that is longer, the workload's own (an LLM's by
    size) or :data:`ASSUMED_GPU_STARTUP_S`: the CPU runs' start-up does not stand for a GPU's."""
    startup = knowledge.startup_s
    if not _case_peak(case, hardware, knowledge.peaks):
        return startup, []
    assumed = workload.gpu_startup(dict(case.options)) if workload is not None else None
    if assumed is None:
        where = "one node" if case.topology.nodes == 1 else "several nodes"
        assumed = ASSUMED_GPU_STARTUP_S[where], f"GPUs on {where}"
    seconds, what = assumed
    if seconds <= startup:
        return startup, []
    return seconds, [f"start-up {seconds:.0f} s per repeat (assumed for {what})"]


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


def _memory_plan(
    case: Case, workload: Workload, batch: int, hardware: str, peaks: list[dict]
) -> tuple[int, list[str]]:
    """The batch a case is planned at and what its workload's memory estimate says of it on
    ``hardware``'s device (where its memory is known): a ``batch_size: max`` case at the largest
    batch that fits, a case whose training state cannot fit, or may not, named so."""
    memory = _device_memory(hardware, peaks) if hardware else None
    if memory is None:
        return batch, []
    options, topology = dict(case.options), case.topology
    plan = workload.memory(options, topology.world_size, topology.devices_per_node)
    if plan is None:
        return batch, []
    gib, sample = 2**30, workload.sample_name
    if case.batch_size == "max":
        batch = plan.largest_batch(memory)
        if batch >= 1:
            return batch, [f"batch {batch} by the memory estimate on {memory / gib:.0f} GiB"]
        return 1, [
            f"by the memory estimate not one {sample} fits {memory / gib:.0f} GiB "
            f"({plan.state / gib:.0f} GiB of training state, {plan.per_sample / gib:.1f} GiB a "
            f"{sample}): planned at batch 1, which may run out of memory"
        ]
    if plan.state > memory * plan.usable:
        return batch, [
            f"cannot fit: by the memory estimate its training state alone (weights, gradients "
            f"and AdamW moments over {plan.shards} shard(s)) is {plan.state / gib:.1f} GiB of the "
            f"device's {memory / gib:.0f} GiB; give it more devices to shard over"
        ]
    need = plan.state + workload.resident_samples(options, batch) * plan.per_sample
    if need > memory:
        return batch, [
            f"by the memory estimate it needs {need / gib:.1f} GiB of the device's "
            f"{memory / gib:.0f} GiB: it may run out of memory (a larger device, full "
            "checkpointing, more devices to shard over, or batch_size: max)"
        ]
    return batch, []


def largest_device_memory(root: Path = REPO_ROOT) -> float | None:
    """The largest device memory ``reports/peaks.yaml`` lists, in bytes (None: it lists none)."""
    devices = load_peaks(root / "reports" / "peaks.yaml")
    sizes = [d["memory_gib"] for d in devices if isinstance(d.get("memory_gib"), (int, float))]
    return max(sizes) * 2**30 if sizes else None


def _device_memory(hardware: str, peaks: list[dict]) -> float | None:
    """One device's memory in bytes (``reports/peaks.yaml``'s ``memory_gib``), where known."""
    gib = (device_entry(hardware, peaks) or {}).get("memory_gib")
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
