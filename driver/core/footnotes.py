"""The footnotes of a session's tables: how the cases ran where it is not the DLPerf protocol,
where figures come from other than the kit's own measurement, and what the marks on a figure
mean; with the series' names and marks they explain."""

from __future__ import annotations

import json
from collections.abc import Sequence

from driver.core.summary import SUPERLINEAR_FLOOR, CaseSummary
from driver.model.measure import UNSTABLE_CV
from driver.text import markdown_code

UNSTABLE_MARK = "~"
UNKNOWN_DEVICE_MARK = "?hw"  # a published figure on hardware the kit knows no device model of
SUPERLINEAR_MARK = "!"  # measured efficiency above 100% beyond its noise tolerance


def series_name(summary: CaseSummary) -> str:
    from driver.frameworks.base import FRAMEWORKS
    from driver.plugins import load

    load("frameworks", "sources")
    c = summary.case
    name = FRAMEWORKS.get(c.framework).display if c.framework in FRAMEWORKS else c.framework
    if c.source != "dlperf":
        name += f" ({c.source})"
    if c.xla:
        name += " w/XLA"
    if c.variant != "default":
        name += f" [{c.variant}]"
    if summary.published_by:
        name += f", published by {summary.published_by}"
    if summary.unknown_device:
        name += f" {UNKNOWN_DEVICE_MARK}"
    return name


# The peak memory of the device that needed most, where the scripts recorded it: the
# framework's count (its source in a note) and NVML's count of the process.
PEAK_MEMORY_HEADER = "peak GiB/device"
NVML_MEMORY_HEADER = "NVML GiB/device"
def peak_memory_note(summaries: Sequence[CaseSummary]) -> str | None:
    """What the peak memory columns hold, naming the counts the table's cases were read with."""
    sources = sorted({s.peak_memory_source for s in summaries if s.peak_memory_bytes is not None})
    if not sources:
        return None
    note = (
        f"{PEAK_MEMORY_HEADER}: the largest peak of any rank over the case's repeats, as its "
        f"script recorded it at the end of the run ({'; '.join(sources)})"
        + (
            "; getrusage ru_maxrss: a CPU rank's peak resident memory (the whole process)."
            if any("ru_maxrss" in source for source in sources)
            else "."
        )
    )
    if any(s.peak_memory_nvml_bytes is not None for s in summaries):
        note += (
            f" {NVML_MEMORY_HEADER}: NVML's count of the process's device memory after the "
            "last step (the caching allocator's largest reservation and the CUDA context)."
        )
    return note


def _amp_not_effective(summary: CaseSummary) -> bool:
    """An AMP case that trained in FP32: as its script recorded, else as its plug-in declares."""
    from driver.frameworks.base import FRAMEWORKS

    if summary.case.precision != "amp":
        return False
    if summary.amp_effective is not None:
        return not summary.amp_effective
    framework = summary.case.framework
    return (
        framework in FRAMEWORKS
        and not FRAMEWORKS.get(framework).has_amp_on_cpu
        and summary.versions.get("cuda") in (None, "", "none")
        and not any("gpu" in d.lower() or "nvidia" in d.lower() for d in summary.devices)
    )


def _how_run_notes(summaries: list[CaseSummary]) -> list[str]:
    """How the cases ran where it is not the default: AMP that was not, a smoke profile, XLA,
    DALI, a searched batch, the peak memory."""
    notes: list[str] = []
    noop = sorted({series_name(s) for s in summaries if _amp_not_effective(s)})
    if noop:
        notes.append(
            f"AMP was not effective for {', '.join(noop)} (no low-precision kernels in that "
            "build or on that device; `amp_effective: false` in its logs): its AMP rows trained "
            "in FP32."
        )
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
            f"Profile {markdown_code(profile)} ({shown}): a smoke profile, not the DLPerf protocol "
            "(20 warm-up + 100 measured steps, median of 7)."
        )
    if any(s.case.xla for s in summaries):
        notes.append("w/XLA: compiled with XLA (jit_compile).")
    if any(s.case.options.get("dali") for s in summaries):
        notes.append("DALI: input pipeline on NVIDIA DALI (option `dali`), not the default loader.")
    for s in summaries:
        if s.case.batch_size == "max":
            notes.append(
                f"{s.case.id}: batch `max` resolved by search to {s.batch_size} per device."
            )
    memory = peak_memory_note(summaries)
    if memory:
        notes.append(memory)
    return notes


def _provenance_notes(summaries: list[CaseSummary]) -> list[str]:
    """Where figures come from other than this kit's own measurement."""
    notes: list[str] = []
    published: dict[str, set[str]] = {}
    for s in summaries:
        if s.published_by:
            published.setdefault(s.published_by, set()).add(s.published_url or "no URL")
    for publisher, urls in sorted(published.items()):
        notes.append(
            f"published by {publisher}: figures as published ({', '.join(sorted(urls))}), "
            "imported with `dlperf import`; not measured by this kit, no repeats, no CV."
        )
    unknown = sorted({s.device_model for s in summaries if s.unknown_device})
    if unknown:
        notes.append(
            f"{UNKNOWN_DEVICE_MARK}: published on hardware that names no device model the kit "
            f"knows ({', '.join(unknown)}): as the publisher wrote it, unchecked."
        )
    against = sorted({s.baseline_topology for s in summaries if s.baseline_topology})
    if against:
        notes.append(
            f"(vs {', '.join(against)}): speedup and efficiency against the smallest topology "
            "of the series, where it has no 1n1g case (a model that does not fit one "
            "device): its devices count as one unit, so 4n32g against 1n8g scales perfectly "
            "at 4.00 and 100%."
        )
    if any(s.reported_by_source for s in summaries):
        notes.append("(r): throughput as reported by the source's own log (no step timestamps).")
    for s in summaries:
        if s.imported:
            notes.append(f"(i) {s.case.id}: {s.imported} (dlperf import-logs).")
    return notes


def _mark_notes(summaries: list[CaseSummary]) -> list[str]:
    """What the table's marks on a figure mean, and each variant's options."""
    notes: list[str] = []
    if any(s.superlinear for s in summaries):
        notes.append(
            f"{SUPERLINEAR_MARK}: superlinear, a measured efficiency above 100% by more than its "
            f"noise tolerance, max({SUPERLINEAR_FLOOR:.0%}, CV of the case + CV of its 1n1g): "
            "faster than perfect scaling, which a real run rarely is (a working set that fits "
            "the caches once split) and an edited log easily is; `dlperf release` publishes it "
            "only with a reason (`--superlinear CASE REASON`)."
        )
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


def footnotes(summaries: list[CaseSummary]) -> list[str]:
    return [
        *_how_run_notes(summaries),
        *_provenance_notes(summaries),
        *_mark_notes(summaries),
    ]
