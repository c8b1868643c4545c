"""``dlperf data ofrecord``: ImageNet as OneFlow-Benchmark's OFRecord parts
(``train/part-00000`` ..., ``validation/part-00000`` ...), written with OneFlow's own
``record_pb2`` in the kit's OneFlow environment (JPEG bytes as they are, 0-based labels)."""

from __future__ import annotations

import argparse
from pathlib import Path

from driver.datasets.framework_writer import shards_command
from driver.datasets.imagenet import add_common_arguments
from driver.files import ensure_dir

FOLDERS = {"train": "train", "val": "validation"}


def part_path(out: Path, split: str, n: int, _total: int) -> Path:
    """Parts named as the reader's ``part_name_suffix_length=5`` asks; their count is the
    ``--train_data_part_num`` / ``--val_data_part_num`` to give OneFlow-Benchmark."""
    return ensure_dir(out / FOLDERS[split]) / f"part-{n:05d}"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ofrecord", help="ImageNet OFRecord parts (OneFlow-Benchmark) from a JPEG tree"
    )
    add_common_arguments(parser)
    parser.add_argument("--train-shards", type=int, default=256)
    parser.add_argument("--val-shards", type=int, default=256)
    shards_command(parser, "imagenet-ofrecord", ("oneflow", "ofrecord"), part_path)
