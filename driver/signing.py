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

import base64
import binascii
import calendar
import hashlib
import os
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from driver.files import write_bytes

SESSION_NAMESPACE = "dlperf-session"
RELEASE_NAMESPACE = "dlperf-release"
# A refused seal's list of what the run wrote (driver.model.warrant): never a seal's namespace,
# so a claim's signature cannot be taken for a seal's, nor the other way round.
CLAIM_NAMESPACE = "dlperf-session-claim"
SIGNATURE_SUFFIX = ".sig"
KEY_VARIABLE = "DLPERF_SIGNING_KEY"  # path of the private key that signs, when configured
_PRINCIPAL = re.compile(r'Good "[^"]+" signature for (?P<principal>.+?) with (?P<key>.+)$')
_KEY = re.compile(r'Good "[^"]+" signature with (?P<key>.+?)\s*$', re.MULTILINE)
TIMEOUT_S = 60
# An SSH signature is a few hundred bytes (an RSA-16384 one under 5 KiB): a bigger ".sig" is
# refused before ssh-keygen reads it. An allowed-signers file is a list of keys people keep.
MAX_SIGNATURE_BYTES = 16 * 1024
MAX_ALLOWED_SIGNERS_BYTES = 1024 * 1024
MAX_PRINCIPAL = 256  # an e-mail address is at most 254 characters
_ARMOUR = re.compile(
    rb"\A\s*-----BEGIN SSH SIGNATURE-----\s*(?P<body>[A-Za-z0-9+/=\s]+?)\s*"
    rb"-----END SSH SIGNATURE-----\s*\Z"
)
_TIME = re.compile(r"(?P<digits>\d{8}(?:\d{4}(?:\d{2})?)?)(?P<utc>Z?)")


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
    if explicit is not None and str(explicit).strip() == "":
        raise SigningError(
            "--signing-key is empty: give the path of a private SSH key (ssh-keygen -t ed25519 "
            "-f FILE makes one), or leave the option out to stay unsigned"
        )
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


def regular_file(path: Path, what: str, fix: str) -> int:
    """The size of ``path`` when it is a regular file (following symlinks); else SigningError
    naming what it is instead and ``fix``. Checked with ``os.stat`` before any open, so a FIFO
    or a device is never read (a read of a FIFO blocks until someone writes to it)."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        raise SigningError(f"{path}: no such {what}; {fix}") from None
    except OSError as error:
        raise SigningError(f"{path}: cannot read this {what} ({error.strerror}); {fix}") from None
    if stat.S_ISDIR(found.st_mode):
        raise SigningError(f"{path}: a folder where the {what} should be; {fix}")
    if not stat.S_ISREG(found.st_mode):
        kind = "a FIFO (named pipe)" if stat.S_ISFIFO(found.st_mode) else "not a regular file"
        raise SigningError(
            f"{path}: {kind} where the {what} should be (not read: it could block); {fix}"
        )
    return found.st_size


_ALLOWED_FIX = (
    "give a file listing each trusted key as '<principal> <key type> <public key>' "
    "(git's format), with --allowed-signers FILE or $DLPERF_ALLOWED_SIGNERS"
)


@dataclass(frozen=True)
class Listed:
    """One key an allowed-signers file lists: its line, principals, options and fingerprint."""

    line: int
    principals: tuple[str, ...]
    options: tuple[str, ...]
    fingerprint: str  # SHA256:..., as ssh-keygen prints it

    def option(self, name: str) -> str | None:
        for option in self.options:
            key, _, value = option.partition("=")
            if key.lower() == name:
                return value.strip('"') if value else ""
        return None


def allowed_signers_lines(allowed_signers: Path) -> list[Listed]:
    """Every key ``allowed_signers`` lists; SigningError naming the file, the line and the fix
    for a file that is missing, a folder, a FIFO, too big, or a line the kit cannot read (an
    over-long principal, a key that is not base64)."""
    size = regular_file(allowed_signers, "allowed-signers file", _ALLOWED_FIX)
    if size > MAX_ALLOWED_SIGNERS_BYTES:
        raise SigningError(
            f"{allowed_signers}: {size} bytes, more than an allowed-signers file holds (at most "
            f"{MAX_ALLOWED_SIGNERS_BYTES}); {_ALLOWED_FIX}"
        )
    listed = []
    text = allowed_signers.read_bytes().decode(errors="replace")
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{allowed_signers} line {number}"
        try:
            fields = shlex.split(line, comments=False, posix=True)
        except ValueError as error:
            raise SigningError(f"{where}: unreadable ({error}); {_ALLOWED_FIX}") from None
        types = [i for i, f in enumerate(fields) if _KEY_TYPE.fullmatch(f)]
        if not types or types[0] == 0 or types[0] + 1 >= len(fields):
            raise SigningError(
                f"{where}: no '<principal> [options] <key type> <public key>'; {_ALLOWED_FIX}"
            )
        kind = types[0]
        principals = tuple(fields[0].split(","))
        for principal in principals:
            if len(principal) > MAX_PRINCIPAL:
                raise SigningError(
                    f"{where}: a principal of {len(principal)} characters (at most "
                    f"{MAX_PRINCIPAL}); name the signer by an e-mail address or a short name"
                )
        try:
            blob = base64.b64decode(fields[kind + 1], validate=True)
        except (binascii.Error, ValueError):
            raise SigningError(
                f"{where}: the public key is not base64; copy the line from the signer's "
                "'.pub' file"
            ) from None
        fingerprint = "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode()
        options = tuple(o for f in fields[1:kind] for o in f.split(",") if o)
        listed.append(Listed(number, principals, options, fingerprint.rstrip("=")))
    return listed


_KEY_TYPE = re.compile(r"(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp\d+|sk-\S+@openssh\.com)"
                       r"(-cert-v01@openssh\.com)?")  # fmt: skip


def listed_keys(allowed_signers: Path) -> int:
    """How many keys ``allowed_signers`` lists; SigningError (with the fix) when it is missing,
    a folder, a FIFO or unreadable: a file named but absent is never "lists nobody"."""
    return len(allowed_signers_lines(allowed_signers))


def _window(listed: Listed, now: float) -> str | None:
    """Why ``listed``'s valid-after/valid-before window excludes ``now`` (None: it does not)."""
    for name, outside in (("valid-after", lambda t: now < t), ("valid-before", lambda t: now >= t)):
        value = listed.option(name)
        if value is None:
            continue
        match = _TIME.fullmatch(value)
        if match is None:
            return f"its {name}={value!r} is not a time ssh-keygen reads (YYYYMMDD[HHMM[SS]][Z])"
        digits = match["digits"].ljust(14, "0")
        parsed = time.strptime(digits, "%Y%m%d%H%M%S")
        stamp = calendar.timegm(parsed) if match["utc"] else time.mktime(parsed)
        if outside(stamp):
            return f"it is listed with {name}={value}, and now is outside that window"
    return None


def _unlisted(name: str, allowed_signers: Path, key: str | None, reason: str) -> SigningError:
    """Why ``allowed_signers`` does not vouch for the signature's ``key``: not listed at all,
    listed outside its validity window, or listed as a certificate authority only."""
    fingerprint = key.split()[-1] if key else None
    try:
        lines = allowed_signers_lines(allowed_signers)
    except SigningError as error:
        return error
    for listed in lines:
        if fingerprint is None or listed.fingerprint != fingerprint:
            continue
        where = f"{allowed_signers} line {listed.line}"
        if listed.option("cert-authority") is not None:
            return SigningError(
                f"{name}{SIGNATURE_SUFFIX}: signed by {key}, which {where} lists as "
                "cert-authority: that trusts certificates the key signed, not the key's own "
                "signatures; drop 'cert-authority' from the line to trust the key itself"
            )
        window = _window(listed, time.time())
        if window:
            return SigningError(
                f"{name}{SIGNATURE_SUFFIX}: signed by {key}, which {where} names as "
                f"{', '.join(listed.principals)}, but {window}; renew the line's window if the "
                "key is still trusted"
            )
    return SigningError(
        f"{name}{SIGNATURE_SUFFIX}: signed by a key that {allowed_signers} does not list "
        f"({key or reason or 'no principal matches'})"
    )


def _oversized(where: str, size: int) -> SigningError:
    return SigningError(
        f"{where}: {size} bytes, not an SSH signature (those are under {MAX_SIGNATURE_BYTES} "
        "bytes); remove it and sign again (ssh-keygen -Y sign)"
    )


def check_signature(signature: bytes, name: str) -> None:
    """SigningError unless ``signature`` is an armoured SSH signature of a signature's size
    (checked before ssh-keygen reads it: a huge or malformed file is named, not waited on)."""
    where = f"{name}{SIGNATURE_SUFFIX}"
    if len(signature) > MAX_SIGNATURE_BYTES:
        raise _oversized(where, len(signature))
    match = _ARMOUR.match(signature)
    body = b"".join(match["body"].split()) if match else b""
    try:
        decoded = base64.b64decode(body, validate=True) if body else b""
    except (binascii.Error, ValueError):
        decoded = b""
    if not decoded.startswith(b"SSHSIG"):
        raise SigningError(
            f"{where}: not an SSH signature (no '-----BEGIN SSH SIGNATURE-----' block holding "
            "an SSHSIG); remove it and sign again (ssh-keygen -Y sign)"
        )


def read_signature(path: Path) -> bytes:
    """The bytes of the signature file ``path``, its type and size checked before reading."""
    size = regular_file(path, "signature file", "remove it and sign again (ssh-keygen -Y sign)")
    if size > MAX_SIGNATURE_BYTES:
        raise _oversized(str(path), size)
    return path.read_bytes()


def verify(path: Path, allowed_signers: Path, namespace: str) -> Signer:
    """The signer of ``path`` (its ``<path>.sig``), if that signature is good for these bytes,
    this namespace and a key listed in ``allowed_signers``; else SigningError saying which."""
    signature = signature_path(path)
    if not signature.exists() and not signature.is_symlink():
        raise SigningError(f"{path}: no signature ({signature.name} is missing): unsigned")
    return verify_bytes(path.read_bytes(), read_signature(signature), allowed_signers, namespace,
                        str(path))  # fmt: skip


def verify_bytes(
    data: bytes, signature: bytes, allowed_signers: Path, namespace: str, name: str
) -> Signer:
    """The signer of ``data`` (``name`` in messages) by ``signature``, if it is good for these
    bytes, this namespace and a key listed in ``allowed_signers``; else SigningError."""
    allowed_signers_lines(allowed_signers)  # a missing, odd or unreadable file named first
    check_signature(signature, name)
    with tempfile.TemporaryDirectory(prefix="dlperf-verify-") as scratch:
        signature_file = Path(scratch) / "signature"
        signature_file.write_bytes(signature)
        found = _run([ssh_keygen(), "-Y", "find-principals", "-s", str(signature_file),
                      "-f", str(allowed_signers)])  # fmt: skip
        principals = [line.strip() for line in found.stdout.splitlines() if line.strip()]
        if found.returncode != 0 or not principals:
            key = intact_key(data, signature, namespace)
            raise _unlisted(name, allowed_signers, key, _last(found.stderr))
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
    None when the signature does not match the bytes or the namespace (or is no signature)."""
    try:
        check_signature(signature, "signature")
    except SigningError:
        return None
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
