"""``dlperf factor``: the ratio of one factor's two values over otherwise-equal cases."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from driver.frontend.args import reports_and_results


def cmd_factor(args: argparse.Namespace) -> int:
    from driver.analysis.compare import load_side
    from driver.analysis.factor import factor_report

    sides = [load_side(s, Path(args.reports), Path(args.results)) for s in args.inputs]
    data, text = factor_report(
        sides, args.factor, args.a, args.b, where=args.where, metric=args.metric, by=args.by
    )
    print(json.dumps(data, indent=2) if args.json else text)
    return 0 if data["pairs"] else 1


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    factor = sub.add_parser(
        "factor", help="ratio B/A of one factor's two values over otherwise-equal cases"
    )
    factor.add_argument(
        "inputs",
        nargs="+",
        help="versions, sessions or import files (pooled, never a median across device models)",
    )
    factor.add_argument(
        "--factor",
        required=True,
        help="precision, dataset, batch, device, model, framework, xla, topology, variant, "
        "source, hardware, machine",
    )
    factor.add_argument("--a", required=True, help="the baseline value (e.g. fp32)")
    factor.add_argument("--b", required=True, help="the other value (e.g. amp)")
    factor.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="FACTOR=VALUE",
        help="keep only cases with this value (repeatable): topology=1n1g, device=V100",
    )
    factor.add_argument(
        "--metric",
        choices=("throughput", "speedup", "efficiency"),
        default="throughput",
        help="the ratio of median throughputs, of speedups or of efficiencies",
    )
    factor.add_argument("--by", help="median rows per value of this factor too (e.g. model)")
    factor.add_argument("--json", action="store_true")
    reports_and_results(factor)
    factor.set_defaults(func=cmd_factor)
