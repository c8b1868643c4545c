"""``dlperf attest-hardware``: state the machine of a session whose logs carry no fingerprint."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from driver.frontend.args import reports_and_results


class _Refused(Exception):
    """Why the session is not attested (printed after ``error:``; exit 2)."""


def _session_to_attest(session: str, results: Path) -> Path:
    """The session folder, a real folder without an attestation yet."""
    from driver.release.refusals import ReleaseError
    from driver.release.release import resolve_session
    from driver.verify.hardware import ATTESTATION

    try:
        root = resolve_session(session, results)
    except ReleaseError as error:
        raise _Refused(str(error)) from None
    if root.is_symlink():
        raise _Refused(
            f"{root}: a symlink; attest the session folder itself (a release refuses a "
            "symlinked session too)"
        )
    if (root / ATTESTATION).exists():
        raise _Refused(
            f"{root / ATTESTATION} exists: a session's attestation is written once "
            "(remove it first if it is wrong, and say why in the next release's changelog)"
        )
    return root


def _given_facts(given: list[str]) -> dict[str, str]:
    """The ``--fact KEY=VALUE`` values, one per key."""
    facts: dict[str, str] = {}
    for text in given:
        key, sep, value = text.partition("=")
        if not sep or not key or key in facts:
            raise _Refused(f"--fact {text!r}: one KEY=VALUE per key")
        facts[key] = value
    return facts


def _check_no_fingerprint(root: Path) -> None:
    """An attestation is only for logs that carry no fingerprint of their own."""
    from driver.verify.folder import verify_sessions

    own = {
        r.fingerprint
        for r in verify_sessions([root]).repeats
        if r.hardware.origin in ("fingerprint", "declared")
    }
    if own:
        raise _Refused(
            f"{root}: its logs carry their own fingerprint ({', '.join(sorted(own))}); "
            "an attestation is only for logs without one"
        )


def _check_vouched(root: Path) -> None:
    """Sealing the session again signs what it holds: every file must be one its seal holds."""
    from driver.model.seal import configured_signer
    from driver.model.warrant import unvouched
    from driver.signing import SigningError

    try:
        signer = configured_signer()
    except SigningError as error:
        raise _Refused(str(error)) from None
    foreign = [f"{rel}: {what}" for rel, what in unvouched(root, None, signer)]
    if foreign:  # sealing again signs what the session holds: only what this command adds
        raise _Refused(
            f"{root}: holds files its seal does not vouch for, which sealing it with "
            "the attestation would sign: "
            + "; ".join(foreign[:10])
            + (f"; and {len(foreign) - 10} more" if len(foreign) > 10 else "")
            + "; attest a session as it was sealed (restore it, or re-import its logs into a "
            "new session)"
        )


def cmd_attest_hardware(args: argparse.Namespace) -> int:
    """State the machine a session ran on, for logs that carry no fingerprint of their own."""
    from driver.verify.hardware import AttestationError, make_attestation, write_attestation

    try:
        root = _session_to_attest(args.session, Path(args.results))
        facts = _given_facts(args.fact or [])
        try:
            attestation = make_attestation(args.label, facts, args.source)
        except AttestationError as error:
            raise _Refused(f"attest-hardware: {error}") from None
        _check_no_fingerprint(root)
        _check_vouched(root)
    except _Refused as refusal:
        print(f"error: {refusal}", file=sys.stderr)
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
