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

import csv
import io
import re
import stat
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from driver.bench.contract import MODELS
from driver.core.report import UNKNOWN_DEVICE_MARK
from driver.core.summary import CaseSummary, baseline_in, baselines, summarize
from driver.model.case import Case, Topology
from driver.model.measure import case_stats
from driver.schema import (
    ConfigError,
    Count,
    FiniteFloat,
    Name,
    StrictModel,
    Url,
    did_you_mean,
    one_of,
    parse_yaml,
    read_text,
    stat_of,
    validate,
)
from driver.text import FreeText, unsafe_character
from driver.workloads.llama import LLAMA_SIZES

IMPORT_SCHEMA = 1
SUFFIXES = (".csv", ".yaml", ".yml")
CSV_SCHEMA_LINE = re.compile(r"#\s*schema:\s*(\S+)\s*")
# Every text field is free text of a bounded length without control or format characters
# (driver.text): a newline or tab splits a Markdown table row or a CSV record of every report the
# figure reaches, U+202E turns the rest of a row right to left.
VARIANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")  # as a matrix suite's variant names

# Plausible samples/s per device for a published training figure. Below 1e-3 (one sample in
# over 16 minutes) is no GPU or CPU training run of the kit's models but a unit slip (per hour,
# per ms) or a typo; above 1e6 is ~300x the fastest published per-GPU ResNet-50 figures (a few
# thousand images/s on an A100/H100), so it catches a total typed as per device, a wrong unit
# (tokens/s) and 1e308 while leaving room for faster hardware.
MIN_SAMPLES_PER_S_PER_DEVICE = 1e-3
MAX_SAMPLES_PER_S_PER_DEVICE = 1e6
# Scaling efficiency above 100% is refused unless the figure says ``superlinear: true``: two
# separately measured and rounded figures (N devices, 1 device) of a run that scales perfectly
# can put the ratio a little above 100%, so 2% is let through; 1250% is a typo.
EFFICIENCY_TOLERANCE = 0.02

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


def _known_model(model: Any) -> str:
    if not isinstance(model, str) or model not in MODELS:
        shown = repr(model) if isinstance(model, str) else f"{model!r} ({type(model).__name__})"
        raise ValueError(
            f"{shown} is not a model the kit knows{did_you_mean(str(model), MODELS)}; use the "
            f"kit's model key: {', '.join(MODELS)}"
        )
    return model


def _variant(variant: Any) -> str:
    if not isinstance(variant, str) or not VARIANT.fullmatch(variant):
        raise ValueError(
            f"{variant!r} is not a variant name: letters, digits, - and _ (a matrix suite's "
            "variant, e.g. dali; default: none)"
        )
    return variant


class Figure(StrictModel):
    """One published figure: a case's median throughput as its publisher printed it."""

    framework: Name  # a framework the kit knows (name, folder or display spelling)
    source: FreeText("name") = "published"  # the code that ran: OneFlow-Benchmark, ...
    model: Annotated[Any, AfterValidator(_known_model)]  # the kit's key: resnet50, bert, ...
    hardware: Annotated[FreeText("label"), Field(min_length=1)]  # NVIDIA V100-SXM2-16GB
    nodes: Count
    devices: Count  # in total, over all nodes (DLPerf's "device num")
    batch: Count  # per device
    precision: Annotated[Any, one_of("fp32", "amp")]
    dataset: Annotated[Any, one_of("synthetic", "real")] = "synthetic"
    xla: bool = False
    # The kit's variant of the case (a matrix suite's variant name, e.g. dali / nodali): a figure
    # pairs with the kit's cases of the same variant.
    variant: Annotated[Any, AfterValidator(_variant)] = "default"
    throughput: Annotated[FiniteFloat, Field(gt=0)]  # samples/s over all devices
    speedup: Annotated[FiniteFloat, Field(gt=0)] | None = None  # as published, vs their 1n1g
    machine: FreeText("name") = ""  # the system, e.g. DGX-1 (a factor of `dlperf factor`)
    publisher: Annotated[FreeText("name"), Field(min_length=1)]  # who: "DLPerf v1.0"
    url: Url
    # The publisher's own figures scale above 100% efficiency (said in ``note``), not a typo.
    superlinear: bool = False
    note: FreeText("note") = ""  # anything to say of the figure; where superlinear is published
    # Token models (Llama): the size and the tokens per sample; a figure published in tokens/s
    # per device gives ``tokens_per_device`` instead of ``throughput`` (converted, then bounded).
    llama_size: Annotated[Any, one_of(*LLAMA_SIZES)] | None = None
    seq_len: Annotated[Count, Field(gt=0)] | None = None
    tokens_per_device: Annotated[FiniteFloat, Field(gt=0)] | None = None
    # The attention kernel the publisher's Llama run used (sdpa, flex), where it is known:
    # `dlperf factor` names it where a pair differs in it.
    attention: FreeText("name") | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_tokens(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("tokens_per_device") is None:
            return data
        if "throughput" in data:
            raise ValueError("give throughput (samples/s) or tokens_per_device, not both")
        seq_len, devices = data.get("seq_len"), data.get("devices")
        if not isinstance(seq_len, int) or seq_len <= 0 or not isinstance(devices, int):
            raise ValueError("tokens_per_device needs seq_len (tokens per sample) and devices")
        rate = data["tokens_per_device"]
        if not isinstance(rate, int | float) or isinstance(rate, bool):
            return data  # refused by the field's own type
        return {**data, "throughput": rate * devices / seq_len}

    @field_validator("throughput")
    @classmethod
    def _plausible_throughput(cls, throughput: float, info: ValidationInfo) -> float:
        devices = info.data.get("devices")
        if not isinstance(devices, int):
            return throughput  # devices is refused on its own
        per_device = throughput / devices
        if not MIN_SAMPLES_PER_S_PER_DEVICE <= per_device <= MAX_SAMPLES_PER_S_PER_DEVICE:
            raise ValueError(
                f"{throughput:g} samples/s over {devices} device(s) is {per_device:g} per "
                f"device, outside the plausible {MIN_SAMPLES_PER_S_PER_DEVICE:g} to "
                f"{MAX_SAMPLES_PER_S_PER_DEVICE:g}; give the total samples/s of all devices "
                "as published (not per hour, per ms or in tokens)"
            )
        return throughput

    @model_validator(mode="after")
    def _devices_per_node(self) -> Figure:
        if self.devices % self.nodes:
            raise ValueError(
                f"devices ({self.devices}, the total) must be a multiple of nodes ({self.nodes})"
            )
        return self


class ImportFile(StrictModel):
    schema_: Annotated[Any, one_of(IMPORT_SCHEMA)] = Field(alias="schema")
    figures: Annotated[list[Figure], Field(min_length=1)]


def _csv_value(cell: str) -> Any:
    """A CSV cell as the YAML loader would type it (numbers, booleans); empty cells absent."""
    lowered = cell.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(cell)
        except ValueError:
            pass
    return cell.strip()


def _from_csv(content: str, path: Path) -> dict[str, Any]:
    """CSV: ``# schema: 1`` on a comment line (``#`` lines are comments: cite sources there),
    then a header row of figure fields and one figure per row."""
    schema: Any = None
    data_lines = []
    content = content.removeprefix("\ufeff")  # spreadsheets save "CSV UTF-8" with a BOM
    # split on "\n" only: str.splitlines would also split on \v, \f, \x1c-\x1e and \x85 and so
    # hide a control character inside a cell (each is refused below, naming its cell)
    for line in content.split("\n"):
        if line.lstrip().startswith("#"):
            match = CSV_SCHEMA_LINE.fullmatch(line.strip())
            if match:
                schema = _csv_value(match[1])
            continue
        data_lines.append(line)
    if schema is None:
        raise ConfigError(path, "schema", f"no '# schema: {IMPORT_SCHEMA}' line; add it first")
    try:
        rows = [row for row in csv.reader(io.StringIO("\n".join(data_lines))) if row]
    except csv.Error as error:
        raise ConfigError(path, "(file)", f"not a readable CSV table ({error})") from None
    if not rows:
        return {"schema": schema, "figures": []}
    header = [cell.strip() for cell in rows[0]]
    for column, name in enumerate(header, 1):
        what = unsafe_character(rows[0][column - 1].strip(" "))
        if what:
            raise ConfigError(path, f"header, column {column}", f"holds {what}; remove it")
        if not name:
            raise ConfigError(path, f"header, column {column}", "has no name; name the field")
        if name in header[: column - 1]:
            first = header.index(name) + 1
            raise ConfigError(
                path,
                f"header, column {column}",
                f"{name!r} is also column {first}: a field may be one column; remove one",
            )
    figures = []
    for row_number, row in enumerate(rows[1:], 1):
        if len(row) > len(header):
            raise ConfigError(
                path, f"row {row_number}", f"has more cells than the header: {row[len(header) :]}"
            )
        figure = {}
        for name, cell in zip(header, row, strict=False):
            what = unsafe_character(cell.strip(" "))
            if what:
                raise ConfigError(path, f"row {row_number}.{name}", f"holds {what}; remove it")
            if cell.strip():
                figure[name] = _csv_value(cell)
        figures.append(figure)
    return {"schema": schema, "figures": figures}


def load_import(path: Path | str) -> ImportFile:
    """An import file, strictly: any problem is one ConfigError naming the file and field."""
    path = Path(path)
    if path.suffix.lower() not in SUFFIXES:
        raise ConfigError(path, "(file)", f"an import file is {', '.join(SUFFIXES)}")
    _refuse_non_file(path)
    content = read_text(path)
    is_csv = path.suffix.lower() == ".csv"
    if is_csv:
        data = _from_csv(content, path)
    else:
        data = parse_yaml(content, path)
        if isinstance(data, dict) and isinstance(data.get("figures"), list):
            # file-level publisher / url / source are defaults for every figure
            defaults = {k: data[k] for k in ("publisher", "url", "source", "machine") if k in data}
            data = {
                **{k: v for k, v in data.items() if k not in defaults},
                "figures": [
                    {**defaults, **f} if isinstance(f, dict) else f for f in data["figures"]
                ],
            }
    try:
        loaded = validate(ImportFile, data, path)
        _check_frameworks(loaded, path)
        _check_cases(loaded, path, is_csv)
    except ConfigError as error:
        if is_csv:  # figures[3] is the 4th data row
            raise ConfigError(path, _csv_where(error.field_path), error.message) from None
        raise
    return loaded


def _refuse_non_file(path: Path) -> None:
    """A FIFO, socket or device given as an import file is refused before it is opened: a
    read of a FIFO blocks until something writes to it (forever, when nothing does)."""
    mode = stat_of(path).st_mode
    if stat.S_ISDIR(mode):
        raise ConfigError(path, "(file)", "is a directory; give the path of a file")
    if not stat.S_ISREG(mode):
        kind = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "not a regular file"
        raise ConfigError(
            path, "(file)", f"is {kind}; give a regular file (save the figures to a file first)"
        )


def _csv_where(field_path: str) -> str:
    return re.sub(r"figures\[(\d+)\]", lambda m: f"row {int(m[1]) + 1}", field_path)


def _check_frameworks(loaded: ImportFile, path: Path) -> None:
    from driver.frameworks.base import FRAMEWORKS
    from driver.plugins import load

    load("frameworks")
    for index, figure in enumerate(loaded.figures):
        if figure.framework not in FRAMEWORKS:
            raise ConfigError(
                path,
                f"figures[{index}].framework",
                f"{figure.framework!r} is not a framework the kit knows "
                f"({', '.join(FRAMEWORKS.names())})",
            )


def _check_cases(loaded: ImportFile, path: Path, is_csv: bool) -> None:
    """What the figures say together: one figure per case and publisher, and no efficiency
    above 100% unless the figure says the publisher's scaling is superlinear."""
    summaries = [figure_summary(figure) for figure in loaded.figures]
    index_of = {id(summary): index for index, summary in enumerate(summaries)}

    def where(index: int) -> str:
        return _csv_where(f"figures[{index}]") if is_csv else f"figures[{index}]"

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
