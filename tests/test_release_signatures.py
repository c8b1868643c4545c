"""driver/release/signatures.py through `dlperf release` and `dlperf audit`: real calibration
sessions sealed with real keys (ssh-keygen), versions signed or unsigned and marked so."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from driver.frontend.cli import main
from driver.model.drift import seal_session
from driver.model.seal import SEAL_SIGNATURE
from driver.release.audit import audit
from driver.release.refusals import ReleaseError
from driver.release.release import release
from driver.release.signatures import VERSION_SIGNATURE
from tests.synth import cached_session
from tests.test_signing import allow, new_key


def quiet(_line: str) -> None:
    pass


@pytest.fixture(autouse=True)
def no_trust_anchor_of_the_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests name their own allowed-signers files: none from the user's environment."""
    monkeypatch.delenv("DLPERF_ALLOWED_SIGNERS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    """A reports folder whose allowed_signers lists the lab's key (``lab`` beside it)."""
    folder = tmp_path / "reports"
    folder.mkdir()
    allow(folder / "allowed_signers", "lab@example.org", new_key(tmp_path, "lab"))
    return folder


def session_copy(tmp_path: Path, name: str = "run", key: Path | None = None) -> Path:
    root = Path(shutil.copytree(cached_session(), tmp_path / "results" / name))
    if key is not None:
        assert seal_session(root, key).written
    return root


def rows(version: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO((version / "results.csv").read_text())))


def test_a_signed_session_and_version_say_who_signed(tmp_path: Path, reports: Path) -> None:
    key = tmp_path / "lab"
    session = session_copy(tmp_path, key=key)
    version = release("v1.0", [session], reports_root=reports, compute_flops=False,
                      printer=quiet, signing_key=key)  # fmt: skip
    assert (version / VERSION_SIGNATURE).is_file()
    manifest = json.loads((version / "manifest.json").read_text())
    version_status = manifest["signatures"]["version"]
    assert version_status["status"] == "signed" and version_status["principal"] == "lab@example.org"
    assert manifest["signatures"]["sessions"]["run"]["key"] == version_status["key"]
    readme = (version / "README.md").read_text()
    assert f"This version is signed by lab@example.org ({version_status['key']})" in readme
    assert "| `run`     | signed      | lab@example.org |" in readme
    for row in rows(version)[:3]:
        assert (row["session_signature"], row["session_signed_by"], row["version_signature"]) == (
            "signed", "lab@example.org", "signed"
        )  # fmt: skip
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["audit", str(version)]) == 0
    said = out.getvalue()
    assert f"signature: version signed by lab@example.org ({version_status['key']})" in said
    assert "signature: session run signed by lab@example.org" in said


def test_an_unsigned_session_or_version_is_released_only_as_unsigned(
    tmp_path: Path, reports: Path
) -> None:
    session = session_copy(tmp_path)  # never sealed (a kit before seals), no key
    version = release("v1.0", [session], reports_root=reports, compute_flops=False,
                      printer=quiet)  # fmt: skip
    assert not (version / VERSION_SIGNATURE).exists()
    readme = (version / "README.md").read_text()
    assert "This version is **unsigned** (released without a signing key)" in readme
    unsigned = "| `run`     | **unsigned** | -           | not sealed: no session-manifest.json |"
    assert unsigned in readme
    assert {(r["session_signature"], r["version_signature"]) for r in rows(version)
            if r["row"] == "case"} == {("unsigned", "unsigned")}  # fmt: skip
    data = json.loads((version / "results.json").read_text())
    assert {c["session_signature"] for c in data["cases"]} == {"unsigned"}
    report = audit(version)
    assert report.ok, report.text()
    assert report.signatures == [
        "version unsigned: released without a signing key",
        "session run unsigned: not sealed: no session-manifest.json",
    ]


def test_the_forged_session_of_the_issue_is_named_by_release_and_audit(
    tmp_path: Path, reports: Path
) -> None:
    """1n2g logs made 30% faster and re-hashed with the kit's own functions: before seals this
    was reported, released at 130% efficiency and audited clean."""
    from tests.forgery import speed_up_case

    key = tmp_path / "lab"
    session = session_copy(tmp_path, key=key)
    case = "calibration/calibration/1n2g/bs8/fp32/synthetic"
    genuine = release("v1.0", [session], reports_root=reports, compute_flops=False,
                      printer=quiet, signing_key=key)  # fmt: skip
    speed_up_case(session, case, 1.3)
    with pytest.raises(ReleaseError) as refused:
        release("v1.1", [session], reports_root=reports, compute_flops=False, printer=quiet,
                changelog="faster", signing_key=key)  # fmt: skip
    message = str(refused.value)
    for repeat in ("repeat-01", "repeat-02", "repeat-03"):
        folder = session / "cases" / case / repeat
        assert f"{folder}/node0.log: log changed after signing (sha256 " in message
        changed = re.search(rf"{re.escape(str(folder))}/record\.json: record changed after "
                            r"signing \(throughput ([0-9.]+) sealed, ([0-9.]+) now\)", message)
        assert changed and float(changed[2]) / float(changed[1]) == pytest.approx(1.3, rel=1e-3)

    # The same forgery inside the released version, every checksum of its manifest re-hashed:
    # the session's seal names the log, the version's signature the manifest.
    from tests.forgery import faster_log
    from tests.test_hostile_records import editable_copy, member_edit

    copy = editable_copy(genuine, tmp_path / "copy" / "v1.0")
    shutil.copyfile(reports / "allowed_signers", tmp_path / "copy" / "allowed_signers")
    member_edit(rf"{case}/repeat-01/node0\.log$",
                lambda data: faster_log(data.decode(), 1.3).encode())(copy)  # fmt: skip
    report = audit(copy)
    found = {(f.file, f.cell): f.published for f in report.findings}
    assert found[(f"run/cases/{case}/repeat-01/node0.log", "seal")].startswith(
        "log changed after signing"
    )
    assert "does not verify for these bytes" in found[(VERSION_SIGNATURE, "signature")]


def test_a_key_the_release_cannot_check_signs_nothing(tmp_path: Path, reports: Path) -> None:
    stranger = new_key(tmp_path, "stranger")
    session = session_copy(tmp_path)
    with pytest.raises(ReleaseError) as refused:
        release("v1.0", [session], reports_root=reports, compute_flops=False, printer=quiet,
                signing_key=stranger)  # fmt: skip
    public = " ".join(stranger.with_suffix(".pub").read_text().split()[:2])
    allowed = reports / "allowed_signers"
    assert str(refused.value) == (
        f"--signing-key {stranger}: {allowed} does not list this key (ED25519 key SHA256:"
        + str(refused.value).split("SHA256:")[1].split(")")[0]
        + "), and a version is signed only with a key its audit can check: add the line "
        f"'<you@example.org> {public}' to {allowed}"
    )
    assert not (reports / "v1.0").exists()


def test_without_allowed_signers_a_signature_cannot_be_trusted(
    tmp_path: Path, reports: Path
) -> None:
    key = tmp_path / "lab"
    session = session_copy(tmp_path, key=key)
    version = release("v1.0", [session], reports_root=reports, compute_flops=False,
                      printer=quiet, signing_key=key)  # fmt: skip
    (reports / "allowed_signers").write_text("# nobody yet\n")
    with pytest.raises(ReleaseError) as refused:
        release("v1.1", [session], reports_root=reports, compute_flops=False, printer=quiet,
                changelog="again")  # fmt: skip
    untrusted = f"{session / SEAL_SIGNATURE}: signed, but {reports / 'allowed_signers'} lists no"
    assert untrusted in str(refused.value)
    report = audit(version)
    named = {(f.file, f.cell) for f in report.findings}
    assert (VERSION_SIGNATURE, "signature") in named and ("run/" + SEAL_SIGNATURE, "seal") in named
    # unsigned sessions and versions need no key at all
    plain = session_copy(tmp_path, "plain")
    assert audit(release("v1.2", [plain], reports_root=reports, compute_flops=False,
                         printer=quiet, changelog="unsigned")).ok  # fmt: skip


# --------------------------------------------------------------------------------------------
# The trust anchor comes from outside the data


def cli(argv: list[str]) -> tuple[int, str]:
    from tests.test_hostile_records import run_cli

    return run_cli(argv)


def test_a_forger_who_lists_their_own_key_in_the_reports_folder_is_caught_by_your_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's forgery 4: a session made 30% faster with the kit's own functions, sealed and
    signed by the forger's key, released into a reports folder whose allowed_signers names that
    key "lab@example.org". Checked against that file it reads as the lab's; checked against the
    auditor's own file (option, environment or per-user file) it fails, naming the key."""
    from tests.forgery import speed_up_case

    lab, forger = new_key(tmp_path, "lab"), new_key(tmp_path, "forger")
    mine = tmp_path / "my_signers"  # the auditor's own file, outside any reports folder
    allow(mine, "lab@example.org", lab)
    session = session_copy(tmp_path, key=lab)
    speed_up_case(session, "calibration/calibration/1n2g/bs8/fp32/synthetic", 1.3)
    (session / "session-manifest.json").unlink()
    (session / SEAL_SIGNATURE).unlink()
    assert seal_session(session, forger).written
    forged_reports = tmp_path / "forged"
    forged_reports.mkdir()
    allow(forged_reports / "allowed_signers", "lab@example.org", forger)
    lines: list[str] = []
    reason = {"calibration/calibration/1n2g/bs8/fp32/synthetic": "forged"}
    version = release("v1.0", [session], reports_root=forged_reports, compute_flops=False,
                      printer=lines.append, signing_key=forger, superlinear=reason)  # fmt: skip
    assert any("trusted by the version's own allowed_signers" in line for line in lines), lines
    readme = (version / "README.md").read_text()
    assert "checked these signatures against the reports folder's own `allowed_signers`" in readme
    forger_print = json.loads((version / "manifest.json").read_text())["signatures"]["version"]
    assert forger_print["key"].startswith("ED25519 key SHA256:")
    assert f"signed by lab@example.org ({forger_print['key']})" in readme  # the print beside it

    own = audit(version)
    assert own.ok
    assert own.text().splitlines()[-1].endswith(
        "(signatures trusted by the version's own allowed_signers)"
    )

    def refused_by(report: object) -> None:
        assert not report.ok
        found = {(f.file, f.cell): f.published for f in report.findings}
        assert f"signed by a key that {mine} does not list ({forger_print['key']})" in found[
            (VERSION_SIGNATURE, "signature")
        ]
        assert f"{mine} does not list" in found[("run/" + SEAL_SIGNATURE, "seal")]

    refused_by(audit(version, allowed_signers=mine))
    monkeypatch.setenv("DLPERF_ALLOWED_SIGNERS", str(mine))
    refused_by(audit(version))
    code, text = cli(["audit", str(version), "--reports", str(forged_reports)])
    assert code == 1 and f"signatures trusted by {mine} ($DLPERF_ALLOWED_SIGNERS)" in text, text
    monkeypatch.delenv("DLPERF_ALLOWED_SIGNERS")
    (tmp_path / "config" / "dlperf").mkdir(parents=True)
    shutil.copyfile(mine, tmp_path / "config" / "dlperf" / "allowed_signers")
    refused_by_user = audit(version)
    assert "trusted by" in refused_by_user.trust and "per-user file" in refused_by_user.trust
    assert not refused_by_user.ok
    # and the forger cannot release into a reports folder of a publisher who keeps their own
    with pytest.raises(ReleaseError, match="does not list this key"):
        release("v1.1", [session], reports_root=forged_reports, compute_flops=False,
                printer=quiet, signing_key=forger, changelog="again")  # fmt: skip


def test_an_allowed_signers_file_named_but_unreadable_is_refused_by_each_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = session_copy(tmp_path, key=new_key(tmp_path, "lab"))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for named, expected in ((tmp_path / "gone", "no such allowed-signers file"),
                            (tmp_path, "a folder where the allowed-signers file should be"),
                            (fifo, "a FIFO (named pipe) where")):  # fmt: skip
        for argv in (["report", str(session), "--out", str(tmp_path / "out")],
                     ["release", "v1.0", str(session), "--reports", str(tmp_path / "r"),
                      "--no-flops"],
                     ["audit", "v1.0", "--reports", str(tmp_path / "r")]):  # fmt: skip
            code, text = cli([*argv, "--allowed-signers", str(named)])
            assert code == 2 and f"{named}: " in text and expected in text, (argv, text)
    monkeypatch.setenv("DLPERF_ALLOWED_SIGNERS", "")
    code, text = cli(["audit", "v1.0", "--reports", str(tmp_path / "r")])
    assert code == 2 and "$DLPERF_ALLOWED_SIGNERS is empty" in text, text


def test_require_signed_refuses_a_signed_session_downgraded_to_unsigned(
    tmp_path: Path, reports: Path
) -> None:
    """Edit a signed session, drop its .sig and seal it again with the kit's own function: it
    releases as "unsigned" unless the publisher or the auditor requires signatures."""
    from tests.forgery import speed_up_case

    key = tmp_path / "lab"
    session = session_copy(tmp_path, key=key)
    speed_up_case(session, "calibration/calibration/1n1g/bs8/fp32/synthetic", 1.3)
    (session / SEAL_SIGNATURE).unlink()
    (session / "session-manifest.json").unlink()
    assert seal_session(session, None).written
    allowed = str(shutil.copyfile(reports / "allowed_signers", tmp_path / "my_signers"))
    argv = ["release", "v1.0", str(session), "--reports", str(reports), "--no-flops",
            "--allowed-signers", allowed, "--signing-key", str(key)]  # fmt: skip
    code, text = cli([*argv[:6], "--signing-key", str(key), "--require-signed"])
    assert code == 2, text  # the reports folder's own list: it proves no signature
    assert f"--require-signed: {reports / 'allowed_signers'}: the only allowed-signers " in text
    assert "a file of keys you hold yourself: name it with --allowed-signers FILE" in text
    code, text = cli([*argv, "--require-signed"])
    assert code == 2 and "--require-signed: these sessions are not signed" in text, text
    assert "  run: sealed, not signed: no session-manifest.json.sig" in text
    assert not (reports / "v1.0").exists()
    code, text = cli([*argv[:-2], "--require-signed"])  # no key: the version would be unsigned
    assert code == 2 and "--require-signed: the version would be unsigned" in text, text
    code, text = cli(argv)  # without it: released, marked unsigned
    assert code == 0, text
    code, text = cli(["audit", "v1.0", "--reports", str(reports), "--require-signed",
                      "--allowed-signers", allowed])  # fmt: skip
    assert code == 1 and "run/session-manifest.json: signature: published 'unsigned'" in text
    code, text = cli(["audit", "v1.0", "--reports", str(reports)])
    assert code == 0, text


def test_require_signed_refuses_an_attested_machine_on_an_unsigned_session(
    tmp_path: Path, reports: Path
) -> None:
    """A CPU run imported without a key, then attested as 8x H100: an attestation is no
    signature, and --require-signed refuses the session as unsigned."""
    from driver.core.importlogs import import_run
    from driver.sources.logfacts import Facts
    from tests.test_hostile_imports import dllogger_plain

    log = tmp_path / "cpu.log"
    log.write_text(dllogger_plain(list(range(1, 121))))
    session = tmp_path / "results" / "imported"
    facts = Facts(model="resnet50", batch=64, warmup_steps=20, measured_steps=100)
    import_run(session, "ngc-pytorch", facts, [log])
    code, text = cli(["attest-hardware", str(session), "--label", "8x H100 80GB HBM3",
                      "--source", "the forger says so"])  # fmt: skip
    assert code == 0, text
    allowed = shutil.copyfile(reports / "allowed_signers", tmp_path / "my_signers")
    argv = ["release", "v1.0", str(session), "--reports", str(reports), "--no-flops",
            "--signing-key", str(tmp_path / "lab"), "--require-signed",
            "--allowed-signers", str(allowed)]  # fmt: skip
    code, text = cli(argv)
    assert code == 2 and "--require-signed: these sessions are not signed" in text, text
    assert "  imported: " in text and not (reports / "v1.0").exists()
