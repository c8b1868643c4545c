"""Session folders through the door: files read without following a symlink or leaving the
session, every repeat verified (``verify_repeat``).

A symlink anywhere inside a session (a repeat folder, a log, a case folder) is refused and
named, never followed: a published archive must hold the session's own bytes, not whatever a
link points at on the head node.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from driver.model.case import Case
from driver.model.results import SESSION_SCHEMA, RepeatRecord
from driver.model.walk import SessionWalk, symlink_refusal, walk_session
from driver.text import check_free_text
from driver.verify.hardware import ATTESTATION
from driver.verify.repeat import (
    CASE_FILE,
    RepeatFiles,
    RepeatRefused,
    Unfinished,
    VerifiedRepeat,
    verify_repeat,
    with_machine_labels,
)

CASES = "cases"
SESSION_FILE = "session.json"
# session.json's text fields, shown in a release's provenance: one line each.
SESSION_TEXT = ("name", "created", "head_node", "profile", "runtime", "profile_reason", "kind")


def session_meta(data: bytes) -> dict[str, Any]:
    """A session's ``session.json`` as every reader takes it (``report`` and ``release``
    alike): a JSON object, of a schema this kit reads (the first sessions have none), ``kit``
    an object, its text fields one line of text. ValueError says what is wrong."""
    try:
        meta = json.loads(data)
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"not valid JSON ({getattr(error, 'msg', error)})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"a JSON object is expected, got {type(meta).__name__}")
    if meta.get("schema", SESSION_SCHEMA) != SESSION_SCHEMA:
        raise ValueError(
            f"schema {meta.get('schema')!r} is not one this kit reads ({SESSION_SCHEMA}): "
            "written by another kit"
        )
    if not isinstance(meta.get("kit", {}), dict):
        raise ValueError("field kit: a JSON object of the kit's commit is expected")
    for name in SESSION_TEXT:
        if name in meta:
            try:
                check_free_text(meta[name], "name")
            except ValueError as error:
                raise ValueError(f"field {name}: {error}") from None
    return meta


def repeat_folders(walk: SessionWalk) -> dict[str, list[str]]:
    """Case folder (relative, ``cases/<id>``) -> its repeat folders (relative), failed attempts
    (``repeat-NN.failed-K``) aside."""
    case_dirs = {rel.rpartition("/")[0] for rel in walk.files if rel.endswith("/" + CASE_FILE)}
    case_dirs = {d for d in case_dirs if d.startswith(CASES + "/")}
    out: dict[str, list[str]] = {d: [] for d in sorted(case_dirs)}
    seen: set[str] = set()
    for rel in walk.files:
        parent = rel.rpartition("/")[0]
        case_dir, _, leaf = parent.rpartition("/")
        if case_dir in out and leaf.startswith("repeat-") and ".failed-" not in leaf:
            if parent not in seen:
                seen.add(parent)
                out[case_dir].append(parent)
    return {d: sorted(v) for d, v in out.items()}


def _read(file: Path | None) -> bytes | None:
    try:
        return file.read_bytes() if file else None
    except OSError as error:
        raise RepeatRefused(str(file), f"cannot be read ({error.strerror})") from None


def read_repeat(walk: SessionWalk, case_dir: str, folder: str) -> RepeatFiles:
    """A repeat folder's files as the door takes them, each read once (a symlinked folder is
    never walked: ``verify_session`` names it among the session's symlinks)."""
    prefix = folder + "/"
    names = {rel[len(prefix) :]: file for rel, file in walk.files.items() if rel.startswith(prefix)}
    return RepeatFiles(
        folder=str(walk.root / folder),
        case_dir=case_dir[len(CASES) + 1 :],
        case_json=_read(walk.files.get(f"{case_dir}/{CASE_FILE}")),
        files={name: _read(file) for name, file in names.items() if "/" not in name},
        attestation=_read(walk.files.get(ATTESTATION)),
        attestation_path=str(walk.root / ATTESTATION),
    )


@dataclass
class Verified:
    repeats: list[VerifiedRepeat] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # one line per refusal, naming the file

    @property
    def records(self) -> list[tuple[Case, RepeatRecord, str]]:
        """(case, record with the measurement its logs give, machine fingerprint label) of every
        verified repeat: what ``summarize`` splits by machine."""
        return [(r.case, r.record, r.fingerprint) for r in self.repeats]


def verify_session(root: Path, out: Verified, *, accept_remeasured: bool = False) -> None:
    """The session's repeats through the door; a session.json the kit cannot read refuses the
    whole session (named), as ``release`` does."""
    meta_path = Path(root) / SESSION_FILE
    try:
        session_meta(meta_path.read_bytes())
    except OSError as error:
        out.refused.append(f"{meta_path}: cannot be read ({error.strerror}): not a session")
        return
    except ValueError as error:
        out.refused.append(f"{meta_path}: {error}; the session is left out")
        return
    walk = walk_session(root)
    inside_cases = [p for p in walk.symlinks if CASES in p.relative_to(root).parts[:1]]
    for path in inside_cases:
        out.refused.append(symlink_refusal(path))
    for case_dir, folders in repeat_folders(walk).items():
        for folder in folders:
            try:
                checked = verify_repeat(
                    read_repeat(walk, case_dir, folder), accept_remeasured=accept_remeasured
                )
            except RepeatRefused as refusal:
                out.refused.append(str(refusal))
                continue
            if not isinstance(checked, Unfinished):  # its verdict is its record's
                out.repeats.append(checked)


def verify_sessions(roots: Sequence[Path], *, accept_remeasured: bool = False) -> Verified:
    """Every repeat of the sessions through the door."""
    out = Verified()
    for root in roots:
        verify_session(Path(root), out, accept_remeasured=accept_remeasured)
    out.repeats = with_machine_labels(out.repeats)
    return out
