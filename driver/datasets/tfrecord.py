"""``dlperf data tfrecord``: ImageNet as TFRecords (``train-00000-of-01024``,
``validation-00000-of-00128``) for tensorflow/models and NGC TF1, written by TensorFlow's own
``TFRecordWriter`` in the kit's TensorFlow environment."""

from __future__ import annotations

import argparse
from pathlib import Path

from driver.datasets.framework_writer import run_writer, shard_plan
from driver.datasets.imagenet import Image, add_common_arguments, prepare

NAMES = {"train": "train", "val": "validation"}


def make_shards(out: Path, images: list[Image], counts: dict[str, int]) -> list[Path]:
    shards: list[tuple[Path, list[Image]]] = []
    for split in ("train", "val"):
        part = [i for i in images if i.split == split]
        if not part:
            continue
        plan = shard_plan(part, counts[split])
        shards += [
            (out / f"{NAMES[split]}-{n:05d}-of-{len(plan):05d}", group)
            for n, group in enumerate(plan)
        ]
    run_writer("tensorflow", "tfrecord", shards)
    return [path for path, _ in shards]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tfrecord", help="ImageNet TFRecords (tensorflow-models, NGC TF1) from a JPEG tree"
    )
    add_common_arguments(parser)
    parser.add_argument("--train-shards", type=int, default=1024)
    parser.add_argument("--val-shards", type=int, default=128)

    def run(args: argparse.Namespace) -> int:
        counts = {"train": args.train_shards, "val": args.val_shards}
        return prepare(args, "imagenet-tfrecord", lambda out, _c, im: make_shards(out, im, counts))

    parser.set_defaults(func=run)
