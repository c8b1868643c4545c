"""A prepared data set's manifest, ``dlperf-dataset.json``: its format, every file's size and
SHA-256, and what it was made from. The SHA-256 of the manifest's bytes is the set's identity:
a run whose ``data_dir`` holds a manifest records it (``dataset_sha256``), so two runs on
different copies of "ImageNet" are told apart."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path, PurePosixPath
from typing import Any

from driver.files import sha256_bytes, sha256_file, write_bytes
from driver.schema import ConfigError, parse_json

MANIFEST = "dlperf-dataset.json"
SCHEMA = 1
CHUNK = 1 << 20
MAX_MANIFEST_BYTES = 256 << 20  # ImageNet's 1.3 M files at ~120 bytes an entry, with room
JOB = ".dlperf-job.json"  # what a folder's files are being made from, noted before making any


def manifest_bytes(fmt: str, files: dict[str, dict[str, Any]], source: dict[str, Any]) -> bytes:
    """The manifest as written: sorted keys, so the same set gives the same bytes (and hash)."""
    document = {"schema": SCHEMA, "format": fmt, "files": files, "source": source}
    return (json.dumps(document, sort_keys=True, indent=1) + "\n").encode()


def write_manifest(
    folder: Path, fmt: str, files: list[Path] | list[str], source: dict[str, Any]
) -> str:
    """Write ``folder/dlperf-dataset.json`` atomically over ``files`` (paths inside ``folder``
    as the caller holds them: absolute or relative to the working folder, as ``folder`` is) and
    return the SHA-256 of its bytes: the set's identity."""
    folder = Path(folder)
    entries: dict[str, dict[str, Any]] = {}
    for path in sorted(map(Path, files)):
        try:
            relative = Path(path).resolve().relative_to(folder.resolve()).as_posix()
        except ValueError:
            raise ConfigError(
                path, "(file)", f"leads out of {folder} (a symlink?); give a folder of files"
            ) from None
        if not is_member_name(relative):  # what read_manifest would refuse, refused now
            raise ConfigError(
                folder,
                repr(relative),
                "a file name with a backslash or a control character; rename the source file",
            )
        entries[relative] = {"bytes": Path(path).stat().st_size, "sha256": sha256_file(path)}
    data = manifest_bytes(fmt, entries, source)
    write_bytes(folder / MANIFEST, data)
    return sha256_bytes(data)


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of a prepared folder, checked: a ConfigError naming the file and the field."""
    path = Path(folder) / MANIFEST
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ConfigError(
            path, "(file)", "does not exist; prepare the folder with `dlperf data`"
        ) from None
    if not stat.S_ISREG(mode):  # a FIFO would block the read below
        raise ConfigError(path, "(file)", "is not a regular file; re-run `dlperf data`")
    data = path.read_bytes()
    if len(data) > MAX_MANIFEST_BYTES:
        raise ConfigError(path, "(file)", f"is over {MAX_MANIFEST_BYTES} bytes; re-run it")
    document = parse_json(data.decode("utf-8", errors="replace"), path)
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise ConfigError(path, "schema", f"is not {SCHEMA}; re-run `dlperf data` with this kit")
    if not isinstance(document.get("format"), str):
        raise ConfigError(path, "format", "is missing; re-run `dlperf data`")
    files = document.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("sha256"), str) and isinstance(v.get("bytes"), int)
        for v in files.values()
    ):
        raise ConfigError(path, "files", "is not {path: {bytes, sha256}}; re-run `dlperf data`")
    for name in files:
        if not is_member_name(name):
            raise ConfigError(
                path,
                f"files.{name!r}",
                "is not a relative path inside the folder (no '..', no absolute path); "
                "re-run `dlperf data` to make the manifest",
            )
    if not isinstance(document.get("source"), dict):
        raise ConfigError(path, "source", "is missing; re-run `dlperf data`")
    return document


def dataset_sha256(folder: str | Path | None) -> str | None:
    """The identity of the prepared set in ``folder`` (None: no folder, or no manifest there,
    as for data the kit did not prepare). Read on the host that runs dlperf: a cluster's data
    folder is seen there through the shared file system."""
    if not folder:
        return None
    path = Path(folder) / MANIFEST
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return None
        return sha256_file(path)
    except OSError:
        return None


def is_member_name(name: str) -> bool:
    """A file name a manifest may hold: a plain relative POSIX path inside its folder (no
    ``..``, ``.``, empty part or absolute path; no backslash, control character)."""
    if not name or name.startswith("/") or any(c == "\\" or ord(c) < 32 for c in name):
        return False
    parts = name.split("/")
    return all(part not in ("", ".", "..") for part in parts) and (
        PurePosixPath(name).as_posix() == name
    )


def resolved_inside(path: Path, root: Path, missing: str, outside: str) -> Path:
    """``path`` with its symlinks followed, which must stay inside the tree ``root``: a link
    leading out of it is a ConfigError saying ``outside`` (the fix), one leading nowhere or in
    a loop ``missing``; never followed or read. The one check every data command makes of a
    file name it reads (a source tree's, a manifest's)."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise ConfigError(path, "(file)", missing) from None
    if not real.is_relative_to(Path(root).resolve()):
        why = f"is a symlink leading out of {root} (to {real}); {outside}"
        raise ConfigError(path, "(file)", why)
    return real


def member(folder: Path, name: str, manifest: Path | None = None) -> Path:
    """The path of the manifest entry ``name`` in ``folder``, checked: inside the folder once
    symlinks are followed, and a regular file (a FIFO would block a read). A ConfigError names
    the entry otherwise."""
    folder = Path(folder)
    where = manifest or folder / MANIFEST
    if not is_member_name(name):
        raise ConfigError(where, f"files.{name!r}", "is not a relative path inside the folder")
    path = folder / name
    real = resolved_inside(
        path,
        folder,
        missing="is missing (or a dangling symlink); re-run `dlperf data`",
        outside="re-run `dlperf data`",
    )
    if not stat.S_ISREG(real.stat().st_mode):
        raise ConfigError(path, "(file)", "is not a regular file (a FIFO?); re-run `dlperf data`")
    return path


def verify_files(folder: Path, manifest: dict[str, Any]) -> list[Path]:
    """Every file ``manifest`` (the folder's, read) lists, checked against its size and
    SHA-256: a set made from this one must not be made from a changed copy. The paths."""
    paths = []
    for name, entry in sorted(manifest["files"].items()):
        path = member(folder, name)
        if path.stat().st_size != entry["bytes"] or sha256_file(path) != entry["sha256"]:
            raise ConfigError(
                path,
                "sha256",
                f"differs from {MANIFEST}'s: the file changed since `dlperf data` made it; "
                "re-make the folder",
            )
        paths.append(path)
    return paths


def claim(out: Path, fmt: str, job: dict[str, Any], note: str = JOB) -> None:
    """Note in ``out`` what its files are made from (``fmt`` and ``job``) before making any,
    so that a folder holding another set is refused, never mixed: a note of another job, a
    manifest of another format or source, or (with neither) any file at all is a ConfigError
    naming the folder. A folder of the same job is resumed."""
    out = Path(out)
    text = json.dumps({"format": fmt, **job}, sort_keys=True, indent=1) + "\n"
    path = out / note
    fix = "give another (new or empty) output folder"
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise ConfigError(path, "(file)", f"is not a regular file; {fix}")
    if path.is_file():
        held = path.read_text(encoding="utf-8", errors="replace")
        if held != text:
            try:
                other = str(json.loads(held).get("format"))
            except (ValueError, AttributeError):
                other = "another"
            what = "source or parameters" if other == fmt else f"format ({other})"
            raise ConfigError(
                path,
                "(file)",
                f"says the folder's files are being made of another {what} than this "
                f"{fmt} run's; {fix}, or empty this one",
            )
    elif (out / MANIFEST).exists() or (out / MANIFEST).is_symlink():
        held = read_manifest(out)
        if held["format"] != fmt or held["source"] != job.get("source", held["source"]):
            other = "another source" if held["format"] == fmt else f"a {held['format']} set"
            raise ConfigError(
                out / MANIFEST, "format", f"says the folder holds {other}, not this run's; {fix}"
            )
    else:
        names = sorted(n for n in os.listdir(out) if not n.startswith(".dlperf-tmp-"))
        if names:
            raise ConfigError(
                out,
                "(folder)",
                f"holds files no `dlperf data` run made ({names[0]!r} ...); {fix}",
            )
    write_bytes(path, text.encode())
