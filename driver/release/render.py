"""The text files of a release (README.md, results.json, results.csv), rendered from numbers.

Rendering is deterministic: the audit renders the same files from its own recomputation and
compares them byte for byte, so any edited digit shows up, and is named by the cell it is in.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable
from typing import Any

from tabulate import tabulate

from driver.core.report import ExtraColumn, markdown_tables
from driver.core.summary import CaseSummary
from driver.release.compute import Computed, RepeatResult
from driver.telemetry.summary import TELEMETRY_FIELDS

RESULTS_SCHEMA = 1
MEASUREMENT_FIELDS = (
    "throughput",
    "samples",
    "duration_s",
    "ranks",
    "world_size",
    "reported_by_source",
    "warmup_steps",
    "measured_steps",
    "interval_cv",
    "interval_unstable",
)
PLOTS_DIR = "plots"


# --------------------------------------------------------------------------------------------
# Rows


def case_row(summary: CaseSummary, computed: Computed) -> dict[str, Any]:
    return {
        "row": "case",
        **summary.row(),
        **computed.extras[summary.case_id],
        "repeat_throughputs": list(summary.throughputs),
        "table": computed.titles[summary.case_id],
    }


def repeat_row(result: RepeatResult) -> dict[str, Any]:
    record, measurement = result.raw.record, result.measurement or {}
    row: dict[str, Any] = {
        "row": "repeat",
        "case_id": result.raw.case.id,
        "repeat": record.repeat,
        "session": result.raw.session,
        "folder": result.raw.folder,
        "batch_per_device": record.batch_size,
        "parser": record.parser,
        "runtime": record.runtime,
        "logs": list(record.logs),
        "started_at": record.started_at,
        "finished_at": record.finished_at,
        "verdict": "ok" if result.measurement is not None else "parse-error",
        "error": result.error,
    }
    row.update({name: measurement.get(name) for name in MEASUREMENT_FIELDS})
    row.update({name: result.telemetry.get(name) for name in TELEMETRY_FIELDS})
    return row


def results_data(computed: Computed, version: str) -> dict[str, Any]:
    return {
        "schema": RESULTS_SCHEMA,
        "version": version,
        "cases": [case_row(s, computed) for s in computed.summaries],
        "repeats": [repeat_row(r) for r in computed.repeats],
    }


# --------------------------------------------------------------------------------------------
# JSON with a label per line


def _item_label(value: Any, index: int) -> str:
    if isinstance(value, dict) and "case_id" in value:
        label = f"case_id={value['case_id']}"
        if value.get("row") == "repeat":
            label += f", repeat={value.get('repeat')}"
        return label
    return str(index)


def json_lines(data: Any) -> tuple[list[str], list[str]]:
    """The JSON text of ``data`` (2-space indent, sorted keys) as lines, and for each line the
    path of the value it holds (``cases[case_id=...].throughput_median``)."""
    lines: list[str] = []
    labels: list[str] = []

    def walk(value: Any, indent: int, prefix: str, label: str) -> None:
        pad = "  " * indent
        if isinstance(value, dict) and value:
            lines.append(f"{pad}{prefix}{{")
            labels.append(label)
            items = sorted(value.items())
            for i, (key, item) in enumerate(items):
                walk(item, indent + 1, f"{json.dumps(key)}: ", f"{label}.{key}" if label else key)
                if i < len(items) - 1:
                    lines[-1] += ","
            lines.append(f"{pad}}}")
            labels.append(label)
        elif isinstance(value, list) and value:
            lines.append(f"{pad}{prefix}[")
            labels.append(label)
            for i, item in enumerate(value):
                walk(item, indent + 1, "", f"{label}[{_item_label(item, i)}]")
                if i < len(value) - 1:
                    lines[-1] += ","
            lines.append(f"{pad}]")
            labels.append(label)
        else:
            if isinstance(value, float) and not math.isfinite(value):
                value = None  # never NaN in a results file
            lines.append(f"{pad}{prefix}{json.dumps(value)}")
            labels.append(label)

    walk(data, 0, "", "")
    return lines, labels


def json_text(data: Any) -> str:
    return "\n".join(json_lines(data)[0]) + "\n"


# --------------------------------------------------------------------------------------------
# CSV


def csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def csv_text(data: dict[str, Any]) -> str:
    """One row per case, then one per repeat; the columns are the union, every field named."""
    rows = data["cases"] + data["repeats"]
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([csv_cell(row.get(c)) for c in columns])
    return buffer.getvalue()


# --------------------------------------------------------------------------------------------
# README


def slug(title: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", title.lower())).strip("-")


def plot_files(title: str) -> tuple[str, str]:
    base = f"{PLOTS_DIR}/{slug(title)}"
    return f"{base}-throughput.png", f"{base}-efficiency.png"


def _num(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _pair(row: dict[str, Any], name: str, digits: int = 1) -> str:
    median, top = row.get(f"{name}_median"), row.get(f"{name}_max")
    if median is None and top is None:
        return "-"
    return f"{_num(median, digits)} / {_num(top, digits)}"


def _extra_cell(computed: Computed, key: str) -> Callable[[CaseSummary], str]:
    return lambda s: _pct(computed.extras[s.case_id].get(key))


def _tables_section(computed: Computed) -> str:
    extras = [
        ExtraColumn("bound", _extra_cell(computed, "scaling_bound"), after="efficiency"),
        ExtraColumn("MFU", _extra_cell(computed, "mfu"), after="CV"),
    ]
    notes = []
    values = computed.extras.values()
    if any(e.get("mfu") is not None for e in values):
        notes.append(
            "MFU: model-FLOPs utilization = samples/s x training FLOPs per sample (counted from "
            "the model definition by PyTorch/benchmark/flops.py, cached in manifest.json) / "
            "(devices x dense peak of the device at the run's precision, config/peaks.yaml)."
        )
    if any(e.get("peak_tflops") and e.get("mfu") is None for e in values):
        notes.append("MFU '-': no FLOPs count for the model (torch was absent at release).")
    if any(e.get("scaling_bound") is not None for e in values):
        notes.append(
            "bound: efficiency ceiling of a ring all-reduce without overlap, "
            "t / (t + 2(n-1)/n x gradient bytes / busbw), with t = batch / 1-device throughput "
            "and busbw from the session's all-reduce probe at n devices (see Provenance)."
        )

    def plots(title: str, _group: list[CaseSummary]) -> str:
        throughput, efficiency = plot_files(title)
        return f"![throughput vs devices]({throughput}) ![efficiency vs devices]({efficiency})"

    return markdown_tables(
        computed.summaries,
        heading_level=3,
        extra_columns=extras,
        after_table=plots,
        extra_notes=notes,
    )


def _references_section(computed: Computed) -> str:
    rows = []
    for s in computed.summaries:
        e = computed.extras[s.case_id]
        if not e.get("reference_id"):
            continue
        config = f"{e['reference_devices']} dev, bsz {e['reference_batch_per_device'] or '?'}, "
        config += str(e["reference_precision"]).upper()
        rows.append(
            [
                s.case_id,
                _num(s.stats.median, 2),
                _num(e["per_device"], 2),
                f"{e['reference_framework']} ({e['reference_id']})",
                e["reference_hardware"],
                config,
                _num(e["reference_per_device"], 2),
                "-" if e["ratio_per_device"] is None else f"{e['ratio_per_device']:.4f}",
                f"[{e['reference_source']}]({e['reference_link']})",
            ]
        )
    if not rows:
        return (
            "No published result matches a measured case (references are matched on the "
            "model at its published shapes only).\n"
        )
    headers = [
        "case",
        "samples/s",
        "per device",
        "nearest reference",
        "hardware",
        "reference config",
        "reference per device",
        "ours / reference (per device)",
        "source",
    ]
    intro = (
        "The nearest published result (config/references.yaml) beside each case that runs a "
        "model at its published shapes: same model; "
        "then same GPU family, precision, device count, framework, dataset, XLA and batch, in "
        "that order. Compared per device, since topologies differ.\n\n"
    )
    return intro + tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True) + "\n"


def _telemetry_section(computed: Computed) -> str:
    gpu = any(r.telemetry.get("telemetry_gpu_power_w_max") is not None for r in computed.repeats)
    headers = ["case", "repeat", "window", "samples", "CPU % (1 core = 100)", "RSS MiB"]
    if gpu:
        headers += ["GPU W", "SM %", "mem %", "GPU mem MiB", "SM MHz", "temp C"]
    rows = []
    for r in computed.repeats:
        t = r.telemetry
        row = [
            r.raw.case.id,
            r.raw.record.repeat,
            t.get("telemetry_window"),
            t.get("telemetry_samples"),
            _pair(t, "telemetry_cpu_pct"),
            _pair(t, "telemetry_rss_mib"),
        ]
        if gpu:
            row += [
                _pair(t, f"telemetry_gpu_{m}")
                for m in ("power_w", "sm_pct", "mem_pct", "mem_used_mib", "sm_clock_mhz", "temp_c")
            ]
        rows.append(row)
    statuses = sorted({str(r.telemetry.get("telemetry_status")) for r in computed.repeats})
    intro = (
        "Median / max per repeat over the measured window (`window: steps`: cut with the step "
        "timestamps on each node's monotonic clock; `run`: the whole run, on the wall clock). "
        "CPU and RSS are summed over each node's process tree; GPU metrics pool every GPU. "
        f"GPU status: {', '.join(statuses)}.\n\n"
    )
    table = tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)
    return intro + table + "\n"


def _provenance_section(manifest: dict[str, Any]) -> str:
    release_kit = manifest["kit"]
    out = [
        f"Released with kit `{release_kit.get('commit')}` (dirty: {release_kit.get('dirty')}), "
        + ", ".join(f"{k} {v}" for k, v in sorted(manifest["release_tool"].items()))
        + ".\n",
        "Sessions:\n",
    ]
    for s in manifest["sessions"]:
        kit = s.get("kit") or {}
        dirty = " (dirty)" if kit.get("dirty") else ""
        out.append(
            f"- `{s['name']}`: created {s.get('created')}, head node {s.get('head_node')}, "
            f"profile {s.get('profile')}, runtime {s.get('runtime')}, kit "
            f"`{kit.get('commit')}`{dirty}; archive `{s['archive']}` "
            f"({s['files']} files)"
        )
    out.append("\nNodes (from every rank's log header):\n")
    for host, node in sorted(manifest["nodes"].items()):
        versions = ", ".join(f"{k} {v}" for k, v in sorted(node.get("versions", {}).items()))
        out.append(
            f"- `{host}`: devices {', '.join(node.get('devices', [])) or '-'}; "
            f"frameworks {', '.join(node.get('frameworks', []))}; {versions or 'no versions'}"
        )
    images = manifest["images"]
    out.append("\nImages pinned in images.lock:\n")
    if images.get("digests"):
        out += [f"- `{name}`: `{digest}`" for name, digest in sorted(images["digests"].items())]
    else:
        out.append(f"- {images.get('note', 'none')}")
    if images.get("ran"):
        out.append("\nImage digests the repeats ran (from their records):\n")
        unlisted = set(images.get("unlisted", []))
        for digest in images["ran"]:
            where = (
                "listed by neither the lock nor the build records"
                if digest in unlisted
                else "listed"
            )
            out.append(f"- `{digest}` ({where})")
    out.append("\nConfig files (copies in `config/`):\n")
    for path, entry in sorted(manifest["config_files"].items()):
        out.append(f"- `{path}` (from `{entry['source']}`): sha256 `{entry['sha256']}`")
    if manifest["model_costs"]:
        out.append("\nModel cost (from the model definitions):\n")
        for key, cost in sorted(manifest["model_costs"].items()):
            out.append(
                f"- `{key}`: {cost['flops_per_sample'] / 1e9:.3f} GFLOP per training sample, "
                f"{cost['parameters']} parameters ({cost['source']}, torch {cost['torch']})"
            )
    probes = manifest.get("probes") or []
    if probes:
        out.append("\nAll-reduce probes:\n")
        for p in probes:
            out.append(
                f"- `{p['session']}` {p['topology']}: {p['backend']}, busbw "
                f"{p['busbw_gbps']:.3f} GB/s at {p['busbw_at_bytes']} bytes (`{p['log']}`)"
            )
    if manifest["excluded_repeats"]:
        out.append("\nRepeats left out (not finished ok):\n")
        for e in manifest["excluded_repeats"]:
            out.append(f"- `{e['session']}/{e['folder']}`: {e['verdict']} {e['detail']}".rstrip())
    return "\n".join(out) + "\n"


def _changes_section(manifest: dict[str, Any]) -> str:
    changes = manifest.get("changes") or {}
    previous = manifest.get("previous")
    out = [manifest.get("changelog") or "First version."]
    if previous:
        out.append(f"\nChanges against `{previous}` (computed):\n")
        for case_id in changes.get("added", []):
            out.append(f"- added `{case_id}`")
        for case_id in changes.get("removed", []):
            out.append(f"- removed `{case_id}`")
        for c in changes.get("changed", []):
            out.append(
                f"- `{c['case_id']}`: median {c['previous_median']:.2f} -> {c['median']:.2f} "
                f"samples/s (x{c['ratio']:.4f})"
            )
        if len(out) == 2:
            out.append("- no case added, removed or changed")
    return "\n".join(out) + "\n"


def readme_text(computed: Computed, manifest: dict[str, Any]) -> str:
    version = manifest["version"]
    kit = manifest["kit"]
    sessions = ", ".join(f"`{s['name']}`" for s in manifest["sessions"])
    dirty = " (dirty tree)" if kit.get("dirty") else ""
    repeats = sum(1 for r in computed.repeats if r.measurement is not None)
    head = (
        f"# {manifest['title']}\n\n"
        f"Version `{version}`, released {manifest['released_at']} by `dlperf release` from "
        f"{sessions}; kit `{str(kit.get('commit'))[:12]}`{dirty}. "
        f"{len(computed.summaries)} cases, {repeats} repeats.\n\n"
        f"Every number here is recomputed from the raw logs in `raw/` by "
        f"`dlperf audit reports/{version}`. `manifest.json` holds the SHA-256 of every raw file "
        "and config file, the image digests and the provenance of every node; `results.json` "
        "and `results.csv` hold every case and every repeat, every field named.\n"
    )
    parts = [
        head,
        "## Changelog\n",
        _changes_section(manifest),
        "## Throughput\n",
        "Per model and precision: rows are node num / device num; per framework the median "
        "samples/s over repeats, speedup and efficiency against 1n1g at the same batch per "
        "device, and the coefficient of variation over repeats.\n",
        _tables_section(computed),
        "## Beside published results\n",
        _references_section(computed),
        "## Telemetry\n",
        _telemetry_section(computed),
        "## Provenance\n",
        _provenance_section(manifest),
    ]
    return "\n".join(parts)
