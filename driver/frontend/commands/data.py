"""``dlperf data <format>``: prepare a data set folder (its files and ``dlperf-dataset.json``).

Each format is a module ``driver.datasets.<name>`` with ``add_parser(subparsers)``; the
command lists them in :data:`PREPARERS`.
"""

from __future__ import annotations

import argparse
import importlib

PREPARERS = ("tokens",)


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    data = sub.add_parser("data", help="prepare a data set (tokens: a token file from your text)")
    formats = data.add_subparsers(dest="format", required=True, metavar="FORMAT")
    for name in PREPARERS:
        importlib.import_module(f"driver.datasets.{name}").add_parser(formats)
