"""``dlperf data recordio``: ImageNet as MXNet indexed RecordIO (``train.rec``/``train.idx``,
``val.rec``/``val.idx``) for NGC MXNet and gluon-cv, packed by MXNet's own ``recordio`` module
in the kit's MXNet environment (JPEG bytes as they are, as ``im2rec.py --pass-through``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from driver.datasets.framework_writer import run_writer, shard_plan
from driver.datasets.imagenet import Image, add_common_arguments, prepare


def make(out: Path, _classes: list[str], images: list[Image]) -> list[Path]:
    shards = []
    for split in ("train", "val"):
        part = [i for i in images if i.split == split]
        if part:
            shards.append((out / f"{split}.rec", shard_plan(part, 1)[0]))
    run_writer("mxnet", "recordio", shards)
    return [f for rec, _ in shards for f in (rec, rec.with_suffix(".idx"))]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "recordio", help="ImageNet RecordIO (NGC MXNet, gluon-cv) from a JPEG tree"
    )
    add_common_arguments(parser)
    parser.set_defaults(func=lambda args: prepare(args, "imagenet-recordio", make))
