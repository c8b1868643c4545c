"""``dlperf import FILE``: published throughput figures, beside measured cases.

An import file (YAML or CSV, schema :data:`IMPORT_SCHEMA`, documented in docs/reports.md) lists
figures somebody published: framework, code source, model, hardware, nodes and devices, batch,
precision, dataset, XLA, throughput (optionally the publisher's speedup), publisher and URL.
Each figure becomes a rate-only :class:`~driver.core.summary.CaseSummary` marked
``published_by``: one "repeat", no CV, never presented as measured. Its speedup and efficiency
come from the same publisher's 1n1g figure on the same hardware when the file has one, else
from the publisher's own speedup. Report, factor and compare take an import file wherever they
take a session or a version.
"""


from __future__ import annotations

import re
from pathlib import Path

from driver.core.footnotes import UNKNOWN_DEVICE_MARK
from driver.core.summary import CaseSummary, baseline_in, baselines, summarize
from driver.model.case import Case, Topology
from driver.model.figures import (
    EFFICIENCY_TOLERANCE,
    SUFFIXES,
    Figure,
    ImportFile,
    csv_where,
    load_figures,
)
from driver.model.measure import case_stats
from driver.schema import ConfigError

# The device models a published figure's hardware may name (case-insensitive, anywhere in the
# label): every accelerator and CPU line the kit or a publisher it imports has run training
# on. A label outside them is legal (a new device, a typo, or no device at all: "Quantum TPU
# 9000") but is said aloud: `dlperf import` warns and the tables mark the figure with
# UNKNOWN_DEVICE_MARK, so a reader never takes it as a known device's figure.
KNOWN_DEVICE_MODELS: tuple[tuple[str, str], ...] = (
    ("NVIDIA data-center GPU", r"\b(?:[KPVTAHBL]\d{1,3}[A-Z]?|GB\d{3}|GH\d{3}|RTX ?\d{3,5}\w*)\b"),
    ("NVIDIA GeForce / Quadro / TITAN", r"\b(?:GeForce|Quadro|TITAN|Jetson)\b"),
    ("AMD Instinct", r"\bMI\d{2,3}[A-Z]?\b|\bInstinct\b|\bRadeon\b"),
    ("Google TPU", r"\bTPU ?v\d+[a-z]*\b"),
    ("Intel Gaudi / Max / Xeon", r"\b(?:Gaudi\d?|Data Center GPU Max|Xeon)\b"),
    ("AMD EPYC / Ryzen", r"\b(?:EPYC|Ryzen|Threadripper)\b"),
    ("Arm CPU", r"\b(?:Grace|Graviton\d?|Ampere Altra|Neoverse)\b"),
    ("Apple silicon", r"\bApple M\d\b"),
)
_KNOWN_DEVICE = re.compile("|".join(f"(?:{p})" for _, p in KNOWN_DEVICE_MODELS), re.IGNORECASE)


def known_device(hardware: str) -> bool:
    """Whether a hardware label names a device model of :data:`KNOWN_DEVICE_MODELS`."""
    return bool(_KNOWN_DEVICE.search(hardware))


def unknown_devices(loaded: ImportFile) -> list[tuple[int, str]]:
    """(index, hardware) of every figure whose hardware names no known device model."""
    return [(i, f.hardware) for i, f in enumerate(loaded.figures) if not known_device(f.hardware)]


def unknown_device_warning(path: Path, loaded: ImportFile) -> str | None:
    """The warning `dlperf import` prints for figures on unknown hardware (None: there are
    none): each label once, with its first figure, and what the kit knows."""
    first: dict[str, int] = {}
    for index, hardware in unknown_devices(loaded):
        first.setdefault(hardware, index)
    if not first:
        return None
    named = "; ".join(f"{hw!r} (figures[{i}] and every figure on it)" for hw, i in first.items())
    return (
        f"warning: {path}: hardware {named} names no device model the kit knows "
        f"({', '.join(name for name, _ in KNOWN_DEVICE_MODELS)}); imported as given and marked "
        f"'{UNKNOWN_DEVICE_MARK}' in every table; check the spelling, e.g. 'NVIDIA "
        "H100 80GB HBM3' or 'Tesla V100-SXM2-16GB'"
    )



def load_import(path: Path | str) -> ImportFile:
    """An import file, strictly: any problem is one ConfigError naming the file and field."""
    return load_figures(path, _check_cases)


def _check_cases(loaded: ImportFile, path: Path, is_csv: bool) -> None:
    """What the figures say together: one figure per case and publisher, and no efficiency
    above 100% unless the figure says the publisher's scaling is superlinear."""
    summaries = [figure_summary(figure) for figure in loaded.figures]
    index_of = {id(summary): index for index, summary in enumerate(summaries)}

    def where(index: int) -> str:
        return csv_where(f"figures[{index}]") if is_csv else f"figures[{index}]"

    first: dict[tuple[str, str, str], int] = {}
    for index, summary in enumerate(summaries):
        earlier = first.setdefault(summary.key, index)
        if earlier != index:
            raise ConfigError(
                path,
                where(index),
                f"the same case as {where(earlier)} ({summary.case_id} on "
                f"{summary.device_model}, published by {summary.published_by}): a publisher's "
                "case is one figure; remove one (a figure would get a speedup against its twin)",
            )
    for index, figure in enumerate(loaded.figures):
        if figure.superlinear and not figure.note:
            raise ConfigError(
                path,
                f"figures[{index}].note",
                "superlinear: true needs a note saying where the publisher reports it",
            )
    summarize([], published=summaries)  # fills speedup and efficiency, as every report does
    baseline_index = baselines(summaries)
    for index, (figure, summary) in enumerate(zip(loaded.figures, summaries, strict=True)):
        efficiency = summary.efficiency
        if efficiency is None or efficiency <= 1 + EFFICIENCY_TOLERANCE or figure.superlinear:
            continue
        base = baseline_in(summary, baseline_index)
        against = (
            f"against the 1-device figure of {where(index_of[id(base)])} "
            f"({base.stats.median:g} samples/s)"
            if base is not None
            else "the publisher's own speedup"
        )
        raise ConfigError(
            path,
            f"figures[{index}].throughput" if base is not None else f"figures[{index}].speedup",
            f"an efficiency of {efficiency:.2%} (speedup {summary.speedup:g} on "
            f"{summary.case.topology.world_size} devices, {against}) is above 100%: fix the "
            "typo here or in the 1-device figure, or, where the publisher's own figures scale "
            "superlinearly, set superlinear: true with a note saying where",
        )


def _source_key(source: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", source.lower()).strip("-") or "published"


def figure_summary(figure: Figure) -> CaseSummary:
    """A published figure as a rate-only case summary (speedups filled by ``summarize``)."""
    from driver.frameworks.base import FRAMEWORKS

    case = Case(
        model=figure.model,
        framework=FRAMEWORKS.canonical(figure.framework),
        topology=Topology(figure.nodes, figure.devices // figure.nodes),
        batch_size=figure.batch,
        precision=figure.precision,
        dataset=figure.dataset,
        xla=figure.xla,
        variant=figure.variant,
        source=_source_key(figure.source),
        repeats=1,
        options={
            key: value
            for key, value in (
                ("llama_size", figure.llama_size),
                ("seq_len", figure.seq_len),
                ("attention", figure.attention),
            )
            if value is not None
        },
    )
    return CaseSummary(
        case=case,
        stats=case_stats([figure.throughput]),
        batch_size=figure.batch,
        speedup=None,
        efficiency=None,
        throughputs=[figure.throughput],
        devices=[figure.hardware],
        published_by=figure.publisher,
        published_url=figure.url,
        published_speedup=figure.speedup,
        machine=figure.machine,
        unknown_device=not known_device(figure.hardware),
        amp_dtype=published_amp_dtype(figure),
    )


# GPUs without bf16 tensor cores (before Ampere): an AMP figure published on one ran in fp16.
_NO_BF16 = re.compile(r"\b(?:V100|P100|P40|P4|T4|K80|TITAN V|Quadro GV100)\b", re.IGNORECASE)


def published_amp_dtype(figure: Figure) -> str | None:
    """The autocast dtype of a published AMP figure: ``float16`` on a GPU that has no bf16
    (DLPerf's V100s); otherwise not known (None). None for an FP32 figure."""
    if figure.precision != "amp":
        return None
    return "float16" if _NO_BF16.search(figure.hardware) else None


def figure_summaries(path: Path | str) -> list[CaseSummary]:
    """The figures of an import file, for ``summarize(records, published=...)``."""
    return [figure_summary(f) for f in load_import(path).figures]


def imported_summaries(path: Path | str) -> list[CaseSummary]:
    """The figures of an import file as case summaries, speedups derived within the file."""
    return summarize([], published=figure_summaries(path))


def is_import_file(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in SUFFIXES
