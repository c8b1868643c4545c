"""``dlperf import-logs``: re-measure logs the kit did not launch (published upstream logs).

A source's parser reads logs that carry no ``DLPERF-UPSTREAM`` run header, with the case facts
(model, topology, per-device batch, precision, window) given on the command line or in a small
YAML file instead. The run becomes one repeat of a session that ``report``, ``factor`` and
``compare`` read like any other: each log is stored as ``node<i>.log``, the run header made from
the facts first and the original bytes after it unchanged (their path and SHA-256 are in the
record), so the audit recomputes it from its raw logs like a repeat the kit ran. Its case has
the variant ``imported`` and every record says "imported logs, not run by dlperf" (``extra``);
the report marks its figures (i) and footnotes them.

A multi-node run of which only worker 0's log was kept is accepted with ``--worker0-only``: node
0's logging ranks stand for the job (samples scaled by world size / ranks logged) and every
figure says "from worker 0's log"::

    dlperf import-logs --source ngc-pytorch --logs rn50_8x8.log --facts facts.yaml --worker0-only
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from driver.core.case import Case, Topology
from driver.frameworks.base import REPO_ROOT
from driver.parsers._upstream import HEADER_MARK, LOGGING_MODES, RunHeader, header_line
from driver.parsers.base import LogParseError
from driver.registry import SOURCES
from driver.schema import ConfigError, StrictModel, load_document, validate

IMPORTED = "imported logs, not run by dlperf"
WORKER0 = "from worker 0's log"
VARIANT = "imported"


class ImportLogsError(ValueError):
    """Bad facts or logs: the message names the file, the field and the fix."""


class Facts(StrictModel):
    """What the header of a kit-launched log would say, given by the user."""

    model: str
    topology: str = "1n1g"  # <nodes>n<total devices>g, as DLPerf writes it
    batch: int = Field(ge=1)  # per device
    precision: Literal["fp32", "amp"] = "fp32"
    dataset: Literal["synthetic", "real"] = "synthetic"
    xla: bool = False
    warmup_steps: int = Field(ge=0)
    measured_steps: int = Field(ge=1)
    worker0_only: bool = False
    logging: Literal["rank0", "per-node", "per-process"] | None = None  # default: the source's
    step_offset: int | None = Field(default=None, ge=0)  # default: the source's
    note: str = ""  # where the logs come from (kept in the record)


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
}


def load_facts(path: Path | None, overrides: dict[str, Any]) -> Facts:
    """The facts of ``path`` (YAML mapping), the command line's values winning."""
    where = str(path) if path else "the command line"
    data: dict[str, Any] = {}
    try:
        if path is not None:
            loaded = load_document(path)
            if not isinstance(loaded, dict):
                raise ConfigError(path, "(file)", "must be a mapping of fact -> value")
            data.update(loaded)
        data.update({k: v for k, v in overrides.items() if v is not None})
        facts = validate(Facts, data, where)
    except ConfigError as error:
        flag = "--" + error.field_path.split(".")[0].split("[")[0].replace("_", "-")
        fix = f" (set it in the facts file or with {flag})" if flag[2:] in FACT_FLAGS else ""
        raise ImportLogsError(f"{error}{fix}") from None
    try:
        Topology.parse(facts.topology)
    except ValueError as error:
        raise ImportLogsError(f"{where}: topology: {error}") from None
    return facts


def source_launch(source: Any, model: str) -> Any:
    """The source's launch entry of ``model`` (its logging mode and step offset)."""
    from driver.sources.pypi import PypiSource

    launches = source.section.models if isinstance(source, PypiSource) else source.spec.launches
    if model not in launches:
        raise ImportLogsError(
            f"source {source.name} has no model {model!r}; it has {', '.join(sorted(launches))}"
        )
    return launches[model]


def case_and_header(source_name: str, facts: Facts) -> tuple[Case, RunHeader, str]:
    """The imported run's case, its run header (node 0's) and its parser."""
    source = SOURCES.get(source_name)()
    launch = source_launch(source, facts.model)
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
    header = RunHeader(
        source=source_name,
        model=facts.model,
        node_rank=0,
        nodes=topology.nodes,
        procs_per_node=topology.devices_per_node,
        batch=facts.batch,
        logging=facts.logging or launch.logging,
        step_offset=launch.step_offset if facts.step_offset is None else facts.step_offset,
        warmup_steps=facts.warmup_steps,
        measured_steps=facts.measured_steps,
        worker0_only=facts.worker0_only,
    )
    return case, header, source.parser


def expand(paths: list[str]) -> list[Path]:
    """Files in the given order; a folder gives its files sorted by name (node0.log, ...)."""
    files: list[Path] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.is_file())
        elif path.is_file():
            files.append(path)
        else:
            raise ImportLogsError(f"{path}: no such log file or folder")
    if not files:
        raise ImportLogsError(f"{', '.join(paths)}: no log files")
    return files


def import_run(session_root: Path, source_name: str, facts: Facts, logs: list[Path]) -> Any:
    """Store one run's logs as the next repeat of its case in the session; its record."""
    from dataclasses import replace

    from driver.core.measure import measure_logs
    from driver.core.results import RepeatRecord, Session, sha256_of_logs
    from driver.runtimes.base import Verdict

    case, header, parser = case_and_header(source_name, facts)
    expected = 1 if facts.worker0_only else case.topology.nodes
    if len(logs) != expected:
        raise ImportLogsError(
            f"{case.topology.label} needs {expected} log(s) (one per node, in node order"
            f"{'; worker 0 only' if facts.worker0_only else ''}), got {len(logs)}: "
            + ", ".join(map(str, logs))
        )
    texts = []
    for path in logs:
        data = path.read_bytes()
        if HEADER_MARK.encode() in data:
            raise ImportLogsError(
                f"{path}: already has a {HEADER_MARK.strip()} run header (a log the kit ran): "
                "copy its repeat folder into a session instead of importing it"
            )
        texts.append(data)
    stored = {}  # node log name -> (its bytes: the header made from the facts, then the original)
    origins = []
    for rank, (path, data) in enumerate(zip(logs, texts, strict=True)):
        name = f"node{rank}.log"
        line = header_line(replace(header, node_rank=rank)) + "\n"
        stored[name] = line.encode() + data
        origins.append(
            {"file": str(path.resolve()), "sha256": hashlib.sha256(data).hexdigest(), "as": name}
        )
    try:  # measured before anything is written to the session
        texts_read = {name: data.decode(errors="replace") for name, data in stored.items()}
        measurement, parsed = measure_logs(case, parser, texts_read, facts.batch)
    except LogParseError as error:
        raise ImportLogsError(
            f"{', '.join(map(str, logs))}: parser {parser} cannot measure it with these facts: "
            f"{error}"
        ) from None
    session = Session.open(session_root, {"imported": IMPORTED})
    session.save_case(case)
    done = [int(p.name[len("repeat-") :]) for p in session.case_dir(case).glob("repeat-[0-9][0-9]")]
    repeat = max(done, default=0) + 1
    directory = session.fresh_repeat_dir(case, repeat)
    for name, data in stored.items():
        (directory / name).write_bytes(data)
    note = IMPORTED + (f", every figure {WORKER0}" if facts.worker0_only else "")
    now = time.time()
    record = RepeatRecord(
        case_id=case.id,
        repeat=repeat,
        verdict=Verdict.OK.value,
        batch_size=facts.batch,
        started_at=now,  # when it was imported; the run's own times are in its logs
        finished_at=now,
        commands=[],
        exit_codes={},
        logs=sorted(stored),
        log_sha256=sha256_of_logs(directory, sorted(stored)),
        parser=parser,
        measurement=measurement,
        header=parsed.header,
        detail="",
        runtime="imported",
        extra={
            "imported": note,
            "imported_from": origins,
            "worker0_only": facts.worker0_only,
            "facts": facts.model_dump(),
        },
    )
    session.write_record(directory, record)
    return record


def cmd_import_logs(args: argparse.Namespace) -> int:
    from driver.frontend.cli import check_session_name

    overrides = {field: getattr(args, flag) for flag, field in FACT_FLAGS.items()}
    session = Path(args.results) / check_session_name(args.session)
    try:
        facts = load_facts(Path(args.facts) if args.facts else None, overrides)
        runs = [expand(group) for group in args.logs]
        for logs in runs:
            record = import_run(session, args.source, facts, logs)
            measured = record.measurement
            kind = " (reported by the source)" if measured.reported_by_source else ""
            print(
                f"{record.case_id} repeat {record.repeat}: {measured.throughput:.2f} "
                f"samples/s{kind}; {record.extra['imported']}"
            )
    except ImportLogsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"session: {session}  (dlperf report {session})")
    return 0


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "import-logs", help="re-measure logs the kit did not launch (facts instead of a header)"
    )
    parser.add_argument("--source", required=True, help="the upstream source that wrote them")
    parser.add_argument(
        "--logs",
        nargs="+",
        action="append",
        required=True,
        metavar="FILE|DIR",
        help="one run's logs in node order (a folder: its files by name); repeat for more runs",
    )
    parser.add_argument("--facts", help="YAML mapping of the facts below")
    parser.add_argument("--model")
    parser.add_argument("--topology", help="<nodes>n<total devices>g, e.g. 2n16g")
    parser.add_argument("--batch", type=int, help="per-device batch")
    parser.add_argument("--precision", choices=("fp32", "amp"))
    parser.add_argument("--dataset", choices=("synthetic", "real"))
    parser.add_argument("--xla", action="store_const", const=True, default=None)
    parser.add_argument("--warmup-steps", type=int)
    parser.add_argument("--measured-steps", type=int)
    parser.add_argument(
        "--worker0-only",
        action="store_const",
        const=True,
        default=None,
        help="a multi-node run of which only worker 0's log was kept",
    )
    parser.add_argument("--logging", choices=LOGGING_MODES, help="default: the source's")
    parser.add_argument("--step-offset", type=int, help="default: the source's")
    parser.add_argument("--note", help="where the logs come from (kept in the record)")
    parser.add_argument("--results", default=str(REPO_ROOT / "results"))
    parser.add_argument("--session", required=True, help="session name under --results")
    parser.set_defaults(func=cmd_import_logs)
