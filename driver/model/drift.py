"""A session folder against its seal (``driver.model.seal``): what changed since, and sealing it.

A release and an audit compare a session's files with its seal (:func:`changes`): a log, a
record or a fingerprint changed, a file added or a finished repeat removed after sealing is
named; ``dlperf report`` too, saying who vouches for the session (:func:`seal_state`).

The head node seals a session when its run ends (:func:`seal_session`: ``dlperf run``, a
rehearsal, the selftest, ``import-logs``, ``attest-hardware``). A command that adds to a session
first checks that it would sign only what it runs or verifies (``driver.model.warrant``: no file the
old seal does not hold as it is; of a case outside the run's selection, only what the seal
holds); what a person vouches for
instead (``--adopt``) is recorded as ``adopted``. A resumed session is sealed again, replacing
the old seal, only if everything the old seal covered is as it was (:func:`drift`) but what the
kit itself changes (``session.json``'s runs grow; a repeat the seal holds as unfinished runs
again, its sealed attempt kept aside unchanged as ``repeat-NN.failed-K``; an interrupted probe
runs again; a probe folder kept aside as ``.old-K``), and its signature still good for its bytes
(whoever signed it); else the old seal stays and the run says why: the kit never signs over an
edit. Every file is read once per check (:class:`~driver.model.seal.FolderFiles`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from driver.files import sha256_bytes
from driver.model.results import NODE_LOG, RECORD, RankFacts
from driver.model.seal import (
    REPEAT_FOLDER,
    SEAL,
    SEAL_SIGNATURE,
    SESSION_JSON,
    FolderFiles,
    SealError,
    SessionManifest,
    load_seal,
    manifest_of,
    odd_seal_files,
    read_record,
    repeat_fingerprints,
    seal_text,
    session_json_of,
    write_seal,
)
from driver.signing import (
    SESSION_NAMESPACE,
    SigningError,
    intact_key,
    key_description,
    listed_keys,
    sign_bytes,
    signature_path,
    verify_bytes,
)

_UNFINISHED_PROBE = re.compile(r"^cases/.+/batch-search/[^/]+$")
_SET_ASIDE = re.compile(r"\.(failed|old)-\d+$")


@dataclass(frozen=True)
class Sealed:
    """What sealing a session did: the seal written (signed with ``key``, or unsigned), or, where
    the session changed since its last seal, nothing (``drift`` says what changed)."""

    path: Path
    written: bool
    key: str | None = None  # the signing key's description where signed
    drift: list[str] = field(default_factory=list)
    # files the run neither wrote nor carried from its seal (``Warrant.unsigned_files``)
    refused: list[str] = field(default_factory=list)
    claim: str | None = None  # where the refused run listed what it wrote (``Warrant.seal``)

    def describe(self) -> str:
        if self.refused:
            shown = self.refused[:20]
            more = len(self.refused) - len(shown)
            return (
                f"{self.path.parent}: nothing signed: the session holds files this run neither "
                "wrote nor carried from its seal (written into the folder while it ran, by "
                "someone else):\n  "
                + "\n  ".join(shown)
                + (f"\n  and {more} more" if more > 0 else "")
                + f"\nThe old seal, if any, stays as it was; every file this run wrote is kept "
                f"in {self.path.parent}"
                + (
                    f", and listed with its SHA-256 in {self.claim} (signed by the same key "
                    "where the run signed). To publish them as measured, remove the files named "
                    "above and run the same command again: the run's own repeats are taken as "
                    "finished from the claim and sealed"
                    if self.claim
                    else ". To publish them, remove the files named above and resume the "
                    "session with --adopt PATH for what this run wrote (sealed as adopted, not "
                    "measured), or run the cases again into a new session (--session NEW)"
                )
            )
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
    """Seal the session folder ``root`` (``driver.model.seal``), or seal it again where its
    last seal still holds (:func:`drift`); signed with ``key`` where given; ``adopted``: files
    a person vouched for before the run, recorded as such, with those the old seal recorded.
    A run seals through its warrant instead (``driver.model.warrant.Warrant.seal``: what it
    checked before it ran, and what it wrote). Raises SigningError where the key does not
    sign, KitWriteError where the seal cannot be written; returns without writing where the
    session drifted from its last seal."""
    root = Path(root)
    path = root / SEAL
    files = FolderFiles(root)
    previous = None
    adopted = dict(adopted or {})
    odd = odd_seal_files(root)
    if odd:
        return Sealed(path, written=False, drift=[f"{rel}: {why}" for rel, why in odd.items()])
    if path.is_file():
        old, signature = old_seal(path)
        problems = [f"{rel}: {what}" for rel, what in drift(old, signature, files)
                    if rel not in adopted]  # fmt: skip
        if problems:
            return Sealed(path, written=False, drift=problems)
        previous = previous_seal(old, signature)
        adopted = {**load_seal(old, SEAL).adopted, **adopted}
    return write_session_seal(root, files, key, previous, adopted)


def previous_seal(old: bytes, signature: bytes | None) -> dict[str, Any]:
    """What a new seal says of the one it replaces: its SHA-256 and the key that signed it."""
    return {
        "sha256": sha256_bytes(old),
        "signed_by_key": intact_key(old, signature, SESSION_NAMESPACE) if signature else None,
    }


def write_session_seal(
    root: Path,
    files: FolderFiles,
    key: Path | None,
    previous: dict[str, Any] | None,
    adopted: Mapping[str, str],
) -> Sealed:
    """Write the seal of ``files`` (signed with ``key`` where given) into ``root``."""
    path = Path(root) / SEAL
    data = seal_text(manifest_of(Path(root).name, files, previous, adopted))
    signature = sign_bytes(data, key, SESSION_NAMESPACE) if key is not None else None
    write_seal(path, data, signature)
    return Sealed(path, written=True, key=key_description(key) if key is not None else None)


def old_seal(path: Path) -> tuple[bytes, bytes | None]:
    """A seal's bytes and its signature's, if any (both regular files: ``odd_seal_files``)."""
    signature = signature_path(path)
    return path.read_bytes(), signature.read_bytes() if signature.is_file() else None


def _run_again(sealed: SessionManifest) -> tuple[list[str], list[str]]:
    """The sealed folders the kit runs again, and of them the batch-search probes.

    A sealed repeat that did not finish ok, or a probe without its verdict, is run again: its
    folder is set aside unchanged (``.failed-K``, ``.old-K``) and a new one written in its
    place. Until then its files stay as sealed, like every other: a record that turned ``ok``
    since the seal is an edit, never a repeat done."""
    rerun = [
        folder
        for folder in _sealed_folders(sealed)
        if REPEAT_FOLDER.match(folder)
        and ".failed-" not in folder
        and (folder not in sealed.repeats or sealed.repeats[folder].verdict != "ok")
    ]
    probes = [  # an interrupted batch-search probe is run again in its own folder
        folder
        for folder in _sealed_folders(sealed)
        if _UNFINISHED_PROBE.match(folder) and f"{folder}/verdict.json" not in sealed.files
    ]
    return rerun + probes, probes


def drift(
    old: bytes, signature: bytes | None, files: Mapping[str, bytes], after_run: bool = True
) -> list[tuple[str, str]]:
    """What changed in a session since the seal ``old`` (with its signature, if any) other than
    what the kit itself changes when it resumes a session, as (session-relative path, what
    happened); [] when it may be sealed again. ``after_run``: False before a run
    (``driver.model.warrant``), when nothing may have changed in place yet."""
    try:
        sealed = load_seal(old, SEAL)
    except SealError as error:
        return [(SEAL, f"{str(error).removeprefix(SEAL + ': ')} (remove it to seal anew)")]
    if signature is not None and intact_key(old, signature, SESSION_NAMESPACE) is None:
        return [(SEAL, f"changed after it was signed ({SEAL_SIGNATURE} no longer matches)")]
    rerun, probes = _run_again(sealed)
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
    verdict = _record_change(sealed, files, rel, "verdict")
    return f"changed since it was sealed ({verdict})" if verdict else "changed since it was sealed"


def _record_change(sealed: SessionManifest, files: Mapping[str, bytes], rel: str, name: str) -> str:
    """``"<name> <sealed> sealed, <now> now"`` where ``rel`` is a sealed repeat's record that
    now states another ``name`` (verdict, throughput) than the seal holds; "" otherwise."""
    folder, _, file = rel.rpartition("/")
    repeat = sealed.repeats.get(folder)
    if file != RECORD or repeat is None:
        return ""
    record = read_record(files, rel)
    now = getattr(record, name) if record is not None else "unreadable"
    was = getattr(repeat, name)
    return "" if now == was else f"{name} {was} sealed, {now} now"


def _sealed_folders(sealed: SessionManifest) -> set[str]:
    return {rel.rpartition("/")[0] for rel in sealed.files}


def _session_json_drift(sealed: dict[str, Any], files: Mapping[str, bytes]) -> list[str]:
    now = session_json_of(files)
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
    return next((f for f in folders if REPEAT_FOLDER.match(f)), None)


def _what_changed(sealed: SessionManifest, files: Mapping[str, bytes], rel: str, after: str) -> str:
    folder, _, name = rel.rpartition("/")
    digest_now = sha256_bytes(files[rel])
    digests = f"sha256 {sealed.files[rel].sha256[:12]}... sealed, {digest_now[:12]}... now"
    repeat = sealed.repeats.get(folder)
    if name == RECORD and repeat is not None:
        throughput = _record_change(sealed, files, rel, "throughput")
        return f"record changed {after} ({throughput or digests})"
    if NODE_LOG.match(name) and repeat is not None:
        # the facts the record holds now: the door refuses a record whose facts are not its
        # logs', so a log edited to name another machine shows here, or there
        record = read_record(files, f"{folder}/{RECORD}")
        if record is not None:
            facts = repeat_fingerprints(files, folder, record)
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
    return _signature_state(data, signature, allowed_signers, problems)


def _signature_state(
    data: bytes, signature: bytes, allowed_signers: Path, problems: list[str]
) -> SealState:
    """Who signed the seal ``data``, as ``allowed_signers`` knows the key (none listed: the
    key named, untrusted, where the signature is intact)."""
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
