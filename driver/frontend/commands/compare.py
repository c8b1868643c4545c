"""``dlperf compare``: two versions, sessions or import files, case by case, with a noise-aware
verdict (``driver.analysis.compare``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from driver.frontend.args import bounded_float, reports_and_results


def cmd_compare(args: argparse.Namespace) -> int:
    from driver.analysis.compare import compare_sides, load_side

    a = load_side(args.a, Path(args.reports), Path(args.results))
    b = load_side(args.b, Path(args.reports), Path(args.results))
    rows, text = compare_sides(a, b, alpha=args.alpha)
    print(json.dumps(rows, indent=2) if args.json else text)
    return 0


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    compare = sub.add_parser("compare", help="two versions or sessions, case by case")
    compare.add_argument("a", help="baseline: a version or a session")
    compare.add_argument("b", help="the other version or session")
    compare.add_argument(
        "--alpha",
        type=bounded_float(0, 1, low_open=True, high_open=True),
        default=0.05,
        help="significance level of the Mann-Whitney U test, 0 < alpha < 1 (default 0.05)",
    )
    compare.add_argument("--json", action="store_true")
    reports_and_results(compare)
    compare.set_defaults(func=cmd_compare)
