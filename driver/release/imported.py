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
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, model_validator

from driver.core.case import Case, Topology
from driver.core.measure import case_stats
from driver.core.summary import CaseSummary, summarize
from driver.schema import (
    ConfigError,
    FiniteFloat,
    Line,
    Name,
    StrictModel,
    number,
    one_of,
    parse_yaml,
    read_text,
    text,
    validate,
)

IMPORT_SCHEMA = 1
SUFFIXES = (".csv", ".yaml", ".yml")
CSV_SCHEMA_LINE = re.compile(r"#\s*schema:\s*(\S+)\s*")
Url = text(r"https?://[^\s\x00-\x1f\x7f]+", "an http(s) URL")
Count = number(1, 1_000_000, "a whole number from 1")


class Figure(StrictModel):
    """One published figure: a case's median throughput as its publisher printed it."""

    framework: Name  # a framework the kit knows (name, folder or display spelling)
    source: Line = "published"  # the code that ran: OneFlow-Benchmark, DeepLearningExamples...
    model: Name  # the kit's model key: resnet50, inception3, bert
    hardware: Annotated[str, Field(min_length=1, max_length=120)]  # e.g. NVIDIA V100-SXM2-16GB
    nodes: Count
    devices: Count  # in total, over all nodes (DLPerf's "device num")
    batch: Count  # per device
    precision: Annotated[Any, one_of("fp32", "amp")]
    dataset: Annotated[Any, one_of("synthetic", "real")] = "synthetic"
    xla: bool = False
    throughput: Annotated[FiniteFloat, Field(gt=0)]  # samples/s over all devices
    speedup: Annotated[FiniteFloat, Field(gt=0)] | None = None  # as published, vs their 1n1g
    machine: Line = ""  # the system, e.g. DGX-1 (a factor of `dlperf factor`)
    publisher: Line  # who published the figure: "DLPerf v1.0"
    url: Url

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
    for line in content.splitlines():
        if line.lstrip().startswith("#"):
            match = CSV_SCHEMA_LINE.fullmatch(line.strip())
            if match:
                schema = _csv_value(match[1])
            continue
        data_lines.append(line)
    if schema is None:
        raise ConfigError(path, "schema", f"no '# schema: {IMPORT_SCHEMA}' line; add it first")
    rows = list(csv.DictReader(io.StringIO("\n".join(data_lines))))
    figures = []
    for row in rows:
        if None in row:
            raise ConfigError(path, "(file)", f"a row has more cells than the header: {row[None]}")
        figures.append({k.strip(): _csv_value(v) for k, v in row.items() if v and v.strip()})
    return {"schema": schema, "figures": figures}


def load_import(path: Path | str) -> ImportFile:
    """An import file, strictly: any problem is one ConfigError naming the file and field."""
    path = Path(path)
    if path.suffix.lower() not in SUFFIXES:
        raise ConfigError(path, "(file)", f"an import file is {', '.join(SUFFIXES)}")
    content = read_text(path)
    if path.suffix.lower() == ".csv":
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
    except ConfigError as error:
        if path.suffix.lower() == ".csv":  # figures[3] is the 4th data row
            where = re.sub(
                r"figures\[(\d+)\]", lambda m: f"row {int(m[1]) + 1}", error.field_path
            )
            raise ConfigError(path, where, error.message) from None
        raise
    _check_frameworks(loaded, path)
    return loaded


def _check_frameworks(loaded: ImportFile, path: Path) -> None:
    from driver.plugins import load_all
    from driver.registry import FRAMEWORKS

    load_all()
    for index, figure in enumerate(loaded.figures):
        if figure.framework not in FRAMEWORKS:
            raise ConfigError(
                path,
                f"figures[{index}].framework",
                f"{figure.framework!r} is not a framework the kit knows "
                f"({', '.join(FRAMEWORKS.names())})",
            )


def _source_key(source: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", source.lower()).strip("-") or "published"


def figure_summary(figure: Figure) -> CaseSummary:
    """A published figure as a rate-only case summary (speedups filled by ``summarize``)."""
    from driver.registry import FRAMEWORKS

    case = Case(
        model=figure.model,
        framework=FRAMEWORKS.canonical(figure.framework),
        topology=Topology(figure.nodes, figure.devices // figure.nodes),
        batch_size=figure.batch,
        precision=figure.precision,
        dataset=figure.dataset,
        xla=figure.xla,
        source=_source_key(figure.source),
        repeats=1,
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
    )


def figure_summaries(path: Path | str) -> list[CaseSummary]:
    """The figures of an import file, for ``summarize(records, published=...)``."""
    return [figure_summary(f) for f in load_import(path).figures]


def imported_summaries(path: Path | str) -> list[CaseSummary]:
    """The figures of an import file as case summaries, speedups derived within the file."""
    return summarize([], published=figure_summaries(path))


def is_import_file(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in SUFFIXES
