"""``dlperf data paddle-lists``: ImageNet for PaddleCV's image_classification reader: the raw
folder plus ``train_list.txt`` / ``val_list.txt``, one ``<split>/<wnid>/<file> <label>`` a line
(0-based labels, as PaddleCV's ImageNet lists)."""

from __future__ import annotations

import argparse
from pathlib import Path

from driver.datasets.imagenet import Image, add_common_arguments, place_tree, prepare
from driver.files import write_text
from driver.schema import ConfigError


def plain_names(images: list[Image]) -> None:
    """PaddleCV's reader splits each list line at whitespace: a file name holding a space, a
    tab or a newline would be read as another file and label."""
    for image in images:
        if any(c.isspace() for c in image.relative):
            raise ConfigError(  # the folder, the name quoted: a newline stays on one line
                image.path.parent,
                repr(image.path.name),
                "holds whitespace, which Paddle's list reader splits lines at; rename the file",
            )


def make(out: Path, _classes: list[str], images: list[Image]) -> list[Path]:
    files = place_tree(out, images)
    for split in sorted({i.split for i in images}):
        lines = "".join(f"{i.relative} {i.label}\n" for i in images if i.split == split)
        files.append(write_text(out / f"{split}_list.txt", lines))
    return files


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "paddle-lists", help="ImageNet raw folder + Paddle list files (paddle-models)"
    )
    add_common_arguments(parser)
    parser.set_defaults(
        func=lambda args: prepare(args, "imagenet-paddle-lists", make, check=plain_names)
    )
