"""The ImageNet JPEG tree every ImageNet format is made from, and what the preparers share.

The input is ImageNet as downloaded and unpacked the usual way (the layout torchvision's
``ImageFolder`` and pytorch/examples read): ``SRC/train/<wnid>/*.JPEG`` and
``SRC/val/<wnid>/*.JPEG``. Labels are the sorted class folder names of ``train`` (0-based; a
format whose readers count from 1, TFRecord, stores label + 1).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from driver.datasets.manifest import claim, is_member_name, resolved_inside, write_manifest
from driver.files import KitWriteError, ensure_dir, write_bytes
from driver.schema import ConfigError

SPLITS = ("train", "val")
IMAGE_SUFFIXES = (".jpeg", ".jpg")


@dataclass(frozen=True)
class Image:
    split: str
    wnid: str
    path: Path  # in the source tree
    label: int  # 0-based: the index of wnid among the sorted train classes

    @property
    def relative(self) -> str:
        return f"{self.split}/{self.wnid}/{self.path.name}"


def scan(source: Path, splits: tuple[str, ...] = SPLITS) -> tuple[list[str], list[Image]]:
    """The classes (sorted wnids of ``train``) and every image of the splits asked for, in a
    stable order. A missing split, an empty class list or a val class unknown to train is a
    ConfigError naming the folder and the fix."""
    source = Path(source)
    if not source.is_dir():
        raise ConfigError(source, "(folder)", "is not a folder; give the unpacked ImageNet tree")
    root = source.resolve()
    train = source / "train"
    if not train.is_dir():
        raise ConfigError(train, "(folder)", "is missing: the tree holds train/<wnid>/*.JPEG")
    inside(train, root)
    classes = sorted(p.name for p in train.iterdir() if p.is_dir())
    if not classes:
        raise ConfigError(train, "(folder)", "holds no class folders (train/<wnid>/*.JPEG)")
    index = {wnid: i for i, wnid in enumerate(classes)}
    images: list[Image] = []
    for split in splits:
        folder = source / split
        if not folder.is_dir():
            raise ConfigError(
                folder,
                "(folder)",
                f"is missing: the tree holds {split}/<wnid>/*.JPEG (sort the validation images "
                "into class folders first, as pytorch/examples asks)",
            )
        inside(folder, root)
        for class_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
            if class_dir.name not in index:
                raise ConfigError(class_dir, "(folder)", "is a class that train/ does not have")
            inside(class_dir, root)
            for path in sorted(class_dir.iterdir()):
                if path.suffix.lower() in IMAGE_SUFFIXES:
                    if not is_member_name(path.name):  # a manifest could not name it
                        raise ConfigError(
                            class_dir,
                            repr(path.name),
                            "a file name with a control character or a backslash; rename it",
                        )
                    real = inside(path, root)
                    if not stat.S_ISREG(real.stat().st_mode):
                        if real.is_dir():
                            continue  # a folder named like an image: not an image
                        raise ConfigError(
                            path, "(file)", "is not a regular file (a FIFO, a device); remove it"
                        )
                    images.append(Image(split, class_dir.name, path, index[class_dir.name]))
    if not images:
        raise ConfigError(source, "(folder)", "holds no .JPEG images in the splits asked for")
    return classes, images


def inside(path: Path, root: Path) -> Path:
    """``path`` with its symlinks followed, which must stay inside the source tree ``root``."""
    return resolved_inside(
        path,
        root,
        missing="is a dangling or looping symlink; remove it or fix its target",
        outside="copy the file into the tree or remove the link",
    )


def source_facts(source: Path, classes: list[str], images: list[Image]) -> dict[str, Any]:
    """What a set was made from, for its manifest: counts and a hash of the input's listing
    (names and sizes), not its path: the same download prepared twice is the same set."""
    listing = hashlib.sha256()
    for image in images:
        listing.update(f"{image.relative}\t{image.path.stat().st_size}\n".encode())
    counts = {split: sum(1 for i in images if i.split == split) for split in SPLITS}
    return {
        "dataset": "imagenet-jpeg",
        "classes": len(classes),
        "images": {k: v for k, v in counts.items() if v},
        "listing_sha256": listing.hexdigest(),
    }


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", type=Path, help="the ImageNet JPEG tree (train/, val/)")
    parser.add_argument("out", type=Path, help="the folder to write (made; resumed if there)")
    parser.add_argument(
        "--splits",
        default="train,val",
        help="comma-separated: train, val (default both)",
    )


def splits_of(text: str) -> tuple[str, ...]:
    items = tuple(s.strip() for s in text.split(","))
    bad = [s for s in items if s not in SPLITS]
    if bad or not items or len(set(items)) != len(items):
        raise ConfigError("--splits", "(option)", f"{text!r}: give train, val or train,val")
    return items


def prepare(
    args: argparse.Namespace,
    fmt: str,
    make: Callable[[Path, list[str], list[Image]], list[Path]],
    job: dict[str, Any] | None = None,
    check: Callable[[list[Image]], None] | None = None,
) -> int:
    """Scan, make the format's files (``make`` skips what a former run finished: each file
    is written whole or not at all), write the manifest, and state sizes, time and identity.
    The output folder is claimed first (``manifest.claim``): one holding another set, or files
    of its own, is refused; ``job`` holds the options that shape the files (shard counts);
    ``check`` refuses images the format cannot hold, before anything is written."""
    start = time.monotonic()
    classes, images = scan(args.source, splits_of(args.splits))
    if check:
        check(images)
    facts = source_facts(args.source, classes, images)
    out = ensure_dir(args.out)
    claim(out, fmt, {"source": facts, **(job or {})})
    files = make(out, classes, images)
    made = time.monotonic()
    identity = write_manifest(out, fmt, files, facts)
    total = sum(p.stat().st_size for p in files)
    print(
        f"{fmt}: {len(images)} images of {len(classes)} classes -> {len(files)} files, "
        f"{_size(total)} in {out}; made in {made - start:.1f} s, hashed in "
        f"{time.monotonic() - made:.1f} s\ndataset_sha256: {identity}",
        file=sys.stderr,
    )
    print(identity)
    return 0


def _size(count: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024
    return ""


def place(source: Path, target: Path) -> Path:
    """``target`` as a hard link to ``source`` (a copy across file systems); skipped where a
    former run placed it (same size): resumable, and never a half-written file."""
    if target.exists() and target.stat().st_size == source.stat().st_size:
        return target
    ensure_dir(target.parent)
    partial = target.with_name(f".{target.name}.partial")
    partial.unlink(missing_ok=True)
    try:
        os.link(source.resolve(), partial)  # a symlink (inside the tree) as its target
    except OSError:
        return write_bytes(target, source.read_bytes())  # a full disk names the target
    try:
        os.replace(partial, target)
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise KitWriteError(target, error) from None
    return target


def place_tree(out: Path, images: list[Image]) -> list[Path]:
    """The raw folder's images: ``out/<split>/<wnid>/<file>``."""
    return [place(image.path, out / image.relative) for image in images]
