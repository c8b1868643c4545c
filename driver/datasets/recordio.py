"""``dlperf data recordio``: ImageNet as MXNet indexed RecordIO (``train.rec``/``train.idx``,
``val.rec``/``val.idx``) for NGC MXNet and gluon-cv, packed by MXNet's own ``recordio`` module
in the kit's MXNet environment (JPEG bytes as they are, as ``im2rec.py --pass-through``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from driver.datasets.framework_writer import write_splits
from driver.datasets.imagenet import Image, add_common_arguments, prepare


def make(out: Path, _classes: list[str], images: list[Image]) -> list[Path]:
    counts = {"train": 1, "val": 1}  # one .rec (and its .idx) a split
    recs = write_splits(("mxnet", "recordio"), out, images, counts, _rec_path)
    return [f for rec in recs for f in (rec, rec.with_suffix(".idx"))]


def _rec_path(out: Path, split: str, _n: int, _total: int) -> Path:
    return out / f"{split}.rec"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "recordio", help="ImageNet RecordIO (NGC MXNet, gluon-cv) from a JPEG tree"
    )
    add_common_arguments(parser)
    parser.set_defaults(func=lambda args: prepare(args, "imagenet-recordio", make))
