"""driver/model/seal.py, driver/model/drift.py and sealing at the end of a run: real
calibration sessions, real keys (ssh-keygen), a resumed session sealed again only over what it
held."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from driver.core.runner import run_cases
from driver.core.selftest import calibration_cases
from driver.core.session import Selection, run_session
from driver.model.drift import changes, seal_session, seal_state
from driver.model.results import Session
from driver.model.seal import (
    SEAL,
    SEAL_SIGNATURE,
    FolderFiles,
    adopted_files,
    load_seal,
    sealed_verdicts,
)
from driver.model.warrant import unvouched
from driver.runtimes.local import LocalRuntime
from driver.signing import SESSION_NAMESPACE, verify
from driver.text import markdown_inline
from tests.forgery import speed_up
from tests.synth import cached_session
from tests.test_signing import allow, new_key

CASE_1N2G = "cases/calibration/calibration/1n2g/bs8/fp32/synthetic"


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(cached_session(), tmp_path / "s"))


@pytest.fixture
def lab(tmp_path: Path) -> tuple[Path, Path]:
    """A key and an allowed-signers file that lists it."""
    key = new_key(tmp_path, "lab")
    allowed = tmp_path / "allowed_signers"
    allow(allowed, "lab@example.org", key)
    return key, allowed


def sealed(root: Path):  # noqa: ANN201 - a SessionManifest
    return load_seal((root / SEAL).read_bytes(), SEAL)


def test_a_seal_holds_every_log_record_and_fingerprint(
    copy: Path, lab: tuple[Path, Path]
) -> None:
    key, allowed = lab
    (copy / "report").mkdir()
    (copy / "report" / "report.md").write_text("derived from the rest: never sealed\n")
    outcome = seal_session(copy, key)
    assert outcome.written and outcome.key and outcome.key.startswith("ED25519 key SHA256:")
    assert verify(copy / SEAL, allowed, SESSION_NAMESPACE).principal == "lab@example.org"
    manifest = sealed(copy)
    logs = sorted(copy.glob("cases/**/node*.log"))
    assert len(logs) == 3 * 4  # 1n1g, 1n2g (one node log each) and 2n2g (two), 3 repeats
    for log in logs:
        entry = manifest.files[log.relative_to(copy).as_posix()]
        assert entry.sha256 == hashlib.sha256(log.read_bytes()).hexdigest()
        assert entry.bytes == log.stat().st_size
    assert "session.json" in manifest.files
    assert not any(f.startswith("report/") for f in manifest.files)
    assert manifest.session_json == json.loads((copy / "session.json").read_text())
    repeat = manifest.repeats[f"{CASE_1N2G}/repeat-01"]
    record = json.loads((copy / CASE_1N2G / "repeat-01" / "record.json").read_text())
    assert repeat.verdict == "ok" and repeat.throughput == record["measurement"]["throughput"]
    # both ranks' headers carry the same facts: one group, ranks 0 and 1
    (group,) = repeat.fingerprints
    assert group.ranks == [0, 1] and group.facts == record["header"]["fingerprint"]
    assert changes(manifest, FolderFiles(copy), signed=True) == []


def test_unsigned_without_a_key_and_a_stale_signature_removed(
    copy: Path, lab: tuple[Path, Path]
) -> None:
    key, _allowed = lab
    seal_session(copy, key)
    assert (copy / SEAL_SIGNATURE).is_file()
    outcome = seal_session(copy, None)  # sealed again without a key: the old .sig would lie
    assert outcome.written and outcome.key is None and "unsigned" in outcome.describe()
    assert not (copy / SEAL_SIGNATURE).exists()
    assert sealed(copy).previous["signed_by_key"].startswith("ED25519 key SHA256:")


def test_a_resumed_session_is_sealed_again_over_its_new_repeats(
    tmp_path: Path, lab: tuple[Path, Path]
) -> None:
    key, allowed = lab
    (case,) = calibration_cases(0.01, 8, ["1n1g"], 2, 20)
    session = Session.open(tmp_path / "resumed", {"kind": "test"})
    assert run_cases([case], session, LocalRuntime(), printer=lambda _line: None).ok
    session.note_run({"argv": ["first"]})
    first = seal_session(session.root, key)
    before = (session.root / SEAL).read_bytes()
    # resumed with one repeat more: the runner skips the two finished ones
    assert run_cases([replace(case, repeats=3)], session, LocalRuntime(),
                     printer=lambda _line: None).ok  # fmt: skip
    session.note_run({"argv": ["second"]})  # session.json's runs grow: the kit's own change
    again = seal_session(session.root, key)
    assert first.written and again.written, again.drift
    manifest = sealed(session.root)
    assert sorted(f.rsplit("/", 1)[1] for f in manifest.repeats) == [
        "repeat-01", "repeat-02", "repeat-03"
    ]  # fmt: skip
    assert manifest.previous["sha256"] == hashlib.sha256(before).hexdigest()
    assert verify(session.root / SEAL, allowed, SESSION_NAMESPACE).principal == "lab@example.org"


def test_a_session_edited_since_its_seal_is_not_sealed_again(
    copy: Path, lab: tuple[Path, Path]
) -> None:
    key, _allowed = lab
    seal_session(copy, key)
    before = (copy / SEAL).read_bytes(), (copy / SEAL_SIGNATURE).read_bytes()
    log = copy / CASE_1N2G / "repeat-02" / "node0.log"
    log.write_text(log.read_text().replace('"samples": 8, "step": 12', '"samples": 9, "step": 12'))
    meta = json.loads((copy / "session.json").read_text())
    (copy / "session.json").write_text(json.dumps({**meta, "profile": "dlperf"}))
    (copy / CASE_1N2G / "repeat-01" / "telemetry-node1.jsonl").write_text("{}\n")
    outcome = seal_session(copy, key)
    assert not outcome.written
    assert outcome.drift == [
        f"{CASE_1N2G}/repeat-02/node0.log: changed since it was sealed",
        "session.json: changed since it was sealed",
        f"{CASE_1N2G}/repeat-01/telemetry-node1.jsonl: added to a finished repeat since it was "
        "sealed",
    ]
    assert "remove the seal and its .sig" in outcome.describe()
    # the old seal and signature stay as they were: a release names the log
    assert ((copy / SEAL).read_bytes(), (copy / SEAL_SIGNATURE).read_bytes()) == before
    named = dict(changes(sealed(copy), FolderFiles(copy), signed=True))
    assert named[f"{CASE_1N2G}/repeat-02/node0.log"].startswith("log changed after signing")


def test_a_seal_edited_after_signing_is_not_signed_over(
    copy: Path, lab: tuple[Path, Path]
) -> None:
    key, _allowed = lab
    seal_session(copy, key)
    manifest = json.loads((copy / SEAL).read_text())
    manifest["head_node"] = "elsewhere"
    (copy / SEAL).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    outcome = seal_session(copy, key)
    assert not outcome.written
    assert outcome.drift == [
        f"{SEAL}: changed after it was signed ({SEAL_SIGNATURE} no longer matches)"
    ]


def test_an_attempt_the_kit_set_aside_and_ran_again_is_not_drift(copy: Path) -> None:
    """A repeat that did not finish ok is run again on resume: its folder moves aside as
    ``repeat-NN.failed-1``, unchanged; a finished repeat moved aside is drift."""
    folder = copy / CASE_1N2G / "repeat-03"
    record = json.loads((folder / "record.json").read_text())
    (folder / "record.json").write_text(json.dumps({**record, "verdict": "timeout"}))
    seal_session(copy, None)
    folder.rename(folder.with_name("repeat-03.failed-1"))
    shutil.copytree(copy / CASE_1N2G / "repeat-02", folder)  # its new attempt
    assert seal_session(copy, None).written
    # a finished repeat set aside the same way is not what the kit does
    finished = copy / CASE_1N2G / "repeat-01"
    finished.rename(finished.with_name("repeat-01.failed-1"))
    outcome = seal_session(copy, None)
    assert not outcome.written
    assert f"{CASE_1N2G}/repeat-01/record.json: sealed, now missing" in outcome.drift


def test_changes_name_what_was_added_removed_or_changed(copy: Path) -> None:
    seal_session(copy, None)
    manifest = sealed(copy)
    files = dict(FolderFiles(copy))
    files[f"{CASE_1N2G}/repeat-04/node0.log"] = b"a repeat nobody ran\n"
    del files[f"{CASE_1N2G}/repeat-01/record.json"]
    files["cases/calibration/calibration/1n1g/bs8/fp32/synthetic/case.json"] += b" "
    assert changes(manifest, files, signed=False) == [
        ("cases/calibration/calibration/1n1g/bs8/fp32/synthetic/case.json",
         changes(manifest, files, signed=False)[0][1]),
        (f"{CASE_1N2G}/repeat-04/node0.log", f"not in {SEAL}: added after sealing"),
        (f"{CASE_1N2G}/repeat-01/record.json", f"in {SEAL} but missing: removed after sealing"),
    ]  # fmt: skip
    assert changes(manifest, files, signed=False)[0][1].startswith("changed after sealing (sha256 ")


def test_a_run_seals_its_session_when_it_ends(
    tmp_path: Path, lab: tuple[Path, Path], capsys: pytest.CaptureFixture
) -> None:
    key, allowed = lab
    cases = calibration_cases(0.01, 8, ["1n1g"], 2, 20)
    selection = Selection(cases, "selftest", "test", {})
    root = tmp_path / "results" / "run"
    code = run_session(selection, LocalRuntime(), root, argv=["run"], progress="plain",
                       signing_key=key)  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"sealed: {root / SEAL} (signed with ED25519 key SHA256:" in out
    assert verify(root / SEAL, allowed, SESSION_NAMESPACE).principal == "lab@example.org"
    assert len(sealed(root).repeats) == 2
    # a key named but missing is an error before anything runs
    missing = run_session(selection, LocalRuntime(), tmp_path / "results" / "other",
                          argv=["run"], signing_key=tmp_path / "no-key")  # fmt: skip
    assert missing == 2 and not (tmp_path / "results" / "other").exists()
    assert "--signing-key" in capsys.readouterr().err


def test_a_report_says_who_vouches_for_each_session_and_names_what_changed(
    copy: Path, tmp_path: Path, lab: tuple[Path, Path], capsys: pytest.CaptureFixture
) -> None:
    """``dlperf report`` reads each session against its seal: unsealed, sealed and unsigned,
    signed by a listed key, signed by a key nobody lists, and a log edited after signing."""
    from driver.frontend.cli import main

    key, allowed = lab
    nobody = tmp_path / "nobody"
    nobody.write_text("# no key listed\n")

    def report(extra: list[str]) -> tuple[int, str, str]:
        code = main(["report", str(copy), "--out", str(tmp_path / "r"), *extra])
        out, err = capsys.readouterr()
        return code, (tmp_path / "r" / "report.md").read_text(), err

    (copy / SEAL).unlink(missing_ok=True)
    code, markdown, _ = report(["--allowed-signers", str(allowed)])
    assert code == 0 and "not sealed (no session-manifest.json)" in markdown
    seal_session(copy, None)
    code, markdown, _ = report(["--allowed-signers", str(allowed)])
    assert code == 0 and "sealed, not signed" in markdown
    seal_session(copy, key)
    code, markdown, _ = report(["--allowed-signers", str(allowed)])
    assert code == 0 and "signed by lab@example.org (ED25519 key SHA256:" in markdown
    code, markdown, _ = report(["--allowed-signers", str(nobody)])
    assert code == 0 and markdown_inline(f"a key {nobody} does not list") in markdown
    # a log made 30% faster and re-hashed into its record passes the door: only the seal tells
    repeat = f"{CASE_1N2G}/repeat-01"
    speed_up(copy / repeat, 1.3)
    code, markdown, err = report(["--allowed-signers", str(allowed)])
    assert code == 1 and "Refused" not in markdown  # the door finds nothing wrong
    assert f"**Changed since sealed:** {repeat}/node0.log: log changed after signing" in markdown
    assert f"seal: {copy}/{repeat}/node0.log: log changed after signing" in err
    assert f"{repeat}/record.json: " in err


def test_a_report_names_what_a_release_refuses(
    copy: Path, tmp_path: Path, lab: tuple[Path, Path], capsys: pytest.CaptureFixture
) -> None:
    """A symlink at the session's root and a signature whose seal was removed: ``release``
    refuses both, so ``dlperf report`` names them and exits 1."""
    from driver.frontend.cli import main

    key, allowed = lab
    seal_session(copy, key)
    (copy / "etc").symlink_to("/etc")
    argv = ["report", str(copy), "--out", str(tmp_path / "r"), "--allowed-signers", str(allowed)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"{copy}/etc: a symlink (to /etc): a release refuses it, never follows it" in err
    (copy / "etc").unlink()
    assert main(argv) == 0
    capsys.readouterr()
    (copy / SEAL).unlink()
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"{copy}/{SEAL_SIGNATURE}: a signature of no {SEAL} (the seal was removed)" in err


def test_an_interrupted_probe_may_change_in_place_only_in_the_run(copy: Path) -> None:
    """A batch-search probe with no verdict is run again in its own folder: its files change
    in place during the resumed run (sealed again), never before it (refused up front)."""
    probe = copy / CASE_1N2G / "batch-search" / "bs16"
    probe.mkdir(parents=True)
    (probe / "node0.log").write_text("an interrupted probe\n")
    assert seal_session(copy, None).written
    (probe / "node0.log").write_text("the probe run again\n")
    rel = f"{CASE_1N2G}/batch-search/bs16/node0.log"
    assert unvouched(copy, None, None) == [(rel, "changed since it was sealed")]
    assert seal_session(copy, None).written


@pytest.mark.parametrize("name", [SEAL, SEAL_SIGNATURE])
@pytest.mark.parametrize("kind", ["fifo", "folder", "symlink"])
def test_a_seal_that_is_not_a_regular_file_is_named_never_read_nor_sealed_over(
    copy: Path, lab: tuple[Path, Path], name: str, kind: str
) -> None:
    """Checked with os.lstat before any open: a FIFO would block the read, a symlink would bring
    in a file from outside the session; every reader names it, none takes it as absent."""
    key, allowed = lab
    assert seal_session(copy, key).written
    path = copy / name
    path.unlink()
    {"fifo": os.mkfifo, "folder": Path.mkdir}.get(kind, lambda p: p.symlink_to("/etc/hostname"))(
        path
    )
    shown = {"fifo": "a FIFO (named pipe)", "folder": "a folder", "symlink": "a symlink"}[kind]
    state = seal_state(copy, allowed)
    assert state.how == f"seal not read: {name} is not a regular file", state.how
    assert any(p.startswith(f"{name}: {shown} where the seal") for p in state.problems)
    assert [rel for rel, _why in unvouched(copy, None, None)] == [name]
    again = seal_session(copy, key)
    assert not again.written and again.drift[0].startswith(f"{name}: {shown}")
    if name == SEAL:
        assert sealed_verdicts(copy) == {} and adopted_files(copy) == {}


def test_a_seal_of_records_written_before_they_held_fingerprints_parses_their_logs(
    copy: Path,
) -> None:
    """Records of schema 1 and 2 hold no ``fingerprints``: the seal parses their logs for the
    facts (the one fallback), and holds the same as for a record that carries them."""
    seal_session(copy, None)
    carried = sealed(copy).repeats
    for path in copy.glob("cases/**/repeat-*/record.json"):
        data = json.loads(path.read_text())
        del data["fingerprints"]
        path.write_text(json.dumps({**data, "schema": 2}))
    (copy / SEAL).unlink()
    assert seal_session(copy, None).written
    parsed = sealed(copy).repeats
    assert {f: r.fingerprints for f, r in parsed.items()} == {
        f: r.fingerprints for f, r in carried.items()
    }
    assert all(r.fingerprints for r in parsed.values())


_OPENED: list[tuple[str, bool]] | None = None  # (path, for reading) while a test counts


def _count_opens(event: str, args: tuple) -> None:
    if _OPENED is None or event != "open" or not isinstance(args[0], (str, os.PathLike)):
        return
    path, mode, flags = args
    reading = not set(mode) & set("wax+") if mode else not flags & (os.O_WRONLY | os.O_RDWR)
    _OPENED.append((os.fspath(path), reading))


sys.addaudithook(_count_opens)  # every open() and os.open() raises the "open" audit event


def test_a_repeat_log_is_read_once_by_the_run_and_once_by_the_door(tmp_path: Path) -> None:
    """From the benchmark's exit to the closing table a node log is opened twice: the runner
    reads (and parses) it, the door reads it again to re-measure it; the seal takes its
    SHA-256 and its ranks' fingerprint facts from the record."""
    global _OPENED
    cases = calibration_cases(0.01, 8, ["2n2g"], 1, 20)
    root = tmp_path / "results" / "run"
    _OPENED = []
    try:
        code = run_session(Selection(cases, "selftest", "test", {}), LocalRuntime(), root,
                           argv=["run"], progress="off")  # fmt: skip
        opened = _OPENED
    finally:
        _OPENED = None
    assert code == 0
    logs = sorted(root.glob("cases/**/repeat-01/node*.log"))
    assert len(logs) == 2 and (root / "report" / "report.md").is_file()
    for log in logs:
        reads = [path for path, reading in opened if reading and path == str(log)]
        assert len(reads) == 2, (log, reads)
