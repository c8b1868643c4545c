"""Published results (``reports/references.yaml``) and the nearest one to each measured case.

Only references of the same model key with a throughput can match. Among them the nearest is
the first by: the same GPU family as our device (V100, A100, H100, ...), the same precision,
the closest device count (log2 distance), the same framework, the same dataset, the same XLA
setting, the closest batch per device (unknown batches last), then the reference id. The
comparison is per device, because a reference often has another topology than our case.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_FAMILY = re.compile(r"\b([A-Z]\d{2,3}[A-Z]?)\b")  # V100, A100, H100, H200, L40S, ...


def per_device(reference: dict[str, Any]) -> float | None:
    """Samples/s per device: the total over devices, or the published per-device value (the
    midpoint of a published range)."""
    value = reference.get("per_device")
    if isinstance(value, (list, tuple)) and value:
        return sum(float(v) for v in value) / len(value)
    if isinstance(value, (int, float)):
        return float(value)
    total, devices = reference.get("throughput"), reference.get("devices") or 1
    return float(total) / devices if isinstance(total, (int, float)) else None


def families(text: str) -> set[str]:
    return set(_FAMILY.findall(text.upper()))


def is_gpu(name: str) -> bool:
    lowered = name.lower()
    return bool(families(name)) or "nvidia" in lowered or "gpu" in lowered


def comparable(device_names: Sequence[str], reference_hardware: str) -> bool:
    """Like with like: a GPU beside a GPU (the nearest reference ranks the same family first);
    a CPU compares with no published GPU figure."""
    return any(is_gpu(n) for n in device_names) and is_gpu(reference_hardware)


@dataclass(frozen=True)
class Ours:
    model: str
    framework: str
    precision: str
    devices: int
    batch_per_device: int
    xla: bool
    dataset: str
    device_names: tuple[str, ...]
    throughput: float


UNKNOWN_DISTANCE = 8.0  # a reference that does not give the value ranks behind known ones


def _log_distance(a: float | None, b: float | None) -> float:
    if not a or not b:
        return UNKNOWN_DISTANCE
    return abs(math.log2(a / b))


def nearest(ours: Ours, references: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The nearest reference with its per-device comparison, or None."""
    our_families = (
        set().union(*(families(n) for n in ours.device_names)) if ours.device_names else set()
    )
    candidates = [
        r for r in references if r.get("model") == ours.model and per_device(r) is not None
    ]
    if not candidates:
        return None

    def rank(r: dict[str, Any]) -> tuple:
        return (
            not (our_families & families(str(r.get("hardware", "")))),
            r.get("precision") != ours.precision,
            _log_distance(ours.devices, r.get("devices")),
            r.get("framework_key") != ours.framework,
            r.get("dataset", "synthetic") != ours.dataset,
            bool(r.get("xla")) != ours.xla,
            _log_distance(ours.batch_per_device, r.get("batch_per_device")),
            str(r.get("id")),
        )

    best = min(candidates, key=rank)
    ref_per_device = per_device(best)
    our_per_device = ours.throughput / ours.devices
    return {
        "reference_id": best.get("id"),
        "reference_framework": best.get("framework"),
        "reference_hardware": best.get("hardware"),
        "reference_devices": best.get("devices"),
        "reference_batch_per_device": best.get("batch_per_device"),
        "reference_precision": best.get("precision"),
        "reference_throughput": best.get("throughput"),
        "reference_per_device": ref_per_device,
        "reference_link": best.get("link"),
        "reference_source": best.get("source"),
        "per_device": our_per_device,
        "ratio_per_device": our_per_device / ref_per_device if ref_per_device else None,
    }
