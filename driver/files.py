"""Every file the kit writes goes through here: atomically, and with a clear error; and the
one SHA-256 of bytes or of a file (seals, records, archives, manifests, image inputs).

A write lands in a temporary file in the target's own folder and is renamed over the target
(``os.replace``: atomic on POSIX within one file system), so a reader, a crash or a full disk
never leaves half a file under the real name. Any ``OSError`` (read-only or full file system,
a parent that is a file, a dangling symlink, no permission) becomes :class:`KitWriteError`,
whose message names the path, the cause and what to do, and which the CLI prints as one line.

Temporary names start with ``.dlperf-tmp-`` so that a write killed half-way (SIGKILL, power
loss) leaves something a later run recognises (a release removes its dead predecessors' work
folders with :func:`remove_tree`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

TEMP_PREFIX = ".dlperf-tmp-"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """The file's SHA-256, read in 1 MiB chunks (an archive need not fit in memory)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


_FIXES = {
    errno.EROFS: "the file system is read-only: write to another folder (e.g. --out, --results)",
    errno.ENOSPC: "no space left on the device: free some space or write elsewhere",
    errno.EDQUOT: "the disk quota is exceeded: free some space or write elsewhere",
    errno.EACCES: "no permission: write to a folder you own",
    errno.EPERM: "not permitted: write to a folder you own",
    errno.ENOTDIR: "a part of the path is a file, not a folder: choose another path",
    errno.EISDIR: "the path is a folder, not a file: choose another path",
    errno.EEXIST: "the path exists and is not a folder: choose another path",
    errno.ENOENT: "a part of the path does not exist (or is a dangling symlink)",
    errno.ELOOP: "the path loops through symlinks",
}


class KitWriteError(OSError):
    """A file or folder the kit could not write; the message says which, why and the fix."""

    def __init__(self, path: Path | str, error: OSError | str) -> None:
        if isinstance(error, OSError):
            cause = error.strerror or str(error)
            fix = _FIXES.get(error.errno or 0, "")
        else:
            cause, fix = error, ""
        message = f"{path}: cannot be written ({cause})" + (f"; {fix}" if fix else "")
        super().__init__(message)
        self.path = Path(path)
        self.message = message

    def __str__(self) -> str:
        return self.message


def ensure_dir(path: Path) -> Path:
    """``path`` as an existing folder (made with its parents); a file or a dangling symlink in
    the way is a KitWriteError, not a traceback."""
    path = Path(path)
    if path.is_symlink() and not path.exists():
        raise KitWriteError(path, "a dangling symlink: remove it or point it at a folder")
    if path.exists() and not path.is_dir():
        raise KitWriteError(path, "it is a file, not a folder: choose another path")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise KitWriteError(path, error) from None
    return path


@contextlib.contextmanager
def atomic_file(path: Path, *, mode: int | None = None) -> Iterator[BinaryIO]:
    """A binary file that appears at ``path`` whole or not at all: written into a temporary
    file in the same folder, synced and renamed over ``path`` when the block ends; removed
    where the block raises (a full disk names ``path``, as a KitWriteError)."""
    path = Path(path)
    ensure_dir(path.parent)
    if path.is_dir():
        raise KitWriteError(path, "it is a folder, not a file: choose another path")
    tmp_name = ""
    try:
        handle, tmp_name = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=path.parent)
        with os.fdopen(handle, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp_name, mode if mode is not None else 0o644)
        os.replace(tmp_name, path)
        tmp_name = ""
    except KitWriteError:
        raise  # an inner file's, already named (one atomic_file inside another)
    except OSError as error:
        raise KitWriteError(path, error) from None
    finally:
        if tmp_name:
            Path(tmp_name).unlink(missing_ok=True)


def write_bytes(path: Path, data: bytes, *, mode: int | None = None) -> Path:
    """Write ``data`` to ``path`` atomically (temporary file in the same folder, then rename)."""
    with atomic_file(path, mode=mode) as out:
        out.write(data)
    return Path(path)


def write_text(path: Path, text: str, *, mode: int | None = None) -> Path:
    return write_bytes(path, text.encode("utf-8"), mode=mode)


def write_json(path: Path, data: Any) -> Path:
    """JSON, indented with sorted keys and a final newline, written atomically."""
    return write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def remove_tree(folder: Path) -> None:
    """Remove a folder the kit wrote, read-only files included (a half-released version's are
    0444: deleting them needs only their folders writable). Errors are ignored: cleaning only."""
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            try:
                path.chmod(0o755)
            except OSError:
                pass
    shutil.rmtree(folder, ignore_errors=True)
