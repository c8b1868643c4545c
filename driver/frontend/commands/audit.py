"""``dlperf audit``: recompute released versions from their raw logs and name any difference."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from driver.frontend.args import allowed_signers_option, check_trust_anchor, reports_and_results


def cmd_audit(args: argparse.Namespace) -> int:
    from driver.release.audit import audit
    from driver.release.refusals import ReleaseError
    from driver.release.release import resolve_version
    from driver.release.versions import released_versions

    if args.images_lock:  # a lock named but missing or unreadable is an error, never skipped
        from driver.images.lock import LockFileError, load_lock

        try:
            load_lock(args.images_lock)
        except LockFileError as error:
            print(f"error: --images-lock {error}", file=sys.stderr)
            return 2
    reports = Path(args.reports)
    untrustable = check_trust_anchor(args, reports)
    if untrustable:
        print(f"error: {untrustable}", file=sys.stderr)
        return 2
    if args.all:
        targets = [reports / name for name, _ in reversed(released_versions(reports))]
        if not targets:
            print(f"no released version under {reports}")
            return 0
    else:
        if not args.versions:
            print("give a version (reports/vX.Y) or --all", file=sys.stderr)
            return 2
        try:
            targets = [resolve_version(v, reports) for v in args.versions]
        except ReleaseError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    if args.kit == "released":
        return _audit_with_released_kits(targets, reports, args)
    failed = 0
    for target in targets:
        report = audit(
            target,
            images_lock=Path(args.images_lock) if args.images_lock else None,
            recompute_flops=not args.cached_flops,
            allowed_signers=args.allowed_signers,
            require_signed=args.require_signed,
        )
        print(report.text())
        failed += not report.ok
    return 1 if failed else 0


def _audit_with_released_kits(targets: list[Path], reports: Path, args: argparse.Namespace) -> int:
    """Each version audited by the kit that released it (its numbers, tables and files), and
    its seals and signatures by this kit against the auditor's allowed-signers file
    (``--allowed-signers``, ``$DLPERF_ALLOWED_SIGNERS``, the per-user file) with
    ``--require-signed``: an older kit may not know that file or that option, and a version's
    own allowed_signers comes with the data it vouches for."""
    from driver.release.audit import audit
    from driver.release.released_kit import ReleasedKitError, audit_with_released_kit, kit_knows
    from driver.release.signatures import trust_anchor

    extra = [*(["--images-lock", args.images_lock] if args.images_lock else [])]
    extra += ["--cached-flops"] if args.cached_flops else []
    failed = 0
    for target in targets:
        anchor = trust_anchor(args.allowed_signers, target.parent)  # readable: checked above
        here: list[str] = []
        # only a kit that signs (README layout 5 on) knows --allowed-signers
        if _layout(target) >= SIGNING_LAYOUT and (args.allowed_signers or not anchor.own):
            here += ["--allowed-signers", str(anchor.path.resolve())]
        if args.require_signed and kit_knows(target, "--require-signed"):
            here += ["--require-signed"]
        try:
            code = audit_with_released_kit(target, reports, extra + here)
            released = "PASS" if code == 0 else f"FAIL (exit {code})"
        except ReleasedKitError as error:
            print(f"error: {error}", file=sys.stderr)
            code, released = 1, "could not run"
        signed = audit(
            target,
            allowed_signers=anchor,
            require_signed=args.require_signed,
            signatures_only=True,
        )
        print(signed.text())
        ok = code == 0 and signed.ok
        print(
            f"verdict of {target.name}: {'PASS' if ok else 'FAIL'} (the kit that released it: "
            f"{released}; its seals and signatures, checked by this kit: "
            f"{'PASS' if signed.ok else 'FAIL'})"
        )
        failed += not ok
    return 1 if failed else 0


SIGNING_LAYOUT = 5  # the README layout from which a version records its signatures


def _layout(version: Path) -> int:
    from driver.release.results import readme_layout
    from driver.release.versions import load_manifest

    return readme_layout(load_manifest(version) or {})


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    audit = sub.add_parser("audit", help="recompute a released version from its raw logs")
    audit.add_argument("versions", nargs="*", help="reports/vX.Y folders or version names")
    audit.add_argument("--all", action="store_true", help="every version under --reports")
    audit.add_argument(
        "--images-lock", help="fail when this images.lock pins another digest for an image"
    )
    audit.add_argument(
        "--kit",
        choices=("current", "released"),
        default="current",
        help="audit with this checkout's kit, or with the kit commit that released the version "
        "(a temporary git worktree: later renderer changes do not count as differences)",
    )
    audit.add_argument(
        "--cached-flops",
        action="store_true",
        help="trust the manifest's model FLOPs even where torch could recount them",
    )
    allowed_signers_option(audit)
    reports_and_results(audit)
    audit.set_defaults(func=cmd_audit)
