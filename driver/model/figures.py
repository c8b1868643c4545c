"""Published figures, references and device peaks: the one type of a published figure
(:class:`Figure`), the one loader of figure files (``published/*/*.yaml``, ``dlperf import``'s
files) and of ``reports/references.yaml``, the one loader and matcher of ``reports/peaks.yaml``
and model-FLOPs utilization.

    MFU = throughput (samples/s) x FLOPs per sample / (devices x dense peak FLOP/s)

Read by the plan (published figures per device; a peak for its FLOP estimates, a memory for
Llama's fit), the session tables (MFU where the FLOPs need no torch: a formula, or a count at
the model's default shape) and a release (imported figures, references, MFU of every counted
model). What the figures say together (one
figure per case and publisher, no efficiency above 100%) needs their summaries and is checked
by ``driver.release.imported``.
"""

from __future__ import annotations

import csv
import io
import os
import re
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    Field,
    StrictInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from driver.bench.contract import MODELS
from driver.schema import (
    ConfigError,
    Count,
    FiniteFloat,
    Name,
    StrictModel,
    Url,
    did_you_mean,
    load_document,
    one_of,
    parse_yaml,
    read_text,
    schema_version,
    stat_of,
    validate,
)
from driver.text import FreeText, unsafe_character
from driver.workloads.llama import LLAMA_SIZES

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


def peak_precision(
    precision: str, options: Mapping[str, Any], entry: Mapping[str, Any] | None = None
) -> str:
    """The peak column a run computes in, for a run's record and a case before it runs alike.
    AMP: its autocast dtype (``amp_dtype``: bfloat16 / bf16 -> bf16, float16 / fp16 -> fp16;
    ``auto``, a case whose script has not chosen yet: bf16 where the device ``entry`` has a bf16
    peak, as ``--amp-dtype auto`` picks, else fp16; absent: fp16, what the records of the kits
    before the field ran). fp32: tf32 where the run turns TF32 math on (``tf32``), else fp32."""
    if precision == "amp":
        dtype = str(options.get("amp_dtype") or "float16").lower()
        if dtype == "auto":
            return "bf16" if "bf16" in ((entry or {}).get("peaks") or {}) else "fp16"
        return "bf16" if dtype in ("bfloat16", "bf16") else "fp16"
    return "tf32" if options.get("tf32") else "fp32"


def mfu(
    throughput: float, flops_per_sample: float | None, devices: int, peak_tflops: float | None
) -> float | None:
    if not flops_per_sample or not peak_tflops or devices <= 0:
        return None
    return throughput * flops_per_sample / (devices * peak_tflops * 1e12)


# Published figures --------------------------------------------------------------------------------

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



def load_figures(
    path: Path | str, check: Callable[[ImportFile, Path, bool], None] | None = None
) -> ImportFile:
    """A file of published figures (YAML or CSV), strictly: any problem is one ConfigError
    naming the file and field. ``check(loaded, path, is_csv)``: what the caller asks of the
    figures together, its errors named as the file's own (a CSV's rows, not figures[i])."""
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
        if check is not None:
            check(loaded, path, is_csv)
    except ConfigError as error:
        if is_csv:  # figures[3] is the 4th data row
            raise ConfigError(path, csv_where(error.field_path), error.message) from None
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


def csv_where(field_path: str) -> str:
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



# References ---------------------------------------------------------------------------------------

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
