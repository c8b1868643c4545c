"""DLPerf-style tables, written as Markdown, CSV and JSON from case summaries.

Per model and precision, and per batch size and dataset inside it: one row per series
(framework, with its source, XLA and option variant) and topology (node num / device num), with
the throughput median, speedup, efficiency and CV, then the median and geometric mean across
series. Unstable cells (CV > 2%) carry a mark, and anything that is not the DLPerf protocol gets
a footnote.

``dlperf report`` prints only what the raw logs give: its records come through the door
(``driver.verify``), which re-measures every repeat from its logs and refuses, by file, a
repeat that cannot be trusted.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tabulate import tabulate

from driver.bench.contract import SHAPE_OPTIONS
from driver.core.footnotes import (
    NVML_MEMORY_HEADER,
    PEAK_MEMORY_HEADER,
    SUPERLINEAR_MARK,
    UNSTABLE_MARK,
    footnotes,
    series_name,
)
from driver.core.summary import CaseSummary, grouped, rank_ranges
from driver.csvsafe import csv_text
from driver.files import KitWriteError, ensure_dir, write_text
from driver.model.figures import load_peaks, match_device, mfu, peak_precision
from driver.text import markdown_inline
from driver.workloads.base import find_workload, model_title


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def throughput_cell(summary: CaseSummary) -> str:
    text = _fmt(summary.stats.median)
    if summary.published_by:
        return text  # the series says who published it; a published figure has no spread
    if summary.reported_by_source:
        text += " (r)"
    if summary.imported:
        text += " (i)"
    if summary.stats.unstable:
        text += f" {UNSTABLE_MARK}"
    return text


def efficiency_cell(summary: CaseSummary) -> str:
    if summary.efficiency is None:
        return "-"
    mark = f" {SUPERLINEAR_MARK}" if summary.superlinear else ""
    return f"{summary.efficiency:.2%}{mark}"


def speedup_cell(summary: CaseSummary) -> str:
    against = f" (vs {summary.baseline_topology})" if summary.baseline_topology else ""
    return (
        _fmt(summary.speedup) + against + (f" {SUPERLINEAR_MARK}" if summary.superlinear else "")
    )


@dataclass(frozen=True)
class ExtraColumn:
    """A column added to every series of a table (e.g. MFU, a scaling bound), placed right after
    the series' ``after`` column; a table shows it only where one of its cells is not "-"."""

    header: str
    cell: Callable[[CaseSummary], str]
    after: str = "CV"


BASE_COLUMNS = ("samples/s", "speedup", "efficiency", "CV")


def tokens_per_second(summary: CaseSummary, per_device: bool = False) -> float | None:
    """A token model's median throughput in tokens/s (samples/s x sequence length), over all
    devices or per device; None for models whose samples are no token sequences."""
    workload = find_workload(summary.case.model)
    options = {**SHAPE_OPTIONS, **summary.case.options}
    tokens = None if workload is None else workload.tokens_per_sample(options)
    if tokens is None:
        return None
    rate = summary.stats.median * tokens
    return rate / summary.case.topology.world_size if per_device else rate


def _tokens_cell(per_device: bool) -> Callable[[CaseSummary], str]:
    def cell(summary: CaseSummary) -> str:
        rate = tokens_per_second(summary, per_device)
        return "-" if rate is None else _fmt(rate)

    return cell


# Token models (Llama) beside samples/s: tokens/s over all devices and per device.
TOKEN_COLUMNS = (
    ExtraColumn("tokens/s", _tokens_cell(False), after="samples/s"),
    ExtraColumn("tokens/s/device", _tokens_cell(True), after="samples/s"),
)


@functools.cache
def _peaks() -> tuple[dict[str, Any], ...]:
    """``reports/peaks.yaml``, read once a process (a ConfigError names a bad entry)."""
    return tuple(load_peaks())


def session_mfu(summary: CaseSummary) -> float | None:
    """The MFU of a measured case against its device's dense peak at the precision it ran in,
    with no torch needed: FLOPs by the formula of its sizes (Llama), or as PyTorch's counter
    counted a counted model at its default shape (ResNet-50, InceptionV3, BERT); None at other
    shapes of a counted model (a release counts them), for published figures and for devices
    ``reports/peaks.yaml`` does not list."""
    workload = find_workload(summary.case.model)
    options = {**SHAPE_OPTIONS, **summary.case.options}
    flops = None
    if workload is not None:
        flops = workload.flops_per_sample(options)
        if flops is None:
            flops = workload.counted_flops_per_sample(options)
    if flops is None or summary.published_by or not summary.devices:
        return None
    entry = match_device(summary.devices[0], list(_peaks()))
    if entry is None:
        return None
    # The run's autocast dtype (its header's) and the TF32 math its case turned on.
    ran = {"amp_dtype": summary.amp_dtype, "tf32": summary.case.options.get("tf32")}
    precision = peak_precision(summary.case.precision, ran)
    peak = (entry.get("peaks") or {}).get(precision)
    return mfu(summary.stats.median, flops, summary.case.topology.world_size, peak)


def _mfu_cell(summary: CaseSummary) -> str:
    value = session_mfu(summary)
    return "-" if value is None else f"{value:.1%}"


MFU_HEADER = "MFU"
# A session's MFU where the FLOPs need no model to count now: a formula, or a count made at the
# model's default shape (a release adds its own column, of every shape it counts, in its place).
MFU_COLUMN = ExtraColumn(MFU_HEADER, _mfu_cell, after="CV")


GIB = 2**30


def _gib_cell(field: str) -> Callable[[CaseSummary], str]:
    def cell(summary: CaseSummary) -> str:
        peak = getattr(summary, field)
        return "-" if peak is None else _fmt(peak / GIB)

    return cell


MEMORY_COLUMNS = (
    ExtraColumn(PEAK_MEMORY_HEADER, _gib_cell("peak_memory_bytes"), after="CV"),
    ExtraColumn(NVML_MEMORY_HEADER, _gib_cell("peak_memory_nvml_bytes"), after="CV"),
)


def table_title(summary: CaseSummary) -> str:
    """The heading of the table a case's row is in (without the Markdown hashes)."""
    c = summary.case
    batch = summary.batch_size
    label = f"bsz={batch}" if c.batch_size != "max" else f"bsz=max ({batch})"
    return (
        f"{model_title(c.model)}, {c.precision.upper()}, "
        f"{label} per device, {c.dataset} data"
    )


def tables(summaries: list[CaseSummary]) -> list[tuple[str, list[CaseSummary]]]:
    """(title, cases) of every table, in report order: per model and precision, then per batch
    setting and dataset."""
    out: list[tuple[str, list[CaseSummary]]] = []
    for (_model, _precision), items in sorted(grouped(summaries).items()):
        by_setting: dict[tuple, list[CaseSummary]] = defaultdict(list)
        for s in items:
            by_setting[(str(s.case.batch_size), s.batch_size, s.case.dataset)].append(s)
        for _key, group in sorted(by_setting.items()):
            out.append((table_title(group[0]), group))
    return out


def markdown_tables(
    summaries: list[CaseSummary],
    heading_level: int = 3,
    extra_columns: Sequence[ExtraColumn] = (),
    after_table: Callable[[str, list[CaseSummary]], str] | None = None,
    extra_notes: Sequence[str] = (),
    name_slow_nodes: bool = True,
    plain: bool = False,
) -> str:
    """Every table: one row per series and topology, split by machine (else by device model),
    with median and geometric-mean rows across series. ``name_slow_nodes``: a note per case
    that one node held back (``driver.core.summary.SlowNode``). ``plain``: for a terminal, not
    a Markdown file: aligned columns, headings and notes as text, nothing escaped."""
    out: list[str] = []
    hashes = "#" * heading_level
    for title, group in tables(summaries):
        out.append(f"{title}\n{'=' * len(title)}" if plain else f"{hashes} {title}\n")
        out.append(long_table(group, extra_columns, plain=plain))
        out.append("")
        if after_table is not None:
            out.append(after_table(title, group))
            out.append("")
    notes = footnotes(summaries) + list(extra_notes)
    if name_slow_nodes:
        notes += slow_node_notes(summaries)
    if any(across_series(group) for _title, group in tables(summaries)):
        unit = "machine" if by_machine(summaries) else "device model"
        notes.append(
            f"{MEDIAN_LABEL} / {GEOMEAN_LABEL}: across the series of the table on one {unit} at "
            f"that topology (speedup and efficiency; never across {unit}s)."
        )
    if notes:
        out.append("Notes:\n")
        shown = str if plain else markdown_inline  # they quote free text
        out.extend(f"- {shown(note)}" for note in notes)
        out.append("")
    return "\n".join(out)


def slow_node_notes(summaries: Sequence[CaseSummary]) -> list[str]:
    """One line per case that one node held back: which node, its ranks, by how much."""
    return [f"{s.case_id}: {s.slow_node.describe()}." for s in summaries if s.slow_node]


MEDIAN_LABEL = "median"
GEOMEAN_LABEL = "geometric mean"


def _geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def shows_device(group: Sequence[CaseSummary]) -> bool:
    """A device column where a table holds more than one device model, or published figures."""
    return len({s.identity for s in group}) > 1 or any(s.published_by for s in group)


def by_machine(summaries: Sequence[CaseSummary]) -> bool:
    """Summaries split by machine fingerprint (else by device model: the first releases)."""
    return any(s.fingerprint for s in summaries)


def identity_header(group: Sequence[CaseSummary]) -> str:
    """The column naming what each row ran on: the machine where rows carry fingerprints."""
    return "machine" if by_machine(group) else "device"


def _topology(s: CaseSummary) -> tuple[int, int]:
    return (s.case.topology.nodes, s.case.topology.world_size)


def across_series(
    group: Sequence[CaseSummary],
) -> list[tuple[str, tuple[int, int], int, list[float], list[float]]]:
    """(device model, (nodes, devices), series, speedups, efficiencies) per device model and
    multi-device topology where two or more series have a speedup: the rows of the median and
    geometric mean across series. Never across device models, and only speedups against 1n1g
    (one against 1n8g is another unit)."""
    cells: dict[tuple[str, tuple[int, int]], list[CaseSummary]] = defaultdict(list)
    for s in group:
        against_1n1g = s.baseline_topology is None
        if against_1n1g and s.speedup is not None and s.efficiency is not None and (
            s.case.topology.world_size > 1
        ):
            cells[(s.identity, _topology(s))].append(s)
    out = []
    for (device, topology), items in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1][1])):
        if len(items) > 1:
            speedups = [s.speedup for s in items if s.speedup is not None]
            efficiencies = [s.efficiency for s in items if s.efficiency is not None]
            out.append((device, topology, len(items), speedups, efficiencies))
    return out


def long_table(
    group: list[CaseSummary], extra_columns: Sequence[ExtraColumn] = (), plain: bool = False
) -> str:
    """One row per series and topology (rows of one device model together, labelled where the
    table has more than one), then the median and geometric mean across series; ``plain``: as
    text for a terminal (see :func:`markdown_tables`)."""
    text = str if plain else markdown_inline
    own_mfu = () if any(e.header == MFU_HEADER for e in extra_columns) else (MFU_COLUMN,)
    candidates = (*TOKEN_COLUMNS, *own_mfu, *MEMORY_COLUMNS, *extra_columns)
    extras = [e for e in candidates if any(e.cell(s) != "-" for s in group)]
    columns: list[tuple[str, Callable[[CaseSummary], str] | None]] = []
    for base in BASE_COLUMNS:
        columns.append((base, None))
        columns += [(e.header, e.cell) for e in extras if e.after == base]
    device_column = shows_device(group)
    headers = [*([identity_header(group)] if device_column else []), "series", "node num"]
    headers.append("device num")
    headers += [title for title, _ in columns]
    ordered = sorted(
        group,
        key=lambda s: (s.identity, series_name(s), *_topology(s)[::-1]),
    )
    rows: list[list[Any]] = []
    for s in ordered:
        base_cells = {
            "samples/s": throughput_cell(s),
            "speedup": speedup_cell(s),
            "efficiency": efficiency_cell(s),
            "CV": "-" if s.published_by else f"{s.stats.cv:.2%}",
        }
        row: list[Any] = [text(s.identity)] if device_column else []
        row += [text(series_name(s)), s.case.topology.nodes, s.case.topology.world_size]
        row += [base_cells[title] if cell is None else cell(s) for title, cell in columns]
        rows.append(row)
    for device, (nodes, devices), count, speedups, efficiencies in across_series(group):
        for label, reduce in ((MEDIAN_LABEL, statistics.median), (GEOMEAN_LABEL, _geomean)):
            row = [text(device)] if device_column else []
            row += [f"{label} ({count} series)", nodes, devices]
            cells = {"speedup": _fmt(reduce(speedups)), "efficiency": f"{reduce(efficiencies):.2%}"}
            row += [cells.get(title, "") for title, _ in columns]
            rows.append(row)
    style = "simple" if plain else "github"
    return tabulate(rows, headers=headers, tablefmt=style, disable_numparse=True)


def _headline(candidates: list[CaseSummary]) -> CaseSummary | None:
    """The case a summary row shows: the largest topology, then the largest batch."""
    return max(
        candidates,
        key=lambda s: (*_topology(s)[::-1], s.batch_size, s.case.dataset == "synthetic"),
        default=None,
    )


def summary_tables(summaries: list[CaseSummary], heading_level: int = 3) -> str:
    """DLPerf's summary, first: per model one row per series (framework and source) and device
    model, FP32 and AMP throughput at the largest topology measured, with its speedup."""
    out: list[str] = []
    hashes = "#" * heading_level
    by_model: dict[str, list[CaseSummary]] = defaultdict(list)
    for s in summaries:
        by_model[s.case.model].append(s)
    for model, items in sorted(by_model.items()):
        series: dict[tuple[str, str], dict[str, list[CaseSummary]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for s in items:
            key = (s.identity, series_name(s))
            series[key][s.case.precision].append(s)
        device_column = shows_device(items) or by_machine(items)  # every row says its machine
        headers = [*([identity_header(items)] if device_column else []), "series"]
        headers += ["FP32 samples/s", "FP32 speedup", "AMP samples/s", "AMP speedup"]
        rows = []
        for (device, name), by_precision in sorted(series.items()):
            row: list[Any] = [markdown_inline(device)] if device_column else []
            row.append(markdown_inline(name))
            for precision in ("fp32", "amp"):
                best = _headline(by_precision.get(precision, []))
                if best is None:
                    row += ["-", "-"]
                    continue
                row += [f"{throughput_cell(best)} @{best.case.topology.label}", speedup_cell(best)]
            rows.append(row)
        out.append(f"{hashes} {model_title(model)}\n")
        out.append(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True))
        out.append("")
    if out:
        out.append(
            "Each row: the largest topology (`@<nodes>n<devices>g`) of the series at that "
            "precision (then the largest batch); speedup against its 1n1g at the same batch per "
            f"device on the same {'machine' if by_machine(summaries) else 'device model'}.\n"
        )
    return "\n".join(out)


def report_row(summary: CaseSummary) -> dict[str, Any]:
    """A case's row in report.csv/json: its row, and what it ran on, or who published it."""
    return {
        **summary.row().dump(),
        "device_model": summary.device_model,
        "fingerprint": summary.fingerprint,
        "hardware": summary.hardware,
        "machine": summary.machine,
        "slow_node": summary.slow_node.name if summary.slow_node else None,
        "slow_node_ranks": rank_ranges(summary.slow_node.ranks) if summary.slow_node else None,
        "slow_node_excess": summary.slow_node.excess if summary.slow_node else None,
        "superlinear": summary.superlinear,
        "superlinear_tolerance": summary.superlinear_tolerance,
        "peak_memory_bytes": summary.peak_memory_bytes,
        "peak_memory_source": summary.peak_memory_source or None,
        "peak_memory_nvml_bytes": summary.peak_memory_nvml_bytes,
    }


def to_csv(summaries: list[CaseSummary]) -> str:
    rows = [report_row(s) for s in summaries]
    return csv_text(list(rows[0]), rows) if rows else ""


def to_json(summaries: list[CaseSummary]) -> str:
    return json.dumps([report_row(s) for s in summaries], indent=2, sort_keys=True) + "\n"


def write_report(
    summaries: list[CaseSummary],
    out_dir: Path,
    title: str,
    preamble: str = "",
    refused: Sequence[str] = (),
) -> dict[str, Path]:
    if out_dir.is_symlink():
        raise KitWriteError(
            out_dir,
            "a symlink: a report is written into a real folder, not "
            "through a link; remove it or choose another --out",
        )
    ensure_dir(out_dir)
    paths = {
        "markdown": out_dir / "report.md",
        "csv": out_dir / "report.csv",
        "json": out_dir / "report.json",
    }
    heading = markdown_inline(title)
    body = f"# {heading}\n\n{preamble}\n\n" if preamble else f"# {heading}\n\n"
    notes = [
        f"Refused (left out of every table; the logs are the truth): {problem}"
        for problem in refused
    ]
    if summaries:
        body += "## Summary\n\n" + summary_tables(summaries) + "\n## Detail\n\n"
    write_text(paths["markdown"], body + markdown_tables(summaries, extra_notes=notes))
    write_text(paths["csv"], to_csv(summaries))
    write_text(paths["json"], to_json(summaries))
    return paths
