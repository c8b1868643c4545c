"""``dlperf probe``: the all-reduce bandwidth probe into a session (``driver.diagnose.probes``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from driver.diagnose.probes import PROBE_MAX_ITERS, PROBE_MAX_MB, PROBE_MIN_MB
from driver.frontend.args import bounded_float_list, bounded_int, reports_and_results, session_name


def cmd_probe(args: argparse.Namespace) -> int:
    from driver.diagnose.probes import run_allreduce_probe
    from driver.model.results import Session
    from driver.release.scaling import ProbeError
    from driver.runtimes.base import make_runtime

    session = Session.open(Path(args.results) / args.session, {"runtime": args.runtime})
    runtime = make_runtime(args.runtime, inventory=args.inventory)
    status = 0
    for topology in args.topology:
        try:
            result = run_allreduce_probe(
                session.root,
                runtime,
                topology,
                python=args.python,
                sizes_mb=args.sizes_mb,
                iters=args.iters,
            )
        except (ProbeError, ValueError) as error:
            print(f"probe {topology}: {error}", file=sys.stderr)
            status = 1
            continue
        print(
            f"probe {topology}: {result['backend']}, busbw {result['busbw_gbps']:.3f} GB/s at "
            f"{result['busbw_at_bytes']} bytes -> {session.root}/probes/allreduce-{topology}.json"
        )
    return status


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    probe = sub.add_parser(
        "probe", help="all-reduce bandwidth probe into a session (for scaling bounds)"
    )
    probe.add_argument(
        "--session",
        required=True,
        type=session_name,
        help="session name under --results (created if new)",
    )
    probe.add_argument(
        "--topology", action="append", required=True, help="e.g. 1n2g, 2n16g (repeatable)"
    )
    probe.add_argument(
        "--sizes-mb",
        type=bounded_float_list(PROBE_MIN_MB, PROBE_MAX_MB, unit="MB"),
        default="1,16,64",
        help="message sizes in MB, comma-separated",
    )
    probe.add_argument(
        "--iters", type=bounded_int(1, PROBE_MAX_ITERS), default=10, help="timed all-reduces"
    )
    probe.add_argument("--python", help="interpreter with torch (default: the PyTorch venv)")
    probe.add_argument("--runtime", default="local")
    probe.add_argument("--inventory")
    reports_and_results(probe)
    probe.set_defaults(func=cmd_probe)
