"""A session's seal: the manifest of what it measured, signed where a key is configured.

    results/<session>/session-manifest.json       the seal (:class:`SessionManifest`)
    results/<session>/session-manifest.json.sig   its OpenSSH signature (``dlperf-session``)

The seal holds the SHA-256 and size of every file the session holds (node logs, records,
telemetry, case definitions, ``session.json``, probes; the derived ``report/`` aside) and, per
repeat, its record's verdict and throughput and every rank's hardware fingerprint facts (what
the tables name the machine from). A node log's SHA-256 and its ranks' facts are its record's:
the runner read and parsed the logs once, so sealing opens no log (a record written before it
held the facts, schema 1 or 2, has its logs parsed: the one fallback). Signed where a key is
configured (``--signing-key``, ``$DLPERF_SIGNING_KEY``); else the seal says only what the
session held when the run ended. When a session is sealed, and what a folder holds against its
seal, is ``driver.model.drift``'s.
"""

from __future__ import annotations

import json
import os
import platform
import re
import stat
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError

from driver.files import TEMP_PREFIX, sha256_bytes, write_bytes
from driver.model.measure import parse_logs
from driver.model.results import (
    RECORD,
    RankFacts,
    RecordError,
    RepeatRecord,
    kit_revision,
    rank_fingerprints,
)
from driver.model.walk import link_target, walk_session
from driver.parsers.base import LogParseError
from driver.schema import StrictModel, one_of, strict_json, text
from driver.signing import SIGNATURE_SUFFIX, configured_key, key_description, signature_path

SEAL = "session-manifest.json"
SEAL_SIGNATURE = SEAL + SIGNATURE_SUFFIX
SEAL_SCHEMA = 1
SEAL_KIND = "dlperf-session"
# What a run whose seal was refused wrote, signed by its key (driver.model.warrant): the kit's
# bookkeeping beside the seal, never sealed itself, consumed by the next seal.
CLAIM = "session-claim.json"
CLAIM_SIGNATURE = CLAIM + SIGNATURE_SUFFIX
SESSION_JSON = "session.json"
DERIVED = "report"  # the session's tables, written from the rest: never sealed
REPEAT_FOLDER = re.compile(r"^cases/.+/repeat-\d+(\.failed-\d+)?$")

_SHA256 = re.compile(r"[0-9a-f]{64}")
Sha256 = text(_SHA256.pattern, "a SHA-256 (64 hex digits)")


class SealError(ValueError):
    """A seal the kit cannot read (names the file and the problem)."""


class SealedFile(StrictModel):
    sha256: Sha256
    bytes: Annotated[int, Field(ge=0)]


class SealedRepeat(StrictModel):
    case_id: str
    repeat: int
    verdict: str
    record_sha256: Sha256
    throughput: float | None  # as its record states it
    fingerprints: list[RankFacts]  # [] where the logs give no fingerprint (or do not parse)


class SessionManifest(StrictModel):
    """The shape of ``session-manifest.json``."""

    schema_: Annotated[Any, one_of(SEAL_SCHEMA)] = Field(alias="schema")
    kind: Annotated[Any, one_of(SEAL_KIND)]
    session: str  # the folder's name when sealed
    sealed_at: str
    head_node: str
    kit: dict[str, Any]
    # the seal this one replaced (a resumed session): its SHA-256 and the key that signed it
    previous: dict[str, Any] | None
    session_json: dict[str, Any]  # session.json as sealed: a resumed one may only add runs
    files: dict[str, SealedFile]  # session-relative path -> SHA-256 and size
    repeats: dict[str, SealedRepeat]  # repeat folder (session-relative) -> its facts
    # files a person vouched for on resume (``--adopt``): adopted, not measured by this kit
    adopted: dict[str, str] = Field(default_factory=dict)  # path -> what they were


def load_seal(data: bytes, name: str) -> SessionManifest:
    try:
        raw = strict_json(data)
        if not isinstance(raw, dict):
            raise ValueError("a JSON object is expected")
        return SessionManifest.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"]).replace("schema_", "schema")
        raise SealError(f"{name}: field {where}: {first['msg']}") from None
    except ValueError as error:
        raise SealError(f"{name}: not a session manifest ({error})") from None


def odd_seal_files(root: Path) -> dict[str, str]:
    """The seal or its signature where either is there but is not a regular file (a FIFO, a
    socket, a device, a folder, a symlink): name -> why, never read. Checked with ``os.lstat``
    before any open: a read of a FIFO blocks until someone writes to it, and a symlink would
    bring in a file from outside the session."""
    odd: dict[str, str] = {}
    for name, what in ((SEAL, "the seal"), (SEAL_SIGNATURE, "the seal's signature"),
                       (CLAIM, "the claim"), (CLAIM_SIGNATURE, "the claim's signature")):
        try:
            mode = os.lstat(Path(root) / name).st_mode
        except FileNotFoundError:
            continue
        except OSError as error:
            odd[name] = f"cannot be checked ({error.strerror}); fix its permissions"
            continue
        if stat.S_ISREG(mode):
            continue
        kind = (
            "a symlink" if stat.S_ISLNK(mode)
            else "a folder" if stat.S_ISDIR(mode)
            else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode)
            else "a device or other special file"
        )  # fmt: skip
        odd[name] = (
            f"{kind} where {what} should be, not a regular file: not read (it could block or "
            f"point outside the session); a release refuses it: remove it, or put {what} back"
        )
    return odd


class FolderFiles(Mapping[str, bytes]):
    """A session folder's sealed files (session-relative path -> bytes): every regular file of
    its walk (``walk_session``) but the derived ``report/``, the seal itself and temporary files
    of writes killed half-way; each read once, when first asked, so that a seal or a drift
    check reads every file once however often it looks at it."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        walk = walk_session(self.root)
        self.paths = {
            rel: path
            for rel, path in walk.files.items()
            if not rel.startswith(DERIVED + "/")
            and not path.name.startswith(TEMP_PREFIX)
            and not path.name.endswith(".tmp")
            and rel not in (SEAL, SEAL_SIGNATURE, CLAIM, CLAIM_SIGNATURE)
        }
        self._read: dict[str, bytes] = {}
        # symlinks and special files: never sealed, never released (a link named report, the
        # derived folder, is left out like the folder)
        self.refused = [
            self._refusal(walk.relative(path), path)
            for path in walk.symlinks + walk.others
            if walk.relative(path).split("/")[0] != DERIVED
        ]

    @staticmethod
    def _refusal(rel: str, path: Path) -> str:
        if not path.is_symlink():
            return f"{rel}: not a regular file (a socket, fifo or device): a release refuses it"
        return (
            f"{rel}: a symlink (to {link_target(path)}): a release refuses it, never follows "
            "it; replace it with the file or folder itself"
        )

    def __getitem__(self, rel: str) -> bytes:
        if rel not in self._read:
            self._read[rel] = self.paths[rel].read_bytes()
        return self._read[rel]

    def __contains__(self, rel: object) -> bool:
        return rel in self.paths  # never a read (Mapping's would read the file)

    def size(self, rel: str) -> int:
        """Its size in bytes, read from the folder without opening it where not read yet."""
        return len(self._read[rel]) if rel in self._read else self.paths[rel].stat().st_size

    def __iter__(self) -> Iterator[str]:
        return iter(self.paths)

    def __len__(self) -> int:
        return len(self.paths)


def read_record(files: Mapping[str, bytes], rel: str) -> RepeatRecord | None:
    """The record at ``rel`` of ``files``; None where it does not read (sealed by its bytes,
    the door refuses it)."""
    try:
        return RepeatRecord.parse(files[rel], rel)
    except RecordError:
        return None


def repeat_fingerprints(
    files: Mapping[str, bytes], folder: str, record: RepeatRecord
) -> list[RankFacts]:
    """The ranks' fingerprint facts of the repeat ``folder`` whose record is ``record``: as the
    record holds them (the runner parsed its logs once); parsed from its logs only for a record
    written before it held them; [] where those do not parse."""
    if record.fingerprints is not None:
        return record.fingerprints
    logs = {n: files[f"{folder}/{n}"] for n in record.logs if f"{folder}/{n}" in files}
    try:
        texts = {name: data.decode("utf-8", errors="replace") for name, data in logs.items()}
        return rank_fingerprints(parse_logs(record.parser, texts))
    except (LogParseError, ValueError):
        return []


def repeat_records(files: Mapping[str, bytes]) -> dict[str, tuple[str, RepeatRecord]]:
    """Repeat folder -> (its record's path, the record), for every repeat folder whose record
    reads (one that does not is sealed by its bytes; the door refuses it)."""
    out = {}
    for rel in sorted(files):
        folder, _, name = rel.rpartition("/")
        if name == RECORD and REPEAT_FOLDER.match(folder):
            record = read_record(files, rel)
            if record is not None:
                out[folder] = (rel, record)
    return out


def sealed_repeat(files: Mapping[str, bytes], rel: str, record: RepeatRecord) -> SealedRepeat:
    """What the seal holds of the repeat whose record (at ``rel``) is ``record``: its verdict,
    throughput and, where it finished ok, its ranks' fingerprint facts."""
    folder = rel.rpartition("/")[0]
    return SealedRepeat(
        case_id=record.case_id,
        repeat=record.repeat,
        verdict=record.verdict,
        record_sha256=sha256_bytes(files[rel]),
        throughput=record.throughput,
        fingerprints=repeat_fingerprints(files, folder, record) if record.ok else [],
    )


def session_json_of(files: Mapping[str, bytes]) -> dict[str, Any]:
    try:
        data = json.loads(files[SESSION_JSON]) if SESSION_JSON in files else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def seal_digests(
    files: Mapping[str, bytes],
    records: Mapping[str, tuple[str, RepeatRecord]] | None = None,
) -> dict[str, str]:
    """Session-relative path -> the SHA-256 a seal of ``files`` holds for it: a node log's is
    the one its record holds (the runner hashed the bytes it read; the door checks the log
    against it), so no log is read; every other file's is hashed from its bytes. The seal and
    what decides whether a run may sign (``driver.model.warrant``) both take it from here."""
    records = repeat_records(files) if records is None else records
    recorded = {
        f"{folder}/{log}": digest
        for folder, (_rel, record) in records.items()
        for log, digest in record.log_sha256.items()
        if _SHA256.fullmatch(digest)
    }
    return {rel: recorded.get(rel) or sha256_bytes(files[rel]) for rel in files}


def manifest_of(
    name: str,
    files: FolderFiles,
    previous: dict[str, Any] | None = None,
    adopted: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The seal of a session named ``name`` holding ``files`` (``adopted``: those a person
    vouched for, see ``driver.model.warrant``). A node log's SHA-256 is the one its
    record holds (the runner hashed the bytes it read; the door checks the log against it, so a
    log changed since is refused there and named against this seal): no log is read here. Every
    other file, and a log no record hashes, is hashed from its bytes."""
    kept = {rel: what for rel, what in (adopted or {}).items() if rel in files}
    records = repeat_records(files)
    digests = seal_digests(files, records)
    return {
        "schema": SEAL_SCHEMA,
        "kind": SEAL_KIND,
        "session": name,
        "sealed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "head_node": platform.node(),
        "kit": kit_revision(),
        "previous": previous,
        "session_json": session_json_of(files),
        "files": {rel: {"sha256": digests[rel], "bytes": files.size(rel)} for rel in sorted(files)},
        "repeats": {
            folder: sealed_repeat(files, rel, record).model_dump()
            for folder, (rel, record) in records.items()
        },
        **({"adopted": dict(sorted(kept.items()))} if kept else {}),
    }


def seal_text(manifest: dict[str, Any]) -> bytes:
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()


def write_seal(path: Path, data: bytes, signature: bytes | None) -> None:
    """The seal's bytes and, where signed, its signature; a signature of an older seal removed
    (it would lie about these bytes)."""
    write_bytes(path, data)
    if signature is not None:
        write_bytes(signature_path(path), signature)
    else:
        signature_path(path).unlink(missing_ok=True)


def readable_seal(root: Path) -> SessionManifest | None:
    """The session's seal where it is a regular file that parses; None otherwise (no seal, an
    odd file never opened, or one that does not read)."""
    path = Path(root) / SEAL
    try:
        if not path.is_file() or SEAL in odd_seal_files(root):
            return None
        return load_seal(path.read_bytes(), SEAL)
    except (OSError, SealError):
        return None


def sealed_verdicts(root: Path) -> dict[str, str]:
    """Repeat folder (session-relative) -> the verdict the session's seal holds for it; {}
    where the session has no readable seal."""
    sealed = readable_seal(root)
    return {} if sealed is None else {f: r.verdict for f, r in sealed.repeats.items()}


def adopted_files(root: Path) -> dict[str, str]:
    """What the session's seal records as adopted (``--adopt``: vouched for by a person, not
    measured by this kit); {} where it has no readable seal."""
    sealed = readable_seal(root)
    return {} if sealed is None else dict(sealed.adopted)


def configured_signer(explicit: str | Path | None = None) -> str | None:
    """The key a command signs with (``--signing-key``, ``$DLPERF_SIGNING_KEY``) as
    ``ssh-keygen`` names it; None where it signs nothing. Raises SigningError for a key named
    but missing or not a key."""
    key = configured_key(explicit)
    return key_description(key) if key is not None else None
