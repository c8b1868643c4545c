"""Real file-system faults for tests: a small tmpfs that fills up, a read-only mount.

Both are real mounts (root only; CI runs as root), made under the test's own tmp_path and
unmounted when the test ends, so the kit meets ENOSPC and EROFS from the kernel itself.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import require_real


def _mount(args: list[str]) -> None:
    if os.geteuid() != 0:
        require_real("mounting a tmpfs needs root")
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        require_real(f"mount {' '.join(args)} failed: {done.stderr.strip()}")


@contextmanager
def small_tmpfs(where: Path, size: str = "256k") -> Iterator[Path]:
    """A tmpfs of ``size`` at ``where`` (made): writes past its size fail with ENOSPC."""
    where.mkdir(parents=True, exist_ok=True)
    _mount(["-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)])
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(folder: Path) -> None:
    """Fill the file system of ``folder`` to the last byte."""
    with (folder / "filler").open("wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError:
            pass


@contextmanager
def read_only(where: Path) -> Iterator[Path]:
    """``where`` (an existing folder) bind-mounted read-only over itself."""
    _mount(["--bind", str(where), str(where)])
    try:
        _mount(["-o", "remount,bind,ro", str(where)])
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
