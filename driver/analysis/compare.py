"""``dlperf compare A B``: two versions or sessions, case by case, with a noise-aware verdict.

A change counts only when it stands out of both sides' spread: the repeats' ranges do not
overlap, the ratio of medians is further from 1 than twice the larger CV (and 1%), and, where
the repeat counts allow a two-sided Mann-Whitney U test to reach ``alpha`` at all, the test
rejects at ``alpha``. With DLPerf's 7 repeats per side the test can reach p = 0.0006; with 3
it cannot go below 0.1, so the range and CV criteria decide alone (the table says so).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scipy.stats import mannwhitneyu
from tabulate import tabulate

from driver.core.matrix import KIT_SOURCE
from driver.core.summary import CaseRow, CaseSummary
from driver.model.measure import CaseStats, case_stats
from driver.workloads.llama import MODEL as LLAMA

ALPHA = 0.05
MIN_CHANGE = 0.01
EXACT_LIMIT = 40  # exact U distribution up to this many repeats in total


@dataclass
class CaseView:
    """What compare and factor need of a case, from a version's results or a session."""

    case_id: str
    fields: dict[str, Any]  # model, framework, source, topology, batch_per_device, ...
    throughputs: list[float]
    speedup: float | None = None
    efficiency: float | None = None
    published_by: str | None = None  # an imported published figure (rate only)
    stats: CaseStats = field(init=False)

    def __post_init__(self) -> None:
        self.stats = case_stats(self.throughputs)


@dataclass
class Side:
    name: str
    kind: str  # version | session
    cases: dict[str, CaseView]


def software_label(versions: dict[str, Any]) -> str:
    """A run's library versions in one line (``python 3.11.7, torch 2.5.1``); "" if none."""
    return ", ".join(
        f"{name} {value}"
        for name, value in sorted(versions.items())
        if isinstance(value, (str, int, float)) and not isinstance(value, bool)
    )


def attention_of(row: CaseRow) -> str:
    """The attention kernel a Llama case trained with: an upstream source's ``attention``
    option (torchtitan 0.3.0's flex), the kit's own script's causal SDPA, a published
    figure's where its file says; "-" for the other models, which have no choice of it."""
    if row.model != LLAMA:
        return "-"
    given = row.options.get("attention")
    if given:
        return str(given)
    if row.source == KIT_SOURCE:
        return "sdpa"
    return "as published" if row.published_by else "unknown"


def _fields(
    row: CaseRow,
    machine: str = "",
    amp_dtype: str | None = None,
    data: str = "",
    image: str = "",
) -> dict[str, Any]:
    device = ", ".join(sorted(set(row.device_names))) or "unknown device"
    published = "as published" if row.published_by else "unknown"
    return {
        # what `dlperf factor` names where two paired cases differ beyond their case factors
        "amp_dtype": (amp_dtype or published) if row.precision == "amp" else "-",
        "software": software_label(row.versions) or published,
        "data": data or ("as published" if row.published_by else "no manifest"),
        # a source's current image and what differs from its pinned one (a published figure:
        # the pinned code as its publisher ran it)
        "image": image or "pinned",
        "attention": attention_of(row),
        "model": row.model,
        "framework": row.framework,
        "source": row.source,
        "topology": f"{row.nodes}n{row.devices}g",
        "nodes": row.nodes,
        "devices": row.devices,
        "batch": row.batch_per_device,
        "precision": row.precision,
        "dataset": row.dataset,
        "xla": "on" if row.xla else "off",
        "variant": row.variant,
        "device": device,
        "hardware": f"{row.devices_per_node} x {device}",
        "machine": machine or "unknown",
    }


def _view_key(summary: CaseSummary, ambiguous: set[str]) -> str:
    """A side's key of a case: its id, with the device model where the side holds the case on
    more than one, and the publisher for a published figure (never pooled, never confused)."""
    key = summary.case_id
    if summary.case_id in ambiguous:
        key += f" on {summary.device_model}"
    if summary.published_by:
        key += f" (published by {summary.published_by})"
    return key


def side_of_summaries(name: str, kind: str, summaries: list[CaseSummary]) -> Side:
    devices: dict[tuple[str, str], set[str]] = {}
    for s in summaries:
        devices.setdefault((s.case_id, s.published_by or ""), set()).add(s.device_model)
    ambiguous = {case_id for (case_id, _), models in devices.items() if len(models) > 1}
    cases = {
        _view_key(s, ambiguous): CaseView(
            s.case_id,
            _fields(s.row(), s.machine, s.amp_dtype, s.dataset_sha256, s.image),
            s.throughputs,
            speedup=s.speedup,
            efficiency=s.efficiency,
            published_by=s.published_by,
        )
        for s in summaries
    }
    return Side(name, kind, cases)


def load_side(text: str, reports_root: Path, results_root: Path) -> Side:
    """A released version (folder or name under reports/) or a session (folder or name)."""
    from driver.release.imported import imported_summaries, is_import_file
    from driver.schema import ConfigError

    path = Path(text)
    if is_import_file(path):
        try:
            return side_of_summaries(path.name, "published", imported_summaries(path))
        except ConfigError as error:
            raise SystemExit(f"error: {error}") from None
    candidates = [path, reports_root / text, results_root / text]
    for candidate in candidates:
        if (candidate / "manifest.json").exists() and (candidate / "results.json").exists():
            return _version_side(candidate)
        if (candidate / "session.json").exists():
            return _session_side(candidate)
    raise SystemExit(f"{text}: neither a released version nor a session folder")


def _version_side(folder: Path) -> Side:
    from driver.core.released import Results, ResultsError

    try:
        data = Results.load(folder / "results.json")
    except ResultsError as error:
        raise SystemExit(f"error: {error}") from None
    repeats: dict[str, list[tuple[int, float]]] = {}
    for row in data.repeats:
        if row.measurement is not None:
            repeats.setdefault(row.case_id, []).append((row.repeat, row.measurement.throughput))
    machines = _session_hosts(folder)
    cases = {}
    for case in data.cases:
        values = [t for _, t in sorted(repeats.get(case.case_id, []))]
        if case.published_by:  # a published figure: its one rate, no repeat rows
            values = list(case.repeat_throughputs)
        if values:
            # a published figure beside the measured case of the same id: its own key
            by = f" (published by {case.published_by})" if case.published_by else ""
            key = case.case_id + by
            cases[key] = CaseView(
                case.case_id,
                # a version's rows keep the case id, whose last part names a current image
                _fields(case, machines.get(case.session or "", ""), image=_image_of(case.case_id)),
                values,
                speedup=case.speedup,
                efficiency=case.efficiency,
                published_by=case.published_by,
            )
    return Side(folder.name, "version", cases)


def _image_of(case_id: str) -> str:
    """ "current" for the id of a case on a source's current image (``Case.id``), else ""."""
    return "current" if case_id.endswith("/current-image") else ""


def _session_hosts(folder: Path) -> dict[str, str]:
    """Session name -> its head node, from a version's manifest (a version case's machine)."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        return {str(s["name"]): str(s.get("head_node") or "") for s in manifest["sessions"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _session_side(folder: Path) -> Side:
    """A session's cases as its raw logs give them (``dlperf report``'s verification)."""
    from driver.core.summary import summarize
    from driver.verify.folder import verify_sessions

    verified = verify_sessions([folder])
    if verified.refused:
        raise SystemExit(
            "error: repeats whose record and logs disagree or cannot be read:\n"
            + "\n".join(f"  {problem}" for problem in verified.refused)
        )
    return side_of_summaries(folder.name, "session", summarize(verified.records))


# --------------------------------------------------------------------------------------------
# Statistics


def mann_whitney(a: list[float], b: list[float]) -> tuple[float, float]:
    """(U of ``a``, two-sided p), by scipy: the exact U distribution without ties for small
    samples, else the normal approximation with tie and continuity correction (the exact
    distribution assumes distinct values)."""
    if not a or not b:
        raise ValueError("both samples need values")
    values = [*a, *b]
    exact = len(set(values)) == len(values) and len(values) <= EXACT_LIMIT
    result = mannwhitneyu(a, b, alternative="two-sided", method="exact" if exact else "asymptotic")
    return float(result.statistic), min(1.0, float(result.pvalue))


def min_p_value(m: int, n: int) -> float:
    """The smallest two-sided p the exact test can give with these sample sizes."""
    return min(1.0, 2 / math.comb(m + n, m))


@dataclass(frozen=True)
class CompareVerdict:
    ratio: float
    p_value: float | None
    threshold: float
    label: str
    tested: bool  # the U test could reach alpha and took part


def verdict(a: list[float], b: list[float], alpha: float = ALPHA) -> CompareVerdict:
    """B against A (higher throughput is better)."""
    sa, sb = case_stats(a), case_stats(b)
    ratio = sb.median / sa.median
    threshold = max(2 * sa.cv, 2 * sb.cv, MIN_CHANGE)
    if len(a) < 2 or len(b) < 2:
        return CompareVerdict(ratio, None, threshold, "inconclusive (1 repeat)", False)
    _u, p = mann_whitney(a, b)
    tested = min_p_value(len(a), len(b)) <= alpha
    disjoint = sa.maximum < sb.minimum or sb.maximum < sa.minimum
    changed = disjoint and abs(ratio - 1) > threshold and (p <= alpha or not tested)
    if not changed:
        label = "within noise"
    else:
        label = "faster" if ratio > 1 else "slower"
    return CompareVerdict(ratio, p, threshold, label, tested)


# --------------------------------------------------------------------------------------------
# The comparison


def _compared(case_id: str, ca: CaseView, cb: CaseView, alpha: float) -> dict[str, Any]:
    """One common case's row: both sides' statistics and the verdict on B against A."""
    v = verdict(ca.throughputs, cb.throughputs, alpha)
    return {
        "case_id": case_id,
        "a_median": ca.stats.median,
        "a_cv": ca.stats.cv,
        "a_min": ca.stats.minimum,
        "a_max": ca.stats.maximum,
        "a_repeats": ca.stats.repeats,
        "b_median": cb.stats.median,
        "b_cv": cb.stats.cv,
        "b_min": cb.stats.minimum,
        "b_max": cb.stats.maximum,
        "b_repeats": cb.stats.repeats,
        "ratio": v.ratio,
        "p_value": v.p_value,
        "threshold": v.threshold,
        "u_test": v.tested,
        "verdict": v.label,
        "a_device": ca.fields["device"],
        "b_device": cb.fields["device"],
    }


def _table(rows: list[dict[str, Any]], a: Side, b: Side) -> str:
    """The common cases' rows as a Markdown table."""
    table = [
        [
            r["case_id"],
            f"{r['a_median']:.2f}",
            f"{r['a_cv']:.2%}",
            f"{r['a_min']:.2f}-{r['a_max']:.2f} ({r['a_repeats']})",
            f"{r['b_median']:.2f}",
            f"{r['b_cv']:.2%}",
            f"{r['b_min']:.2f}-{r['b_max']:.2f} ({r['b_repeats']})",
            f"{r['ratio']:.4f}",
            "-" if r["p_value"] is None else f"{r['p_value']:.4f}" + ("" if r["u_test"] else "*"),
            r["verdict"],
        ]
        for r in rows
    ]
    headers = [
        "case",
        f"{a.name} median",
        "CV",
        "min-max (repeats)",
        f"{b.name} median",
        "CV",
        "min-max (repeats)",
        "B/A",
        "U-test p",
        "verdict",
    ]
    return tabulate(table, headers=headers, tablefmt="github", disable_numparse=True)


def compare_sides(a: Side, b: Side, alpha: float = ALPHA) -> tuple[list[dict[str, Any]], str]:
    """Rows (one per common case) and the Markdown report."""
    rows = []
    for case_id in sorted(set(a.cases) & set(b.cases)):
        rows.append(_compared(case_id, a.cases[case_id], b.cases[case_id], alpha))
    out = [f"# {b.name} ({b.kind}) against {a.name} ({a.kind})", ""]
    if rows:
        out.append(_table(rows, a, b))
        counts: dict[str, int] = {}
        for r in rows:
            counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
        ratios = [r["ratio"] for r in rows]
        out += [
            "",
            f"{len(rows)} common case(s): "
            + ", ".join(f"{n} {label}" for label, n in sorted(counts.items()))
            + f"; median B/A {statistics.median(ratios):.4f}.",
        ]
    else:
        out.append("No case in common.")
    out.append(
        f"\nA case changes when the repeats' ranges do not overlap, |B/A - 1| exceeds twice the "
        f"larger CV (and {MIN_CHANGE:.0%}), and a two-sided Mann-Whitney U test gives p <= "
        f"{alpha} where the repeat counts allow it (* : too few repeats for p to reach "
        f"{alpha}; the range and CV criteria decide)."
    )
    across = [r for r in rows if r["a_device"] != r["b_device"]]
    if across:
        out.append(
            "\nOn different device models (the ratio is the hardware's as much as the "
            "kit's): "
            + ", ".join(f"`{r['case_id']}` ({r['a_device']} -> {r['b_device']})" for r in across)
        )
    published = [s.name for s in (a, b) if s.kind == "published"]
    if published:
        out.append(
            f"\n{', '.join(published)}: published figures (one figure per case, no repeats): "
            "never a measurement of this kit; the verdict cannot test them."
        )
    for side, other in ((a, b), (b, a)):
        only = sorted(set(side.cases) - set(other.cases))
        if only:
            out.append(f"\nOnly in {side.name}: " + ", ".join(f"`{c}`" for c in only))
    return rows, "\n".join(out) + "\n"
