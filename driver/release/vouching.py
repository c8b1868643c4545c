"""Who vouches for a new version, and for what: the key that signs it, checked against the
allowed-signers file, and the reason given for each case measured above 100% efficiency, checked
against the cases (``driver.release.signatures`` checks the signatures themselves).

Each refusal is a :class:`VouchingError`, which the release reports as a ``ReleaseError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from driver.core.summary import SUPERLINEAR_FLOOR
from driver.release.compute import Computed
from driver.release.signatures import (
    OUTSIDE,
    OWN,
    OWN_ANCHOR,
    SIGNED,
    UNSIGNED,
    TrustAnchor,
    outside_anchor,
    trust_anchor,
)
from driver.schema import did_you_mean
from driver.signing import RELEASE_NAMESPACE, Signer, SigningError, signer_of_key
from driver.text import check_free_text


class VouchingError(Exception):
    """A signing key or a superlinear reason the release cannot take."""


@dataclass(frozen=True)
class Vouching:
    """Who vouches for a version: the key that signs it and who the allowed-signers file says
    holds it (none: unsigned), the file every signature is checked against, and the reason
    given for each case measured above 100% efficiency."""

    trust: TrustAnchor
    key: Path | None = None
    signer: Signer | None = None
    superlinear: Mapping[str, str] = field(default_factory=dict)
    require_signed: bool = False  # refuse any unsigned session (and a version without a key)

    @property
    def allowed_signers(self) -> Path:
        return self.trust.path

    def trust_status(self) -> str:
        """The manifest's ``signatures.trust``: whether the release trusted the reports
        folder's own allowed_signers (``own``) or a file from outside it."""
        return OWN if self.trust.own else OUTSIDE

    def version_status(self) -> dict[str, Any]:
        if self.signer is None:
            return {"status": UNSIGNED, "reason": "released without a signing key"}
        return {"status": SIGNED, "principal": self.signer.principal, "key": self.signer.key}


def vouching_for(
    reports_root: Path,
    key: Path | None,
    allowed_signers: Path | None,
    superlinear: Mapping[str, str],
    require_signed: bool = False,
) -> Vouching:
    """The release's signing key checked against the allowed-signers file (a version is signed
    only with a key its own audit can check; the file from outside the reports folder where one
    is named, :func:`trust_anchor`) and the superlinear reasons checked as text."""
    try:
        trust = trust_anchor(allowed_signers, reports_root)
    except SigningError as error:
        raise VouchingError(str(error)) from None
    if require_signed and trust.own:
        raise VouchingError(
            f"--require-signed: {trust.path}: {OWN_ANCHOR}; a release that requires signatures "
            f"needs {outside_anchor()}"
        )
    if require_signed and key is None:
        raise VouchingError(
            "--require-signed: the version would be unsigned; give --signing-key (or "
            "$DLPERF_SIGNING_KEY), or release without --require-signed"
        )
    for case_id, reason in superlinear.items():
        try:
            check_free_text(reason, "note")
            if not reason.strip():
                raise ValueError("is empty; say why the case scales above 100%")
        except ValueError as error:
            raise VouchingError(f"--superlinear {case_id}: the reason {error}") from None
    signer = None
    if key is not None:
        try:
            signer = signer_of_key(key, trust.path, RELEASE_NAMESPACE)
        except SigningError as error:
            raise VouchingError(f"--signing-key {error}") from None
    return Vouching(trust, key, signer, dict(superlinear), require_signed)


def check_required_signatures(
    vouching: Vouching, sessions: Mapping[str, Mapping[str, Any]]
) -> None:
    """With ``--require-signed``, every session must be signed by a trusted key: one sealed
    without a signature (or re-sealed after its signature was dropped) is refused by name."""
    if not vouching.require_signed:
        return
    unsigned = {n: s for n, s in sorted(sessions.items()) if s.get("status") != SIGNED}
    if unsigned:
        raise VouchingError(
            "--require-signed: these sessions are not signed by a key "
            f"{vouching.allowed_signers} lists (a session whose signature was removed and that "
            "was sealed again is unsigned); re-run them with --signing-key, or release without "
            "--require-signed:\n"
            + "\n".join(
                f"  {name}: {status.get('reason', 'unsigned')}" for name, status in unsigned.items()
            )
        )


def check_mfu(computed: Computed) -> None:
    """A measured case above 100% of its devices' dense peak (model FLOPs utilization) is no
    measurement: its throughput, its FLOP count or its device's peak is wrong (a model-parallel
    run counted per device instead of per replica, a log edited to be faster). Refused, as a
    superlinear scaling is without a reason, naming each case and what its MFU is made of."""
    over = sorted(
        (row for row in computed.rows.values() if row.mfu is not None and row.mfu > 1.0),
        key=lambda row: row.case_id,
    )
    if over:
        raise VouchingError(
            "measured above 100% of its devices' dense peak (MFU), which no run reaches: check "
            "the case's logs, its model-parallel degrees (a tensor-parallel run states "
            "tensor_parallel, or its samples are counted per device) and the device's entry "
            "in reports/peaks.yaml:\n"
            + "\n".join(
                f"  {row.case_id}: MFU {row.mfu:.1%} ({row.throughput_median:.6g} samples/s x "
                f"{row.flops_per_sample:.4g} FLOP a sample over {row.devices} x "
                f"{row.peak_tflops:g} TFLOP/s, {row.peak_device} {row.peak_precision})"
                for row in over
            )
        )


def check_superlinear(computed: Computed, reasons: Mapping[str, str]) -> None:
    """A measured case above 100% efficiency beyond its noise tolerance is published only with
    a reason (``--superlinear CASE REASON``); a reason for any other case is a mistake."""
    flagged = {s.case_id: s for s in computed.summaries if s.superlinear}
    unexplained = [s for case_id, s in sorted(flagged.items()) if case_id not in reasons]
    if unexplained:
        raise VouchingError(
            "measured faster than perfect scaling (a real run rarely is; a log edited to be "
            "faster easily is): check these cases' logs and their 1n1g's, re-run them, or "
            "publish each with --superlinear CASE REASON (the reason is recorded in the "
            "version):\n"
            + "\n".join(
                f"  {s.case_id}: efficiency {s.efficiency:.2%} (speedup {s.speedup:.3f} on "
                f"{s.case.topology.world_size} devices), above 100% by more than its noise "
                f"tolerance {s.superlinear_tolerance:.2%} (max({SUPERLINEAR_FLOOR:.0%}, CV "
                f"{s.stats.cv:.2%} + its 1n1g's CV {s.baseline_cv:.2%}))"
                for s in unexplained
            )
        )
    known = {s.case_id: s for s in computed.summaries}
    for case_id in sorted(set(reasons) - set(flagged)):
        if case_id not in known:
            raise VouchingError(
                f"--superlinear {case_id}: no such case in the sessions"
                f"{did_you_mean(case_id, known)}"
            )
        efficiency = known[case_id].efficiency
        shown = "no efficiency" if efficiency is None else f"efficiency {efficiency:.2%}"
        raise VouchingError(
            f"--superlinear {case_id}: the case is not above 100% beyond its noise tolerance "
            f"({shown}): drop the reason"
        )
