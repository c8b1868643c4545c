"""Every number of a release, derived from its raw data and its config copies.

Per repeat (each through the door, ``driver.verify``): the window throughput recomputed from the
raw logs, and the telemetry summary.
Per case (through ``driver.core.summary.summarize``, the one statistics path): median, spread,
speedup, efficiency; then MFU (cached model FLOPs x device peaks), the all-reduce scaling bound
(probe bandwidth x gradient size) and the nearest published reference.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from driver.bench.contract import SHAPE_OPTIONS
from driver.core.report import table_title
from driver.core.summary import CaseRow, CaseSummary, baseline_of, summarize
from driver.model.case import Case
from driver.model.figures import match_device, mfu, peak_precision
from driver.release.dataset import Dataset, session_of, telemetry_summary
from driver.release.mfu import GRADIENT_BYTES_PER_PARAMETER, cost_key
from driver.release.references import Ours, nearest
from driver.release.scaling import scaling_bound
from driver.verify.hardware import ATTESTATION as ATTESTED
from driver.verify.repeat import VerifiedRepeat
from driver.workloads.base import default_image_size


@dataclass
class Marks:
    """What a version's rows say beside the numbers (README layout 5 on): who signed each
    session and the version (the manifest's ``signatures``), and the reason each case measured
    above 100% efficiency was released with (its ``superlinear``)."""

    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    version: dict[str, Any] = field(default_factory=dict)
    superlinear: dict[str, str] = field(default_factory=dict)

    def columns(self, summary: CaseSummary, session: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {"version_signature": self.version.get("status")}
        if summary.published_by:
            return out  # a published figure: in the version's files, no session of its own
        status = self.sessions.get(session or "", {})
        out.update(
            session_signature=status.get("status"),
            session_signed_by=status.get("principal"),
            superlinear=summary.superlinear,
            superlinear_reason=self.superlinear.get(summary.case_id) if summary.superlinear
            else None,
            adopted=any(p.startswith(f"cases/{summary.case_id}/") for p in status.get(
                "adopted", [])) or None,
        )  # fmt: skip
        return out

    def adopted_repeat(self, folder: str) -> bool:
        """Whether the repeat ``folder`` (``<session>/cases/<case>/repeat-NN``) holds a file its
        session's seal records as adopted, or its case's ``case.json`` is one."""
        session, _, rel = folder.partition("/")
        case_json = rel.rpartition("/")[0] + "/case.json"
        adopted = self.sessions.get(session, {}).get("adopted", [])
        return any(p == case_json or p.startswith(rel + "/") for p in adopted)


@dataclass
class Config:
    peaks: list[dict[str, Any]] = field(default_factory=list)
    references: list[dict[str, Any]] = field(default_factory=list)
    model_costs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # published figures (``dlperf import`` files in the version's config/published/)
    published: list[CaseSummary] = field(default_factory=list)
    # results schema 2 (schema 1 from README layout 3): cases split by machine fingerprint (else
    # by device model), and a reference attached only on the same device model and precision
    split_by_machine: bool = False
    marks: Marks | None = None  # README layout 5 on


@dataclass
class Computed:
    summaries: list[CaseSummary]
    repeats: list[VerifiedRepeat]  # by case id, repeat and session
    # summary key (case id, hardware, publisher) -> its row in the results files, release columns
    # filled: a published figure of a case beside the measured case on other hardware
    rows: dict[tuple[str, str, str], CaseRow]
    sessions_of: dict[str, str]  # case id -> session
    titles: dict[str, str]  # case id -> table title
    attested: set[str] = field(default_factory=set)  # sessions' hardware.json members
    telemetry: dict[str, dict[str, Any]] = field(default_factory=dict)  # folder -> summary
    adopted: set[str] = field(default_factory=set)  # repeat folders with adopted files


def compute(dataset: Dataset, config: Config) -> Computed:
    # every repeat of a dataset came through the door: its record holds what its logs measure
    repeats = sorted(dataset.repeats, key=lambda r: (r.case.id, r.record.repeat, session_of(r)))
    records = [
        (r.case, r.written.model_copy(update={"measurement": r.measurement}),
         *([r.fingerprint] if config.split_by_machine else []))
        for r in repeats
        if r.measurement is not None
    ]  # fmt: skip
    summaries = summarize(records, published=[copy.copy(s) for s in config.published])
    sessions_of = {r.case.id: session_of(r) for r in repeats}
    headers = {}
    for r in repeats:
        headers.setdefault(r.case.id, r.written.header)
    titles = {s.case_id: table_title(s) for s in summaries}
    marks = config.marks
    rows = {
        s.key: s.row(
            # a published figure: no MFU, bound or reference of ours
            **(
                {}
                if s.published_by
                else _release_columns(
                    s, summaries, headers.get(s.case_id, {}), sessions_of, dataset, config
                )
            ),
            row="case",
            repeat_throughputs=list(s.throughputs),
            table=titles[s.case_id],
            fingerprint=s.fingerprint or None,
            **(config.marks.columns(s, sessions_of.get(s.case_id)) if config.marks else {}),
        )  # fmt: skip
        for s in summaries
    }
    return Computed(
        summaries=summaries,
        repeats=repeats,
        rows=rows,
        sessions_of=sessions_of,
        titles=titles,
        attested={m for m in dataset.members if m.count("/") == 1 and m.endswith(ATTESTED)},
        telemetry={r.folder: telemetry_summary(r) for r in repeats},
        adopted={r.folder for r in repeats if marks and marks.adopted_repeat(r.folder)},
    )


def published_shapes(case: Case) -> bool:
    """The case runs the full-size model (no shape option away from its default)."""
    for key, value in case.options.items():
        if key not in SHAPE_OPTIONS:
            continue
        default = default_image_size(case.model) if key == "image_size" else SHAPE_OPTIONS[key]
        if value != default:
            return False
    return True


def _gradient_bytes(summary: CaseSummary, options: dict[str, Any], config: Config) -> int | None:
    if isinstance(options.get("gradient_bytes"), (int, float)):
        return int(options["gradient_bytes"])
    parameters = options.get("parameters")
    if not isinstance(parameters, int):
        cost = config.model_costs.get(cost_key(summary.case.model, summary.case.options))
        parameters = cost.get("parameters") if cost else None
    return parameters * GRADIENT_BYTES_PER_PARAMETER if isinstance(parameters, int) else None


def same_device(
    summary: CaseSummary, hardware: str, precision: str, peaks: list[dict[str, Any]]
) -> bool:
    """A reference stands beside a case only at the same precision and on the same device
    model: the same entry of config/peaks.yaml (``H100 SXM`` is ``NVIDIA H100 80GB HBM3``), or,
    for a device peaks.yaml does not list, the reference's name within the device's
    (``V100-SXM2-16GB`` in ``Tesla V100-SXM2-16GB``)."""
    if summary.case.precision != precision or not summary.devices:
        return False
    theirs = str(hardware or "")
    entry = match_device(theirs, peaks)
    for name in summary.devices:
        ours = match_device(name, peaks)
        if entry is not None or ours is not None:
            if ours is not entry:
                return False
        elif not theirs or theirs.lower() not in name.lower():
            return False
    return True


def _mfu_columns(
    summary: CaseSummary, options: dict[str, Any], config: Config
) -> dict[str, Any]:
    """The case's FLOPs per sample, its device's peak at its precision, and its MFU."""
    case = summary.case
    out: dict[str, Any] = {}
    cost = config.model_costs.get(cost_key(case.model, case.options))
    device = summary.devices[0] if summary.devices else None
    peak = match_device(device, config.peaks)
    if cost:
        out["flops_per_sample"] = cost.get("flops_per_sample")
    if peak:
        precision = peak_precision(case.precision, options)
        out["peak_device"] = peak.get("name")
        out["peak_precision"] = precision
        out["peak_tflops"] = (peak.get("peaks") or {}).get(precision)
    out["mfu"] = mfu(
        summary.stats.median,
        out.get("flops_per_sample"),
        case.topology.world_size,
        out.get("peak_tflops"),
    )
    return out


def _scaling_columns(
    summary: CaseSummary,
    summaries: list[CaseSummary],
    options: dict[str, Any],
    session: str | None,
    dataset: Dataset,
    config: Config,
) -> dict[str, Any]:
    """A multi-device case's gradient size, the all-reduce probe of its session nearest its
    topology, and the scaling bound they give from its baseline's step time."""
    case = summary.case
    devices = case.topology.world_size
    out: dict[str, Any] = {}
    if devices > 1:
        out["gradient_bytes"] = _gradient_bytes(summary, options, config)
        probes = [
            p for p in dataset.probes if p["session"] == session and p["world_size"] == devices
        ]
        probes.sort(key=lambda p: (p["topology"] != case.topology.label, p["topology"]))
        base = baseline_of(summary, summaries)
        if probes:
            out["probe_topology"] = probes[0]["topology"]
            out["busbw_gbps"] = probes[0]["busbw_gbps"]
        if probes and base and out["gradient_bytes"]:
            step_time = summary.batch_size / base.stats.median
            out["scaling_bound"] = scaling_bound(
                step_time, out["gradient_bytes"], devices, out["busbw_gbps"]
            )
    return out


def _reference_columns(summary: CaseSummary, config: Config) -> dict[str, Any]:
    """The nearest published result (only for the published models' shapes)."""
    case = summary.case
    if not published_shapes(case):
        return {}
    reference = nearest(
        Ours(
            model=case.model,
            framework=case.framework,
            precision=case.precision,
            devices=case.topology.world_size,
            batch_per_device=summary.batch_size,
            xla=case.xla,
            dataset=case.dataset,
            device_names=tuple(summary.devices),
            throughput=summary.stats.median,
        ),
        [  # like with like only (layout 3): else nothing is stored beside the case
            r
            for r in config.references
            if same_device(summary, str(r.get("hardware")), str(r.get("precision")), config.peaks)
        ]
        if config.split_by_machine
        else config.references,
    )
    return reference or {}


def _release_columns(
    summary: CaseSummary,
    summaries: list[CaseSummary],
    header: dict[str, Any],
    sessions_of: dict[str, str],
    dataset: Dataset,
    config: Config,
) -> dict[str, Any]:
    """A measured case's release columns (``CaseRow``): its session, MFU, scaling bound and
    nearest published reference."""
    options = dict(header.get("options") or {})
    session = sessions_of.get(summary.case.id)
    return {
        "session": session,
        **_mfu_columns(summary, options, config),
        **_scaling_columns(summary, summaries, options, session, dataset, config),
        **_reference_columns(summary, config),
    }
