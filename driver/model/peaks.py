"""Device peaks (``reports/peaks.yaml``): the one loader and matcher of a device's dense peak
and memory, the precision a run computed in, and model-FLOPs utilization.

    MFU = throughput (samples/s) x FLOPs per sample / (devices x dense peak FLOP/s)

Read by the plan (a peak for its FLOP estimates, a memory for Llama's fit), the session tables
(MFU of the models whose FLOPs are a formula) and a release (MFU of every counted model).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from driver.schema import (
    FiniteFloat,
    StrictModel,
    Url,
    load_document,
    one_of,
    schema_version,
    validate,
)
from driver.text import FreeText

PEAKS_FILE = Path(__file__).resolve().parents[2] / "reports" / "peaks.yaml"

# Dense TFLOP/s of one device: above zero and below what any accelerator is near (an H100's
# bf16 is ~990); a typo of a few orders of magnitude would make every MFU of that device ~0.
Peak = Annotated[FiniteFloat, Field(gt=0, le=100_000)]


class DevicePeaks(StrictModel):
    name: Annotated[FreeText("label"), Field(min_length=1)]
    match: Annotated[list[Annotated[FreeText("label"), Field(min_length=1)]], Field(min_length=1)]
    peaks: dict[Annotated[Any, one_of("bf16", "fp16", "tf32", "fp32")], Peak]
    # one device's memory where every part the entry matches has the same (the estimate's
    # memory check of a Llama case); absent where the name does not tell (A100 40 or 80 GB)
    memory_gib: Annotated[FiniteFloat, Field(gt=0, le=100_000)] | None = None
    source: FreeText("name")
    link: Url


class PeaksFile(StrictModel):
    schema_: schema_version((1,)) = Field(alias="schema")
    unit: Annotated[Any, one_of("TFLOP/s")]
    devices: list[DevicePeaks]


def load_peaks(path: Path = PEAKS_FILE) -> list[dict[str, Any]]:
    """The device peaks of ``path`` (none when it is absent), checked: a peak that is no finite
    positive TFLOP/s, an unknown precision key or free text with control characters is a
    ConfigError naming the file and the field."""
    if not path.exists():
        return []
    return [d.model_dump() for d in validate(PeaksFile, load_document(path), path).devices]


def match_device(
    name: str | None, peaks: list[dict[str, Any]], either_way: bool = False
) -> dict[str, Any] | None:
    """The first peak entry one of whose ``match`` strings is in ``name`` (case-insensitive),
    as a device reports its name ("NVIDIA H100 80GB HBM3"). ``either_way``: or ``name`` is in
    one of them, as a person names hardware for a plan ("H100" names the SXM entry)."""
    if not name:
        return None
    lowered = name.lower()
    for entry in peaks:
        for match in (str(m).lower() for m in entry.get("match", [])):
            if match in lowered or (either_way and lowered in match):
                return entry
    return None


def peak_precision(precision: str, header_options: Mapping[str, Any]) -> str:
    """The peak column a run computed in: bf16 / fp16 for AMP, tf32 / fp32 for fp32."""
    if precision == "amp":
        dtype = str(header_options.get("amp_dtype") or "float16").lower()
        return "bf16" if dtype in ("bfloat16", "bf16") else "fp16"
    return "tf32" if header_options.get("tf32") else "fp32"


def planned_precision(precision: str, entry: Mapping[str, Any]) -> str:
    """The peak column a case will compute in before it runs: AMP in bf16 where the device has
    a bf16 peak (``--amp-dtype auto``'s choice), else fp16 (a V100); fp32 in IEEE fp32."""
    if precision == "amp":
        return "bf16" if "bf16" in (entry.get("peaks") or {}) else "fp16"
    return "fp32"


def mfu(
    throughput: float, flops_per_sample: float | None, devices: int, peak_tflops: float | None
) -> float | None:
    if not flops_per_sample or not peak_tflops or devices <= 0:
        return None
    return throughput * flops_per_sample / (devices * peak_tflops * 1e12)
