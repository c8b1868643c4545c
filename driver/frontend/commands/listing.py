"""``dlperf list``: the registered plug-ins of every kind."""

from __future__ import annotations

import argparse

from driver.frameworks.base import FRAMEWORKS
from driver.launchers.base import LAUNCHERS
from driver.parsers.base import PARSERS
from driver.runtimes.base import RUNTIMES
from driver.sources.base import SOURCES


def cmd_list(_args: argparse.Namespace) -> int:
    for title, registry in (
        ("frameworks", FRAMEWORKS),
        ("launchers", LAUNCHERS),
        ("runtimes", RUNTIMES),
        ("log parsers", PARSERS),
        ("sources", SOURCES),
    ):
        print(f"{title}: {', '.join(registry.names()) or '(none)'}")
    return 0


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    listing = sub.add_parser("list", help="registered plug-ins")
    listing.set_defaults(func=cmd_list)
