"""``dlperf release``: result sessions -> an immutable, auditable ``reports/<version>``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from driver.frontend.args import free_text, reports_and_results


def cmd_release(args: argparse.Namespace) -> int:
    from driver.release.release import ReleaseError, release, resolve_session

    try:
        sessions = [resolve_session(s, Path(args.results)) for s in args.sessions]
        target = release(
            args.version,
            sessions,
            reports_root=Path(args.reports),
            changelog=args.changelog,
            title=args.title,
            accept_remeasured=args.accept_remeasured,
            compute_flops=not args.no_flops,
            imports=[Path(p) for p in args.imports],
        )
    except ReleaseError as error:
        print(f"release refused: {error}", file=sys.stderr)
        return 2
    print(f"{target}/README.md")
    return 0


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    release = sub.add_parser(
        "release", help="turn result sessions into an immutable, auditable reports/<version>"
    )
    release.add_argument("version", help="vX.Y[.Z][-label], e.g. v0.1-cpu")
    release.add_argument("sessions", nargs="+", help="session folders or names under results/")
    release.add_argument(
        "--changelog",
        type=free_text("note"),
        help="what changed and why, one paragraph (required once a version exists)",
    )
    release.add_argument(
        "--title", type=free_text("name"), help="README title (default: dlperf report <version>)"
    )
    release.add_argument(
        "--accept-remeasured",
        action="store_true",
        help="publish repeats whose raw logs now measure differently from their records",
    )
    release.add_argument(
        "--no-flops", action="store_true", help="do not count model FLOPs (no MFU column)"
    )
    release.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="FILE",
        help="published figures (dlperf import file) beside the measured cases (repeatable)",
    )
    reports_and_results(release)
    release.set_defaults(func=cmd_release)
