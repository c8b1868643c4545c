"""Published results (``reports/references.yaml``) and the nearest one to each measured case.

Only references of the same model key with a throughput can match. Among them the nearest is
the first by: the same GPU family as our device (V100, A100, H100, ...), the same precision,
the closest device count (log2 distance), the same framework, the same dataset, the same XLA
setting, the closest batch per device (unknown batches last), then the reference id. The
comparison is per device, because a reference often has another topology than our case.
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, StrictInt, model_validator

from driver.release.imported import EFFICIENCY_TOLERANCE
from driver.schema import (
    ConfigError,
    Count,
    FiniteFloat,
    Name,
    StrictModel,
    Url,
    load_document,
    one_of,
    schema_version,
    validate,
)
from driver.text import FreeText

_FAMILY = re.compile(r"\b([A-Z]\d{2,3}[A-Z]?)\b")  # V100, A100, H100, H200, L40S, ...


# Published samples/s (total or per device): above zero, below a figure no device reaches. A
# whole number stays one: the versions released before references had a schema published
# DLPerf's 2470 as 2470, and their audit recomputes them with this kit.
MAX_RATE = 1e9
Rate = Annotated[StrictInt | FiniteFloat, Field(gt=0, le=MAX_RATE)]


def _batch_setting(value: Any) -> Any:
    if value is None or value == "max" or (type(value) is int and value >= 1):
        return value
    raise ValueError(f"must be a batch per device from 1, max or null, got {value!r}")


def _per_device(value: Any) -> Any:
    """A published samples/s per device: one value, or the [low, high] of a published range."""
    if value is None:
        return value
    values = value if isinstance(value, list) else [value]
    if isinstance(value, list) and len(value) != 2:
        raise ValueError(f"a range is [low, high], two values; got {len(value)}")
    if not all(type(v) in (int, float) and 0 < v <= MAX_RATE for v in values):
        raise ValueError(
            f"must be samples/s per device above 0 and at most {MAX_RATE:g} (one value, or "
            f"[low, high] of a published range), got {value!r}"
        )
    if isinstance(value, list) and value[0] > value[1]:
        raise ValueError(f"a range is [low, high]; {value!r} is reversed: write [{value[1]}, "
                         f"{value[0]}]")  # fmt: skip
    return value


class PublishedReference(StrictModel):
    """One published result (``reports/references.yaml``): every text field is free text checked
    at input (``driver.text``), since the release README shows it beside the kit's numbers."""

    id: Name
    source: Annotated[FreeText("name"), Field(min_length=1)]
    link: Url
    framework: FreeText("name")
    framework_key: Name
    code: FreeText("name")
    model: Name
    variant: Name | None = None
    hardware: Annotated[FreeText("label"), Field(min_length=1)]
    nodes: Count
    devices: Count
    batch_per_device: Count | None
    batch_setting: Annotated[Any, AfterValidator(_batch_setting)] = None
    precision: Annotated[Any, one_of("fp32", "amp")]
    xla: bool
    dali: bool
    dataset: Annotated[Any, one_of("synthetic", "real")]
    throughput: Rate | None = None
    per_device: Annotated[Any, AfterValidator(_per_device)] = None
    speedup: Rate | None = None
    note: FreeText("note") = ""

    @model_validator(mode="after")
    def _as_import_rules(self) -> PublishedReference:
        """The rules of ``dlperf import`` (driver.release.imported): devices a multiple of
        nodes, and no scaling efficiency above 100% beyond rounding (2%)."""
        if self.devices % self.nodes:
            raise ValueError(
                f"devices ({self.devices}, the total) must be a multiple of nodes ({self.nodes}): "
                "give the total over all nodes"
            )
        if self.speedup is not None and self.devices > 1:
            efficiency = self.speedup / self.devices
            if efficiency > 1 + EFFICIENCY_TOLERANCE:
                raise ValueError(
                    f"speedup {self.speedup:g} on {self.devices} devices is an efficiency of "
                    f"{efficiency:.2%}, above 100% beyond rounding "
                    f"({EFFICIENCY_TOLERANCE:.0%}): check the source (a typo, or a total "
                    "given as a speedup)"
                )
        return self


class ReferencesFile(StrictModel):
    schema_: schema_version((1,)) = Field(alias="schema")
    results: list[PublishedReference]

    @model_validator(mode="after")
    def _unique_ids(self) -> ReferencesFile:
        seen: dict[str, int] = {}
        for index, reference in enumerate(self.results):
            if reference.id in seen:
                raise ValueError(
                    f"results[{index}] has the id {reference.id!r} of "
                    f"results[{seen[reference.id]}]: "
                    "each reference needs its own id"
                )
            seen[reference.id] = index
        return self


def load_references(path: Path) -> list[dict[str, Any]]:
    """The published results of ``path`` (none when it is absent), checked field by field: a
    bad one is a ConfigError naming the file, the entry and the fix."""
    if not os.path.lexists(path):
        return []
    if path.is_symlink():  # never followed: its target's text would reach the error message
        raise ConfigError(
            path, "(file)", f"is a symlink (to {os.readlink(path)}); the references file must be "
            "a regular file of the checkout: replace the link with the file itself"
        )  # fmt: skip
    if not stat.S_ISREG(os.stat(path).st_mode) and not path.is_dir():
        raise ConfigError(path, "(file)", "is not a regular file (a FIFO or a device): give a "
                          "YAML file")  # fmt: skip
    document = load_document(path)
    if not isinstance(document, dict):
        raise ConfigError(
            path, "(file)", f"must be a mapping with 'schema' and 'results', got a "
            f"{type(document).__name__} (its text is not shown)"
        )  # fmt: skip
    checked = validate(ReferencesFile, document, path)
    return [r.model_dump() for r in checked.results]


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
