"""``dlperf data <format>``: a source's data format made from the user's own downloads, with a
manifest whose SHA-256 every run on it records (docs/data.md)."""

from __future__ import annotations

import argparse
import importlib

# One module of driver.datasets per format family, each with add_parser(subparsers).
PREPARERS = (
    "raw",
    "paddle_lists",
    "tfrecord",
    "recordio",
    "dali_index",
    "ofrecord",
    "tokens",
    "bert",
)


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    data = sub.add_parser(
        "data",
        help="make a source's data format (ImageNet raw, TFRecord, DALI index, RecordIO, Paddle "
        "lists, OFRecord; BERT for each source; a Llama token file) from your downloads, with a "
        "manifest whose hash each run records (docs/data.md)",
    )
    formats = data.add_subparsers(dest="format", metavar="FORMAT", required=True)
    for name in PREPARERS:
        importlib.import_module(f"driver.datasets.{name}").add_parser(formats)
