"""``dlperf images base|build|lock|push|list``: the containers the runtimes start, pinned by digest
(``driver.images``). Heavy imports (docker) happen inside the commands.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from driver.frontend.args import lock_or_inventory_errors


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
        engine=getattr(args, "engine", None),
    )


def cmd_images_base(args: argparse.Namespace) -> int:
    from driver.images.base import base_recipes, ensure_base, recipe_for
    from driver.images.engine import open_engine
    from driver.images.lock import load_lock

    lock = load_lock(args.lock)
    engine = open_engine(args.engine)
    for name in args.names or sorted(base_recipes()):
        ensure_base(lock, recipe_for(name), rebuild=args.rebuild, engine=engine)
    return 0


def cmd_images_build(args: argparse.Namespace) -> int:
    from driver.images.build import build_images
    from driver.images.catalog import build_order, discover
    from driver.images.local_copy import OPTION, LocalCopyError, local_copies
    from driver.sources.upstream import SPECS

    # Every copy is checked before anything is built.
    options = _build_options(args, local_copies(args.source_checkout or [], SPECS))
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
        except lock_or_inventory_errors() as error:
            failed.append(name)
            print(f"error: {name}: {error}", file=sys.stderr)
    return 1 if failed else 0


def cmd_images_lock(args: argparse.Namespace) -> int:
    from driver.images.catalog import discover
    from driver.images.lock import UNRESOLVED, load_lock
    from driver.images.registry import lock_images

    lock = load_lock(args.lock)
    refs = [ref for spec in discover().values() for ref in spec.registry_refs]
    status = lock_images(lock, refs)
    return 1 if UNRESOLVED in status.values() else 0


def cmd_images_list(args: argparse.Namespace) -> int:
    from driver.images.build import plan_images
    from driver.images.catalog import discover
    from driver.images.engine import engines_holding
    from driver.images.lock import load_lock

    options = _build_options(args)
    lock = load_lock(args.lock)
    print(f"pins ({lock.path}):")
    for ref, pin in sorted(lock.pins.items()):
        print(f"  {ref:<45} {pin.digest:<71} {pin.source}")
    print("images:")
    for name, spec in sorted(discover(options.root).items()):
        try:
            tag = plan_images([name], options)[name].tag
            held = [f"{e.name} {found[:19]}" for e, found in engines_holding(tag, args.engine)]
            state = f"built ({', '.join(held)})" if held else "not built"
        except lock_or_inventory_errors() as error:
            tag, state = "-", f"cannot build: {error}"
        print(f"  {name:<14} {tag:<36} {state}  ({spec.dockerfile.relative_to(options.root)})")
    return 0


def cmd_images_push(args: argparse.Namespace) -> int:
    from driver.cluster.inventory import load_inventory
    from driver.images.build import resolve_image
    from driver.images.catalog import discover
    from driver.images.engine import open_engine
    from driver.images.push import push_images

    options = _build_options(args)
    inventory = load_inventory(args.inventory)
    specs = discover(options.root)
    variants = {node.container.variant for node in inventory.nodes}
    names = args.names or [
        n for n, s in sorted(specs.items()) if (s.variant or _shared_variant(n)) in variants
    ]
    images: dict[str, list[tuple[str, str, str | None]]] = {}  # engine -> what it holds
    for name in names:
        try:
            built = resolve_image(name, options)
        except lock_or_inventory_errors() as error:
            if args.names:
                raise
            print(f"{name}: skipped ({error})")
            continue
        spec = specs[name]
        held = images.setdefault(built.engine, [])
        held.append((built.tag, str(built.id), spec.variant or _shared_variant(name)))
    results = []
    for engine, held in images.items():  # each image saved by the engine that holds it here
        results += push_images(inventory, held, engine=open_engine(engine))
    return 1 if any(r.action == "failed" for r in results) else 0


def _shared_variant(name: str) -> str | None:
    return "cpu" if "cpu" in name else "gpu" if "gpu" in name else None


def add_subcommands(subparsers: Any) -> None:
    lock_help = "the lock file (default: $DLPERF_IMAGES_LOCK or images.lock at the repo root)"
    images = subparsers.add_parser("images", help="container images: base, build, lock, push")
    images_sub = images.add_subparsers(dest="images_command", required=True)

    def common(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser.add_argument("--lock", default=os.environ.get("DLPERF_IMAGES_LOCK"), help=lock_help)
        parser.add_argument(
            "--engine",
            choices=("auto", "docker", "podman"),
            default=None,
            help="the engine that builds and holds the images here (default: $DLPERF_ENGINE, "
            "else auto: docker where an engine answers, else podman, rootless or not)",
        )
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
