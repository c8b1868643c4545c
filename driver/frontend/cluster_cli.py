"""Cluster sub-commands of ``dlperf``: ``images base|build|lock|push|list``, ``preflight`` and
``nodes`` (the node scan).

``driver.frontend.cli`` calls :func:`add_subcommands`; runtimes come from the registry through
``driver.runtimes.base.make_runtime``. Heavy imports (fabric, docker) happen inside the commands.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from driver.cluster.inventory import MAX_NODE_DEVICES
from driver.frontend.args import bounded_float_list, bounded_int


def _build_options(args: argparse.Namespace, local_copies: dict[str, Any] | None = None) -> Any:
    from driver.images.build import BuildOptions

    wheelhouse = (
        tuple(Path(p) for p in args.wheelhouse) if getattr(args, "wheelhouse", None) else None
    )
    ca = getattr(args, "ca_bundle", None)
    return BuildOptions(
        lock_path=Path(args.lock) if args.lock else None,
        wheelhouse=wheelhouse,
        ca_bundle=Path(ca) if ca else None,
        local_copies=local_copies or {},
    )


def _errors() -> tuple[type[BaseException], ...]:
    from driver.cluster.inventory import InventoryError
    from driver.images.lock import LockError

    return (LockError, InventoryError)


def cmd_images_base(args: argparse.Namespace) -> int:
    from driver.images.base import base_recipes, ensure_base, recipe_for
    from driver.images.lock import load_lock

    try:
        lock = load_lock(args.lock)
        for name in args.names or sorted(base_recipes()):
            ensure_base(lock, recipe_for(name), rebuild=args.rebuild)
    except _errors() as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def cmd_images_build(args: argparse.Namespace) -> int:
    from driver.images.build import build_images
    from driver.images.catalog import build_order, discover
    from driver.images.local_copy import OPTION, LocalCopyError, local_copies

    try:
        # Every copy is checked before anything is built.
        options = _build_options(args, local_copies(args.source_checkout or []))
        specs = discover(options.root)
        names = args.names or [
            name
            for name, spec in sorted(specs.items())
            if args.variant in (None, spec.variant or _shared_variant(name))
        ]
        order = build_order(specs, names)
        for image, copy in options.local_copies.items():
            if image not in order:
                raise LocalCopyError(
                    f"{OPTION} {copy.source}: its image {image} is not among the images to "
                    f"build ({', '.join(names)}); add it: dlperf images build {image} ..."
                )
        failed = []
        for name in names:  # one failing image (a registry out of reach) leaves the others
            try:
                build_images([name], options, make_base=not args.no_base)
            except _errors() as error:
                failed.append(name)
                print(f"error: {name}: {error}", file=sys.stderr)
    except _errors() as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 1 if failed else 0


def cmd_images_lock(args: argparse.Namespace) -> int:
    from driver.images.catalog import discover
    from driver.images.lock import UNRESOLVED, load_lock
    from driver.images.registry import lock_images

    try:
        lock = load_lock(args.lock)
        refs = [ref for spec in discover().values() for ref in spec.registry_refs]
        status = lock_images(lock, refs)
    except _errors() as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 1 if UNRESOLVED in status.values() else 0


def cmd_images_list(args: argparse.Namespace) -> int:
    from driver.images.base import docker_client, image_id
    from driver.images.build import plan_images
    from driver.images.catalog import discover
    from driver.images.lock import load_lock

    options = _build_options(args)
    try:
        lock = load_lock(args.lock)
        print(f"pins ({lock.path}):")
        for ref, pin in sorted(lock.pins.items()):
            print(f"  {ref:<45} {pin.digest:<71} {pin.source}")
        try:
            client = docker_client()
        except _errors():
            client = None
        print("images:")
        for name, spec in sorted(discover(options.root).items()):
            try:
                tag = plan_images([name], options)[name].tag
                found = image_id(client, tag) if client else None
                state = f"built {found[:19]}" if found else "not built"
            except _errors() as error:
                tag, state = "-", f"cannot build: {error}"
            print(f"  {name:<14} {tag:<36} {state}  ({spec.dockerfile.relative_to(options.root)})")
    except _errors() as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def cmd_images_push(args: argparse.Namespace) -> int:
    from driver.cluster.inventory import load_inventory
    from driver.images.build import resolve_image
    from driver.images.catalog import discover
    from driver.images.push import push_images

    options = _build_options(args)
    try:
        inventory = load_inventory(args.inventory)
        specs = discover(options.root)
        variants = {node.container.variant for node in inventory.nodes}
        names = args.names or [
            n for n, s in sorted(specs.items()) if (s.variant or _shared_variant(n)) in variants
        ]
        images = []
        for name in names:
            try:
                built = resolve_image(name, options)
            except _errors() as error:
                if args.names:
                    raise
                print(f"{name}: skipped ({error})")
                continue
            spec = specs[name]
            images.append((built.tag, str(built.id), spec.variant or _shared_variant(name)))
        results = push_images(inventory, images)
    except _errors() as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 1 if any(r.action == "failed" for r in results) else 0


def _shared_variant(name: str) -> str | None:
    return "cpu" if "cpu" in name else "gpu" if "gpu" in name else None


def cmd_preflight(args: argparse.Namespace) -> int:
    from driver.cluster.preflight import failures, report
    from driver.registry import FRAMEWORKS, UnknownPlugin
    from driver.runtimes.base import make_runtime

    try:
        runtime = make_runtime(args.runtime, inventory=args.inventory)
        framework = FRAMEWORKS.canonical(args.framework)
        checks, _images = runtime.preflight(runtime.remotes, framework, args.devices)
    except (*_errors(), UnknownPlugin) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(report(checks))
    bad = failures(checks)
    print(f"{len(bad)} failed check(s)" if bad else "all nodes ready")
    return 1 if bad else 0


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
    from driver.frontend.cli import choose_profile
    from driver.plugins import load_all
    from driver.registry import FRAMEWORKS

    load_all()
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

    from driver.cluster.nodescan import (
        judge,
        judge_links,
        one_node_runtimes,
        pair_runtimes,
        pair_table,
        probe_pairs,
        ring_pairs,
        scan_nodes,
        table,
    )  # fmt: skip
    from driver.frontend.cli import check_session_name
    from driver.registry import UnknownPlugin
    from driver.runtimes.base import make_runtime

    try:
        runtime = make_runtime(args.runtime, inventory=args.inventory)
        case = None if args.pairs_only else scan_case(args, args.runtime)
    except (*_errors(), UnknownPlugin) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    session = check_session_name(args.session) if args.session else None
    root = Path(args.results) / (session or f"{time.strftime('%Y%m%d-%H%M%S')}-nodes")
    inventory = runtime.inventory
    nodes = [node.name for node in inventory.nodes]
    pairs = [] if args.no_pairs else ring_pairs(nodes)
    verdicts, links, pair_results = [], None, []
    try:
        if case is not None:
            print(f"node scan: {case.id} x{case.repeats} on {len(nodes)} nodes at once ({root})")
            verdicts = judge(scan_nodes(case, one_node_runtimes(runtime, inventory), root),
                             args.slow_below)  # fmt: skip
        if not args.no_pairs and not pairs:
            print("pair scan: skipped, one node has no other to pair with")
        elif not args.no_pairs:
            print(f"pair scan: all-reduce probe ({args.probe_sizes_mb} MB) on {len(pairs)} "
                  f"pair(s) of {len(nodes)} nodes ({root})")  # fmt: skip
            pair_results = probe_pairs(
                pair_runtimes(runtime, inventory, pairs), root,
                sizes_mb=args.probe_sizes_mb, iters=args.probe_iters,
            )  # fmt: skip
            if pair_results:
                print(pair_table(pair_results))
            links = judge_links(nodes, pair_results, args.slow_link_below)
    except KeyboardInterrupt:
        print(f"node scan interrupted; what ran is in {root}", file=sys.stderr)
        return 130
    if verdicts or links is not None:
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


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (0.05: 5%), got {text!r}")
    return value


def add_subcommands(subparsers: Any) -> None:
    lock_help = "the lock file (default: $DLPERF_IMAGES_LOCK or images.lock at the repo root)"
    images = subparsers.add_parser("images", help="container images: base, build, lock, push")
    images_sub = images.add_subparsers(dest="images_command", required=True)

    def common(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser.add_argument("--lock", default=os.environ.get("DLPERF_IMAGES_LOCK"), help=lock_help)
        return parser

    base = common(images_sub.add_parser("base", help="make and pin the Debian base (debootstrap)"))
    base.add_argument(
        "names", nargs="*", help="bases to make (dockerfiles/base-<name>.yaml); default: all"
    )
    base.add_argument("--rebuild", action="store_true", help="debootstrap anew even if present")
    base.set_defaults(func=cmd_images_base)

    build = common(images_sub.add_parser("build", help="build images pinned by the lock"))
    build.add_argument("names", nargs="*", help="images (default: every image)")
    build.add_argument(
        "--wheelhouse",
        action="append",
        metavar="DIR",
        help="folder of wheels passed into the build (repeatable; default: pip's find-links)",
    )
    build.add_argument(
        "--ca-bundle",
        default=os.environ.get("DLPERF_CA_BUNDLE"),
        metavar="FILE",
        help="extra CA bundle for pip behind a TLS-intercepting proxy (default: "
        "$DLPERF_CA_BUNDLE; off when unset)",
    )
    build.add_argument(
        "--no-base", action="store_true", help="do not make the Debian base when missing"
    )
    build.add_argument(
        "--source-checkout",
        action="append",
        metavar="SOURCE=PATH",
        help="build upstream source SOURCE's image from a local git copy (a bare mirror or a "
        "checkout holding every pinned commit and its history) instead of cloning its "
        "repository; served by `git daemon` on 127.0.0.1 during that build (repeatable)",
    )
    build.add_argument(
        "--variant",
        choices=("cpu", "gpu"),
        help="without names: only the cpu or gpu images (e.g. CI, which cannot pull NGC)",
    )
    build.set_defaults(func=cmd_images_build)

    lock = common(images_sub.add_parser("lock", help="re-resolve registry digests into the lock"))
    lock.set_defaults(func=cmd_images_lock)

    push = common(images_sub.add_parser("push", help="copy images to nodes lacking them"))
    push.add_argument("names", nargs="*", help="images (default: every built image for the nodes)")
    push.add_argument("--inventory", required=True)
    push.add_argument("--wheelhouse", action="append", metavar="DIR")
    push.set_defaults(func=cmd_images_push)

    listing = common(images_sub.add_parser("list", help="pins, images, their tags and state"))
    listing.add_argument("--wheelhouse", action="append", metavar="DIR")
    listing.set_defaults(func=cmd_images_list)

    preflight = subparsers.add_parser("preflight", help="check every node of an inventory")
    preflight.add_argument("--inventory", required=True)
    preflight.add_argument("--runtime", default="docker", choices=("docker", "process"))
    preflight.add_argument("--framework", default="pytorch")
    preflight.add_argument(
        "--devices",
        type=bounded_int(1, MAX_NODE_DEVICES),  # the inventory's own bound for a node's devices
        help="devices needed per node (default: all)",
    )
    preflight.set_defaults(func=cmd_preflight)

    from driver.cluster.nodescan import PAIR_ITERS, PAIR_SIZES_MB, SLOW_BELOW, SLOW_LINK_BELOW
    from driver.core.matrix import MAX_REPEATS
    from driver.frontend.cli import _option
    from driver.frontend.report_cli import PROBE_MAX_ITERS, PROBE_MAX_MB, PROBE_MIN_MB

    nodes = subparsers.add_parser(
        "nodes",
        help="the same 1n1g case on every node at once, the all-reduce probe on pairs of nodes: "
        "the slow node and the slow link named",
    )
    nodes.add_argument("--inventory", required=True)
    nodes.add_argument("--runtime", default="docker", choices=("docker", "process"))
    nodes.add_argument("--framework", default="pytorch")
    nodes.add_argument("--model", default="resnet50")
    nodes.add_argument("--profile", default="auto", help="the matrix profile (default: auto)")
    nodes.add_argument("--repeats", type=bounded_int(1, MAX_REPEATS), default=3)
    nodes.add_argument("--option", type=_option, action="append", metavar="KEY=VALUE")
    nodes.add_argument(
        "--slow-below", type=_fraction, default=SLOW_BELOW, metavar="FRACTION",
        help=f"a node this far under the median is SLOW (default {SLOW_BELOW})",
    )  # fmt: skip
    nodes.add_argument(
        "--slow-link-below", type=_fraction, default=SLOW_LINK_BELOW, metavar="FRACTION",
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
