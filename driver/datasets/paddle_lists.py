"""``dlperf data paddle-lists``: ImageNet for PaddleCV's image_classification reader: the raw
folder plus ``train_list.txt`` / ``val_list.txt``, one ``<split>/<wnid>/<file> <label>`` a line
(0-based labels, as PaddleCV's ImageNet lists)."""

from __future__ import annotations

import argparse
from pathlib import Path

from driver.datasets.imagenet import Image, add_common_arguments, place_tree, prepare
from driver.files import write_text


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
    parser.set_defaults(func=lambda args: prepare(args, "imagenet-paddle-lists", make))
