"""``dlperf data tfrecord``: ImageNet as TFRecords (``train-00000-of-01024``,
``validation-00000-of-00128``) for tensorflow/models and NGC TF1, written by TensorFlow's own
``TFRecordWriter`` in the kit's TensorFlow environment."""

from __future__ import annotations

import argparse
from pathlib import Path

from driver.datasets.framework_writer import shards_command
from driver.datasets.imagenet import add_common_arguments

NAMES = {"train": "train", "val": "validation"}


def shard_path(out: Path, split: str, n: int, total: int) -> Path:
    return out / f"{NAMES[split]}-{n:05d}-of-{total:05d}"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tfrecord", help="ImageNet TFRecords (tensorflow-models, NGC TF1) from a JPEG tree"
    )
    add_common_arguments(parser)
    parser.add_argument("--train-shards", type=int, default=1024)
    parser.add_argument("--val-shards", type=int, default=128)
    shards_command(parser, "imagenet-tfrecord", ("tensorflow", "tfrecord"), shard_path)
