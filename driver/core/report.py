"""DLPerf-style tables, written as Markdown, CSV and JSON from case summaries.

Per model and precision, and per batch size and dataset inside it: rows are node num / device
num, and each series (framework, with its source, XLA and option variant) has throughput
median, speedup and efficiency columns. Unstable cells (CV > 2%) carry a mark, and anything that
is not the DLPerf protocol gets a footnote.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from tabulate import tabulate

from driver.core.measure import UNSTABLE_CV
from driver.core.summary import CaseSummary, grouped

MODEL_NAMES = {
    "resnet50": "ResNet-50 v1.5",
    "inception3": "InceptionV3",
    "bert": "BERT-base pre-training",
    "calibration": "Calibration workload",
}
UNSTABLE_MARK = "~"


def series_name(summary: CaseSummary) -> str:
    from driver.plugins import load_all
    from driver.registry import FRAMEWORKS

    load_all()
    c = summary.case
    name = FRAMEWORKS.get(c.framework).display if c.framework in FRAMEWORKS else c.framework
    if c.source != "dlperf":
        name += f" ({c.source})"
    if c.xla:
        name += " w/XLA"
    if c.variant != "default":
        name += f" [{c.variant}]"
    return name


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def footnotes(summaries: list[CaseSummary]) -> list[str]:
    notes: list[str] = []
    profiles = sorted({s.case.profile for s in summaries if s.case.profile != "dlperf"})
    for profile in profiles:
        steps = {
            (s.case.warmup_steps, s.case.measured_steps, s.stats.repeats)
            for s in summaries
            if s.case.profile == profile
        }
        shown = ", ".join(
            f"{w} warm-up + {m} measured steps, {r} repeats" for w, m, r in sorted(steps)
        )
        notes.append(
            f"Profile `{profile}` ({shown}): a smoke profile, not the DLPerf protocol "
            "(20 warm-up + 100 measured steps, median of 7)."
        )
    if any(s.case.xla for s in summaries):
        notes.append("w/XLA: compiled with XLA (jit_compile).")
    for s in summaries:
        if s.case.batch_size == "max":
            notes.append(
                f"{s.case.id}: batch `max` resolved by search to {s.batch_size} per device."
            )
    if any(s.reported_by_source for s in summaries):
        notes.append("(r): throughput as reported by the source's own log (no step timestamps).")
    if any(s.stats.unstable for s in summaries):
        notes.append(
            f"{UNSTABLE_MARK}: unstable, coefficient of variation over repeats > {UNSTABLE_CV:.0%}."
        )
    variants = sorted(
        {
            (s.case.variant, json.dumps(s.case.options, sort_keys=True))
            for s in summaries
            if s.case.options
        }
    )
    for variant, options in variants:
        notes.append(f"[{variant}] options: {options}")
    return notes


def throughput_cell(summary: CaseSummary) -> str:
    text = _fmt(summary.stats.median)
    if summary.reported_by_source:
        text += " (r)"
    if summary.stats.unstable:
        text += f" {UNSTABLE_MARK}"
    return text


def markdown_tables(summaries: list[CaseSummary], heading_level: int = 3) -> str:
    out: list[str] = []
    hashes = "#" * heading_level
    for (model, precision), items in sorted(grouped(summaries).items()):
        by_setting: dict[tuple, list[CaseSummary]] = defaultdict(list)
        for s in items:
            by_setting[(str(s.case.batch_size), s.batch_size, s.case.dataset)].append(s)
        for (setting, batch, dataset), group in sorted(by_setting.items()):
            label = f"bsz={batch}" if setting != "max" else f"bsz=max ({batch})"
            out.append(
                f"{hashes} {MODEL_NAMES.get(model, model)}, {precision.upper()}, "
                f"{label} per device, {dataset} data\n"
            )
            out.append(_series_table(group))
            out.append("")
    notes = footnotes(summaries)
    if notes:
        out.append("Notes:\n")
        out.extend(f"- {note}" for note in notes)
        out.append("")
    return "\n".join(out)


def _series_table(group: list[CaseSummary]) -> str:
    series: dict[str, dict[tuple[int, int], CaseSummary]] = defaultdict(dict)
    topologies: set[tuple[int, int]] = set()
    for s in group:
        key = (s.case.topology.nodes, s.case.topology.world_size)
        series[series_name(s)][key] = s
        topologies.add(key)
    headers = ["node num", "device num"]
    for name in series:
        headers += [f"{name} samples/s", "speedup", "efficiency", "CV"]
    rows = []
    for nodes, devices in sorted(topologies, key=lambda t: (t[1], t[0])):
        row: list[Any] = [nodes, devices]
        for cells in series.values():
            s = cells.get((nodes, devices))
            if s is None:
                row += ["-", "-", "-", "-"]
            else:
                eff = "-" if s.efficiency is None else f"{s.efficiency:.2%}"
                row += [throughput_cell(s), _fmt(s.speedup), eff, f"{s.stats.cv:.2%}"]
        rows.append(row)
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def to_csv(summaries: list[CaseSummary]) -> str:
    rows = [s.row() for s in summaries]
    if not rows:
        return ""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(
            {
                k: json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v
                for k, v in row.items()
            }
        )
    return buffer.getvalue()


def to_json(summaries: list[CaseSummary]) -> str:
    return json.dumps([s.row() for s in summaries], indent=2, sort_keys=True) + "\n"


def write_report(
    summaries: list[CaseSummary], out_dir: Path, title: str, preamble: str = ""
) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "markdown": out_dir / "report.md",
        "csv": out_dir / "report.csv",
        "json": out_dir / "report.json",
    }
    body = f"# {title}\n\n{preamble}\n\n" if preamble else f"# {title}\n\n"
    paths["markdown"].write_text(body + markdown_tables(summaries))
    paths["csv"].write_text(to_csv(summaries))
    paths["json"].write_text(to_json(summaries))
    return paths
