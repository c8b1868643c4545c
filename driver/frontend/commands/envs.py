"""``dlperf envs``: create the local runtime's environments (``.venvs/<name>``) ahead of runs."""

from __future__ import annotations

import argparse
import time

from driver.core.matrix import COMMAND_LINE, MatrixError
from driver.frameworks.base import FRAMEWORKS
from driver.plugins import load
from driver.schema import did_you_mean
from driver.sources.base import SOURCES


def local_environments() -> dict[str, object]:
    """Every environment the local runtime runs from, by name: each framework with CPU
    requirements (``.venvs/<framework>``) and each upstream source released on PyPI
    (``.venvs/<source>``)."""
    from driver.sources.pypi import PypiSource

    load("frameworks", "sources")
    found: dict[str, object] = {}
    for name in FRAMEWORKS.names():
        framework = FRAMEWORKS.get(name)
        if framework.cpu_requirements.exists():
            found[name] = framework
    for name in SOURCES.names():
        source = SOURCES.get(name)()
        if isinstance(source, PypiSource):
            found[source.env.name] = source.env
    return found


def cmd_envs(args: argparse.Namespace) -> int:
    """Create (once) the environments the local runtime needs, so that a run or the test suite
    later finds them made: installation, timed apart from the runs (CI calls it first)."""
    from driver.frameworks.envs import ensure_env

    known = local_environments()
    if args.names is None:
        wanted = [name for name in known if not getattr(known[name], "by_name_only", "")]
        for name in sorted(set(known) - set(wanted)):
            why = known[name].by_name_only  # type: ignore[attr-defined]
            print(f"{name}: made only by name ({why}): dlperf envs {name}", flush=True)
    else:  # '' or 'a,,b' is a mistake, never "every environment" (gigabytes of installs)
        wanted = [name.strip() for name in args.names.split(",")]
        if not all(wanted):
            raise MatrixError(
                COMMAND_LINE,
                "envs",
                f"{args.names!r} holds an empty environment name; give names (e.g. "
                f"pytorch,tensorflow), or none at all for every one: {', '.join(known)}",
            )
    for name in wanted:
        if name not in known:
            raise MatrixError(
                COMMAND_LINE,
                "envs",
                f"{name!r} is not an environment{did_you_mean(name, known)}; "
                f"known: {', '.join(known)}",
            )
    for name in wanted:
        started = time.monotonic()
        python = ensure_env(known[name], log=print)  # type: ignore[arg-type]
        print(f"{name}: {python} ({time.monotonic() - started:.0f} s)", flush=True)
    return 0


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    envs = sub.add_parser(
        "envs", help="create the local runtime's environments (.venvs/<name>) ahead of runs"
    )
    envs.add_argument(
        "names", nargs="?", help="comma-separated frameworks or PyPI sources (default: all)"
    )
    envs.set_defaults(func=cmd_envs)
