"""What one run may sign, from the check before it to its seal after it.

A run signs only what it ran or what the seal it replaces already vouched for. :class:`Warrant`
reads the session folder and its seal once, before the run (``dlperf run``, ``import-logs``,
``attest-hardware``): every file the old seal does not hold as it is (or, where the run signs,
that no seal of the same key holds) is refused, named, before anything runs, unless a person
adopts it (``--adopt PATH``). What the check let through is *vouched*, with its SHA-256 as the
check found it. While the run goes on, the kit tells the warrant what it writes (a repeat's
folder once its record is written, a case's ``case.json``, a batch search, ``session.json``
noting the run). The runner takes a repeat as finished only where the warrant vouched for its
record, or the run wrote it (:meth:`Warrant.finished`); and the seal is written only where
every file of the session is one of those, as it was (:meth:`Warrant.unsigned_files`): a file
that appeared in the folder during the run, from anyone else, is refused with its path and
nothing is signed. The check and the seal read the same digests (``seal_digests``) of the same
seal bytes, so they cannot disagree.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Collection
from pathlib import Path, PurePosixPath
from typing import Any

from driver.files import KitWriteError, sha256_bytes, write_bytes
from driver.model.drift import (
    Sealed,
    drift,
    old_seal,
    previous_seal,
    write_session_seal,
)
from driver.model.results import RECORD, RepeatRecord, kit_repeat_file
from driver.model.seal import (
    CLAIM,
    CLAIM_SIGNATURE,
    SEAL,
    SEAL_SIGNATURE,
    FolderFiles,
    SealError,
    SessionManifest,
    load_seal,
    odd_seal_files,
    seal_digests,
)
from driver.model.walk import walk_session
from driver.signing import (
    CLAIM_NAMESPACE,
    SESSION_NAMESPACE,
    SigningError,
    intact_key,
    sign_bytes,
    signature_path,
)

_ASIDE = re.compile(r"\.(failed|old)-\d+$")  # a folder the kit set aside to run it again


def _origin(rel: str) -> str:
    """Where a file in a folder the kit set aside (``repeat-03.failed-1/...``) was before."""
    parts = PurePosixPath(rel).parts
    return "/".join([_ASIDE.sub("", part) for part in parts[:-1]] + [parts[-1]])


def unvouched(
    root: Path, selected: Collection[str] | None, signer: str | None
) -> list[tuple[str, str]]:
    """What a command that adds to the session folder ``root`` would sign without having run
    or verified it: (session-relative path, why), before anything runs; [] where the session
    may be resumed and sealed again (:class:`Warrant`'s check, for the commands that keep no
    warrant through their run: ``import-logs``, ``attest-hardware``)."""
    return sorted(Warrant(root, selected, signer).problems.items())


class AdoptError(ValueError):
    """An ``--adopt`` value that names nothing the run could adopt (says which and the fix)."""


class Warrant:
    """What a run into the session folder ``root`` may sign: checked before it runs
    (``problems``: path -> why, refused unless adopted), told what it writes while it runs,
    asked again when it seals. ``selected``: the case ids the run measures (None: any case);
    ``signer``: the key that signs, as ``key_description`` names it (None: unsigned)."""

    def __init__(self, root: Path, selected: Collection[str] | None, signer: str | None) -> None:
        self.root = Path(root)
        self.signer = signer
        self.new = not self.root.is_dir() or self.root.is_symlink()
        self.old: bytes | None = None  # the seal's bytes as the check read them
        self.signature: bytes | None = None
        self.sealed: SessionManifest | None = None  # the seal this run replaces, where it reads
        self.problems: dict[str, str] = {}
        self.vouched: dict[str, str] = {}  # path -> SHA-256 as the check found it
        self.adopted: dict[str, str] = {}  # path -> why no seal covered it
        self.claimed: list[str] = []  # what a refused run's claim carried (``_claimed``)
        self.written: dict[str, str] = {}  # path -> SHA-256 as this run wrote it
        self._digests: dict[str, str] = {}  # every file as the check found it
        # folders of the session the runtime writes into while its jobs run (Slurm's job
        # output), asynchronously: a new file there is taken as the run's when it seals
        self.scratch: tuple[str, ...] = ()
        if not self.new:
            self._check(selected)

    # ---------------------------------------------------------------------------------------
    # before the run

    def _check(self, selected: Collection[str] | None) -> None:
        files = FolderFiles(self.root)
        odd = odd_seal_files(self.root)
        if odd:  # neither is read: the run would sign over what it cannot check
            self.problems = dict(odd)
            return
        out: dict[str, str] = {}
        carried: set[str] = set()
        path = self.root / SEAL
        if not path.is_file():
            if signature_path(path).is_file():
                out[SEAL_SIGNATURE] = f"a signature whose {SEAL} was removed"
            for rel in files if self.signer is not None else ():  # session.json too: its
                out[rel] = f"no seal covers it (the session has no {SEAL})"  # facts are signed
        else:
            self.old, self.signature = old_seal(path)
            for rel, what in drift(self.old, self.signature, files, after_run=False):
                out.setdefault(rel, what)
            try:
                self.sealed = load_seal(self.old, SEAL)
            except SealError:
                self.sealed = None  # named by drift
            if self.sealed is not None:
                added = "added since the session was sealed, not by a run of the kit"
                for rel in files:
                    if rel not in self.sealed.files:
                        out.setdefault(rel, added)
                by = (
                    intact_key(self.old, self.signature, SESSION_NAMESPACE)
                    if self.signature is not None
                    else None
                )
                if self.signer is not None and by != self.signer:
                    seal_of = f"its seal is signed by {by}" if by else "its seal is not signed"
                    other = f"{seal_of}, not by the key signing now ({self.signer})"
                    for rel in files:
                        out.setdefault(rel, other)
                carried = {rel for rel in self.sealed.files if rel in files and rel not in out}
        if selected is not None:
            # A case the run does not measure: only what the seal holds of it, as it is (an
            # earlier run of the session measured it), is carried.
            prefixes = tuple(f"cases/{case_id}/" for case_id in selected)
            for rel in files:
                if rel.startswith("cases/") and not rel.startswith(prefixes) and rel not in carried:
                    out[rel] = "in a case folder outside this run's selection"
        digests = seal_digests(files)
        self.claimed = self._claimed(out, digests)
        self.problems = out
        self.vouched = {rel: digests[rel] for rel in files if rel not in out}
        self._digests = digests

    def _claimed(self, out: dict[str, str], digests: dict[str, str]) -> list[str]:
        """Take out of ``out`` what the session's claim holds as it is: the files a run of the
        key signing now wrote or carried before its seal was refused (a stranger's files in
        the folder then). A claim counts only signed by that key (unsigned: only for an
        unsigned run) and written over the seal the session holds now; the files it holds,
        as they were, are carried as measured, its adopted ones as adopted. Returns them."""
        path = self.root / CLAIM
        if not path.is_file():
            return []
        data = path.read_bytes()
        signature = signature_path(path)
        signed = signature.read_bytes() if signature.is_file() else None
        by = intact_key(data, signed, CLAIM_NAMESPACE) if signed is not None else None
        if by != self.signer:
            return []  # another key's claim, or an unsigned one for a signed run: not ours
        try:
            claim = json.loads(data)
            files, adopted = dict(claim["files"]), dict(claim.get("adopted") or {})
            over = claim["seal_sha256"]
        except (ValueError, KeyError, TypeError):
            return []
        if over != (sha256_bytes(self.old) if self.old is not None else None):
            return []  # a claim over another seal than the one the session holds
        taken = sorted(rel for rel in out if rel in files and files[rel] == digests.get(rel))
        for rel in taken:
            if rel in adopted:
                self.adopted[rel] = adopted[rel]
            del out[rel]
        return taken

    def adopt(self, paths: list[str]) -> list[str]:
        """Adopt what the check refused under ``paths`` (session-relative or absolute; ``.``
        the whole session): vouched for by a person, recorded by the seal as adopted. Returns
        what stays refused ("path: why"); raises AdoptError for a path that names nothing."""
        prefixes = []
        for text in paths:
            if not text.strip():
                raise AdoptError(
                    "--adopt '': an empty path (an unset make variable, ADOPT=) would adopt the "
                    "whole session; name the file or folder you vouch for (`--adopt .` for all "
                    "of it), or leave --adopt out"
                )
            if self.new:
                raise AdoptError(
                    f"--adopt {text}: {self.root} is a new session; there is nothing to adopt"
                )
            path = Path(text) if Path(text).is_absolute() else self.root / text
            try:
                rel = path.resolve().relative_to(self.root.resolve()).as_posix()
            except ValueError:
                raise AdoptError(f"--adopt {text}: not inside the session {self.root}") from None
            if not path.exists():
                raise AdoptError(f"--adopt {text}: no such file or folder in {self.root}")
            prefixes.append("" if rel == "." else rel)
        refused = []
        for rel, what in sorted(self.problems.items()):
            covered = any(not p or rel == p or rel.startswith(p + "/") for p in prefixes)
            if covered and not rel.startswith(SEAL) and rel in self._digests:
                self.adopted[rel] = what  # a seal or .sig that does not hold: never
                self.vouched[rel] = self._digests[rel]
            else:
                refused.append(f"{rel}: {what}")
        return refused

    @property
    def sealed_verdicts(self) -> dict[str, str]:
        """Repeat folder -> the verdict the seal this run replaces holds for it."""
        return {} if self.sealed is None else {f: r.verdict for f, r in self.sealed.repeats.items()}

    # ---------------------------------------------------------------------------------------
    # while the run goes on

    def finished(self, folder: Path, record_bytes: bytes) -> bool:
        """Whether the repeat ``folder``, whose record now reads ``record_bytes``, is one this
        run may take as finished: its record as the check vouched for it (carried from the
        seal, a sealed verdict ok) or as this run wrote it. A record that appeared in the
        folder since the check is nobody's the run may sign."""
        rel = self._rel(folder)
        if self.sealed_verdicts.get(rel, "ok") != "ok":
            return False  # the seal holds it unfinished: whatever its record says now
        digest = sha256_bytes(record_bytes)
        key = f"{rel}/{RECORD}"
        return digest in (self.vouched.get(key), self.written.get(key))

    def holds(self, path: Path) -> bool:
        """Whether the file ``path`` is as the check vouched for it or this run wrote it."""
        rel = self._rel(path)
        digest = sha256_bytes(Path(path).read_bytes())
        return digest in (self.vouched.get(rel), self.written.get(rel))

    def wrote(self, path: Path, record: RepeatRecord | None = None) -> None:
        """``path`` (a file, or a folder and everything in it) is as this run wrote it; for a
        repeat's folder, ``record`` gives its logs' SHA-256 (hashed by the runner when it read
        them: no log is read again)."""
        path = Path(path)
        if path.is_symlink() or not path.exists():
            return
        if path.is_file():
            self.written[self._rel(path)] = sha256_bytes(path.read_bytes())
            return
        if record is None:  # a folder the run wrote all of (a batch search, its probes)
            for file in walk_session(path).files.values():
                self.written[self._rel(file)] = sha256_bytes(file.read_bytes())
            return
        # A repeat's folder: its record, the logs the record hashes (as the runner read them)
        # and the files the kit writes beside them (telemetry, srun's messages). Anything else
        # in it was put there by someone else while the repeat ran: not the run's, so the
        # seal names it.
        for rel, file in walk_session(path).files.items():
            if rel in record.log_sha256:
                self.written[self._rel(file)] = record.log_sha256[rel]
            elif rel == RECORD or kit_repeat_file(rel):
                self.written[self._rel(file)] = sha256_bytes(file.read_bytes())

    def _rel(self, path: Path) -> str:
        return Path(path).relative_to(self.root).as_posix()

    # ---------------------------------------------------------------------------------------
    # at sealing

    def unsigned_files(self, files: FolderFiles) -> list[tuple[str, str]]:
        """(path, why) for every file the seal would sign that this run neither wrote nor
        carried (vouched for before it ran), as it was; every vouched file removed but by the
        kit setting it aside; the seal replaced since the check. [] where the seal may be
        written."""
        path = self.root / SEAL
        now = path.read_bytes() if path.is_file() else None
        out = []
        if now != self.old:
            out.append((SEAL, "replaced during the run, not by it"))
        digests = seal_digests(files)
        aside: dict[str, set[str]] = {}  # where a file set aside came from -> its digests
        for rel, digest in digests.items():
            origin = _origin(rel)
            if origin != rel:
                aside.setdefault(origin, set()).add(digest)
        for rel in sorted(files):
            digest = digests[rel]
            origin = _origin(rel)
            if digest in (self.written.get(rel), self.vouched.get(rel)):
                continue
            if rel not in self.vouched and rel.startswith(tuple(f"{d}/" for d in self.scratch)):
                continue  # the runtime's own output (its jobs write it, not the kit)
            if origin != rel and digest in (self.written.get(origin), self.vouched.get(origin)):
                continue  # set aside by the kit (``.failed-K``, ``.old-K``) as it was
            if rel in self.written:
                out.append((rel, "changed after this run wrote it"))
            elif rel in self.vouched:
                out.append((rel, "changed during the run (it was checked before it)"))
            else:
                out.append((rel, "written into the session during the run, not by it"))
        for rel in sorted(self.vouched):
            if rel in files or self.vouched[rel] in aside.get(rel, ()):
                continue
            parent = PurePosixPath(rel).parent
            if "batch-search" in parent.parts and any(
                PurePosixPath(w).parent == parent for w in self.written
            ):
                continue  # a probe's folder the run wrote again (an interrupted probe)
            out.append((rel, "removed during the run, not by it"))
        return out

    def seal(self, key: Path | None) -> Sealed:
        """Seal the session (signed with ``key`` where given) over what this run wrote and what
        it carried or adopted, the old seal named as ``previous``; nothing written where the
        session holds anything else (``Sealed.refused``) or its seal is not a regular file.
        Raises SigningError, KitWriteError as ``write_session_seal`` does."""
        path = self.root / SEAL
        odd = odd_seal_files(self.root)
        if odd:
            return Sealed(path, written=False, drift=[f"{rel}: {why}" for rel, why in odd.items()])
        files = FolderFiles(self.root)
        refused = [f"{rel}: {what}" for rel, what in self.unsigned_files(files)]
        if refused:
            self._write_claim(key, refused)
            return Sealed(path, written=False, refused=refused, claim=CLAIM)
        previous: dict[str, Any] | None = None
        if self.old is not None:
            previous = previous_seal(self.old, self.signature)
        earlier = self.sealed.adopted if self.sealed is not None else {}
        sealed = write_session_seal(self.root, files, key, previous, {**earlier, **self.adopted})
        for name in (CLAIM, CLAIM_SIGNATURE):  # consumed: the seal holds what it claimed
            (self.root / name).unlink(missing_ok=True)
        return sealed

    def _write_claim(self, key: Path | None, refused: list[str]) -> None:
        """What this run wrote and carried, as it held them, in ``session-claim.json`` (signed
        with ``key``): the next run of the same key carries them as measured once the files
        the seal refused are gone, so nothing the lab ran is lost to a stranger's file."""
        held = {**self.vouched, **self.written}
        strangers = {line.split(": ", 1)[0] for line in refused}
        claim = {
            "kind": "dlperf-session-claim",
            "schema": 1,
            "session": self.root.name,
            "seal_sha256": sha256_bytes(self.old) if self.old is not None else None,
            "files": {rel: held[rel] for rel in sorted(held) if rel not in strangers},
            "adopted": dict(sorted(self.adopted.items())),
            "refused": sorted(strangers),
        }
        data = (json.dumps(claim, indent=1, sort_keys=True) + "\n").encode()
        try:
            signature = sign_bytes(data, key, CLAIM_NAMESPACE) if key is not None else None
            write_bytes(self.root / CLAIM, data)
            if signature is not None:
                write_bytes(self.root / CLAIM_SIGNATURE, signature)
            else:
                (self.root / CLAIM_SIGNATURE).unlink(missing_ok=True)
        except (SigningError, KitWriteError, OSError) as error:  # the refusal still stands
            print(f"warning: {self.root / CLAIM} not written: {error}", file=sys.stderr)
