"""driver/signing.py: real OpenSSH signatures (ssh-keygen -Y sign/verify) over real keys."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from driver.signing import (
    RELEASE_NAMESPACE,
    SESSION_NAMESPACE,
    SigningError,
    configured_key,
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
    assert manifest.with_name("manifest.json.sig").read_text().startswith(
        "-----BEGIN SSH SIGNATURE-----"
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
