"""``dlperf data raw``: the ImageNet raw folder (``<split>/<wnid>/*.JPEG``) that
pytorch-examples and DeepLearningExamples PyTorch read, as hard links to the user's tree."""

from __future__ import annotations

import argparse

from driver.datasets.imagenet import add_common_arguments, place_tree, prepare


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "raw", help="ImageNet raw folder (pytorch-examples, NGC PyTorch) from a JPEG tree"
    )
    add_common_arguments(parser)
    parser.set_defaults(
        func=lambda args: prepare(args, "imagenet-raw", lambda out, _c, im: place_tree(out, im))
    )
