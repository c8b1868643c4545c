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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from driver.frameworks.base import REPO_ROOT

REPO_LOCK = REPO_ROOT / "images.lock"
UNRESOLVED = "unresolved"
SCHEMA = 1
SOURCES = ("registry", "debootstrap")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")

HEADER = """\
# images.lock: the pinned FROM of every image dlperf builds (tag plus digest).
# `dlperf images build` / `make images` refuse an image whose base is missing here, unresolved,
# or not what is pinned. `dlperf images lock` re-resolves registry digests (on a machine that
# can reach the registry); `dlperf images base` / `make base-image` pins the Debian base it
# makes with debootstrap. Edit by hand only to add a tag with digest "unresolved".
"""


class LockError(ValueError):
    """A bad lock file, or an image the lock does not allow to build."""


def default_lock_path() -> Path:
    return Path(os.environ.get("DLPERF_IMAGES_LOCK", REPO_LOCK))


@dataclass
class Pin:
    ref: str  # repository:tag
    digest: str  # sha256:<hex> or "unresolved"
    source: str  # registry | debootstrap
    extra: dict[str, Any] = field(default_factory=dict)  # notes: where it was resolved, when

    @property
    def resolved(self) -> bool:
        return self.digest != UNRESOLVED

    @property
    def pinned_ref(self) -> str:
        """What a FROM uses: ``tag@digest`` for a registry image, the ID for a local one."""
        if not self.resolved:
            raise LockError(f"{self.ref}: digest unresolved")
        if self.source == "debootstrap":
            return self.digest  # no registry digest exists; the content-addressed ID is the pin
        return f"{self.ref}@{self.digest}"

    def to_dict(self) -> dict[str, Any]:
        return {"digest": self.digest, "source": self.source, **self.extra}


@dataclass
class Lock:
    path: Path
    pins: dict[str, Pin]

    def get(self, ref: str) -> Pin | None:
        return self.pins.get(ref)

    def set(self, pin: Pin) -> None:
        self.pins[pin.ref] = pin

    def save(self) -> None:
        data = {
            "schema": SCHEMA,
            "pins": {ref: self.pins[ref].to_dict() for ref in sorted(self.pins)},
        }
        text = HEADER + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.path)


def load_lock(path: Path | str | None = None) -> Lock:
    path = Path(path) if path else default_lock_path()
    if not path.exists():
        raise LockError(f"{path}: does not exist; `dlperf images lock` creates it")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise LockError(f"{path}: is not valid YAML: {error}") from None
    if not isinstance(data, dict) or set(data) - {"schema", "pins"}:
        raise LockError(f"{path}: must be a mapping with keys schema, pins")
    if data.get("schema") != SCHEMA:
        raise LockError(f"{path}: schema: {data.get('schema')!r} is not supported (want {SCHEMA})")
    pins: dict[str, Pin] = {}
    for ref, entry in (data.get("pins") or {}).items():
        where = f"{path}: pins.{ref}"
        if not isinstance(entry, dict):
            raise LockError(f"{where}: must be a mapping with digest and source")
        digest, source = entry.get("digest"), entry.get("source")
        if digest != UNRESOLVED and not (isinstance(digest, str) and DIGEST.match(digest)):
            raise LockError(f"{where}.digest: must be sha256:<64 hex> or {UNRESOLVED!r}")
        if source not in SOURCES:
            raise LockError(f"{where}.source: {source!r}; allowed values: {', '.join(SOURCES)}")
        extra = {k: v for k, v in entry.items() if k not in ("digest", "source")}
        pins[str(ref)] = Pin(str(ref), digest, source, extra)
    return Lock(path, pins)
