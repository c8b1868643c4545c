"""A local image as the one file another engine reads: apptainer's ``.sif`` (``apptainer build
x.sif docker-daemon://<tag>``, or from a ``podman save`` archive), enroot's squashfs for pyxis
(``enroot import dockerd://<tag>``, or ``podman://<tag>`` from podman's store). Made once per
image (the file is named after the tag, which carries the inputs' hash) into a folder the nodes
share, written beside and moved into place whole.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


class ExportError(Exception):
    """The file could not be made (the tool missing or failing), with its last words."""


def image_file(tag: str, cache: Path, suffix: str) -> Path:
    """Where the file of ``tag`` lives in ``cache`` (no ',', ':' or '/' in its name)."""
    return cache / f"{tag.rsplit('/', 1)[-1].replace(':', '-')}{suffix}"


def make_file(target: Path, argv: Callable[[Path], list[str]], timeout: float = 3600.0) -> bool:
    """``target`` made by the command ``argv(partial)`` unless it is there; True if made."""
    if target.is_file():
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    try:
        done = subprocess.run(argv(partial), capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            raise ExportError(f"exit {done.returncode}: {said[-1] if said else 'no message'}")
        os.replace(partial, target)
    except (OSError, subprocess.SubprocessError) as error:
        raise ExportError(str(error)) from None
    finally:
        partial.unlink(missing_ok=True)
    return True


@contextmanager
def enroot_leftovers_removed(engine: str, tag: str) -> Iterator[None]:
    """Around ``enroot import podman://<tag>``: remove the container enroot made to export the
    image. enroot (3.5.0 to 4.1.2) makes it with the engine it was asked for but removes it with
    ``docker rm`` whatever the engine, so podman's would stay; it is named ``enroot.<random>``
    (enroot's temporary folder) and made from ``tag``, and only one that appeared during the
    import is removed."""
    if engine != "podman" or shutil.which("podman") is None:
        yield
        return
    before = _enroot_containers(tag)
    try:
        yield
    finally:
        for name in sorted(_enroot_containers(tag) - before):
            subprocess.run(["podman", "rm", "--force", name], capture_output=True, timeout=120)


def _enroot_containers(tag: str) -> set[str]:
    listed = subprocess.run(
        ["podman", "ps", "--all", "--filter", f"ancestor={tag}", "--format", "{{.Names}}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return {name for name in listed.stdout.split() if name.startswith("enroot.")}
