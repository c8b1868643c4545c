"""The results store: one folder per session, one folder per finished repeat.

    results/<session>/session.json
    results/<session>/cases/<case id>/case.json
    results/<session>/cases/<case id>/repeat-03/{record.json, node0.log, node1.log, ...}
    results/<session>/cases/<case id>/repeat-03.failed-1/...   (a failed attempt, kept aside)

A repeat folder is written once: ``record.json`` is the last file written, so a folder with a
record is finished and a rerun of the session skips it (resume); a folder without one is a
crash leftover and is moved aside before the repeat runs again. Nothing is overwritten.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from driver.core.case import Case
from driver.frameworks.base import REPO_ROOT

RECORD = "record.json"
SCHEMA_VERSION = 1


def write_json(path: Path, data: Any) -> None:
    """Write atomically (temp file + rename): a reader never sees half a record."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


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
    return {
        "commit": commit or None,
        # reports/ holds the kit's output (a version being released is untracked while it is
        # written), not its code: changes there do not make the kit dirty.
        "dirty": bool(git("status", "--porcelain", "--", ".", ":(exclude)reports"))
        if commit
        else None,
    }


@dataclass
class RepeatRecord:
    """What one repeat produced: everything needed to recompute it from its raw logs."""

    case_id: str
    repeat: int
    verdict: str
    batch_size: int
    started_at: float
    finished_at: float
    commands: list[dict[str, Any]]
    exit_codes: dict[str, int | None]
    logs: list[str]  # file names in the repeat folder
    parser: str
    measurement: dict[str, Any] | None = None
    header: dict[str, Any] = field(default_factory=dict)  # rank 0's header: versions, devices
    detail: str = ""
    runtime: str = "local"
    extra: dict[str, Any] = field(default_factory=dict)  # telemetry, image digests, ...
    schema: int = SCHEMA_VERSION

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    @property
    def throughput(self) -> float | None:
        return self.measurement["throughput"] if self.measurement else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RepeatRecord:
        return cls(**data)


class Session:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @classmethod
    def open(cls, root: Path, meta: dict[str, Any] | None = None) -> Session:
        session = cls(root)
        (session.root / "cases").mkdir(parents=True, exist_ok=True)
        meta_path = session.root / "session.json"
        if not meta_path.exists():
            write_json(
                meta_path,
                {
                    "schema": SCHEMA_VERSION,
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

    @property
    def meta(self) -> dict[str, Any]:
        path = self.root / "session.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def case_dir(self, case: Case) -> Path:
        return self.root / "cases" / case.id

    def repeat_dir(self, case: Case, repeat: int) -> Path:
        return self.case_dir(case) / f"repeat-{repeat:02d}"

    def save_case(self, case: Case) -> None:
        directory = self.case_dir(case)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "case.json"
        if not path.exists():
            write_json(path, case.to_dict())

    def finished(self, case: Case, repeat: int) -> RepeatRecord | None:
        path = self.repeat_dir(case, repeat) / RECORD
        if not path.exists():
            return None
        record = RepeatRecord.from_dict(json.loads(path.read_text()))
        return record if record.ok else None

    def fresh_repeat_dir(self, case: Case, repeat: int) -> Path:
        """An empty folder for a new attempt; an earlier failed or crashed attempt is kept aside."""
        directory = self.repeat_dir(case, repeat)
        if directory.exists():
            attempt = 1
            while directory.with_name(f"{directory.name}.failed-{attempt}").exists():
                attempt += 1
            directory.rename(directory.with_name(f"{directory.name}.failed-{attempt}"))
        directory.mkdir(parents=True)
        return directory

    def write_record(self, directory: Path, record: RepeatRecord) -> None:
        write_json(directory / RECORD, record.to_dict())

    def cases(self) -> Iterator[Case]:
        for path in sorted((self.root / "cases").rglob("case.json")):
            yield Case.from_dict(json.loads(path.read_text()))

    def records(self, include_failed: bool = False) -> Iterator[tuple[Case, RepeatRecord, Path]]:
        """Every repeat's record with its case and folder (failed attempts on request)."""
        for case in self.cases():
            for path in sorted(self.case_dir(case).glob("repeat-*/" + RECORD)):
                is_attempt = ".failed-" in path.parent.name
                record = RepeatRecord.from_dict(json.loads(path.read_text()))
                if include_failed or (record.ok and not is_attempt):
                    yield case, record, path.parent
