"""A local image as the one file another engine reads: apptainer's ``.sif`` (``apptainer build
x.sif docker-daemon://<tag>``, or from a ``podman save`` archive), enroot's squashfs for pyxis
(``enroot import dockerd://<tag>``, or ``podman://<tag>`` from podman's store). Made once per
image (the file is named after the tag, which carries the inputs' hash) into a folder the nodes
share, written beside and moved into place whole.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


class ExportError(Exception):
    """The file could not be made (the tool missing or failing), with its last words."""


def image_file(tag: str, cache: Path, suffix: str) -> Path:
    """Where the file of ``tag`` lives in ``cache`` (no ',', ':' or '/' in its name)."""
    return cache / f"{tag.rsplit('/', 1)[-1].replace(':', '-')}{suffix}"


def make_file(
    target: Path,
    argv: Callable[[Path], list[str]],
    timeout: float = 3600.0,
    env: dict[str, str] | None = None,
) -> bool:
    """``target`` made by the command ``argv(partial)`` (in ``env``, else this process's
    environment) unless it is there; True if made."""
    if target.is_file():
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    try:
        done = subprocess.run(
            argv(partial), capture_output=True, text=True, timeout=timeout, env=env
        )
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
def enroot_environment(engine: str) -> Iterator[dict[str, str] | None]:
    """The environment ``enroot import <engine>://`` runs in: None (this process's) but for
    podman, where ``docker`` is a two-line script running podman from ``/``, first on PATH.

    enroot (3.5.0 to 4.1.2) makes its export container with the engine the URI names but, in
    its exit trap, removes it with ``docker rm`` whatever the engine, after deleting the folder
    it runs in. Without docker that fails, enroot exits 1 after writing the squashfs and podman
    keeps a container ``enroot.<random>`` per import; with this ``docker`` the trap's removal is
    podman's, from a folder that exists (rootless podman stops at once in a deleted one)."""
    podman = shutil.which("podman")
    if engine != "podman" or podman is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="dlperf-enroot-") as folder:
        script = Path(folder) / "docker"
        script.write_text(f'#!/bin/sh\ncd / && exec {shlex.quote(podman)} "$@"\n')
        script.chmod(0o755)
        yield {**os.environ, "PATH": f"{folder}:{os.environ.get('PATH', '')}"}
