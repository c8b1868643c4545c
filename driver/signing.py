"""Who vouches for a set of bytes: OpenSSH signatures, as git signs commits and tags.

``ssh-keygen -Y sign`` binds a file's bytes to an SSH key under a namespace (``dlperf-session``
for a session's manifest, ``dlperf-release`` for a version's), and ``ssh-keygen -Y verify``
checks them against an ``allowed_signers`` file (git's format: ``principal [options] key``,
one per line). No new dependency: OpenSSH's own client does the cryptography.

What a good signature proves: these bytes, from the holder of this key, unchanged since they
were signed. What it does not prove: that the key holder did not fabricate them. The kit signs
a session where it ran (the head node, when the run ends) and a version when it is released,
so a log edited afterwards, even re-hashed with the kit's own functions, no longer verifies.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from driver.files import write_bytes

SESSION_NAMESPACE = "dlperf-session"
RELEASE_NAMESPACE = "dlperf-release"
SIGNATURE_SUFFIX = ".sig"
KEY_VARIABLE = "DLPERF_SIGNING_KEY"  # path of the private key that signs, when configured
_PRINCIPAL = re.compile(r'Good "[^"]+" signature for (?P<principal>.+?) with (?P<key>.+)$')
_KEY = re.compile(r'Good "[^"]+" signature with (?P<key>.+?)\s*$', re.MULTILINE)
TIMEOUT_S = 60


class SigningError(RuntimeError):
    """A key, a signature or an allowed-signers file that does not do what it must (the
    message names the file and the fix)."""


@dataclass(frozen=True)
class Signer:
    principal: str  # the allowed_signers name the key is listed under
    key: str  # ssh-keygen's description of the key (type and fingerprint)


def ssh_keygen() -> str:
    found = shutil.which("ssh-keygen")
    if found is None:
        raise SigningError("ssh-keygen is not installed (OpenSSH's client: openssh-client)")
    return found


def configured_key(explicit: str | Path | None = None) -> Path | None:
    """The signing key: ``explicit`` (a command-line option), else ``$DLPERF_SIGNING_KEY``,
    else none (unsigned). A key named but missing is an error, never a silent "unsigned"."""
    named = explicit if explicit is not None else os.environ.get(KEY_VARIABLE) or None
    if named is None:
        return None
    key = Path(named).expanduser()
    if not key.is_file():
        source = "--signing-key" if explicit is not None else KEY_VARIABLE
        raise SigningError(
            f"{source} {key}: no such key file; give a private SSH key (ssh-keygen -t ed25519 "
            "-f FILE makes one), or leave it unset to stay unsigned"
        )
    return key


def usable_key(explicit: str | Path | None = None) -> Path | None:
    """:func:`configured_key`, checked to sign now: a run learns of a key that cannot sign
    (not a key, encrypted and no agent) before it runs, not when it ends."""
    key = configured_key(explicit)
    if key is not None:
        sign_bytes(b"dlperf: can this key sign?\n", key, SESSION_NAMESPACE)
    return key


def sign_bytes(data: bytes, key: Path, namespace: str) -> bytes:
    """The armoured SSH signature of ``data`` by ``key`` in ``namespace`` (nothing written)."""
    done = _run([ssh_keygen(), "-Y", "sign", "-f", str(key), "-n", namespace], stdin=data)
    if done.returncode != 0 or "BEGIN SSH SIGNATURE" not in done.stdout:
        raise SigningError(
            f"signing with {key} failed: {_last(done.stderr) or 'no signature written'} (give an "
            "unencrypted private SSH key, or one loaded in ssh-agent)"
        )
    return done.stdout.encode()


def sign(path: Path, key: Path, namespace: str) -> Path:
    """Sign ``path``'s bytes with ``key``; the signature goes beside it (``<path>.sig``),
    written atomically. Returns the signature's path."""
    return write_bytes(signature_path(path), sign_bytes(path.read_bytes(), key, namespace))


def signature_path(path: Path) -> Path:
    return path.with_name(path.name + SIGNATURE_SUFFIX)


def listed_keys(allowed_signers: Path) -> int:
    """How many keys ``allowed_signers`` lists (0 when it is missing: nothing is trusted)."""
    try:
        lines = allowed_signers.read_text(errors="replace").splitlines()
    except OSError:
        return 0
    return sum(1 for line in lines if line.strip() and not line.lstrip().startswith("#"))


def verify(path: Path, allowed_signers: Path, namespace: str) -> Signer:
    """The signer of ``path`` (its ``<path>.sig``), if that signature is good for these bytes,
    this namespace and a key listed in ``allowed_signers``; else SigningError saying which."""
    signature = signature_path(path)
    if not signature.is_file():
        raise SigningError(f"{path}: no signature ({signature.name} is missing): unsigned")
    return verify_bytes(path.read_bytes(), signature.read_bytes(), allowed_signers, namespace,
                        str(path))  # fmt: skip


def verify_bytes(
    data: bytes, signature: bytes, allowed_signers: Path, namespace: str, name: str
) -> Signer:
    """The signer of ``data`` (``name`` in messages) by ``signature``, if it is good for these
    bytes, this namespace and a key listed in ``allowed_signers``; else SigningError."""
    if not allowed_signers.is_file():
        raise SigningError(
            f"{allowed_signers}: no such allowed-signers file; list each trusted key there as "
            "'<principal> <key type> <public key>' (git's format)"
        )
    with tempfile.TemporaryDirectory(prefix="dlperf-verify-") as scratch:
        signature_file = Path(scratch) / "signature"
        signature_file.write_bytes(signature)
        found = _run([ssh_keygen(), "-Y", "find-principals", "-s", str(signature_file),
                      "-f", str(allowed_signers)])  # fmt: skip
        principals = [line.strip() for line in found.stdout.splitlines() if line.strip()]
        if found.returncode != 0 or not principals:
            key = intact_key(data, signature, namespace)
            raise SigningError(
                f"{name}{SIGNATURE_SUFFIX}: signed by a key that {allowed_signers} does not list "
                f"({key or _last(found.stderr) or 'no principal matches'})"
            )
        for principal in principals:
            done = _run([ssh_keygen(), "-Y", "verify", "-f", str(allowed_signers), "-I",
                         principal, "-n", namespace, "-s", str(signature_file)],
                        stdin=data)  # fmt: skip
            if done.returncode == 0:
                match = _PRINCIPAL.search(done.stdout.strip() or done.stderr.strip())
                return Signer(principal=principal, key=match.group("key") if match else "")
    raise SigningError(
        f"{name}: its signature does not verify for these bytes in namespace {namespace!r} "
        f"(changed after signing, or signed for something else): {_last(done.stderr)}"
    )


def intact_key(data: bytes, signature: bytes, namespace: str) -> str | None:
    """The key (``ED25519 key SHA256:...``) whose signature ``signature`` is for exactly these
    bytes in ``namespace``, whoever holds it (no allowed-signers file: ``check-novalidate``);
    None when the signature does not match the bytes or the namespace."""
    with tempfile.TemporaryDirectory(prefix="dlperf-verify-") as scratch:
        signature_file = Path(scratch) / "signature"
        signature_file.write_bytes(signature)
        done = _run([ssh_keygen(), "-Y", "check-novalidate", "-n", namespace,
                     "-s", str(signature_file)], stdin=data)  # fmt: skip
    match = _KEY.search(done.stdout + done.stderr)
    return match.group("key") if done.returncode == 0 and match else None


def key_description(key: Path) -> str:
    """``ED25519 key SHA256:...``: the key as ``ssh-keygen -Y verify`` names its signer."""
    done = _run([ssh_keygen(), "-l", "-f", str(key)])
    match = re.match(r"\d+ (?P<fingerprint>\S+) .*\((?P<kind>[^)]+)\)\s*$", done.stdout.strip())
    if done.returncode != 0 or match is None:
        raise SigningError(f"{key}: not an SSH key ({_last(done.stderr) or done.stdout.strip()})")
    return f"{match['kind']} key {match['fingerprint']}"


def public_line(key: Path) -> str:
    """``<key type> <public key>`` of a private key: what an allowed-signers line lists."""
    done = _run([ssh_keygen(), "-y", "-f", str(key)], stdin=b"")
    parts = done.stdout.split()
    if done.returncode != 0 or len(parts) < 2:
        raise SigningError(
            f"{key}: not a usable private SSH key ({_last(done.stderr) or 'no public key'}); "
            "give an unencrypted key (ssh-keygen -t ed25519 -N '' -f FILE makes one)"
        )
    return f"{parts[0]} {parts[1]}"


def signer_of_key(key: Path, allowed_signers: Path, namespace: str) -> Signer:
    """Who ``allowed_signers`` says ``key`` is, found by signing a probe with it and verifying
    that; SigningError with the line to add where the file does not list it."""
    probe = b"dlperf: which principal holds this key\n"
    signature = sign_bytes(probe, key, namespace)
    try:
        return verify_bytes(probe, signature, allowed_signers, namespace, str(key))
    except SigningError:
        raise SigningError(
            f"{key}: {allowed_signers} does not list this key ({key_description(key)}), and a "
            "version is signed only with a key its audit can check: add the line "
            f"'<you@example.org> {public_line(key)}' to {allowed_signers}"
        ) from None


def _run(argv: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SigningError(f"{' '.join(argv[:3])} did not answer in {TIMEOUT_S} s") from None
    return subprocess.CompletedProcess(
        argv, done.returncode, done.stdout.decode(errors="replace"),
        done.stderr.decode(errors="replace"),
    )  # fmt: skip


def _last(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
