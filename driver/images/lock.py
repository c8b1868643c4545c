"""``images.lock``: one file pinning every base image (tag plus digest) that builds start FROM.

    schema: 1
    pins:
      nvcr.io/nvidia/pytorch:25.04-py3:
        digest: sha256:d1ea...          # or "unresolved": builds of images FROM it refuse
        source: registry                # resolved by `dlperf images lock`
      dlperf/debian:bookworm-3f2a...:   # the Debian base made here (dlperf images base)
        digest: sha256:...              # its image ID (docker import; no registry involved)
        source: debootstrap

A digest is never guessed: what cannot be resolved is written ``unresolved`` and every image
built on it is refused with the command that resolves it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import Field

from driver.files import write_text
from driver.frameworks.base import REPO_ROOT
from driver.schema import ConfigError, Line, StrictModel, load_document, one_of, text, validate

REPO_LOCK = REPO_ROOT / "images.lock"
UNRESOLVED = "unresolved"
SCHEMA = 1
SOURCES = ("registry", "debootstrap")
DIGEST = re.compile(r"\Asha256:[0-9a-f]{64}\Z")  # Python's \Z: the very end (not "$")

HEADER = """\
# images.lock: the pinned FROM of every image dlperf builds (tag plus digest).
# `dlperf images build` / `make images` refuse an image whose base is missing here, unresolved,
# or not what is pinned. `dlperf images lock` re-resolves registry digests (on a machine that
# can reach the registry); `dlperf images base` / `make base-image` pins the Debian base it
# makes with debootstrap. Edit by hand only to add a tag with digest "unresolved".
"""


class LockError(ValueError):
    """A bad lock file, or an image the lock does not allow to build."""


class LockFileError(ConfigError, LockError):
    """A bad ``images.lock``: ``<file>: <field>: <what is allowed>``."""


class Pin(StrictModel):
    """One pin (the lock's key is its repository:tag): the digest and where it comes from, plus
    the notes the kit writes (where and when it was resolved or made, who uses it)."""

    digest: text(rf"{DIGEST.pattern}|{UNRESOLVED}", f"sha256:<64 hex> or {UNRESOLVED!r}")
    source: Annotated[str, one_of(*SOURCES)]  # registry | debootstrap
    resolved_by: Line | None = None
    resolved_at: Line | None = None
    recipe: Line | None = None
    made: Line | None = None
    debootstrap: Line | None = None
    used_by: Line | None = None
    note: Line | None = None
    error: Line | None = None

    @property
    def resolved(self) -> bool:
        return self.digest != UNRESOLVED


ImageRef = text(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,511}", "an image reference repository:tag")


class LockFile(StrictModel):
    schema_: Annotated[Any, one_of(SCHEMA)] = Field(alias="schema")
    pins: dict[ImageRef, Pin] = {}


@dataclass
class Lock:
    path: Path
    pins: dict[str, Pin]  # repository:tag -> its pin

    def get(self, ref: str) -> Pin | None:
        return self.pins.get(ref)

    def pinned_ref(self, ref: str) -> str:
        """What a FROM uses: ``tag@digest`` for a registry image, the ID for a local one."""
        pin = self.pins.get(ref)
        if pin is None or not pin.resolved:
            raise LockError(f"{ref}: digest unresolved")
        if pin.source == "debootstrap":
            return pin.digest  # no registry digest exists; the content-addressed ID is the pin
        return f"{ref}@{pin.digest}"

    def save(self) -> None:
        pins = {ref: self.pins[ref].model_dump(exclude_none=True) for ref in sorted(self.pins)}
        text = HEADER + yaml.safe_dump(
            {"schema": SCHEMA, "pins": pins}, sort_keys=False, default_flow_style=False
        )
        write_text(self.path, text)


def load_lock(path: Path | str | None = None) -> Lock:
    """The one reader of ``images.lock`` (builds, the lock command, releases and audits)."""
    path = Path(path or os.environ.get("DLPERF_IMAGES_LOCK", REPO_LOCK))
    if not path.exists():
        raise LockFileError(path, "(file)", "does not exist; `dlperf images lock` creates it")
    try:
        data = validate(LockFile, load_document(path), path)
    except ConfigError as error:
        raise LockFileError(error.path, error.field_path, error.message) from None
    return Lock(path, dict(data.pins))


def pinned_digests(path: Path | str) -> dict[str, str]:
    """repository:tag -> digest of every resolved pin."""
    return {ref: pin.digest for ref, pin in load_lock(path).pins.items() if pin.resolved}
