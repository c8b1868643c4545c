"""The GPU check's archive: the release archive of its work folder, sealed as a session.

``gpu-check.tar.gz`` is what ``dlperf release`` writes for a session
(``driver.release.archive.write_archive``: members ``gpu-check/<path>``, sorted, times and
owners zeroed), and its manifest is a session seal (``gpu-check/session-manifest.json``,
``driver.model.seal``): the SHA-256 and size of every file of the work folder (the node's facts,
the stage logs, the summary, and under ``results/`` the sessions the stages ran, each with its
own seal). Back home the archive is streamed onto the disk through the release's bounded
extraction (``extract_archive``) and every file held to the seal.

An archive of the check's first format (members at the top with a ``MANIFEST.json``) is refused
with a message that says so: no GPU run ever wrote one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from driver.files import write_bytes
from driver.model.seal import SEAL, FolderFiles, SealError, load_seal, manifest_of, seal_text
from driver.release.archive import ArchiveError, extract_archive, write_archive
from driver.runtimes.base import name_slug

ARCHIVE = "gpu-check.tar.gz"
SESSION = "gpu-check"  # the work folder's name, the archive's top folder and the run's session
FIRST_FORMAT_MANIFEST = "MANIFEST.json"  # the check's own manifest before it was a seal
MAX_SUMMARY_BYTES = 16 << 20


class UnpackError(Exception):
    pass


def write_sealed_archive(work: Path, path: Path) -> None:
    """Seal ``work`` (its seal written into it) and write it as a release archive to ``path``."""
    files = FolderFiles(work)
    write_bytes(work / SEAL, seal_text(manifest_of(SESSION, files)))
    write_archive(SESSION, {**files.paths, SEAL: work / SEAL}, path)


def extract_sealed(archive: Path, destination: Path) -> Path:
    """The work folder of ``archive``, extracted into ``destination`` (an empty folder) and
    every file held to its seal (nothing missing or extra, each SHA-256 and size); the seal
    itself is not kept. Raises UnpackError; the caller removes ``destination`` then."""
    try:
        members = extract_archive(archive, destination)
    except ArchiveError as error:
        raise UnpackError(str(error)) from None
    if FIRST_FORMAT_MANIFEST in members:
        raise UnpackError(
            f"{archive}: an archive of the GPU check's first format ({FIRST_FORMAT_MANIFEST}), "
            "which this kit no longer reads; unpack it with the kit's commit that wrote it, or "
            "run the check again"
        )
    outside = sorted(name for name in members if not name.startswith(f"{SESSION}/"))
    if outside:
        raise UnpackError(
            f"{archive}: members outside {SESSION}/ ({', '.join(outside[:3])}); not an archive "
            "of the GPU check"
        )
    seal_member = f"{SESSION}/{SEAL}"
    if seal_member not in members:
        raise UnpackError(f"{archive}: no {seal_member}; not made by the GPU check")
    try:
        seal = load_seal((destination / seal_member).read_bytes(), f"{archive}: {seal_member}")
    except SealError as error:
        raise UnpackError(f"{error}; use the archive the check wrote") from None
    held = {name.removeprefix(f"{SESSION}/"): digest for name, digest in members.items()}
    held.pop(SEAL)
    if set(seal.files) != set(held):
        missing, extra = sorted(set(seal.files) - set(held)), sorted(set(held) - set(seal.files))
        raise UnpackError(
            f"{archive}: files differ from its seal (missing {missing}, extra {extra})"
        )
    for name, (sha256, size) in held.items():
        if sha256 != seal.files[name].sha256 or size != seal.files[name].bytes:
            raise UnpackError(f"{archive}: {name} does not match its SHA-256 in the seal")
    (destination / seal_member).unlink()
    return destination / SESSION


def read_summary(archive: Path, path: Path) -> dict[str, Any]:
    """The archive's summary.json as an object ({} when the archive has none)."""
    if not path.exists():
        return {}
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_SUMMARY_BYTES + 1)
        if len(data) > MAX_SUMMARY_BYTES:
            raise UnpackError(f"{path}: larger than {MAX_SUMMARY_BYTES} bytes")
        summary = json.loads(data)
    except (ValueError, UnicodeDecodeError, OSError) as error:
        raise UnpackError(f"{archive}: summary.json is not JSON ({error})") from None
    if not isinstance(summary, dict) or not isinstance(summary.get("stages", []), list):
        raise UnpackError(
            f"{archive}: summary.json is not the check's summary (an object with a stages list)"
        )
    return summary


def unpack(archive: Path, results: Path) -> Path:
    """Check every member as it streams and every file against the seal
    (:func:`extract_sealed`), then move the work folder into ``results/`` under a name of its
    own (``gpu-check-<host>-<date>``, its session as ``session/``); nothing is left behind if
    any check fails."""
    if results.exists() and not results.is_dir():
        raise UnpackError(f"--results {results}: a file, not a folder; give a folder")
    if not archive.is_file():
        raise UnpackError(f"{archive}: no such archive file")
    made_results = not results.exists()
    results.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".dlperf-tmp-unpack-", dir=results))
    try:
        work = extract_sealed(archive, staging)
        summary = read_summary(archive, work / "summary.json")
        host = summary.get("host") if isinstance(summary.get("host"), str) else "host"
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(archive.stat().st_mtime))
        target = results / f"gpu-check-{name_slug(host or 'host', 40)}-{stamp}"
        if target.exists():
            raise UnpackError(
                f"{target} exists already; remove it or unpack into another --results"
            )
        session = work / "results" / SESSION
        if session.is_dir():
            os.replace(session, work / "session")
        os.replace(work, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        if made_results:  # a results folder made for nothing goes again
            with contextlib.suppress(OSError):
                results.rmdir()
    return target
