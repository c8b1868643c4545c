"""``dlperf data ofrecord``: ImageNet as OneFlow-Benchmark's OFRecord parts
(``train/part-00000`` ..., ``validation/part-00000`` ...), written with OneFlow's own
``record_pb2`` in the kit's OneFlow environment (JPEG bytes as they are, 0-based labels)."""

from __future__ import annotations

import argparse
from pathlib import Path

from driver.datasets.framework_writer import run_writer, shard_plan
from driver.datasets.imagenet import Image, add_common_arguments, prepare

FOLDERS = {"train": "train", "val": "validation"}


def make_parts(out: Path, images: list[Image], counts: dict[str, int]) -> list[Path]:
    """Parts named as the reader's ``part_name_suffix_length=5`` asks; their count is the
    ``--train_data_part_num`` / ``--val_data_part_num`` to give OneFlow-Benchmark."""
    shards: list[tuple[Path, list[Image]]] = []
    for split in ("train", "val"):
        part = [i for i in images if i.split == split]
        if not part:
            continue
        folder = out / FOLDERS[split]
        folder.mkdir(parents=True, exist_ok=True)
        plan = shard_plan(part, counts[split])
        shards += [(folder / f"part-{n:05d}", group) for n, group in enumerate(plan)]
    run_writer("oneflow", "ofrecord", shards)
    return [path for path, _ in shards]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ofrecord", help="ImageNet OFRecord parts (OneFlow-Benchmark) from a JPEG tree"
    )
    add_common_arguments(parser)
    parser.add_argument("--train-shards", type=int, default=256)
    parser.add_argument("--val-shards", type=int, default=256)

    def run(args: argparse.Namespace) -> int:
        counts = {"train": args.train_shards, "val": args.val_shards}
        return prepare(args, "imagenet-ofrecord", lambda out, _c, im: make_parts(out, im, counts))

    parser.set_defaults(func=run)
