"""``dlperf attest-hardware``: state the machine of a session whose logs carry no fingerprint."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from driver.frontend.args import reports_and_results


def cmd_attest_hardware(args: argparse.Namespace) -> int:
    """State the machine a session ran on, for logs that carry no fingerprint of their own."""
    from driver.release.refusals import ReleaseError
    from driver.release.release import resolve_session
    from driver.verify.folder import verify_sessions
    from driver.verify.hardware import (
        ATTESTATION,
        AttestationError,
        make_attestation,
        write_attestation,
    )

    try:
        root = resolve_session(args.session, Path(args.results))
    except ReleaseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if root.is_symlink():
        print(
            f"error: {root}: a symlink; attest the session folder itself (a release refuses a "
            "symlinked session too)",
            file=sys.stderr,
        )
        return 2
    if (root / ATTESTATION).exists():
        print(
            f"error: {root / ATTESTATION} exists: a session's attestation is written once "
            "(remove it first if it is wrong, and say why in the next release's changelog)",
            file=sys.stderr,
        )
        return 2
    facts: dict[str, str] = {}
    for text in args.fact or []:
        key, sep, value = text.partition("=")
        if not sep or not key or key in facts:
            print(f"error: --fact {text!r}: one KEY=VALUE per key", file=sys.stderr)
            return 2
        facts[key] = value
    try:
        attestation = make_attestation(args.label, facts, args.source)
    except AttestationError as error:
        print(f"error: attest-hardware: {error}", file=sys.stderr)
        return 2
    own = {
        r.fingerprint
        for r in verify_sessions([root]).repeats
        if r.hardware.origin in ("fingerprint", "declared")
    }
    if own:
        print(
            f"error: {root}: its logs carry their own fingerprint ({', '.join(sorted(own))}); "
            "an attestation is only for logs without one",
            file=sys.stderr,
        )
        return 2
    from driver.model.seal import configured_signer
    from driver.model.warrant import unvouched
    from driver.signing import SigningError

    try:
        signer = configured_signer()
    except SigningError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    foreign = [f"{rel}: {what}" for rel, what in unvouched(root, None, signer)]
    if foreign:  # sealing again signs what the session holds: only what this command adds
        print(
            f"error: {root}: holds files its seal does not vouch for, which sealing it with "
            "the attestation would sign: "
            + "; ".join(foreign[:10])
            + (f"; and {len(foreign) - 10} more" if len(foreign) > 10 else "")
            + "; attest a session as it was sealed (restore it, or re-import its logs into a "
            "new session)",
            file=sys.stderr,
        )
        return 2
    path = write_attestation(root, attestation)
    print(f"{path}: {attestation.label} (source: {attestation.source})")
    from driver.core.session import seal_finished  # the session holds a new file: sealed anew

    return 0 if seal_finished(root) else 1


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    attest = sub.add_parser(
        "attest-hardware",
        help="state the machine of a session whose logs carry no hardware fingerprint",
    )
    attest.add_argument("session", help="session folder or name under results/")
    attest.add_argument("--label", required=True, help="e.g. 'AMD EPYC 2c avx2'")
    attest.add_argument(
        "--source", required=True, help="how this is known (a note, an inventory, a log)"
    )
    attest.add_argument("--fact", action="append", metavar="KEY=VALUE", help="repeatable")
    reports_and_results(attest)
    attest.set_defaults(func=cmd_attest_hardware)
