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

SESSION_NAMESPACE = "dlperf-session"
RELEASE_NAMESPACE = "dlperf-release"
SIGNATURE_SUFFIX = ".sig"
KEY_VARIABLE = "DLPERF_SIGNING_KEY"  # path of the private key that signs, when configured
_PRINCIPAL = re.compile(r'Good "[^"]+" signature for (?P<principal>.+?) with (?P<key>.+)$')
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
            "-f FILE makes one), or leave it unset to release unsigned"
        )
    return key


def sign(path: Path, key: Path, namespace: str) -> Path:
    """Sign ``path``'s bytes with ``key``; the signature goes beside it (``<path>.sig``),
    written atomically. Returns the signature's path."""
    signature = path.with_name(path.name + SIGNATURE_SUFFIX)
    with tempfile.TemporaryDirectory(prefix=".dlperf-tmp-sign-", dir=path.parent) as scratch:
        # ssh-keygen writes <file>.sig beside the file it signs: sign a copy in scratch.
        copy = Path(scratch) / path.name
        copy.write_bytes(path.read_bytes())
        done = _run([ssh_keygen(), "-Y", "sign", "-f", str(key), "-n", namespace, str(copy)])
        if done.returncode != 0:
            raise SigningError(f"signing {path} with {key} failed: {_last(done.stderr)}")
        os.replace(copy.with_name(copy.name + SIGNATURE_SUFFIX), signature)
    return signature


def verify(path: Path, allowed_signers: Path, namespace: str) -> Signer:
    """The signer of ``path`` (its ``<path>.sig``), if that signature is good for these bytes,
    this namespace and a key listed in ``allowed_signers``; else SigningError saying which."""
    signature = path.with_name(path.name + SIGNATURE_SUFFIX)
    if not signature.is_file():
        raise SigningError(f"{path}: no signature ({signature.name} is missing): unsigned")
    if not allowed_signers.is_file():
        raise SigningError(
            f"{allowed_signers}: no such allowed-signers file; list each trusted key there as "
            "'<principal> <key type> <public key>' (git's format)"
        )
    found = _run([ssh_keygen(), "-Y", "find-principals", "-s", str(signature),
                  "-f", str(allowed_signers)])  # fmt: skip
    principals = [line.strip() for line in found.stdout.splitlines() if line.strip()]
    if found.returncode != 0 or not principals:
        raise SigningError(
            f"{signature}: signed by a key that {allowed_signers} does not list "
            f"({_last(found.stderr) or 'no principal matches'})"
        )
    data = path.read_bytes()
    for principal in principals:
        done = _run([ssh_keygen(), "-Y", "verify", "-f", str(allowed_signers), "-I", principal,
                     "-n", namespace, "-s", str(signature)], stdin=data)  # fmt: skip
        if done.returncode == 0:
            match = _PRINCIPAL.search(done.stdout.strip() or done.stderr.strip())
            key = match.group("key") if match else ""
            return Signer(principal=principal, key=key)
    raise SigningError(
        f"{path}: its signature does not verify for these bytes in namespace {namespace!r} "
        f"(changed after signing, or signed for something else): {_last(done.stderr)}"
    )


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
