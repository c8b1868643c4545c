"""``dlperf preflight``: check every node of an inventory before a run
(``driver.cluster.preflight``)."""

from __future__ import annotations

import argparse

from driver.cluster.inventory import MAX_NODE_DEVICES
from driver.frontend.args import bounded_int


def cmd_preflight(args: argparse.Namespace) -> int:
    from driver.cluster.preflight import failures, report
    from driver.frameworks.base import FRAMEWORKS
    from driver.runtimes.base import make_runtime

    runtime = make_runtime(args.runtime, inventory=args.inventory)
    framework = FRAMEWORKS.canonical(args.framework)
    checks, _images = runtime.preflight(runtime.remotes, framework, args.devices)
    print(report(checks))
    bad = failures(checks)
    print(f"{len(bad)} failed check(s)" if bad else "all nodes ready")
    return 1 if bad else 0


def add_subcommands(subparsers: argparse._SubParsersAction) -> None:
    preflight = subparsers.add_parser("preflight", help="check every node of an inventory")
    preflight.add_argument("--inventory", required=True)
    preflight.add_argument("--runtime", default="docker", choices=("ssh", "docker", "process"))
    preflight.add_argument("--framework", default="pytorch")
    preflight.add_argument(
        "--devices",
        type=bounded_int(1, MAX_NODE_DEVICES),  # the inventory's own bound for a node's devices
        help="devices needed per node (default: all)",
    )
    preflight.set_defaults(func=cmd_preflight)
