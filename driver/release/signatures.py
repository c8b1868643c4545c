"""Who vouches for a version: its sessions' seals and signatures, and the version's own.

A session (``driver.model.seal``) is *signed* when its archive holds ``session-manifest.json``
with a ``.sig`` that verifies against the allowed-signers file in the ``dlperf-session``
namespace; every other session is *unsigned*.

Who is trusted comes from outside the data (:func:`trust_anchor`, like git's
``gpg.ssh.allowedSignersFile``): ``--allowed-signers FILE``, else ``$DLPERF_ALLOWED_SIGNERS``,
else ``~/.config/dlperf/allowed_signers`` (``$XDG_CONFIG_HOME``), and only when none of them is
set the reports folder's own ``allowed_signers``, which ships with the versions it vouches for
(a forger who can write the versions can write it): the verdict and the README then say so.

Either way a session whose files differ from its seal (a log, a record or a
fingerprint changed, a file added, a finished repeat removed) is refused by the release and
failed by the audit, naming the file. A signature that does not verify (another key, another
namespace, changed bytes) is refused too, never taken as "unsigned": only a session with no
signature at all is released unsigned, and marked so.

A version is signed when ``--signing-key`` (or ``$DLPERF_SIGNING_KEY``) is given: the release
signs ``manifest.json`` in the ``dlperf-release`` namespace (``manifest.json.sig``) with a key the
allowed-signers file lists (else it refuses), and records in the manifest, before signing, that
the version is signed and by which key; the audit verifies that signature and says who signed.

An allowed-signers file that lists no key trusts nobody: sessions and versions with no signature
release and audit as unsigned, and a signature present cannot be checked, which the release
refuses and the audit fails, each naming the file and the fix (list the signer's key there).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from driver.model.drift import changes
from driver.model.seal import SEAL, SEAL_SIGNATURE, SealError, load_seal
from driver.signing import (
    RELEASE_NAMESPACE,
    SESSION_NAMESPACE,
    SIGNATURE_SUFFIX,
    Signer,
    SigningError,
    listed_keys,
    verify_bytes,
)

ALLOWED_SIGNERS = "allowed_signers"  # in the reports folder, beside the versions
SIGNED, UNSIGNED = "signed", "unsigned"
VERSION_SIGNATURE = "manifest.json" + SIGNATURE_SUFFIX


ALLOWED_SIGNERS_VARIABLE = "DLPERF_ALLOWED_SIGNERS"
OWN, OUTSIDE = "own", "outside"  # the manifest's signatures.trust: which file the release used


def user_allowed_signers() -> Path:
    """The per-user file (git's ``gpg.ssh.allowedSignersFile``, in the XDG config folder)."""
    config = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(config) / "dlperf" / ALLOWED_SIGNERS


@dataclass(frozen=True)
class TrustAnchor:
    """The allowed-signers file signatures are checked against, where it was named, and whether
    it lies inside the reports folder it vouches for (``own``: whoever writes the versions
    writes it too)."""

    path: Path
    source: str
    own: bool

    def verdict(self) -> str:
        if self.own:
            return (
                f"trusted by the version's own allowed_signers ({self.path}), which comes with "
                "the data it vouches for: audit with a file of keys you hold yourself "
                f"(--allowed-signers FILE, ${ALLOWED_SIGNERS_VARIABLE} or {user_allowed_signers()})"
            )
        return f"trusted by {self.path} ({self.source})"


# Why a signature checked against the reports folder's own list proves nothing to a reader.
OWN_ANCHOR = (
    "the only allowed-signers file is the reports folder's own, which comes with the data it "
    "vouches for (whoever can write the versions can write it): it proves no signature"
)


def outside_anchor() -> str:
    """What ``--require-signed`` needs where the only anchor is :data:`OWN_ANCHOR`."""
    return (
        "signatures checked against a file of keys you hold yourself: name it with "
        f"--allowed-signers FILE, ${ALLOWED_SIGNERS_VARIABLE} or {user_allowed_signers()}"
    )


def trust_anchor(explicit: str | Path | None, reports_root: Path) -> TrustAnchor:
    """The allowed-signers file a release or an audit of ``reports_root`` trusts:
    ``explicit`` (``--allowed-signers``), else ``$DLPERF_ALLOWED_SIGNERS``, else the per-user
    file where it exists, else the reports folder's own. A file named but missing, a folder or
    a FIFO is a SigningError with the fix, never "lists nobody"."""
    variable = os.environ.get(ALLOWED_SIGNERS_VARIABLE)
    for source, named in (
        ("--allowed-signers", explicit),
        (f"${ALLOWED_SIGNERS_VARIABLE}", variable),
    ):
        if named is None:
            continue
        if str(named).strip() == "":
            raise SigningError(
                f"{source} is empty: give the allowed-signers file of the keys you trust "
                "('<principal> <key type> <public key>' per line, git's format)"
            )
        path = Path(named).expanduser()
        listed_keys(path)
        return TrustAnchor(path, source, _inside(path, reports_root))
    user = user_allowed_signers()
    if os.path.lexists(user):
        listed_keys(user)
        return TrustAnchor(user, "the per-user file", _inside(user, reports_root))
    own = Path(reports_root) / ALLOWED_SIGNERS
    return TrustAnchor(own, "the reports folder's own", True)


def _inside(path: Path, folder: Path) -> bool:
    return Path(path).resolve().is_relative_to(Path(folder).resolve())


@dataclass
class Signatures:
    """Every session's signature status (the manifest's ``signatures.sessions``) and the
    problems found: (archive member, what is wrong)."""

    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    signers: dict[str, Signer] = field(default_factory=dict)  # session -> who signed it
    problems: list[tuple[str, str]] = field(default_factory=list)


def _untrusted(allowed: Path) -> str:
    return (
        f"signed, but {allowed} lists no key to check it against: list the signer's public key "
        "there ('<principal> <key type> <public key>', git's format) or name another file with "
        "--allowed-signers"
    )


def session_signatures(members: Mapping[str, bytes], allowed: Path) -> Signatures:
    """The seal and signature of every session among a release's archive members
    (``<session>/...``), checked against its files and ``allowed``."""
    out = Signatures()
    by_session: dict[str, dict[str, bytes]] = {}
    for member, data in members.items():
        session, _, rel = member.partition("/")
        by_session.setdefault(session, {})[rel] = data
    try:
        trusted, unreadable = listed_keys(allowed) > 0, None
    except SigningError as error:
        trusted, unreadable = False, str(error)
    for session, files in sorted(by_session.items()):
        seal_bytes, signature = files.pop(SEAL, None), files.pop(SEAL_SIGNATURE, None)
        where = f"{session}/{SEAL}"
        if seal_bytes is None:
            if signature is not None:
                out.problems.append((f"{session}/{SEAL_SIGNATURE}", f"a signature of no {SEAL}"))
            out.sessions[session] = {"status": UNSIGNED, "reason": f"not sealed: no {SEAL}"}
            continue
        try:
            sealed = load_seal(seal_bytes, where)
        except SealError as error:
            out.problems.append((where, str(error).removeprefix(f"{where}: ")))
            continue
        if signature is None:
            reason = f"sealed, not signed: no {SEAL_SIGNATURE}"
            out.sessions[session] = {"status": UNSIGNED, "reason": reason}
        elif not trusted:
            out.problems.append((f"{session}/{SEAL_SIGNATURE}", unreadable or _untrusted(allowed)))
        else:
            try:
                signer = verify_bytes(seal_bytes, signature, allowed, SESSION_NAMESPACE, where)
            except SigningError as error:
                out.problems.append(_named(str(error), where))
            else:
                out.signers[session] = signer
                out.sessions[session] = {
                    "status": SIGNED, "principal": signer.principal, "key": signer.key
                }  # fmt: skip
        if session in out.sessions and sealed.adopted:  # vouched for by a person (--adopt)
            out.sessions[session]["adopted"] = sorted(sealed.adopted)
        for rel, what in changes(sealed, files, signed=signature is not None):
            out.problems.append((f"{session}/{rel}", what))
    return out


def _named(message: str, where: str) -> tuple[str, str]:
    """A signing error as (the file it names, the rest): the seal or its signature."""
    for name in (where + SIGNATURE_SUFFIX, where):
        if message.startswith(f"{name}: "):
            return name, message.removeprefix(f"{name}: ")
    return where, message


def version_signature(
    manifest_bytes: bytes, signature: bytes | None, recorded: dict[str, Any], allowed: Path
) -> tuple[Signer | None, list[str]]:
    """Who signed a version's manifest (None where it is unsigned), and what is wrong with its
    signature: missing where the manifest says it is signed, present where it says unsigned,
    not verifying, or by another key than the manifest names."""
    signed = recorded.get("status") == SIGNED
    if signature is None:
        return None, ["missing: the manifest says the version is signed"] if signed else []
    if not signed:
        return None, ["a signature of a version whose manifest says it is unsigned"]
    try:
        if listed_keys(allowed) == 0:
            return None, [_untrusted(allowed)]
    except SigningError as error:
        return None, [str(error)]
    try:
        signer = verify_bytes(manifest_bytes, signature, allowed, RELEASE_NAMESPACE,
                              "manifest.json")  # fmt: skip
    except SigningError as error:
        return None, [str(error)]
    if signer.key != recorded.get("key"):
        return signer, [f"signed by {signer.key}, but the manifest names {recorded.get('key')}"]
    return signer, []


def describe(status: dict[str, Any]) -> str:
    """One status as the audit and the README say it."""
    if status.get("status") != SIGNED:
        return f"unsigned: {status.get('reason', 'no signature')}"
    return f"signed by {status.get('principal')} ({status.get('key')})"
