"""Hostile corpus: forged and edited signed sessions and versions, through `dlperf release` and
`dlperf audit`.

Every case breaks one thing in a copy of a real calibration session sealed with a real key (or
unsealed, or sealed without a key), or in a version released from it and signed, and must end
in a clear refusal that names the file (``tests/hostile.py`` classifies each): the forged
session of the issue (1n2g logs made 30% faster and re-hashed with the kit's own functions), an
edited record, fingerprint or label, files added or removed after signing, a seal re-written
by the forger, signatures from an unlisted key or another namespace, a missing or empty
allowed-signers file. Without a key the same forgery is released only as "unsigned", and only
with a reason for its superlinear scaling. The counts are printed as ``hostile signatures
corpus: N cases, T tracebacks, S silent``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from driver.model.drift import seal_session
from driver.model.seal import SEAL, SEAL_SIGNATURE, FolderFiles, manifest_of, seal_text
from driver.release.audit import audit
from driver.release.release import release
from driver.release.signatures import VERSION_SIGNATURE
from driver.signing import RELEASE_NAMESPACE, SESSION_NAMESPACE, sign
from tests.forgery import faster_log, speed_up_case
from tests.hostile import SILENT, TRACEBACK, HostileCase, run_corpus
from tests.session_edits import rewrite_headers
from tests.synth import cached_session
from tests.test_hostile_records import Refused, editable_copy, member_edit, refusing, run_cli
from tests.test_signing import allow, new_key

CASE = "calibration/calibration/1n2g/bs8/fp32/synthetic"
FORGED_HARDWARE = "8x H100 80GB HBM3 700W NVLink"


@dataclass(frozen=True)
class Keys:
    lab: Path
    stranger: Path
    allowed: Path  # lists the lab's key only


@dataclass(frozen=True)
class Hostile:
    name: str
    base: str  # "signed" | "sealed" (no key) | "version" (released from "signed", signed)
    apply: Callable[[Path, Path, Keys], tuple[str, ...]]  # (copy, scratch, keys) -> expected
    superlinear: bool = False  # release with a reason for the forged case's scaling
    extra: tuple[str, ...] = ()  # more options of the release ("LAB": the lab's key)
    reason: str = "a forger's reason"  # the superlinear reason, where one is given
    command: str = "release"  # or "report": the session's report names it, exit 1


def repeat(root: Path, number: int = 1) -> Path:
    return root / "cases" / CASE / f"repeat-{number:02d}"


# --------------------------------------------------------------------------------------------
# Sessions


def forged(copy: Path, _scratch: Path, _keys: Keys) -> tuple[str, ...]:
    """The issue's forgery: every 1n2g repeat 30% faster, records re-hashed with the kit."""
    speed_up_case(copy, CASE, 1.3)
    return (f"{repeat(copy)}/node0.log: log changed after signing",)


def forged_and_resealed(copy: Path, _scratch: Path, _keys: Keys) -> tuple[str, ...]:
    """The forgery, then the seal re-written with the kit's own function (no key: the old
    signature kept beside it)."""
    speed_up_case(copy, CASE, 1.3)
    (copy / SEAL).write_bytes(seal_text(manifest_of(copy.name, FolderFiles(copy))))
    return (str(copy / SEAL), "does not verify for these bytes")


def forged_unsigned(copy: Path, _scratch: Path, _keys: Keys) -> tuple[str, ...]:
    """Without a key: the forgery, sealed anew as the kit seals (the old seal removed)."""
    speed_up_case(copy, CASE, 1.3)
    (copy / SEAL).unlink()
    seal_session(copy, None)
    # 1.3 x the calibration's own efficiency: 129.99% to 130.03% as its jitter falls
    return (f"{CASE}: efficiency 1", "above 100% by more than its noise tolerance",
            "--superlinear CASE REASON")  # fmt: skip


def record_extra(copy: Path, _scratch: Path, _keys: Keys) -> tuple[str, ...]:
    path = repeat(copy) / "record.json"
    data = json.loads(path.read_text())
    data["extra"]["telemetry"]["samples"] = 1
    path.write_text(json.dumps(data))
    return (f"{path}: record changed after signing",)


def record_throughput(copy: Path, _scratch: Path, _keys: Keys) -> tuple[str, ...]:
    path = repeat(copy, 2) / "record.json"
    data = json.loads(path.read_text())
    data["measurement"]["throughput"] *= 1.3
    path.write_text(json.dumps(data))
    return (f"{path}: record changed after signing (throughput ",)


def header_edit(change: Callable[[dict], None], expected: str) -> Callable:
    def apply(copy: Path, _scratch: Path, _keys: Keys) -> tuple[str, ...]:
        rewrite_headers(repeat(copy), change)  # every rank's header and the record, re-hashed
        return (f"{repeat(copy)}/node0.log: {expected}",)

    return apply


def other_cpu(header: dict) -> None:
    header["fingerprint"]["cpu_model"] = "Intel Xeon Platinum 8480+"


def other_label(header: dict) -> None:
    header["hardware"] = FORGED_HARDWARE


def other_gpus(header: dict) -> None:
    header["fingerprint"]["gpus"] = [{"name": "NVIDIA H100 80GB HBM3"}] * 8
    header["hardware"] = FORGED_HARDWARE


def telemetry_edit(copy: Path, _scratch: Path, _keys: Keys) -> tuple[str, ...]:
    path = repeat(copy) / "telemetry-node0.jsonl"
    path.write_text(path.read_text().replace('"rss', '"rss_', 1))
    return (f"{path}: changed after signing",)


def repeat_added(copy: Path, _scratch: Path, _keys: Keys) -> tuple[str, ...]:
    added = repeat(copy, 4)
    shutil.copytree(repeat(copy, 3), added)
    data = json.loads((added / "record.json").read_text())
    (added / "record.json").write_text(json.dumps({**data, "repeat": 4}))
    return (f"{added}/node0.log: not in {SEAL}: added after signing",)


def repeat_removed(copy: Path, _scratch: Path, _keys: Keys) -> tuple[str, ...]:
    shutil.rmtree(repeat(copy, 2))
    return (f"{repeat(copy, 2)}/record.json: in {SEAL} but missing: removed after signing",)


def session_json_edit(copy: Path, _scratch: Path, _keys: Keys) -> tuple[str, ...]:
    data = json.loads((copy / "session.json").read_text())
    (copy / "session.json").write_text(json.dumps({**data, "head_node": "dgx-h100"}))
    return (f"{copy / 'session.json'}: changed after signing",)


def signed_by(key: str, namespace: str = SESSION_NAMESPACE) -> Callable:
    def apply(copy: Path, _scratch: Path, keys: Keys) -> tuple[str, ...]:
        sign(copy / SEAL, getattr(keys, key), namespace)
        if namespace != SESSION_NAMESPACE:
            return (str(copy / SEAL), "namespace")
        return (str(copy / SEAL_SIGNATURE), "does not list")

    return apply


def allowed_signers(text: str | None) -> Callable:
    def apply(_copy: Path, scratch: Path, _keys: Keys) -> tuple[str, ...]:
        path = scratch / "allowed_signers"
        if text is None:
            path.unlink()
            return (str(path), "no such allowed-signers file")  # never "lists nobody"
        path.write_text(text)
        return (SEAL_SIGNATURE, str(path))

    return apply


def allowed_signers_odd(kind: str) -> Callable:
    """The allowed-signers file replaced by something that is not one to read."""

    def apply(_copy: Path, scratch: Path, _keys: Keys) -> tuple[str, ...]:
        path = scratch / "allowed_signers"
        path.unlink()
        if kind == "folder":
            path.mkdir()
            return (str(path), "a folder where the allowed-signers file should be")
        os.mkfifo(path)  # a blocking read would hang the release: never opened
        return (str(path), "a FIFO (named pipe) where the allowed-signers file should be")

    return apply


def allowed_line(options: str, principal: str = "lab@example.org") -> Callable:
    """The lab's key listed with ``options`` (a validity window, cert-authority)."""

    def apply(_copy: Path, scratch: Path, keys: Keys) -> tuple[str, ...]:
        kind, blob = keys.lab.with_suffix(".pub").read_text().split()[:2]
        path = scratch / "allowed_signers"
        path.write_text(f"{principal} {options} {kind} {blob}\n".replace("  ", " "))
        if len(principal) > 256:
            return (f"{path} line 1: a principal of {len(principal)} characters",)
        return (str(SEAL_SIGNATURE), f"{path} line 1", options.split("=")[0])

    return apply


def signature_bytes(data: bytes, expected: str) -> Callable:
    def apply(copy: Path, _scratch: Path, _keys: Keys) -> tuple[str, ...]:
        (copy / SEAL_SIGNATURE).write_bytes(data)
        return (str(copy / SEAL_SIGNATURE), expected, "ssh-keygen -Y sign")

    return apply


def downgraded(copy: Path, _scratch: Path, _keys: Keys) -> tuple[str, ...]:
    """Edited, its signature dropped, sealed again by the kit without a key."""
    speed_up_case(copy, CASE, 1.01)
    (copy / SEAL_SIGNATURE).unlink()
    (copy / SEAL).unlink()
    seal_session(copy, None)
    return ("--require-signed", f"{copy.name}: sealed, not signed")


def signature_without_seal(copy: Path, _scratch: Path, _keys: Keys) -> tuple[str, ...]:
    (copy / SEAL).unlink()
    return (str(copy / SEAL_SIGNATURE), f"a signature of no {SEAL}")


def not_a_file(name: str, kind: str, command: str) -> Callable:
    """The seal or its signature replaced by a FIFO or a folder: named by what it is, never
    opened (a read of a FIFO blocks); the report never calls the session "unsigned" or "not
    sealed" for it."""

    def apply(copy: Path, _scratch: Path, _keys: Keys) -> tuple[str, ...]:
        path = copy / name
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        else:
            path.mkdir()
            (path / "x").write_text("x")
        shown = "a FIFO (named pipe)" if kind == "fifo" else "a folder"
        said = (f"seal not read: {name} is not a regular file",) if command == "report" else ()
        return (str(path), f"{shown} where the seal", *said)

    return apply


def seal_text_edit(old: str, new: str) -> Callable:
    def apply(copy: Path, _scratch: Path, _keys: Keys) -> tuple[str, ...]:
        path = copy / SEAL
        text = path.read_text()
        assert old in text, old
        path.write_text(text.replace(old, new, 1))
        return (str(path),)

    return apply


def unsigned_log_edit(copy: Path, _scratch: Path, _keys: Keys) -> tuple[str, ...]:
    speed_up_case(copy, CASE, 1.01)  # within the noise: only the seal can tell
    return (f"{repeat(copy)}/node0.log: log changed after sealing",)


LIVE_REASON = "[click](https://evil.example) **trust me** ![x](https://e.example/x.png)"
ESCAPED_REASON = (
    "\\[click\\](https://evil.example) \\*\\*trust me\\*\\* !\\[x\\](https://e.example/x.png)"
)

SESSION_CASES = [
    Hostile("signed: 1n2g logs 30% faster, re-hashed (the issue's forgery)", "signed", forged),
    Hostile("signed: the forgery with the seal re-written by the kit", "signed",
            forged_and_resealed),
    Hostile("signed: record extra edited", "signed", record_extra),
    Hostile("signed: record throughput x1.3", "signed", record_throughput),
    Hostile("signed: fingerprint cpu_model edited, re-hashed", "signed",
            header_edit(other_cpu, "fingerprint changed after signing (rank 0: cpu_model")),
    Hostile("signed: fingerprint made 8x H100, re-hashed", "signed",
            header_edit(other_gpus, "fingerprint changed after signing (rank 0: gpus")),
    Hostile("signed: hardware label edited, facts kept, re-hashed", "signed",
            header_edit(other_label, "log changed after signing")),
    Hostile("signed: telemetry edited", "signed", telemetry_edit),
    Hostile("signed: a repeat added after signing", "signed", repeat_added),
    Hostile("signed: a finished repeat removed", "signed", repeat_removed),
    Hostile("signed: session.json edited", "signed", session_json_edit),
    Hostile("signed: seal re-signed by an unlisted key", "signed", signed_by("stranger")),
    Hostile("signed: seal signed in the release namespace", "signed",
            signed_by("lab", RELEASE_NAMESPACE)),
    Hostile("signed: allowed_signers missing", "signed", allowed_signers(None)),
    Hostile("signed: allowed_signers lists no key", "signed", allowed_signers("# nobody\n")),
    Hostile("signed: a signature without its seal", "signed", signature_without_seal),
    Hostile("signed: allowed_signers a folder", "signed", allowed_signers_odd("folder")),
    Hostile("signed: allowed_signers a FIFO", "signed", allowed_signers_odd("fifo")),
    Hostile("signed: key listed with an expired valid-before", "signed",
            allowed_line('valid-before="20200101"')),
    Hostile("signed: key listed valid only from 2999", "signed",
            allowed_line('valid-after="29990101"')),
    Hostile("signed: key listed as cert-authority", "signed", allowed_line("cert-authority")),
    Hostile("signed: a 5,000-character principal", "signed",
            allowed_line("", "p" * 5000)),
    Hostile("signed: a malformed .sig", "signed",
            signature_bytes(b"-----BEGIN SSH SIGNATURE-----\nbm9wZQ==\n"
                            b"-----END SSH SIGNATURE-----\n", "not an SSH signature")),
    Hostile("signed: a 50 MB .sig", "signed",
            signature_bytes(b"A" * 50_000_000, "50000000 bytes, not an SSH signature")),
    Hostile("signed: edited, .sig dropped, re-sealed, --require-signed", "signed", downgraded,
            extra=("--require-signed", "--signing-key", "LAB")),
    *(Hostile(f"signed: {name} a {kind}, {command}", "signed", not_a_file(name, kind, command),
              command=command)
      for name in (SEAL, SEAL_SIGNATURE) for kind in ("fifo", "folder")
      for command in ("report", "release")),
    Hostile("signed: seal schema 9", "signed", seal_text_edit('"schema": 1', '"schema": 9')),
    Hostile("signed: seal not JSON", "signed", seal_text_edit("{", "{{")),
    Hostile("sealed: log edited within the noise, re-hashed", "sealed", unsigned_log_edit),
    Hostile("sealed: 1n2g logs 30% faster, sealed anew by the kit", "sealed", forged_unsigned),
    Hostile("sealed: the forgery with a reason: released only as unsigned", "sealed",
            forged_unsigned, superlinear=True),
    Hostile("sealed: a reason holding a link and bold text: escaped in the README", "sealed",
            forged_unsigned, superlinear=True, reason=LIVE_REASON),
]  # fmt: skip


# --------------------------------------------------------------------------------------------
# A signed version


def version_manifest(change: Callable[[dict], None], expected: str = "does not verify") -> Callable:
    def apply(copy: Path, _scratch: Path, _keys: Keys) -> tuple[str, ...]:
        path = copy / "manifest.json"
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        return (VERSION_SIGNATURE, expected)

    return apply


def version_signature_removed(copy: Path, _scratch: Path, _keys: Keys) -> tuple[str, ...]:
    (copy / VERSION_SIGNATURE).unlink()
    return (VERSION_SIGNATURE, "missing: the manifest says the version is signed")


def version_signed_by(key: str, namespace: str = RELEASE_NAMESPACE) -> Callable:
    def apply(copy: Path, _scratch: Path, keys: Keys) -> tuple[str, ...]:
        (copy / VERSION_SIGNATURE).unlink()
        sign(copy / "manifest.json", getattr(keys, key), namespace)
        return (VERSION_SIGNATURE, "namespace" if key == "lab" else "does not list")

    return apply


def archived_forgery(copy: Path, _scratch: Path, _keys: Keys) -> tuple[str, ...]:
    """The issue's forgery inside the version: a 1n2g log of the archive made 30% faster and
    every checksum of the manifest re-hashed."""
    member_edit(rf"{CASE}/repeat-01/node0\.log$",
                lambda data: faster_log(data.decode(), 1.3).encode())(copy)  # fmt: skip
    return (f"{CASE}/repeat-01/node0.log", "log changed after signing")


def archived_seal_removed(copy: Path, _scratch: Path, _keys: Keys) -> tuple[str, ...]:
    member_edit(r"/session-manifest\.json$", lambda _data: b"")(copy)
    return (f"/{SEAL}", "not a session manifest")


VERSION_CASES = [
    Hostile("version: changelog edited", "version",
            version_manifest(lambda m: m.update(changelog="rewritten"))),
    Hostile("version: marked unsigned in its manifest, signature kept", "version",
            version_manifest(lambda m: m["signatures"]["version"].update(status="unsigned"),
                             "a signature of a version whose manifest says it is unsigned")),
    Hostile("version: signature removed", "version", version_signature_removed),
    Hostile("version: re-signed by an unlisted key", "version", version_signed_by("stranger")),
    Hostile("version: signed in the session namespace", "version",
            version_signed_by("lab", SESSION_NAMESPACE)),
    Hostile("version: the issue's forgery in the archive, re-hashed", "version",
            archived_forgery),
    Hostile("version: a session's seal emptied in the archive, re-hashed", "version",
            archived_seal_removed),
    Hostile("version: allowed_signers missing at audit", "version", allowed_signers(None)),
]  # fmt: skip
ALL_CASES = SESSION_CASES + VERSION_CASES


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    folder = tmp_path_factory.mktemp("keys")
    lab, stranger = new_key(folder, "lab"), new_key(folder, "stranger")
    allow(folder / "allowed_signers", "lab@example.org", lab)
    return Keys(lab, stranger, folder / "allowed_signers")


@pytest.fixture(scope="module")
def bases(keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bases")
    signed = Path(shutil.copytree(cached_session(), folder / "signed"))
    assert seal_session(signed, keys.lab).written
    sealed = Path(shutil.copytree(cached_session(), folder / "sealed"))
    assert seal_session(sealed, None).written
    reports = folder / "reports"
    reports.mkdir()
    shutil.copyfile(keys.allowed, reports / "allowed_signers")
    version = release("v0.1", [signed], reports_root=reports, compute_flops=False,
                      printer=lambda _line: None, signing_key=keys.lab)  # fmt: skip
    return {"signed": signed, "sealed": sealed, "version": version}


def unsigned_readme(version: Path, reason: str) -> Callable[[object], bool]:
    """Released with a reason: legitimate when the version says it is unsigned, and the reason
    is shown as text (no link, image or bold of its own)."""

    def check(_output: object) -> bool:
        readme = version / "README.md"
        text = readme.read_text() if readme.exists() else ""
        shown = ESCAPED_REASON if reason == LIVE_REASON else reason
        return "This version is **unsigned**" in text and "| **unsigned** |" in text and (
            f"released with the reason: {shown}" in text and "click](" not in text
        )

    return check


def hostile_case(case: Hostile, bases: dict[str, Path], keys: Keys, scratch: Path) -> HostileCase:
    """Break a fresh copy now; the returned case runs the command on it."""
    scratch.mkdir(parents=True)
    shutil.copyfile(keys.allowed, scratch / "allowed_signers")
    copy = editable_copy(bases[case.base], scratch / bases[case.base].name)
    expect = case.apply(copy, scratch, keys)
    if case.base == "version":

        def run_audit() -> tuple[int, str]:
            report = audit(copy, reports_root=scratch)
            return (0 if report.ok else 1), report.text()

        return HostileCase(case.name, refusing(run_audit), expect, (Refused,))
    reports = scratch / "reports"
    argv = ["release", "v0.9", str(copy), "--reports", str(reports), "--no-flops",
            "--allowed-signers", str(scratch / "allowed_signers")]  # fmt: skip
    if case.command == "report":
        argv = ["report", str(copy), "--out", str(scratch / "out"),
                "--allowed-signers", str(scratch / "allowed_signers")]  # fmt: skip
    argv += [str(keys.lab) if arg == "LAB" else arg for arg in case.extra]
    if case.superlinear:
        argv += ["--superlinear", CASE, case.reason]
        return HostileCase(case.name, refusing(lambda: run_cli(argv)), expect, (Refused,),
                           accepted=unsigned_readme(reports / "v0.9", case.reason))  # fmt: skip
    return HostileCase(case.name, refusing(lambda: run_cli(argv)), expect, (Refused,))


def test_the_corpus_is_refused_clearly_by_name(
    bases: dict[str, Path], keys: Keys, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    counts = run_corpus(
        hostile_case(case, bases, keys, tmp_path / f"c{index}")
        for index, case in enumerate(ALL_CASES)
    )
    with capsys.disabled():
        print("\n" + counts.summary("signatures"))
    failures = [f"{v.case.name}: {v.kind}: {v.detail[-800:]}" for v in counts.failures()]
    assert not failures, failures  # names each traceback, silent or vague case, with its detail
    assert counts.by_kind[TRACEBACK] == 0 and counts.by_kind[SILENT] == 0
    accepted = [v.case.name for v in counts.verdicts if v.kind == "accepted"]
    assert accepted == [
        "sealed: the forgery with a reason: released only as unsigned",
        "sealed: a reason holding a link and bold text: escaped in the README",
    ]


def test_the_untouched_bases_release_and_audit(
    bases: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    """The corpus's baseline: without an edit, both sessions release and the version audits."""
    for name in ("signed", "sealed"):
        code, text = run_cli(["release", "v0.9", str(bases[name]), "--reports",
                              str(tmp_path / name), "--no-flops", "--allowed-signers",
                              str(keys.allowed)])  # fmt: skip
        assert code == 0, text
    report = audit(bases["version"])
    assert report.ok, report.text()
    assert report.signatures[0].startswith("version signed by lab@example.org (ED25519 key")
