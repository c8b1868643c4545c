"""The raw data of a release: which session files it keeps, and their deterministic archives.

A session becomes one ``raw/<session>.tar.gz`` whose members keep their session-relative
paths under the session name (``<session>/cases/<case id>/repeat-01/node0.log``), so every
number of the report maps back to a file. Kept: ``session.json`` and any other file at the
session root (provenance written by runtimes), ``probes/`` (without superseded probe runs), and
per case everything in its folder (``case.json``, batch-search logs) except repeat folders that
are not finished ``ok`` (failed attempts, crashes), which the manifest lists instead. The
session's ``report/`` folder is derived and left out.

Archives are byte-for-byte reproducible (sorted members, zeroed times and owners, gzip without
a timestamp), so their SHA-256 depends on the content only. An archive comes back onto a disk
only through :func:`extract_archive`: bounded, each member checked before its bytes land.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from driver.files import TEMP_PREFIX, sha256_bytes, write_bytes
from driver.model.results import RecordError, load_record
from driver.model.seal import odd_seal_files
from driver.model.walk import SessionWalk, symlink_refusal, walk_session

RAW_DIR = "raw"
_REPEAT = re.compile(r"^repeat-\d+$")
_SUPERSEDED_PROBE = re.compile(r"\.old-\d+$")


@dataclass
class SessionFiles:
    name: str
    root: Path
    files: dict[str, Path] = field(default_factory=dict)  # session-relative path -> file
    repeats: list[str] = field(default_factory=list)  # kept repeat folders (relative)
    excluded: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # symlinks, special files: never archived


UNTRUSTED = ("no record (crashed or in progress)", "unreadable record")


def _record_verdict(folder: Path) -> tuple[str, str]:
    path = folder / "record.json"
    if not path.exists():
        return "no record (crashed or in progress)", ""
    try:
        record = load_record(path)
    except RecordError as error:
        return "unreadable record", str(error)
    return record.verdict, record.detail


def _refuse_odd_files(out: SessionFiles, root: Path, walk: SessionWalk) -> None:
    """What a release refuses before reading anything: an odd seal or signature file (named
    as what it is), a symlink outside ``report/``, a file that is not a regular one."""
    odd = {root / name: why for name, why in odd_seal_files(root).items()}
    out.refused += [f"{path}: {why}" for path, why in odd.items()]
    for link in walk.symlinks:
        if link.relative_to(root).parts[0] != "report" and link not in odd:  # report: derived
            out.refused.append(symlink_refusal(link))
    out.refused += [
        f"{p}: not a regular file (a socket, fifo or device)" for p in walk.others if p not in odd
    ]


def _repeat_folder_of(path: Path, case_dirs: set[Path]) -> Path | None:
    """The repeat folder (``repeat-NN``, or an attempt set aside) a case's file is in, if any."""
    owners = [d for d in case_dirs if d in path.parents]
    if not owners:
        return None
    case_dir = max(owners, key=lambda d: len(d.parts))
    inner = path.relative_to(case_dir).parts
    if len(inner) > 1 and inner[0].startswith("repeat-"):
        return case_dir / inner[0]
    return None


def _keep_repeat(out: SessionFiles, root: Path, folder: Path) -> bool:
    """Whether a repeat folder's files are released (a current repeat that finished ok); one
    that is not is refused where ``dlperf report`` refuses it, else listed as left out."""
    verdict, detail = _record_verdict(folder)
    current = bool(_REPEAT.match(folder.name))  # not a failed attempt
    kept = current and verdict == "ok"
    relative = str(folder.relative_to(root))
    if current and verdict in UNTRUSTED:
        # what `dlperf report` refuses is refused, never silently dropped
        out.refused.append(
            detail
            or f"{folder / 'record.json'}: missing "
            "(a repeat folder without its record: crashed "
            "or deleted; resume the session or remove it)"
        )
    elif kept:
        out.repeats.append(relative)
    else:
        out.excluded.append(
            {"session": root.name, "folder": relative, "verdict": verdict, "detail": detail}
        )
    return kept


def collect_session(root: Path) -> SessionFiles:
    """The files of ``root`` that a release keeps (see the module docstring)."""
    root = Path(root)
    out = SessionFiles(name=root.name, root=root)
    if root.is_symlink():
        out.refused.append(f"{root}: the session folder is a symlink; release the folder itself")
        return out
    walk = walk_session(root)
    # the seal and its signature, checked before any read: named as what they are
    _refuse_odd_files(out, root, walk)
    case_dirs = {
        path.parent
        for rel, path in walk.files.items()
        if rel.startswith("cases/") and path.name == "case.json"
    }
    verdicts: dict[Path, bool] = {}
    for path in walk.files.values():
        rel = path.relative_to(root)
        if rel.parts[0] == "report" or path.name.endswith(".tmp"):
            continue
        if path.name.startswith(TEMP_PREFIX):  # a write killed half-way
            continue
        if rel.parts[0] == "probes" and any(_SUPERSEDED_PROBE.search(p) for p in rel.parts):
            continue
        folder = _repeat_folder_of(path, case_dirs) if rel.parts[0] == "cases" else None
        if folder is not None:
            if folder not in verdicts:
                verdicts[folder] = _keep_repeat(out, root, folder)
            if not verdicts[folder]:
                continue
        out.files[str(rel)] = path
    return out


def write_archive(name: str, files: dict[str, Path], out_path: Path) -> dict[str, dict[str, Any]]:
    """Write ``<name>/<relative path>`` members; returns member -> {sha256, bytes}."""
    digests: dict[str, dict[str, Any]] = {}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in sorted(files):
            data = files[rel].read_bytes()
            member = f"{name}/{rel}"
            info = tarfile.TarInfo(member)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
            digests[member] = {"sha256": sha256_bytes(data), "bytes": len(data)}
    compressed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, mtime=0, compresslevel=9) as gz:
        gz.write(buffer.getvalue())
    write_bytes(out_path, compressed.getvalue())
    return digests


def read_archive(path: Path) -> dict[str, bytes]:
    """member name -> content of every member of a release archive; ValueError for a member
    that is not a regular file (a release writes none: a FIFO, link or folder member was put
    there by hand, and is named rather than skipped)."""
    out: dict[str, bytes] = {}
    with tarfile.open(path, mode="r:gz") as tar:
        for info in tar:
            if not info.isfile():
                kind = (
                    "a FIFO"
                    if info.isfifo()
                    else "a link"
                    if info.issym() or info.islnk()
                    else ("a folder" if info.isdir() else "a device or other special member")
                )
                raise ValueError(
                    f"member {info.name} is {kind}, not a regular file: a release archives "
                    "regular files only"
                )
            handle = tar.extractfile(info)
            out[info.name] = handle.read() if handle else b""
    return out


# An archive back onto a disk (the GPU check's, which comes from another machine): every member
# checked before its bytes are written, the totals bounded while they stream.
CHUNK = 1 << 20
MAX_MEMBERS = 20_000
MAX_MEMBER_BYTES = 1 << 30  # one raw log or telemetry file
MAX_TOTAL_BYTES = 4 << 30  # everything unpacked, counted while it streams


class ArchiveError(ValueError):
    """An archive that is not whole or holds a member no archive of the kit holds."""


def member_name(archive: Path, member: tarfile.TarInfo) -> str:
    """The member's checked name: a regular file at a plain relative path."""
    name = member.name
    if (
        not member.isfile()
        or not name
        or name.startswith("/")
        or "\\" in name
        or any(part in ("", ".", "..") for part in name.split("/"))
    ):
        raise ArchiveError(f"{archive}: member {name!r} is not a plain relative file")
    return name


def check_whole_gzip(archive: Path) -> None:
    """Read the compressed stream to its end marker first: a gzip cut short can end the tar
    stream at a member's header, where tarfile stops without an error, so that a truncated
    archive would read as a shorter whole one. Bounded like the extraction (tar headers on top
    of the members' bytes)."""
    limit = MAX_TOTAL_BYTES + MAX_MEMBERS * 2048 + 10240
    size = 0
    try:
        with gzip.open(archive, "rb") as stream:
            while chunk := stream.read(CHUNK):
                size += len(chunk)
                if size > limit:
                    raise ArchiveError(f"{archive}: unpacks to over {MAX_TOTAL_BYTES} bytes")
    except (EOFError, OSError, zlib.error) as error:
        raise ArchiveError(f"{archive}: not a whole archive ({error}); fetch it again") from None


def _clashes(name: str, seen: dict[str, tuple[str, int]], folders: set[str]) -> set[str]:
    """The folders above ``name``; ArchiveError where ``name`` was seen, is a folder of another
    member or lies under one."""
    parents = {"/".join(name.split("/")[:i]) for i in range(1, name.count("/") + 1)}
    if name in seen or name in folders or parents & set(seen):
        raise ArchiveError(f"member {name!r} clashes with another member")
    return parents


def extract_archive(archive: Path, destination: Path) -> dict[str, tuple[str, int]]:
    """Stream ``archive`` into ``destination`` (an empty folder), every member checked before
    its bytes are written (a regular file at a plain relative path, not a folder of another
    member, not seen before, within the size bounds, the running total within
    :data:`MAX_TOTAL_BYTES`) and hashed as it is written: member -> (SHA-256, size). Raises
    ArchiveError; the caller removes ``destination`` then."""
    check_whole_gzip(archive)
    seen: dict[str, tuple[str, int]] = {}
    folders: set[str] = set()
    total = 0
    try:
        with tarfile.open(archive, mode="r|gz") as tar:
            for count, member in enumerate(tar, start=1):
                if count > MAX_MEMBERS:
                    raise ArchiveError(f"{archive}: more than {MAX_MEMBERS} members")
                name = member_name(archive, member)
                try:
                    folders |= _clashes(name, seen, folders)
                except ArchiveError as error:
                    raise ArchiveError(f"{archive}: {error}") from None
                if member.size > MAX_MEMBER_BYTES:
                    raise ArchiveError(f"{archive}: member {name!r} is over {MAX_MEMBER_BYTES} B")
                total += member.size
                if total > MAX_TOTAL_BYTES:
                    raise ArchiveError(f"{archive}: unpacks to over {MAX_TOTAL_BYTES} bytes")
                source = tar.extractfile(member)
                if source is None:
                    raise ArchiveError(f"{archive}: member {name!r} has no content")
                target = destination / name
                target.parent.mkdir(parents=True, exist_ok=True)
                digest, size = hashlib.sha256(), 0
                with open(target, "xb") as sink:
                    while chunk := source.read(CHUNK):
                        size += len(chunk)
                        if size > member.size:
                            raise ArchiveError(f"{archive}: member {name!r} longer than declared")
                        digest.update(chunk)
                        sink.write(chunk)
                seen[name] = (digest.hexdigest(), size)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as error:
        raise ArchiveError(f"{archive}: not a whole archive ({error}); fetch it again") from None
    return seen
