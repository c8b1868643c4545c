"""``dlperf release``: result sessions -> an immutable, auditable ``reports/<version>``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from driver.frontend.args import (
    allowed_signers_option,
    free_text,
    reports_and_results,
    signing_key_option,
)


def cmd_release(args: argparse.Namespace) -> int:
    from driver.release.refusals import ReleaseError
    from driver.release.release import release, resolve_session
    from driver.signing import SigningError, configured_key

    try:
        key = configured_key(args.signing_key)
    except SigningError as error:
        print(f"release refused: {error}", file=sys.stderr)
        return 2
    reasons: dict[str, str] = {}
    for case_id, reason in args.superlinear:
        if case_id in reasons:
            print(f"release refused: --superlinear {case_id} is given twice", file=sys.stderr)
            return 2
        reasons[case_id] = reason
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
            signing_key=key,
            allowed_signers=args.allowed_signers,
            superlinear=reasons,
            require_signed=args.require_signed,
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
    release.add_argument(
        "--superlinear",
        nargs=2,
        action="append",
        default=[],
        metavar=("CASE", "REASON"),
        help="publish CASE although it measured above 100%% efficiency beyond its noise "
        "tolerance, for REASON (recorded in the version; repeatable)",
    )
    signing_key_option(release, "the version's manifest")
    allowed_signers_option(release)
    reports_and_results(release)
    release.set_defaults(func=cmd_release)
