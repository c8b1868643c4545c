"""``dlperf nodes``: the same 1n1g case on every node at once, then the all-reduce probe on pairs
of nodes; the slow node and the slow link named (``driver.diagnose.nodescan``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from driver.core.matrix import MAX_REPEATS
from driver.diagnose.nodescan import PAIR_ITERS, PAIR_SIZES_MB, SLOW_BELOW, SLOW_LINK_BELOW
from driver.diagnose.probes import PROBE_MAX_ITERS, PROBE_MAX_MB, PROBE_MIN_MB
from driver.frontend.args import (
    bounded_float_list,
    bounded_int,
    check_session_name,
    fraction,
    option_pair,
)


def scan_case(args: argparse.Namespace, runtime_name: str) -> Any:
    """The 1n1g case every node runs: the framework's matrix narrowed to the model (the
    calibration workload, which has no matrix: its known 20 ms steps)."""

    from driver.core.matrix import (
        COMMAND_LINE,
        MatrixError,
        apply_overrides,
        load_matrix,
        overrides_from,
    )  # fmt: skip
    from driver.core.selftest import calibration_cases
    from driver.core.session import choose_profile
    from driver.frameworks.base import FRAMEWORKS
    from driver.plugins import load

    load("frameworks")
    framework = FRAMEWORKS.canonical(args.framework)
    selection = {"topologies": ("1n1g",), "repeats": args.repeats,
                 "options": dict(args.option or [])}  # fmt: skip
    if framework == "calibration":  # one model, no matrix
        [case] = calibration_cases(0.02, 32, ["1n1g"], args.repeats, 100)
        return apply_overrides([case], overrides_from(selection))[0]
    overrides = overrides_from({**selection, "models": (args.model,)})
    profile, _why = choose_profile(args.profile, runtime_name)
    cases = apply_overrides(load_matrix(FRAMEWORKS.get(framework).matrix_file, profile).cases,
                            overrides)  # fmt: skip
    if not cases:
        raise MatrixError(
            COMMAND_LINE, "--model", f"{args.model!r} is in no case of {framework}'s matrix"
        )
    return cases[0]


def cmd_nodes(args: argparse.Namespace) -> int:
    """``dlperf nodes``: the same 1n1g case on every node at once, then the all-reduce probe on
    pairs of nodes; the slow node and the slow link named."""
    import time

    from driver.diagnose.nodescan import (
        judge,
        judge_links,
        one_node_runtimes,
        pair_runtimes,
        pair_table,
        probe_pairs,
        ring_pairs,
        scan_nodes,
        slurm_scan_nodes,
        table,
    )  # fmt: skip
    from driver.runtimes.base import make_runtime

    results = Path(args.results)
    if results.exists() and not results.is_dir():
        print(
            f"error: --results {results}: a file, not a folder; give the folder the scan's "
            "session is written under (default: results)",
            file=sys.stderr,
        )
        return 2
    if args.inventory is None and args.runtime != "slurm":
        print(f"error: --runtime {args.runtime} needs --inventory (the nodes)", file=sys.stderr)
        return 2
    runtime = make_runtime(args.runtime, inventory=args.inventory)
    case = None if args.pairs_only else scan_case(args, args.runtime)
    session = check_session_name(args.session) if args.session else None
    root = Path(args.results) / (session or f"{time.strftime('%Y%m%d-%H%M%S')}-nodes")
    if args.runtime == "slurm":  # the nodes of the scan's job, each node a step of it
        nodes, on = slurm_scan_nodes(runtime, root, args.nodes)
        node_runtimes = {node: on((node,)) for node in nodes}

        def runtimes_of(pairs: list[tuple[str, str]]) -> dict:
            return {pair: on(pair) for pair in pairs}
    else:
        inventory = runtime.inventory
        nodes = [node.name for node in inventory.nodes]
        node_runtimes = one_node_runtimes(runtime, inventory)

        def runtimes_of(pairs: list[tuple[str, str]]) -> dict:
            return pair_runtimes(runtime, inventory, pairs)

    pairs = [] if args.no_pairs else ring_pairs(nodes)
    verdicts, links, pair_results = [], None, []
    try:
        if case is not None:
            print(f"node scan: {case.id} x{case.repeats} on {len(nodes)} nodes at once ({root})")
            verdicts = judge(scan_nodes(case, node_runtimes, root), args.slow_below)
        if not args.no_pairs and not pairs:
            print("pair scan: skipped, one node has no other to pair with")
        elif not args.no_pairs:
            print(f"pair scan: all-reduce probe ({args.probe_sizes_mb} MB) on {len(pairs)} "
                  f"pair(s) of {len(nodes)} nodes ({root})")  # fmt: skip
            pair_results = probe_pairs(
                runtimes_of(pairs), root,
                sizes_mb=args.probe_sizes_mb, iters=args.probe_iters,
            )  # fmt: skip
            if pair_results:
                print(pair_table(pair_results))
            links = judge_links(nodes, pair_results, args.slow_link_below)
    except KeyboardInterrupt:
        print(f"node scan interrupted; what ran is in {root}", file=sys.stderr)
        return 130
    finally:
        runtime.close()  # Slurm: the scan's job cancelled
    if verdicts or links is not None:
        if pair_results:
            print()  # the pair table above: one table, then the other
        print(table(verdicts, args.slow_below, links))
    flagged = [v.result.node for v in verdicts if v.verdict != "ok"]
    flagged += [link.node for link in links or [] if link.flagged and link.node not in flagged]
    failed_pairs = [pair.name for pair in pair_results if pair.failure]
    if flagged:
        print(f"nodes to look at: {', '.join(flagged)}")
    if failed_pairs:
        print(f"pairs whose probe failed: {', '.join(failed_pairs)}")
    if not flagged and not failed_pairs:
        print("every node within range")
    return 1 if flagged or failed_pairs else 0


def add_subcommands(subparsers: argparse._SubParsersAction) -> None:
    nodes = subparsers.add_parser(
        "nodes",
        help="the same 1n1g case on every node at once, the all-reduce probe on pairs of nodes: "
        "the slow node and the slow link named",
    )
    nodes.add_argument(
        "--inventory",
        help="the cluster's inventory (docker, process: required) or Slurm cluster file",
    )
    nodes.add_argument("--runtime", default="docker", choices=("ssh", "docker", "process", "slurm"))
    nodes.add_argument(
        "--nodes", type=bounded_int(1, 1024), metavar="N",
        help="Slurm: how many nodes to scan (a job of N nodes is submitted; inside an "
        "allocation, its first N; default: all of it)",
    )  # fmt: skip
    nodes.add_argument("--framework", default="pytorch")
    nodes.add_argument("--model", default="resnet50")
    nodes.add_argument("--profile", default="auto", help="the matrix profile (default: auto)")
    nodes.add_argument("--repeats", type=bounded_int(1, MAX_REPEATS), default=3)
    nodes.add_argument("--option", type=option_pair, action="append", metavar="KEY=VALUE")
    nodes.add_argument(
        "--slow-below", type=fraction, default=SLOW_BELOW, metavar="FRACTION",
        help=f"a node this far under the median is SLOW (default {SLOW_BELOW})",
    )  # fmt: skip
    nodes.add_argument(
        "--slow-link-below", type=fraction, default=SLOW_LINK_BELOW, metavar="FRACTION",
        help="a node whose every pair's all-reduce busbw is this far under the median is a SLOW "
        f"link (default {SLOW_LINK_BELOW})",
    )  # fmt: skip
    which = nodes.add_mutually_exclusive_group()
    which.add_argument(
        "--no-pairs", action="store_true", help="skip the all-reduce probe on pairs of nodes"
    )
    which.add_argument(
        "--pairs-only", action="store_true", help="only the pairs' probe, not the 1n1g case"
    )
    nodes.add_argument(
        "--probe-sizes-mb", type=bounded_float_list(PROBE_MIN_MB, PROBE_MAX_MB, unit="MB"),
        default=PAIR_SIZES_MB, metavar="MB,MB",
        help=f"the pairs' all-reduce message sizes (default {PAIR_SIZES_MB}; busbw at the largest)",
    )  # fmt: skip
    nodes.add_argument(
        "--probe-iters", type=bounded_int(1, PROBE_MAX_ITERS), default=PAIR_ITERS,
        help=f"timed all-reduces per size and pair (default {PAIR_ITERS})",
    )  # fmt: skip
    nodes.add_argument("--results", default="results", help="parent folder of the scan")
    nodes.add_argument("--session", help="the scan's folder name (default: <time>-nodes)")
    nodes.set_defaults(func=cmd_nodes)
