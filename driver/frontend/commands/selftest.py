"""``dlperf selftest``: the kit's own error on a known workload (``driver.core.selftest``); with
``--nodes``, the cost curve on simulated hosts (``driver.testbed.costcurve``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from driver.core.matrix import MAX_REPEATS
from driver.core.selftest import DEFAULT_TOPOLOGIES
from driver.frontend.args import RUNTIME_HELP, bounded_float, bounded_int, count_list, topology_list
from driver.runtimes.base import make_runtime

# The selftest's step time: at least 1 ms (32 samples per step stay well within the door's
# plausible throughput per device), at most a minute (its 105 steps per repeat: under 2 hours).
SELFTEST_MIN_STEP_S, SELFTEST_MAX_STEP_S = 0.001, 60.0


def cmd_selftest(args: argparse.Namespace) -> int:
    from driver.core.selftest import SelftestError, run_selftest

    if args.nodes:
        return selftest_curve(args)
    if args.plot is not None:
        print("error: selftest: --plot draws the cost curve of --nodes; give --nodes, or drop "
              "--plot", file=sys.stderr)  # fmt: skip
        return 2
    if args.devices is not None:
        print("error: selftest: --devices goes with --nodes (devices per simulated host); "
              "without --nodes, give the shape with --topologies", file=sys.stderr)  # fmt: skip
        return 2
    runtime = make_runtime(args.runtime, inventory=args.inventory)
    # A runtime that can tell up front that its cluster does not answer (Slurm: no
    # controller) says so in one line, rather than every calibration repeat failing.
    runtime.check_reachable()
    try:
        results = run_selftest(
            step_time=args.step_time,
            repeats=args.repeats,
            runtime=runtime,
            topologies=args.topologies or DEFAULT_TOPOLOGIES,
        )
    except SelftestError as error:
        print(f"error: selftest: {error}", file=sys.stderr)
        return 1
    return 0 if all(r.passed for r in results) else 1


def selftest_curve(args: argparse.Namespace) -> int:
    """``selftest --nodes 2,4,...``: the calibration case on that many simulated hosts each."""
    from driver.core.selftest import SelftestError
    from driver.testbed.costcurve import CostCurveError, refusal, run_cost_curve

    clash = [flag for flag, given in (("--inventory", args.inventory),
                                      ("--topologies", args.topologies)) if given]  # fmt: skip
    if clash:
        print(f"error: selftest: --nodes makes its own simulated hosts and runs <N>n<N x devices>g "
              f"on them; drop {' and '.join(clash)}", file=sys.stderr)  # fmt: skip
        return 2
    why = refusal(args.runtime)
    if why:
        print(f"error: selftest --nodes: {why}", file=sys.stderr)
        return 2
    try:
        points = run_cost_curve(
            list(args.nodes), args.runtime, devices=args.devices or 1,
            step_time=args.step_time, repeats=args.repeats, plot=args.plot,
        )  # fmt: skip
    except (CostCurveError, SelftestError, RuntimeError) as error:
        print(f"error: selftest --nodes: {' '.join(str(error).split())[:2000]}", file=sys.stderr)
        return 1
    return 0 if all(p.result.passed for p in points) else 1


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    from driver.testbed.costcurve import MAX_SIMULATED_NODES

    selftest = sub.add_parser("selftest", help="measure the kit's own error on a known workload")
    selftest.add_argument(
        "--step-time",
        type=bounded_float(SELFTEST_MIN_STEP_S, SELFTEST_MAX_STEP_S, unit="seconds"),
        default=0.02,
        help="the workload's step time in seconds",
    )
    selftest.add_argument("--repeats", type=bounded_int(1, MAX_REPEATS), default=3)
    selftest.add_argument(
        "--topologies", type=topology_list, default=None, metavar="LIST",
        help=f"comma-separated <nodes>n<total devices>g (default: {','.join(DEFAULT_TOPOLOGIES)};"
        " the cluster's shape, e.g. 1n1g,1n8g,2n16g,4n32g)",
    )  # fmt: skip
    selftest.add_argument("--runtime", default="local", help=RUNTIME_HELP)
    selftest.add_argument("--inventory", help="cluster inventory YAML (see docs/clusters.md)")
    selftest.add_argument(
        "--nodes",
        type=count_list(1, MAX_SIMULATED_NODES),
        metavar="LIST",
        help="the cost curve: for each count N (e.g. 2,4,8,16,32) make N simulated hosts (root; "
        "docs/clusters.md) and run <N>n<N x devices>g through --runtime process or slurm",
    )
    selftest.add_argument(
        "--devices", type=bounded_int(1, 64), metavar="N",
        help="with --nodes: ranks per simulated host (default 1)",
    )  # fmt: skip
    selftest.add_argument(
        "--plot", type=Path, metavar="PNG",
        help="with --nodes: draw the kit's own parts and their fitted lines into this PNG",
    )  # fmt: skip
    selftest.set_defaults(func=cmd_selftest)
