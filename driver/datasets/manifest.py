"""A prepared data set's manifest, ``dlperf-dataset.json``: its format, every file's size and
SHA-256, and what it was made from. The SHA-256 of the manifest's bytes is the set's identity:
a run whose ``data_dir`` holds a manifest records it (``dataset_sha256``), so two runs on
different copies of "ImageNet" are told apart."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from driver.files import sha256_bytes, sha256_file, write_bytes
from driver.schema import ConfigError, parse_json

MANIFEST = "dlperf-dataset.json"
SCHEMA = 1
CHUNK = 1 << 20
MAX_MANIFEST_BYTES = 256 << 20  # ImageNet's 1.3 M files at ~120 bytes an entry, with room


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
        relative = Path(path).resolve().relative_to(folder.resolve()).as_posix()
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
