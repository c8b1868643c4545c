"""driver/signing.py: real OpenSSH signatures (ssh-keygen -Y sign/verify) over real keys."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from driver.signing import (
    RELEASE_NAMESPACE,
    SESSION_NAMESPACE,
    SigningError,
    configured_key,
    listed_keys,
    sign,
    verify,
)


def new_key(folder: Path, name: str) -> Path:
    key = folder / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)],
                   check=True)  # fmt: skip
    return key


def allow(allowed: Path, principal: str, key: Path) -> None:
    kind, blob = key.with_suffix(".pub").read_text().split()[:2]
    with allowed.open("a") as out:
        out.write(f"{principal} {kind} {blob}\n")


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, Path, Path]:
    key = new_key(tmp_path, "lab")
    allowed = tmp_path / "allowed_signers"
    allow(allowed, "lab@example.org", key)
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"logs": {"node0.log": "ab12"}}\n')
    sign(manifest, key, SESSION_NAMESPACE)
    return manifest, key, allowed


def test_a_signed_manifest_names_who_signed_it(signed: tuple[Path, Path, Path]) -> None:
    manifest, _key, allowed = signed
    signer = verify(manifest, allowed, SESSION_NAMESPACE)
    assert signer.principal == "lab@example.org" and signer.key.startswith("ED25519 key SHA256:")
    assert (
        manifest.with_name("manifest.json.sig")
        .read_text()
        .startswith("-----BEGIN SSH SIGNATURE-----")
    )


def test_one_changed_byte_is_named(signed: tuple[Path, Path, Path]) -> None:
    manifest, _key, allowed = signed
    manifest.write_text(manifest.read_text().replace("ab12", "ab13"))
    with pytest.raises(SigningError, match="does not verify for these bytes"):
        verify(manifest, allowed, SESSION_NAMESPACE)


def test_a_signature_is_only_good_in_its_namespace(signed: tuple[Path, Path, Path]) -> None:
    manifest, _key, allowed = signed
    with pytest.raises(SigningError, match="namespace does not match"):
        verify(manifest, allowed, RELEASE_NAMESPACE)


def test_a_key_not_in_allowed_signers_is_refused(
    signed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    manifest, _key, _allowed = signed
    other = tmp_path / "other_signers"
    allow(other, "someone@else", new_key(tmp_path, "intruder"))
    with pytest.raises(SigningError, match="does not list"):
        verify(manifest, other, SESSION_NAMESPACE)
    # and a signature made with a key the list does not hold, over the same bytes
    sign(manifest, tmp_path / "intruder", SESSION_NAMESPACE)
    with pytest.raises(SigningError, match="does not list"):
        verify(manifest, signed[2], SESSION_NAMESPACE)


def test_unsigned_and_missing_files_say_so(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}\n")
    with pytest.raises(SigningError, match="no signature .* unsigned"):
        verify(manifest, tmp_path / "allowed_signers", SESSION_NAMESPACE)
    manifest.with_name("manifest.json.sig").write_text("not a signature\n")
    with pytest.raises(SigningError, match="no such allowed-signers file"):
        verify(manifest, tmp_path / "allowed_signers", SESSION_NAMESPACE)


def test_the_key_comes_from_the_option_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DLPERF_SIGNING_KEY", raising=False)
    assert configured_key() is None
    key = new_key(tmp_path, "lab")
    monkeypatch.setenv("DLPERF_SIGNING_KEY", str(key))
    assert configured_key() == key
    with pytest.raises(SigningError, match="--signing-key .*nope: no such key file"):
        configured_key(tmp_path / "nope")
    monkeypatch.setenv("DLPERF_SIGNING_KEY", str(tmp_path / "gone"))
    with pytest.raises(SigningError, match="DLPERF_SIGNING_KEY .*gone: no such key file"):
        configured_key()


# --------------------------------------------------------------------------------------------
# Each allowed-signers and signature case its own message, naming the file and the fix


def key_line(key: Path) -> str:
    kind, blob = key.with_suffix(".pub").read_text().split()[:2]
    return f"{kind} {blob}"


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda path: None, "no such allowed-signers file; give a file listing"),
        (lambda path: path.mkdir(), "a folder where the allowed-signers file should be"),
        (
            lambda path: os.mkfifo(path),
            "a FIFO (named pipe) where the allowed-signers file "
            "should be (not read: it could block)",
        ),
    ],
    ids=["missing", "folder", "fifo"],
)
def test_an_allowed_signers_file_that_is_not_a_file_is_named_never_read(
    signed: tuple[Path, Path, Path], tmp_path: Path, make: Callable[[Path], None], expected: str
) -> None:
    manifest, _key, _allowed = signed
    odd = tmp_path / "odd_signers"
    make(odd)
    started = time.monotonic()
    with pytest.raises(SigningError) as raised:
        verify(manifest, odd, SESSION_NAMESPACE)
    assert str(raised.value).startswith(f"{odd}: ") and expected in str(raised.value)
    assert "lists" not in str(raised.value).split(";")[0]  # never "lists nobody"
    assert time.monotonic() - started < 5  # a FIFO is never opened
    with pytest.raises(SigningError, match="no such allowed-signers file|where the allowed"):
        listed_keys(odd)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ('valid-before="20200101"', "listed with valid-before=20200101, and now is outside"),
        ('valid-after="29990101Z"', "listed with valid-after=29990101Z, and now is outside"),
        ("cert-authority", "lists as cert-authority: that trusts certificates"),
    ],
    ids=["expired", "not-yet-valid", "cert-authority"],
)
def test_a_listed_key_it_does_not_trust_now_says_why(
    signed: tuple[Path, Path, Path], tmp_path: Path, options: str, expected: str
) -> None:
    manifest, key, _allowed = signed
    limited = tmp_path / "limited_signers"
    limited.write_text(f"# the lab\nlab@example.org {options} {key_line(key)}\n")
    with pytest.raises(SigningError) as raised:
        verify(manifest, limited, SESSION_NAMESPACE)
    message = str(raised.value)
    assert message.startswith(f"{manifest}.sig: signed by ED25519 key SHA256:"), message
    assert f"{limited} line 2" in message and expected in message, message


def test_an_over_long_principal_is_named_with_its_line(
    signed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    manifest, key, _allowed = signed
    long = tmp_path / "long_signers"
    long.write_text(f"{'a' * 5000}@example.org {key_line(key)}\n")
    with pytest.raises(SigningError, match=f"{long} line 1: a principal of 5012 characters "
                                           r"\(at most 256\); name the signer"):  # fmt: skip
        verify(manifest, long, SESSION_NAMESPACE)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"not a signature\n", "not an SSH signature (no '-----BEGIN SSH SIGNATURE-----'"),
        (
            b"-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n",
            "not an SSH signature",
        ),
        (
            b"-----BEGIN SSH SIGNATURE-----\n" + b"U1NIU0lH" * 6_250_000,
            "50000030 bytes, not an SSH signature (those are under 16384 bytes)",
        ),
    ],
    ids=["text", "armour-without-sshsig", "50MB"],
)
def test_a_malformed_or_oversized_signature_is_named_before_ssh_keygen(
    signed: tuple[Path, Path, Path], content: bytes, expected: str
) -> None:
    manifest, _key, allowed = signed
    manifest.with_name("manifest.json.sig").write_bytes(content)
    started = time.monotonic()
    with pytest.raises(SigningError) as raised:
        verify(manifest, allowed, SESSION_NAMESPACE)
    assert str(raised.value).startswith(f"{manifest}.sig: ") and expected in str(raised.value)
    assert "ssh-keygen -Y sign" in str(raised.value)  # the fix
    assert time.monotonic() - started < 5  # never a 60 s wait on ssh-keygen


def test_an_empty_signing_key_is_refused_not_shown_as_dot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DLPERF_SIGNING_KEY", raising=False)
    with pytest.raises(SigningError, match="--signing-key is empty: give the path") as raised:
        configured_key("")
    assert " . " not in str(raised.value) and ".:" not in str(raised.value)
