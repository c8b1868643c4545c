"""From repeat records to case summaries: median, spread, speedup, efficiency.

This is the one place where the statistics of a case are computed; the report, the release and
the audit all call :func:`summarize` so that a published table and its recomputation agree by
construction.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import ConfigDict

from driver.model.case import Case
from driver.model.measure import UNSTABLE_CV, CaseStats, RepeatMeasurement, case_stats, speedup
from driver.model.results import RepeatRecord
from driver.schema import StrictModel
from driver.workloads.base import find_workload

# CaseRow fields a release row has only for a published figure (the first versions' have none)
PUBLISHED_FIELDS = ("published_by", "published_url")

# The slow-node rule. A node holds a case back when its ranks' median window is more than
# SLOW_NODE_EXCESS longer than the other nodes' ranks' median window (the repeat's
# ``slowest_node_excess``, each window on its own rank's clock) in more than half of the case's
# repeats: one repeat's hiccup (a page-cache miss, a late wake-up) is not a slow node, a node
# that is late again and again is. 2% is the kit's own noise bound (UNSTABLE_CV): ranks that
# start together after the barrier and run the same steps end well within it unless one node
# is slower. Ranks that synchronise every step (all-reduce) end together whatever their node,
# so there the wait is spread over every rank and nobody is named; ``dlperf nodes`` runs every
# node alone and names such a node.
SLOW_NODE_EXCESS = 0.02


def rank_ranges(ranks: Iterable[int]) -> str:
    """``0-3, 6``: ranks as consecutive runs."""
    runs: list[list[int]] = []
    for rank in sorted(ranks):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)


@dataclass(frozen=True)
class SlowNode:
    """The node that held a case back (the rule above), as its repeats' records name it."""

    name: str  # the node's name in the repeats' commands (node<i>.log ran the i-th command)
    ranks: tuple[int, ...]
    excess: float  # the median of its slowest_node_excess over the repeats that flagged it
    flagged: int  # repeats in which it was over the threshold
    repeats: int  # the case's repeats

    def describe(self) -> str:
        return (
            f"slow node: {self.name} (ranks {rank_ranges(self.ranks)}), windows "
            f"{self.excess:.1%} longer than the other nodes' in {self.flagged}/{self.repeats} "
            "repeats"
        )


def node_name(record: RepeatRecord, node: int) -> str:
    """The name of node ``node`` (node<i>.log) of a repeat: the node its i-th command ran on."""
    return record.commands[node].node if node < len(record.commands) else f"node{node}"


def slow_node_of(records: Sequence[RepeatRecord]) -> SlowNode | None:
    """The node that held these repeats of one case back (the rule above), or None. Nodes are
    told apart by name: repeats of several sessions may number their nodes differently."""
    flagged: dict[str, list[tuple[tuple[int, ...], float]]] = defaultdict(list)
    for record in records:
        m = record.measurement
        if (
            m is None
            or m.slowest_node is None
            or m.slowest_node_excess is None
            or m.slowest_node_excess <= SLOW_NODE_EXCESS
        ):
            continue
        flagged[node_name(record, m.slowest_node)].append(
            (tuple(m.slowest_node_ranks or ()), m.slowest_node_excess)
        )
    if not flagged:
        return None
    name, hits = max(sorted(flagged.items()), key=lambda item: len(item[1]))
    if 2 * len(hits) <= len(records):
        return None
    return SlowNode(
        name=name,
        ranks=hits[-1][0],
        excess=statistics.median(excess for _ranks, excess in hits),
        flagged=len(hits),
        repeats=len(records),
    )


# Measured scaling above 100%. The efficiency is a ratio of two medians (the case's and its
# 1n1g's), each off by about its repeats' coefficient of variation, so the ratio is off by about
# their sum (first-order error propagation, one spread each: generous, since a median of several
# repeats varies less than one repeat). Below the kit's own noise floor (UNSTABLE_CV, 2%: also
# the tolerance `dlperf import` gives published figures) no efficiency is called superlinear.
SUPERLINEAR_FLOOR = UNSTABLE_CV


def superlinear_tolerance(cv: float, baseline_cv: float) -> float:
    return max(SUPERLINEAR_FLOOR, cv + baseline_cv)


# Marks a release column of CaseRow: written in a release's results files, never in a report.
RELEASE = "release column"
Number = int | float  # as the config or the computation gave it (an int stays an int)


class CaseRow(StrictModel):
    """One case as a flat row, every field named: report.csv/json, and a release's results.json
    and results.csv, whose rows (``row`` = "case") fill the release columns too. A new column
    is a field here and its value where the row is made (``CaseSummary.row``, or the release's
    ``driver.release.compute``); every file that holds rows follows."""

    # validated on assignment too: a release column set later is checked like the rest
    model_config = ConfigDict(frozen=False, validate_assignment=True)

    case_id: str
    model: str
    framework: str
    source: str
    nodes: int
    devices: int
    devices_per_node: int
    batch_per_device: int
    batch_setting: int | str  # the matrix setting: a number or "max"
    precision: str
    xla: bool
    dataset: str
    variant: str
    options: dict[str, Any]
    profile: str
    warmup_steps: int
    measured_steps: int
    repeats: int
    throughput_median: float
    throughput_min: float
    throughput_max: float
    cv: float
    unstable: bool
    speedup: float | None
    efficiency: float | None
    reported_by_source: bool
    versions: dict[str, Any]
    device_names: list[str]
    published_by: str | None = None  # an imported published figure (written only then)
    published_url: str | None = None
    # The release columns: the case's session, its MFU, its all-reduce scaling bound and the
    # nearest published reference (driver.release.compute), its repeats and its table.
    session: Annotated[str | None, RELEASE] = None
    flops_per_sample: Annotated[Number | None, RELEASE] = None
    peak_device: Annotated[str | None, RELEASE] = None
    peak_precision: Annotated[str | None, RELEASE] = None
    peak_tflops: Annotated[Number | None, RELEASE] = None
    mfu: Annotated[float | None, RELEASE] = None
    gradient_bytes: Annotated[int | None, RELEASE] = None
    probe_topology: Annotated[str | None, RELEASE] = None
    busbw_gbps: Annotated[Number | None, RELEASE] = None
    scaling_bound: Annotated[float | None, RELEASE] = None
    reference_id: Annotated[str | None, RELEASE] = None
    reference_framework: Annotated[str | None, RELEASE] = None
    reference_hardware: Annotated[str | None, RELEASE] = None
    reference_devices: Annotated[int | None, RELEASE] = None
    reference_batch_per_device: Annotated[int | None, RELEASE] = None
    reference_precision: Annotated[str | None, RELEASE] = None
    reference_throughput: Annotated[Number | None, RELEASE] = None
    reference_per_device: Annotated[Number | None, RELEASE] = None
    reference_link: Annotated[str | None, RELEASE] = None
    per_device: Annotated[float | None, RELEASE] = None
    ratio_per_device: Annotated[float | None, RELEASE] = None
    reference_source: Annotated[str | None, RELEASE] = None  # written only where one matched
    row: Annotated[Literal["case"] | None, RELEASE] = None  # a release's results rows say so
    repeat_throughputs: Annotated[list[float] | None, RELEASE] = None
    table: Annotated[str | None, RELEASE] = None
    # the machine, where a release splits cases by it (release.results.results_by_machine)
    fingerprint: Annotated[str | None, RELEASE] = None
    # Results schema 2 on: a measured case above 100% efficiency beyond its noise tolerance, and
    # the reason it was released with; who signed the case's session and the version.
    superlinear: Annotated[bool | None, RELEASE] = None
    superlinear_reason: Annotated[str | None, RELEASE] = None
    session_signature: Annotated[str | None, RELEASE] = None  # "signed" or "unsigned"
    session_signed_by: Annotated[str | None, RELEASE] = None  # the allowed-signers principal
    version_signature: Annotated[str | None, RELEASE] = None  # "signed" or "unsigned"
    # files of the case a person vouched for on resume (``dlperf run --adopt``): adopted, not
    # measured by this kit, whatever the session's signature (written only where true)
    adopted: Annotated[bool | None, RELEASE] = None

    def dump(self) -> dict[str, Any]:
        """The row as its file holds it. A report's row: every column but the release columns.
        A release's row: ``row`` first, and, as the released versions hold them, the
        reference's source only where one matched, the publisher's fields only for a published
        figure and the machine only where the release splits cases by machine."""
        if self.row is None:
            return self.model_dump(exclude=set(RELEASE_FIELDS))
        unmatched = {"reference_source"} if self.reference_source is None else set()
        if self.published_by is None:
            unmatched |= set(PUBLISHED_FIELDS)
        unmatched |= {name for name in SCHEMA_2_FIELDS if getattr(self, name) is None}
        if self.fingerprint is None:
            unmatched.add("fingerprint")
        return {"row": self.row, **self.model_dump(exclude=unmatched | {"row"})}


# Release columns that results schema 2 added (driver.release.results; written only where set).
SCHEMA_2_FIELDS = (
    "superlinear", "superlinear_reason", "session_signature", "session_signed_by",
    "version_signature", "adopted",
)  # fmt: skip
RELEASE_FIELDS = tuple(
    name for name, info in CaseRow.model_fields.items() if RELEASE in info.metadata
)


def device_model(devices: Iterable[str]) -> str:
    """The device model of a repeat, from its header's ``devices`` (the GPU name, or the CPU
    model where there is no GPU): one name, or several joined when a rank saw mixed devices."""
    return ", ".join(sorted(set(devices))) or "unknown device"


def hardware_label(devices: Iterable[str], devices_per_node: int) -> str:
    """Device model and count per node, as a table shows it: ``8 x NVIDIA A100-SXM4-80GB``."""
    return f"{devices_per_node} x {device_model(devices)}"


def image_label(facts: Any) -> str:
    """A record's ``image`` facts (a source's current image) in one line: the image, then the
    software that differs from the pinned one."""
    if not isinstance(facts, dict):
        return ""
    differs = "; ".join(str(item) for item in facts.get("differs", []))
    name = str(facts.get("name", facts.get("choice", "")))
    return f"{name} ({differs})" if differs else name


@dataclass
class CaseSummary:
    case: Case
    stats: CaseStats
    batch_size: int  # resolved (for 'max', the batch the search found)
    speedup: float | None
    efficiency: float | None
    throughputs: list[float]
    reported_by_source: bool = False
    versions: dict[str, Any] = field(default_factory=dict)
    devices: list[str] = field(default_factory=list)
    # What the benchmark script found at run time (header option ``amp_effective``): False when
    # an AMP case trained in FP32 because this build or device has no low-precision kernels.
    amp_effective: bool | None = None
    # An imported published figure (``dlperf import``): who published it; None when measured.
    published_by: str | None = None
    published_url: str | None = None
    # The speedup the publisher printed, used where no 1n1g figure of the same hardware exists.
    published_speedup: float | None = None
    machine: str = ""  # the host (rank 0's header) or, for a published figure, its system
    # A published figure whose hardware names no device model the kit knows
    # (``driver.release.imported.known_device``): marked in every table.
    unknown_device: bool = False
    # AMP's autocast dtype as the run's header says (float16, bfloat16), or as published; None:
    # not AMP or not known. The data set's identity (``dlperf data``'s manifest), "" if none.
    amp_dtype: str | None = None
    dataset_sha256: str = ""
    # An upstream source's case on its current image: the image and the software that differs
    # from the pinned one (the repeat's record, ``image``); "" on the pinned image.
    image: str = ""
    # Logs the kit did not launch (``dlperf import-logs``): what their records say, else "".
    imported: str = ""
    # The machine's hardware fingerprint label (driver/model/hardware.py) where the summaries are
    # split by machine; "" where they are split by device model only (the releases before
    # README layout 3, whose results the audit recomputes as they were published).
    fingerprint: str = ""
    # The node that held the case back (``slow_node_of``), or None.
    slow_node: SlowNode | None = None
    # The CV of the measured 1n1g its speedup is against (None: no such baseline, or published).
    baseline_cv: float | None = None
    # The topology its speedup and efficiency are against where that is not 1n1g: a Llama
    # series with no 1n1g case (Llama 3.1 8B does not fit one device) scales against the
    # smallest topology of the series measured, 1n8g say (:func:`_fill_speedups`).
    baseline_topology: str | None = None
    # The largest peak memory of any device over the case's repeats, as the scripts recorded it
    # (``driver.model.measure.PEAK_MEMORY_FIELDS``): the framework's count and its source, and
    # NVML's; None where a repeat's logs state none (other models' scripts, upstream sources).
    peak_memory_bytes: int | None = None
    peak_memory_source: str = ""
    peak_memory_nvml_bytes: int | None = None

    @property
    def superlinear_tolerance(self) -> float | None:
        """How far above 100% the efficiency of a measured case may be and still be noise:
        :func:`superlinear_tolerance` of its CV and its baseline's; None where it has none."""
        if self.baseline_cv is None:
            return None
        return superlinear_tolerance(self.stats.cv, self.baseline_cv)

    @property
    def superlinear(self) -> bool:
        """A measured multi-device case faster than perfect scaling beyond the noise: flagged in
        every table, and released only with a reason."""
        tolerance = self.superlinear_tolerance
        return (
            tolerance is not None
            and self.efficiency is not None
            and self.case.topology.world_size > 1
            and self.efficiency > 1 + tolerance
        )

    @property
    def case_id(self) -> str:
        return self.case.id

    @property
    def device_model(self) -> str:
        return device_model(self.devices)

    @property
    def hardware(self) -> str:
        return hardware_label(self.devices, self.case.topology.devices_per_node)

    @property
    def identity(self) -> str:
        """What "the same hardware" means for this case: its machine's fingerprint label where
        there is one, else its device model. Never pooled, never a baseline across it."""
        return self.fingerprint or self.device_model

    @property
    def key(self) -> tuple[str, str, str]:
        """A case's identity in every table: the case, its hardware, and whether (by whom) it
        was published rather than measured. Repeats with different keys are never pooled."""
        return (self.case.id, self.identity, self.published_by or "")

    def row(self, **release: Any) -> CaseRow:
        """One flat row, every field named (CSV/JSON); ``release``: its release columns."""
        c = self.case
        return CaseRow(
            case_id=c.id,
            model=c.model,
            framework=c.framework,
            source=c.source,
            nodes=c.topology.nodes,
            devices=c.topology.world_size,
            devices_per_node=c.topology.devices_per_node,
            batch_per_device=self.batch_size,
            batch_setting=c.batch_size,
            precision=c.precision,
            xla=c.xla,
            dataset=c.dataset,
            variant=c.variant,
            options=dict(c.options),
            profile=c.profile,
            warmup_steps=c.warmup_steps,
            measured_steps=c.measured_steps,
            repeats=self.stats.repeats,
            throughput_median=self.stats.median,
            throughput_min=self.stats.minimum,
            throughput_max=self.stats.maximum,
            cv=self.stats.cv,
            unstable=self.stats.unstable,
            speedup=self.speedup,
            efficiency=self.efficiency,
            reported_by_source=self.reported_by_source,
            versions=self.versions,
            device_names=self.devices,
            published_by=self.published_by,
            published_url=self.published_url,
            **release,
        )


def _case_summary(case: Case, records: list[RepeatRecord], fingerprint: str) -> CaseSummary:
    """One case's summary on one machine: its finished repeats' statistics and what their
    records and headers say of how it ran."""
    records.sort(key=lambda r: r.repeat)
    measurements = [r.measurement for r in records if r.measurement is not None]
    throughputs = [m.throughput for m in measurements]
    header = records[0].header
    return CaseSummary(
        case=case,
        stats=case_stats(throughputs),
        batch_size=records[0].batch_size,
        speedup=None,
        efficiency=None,
        throughputs=throughputs,
        reported_by_source=any(m.reported_by_source for m in measurements),
        versions=dict(header.get("versions", {})),
        devices=list(header.get("devices", [])),
        amp_effective=header.get("options", {}).get("amp_effective"),
        amp_dtype=header.get("options", {}).get("amp_dtype") or None,
        dataset_sha256=next(
            (str(r.extra["dataset_sha256"]) for r in records if "dataset_sha256" in r.extra), ""
        ),
        image=next((image_label(r.extra["image"]) for r in records if "image" in r.extra), ""),
        machine=str(header.get("hostname", "")),
        imported=next((r.extra["imported"] for r in records if "imported" in r.extra), ""),
        fingerprint=fingerprint,
        slow_node=slow_node_of(records),
        **peak_memory_of(measurements),
    )


def summarize(
    records: Iterable[tuple[Case, RepeatRecord] | tuple[Case, RepeatRecord, str]],
    published: Iterable[CaseSummary] = (),
) -> list[CaseSummary]:
    """Summaries of every case with at least one finished repeat, in a stable order: one per
    case and hardware (repeats on different hardware are never pooled into one median), beside
    the published figures given (``driver.release.imported``). A record may come with its
    machine's fingerprint label (``(case, record, label)``, from the door): then the cases are
    split by machine; otherwise by device model."""
    by_case: dict[tuple[str, str, str], tuple[Case, list[RepeatRecord]]] = {}
    for case, record, *label in records:
        if record.ok and record.measurement is not None:
            fingerprint = label[0] if label else ""
            key = (case.id, device_model(record.header.get("devices", [])), fingerprint)
            by_case.setdefault(key, (case, []))[1].append(record)
    summaries: list[CaseSummary] = list(published)
    for (_case_id, _device, fingerprint), (case, records_) in by_case.items():
        summaries.append(_case_summary(case, records_, fingerprint))
    _fill_speedups(summaries)
    summaries.sort(key=sort_key)
    return summaries


def peak_memory_of(measurements: Sequence[RepeatMeasurement]) -> dict[str, Any]:
    """A case's peak memory per device: the largest over its repeats, where every repeat's logs
    state one (else None: a peak of some repeats only would understate it)."""
    framework = [m.peak_memory_bytes for m in measurements]
    nvml = [m.peak_memory_nvml_bytes for m in measurements]
    sources = sorted({m.peak_memory_source for m in measurements if m.peak_memory_source})
    whole = bool(framework) and all(b is not None for b in framework)
    return {
        "peak_memory_bytes": max(b for b in framework if b is not None) if whole else None,
        "peak_memory_source": ", ".join(sources) if whole else "",
        "peak_memory_nvml_bytes": (
            max(b for b in nvml if b is not None) if nvml and None not in nvml else None
        ),
    }


def sort_key(summary: CaseSummary) -> tuple:
    c = summary.case
    return (
        c.model,
        c.precision,
        c.framework,
        c.source,
        str(c.batch_size),
        c.dataset,
        c.xla,
        c.variant,
        summary.published_by or "",
        summary.identity,
        c.topology.world_size,
        c.topology.nodes,
    )


def _baseline_key(summary: CaseSummary) -> tuple:
    return (*summary.case.group_key, summary.batch_size, summary.identity, summary.published_by)


def baseline_of(summary: CaseSummary, summaries: Iterable[CaseSummary]) -> CaseSummary | None:
    """The 1n1g case of the same model, framework, batch per device, precision and data, on
    the same hardware (``identity``: machine fingerprint, else device model), and measured (or
    published by the same publisher) as the case: the one baseline lookup (speedup,
    efficiency, the release's scaling bound)."""
    key = _baseline_key(summary)
    return next(
        (s for s in summaries if s.case.topology.world_size == 1 and _baseline_key(s) == key),
        None,
    )


def baselines(summaries: Iterable[CaseSummary]) -> dict[tuple, CaseSummary]:
    """Every 1n1g summary by its baseline key, the first of each key as ``baseline_of`` picks:
    one pass, so that filling the speedups of n cases costs n lookups, not n x n comparisons
    (an import file of 10,000 figures)."""
    index: dict[tuple, CaseSummary] = {}
    for s in summaries:
        if s.case.topology.world_size == 1:
            index.setdefault(_baseline_key(s), s)
    return index


def baseline_in(summary: CaseSummary, index: dict[tuple, CaseSummary]) -> CaseSummary | None:
    """``baseline_of`` through an index made by :func:`baselines`."""
    return index.get(_baseline_key(summary))


def _scales_from_smallest_topology(model: str) -> bool:
    """Its series may scale against its smallest topology where it has no 1n1g case (an LLM
    that does not fit one device: its workload says so); the other models keep DLPerf's
    1n1g-only speedup."""
    workload = find_workload(model)
    return workload is not None and workload.scales_from_smallest_topology


def smallest_topologies(summaries: Iterable[CaseSummary]) -> dict[tuple, CaseSummary]:
    """Per baseline key of a model that scales from its smallest topology, the summary of its
    smallest multi-device topology (fewest devices, then fewest nodes)."""
    index: dict[tuple, CaseSummary] = {}
    for s in summaries:
        topology = s.case.topology
        if topology.world_size == 1 or not _scales_from_smallest_topology(s.case.model):
            continue
        key = _baseline_key(s)
        held = index.get(key)
        size = (topology.world_size, topology.nodes)
        if held is None or size < (held.case.topology.world_size, held.case.topology.nodes):
            index[key] = s
    return index


def _fill_speedups(summaries: list[CaseSummary]) -> None:
    index = baselines(summaries)
    smallest = smallest_topologies(summaries)
    for s in summaries:
        base = baseline_in(s, index)
        devices = s.case.topology.world_size
        if base is None and s.published_speedup is not None:
            # no published 1n1g figure: the publisher's own speedup (their baseline)
            s.speedup, s.efficiency = s.published_speedup, s.published_speedup / devices
            continue
        if base is None:
            base = smallest.get(_baseline_key(s))
        if base is not None and base.case.topology.world_size > 1:
            # scaling against the smallest topology holding the model: its devices count as one
            s.baseline_topology = base.case.topology.label
            value = s.stats.median / base.stats.median
            s.speedup, s.efficiency = value, value * base.case.topology.world_size / devices
        else:
            s.speedup, s.efficiency = speedup(
                s.stats.median, base.stats.median if base else None, devices
            )
        if base is not None and not s.published_by:
            s.baseline_cv = base.stats.cv


def grouped(summaries: Iterable[CaseSummary]) -> dict[tuple[str, str], list[CaseSummary]]:
    """Tables are per model and precision, as in DLPerf's report."""
    tables: dict[tuple[str, str], list[CaseSummary]] = defaultdict(list)
    for s in summaries:
        tables[(s.case.model, s.case.precision)].append(s)
    return dict(tables)
