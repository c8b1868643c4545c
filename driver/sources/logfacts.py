"""The facts of a run whose logs the kit did not launch, and what those logs say of them.

``dlperf import-logs`` re-measures published upstream logs: a source's parser reads logs that
carry no ``DLPERF-UPSTREAM`` run header, with the case facts (model, topology, per-device batch,
precision, window) given on the command line or in a small YAML file instead (:class:`Facts`).
From them come the run's case (variant ``imported``) and the run header a kit-launched log would
have carried (:func:`case_and_header`); ``driver.core.importlogs`` stores the run as a repeat.

Nothing wins silently: a fact given both on the command line and in the facts file with two
values is refused, and so is a fact the log's own printed parameters contradict (DLLogger's
PARAMETER ``batch_size : 256``, Paddle's argument table, gluon-nlp's ``Namespace(...)``,
:func:`check_printed`), naming both values and where each came from.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, field_validator

from driver.launchers.base import NodeRank
from driver.model.case import MAX_STEPS, Case, Topology, parse_topology
from driver.model.hardware import HardwareError, parse_hardware
from driver.parsers._runheader import PARALLEL_FIELDS, RunHeader, parallel_problem
from driver.registry import UnknownPlugin
from driver.schema import ConfigError, StrictModel, load_document, validate
from driver.sources.base import SOURCES, run_header
from driver.text import FreeText

VARIANT = "imported"


MAX_BATCH = 1_000_000  # the matrix's per-device bound (driver.core.matrix._batch)
MAX_DEGREE = 65_536  # a model-parallel degree: the most devices a topology holds (1024 x 64)


class ImportLogsError(ValueError):
    """Bad facts or logs: the message names the file, the field and the fix."""


class Facts(StrictModel):
    """What the header of a kit-launched log would say, given by the user."""

    model: str
    topology: str = "1n1g"  # <nodes>n<total devices>g, as DLPerf writes it
    batch: int = Field(ge=1, le=MAX_BATCH)  # per device, as the matrix bounds it
    precision: Literal["fp32", "amp"] = "fp32"
    dataset: Literal["synthetic", "real"] = "synthetic"
    xla: bool = False
    warmup_steps: int = Field(ge=0, le=MAX_STEPS)
    measured_steps: int = Field(ge=1, le=MAX_STEPS)
    worker0_only: bool = False
    # default: the source's
    logging: Literal["rank0", "per-node", "per-process", "last-rank"] | None = None
    step_offset: int | None = Field(default=None, ge=0, le=MAX_STEPS)  # default: the source's
    note: FreeText("note") = ""  # where the logs come from (kept in the record)
    # What the logs ran on (``NVIDIA V100-SXM2-16GB``): their machine and device model. Without
    # it they stay "unknown device" and are set beside no measured case.
    hardware: FreeText("label") | None = None
    # The run's model-parallel degrees (its config's; 1: none): ``batch`` is then per
    # data-parallel replica (torchtitan's local batch), and samples count replicas, not devices.
    tensor_parallel: int = Field(default=1, ge=1, le=MAX_DEGREE)
    pipeline_parallel: int = Field(default=1, ge=1, le=MAX_DEGREE)
    context_parallel: int = Field(default=1, ge=1, le=MAX_DEGREE)
    # where each fact came from ("--batch on the command line", "facts.yaml: batch"), for errors
    _origins: dict[str, str] = PrivateAttr(default_factory=dict)

    @field_validator("hardware")
    @classmethod
    def _readable_hardware(cls, value: str | None) -> str | None:
        """A device model the door reads (``driver.model.hardware.parse_hardware``): a
        hardware no table could set beside anything is refused here, not at every report."""
        if value is not None:
            try:
                parse_hardware(value)
            except HardwareError as error:
                raise ValueError(str(error)) from None
        return value

    def origin(self, fact: str) -> str:
        return self._origins.get(fact, "the facts")


FACT_FLAGS = {  # CLI flag -> Facts field
    "model": "model",
    "topology": "topology",
    "batch": "batch",
    "precision": "precision",
    "dataset": "dataset",
    "xla": "xla",
    "warmup_steps": "warmup_steps",
    "measured_steps": "measured_steps",
    "worker0_only": "worker0_only",
    "logging": "logging",
    "step_offset": "step_offset",
    "note": "note",
    "hardware": "hardware",
    "tensor_parallel": "tensor_parallel",
    "pipeline_parallel": "pipeline_parallel",
    "context_parallel": "context_parallel",
}


def load_facts(path: Path | None, overrides: dict[str, Any]) -> Facts:
    """The facts of ``path`` (YAML mapping) and of the command line; a fact given in both with
    two values is refused, naming both (neither silently wins)."""
    where = str(path) if path else "the command line"
    data: dict[str, Any] = {}
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        if path is not None:
            loaded = load_document(path)
            if not isinstance(loaded, dict):
                raise ConfigError(path, "(file)", "must be a mapping of fact -> value")
            data.update(loaded)
        for fact, value in given.items():
            if fact in data and not _same_fact(fact, data[fact], value):
                raise ImportLogsError(
                    f"{fact}: {_flag(fact)} {_shown(value)} on the command line but "
                    f"{_shown(data[fact])} in {path}; give each fact once (drop {_flag(fact)} "
                    "or change the facts file)"
                )
        data.update(given)
        facts = validate(Facts, data, where)
    except ConfigError as error:
        fact = error.field_path.split(".")[0].split("[")[0]
        if fact in given:  # the command line's value is the bad one
            raise ImportLogsError(f"{_flag(fact)} on the command line: {error.message}") from None
        flag = _flag(fact)
        fix = f" (set it in the facts file or with {flag})" if fact in FACT_FLAGS else ""
        raise ImportLogsError(f"{error}{fix}") from None
    try:
        parse_topology(facts.topology)  # the matrix's bounds: 1024 nodes, 64 devices a node
    except ValueError as error:
        raise ImportLogsError(f"{where}: topology: {error}") from None
    for fact in Facts.model_fields:
        if fact in given:
            facts._origins[fact] = f"{_flag(fact)} on the command line"
        elif fact in data:
            facts._origins[fact] = f"{path}: {fact}"
        else:
            facts._origins[fact] = "the default"
    return facts


def _flag(fact: str) -> str:
    return "--" + fact.replace("_", "-")


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _same_fact(fact: str, a: Any, b: Any) -> bool:
    """One fact given twice with the same meaning (``xla: true`` and ``--xla``)."""
    if fact == "topology" and isinstance(a, str) and isinstance(b, str):
        try:
            return Topology.parse(a) == Topology.parse(b)
        except ValueError:
            return False
    return bool(a == b and type(a) is type(b))


def source_launch(source: Any, model: str, origin: str = "the facts") -> Any:
    """The source's launch entry of ``model`` (its logging mode and step offset)."""
    from driver.sources.pypi import PypiSource

    launches = source.section.models if isinstance(source, PypiSource) else source.spec.launches
    if model not in launches:
        raise ImportLogsError(
            f"model {model!r} ({origin}): source {source.name} has no such model; it has "
            f"{', '.join(sorted(launches))}"
        )
    return launches[model]


def case_and_header(source_name: str, facts: Facts) -> tuple[Case, RunHeader, str]:
    """The imported run's case, its run header (node 0's) and its parser."""
    from driver.plugins import load

    load("parsers", "launchers", "frameworks", "sources")
    try:
        source = SOURCES.get(source_name)()
    except UnknownPlugin as error:
        raise ImportLogsError(f"--source: {error}") from None
    launch = source_launch(source, facts.model, facts.origin("model"))
    topology = Topology.parse(facts.topology)
    if facts.worker0_only and topology.nodes == 1:
        raise ImportLogsError("--worker0-only is for multi-node runs; this topology has one node")
    case = Case(
        model=facts.model,
        framework=source.framework,
        topology=topology,
        batch_size=facts.batch,
        precision=facts.precision,
        dataset=facts.dataset,
        xla=facts.xla,
        variant=VARIANT,
        source=source_name,
        warmup_steps=facts.warmup_steps,
        measured_steps=facts.measured_steps,
        total_steps=facts.warmup_steps + facts.measured_steps,
        repeats=1,
    )
    # node 0 of the run, as the kit would have launched it (no rendezvous: nothing connects)
    rank = NodeRank(0, topology.nodes, topology.devices_per_node, master_addr="", master_port=0)
    logging = facts.logging or launch.logging
    step_offset = launch.step_offset if facts.step_offset is None else facts.step_offset
    degrees = {name: getattr(facts, name) for name in PARALLEL_FIELDS}
    problem = parallel_problem(topology.world_size, degrees)
    if problem:
        named = [facts.origin(name) for name in PARALLEL_FIELDS if degrees[name] != 1]
        raise ImportLogsError(f"{', '.join(named)}: {problem} ({topology.label})")
    header = run_header(source_name, case, rank, facts.batch, logging, step_offset)
    header = replace(
        header, worker0_only=facts.worker0_only, hardware=facts.hardware or "", **degrees
    )
    return case, header, source.parser


# Parameters upstream scripts print before training, read only where the format is flat and
# unambiguous: DLLogger's PARAMETER record (JSON ``DLLL`` or plain ``DLL ... - PARAMETER k : v``),
# an argument table of one ``key : value`` per line (Paddle's, after a logger prefix ending in
# ``:``), an argparse ``Namespace(k=v, ...)`` (gluon-nlp), pytorch/examples' ``=> creating model``.
# Nested configuration dumps (tf-models' ``'batch_size': 128`` under a dataset, later
# overridden) are not read: their keys belong to sub-configurations.
ARGUMENT_LINE = re.compile(r"(?:^|:)\s*(?P<key>[A-Za-z_]\w*)\s*:\s*(?P<value>\S+)\s*$")
DLL_PARAMETER = re.compile(r"^DLL \S+ \S+ - PARAMETER (?P<pairs>.*)$")
DLL_PAIR = re.compile(r"(?P<key>[A-Za-z_]\w*) : (?P<value>\S+)")
NAMESPACE = re.compile(r"Namespace\((?P<args>.*)\)")
NAMESPACE_ARG = re.compile(r"(?:^|, )(?P<key>[A-Za-z_]\w*)=(?P<value>'[^']*'|[^,()\s]+)")
CREATING_MODEL = re.compile(r"=> creating model '(?P<value>[\w.\-]+)'")
# How a printed model name (lower case, letters and digits only) spells each kit model.
MODEL_SPELLINGS = {
    "resnet50": r"resnet50(v1|v15)?",
    "inception3": r"inceptionv?3",
    "bert": r"bert[a-z0-9]*",
}
PRECISION_KEYS = ("amp", "use_amp", "use_fp16")  # true: AMP, false: FP32
TOKEN_KEYS = ("in_tokens", "use_avg_len")  # true: batch_size counts tokens, not samples


@dataclass(frozen=True)
class Printed:
    """A parameter a log prints: the fact it bears on, the value that fact would have, where."""

    fact: str
    value: Any
    shown: str  # as the log prints it
    line: int
    spread: str = ""  # how a total was spread over the devices: " over 8 devices"


def _printed_pairs(text: str) -> list[tuple[int, str, str, str]]:
    """(line, key, value, the text as printed) of every parameter printed in a flat form."""
    pairs: list[tuple[int, str, str, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("DLLL "):
            try:
                record = json.loads(stripped[5:])
            except json.JSONDecodeError:
                continue  # the parser names a broken record
            data = record.get("data") if isinstance(record, dict) else None
            if record.get("step") == "PARAMETER" and isinstance(data, dict):
                for key, value in data.items():
                    shown = f"{json.dumps(key)}: {json.dumps(value)}"
                    pairs.append((number, str(key), json.dumps(value).strip('"'), shown))
            continue
        if match := DLL_PARAMETER.match(stripped):
            for m in DLL_PAIR.finditer(match["pairs"]):
                pairs.append((number, m["key"], m["value"], m[0]))
        elif match := NAMESPACE.search(stripped):
            for m in NAMESPACE_ARG.finditer(match["args"]):
                pairs.append((number, m["key"], m["value"].strip("'"), m[0].lstrip(", ")))
        elif match := ARGUMENT_LINE.search(stripped):
            pairs.append((number, match["key"], match["value"], match[0].lstrip(": ")))
        elif match := CREATING_MODEL.search(stripped):
            pairs.append((number, "model", match["value"], match[0]))
    return pairs


def printed_parameters(text: str, world_size: int) -> list[Printed]:
    """What the log itself says about the facts ``batch``, ``model`` and ``precision``."""
    pairs = _printed_pairs(text)
    flags = {key.lower(): value.lower() for _line, key, value, _shown in pairs}
    in_tokens = any(flags.get(key) == "true" for key in TOKEN_KEYS)
    accumulated = flags.get("accumulate", "1") != "1"
    found: list[Printed] = []
    for number, key, value, shown in pairs:
        key_lower = key.lower()
        if key_lower == "batch_size" and value.isdigit() and not in_tokens:
            found.append(Printed("batch", int(value), shown, number))
        elif key_lower == "total_batch_size" and value.isdigit() and not (in_tokens or accumulated):
            spread = f" ({value} over {world_size} devices)"
            found.append(Printed("batch", int(value) / world_size, shown, number, spread))
        elif key_lower in ("arch", "model") and re.fullmatch(r"[A-Za-z][\w.\-]*", value):
            found.append(Printed("model", _kit_model(value), shown, number))
        elif key_lower in PRECISION_KEYS and value.lower() in ("true", "false"):
            precision = "amp" if value.lower() == "true" else "fp32"
            found.append(Printed("precision", precision, shown, number))
        elif key_lower == "dtype" and value in ("float16", "float32"):
            precision = "amp" if value == "float16" else "fp32"
            found.append(Printed("precision", precision, shown, number))
    return found


def _kit_model(printed: str) -> str | None:
    """The kit's model key a printed model name spells, None for another model."""
    squashed = re.sub(r"[^a-z0-9]", "", printed.lower())
    return next((m for m, p in MODEL_SPELLINGS.items() if re.fullmatch(p, squashed)), None)


def check_printed(facts: Facts, world_size: int, logs: list[Path], texts: list[bytes]) -> None:
    """Refuse a fact the log's own printed parameters contradict, naming both values and where
    each came from (a wrong ``--batch`` would scale every figure of the run)."""
    for path, data in zip(logs, texts, strict=True):
        text = data.decode(errors="replace")
        for printed in printed_parameters(text, world_size):
            given = getattr(facts, printed.fact)
            if printed.value == given:
                continue
            if printed.fact == "batch":
                meaning = f"a per-device batch of {printed.value:g}{printed.spread}"
            elif printed.fact == "model":
                meaning = f"the model {printed.value}" if printed.value else "another model"
            else:
                meaning = str(printed.value)
            raise ImportLogsError(
                f"{path}:{printed.line}: the log prints {printed.shown} ({meaning}), but "
                f"{printed.fact} is {_shown(given)} ({facts.origin(printed.fact)}); give the "
                "facts the run had (or check that this is the log of that run)"
            )
