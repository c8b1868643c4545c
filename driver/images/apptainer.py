"""Apptainer (Singularity) images: a local docker image as the ``.sif`` file apptainer runs.

``apptainer build <file>.sif docker-daemon://<tag>`` reads the image from this host's docker
engine; the file is made once per image (its name is the tag's, which carries the inputs'
hash) into a folder the nodes share, written beside and moved into place whole.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


class ApptainerError(Exception):
    """The image could not be made (apptainer missing or failing), with its last words."""


def sif_path(tag: str, cache: Path) -> Path:
    """Where the ``.sif`` of ``tag`` lives in ``cache`` (no ':' or '/' in the name)."""
    return cache / f"{tag.rsplit('/', 1)[-1].replace(':', '-')}.sif"


def build_argv(tag: str, target: Path) -> list[str]:
    return ["apptainer", "build", "--force", str(target), f"docker-daemon://{tag}"]


def build_sif(tag: str, cache: Path, timeout: float = 3600.0) -> Path:
    """The ``.sif`` of the local image ``tag`` in ``cache``, built unless it is there."""
    target = sif_path(tag, cache)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    try:
        done = subprocess.run(
            build_argv(tag, partial), capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            raise ApptainerError(f"exit {done.returncode}: {said[-1] if said else 'no message'}")
        os.replace(partial, target)
    except (OSError, subprocess.SubprocessError) as error:
        raise ApptainerError(f"apptainer could not build {tag}: {error}") from None
    finally:
        partial.unlink(missing_ok=True)
    return target
