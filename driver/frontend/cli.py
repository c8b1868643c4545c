"""The ``dlperf`` command line: ``main``, the signal policy and the mapping of errors to exit
statuses. Each command is one module of ``driver.frontend.commands`` (its parser beside its
handler); the commands that measure and publish are listed first, the tools apart."""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
import textwrap
from typing import Any

from driver.files import KitWriteError
from driver.frontend.args import lock_or_inventory_errors
from driver.plugins import load_all
from driver.registry import UnknownPlugin
from driver.runtimes.base import RuntimeConfigError
from driver.schema import ConfigError

DESCRIPTION = "dlperf: measure deep-learning training throughput the DLPerf way."
# Command modules (``driver.frontend.commands.<name>``) in the order ``--help`` lists them.
MISSION = ("run", "report", "release", "audit", "images", "envs", "selftest")
TOOLS = (
    "compare", "factor", "import_figures", "import_logs", "preflight", "nodes", "probe",
    "attest_hardware", "parity", "listing", "data",
)  # fmt: skip
GROUPS = (("measure and publish", MISSION), ("tools", TOOLS))
# Bad input a command does not catch itself: ``main`` prints it in one line and exits 2 (as it
# does a bad images lock or inventory, whose errors are imported only when one is raised).
ONE_LINE_ERRORS = (ConfigError, UnknownPlugin, RuntimeConfigError, KitWriteError)


class _Listed:
    """The sub-parsers action as a command module sees it: each command's help is kept for the
    grouped listing of ``dlperf --help`` instead of argparse's one flat list."""

    def __init__(self, action: Any) -> None:
        self.action = action
        self.listed: list[tuple[str, str]] = []

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        self.listed.append((name, kwargs.pop("help", "")))
        return self.action.add_parser(name, **kwargs)


def _listing(groups: list[tuple[str, list[tuple[str, str]]]]) -> str:
    """The commands by group, each name with its help wrapped beside it (argparse's width)."""
    width = max(len(name) for _title, listed in groups for name, _help in listed)
    columns = max(shutil.get_terminal_size().columns - 2, 40)
    sections = []
    for title, listed in groups:
        lines = [
            textwrap.fill(
                text or "",
                columns,
                initial_indent=f"  {name:<{width}}  ",
                subsequent_indent=" " * (width + 4),
            )
            for name, text in listed
        ]
        sections.append(f"{title}:\n" + "\n".join(lines))
    return "\n\n".join(sections)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dlperf", formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        help="one of the commands above; `dlperf COMMAND --help` for its options",
    )
    groups = []
    for title, modules in GROUPS:
        listed = _Listed(sub)
        for name in modules:
            importlib.import_module(f"driver.frontend.commands.{name}").add_subcommands(listed)
        groups.append((title, listed.listed))
    parser.description = f"{DESCRIPTION}\n\n{_listing(groups)}"
    return parser


def _terminate_as_interrupt(signum: int, _frame: object) -> None:
    # SIGTERM (a job scheduler, `kill`, a CI timeout) takes the same path as Ctrl-C: the repeat
    # in flight is recorded as interrupted and every process/container it started is removed.
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    import signal

    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # A shell starts background jobs (`dlperf run ... &`, CI wrappers) with SIGINT ignored,
        # and children inherit that: `kill -INT` would be lost while containers keep running on
        # every node. A stop request always takes the recorded, cleaned-up interrupt path.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    load_all()
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (*ONE_LINE_ERRORS, *lock_or_inventory_errors()) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader of our output went away (`dlperf report ... | head`): not an error of
        # ours. Point stdout at /dev/null so the interpreter's final flush stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as error:  # an ordinary file-system fault outside the kit's own writes
        where = f"{error.filename}: " if error.filename else ""
        print(f"error: {where}{error.strerror or error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
