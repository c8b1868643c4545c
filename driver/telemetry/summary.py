"""Telemetry samples of one repeat -> median and maximum per metric over the measured window.

The window of node ``i`` is cut with the monotonic timestamps of the step records in that
node's log (``node<i>.log``): the benchmark's ranks and the sampler read the same host clock,
so the cut is exact. Where a node's step clock does not overlap its samples (an upstream
source that logs wall-clock times, or no step records), the whole run is used instead, aligned
on the wall clock with the repeat's start and finish, and the summary says
``telemetry_window: run``. A CPU sample's utilisation covers the interval that ends at its
timestamp, so a sample belongs to the window when its timestamp lies in (start, end].
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CPU_METRICS = ("cpu_pct", "rss_mib")
GPU_METRICS = (
    "power_w",
    "sm_pct",
    "mem_pct",
    "mem_used_mib",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "temp_c",
)
_FILE = re.compile(r"^telemetry-node(\d+)\.jsonl$")


def metric_field(kind: str, metric: str, statistic: str) -> str:
    prefix = "gpu_" if kind == "gpu" else ""
    return f"telemetry_{prefix}{metric}_{statistic}"


TELEMETRY_FIELDS: tuple[str, ...] = (
    "telemetry_status",
    "telemetry_window",
    "telemetry_samples",
    *(metric_field("cpu", m, s) for m in CPU_METRICS for s in ("median", "max")),
    *(metric_field("gpu", m, s) for m in GPU_METRICS for s in ("median", "max")),
)


def telemetry_file_name(node: int) -> str:
    return f"telemetry-node{node}.jsonl"


def node_of(file_name: str) -> int | None:
    match = _FILE.match(file_name.rsplit("/", 1)[-1])
    return int(match[1]) if match else None


@dataclass
class Samples:
    meta: dict[str, Any] = field(default_factory=dict)
    cpu: list[dict[str, Any]] = field(default_factory=list)
    gpu: list[dict[str, Any]] = field(default_factory=list)
    broken_lines: int = 0


def parse_samples(text: str) -> Samples:
    """The samples of one telemetry file; a line that does not decode is counted, not fatal
    (the sampler may have been killed mid-line)."""
    samples = Samples()
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            samples.broken_lines += 1
            continue
        kind = record.get("kind") if isinstance(record, dict) else None
        if kind == "meta":
            samples.meta = record
        elif kind == "cpu":
            samples.cpu.append(record)
        elif kind == "gpu":
            samples.gpu.append(record)
    return samples


def _in(record: dict[str, Any], clock: str, window: tuple[float, float]) -> bool:
    value = record.get(clock)
    return isinstance(value, (int, float)) and window[0] < value <= window[1]


def _overlaps(samples: Samples, window: tuple[float, float]) -> bool:
    monos = [
        r["mono"] for r in samples.cpu + samples.gpu if isinstance(r.get("mono"), (int, float))
    ]
    return bool(monos) and min(monos) <= window[1] and max(monos) >= window[0]


def summarize_samples(
    files: Mapping[str, str],
    step_windows: Mapping[int, tuple[float, float]] | None = None,
    run_window: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """One flat dict with every :data:`TELEMETRY_FIELDS` key (None where nothing was sampled).

    ``files``: telemetry file name -> text; ``step_windows``: node -> (start, end) of the
    measured window on that node's monotonic clock; ``run_window``: (started_at, finished_at)
    of the repeat on the wall clock, the fallback.
    """
    out: dict[str, Any] = dict.fromkeys(TELEMETRY_FIELDS)
    if not files:
        out.update(telemetry_status="none", telemetry_window="none", telemetry_samples=0)
        return out
    statuses: set[str] = set()
    windows_used: set[str] = set()
    cpu: list[dict[str, Any]] = []
    gpu: list[dict[str, Any]] = []
    for name in sorted(files):
        samples = parse_samples(files[name])
        status = str(samples.meta.get("gpu", "unknown"))
        if status != "sampled on another node":
            statuses.add(status)
        node = node_of(name)
        window = (step_windows or {}).get(node) if node is not None else None
        if window is not None and _overlaps(samples, window):
            clock, cut = "mono", window
            windows_used.add("steps")
        elif run_window is not None:
            clock, cut = "wall", run_window
            windows_used.add("run")
        else:
            continue
        cpu += [r for r in samples.cpu if _in(r, clock, cut)]
        gpu += [r for r in samples.gpu if _in(r, clock, cut)]
    out["telemetry_status"] = "; ".join(sorted(statuses)) or "unknown"
    out["telemetry_window"] = (
        "run" if "run" in windows_used else ("steps" if windows_used else "none")
    )
    out["telemetry_samples"] = len({r["mono"] for r in cpu + gpu if "mono" in r})
    for kind, records, metrics in (("cpu", cpu, CPU_METRICS), ("gpu", gpu, GPU_METRICS)):
        for metric in metrics:
            values = [float(r[metric]) for r in records if isinstance(r.get(metric), (int, float))]
            if values:
                out[metric_field(kind, metric, "median")] = statistics.median(values)
                out[metric_field(kind, metric, "max")] = max(values)
    return out
