"""The results store: one folder per session, one folder per finished repeat.

    results/<session>/session.json
    results/<session>/cases/<case id>/case.json
    results/<session>/cases/<case id>/repeat-03/{record.json, node0.log, node1.log, ...}
    results/<session>/cases/<case id>/repeat-03.failed-1/...   (a failed attempt, kept aside)

A repeat folder is written once: ``record.json`` is the last file written, so a folder with a
record is finished and a rerun of the session skips it (resume); a folder without one is a
crash leftover and is moved aside before the repeat runs again. Nothing is overwritten.

:class:`RepeatRecord` is the one on-disk record of a repeat; :meth:`Session.record` assembles it
from what ran (the plan), how it ended (the runtime's outcome) and its logs, read once
(:class:`RepeatLogs`).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from pydantic import ConfigDict, Field, ValidationError

from driver.files import KitWriteError, ensure_dir, sha256_bytes, write_json
from driver.frameworks.base import REPO_ROOT
from driver.model.case import Case
from driver.model.measure import RepeatMeasurement
from driver.schema import StrictModel, schema_version, strict_json
from driver.telemetry.summary import node_of

if TYPE_CHECKING:
    from driver.parsers.base import ParsedLog

RECORD = "record.json"
# A node's log in a repeat's folder; group 1 is the node's index.
NODE_LOG = re.compile(r"^node(\d+)\.log$")
# What the kit itself writes into a repeat's folder besides its record and the logs the record
# hashes: an interruption's facts (``runtimes.base``), a runtime's traceback (``core.runner``),
# srun's own messages (``runtimes.slurm.step``) and the telemetry sampler's file per node. A
# run takes these, and nothing else it finds there, as its own when it seals.
INTERRUPTED = "interrupted.json"
RUNTIME_ERROR_LOG = "runtime-error.txt"
SRUN_LOG = "srun.log"


def kit_repeat_file(name: str) -> bool:
    """Whether ``name`` (a file at the top of a repeat's folder) is one the kit writes there
    besides its record and logs."""
    return name in (INTERRUPTED, RUNTIME_ERROR_LOG, SRUN_LOG) or node_of(name) is not None
# 1: the first released versions; 2: adds ``log_sha256`` (the logs a record was measured from);
# 3: adds ``fingerprints`` (every rank's fingerprint facts, as the runner parsed them).
SCHEMA_VERSION = 3
KNOWN_SCHEMAS = (1, 2, 3)
SESSION_SCHEMA = 1  # session.json (unchanged by record schemas 2 and 3)
RecordSchema = schema_version(KNOWN_SCHEMAS)


class RecordError(ValueError):
    """A record file the kit cannot trust: unreadable, wrong schema, a field out of range."""


def kit_revision(repo_root: Path = REPO_ROOT) -> dict[str, Any]:
    """The kit's git commit, and whether its code differs from that commit."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=repo_root, capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = git("rev-parse", "HEAD")
    if not commit:  # a copy without .git (a GPU node's copy): the commit it was packed at
        return passed_in_revision(repo_root)
    return {
        "commit": commit,
        # reports/ holds the kit's output (a version being released is untracked while it is
        # written), not its code: changes there do not make the kit dirty.
        "dirty": bool(git("status", "--porcelain", "--", ".", ":(exclude)reports")),
    }


# The commit a copy without .git was made from: `make gpu-pack` writes the file into the copy,
# or the command that runs the copy sets the variable. Both are named in docs/gpu-check.md.
KIT_COMMIT_VAR = "DLPERF_KIT_COMMIT"
KIT_COMMIT_FILE = ".dlperf-kit-commit"
_COMMIT = re.compile(r"[0-9a-f]{40}")


def passed_in_revision(repo_root: Path = REPO_ROOT) -> dict[str, Any]:
    """``{"commit", "dirty", "passed_in"}`` from $DLPERF_KIT_COMMIT (``<sha>`` or
    ``<sha>-dirty``) or the ``.dlperf-kit-commit`` file beside the code; commit None when
    neither holds a full commit id."""
    text = os.environ.get(KIT_COMMIT_VAR, "").strip()
    source = KIT_COMMIT_VAR
    if not text:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            text = (repo_root / KIT_COMMIT_FILE).read_text().strip()
            source = KIT_COMMIT_FILE
    commit, _, state = text.partition("-")
    if not _COMMIT.fullmatch(commit) or state not in ("", "dirty"):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": state == "dirty", "passed_in": source}


class CommandRecord(StrictModel):
    node: str
    argv: list[str]
    env: dict[str, str]
    workdir: str | None = None


class RankFacts(StrictModel):
    """Ranks of a repeat whose headers carry the same fingerprint facts."""

    ranks: list[int]
    facts: dict[str, Any]


def rank_fingerprints(parsed: ParsedLog) -> list[RankFacts]:
    """The fingerprint facts of every rank's header, ranks with equal facts together (node 0's
    host facts for a rate-only upstream log); [] where no header carries a fingerprint."""
    headers = [(rank, parsed.ranks[rank].header) for rank in sorted(parsed.ranks)]
    if not headers and parsed.meta.get("host"):
        headers = [(0, dict(parsed.meta["host"]))]
    groups: dict[str, list[int]] = {}
    for rank, header in headers:
        facts = header.get("fingerprint")
        if isinstance(facts, dict):  # checked facts (``measure_checked``): JSON data
            groups.setdefault(json.dumps(facts, sort_keys=True), []).append(rank)
    return [RankFacts(ranks=ranks, facts=json.loads(key)) for key, ranks in groups.items()]


class RepeatRecord(StrictModel):
    """What one repeat produced: everything needed to recompute it from its raw logs."""

    schema_: RecordSchema = Field(SCHEMA_VERSION, alias="schema")
    case_id: str
    repeat: Annotated[int, Field(ge=0)]
    verdict: str
    batch_size: Annotated[int, Field(ge=1)]
    started_at: float
    finished_at: float
    commands: list[CommandRecord]
    exit_codes: dict[str, int | None]
    logs: list[str]  # file names in the repeat folder
    parser: str
    measurement: RepeatMeasurement | None = None
    header: dict[str, Any] = Field(default_factory=dict)  # rank 0's header: versions, devices
    detail: str = ""
    runtime: str = "local"
    extra: dict[str, Any] = Field(default_factory=dict)  # telemetry, image digests, ...
    log_sha256: dict[str, str] = Field(default_factory=dict)  # log name -> sha256 (schema 2)
    # ``rank_fingerprints`` of the logs the runner measured (schema 3), which the seal holds;
    # None where not measured (a repeat that did not finish ok, an older record)
    fingerprints: list[RankFacts] | None = None

    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True)

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    @property
    def throughput(self) -> float | None:
        return self.measurement.throughput if self.measurement else None

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)

    @classmethod
    def parse(cls, content: str | bytes, name: str) -> RepeatRecord:
        """A record from its file's bytes; any problem is a RecordError naming ``name``."""
        try:
            data = strict_json(content)
        except ValueError as error:  # JSONDecodeError included
            raise RecordError(f"{name}: not a valid record ({error})") from None
        if not isinstance(data, dict):
            raise RecordError(f"{name}: not a valid record (a JSON object is expected)")
        if "schema" not in data:
            raise RecordError(f"{name}: no schema version (field 'schema'): not a dlperf record")
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            problems = "; ".join(
                f"field {'.'.join(str(p) for p in e['loc']).replace('schema_', 'schema')}: "
                f"{e['msg']}"
                for e in error.errors()
            )
            raise RecordError(f"{name}: {problems}") from None


def load_record(path: Path) -> RepeatRecord:
    try:
        content = path.read_bytes()
    except OSError as error:
        raise RecordError(f"{path}: cannot be read ({error.strerror})") from None
    return RepeatRecord.parse(content, str(path))


@dataclass(frozen=True)
class RepeatLogs:
    """A repeat's node logs (``node*.log``), read from its folder once and passed on: the bytes
    its record checksums, the text its parser reads."""

    data: dict[str, bytes]

    @classmethod
    def read(cls, folder: Path, nodes: int | None = None) -> RepeatLogs:
        """The logs in ``folder``; with ``nodes`` (the plan's node count, where the kit ran the
        repeat) only ``node0.log`` .. ``node<nodes-1>.log``: a ``node7.log`` that someone put
        in a 1-node repeat's folder is neither measured nor hashed as the run's."""
        if nodes is None:
            paths = sorted(folder.glob("node*.log"))
        else:
            paths = [folder / f"node{i}.log" for i in range(nodes)]
        return cls({path.name: path.read_bytes() for path in paths if path.is_file()})

    @cached_property
    def texts(self) -> dict[str, str]:
        """Name -> text, as every reader decodes a log (the door too): UTF-8, a byte that is not
        replaced, never an error."""
        return {name: data.decode("utf-8", errors="replace") for name, data in self.data.items()}

    def sha256(self) -> dict[str, str]:
        return {name: sha256_bytes(data) for name, data in sorted(self.data.items())}


class NodeExit(Protocol):
    """How a repeat ended on one node, as a runtime reports it (``runtimes.base.NodeOutcome``)."""

    node: str
    exit_code: int | None


class Ran(Protocol):
    """What a runtime reports of a repeat it ran (``runtimes.base.RepeatOutcome``)."""

    nodes: Sequence[NodeExit]
    started_at: float
    finished_at: float
    detail: str
    extra: dict[str, Any]


class Planned(Protocol):
    """The plan a repeat ran (``RepeatPlan``); its ``commands`` are read by their ``node``,
    ``argv``, ``env`` and ``workdir``."""

    case: Case
    repeat: int
    batch_size: int
    commands: Sequence[Any]
    repeat_dir: Path
    parser: str


class Vouching(Protocol):
    """What a session asks of the run's warrant (``driver.model.warrant.Warrant``, which reads
    this module: named here by what it does, so that neither imports the other back)."""

    vouched: dict[str, str]  # session-relative path -> SHA-256, as the check before the run

    @property
    def sealed_verdicts(self) -> dict[str, str]: ...

    def finished(self, folder: Path, record_bytes: bytes) -> bool: ...

    def holds(self, path: Path) -> bool: ...

    def wrote(self, path: Path, record: RepeatRecord | None = None) -> None: ...


class Session:
    def __init__(
        self,
        root: Path,
        sealed_verdicts: Mapping[str, str] | None = None,
        warrant: Vouching | None = None,
    ) -> None:
        self.root = Path(root)
        # What the run may sign (``driver.model.warrant``, made by the caller before the run:
        # the seal is built from this store, not below it); told what the session writes, and
        # asked whether a repeat already in the folder is finished.
        self.warrant = warrant
        # Repeat folder -> the verdict the session's seal holds (model/seal.py's
        # ``sealed_verdicts``), the warrant's where one is given.
        self.sealed_verdicts: Mapping[str, str] = (
            warrant.sealed_verdicts if warrant is not None else sealed_verdicts or {}
        )

    @classmethod
    def open(
        cls,
        root: Path,
        meta: dict[str, Any] | None = None,
        sealed_verdicts: Mapping[str, str] | None = None,
        warrant: Vouching | None = None,
    ) -> Session:
        session = cls(root, sealed_verdicts, warrant)
        if session.root.is_symlink():
            raise KitWriteError(
                session.root,
                "a symlink: a session is written into a real folder under --results, never "
                "through a link; remove the link or choose another --session",
            )
        ensure_dir(session.root / "cases")
        meta_path = session.root / "session.json"
        # a session.json the run's warrant did not vouch for (one put in the folder since its
        # check) is not this session's provenance: written anew
        unvouched = warrant is not None and "session.json" not in warrant.vouched
        if not meta_path.exists() or unvouched:
            write_json(
                meta_path,
                {
                    "schema": SESSION_SCHEMA,
                    "name": session.root.name,
                    "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "head_node": platform.node(),
                    "kit": kit_revision(),
                    **(meta or {}),
                },
            )
        return session

    def note_run(self, facts: dict[str, Any]) -> None:
        """Append one invocation (argv, kit revision, time) to ``session.json``'s ``runs``: a
        session resumed or widened by later commands says by which."""
        meta = self.meta
        runs = list(meta.get("runs", []))
        runs.append(
            {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "kit": kit_revision(), **facts}
        )
        write_json(self.root / "session.json", {**meta, "runs": runs})
        self.wrote(self.root / "session.json")

    def wrote(self, path: Path, record: RepeatRecord | None = None) -> None:
        """Tell the run's warrant, if any, that ``path`` (a file or folder) is as the run wrote
        it (``record``: a repeat's, whose logs' SHA-256 it holds)."""
        if self.warrant is not None:
            self.warrant.wrote(path, record)

    @property
    def meta(self) -> dict[str, Any]:
        path = self.root / "session.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def case_dir(self, case: Case) -> Path:
        return self.root / "cases" / case.id

    def repeat_dir(self, case: Case, repeat: int) -> Path:
        return self.case_dir(case) / f"repeat-{repeat:02d}"

    def save_case(self, case: Case) -> None:
        directory = ensure_dir(self.case_dir(case))
        path = directory / "case.json"
        if not path.exists():
            write_json(path, case.to_dict())
            self.wrote(path)

    def finished(self, case: Case, repeat: int) -> RepeatRecord | None:
        path = self.repeat_dir(case, repeat) / RECORD
        if not path.exists():
            return None
        try:
            record = load_record(path)
        except RecordError as error:
            # Not trusted, so not finished: the repeat runs again and ``fresh_repeat_dir`` keeps
            # this folder aside as a failed attempt.
            print(f"warning: {error}; the repeat runs again", file=sys.stderr)
            return None
        if not record.ok:
            return None
        if self.warrant is not None:
            # Finished only where the seal it replaces vouched for it, or this run wrote it:
            # a record that appeared in the folder while the run went on is nobody's to sign.
            ok = self.warrant.finished(path.parent, path.read_bytes())
            return record if ok else None
        # A repeat its seal holds as not finished (interrupted, failed) runs again, whatever
        # its record says now: an ``ok`` written into it since is not a repeat this kit ran.
        folder = path.parent.relative_to(self.root).as_posix()
        return None if self.sealed_verdicts.get(folder, "ok") != "ok" else record

    def fresh_repeat_dir(self, case: Case, repeat: int) -> Path:
        """An empty folder for a new attempt; an earlier failed or crashed attempt is kept aside."""
        directory = self.repeat_dir(case, repeat)
        if directory.exists():
            attempt = 1
            while directory.with_name(f"{directory.name}.failed-{attempt}").exists():
                attempt += 1
            try:
                directory.rename(directory.with_name(f"{directory.name}.failed-{attempt}"))
            except OSError as error:
                raise KitWriteError(directory, error) from None
        return ensure_dir(directory)

    def write_record(self, directory: Path, record: RepeatRecord) -> None:
        write_json(directory / RECORD, record.to_dict())

    def record(
        self,
        plan: Planned,
        outcome: Ran,
        logs: RepeatLogs,
        *,
        verdict: str,
        runtime: str,
        measurement: RepeatMeasurement | None = None,
        parsed: ParsedLog | None = None,
        detail: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> RepeatRecord:
        """Write and return the record of a repeat that ran ``plan``: what ran where, how it
        ended (``verdict`` and ``detail``, the outcome's unless given), its logs with their
        SHA-256, and what they measured (``parsed``: its ranks' headers, as the runner parsed
        them); ``extra`` adds facts to the runtime's."""
        record = RepeatRecord(
            case_id=plan.case.id,
            repeat=plan.repeat,
            verdict=verdict,
            batch_size=plan.batch_size,
            started_at=outcome.started_at,
            finished_at=outcome.finished_at,
            commands=[CommandRecord.model_validate(c, from_attributes=True) for c in plan.commands],
            exit_codes={n.node: n.exit_code for n in outcome.nodes},
            logs=sorted(logs.data),
            log_sha256=logs.sha256(),
            parser=plan.parser,
            measurement=measurement,
            header=parsed.header if parsed is not None else {},
            fingerprints=rank_fingerprints(parsed) if parsed is not None else None,
            detail=outcome.detail if detail is None else detail,
            runtime=runtime,
            extra={**outcome.extra, **(extra or {})},
        )
        self.write_record(plan.repeat_dir, record)
        self.wrote(plan.repeat_dir, record)
        return record

    def cases(self) -> Iterator[Case]:
        for path in sorted((self.root / "cases").rglob("case.json")):
            yield Case.from_dict(json.loads(path.read_text()))

    def records(self, include_failed: bool = False) -> Iterator[tuple[Case, RepeatRecord, Path]]:
        """Every repeat's record with its case and folder (failed attempts on request)."""
        for case in self.cases():
            for path in sorted(self.case_dir(case).glob("repeat-*/" + RECORD)):
                is_attempt = ".failed-" in path.parent.name
                record = load_record(path)
                if include_failed or (record.ok and not is_attempt):
                    yield case, record, path.parent
