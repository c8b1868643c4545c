"""``dlperf-dataset.json``: what a prepared data set folder holds, by SHA-256.

    {"schema": 1, "format": "tokens",
     "files": {"tokens.bin": {"bytes": 1234, "sha256": "..."}},
     "source": {...what it was made from...}}

The SHA-256 of the manifest's own bytes names the data set (a case's provenance can cite it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from driver.files import sha256_bytes, sha256_file, write_bytes

MANIFEST = "dlperf-dataset.json"
SCHEMA = 1


def write_manifest(
    folder: Path | str, fmt: str, files: Iterable[str], source: Mapping[str, Any]
) -> str:
    """Write ``folder/dlperf-dataset.json`` for ``files`` (paths relative to ``folder``) and
    return the SHA-256 of the manifest's bytes."""
    root = Path(folder)
    entries = {}
    for relpath in sorted(files):
        path = root / relpath
        entries[relpath] = {"bytes": path.stat().st_size, "sha256": sha256_file(path)}
    document = {"schema": SCHEMA, "format": fmt, "files": entries, "source": dict(source)}
    data = (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8")
    write_bytes(root / MANIFEST, data)
    return sha256_bytes(data)
