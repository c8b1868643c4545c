"""A local docker image as the one file another engine reads: apptainer's ``.sif``
(``apptainer build x.sif docker-daemon://<tag>``), enroot's squashfs for pyxis (``enroot
import dockerd://<tag>``). Made once per image (the file is named after the tag, which carries
the inputs' hash) into a folder the nodes share, written beside and moved into place whole.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
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
