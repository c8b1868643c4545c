"""A session's seal: the manifest of what it measured, signed where a key is configured.

    results/<session>/session-manifest.json       the seal (:class:`SessionManifest`)
    results/<session>/session-manifest.json.sig   its OpenSSH signature (``dlperf-session``)

The head node seals a session when its run ends (``dlperf run`` and a rehearsal, the selftest,
``import-logs``, ``attest-hardware``): the SHA-256 and size of every file the session holds (node
logs, records, telemetry, case definitions, ``session.json``, probes; the derived ``report/``
aside) and, per repeat, its record's verdict and throughput and every rank's hardware
fingerprint facts (what the tables name the machine from). Where a key is configured
(``--signing-key``, ``$DLPERF_SIGNING_KEY``) the manifest's bytes are signed
(``driver.signing``); else the seal is unsigned, and says only what the session held when the
run ended.

A release and an audit compare a session's files with its seal (:func:`changes`): a log, a
record or a fingerprint changed, a file added or a finished repeat removed after sealing is
named.

A command that adds to a session (a resumed ``dlperf run``, ``import-logs``,
``attest-hardware``) first checks that it would sign only what it runs or verifies
(:func:`unvouched`: no file the old seal does not hold as it is, none outside the run's
cases); what a person vouches for instead (``--adopt``) is recorded as ``adopted``. A resumed
session is sealed again when that run ends, replacing the old seal, and only if everything the
old seal covered is as it was (:func:`drift`): every sealed file unchanged, except where the kit
itself changes a session (``session.json``'s list of runs grows; a repeat folder the seal holds
as unfinished is run again, its sealed attempt kept aside unchanged as ``repeat-NN.failed-K``;
an interrupted batch-search probe runs again; a probe folder is kept aside as ``.old-K``), and
an old signature still good for the old manifest's bytes (``ssh-keygen -Y check-novalidate``,
whoever signed it). Otherwise the old seal stays untouched and the run says why: the kit never
signs over an edit, so a release names the file.
"""

from __future__ import annotations

import json
import os
import platform
import re
import stat
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Annotated, Any

from pydantic import Field, ValidationError

from driver.files import TEMP_PREFIX, sha256_bytes, write_bytes
from driver.model.measure import parse_logs
from driver.model.results import RECORD, RecordError, RepeatRecord, kit_revision
from driver.parsers.base import LogParseError
from driver.schema import StrictModel, one_of, strict_json, text
from driver.signing import (
    SESSION_NAMESPACE,
    SIGNATURE_SUFFIX,
    SigningError,
    configured_key,
    intact_key,
    key_description,
    listed_keys,
    sign_bytes,
    signature_path,
    verify_bytes,
)

SEAL = "session-manifest.json"
SEAL_SIGNATURE = SEAL + SIGNATURE_SUFFIX
SEAL_SCHEMA = 1
SEAL_KIND = "dlperf-session"
SESSION_JSON = "session.json"
DERIVED = "report"  # the session's tables, written from the rest: never sealed
NODE_LOG = re.compile(r"^node\d+\.log$")
_REPEAT_FOLDER = re.compile(r"^cases/.+/repeat-\d+(\.failed-\d+)?$")
_UNFINISHED_PROBE = re.compile(r"^cases/.+/batch-search/[^/]+$")
_SET_ASIDE = re.compile(r"\.(failed|old)-\d+$")

Sha256 = text(r"[0-9a-f]{64}", "a SHA-256 (64 hex digits)")


class SealError(ValueError):
    """A seal the kit cannot read (names the file and the problem)."""


class SealedFile(StrictModel):
    sha256: Sha256
    bytes: Annotated[int, Field(ge=0)]


class RankFacts(StrictModel):
    """Ranks of a repeat whose headers carry the same fingerprint facts."""

    ranks: list[int]
    facts: dict[str, Any]


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
    for name, what in ((SEAL, "the seal"), (SEAL_SIGNATURE, "the seal's signature")):
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
    """A session folder's sealed files (session-relative path -> bytes, read when asked): every
    regular file, walked without following a symlink, but the derived ``report/``, the seal
    itself and temporary files of writes killed half-way."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.paths: dict[str, Path] = {}
        self.refused: list[str] = []  # symlinks and special files: never sealed, never released
        for folder, dirs, names in os.walk(self.root, followlinks=False):
            here = Path(folder)
            if here == self.root and DERIVED in dirs:
                dirs.remove(DERIVED)  # derived: a release leaves it out, link or not
            self.refused += [self._refusal(here / d) for d in dirs if (here / d).is_symlink()]
            dirs[:] = sorted(d for d in dirs if not (here / d).is_symlink())
            for name in sorted(names):
                path = here / name
                if path.is_symlink() or not path.is_file():
                    if not (here == self.root and name == DERIVED):
                        self.refused.append(self._refusal(path))
                    continue
                if _temporary(name):
                    continue
                rel = path.relative_to(self.root).as_posix()
                if rel not in (SEAL, SEAL_SIGNATURE):
                    self.paths[rel] = path

    def _refusal(self, path: Path) -> str:
        rel = path.relative_to(self.root).as_posix()
        if not path.is_symlink():
            return f"{rel}: not a regular file (a socket, fifo or device): a release refuses it"
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return (
            f"{rel}: a symlink (to {target}): a release refuses it, never follows it; replace "
            "it with the file or folder itself"
        )

    def __getitem__(self, rel: str) -> bytes:
        return self.paths[rel].read_bytes()

    def __iter__(self) -> Iterator[str]:
        return iter(self.paths)

    def __len__(self) -> int:
        return len(self.paths)


def _temporary(name: str) -> bool:
    return name.startswith(TEMP_PREFIX) or name.endswith(".tmp")


def rank_facts(parser: str, logs: Mapping[str, bytes]) -> list[RankFacts]:
    """The fingerprint facts of every rank's header, ranks with equal facts together; [] where
    the logs do not parse or carry no fingerprint."""
    texts = {name: data.decode("utf-8", errors="replace") for name, data in logs.items()}
    try:
        parsed = parse_logs(parser, texts)
    except (LogParseError, ValueError):
        return []
    headers = [(rank, parsed.ranks[rank].header) for rank in sorted(parsed.ranks)]
    if not headers and parsed.meta.get("host"):
        headers = [(0, dict(parsed.meta["host"]))]  # a rate-only upstream log: node 0's facts
    groups: dict[str, list[int]] = {}
    for rank, header in headers:
        facts = header.get("fingerprint")
        if not isinstance(facts, dict):
            continue
        try:
            key = json.dumps(facts, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError):
            continue  # not JSON data: the door refuses such a header
        groups.setdefault(key, []).append(rank)
    return [RankFacts(ranks=ranks, facts=json.loads(key)) for key, ranks in groups.items()]


def _repeat_logs(files: Mapping[str, bytes], folder: str, record: RepeatRecord) -> dict:
    return {n: files[f"{folder}/{n}"] for n in record.logs if f"{folder}/{n}" in files}


def _read_record(files: Mapping[str, bytes], rel: str) -> RepeatRecord | None:
    try:
        return RepeatRecord.parse(files[rel], rel)
    except RecordError:
        return None


def sealed_repeats(files: Mapping[str, bytes]) -> dict[str, SealedRepeat]:
    """Every repeat folder with a readable record: its verdict, throughput and, for a finished
    repeat, its ranks' fingerprint facts."""
    out = {}
    for rel in sorted(files):
        folder, _, name = rel.rpartition("/")
        if name != RECORD or not _REPEAT_FOLDER.match(folder):
            continue
        record = _read_record(files, rel)
        if record is None:
            continue  # sealed by its bytes; the door refuses it
        logs = _repeat_logs(files, folder, record)
        out[folder] = SealedRepeat(
            case_id=record.case_id,
            repeat=record.repeat,
            verdict=record.verdict,
            record_sha256=sha256_bytes(files[rel]),
            throughput=record.throughput,
            fingerprints=rank_facts(record.parser, logs) if record.ok else [],
        )
    return out


def _session_json(files: Mapping[str, bytes]) -> dict[str, Any]:
    try:
        data = json.loads(files[SESSION_JSON]) if SESSION_JSON in files else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def manifest_of(
    name: str,
    files: Mapping[str, bytes],
    previous: dict[str, Any] | None = None,
    adopted: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The seal of a session named ``name`` holding ``files`` (``adopted``: those a person
    vouched for, see :func:`unvouched`)."""
    kept = {rel: what for rel, what in (adopted or {}).items() if rel in files}
    return {
        "schema": SEAL_SCHEMA,
        "kind": SEAL_KIND,
        "session": name,
        "sealed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "head_node": platform.node(),
        "kit": kit_revision(),
        "previous": previous,
        "session_json": _session_json(files),
        "files": {
            rel: {"sha256": sha256_bytes(data), "bytes": len(data)}
            for rel in sorted(files)
            for data in (files[rel],)
        },
        "repeats": {f: r.model_dump() for f, r in sealed_repeats(files).items()},
        **({"adopted": dict(sorted(kept.items()))} if kept else {}),
    }


def seal_text(manifest: dict[str, Any]) -> bytes:
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()


@dataclass(frozen=True)
class Sealed:
    """What sealing a session did: the seal written (signed with ``key``, or unsigned), or, where
    the session changed since its last seal, nothing (``drift`` says what changed)."""

    path: Path
    written: bool
    key: str | None = None  # the signing key's description where signed
    drift: list[str] = field(default_factory=list)

    def describe(self) -> str:
        if not self.written:
            return (
                f"{self.path} not renewed: the session changed since it was sealed ("
                + "; ".join(self.drift[:5])
                + (f"; and {len(self.drift) - 5} more" if len(self.drift) > 5 else "")
                + "). The old seal stays, so `dlperf release` names what changed; to release "
                "the session as it is now, remove the seal and its .sig (it is then unsigned)"
            )
        unsigned = "unsigned: no --signing-key or DLPERF_SIGNING_KEY"
        how = f"signed with {self.key}" if self.key else unsigned
        return f"sealed: {self.path} ({how})"


def seal_session(root: Path, key: Path | None, adopted: Mapping[str, str] | None = None) -> Sealed:
    """Seal the session folder ``root`` (see the module docstring); signed with ``key`` where
    given; ``adopted``: files a person vouched for before the run (:func:`unvouched`), recorded
    as such, with those the old seal recorded. Raises SigningError where the key does not sign,
    KitWriteError where the seal cannot be written; returns without writing where the session
    drifted from its last seal."""
    root = Path(root)
    path = root / SEAL
    files = FolderFiles(root)
    previous = None
    adopted = dict(adopted or {})
    odd = odd_seal_files(root)
    if odd:
        return Sealed(path, written=False, drift=[f"{rel}: {why}" for rel, why in odd.items()])
    if path.is_file():
        old = path.read_bytes()
        old_signature = signature_path(path)
        signature = old_signature.read_bytes() if old_signature.is_file() else None
        problems = [f"{rel}: {what}" for rel, what in _drift(old, signature, files)
                    if rel not in adopted]  # fmt: skip
        if problems:
            return Sealed(path, written=False, drift=problems)
        previous = {
            "sha256": sha256_bytes(old),
            "signed_by_key": intact_key(old, signature, SESSION_NAMESPACE) if signature else None,
        }
        adopted = {**load_seal(old, SEAL).adopted, **adopted}
    data = seal_text(manifest_of(root.name, files, previous, adopted))
    signature = sign_bytes(data, key, SESSION_NAMESPACE) if key is not None else None
    write_bytes(path, data)
    if signature is not None:
        write_bytes(signature_path(path), signature)
    else:
        signature_path(path).unlink(missing_ok=True)  # a signature of an older seal
    return Sealed(path, written=True, key=key_description(key) if key is not None else None)


# --------------------------------------------------------------------------------------------
# A resumed session against its last seal


def drift(old: bytes, signature: bytes | None, files: Mapping[str, bytes]) -> list[str]:
    """What changed in a session since the seal ``old`` (with its signature, if any) other than
    what the kit itself changes when it resumes a session; [] when it may be sealed again."""
    return [f"{rel}: {what}" for rel, what in _drift(old, signature, files)]


def _drift(
    old: bytes, signature: bytes | None, files: Mapping[str, bytes], after_run: bool = True
) -> list[tuple[str, str]]:
    """:func:`drift` as (session-relative path, what happened); ``after_run``: False before a
    run (:func:`unvouched`), when nothing may have changed in place yet."""
    try:
        sealed = load_seal(old, SEAL)
    except SealError as error:
        return [(SEAL, f"{str(error).removeprefix(SEAL + ': ')} (remove it to seal anew)")]
    if signature is not None and intact_key(old, signature, SESSION_NAMESPACE) is None:
        return [(SEAL, f"changed after it was signed ({SEAL_SIGNATURE} no longer matches)")]
    # A sealed repeat that did not finish ok, or a probe without its verdict, is run again: its
    # folder is set aside unchanged (``.failed-K``, ``.old-K``) and a new one written in its
    # place. Until then its files stay as sealed, like every other: a record that turned ``ok``
    # since the seal is an edit, never a repeat done.
    rerun = [
        folder
        for folder in _sealed_folders(sealed)
        if _REPEAT_FOLDER.match(folder)
        and ".failed-" not in folder
        and (folder not in sealed.repeats or sealed.repeats[folder].verdict != "ok")
    ]
    probes = [  # an interrupted batch-search probe is run again in its own folder
        folder
        for folder in _sealed_folders(sealed)
        if _UNFINISHED_PROBE.match(folder) and f"{folder}/verdict.json" not in sealed.files
    ]
    rerun += probes
    problems = []
    for rel, entry in sorted(sealed.files.items()):
        if rel == SESSION_JSON:
            problems += [(rel, what) for what in _session_json_drift(sealed.session_json, files)]
        elif rel in files and sha256_bytes(files[rel]) == entry.sha256:
            continue
        elif after_run and any(rel.startswith(f + "/") for f in probes):
            continue  # rewritten by the run that ran the probe again (checked unchanged before)
        elif any(rel.startswith(f + "/") for f in rerun) and _set_aside(rel, entry.sha256, files):
            continue  # the kit ran it again: the sealed attempt is kept aside, unchanged
        elif rel in files:
            problems.append((rel, _changed_since_sealed(sealed, files, rel)))
        elif _repeat_of(rel) is not None or not _set_aside(rel, entry.sha256, files):
            problems.append((rel, "sealed, now missing"))  # a finished repeat never moves
    finished = {f for f, r in sealed.repeats.items() if r.verdict == "ok"}
    problems += [
        (rel, "added to a finished repeat since it was sealed")
        for rel in sorted(files)
        if rel not in sealed.files and _repeat_of(rel) in finished
    ]
    return problems


def _changed_since_sealed(sealed: SessionManifest, files: Mapping[str, bytes], rel: str) -> str:
    """What changed in a sealed file: its verdict too where it is a repeat's record now stating
    another verdict than the seal."""
    folder, _, name = rel.rpartition("/")
    repeat = sealed.repeats.get(folder)
    if name == RECORD and repeat is not None:
        record = _read_record(files, rel)
        now = record.verdict if record is not None else "unreadable"
        if now != repeat.verdict:
            return f"changed since it was sealed (verdict {repeat.verdict} sealed, {now} now)"
    return "changed since it was sealed"


def _readable_seal(root: Path) -> SessionManifest | None:
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
    sealed = _readable_seal(root)
    return {} if sealed is None else {f: r.verdict for f, r in sealed.repeats.items()}


def adopted_files(root: Path) -> dict[str, str]:
    """What the session's seal records as adopted (``--adopt``: vouched for by a person, not
    measured by this kit); {} where it has no readable seal."""
    sealed = _readable_seal(root)
    return {} if sealed is None else dict(sealed.adopted)


def unvouched(
    root: Path, selected: Collection[str] | None, signer: str | None
) -> list[tuple[str, str]]:
    """What a command that resumes the session folder ``root`` would sign without having run or
    verified it: (session-relative path, why), before anything runs. Every file of a case folder
    outside ``selected`` (case ids; None: any case); every file the session's seal does not hold
    as it is (added or changed since, a sealed repeat's verdict among them: see :func:`drift`),
    or, where the command signs (``signer``: its key, as :func:`key_description` names it; None:
    unsigned, the seal it writes vouches for nobody), every file but ``session.json`` that no
    seal signed by that same key holds (an unsigned seal, or one of another key, is anyone's to
    write). [] where the session may be resumed and sealed again."""
    files = FolderFiles(root)
    out: dict[str, str] = {}
    if selected is not None:
        prefixes = tuple(f"cases/{case_id}/" for case_id in selected)
        for rel in files:
            if rel.startswith("cases/") and not rel.startswith(prefixes):
                out[rel] = "in a case folder outside this run's selection"
    odd = odd_seal_files(root)
    if odd:  # neither is read: the run would sign over what it cannot check
        return sorted({**out, **odd}.items())
    path = Path(root) / SEAL
    if not path.is_file():
        if signature_path(path).is_file():
            out[SEAL_SIGNATURE] = f"a signature whose {SEAL} was removed"
        for rel in files if signer is not None else ():
            if rel != SESSION_JSON:
                out.setdefault(rel, f"no seal covers it (the session has no {SEAL})")
        return sorted(out.items())
    old = path.read_bytes()
    old_signature = signature_path(path)
    signature = old_signature.read_bytes() if old_signature.is_file() else None
    for rel, what in _drift(old, signature, files, after_run=False):
        out.setdefault(rel, what)
    try:
        sealed = load_seal(old, SEAL)
    except SealError:
        return sorted(out.items())  # named by _drift
    for rel in files:
        if rel not in sealed.files:
            out.setdefault(rel, "added since the session was sealed, not by a run of the kit")
    by = intact_key(old, signature, SESSION_NAMESPACE) if signature is not None else None
    if signer is not None and by != signer:
        seal_of = f"its seal is signed by {by}" if by else "its seal is not signed"
        for rel in files:
            if rel != SESSION_JSON:
                out.setdefault(rel, f"{seal_of}, not by the key signing now ({signer})")
    return sorted(out.items())


def configured_signer(explicit: str | Path | None = None) -> str | None:
    """The key a command signs with (``--signing-key``, ``$DLPERF_SIGNING_KEY``) as
    ``ssh-keygen`` names it; None where it signs nothing. Raises SigningError for a key named
    but missing or not a key."""
    key = configured_key(explicit)
    return key_description(key) if key is not None else None


def _sealed_folders(sealed: SessionManifest) -> set[str]:
    return {rel.rpartition("/")[0] for rel in sealed.files}


def _session_json_drift(sealed: dict[str, Any], files: Mapping[str, bytes]) -> list[str]:
    now = _session_json(files)
    runs = sealed.get("runs", [])
    grown = now.get("runs", [])[: len(runs)] == runs
    same = {k: v for k, v in now.items() if k != "runs"} == {
        k: v for k, v in sealed.items() if k != "runs"
    }
    return [] if grown and same else ["changed since it was sealed"]


def _set_aside(rel: str, digest: str, files: Mapping[str, bytes]) -> bool:
    """``rel`` moved, unchanged, into a folder the kit set aside (``.failed-K``, ``.old-K``)."""
    parts = PurePosixPath(rel).parts
    for index in range(len(parts) - 1):
        head, rest = "/".join(parts[:index]), "/".join(parts[index + 1 :])
        pattern = re.compile(
            (re.escape(head) + "/" if head else "")
            + re.escape(parts[index])
            + r"\.(failed|old)-\d+/"
            + re.escape(rest)
        )
        if any(pattern.fullmatch(p) and sha256_bytes(files[p]) == digest for p in files):
            return True
    return False


# --------------------------------------------------------------------------------------------
# A session's files (a folder, or a release's archive members) against its seal


def changes(
    sealed: SessionManifest, files: Mapping[str, bytes], signed: bool
) -> list[tuple[str, str]]:
    """(session-relative path, what happened) for every file ``files`` holds that the seal does
    not hold as it is, and every file of a finished repeat the seal holds that ``files`` lacks.
    ``files`` may lack what a release leaves out (failed attempts, superseded probes)."""
    after = "after signing" if signed else "after sealing"
    out = []
    for rel in sorted(files):
        entry = sealed.files.get(rel)
        data = files[rel]
        if entry is None:
            out.append((rel, f"not in {SEAL}: added {after}"))
        elif sha256_bytes(data) != entry.sha256 or len(data) != entry.bytes:
            out.append((rel, _what_changed(sealed, files, rel, after)))
    for rel in sorted(_required(sealed)):
        if rel not in files:
            out.append((rel, f"in {SEAL} but missing: removed {after}"))
    return out


def _required(sealed: SessionManifest) -> set[str]:
    """The sealed files a release of the session must hold: all but those of repeat folders
    that did not finish ok and of probe folders set aside."""
    out = set()
    for rel in sealed.files:
        in_repeat = _repeat_of(rel)
        if in_repeat is not None and (
            ".failed-" in in_repeat
            or in_repeat not in sealed.repeats
            or sealed.repeats[in_repeat].verdict != "ok"
        ):
            continue
        if any(_SET_ASIDE.search(part) for part in PurePosixPath(rel).parts):
            continue
        out.add(rel)
    return out


def _repeat_of(rel: str) -> str | None:
    """The repeat folder (``cases/.../repeat-NN[.failed-K]``) a sealed file is in, if any."""
    parts = PurePosixPath(rel).parts[:-1]
    folders = ("/".join(parts[: i + 1]) for i in range(len(parts)))
    return next((f for f in folders if _REPEAT_FOLDER.match(f)), None)


def _what_changed(sealed: SessionManifest, files: Mapping[str, bytes], rel: str, after: str) -> str:
    folder, _, name = rel.rpartition("/")
    digest_now = sha256_bytes(files[rel])
    digests = f"sha256 {sealed.files[rel].sha256[:12]}... sealed, {digest_now[:12]}... now"
    repeat = sealed.repeats.get(folder)
    if name == RECORD and repeat is not None:
        record = _read_record(files, rel)
        now = record.throughput if record is not None else "unreadable"
        if now != repeat.throughput:
            return f"record changed {after} (throughput {repeat.throughput} sealed, {now} now)"
        return f"record changed {after} ({digests})"
    if NODE_LOG.match(name) and repeat is not None:
        record = _read_record(files, f"{folder}/{RECORD}")
        if record is not None:
            facts = rank_facts(record.parser, _repeat_logs(files, folder, record))
            difference = _facts_difference(repeat.fingerprints, facts)
            if difference:
                return f"fingerprint changed {after} ({difference})"
        return f"log changed {after} ({digests})"
    return f"changed {after} ({digests})"


def _facts_difference(sealed: list[RankFacts], now: list[RankFacts]) -> str:
    """The first fact that differs between two sets of rank facts ("" when none does)."""
    before = {rank: group.facts for group in sealed for rank in group.ranks}
    after = {rank: group.facts for group in now for rank in group.ranks}
    for rank in sorted(set(before) | set(after)):
        old, new = before.get(rank), after.get(rank)
        if old == new:
            continue
        if old is None or new is None:
            return f"rank {rank}: {'no fingerprint' if old is None else 'fingerprint'} sealed, " + (
                "none now" if new is None else "one now"
            )
        key = next(k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k))
        return f"rank {rank}: {key} {old.get(key)!r} sealed, {new.get(key)!r} now"
    return ""


# --------------------------------------------------------------------------------------------
# A session folder as a reader finds it (``dlperf report``): who vouches for it, what changed


@dataclass(frozen=True)
class SealState:
    """``how``: who vouches for the session's files, in a line (signed by whom, sealed but not
    signed, not sealed); ``problems``: what no longer matches the seal or its signature."""

    how: str
    problems: list[str] = field(default_factory=list)


def seal_state(root: Path, allowed_signers: Path) -> SealState:
    """The session folder ``root`` against its seal, and the seal's signature against
    ``allowed_signers`` (git's format; a signature by a key it does not list is named as such,
    not trusted)."""
    seal_file = Path(root) / SEAL
    signature_file = Path(root) / SEAL_SIGNATURE
    files = FolderFiles(root)
    odd = odd_seal_files(root)
    if odd:  # named, never read (nor taken as "unsigned" or "not sealed")
        named = tuple(f"{rel}:" for rel in odd)
        return SealState(
            "seal not read: " + ", ".join(f"{rel} is not a regular file" for rel in odd),
            [f"{rel}: {why}" for rel, why in odd.items()]
            + [line for line in files.refused if not line.startswith(named)],
        )
    if not seal_file.is_file():
        orphan = [
            f"{SEAL_SIGNATURE}: a signature of no {SEAL} (the seal was removed): a release "
            f"refuses it; restore the seal, or remove the .sig to release the session unsigned"
        ]
        return SealState(
            f"not sealed (no {SEAL}): nothing vouches that its files are as run",
            files.refused + (orphan if signature_file.exists() else []),
        )
    data = seal_file.read_bytes()
    try:
        sealed = load_seal(data, str(seal_file))
    except SealError as error:
        return SealState(f"{SEAL} unreadable", [str(error), *files.refused])
    signature = signature_file.read_bytes() if signature_file.is_file() else None
    problems = files.refused + [
        f"{rel}: {what}" for rel, what in changes(sealed, files, signed=signature is not None)
    ]
    if signature is None:
        return SealState(f"sealed, not signed (no {SEAL_SIGNATURE})", problems)
    try:
        listed = listed_keys(allowed_signers)
    except SigningError as error:  # missing, a folder, a FIFO, a line it cannot read
        return SealState("signature unchecked", [str(error), *problems])
    if listed == 0:
        key = intact_key(data, signature, SESSION_NAMESPACE)
        if key is None:
            return SealState(
                "signature unchecked", [f"{SEAL}: changed after it was signed", *problems]
            )
        return SealState(f"signed by {key}, a key {allowed_signers} does not list", problems)
    try:
        signer = verify_bytes(data, signature, allowed_signers, SESSION_NAMESPACE, SEAL)
    except SigningError as error:
        return SealState("signature not good", [str(error), *problems])
    return SealState(f"signed by {signer.principal} ({signer.key})", problems)
