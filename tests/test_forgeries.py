"""The forgeries of a results folder an attacker can write into between two runs, each made
with the kit's own functions (``tests.forgery``: logs made faster and re-measured into their
records), and each refused before the lab's key signs it: foreign cases on a plain resume, an
interrupted repeat replaced, ``import-logs`` into a run's session."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from driver.core.session import Selection, run_session
from driver.frontend.cli import main
from driver.model.drift import seal_session
from driver.model.results import Session
from driver.model.seal import SEAL, SEAL_SIGNATURE, load_seal, sealed_verdicts
from driver.release.readme import README_LAYOUT
from driver.runtimes.local import LocalRuntime
from tests.forgery import speed_up, speed_up_case
from tests.synth import cached_session, multiply
from tests.test_signing import allow, new_key

CASES = "cases/calibration/calibration"
CASE_1N2G = f"{CASES}/1n2g/bs8/fp32/synthetic"
CASE_2N2G = f"{CASES}/2n2g/bs8/fp32/synthetic"


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    key = new_key(tmp_path, "lab")
    allow(tmp_path / "allowed_signers", "lab@example.org", key)
    return key


@pytest.fixture
def signed(tmp_path: Path, lab: Path) -> Path:
    """A copy of a real calibration session (1n1g, 1n2g, 2n2g; 3 repeats each) signed by the
    lab."""
    root = Path(shutil.copytree(cached_session(), tmp_path / "results" / "s"))
    assert seal_session(root, lab).written
    return root


def selection_of(root: Path) -> Selection:
    """The cases the session holds, as the lab's plain resume selects them again."""
    return Selection(list(Session(root).cases()), "selftest", "test", {})


def resume(root: Path, key: Path, selection: Selection | None = None, **kwargs) -> int:
    return run_session(selection or selection_of(root), LocalRuntime(), root, argv=["run"],
                       progress="plain", signing_key=key, **kwargs)  # fmt: skip


def seal_bytes(root: Path) -> tuple[bytes, bytes]:
    return (root / SEAL).read_bytes(), (root / SEAL_SIGNATURE).read_bytes()


def test_foreign_cases_are_not_signed_on_a_plain_resume(
    signed: Path, tmp_path: Path, lab: Path, capsys: pytest.CaptureFixture
) -> None:
    """Forgery 1: two case folders from the attacker's own run, every step 1.5x faster and
    re-measured, copied into a signed session; the lab resumes it as usual."""
    selection = selection_of(signed)
    foreign = multiply(cached_session(), tmp_path / "attacker", 6, ("amp",), ("synthetic",))
    added = sorted(p.parent.relative_to(foreign).as_posix() for p in foreign.rglob("case.json"))
    added = [a for a in added if "/1n1g/" in a or "/1n2g/" in a]
    for case in added:
        shutil.copytree(foreign / case, signed / case)
        speed_up_case(signed, case.removeprefix("cases/"), 1.5)
    before = seal_bytes(signed)
    capsys.readouterr()
    assert resume(signed, lab, selection) == 2
    out, err = capsys.readouterr()
    assert "already finished" not in out and "sealed:" not in out  # nothing ran, nothing signed
    for case in added:
        assert f"{case}/repeat-01/record.json: in a case folder outside this run's selection" in err
    assert "Nothing ran. Run into a new session (--session NEW), or, if you vouch" in err
    assert seal_bytes(signed) == before
    # selecting the foreign cases too does not make them the lab's: no seal covers them
    widened = replace(selection, cases=[*selection.cases, *Session(signed).cases()])
    assert resume(signed, lab, widened) == 2
    err = capsys.readouterr().err
    assert f"{added[0]}/case.json: added since the session was sealed, not by a run" in err
    assert seal_bytes(signed) == before

    # --adopt: the user sees what they vouch for; the seal records it as adopted, not measured
    assert resume(signed, lab, selection, adopt=added) == 0
    out = capsys.readouterr().out
    count = sum(1 for case in added for p in (signed / case).rglob("*") if p.is_file())
    assert f"adopting {count} file(s) of {signed}" in out, out
    assert f"  {added[0]}/repeat-02/node0.log: in a case folder outside" in out
    manifest = load_seal((signed / SEAL).read_bytes(), SEAL)
    assert sorted({rel.rsplit("/repeat-", 1)[0].removesuffix("/case.json")
                   for rel in manifest.adopted}) == added  # fmt: skip
    # a later resume keeps the mark (the adopted files are sealed as they are now)
    assert resume(signed, lab, widened) == 0
    assert load_seal((signed / SEAL).read_bytes(), SEAL).adopted == manifest.adopted
    main(["report", str(signed), "--out", str(tmp_path / "r")])  # and the report says so
    assert f"**{count} file(s) adopted, not measured:** {added[0]}/" in (
        (tmp_path / "r" / "report.md").read_text()
    )
    # a release says so from the seal's own record, and an audit recomputes it from there
    reports, allowed = tmp_path / "reports", str(tmp_path / "allowed_signers")
    release = ["release", "v1.0", str(signed), "--reports", str(reports), "--no-flops",
               "--allowed-signers", allowed]  # fmt: skip
    assert main(release) == 0, capsys.readouterr().err
    readme = (reports / "v1.0" / "README.md").read_text()
    assert f"**Session `s`: {count} file(s) adopted, not measured**: whoever resumed" in readme
    assert added[0].replace("_", "\\_") in readme
    audit = ["audit", "v1.0", "--reports", str(reports), "--allowed-signers", allowed]
    assert main(audit) == 0, capsys.readouterr().out
    published = reports / "v1.0" / "manifest.json"
    data = json.loads(published.read_text())
    del data["signatures"]["sessions"]["s"]["adopted"]  # the mark taken out of the version
    published.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    capsys.readouterr()
    assert main(audit) == 1
    assert "signatures.sessions" in capsys.readouterr().out


@pytest.mark.parametrize("forger_signs", [True, False])
def test_a_session_re_sealed_by_a_forger_is_not_signed_on_resume(
    signed: Path, tmp_path: Path, lab: Path, capsys: pytest.CaptureFixture, forger_signs: bool
) -> None:
    """The forgery of forgery 1 made consistent with its seal: 1n2g made 1.5x faster, the
    session sealed anew by the forger (with their own key, or unsigned); the lab resumes."""
    speed_up_case(signed, CASE_1N2G.removeprefix("cases/"), 1.5)
    (signed / SEAL).unlink()
    (signed / SEAL_SIGNATURE).unlink()
    forger = new_key(tmp_path, "forger") if forger_signs else None
    assert seal_session(signed, forger).written
    capsys.readouterr()
    assert resume(signed, lab) == 2
    err = capsys.readouterr().err
    seal_of = "its seal is signed by ED25519 key SHA256:" if forger_signs else "its seal is not"
    assert f"{CASE_1N2G}/repeat-01/record.json: {seal_of}" in err
    assert ", not by the key signing now (ED25519 key SHA256:" in err


@pytest.mark.parametrize("signs_now", ["lab", "other"])
def test_a_case_the_session_sealed_is_carried_by_a_resume_that_selects_another(
    signed: Path, tmp_path: Path, lab: Path, capsys: pytest.CaptureFixture, signs_now: str
) -> None:
    """One session, one selection after another (a model per command, as the GPU check's
    stages run): cases that an earlier run of the session measured and sealed are carried as
    the seal holds them, signed again only by the key that signed them; a forged one is not."""
    only_1n1g = replace(
        selection_of(signed),
        cases=[c for c in Session(signed).cases() if c.topology.label == "1n1g"],
    )
    key = lab if signs_now == "lab" else new_key(tmp_path, "other")
    capsys.readouterr()
    if signs_now == "other":  # the lab's cases are not another key's to sign
        assert resume(signed, key, only_1n1g) == 2
        err = capsys.readouterr().err
        assert f"{CASE_1N2G}/repeat-01/record.json: in a case folder outside this run's" in err
        return
    sealed_before = load_seal((signed / SEAL).read_bytes(), SEAL).files
    assert resume(signed, lab, only_1n1g) == 0, capsys.readouterr().err
    assert "sealed:" in capsys.readouterr().out
    resealed = load_seal((signed / SEAL).read_bytes(), SEAL)
    carried = {r: e for r, e in sealed_before.items() if r.startswith(f"{CASE_2N2G}/")}
    assert carried and all(resealed.files[r] == e for r, e in carried.items())
    assert not resealed.adopted
    # one of them forged afterwards: refused, named, the seal kept
    speed_up_case(signed, CASE_1N2G.removeprefix("cases/"), 1.5)
    before = seal_bytes(signed)
    assert resume(signed, lab, only_1n1g) == 2
    err = capsys.readouterr().err
    assert f"{CASE_1N2G}/repeat-01/node0.log: in a case folder outside this run's" in err
    assert seal_bytes(signed) == before


def interrupt(folder: Path) -> None:
    """The record of a repeat the run's Ctrl-C stopped."""
    record = json.loads((folder / "record.json").read_text())
    record.update(verdict="interrupted", measurement=None, detail="interrupted by the user")
    (folder / "record.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


@pytest.fixture
def interrupted(tmp_path: Path, lab: Path) -> Path:
    """A signed session whose run stopped in 1n2g's repeat 3, before the 2n2g case."""
    root = Path(shutil.copytree(cached_session(), tmp_path / "results" / "i"))
    interrupt(root / CASE_1N2G / "repeat-03")
    shutil.rmtree(root / CASE_2N2G)
    assert seal_session(root, lab).written
    assert (
        load_seal((root / SEAL).read_bytes(), SEAL).repeats[f"{CASE_1N2G}/repeat-03"].verdict
        == "interrupted"
    )
    return root


def test_an_interrupted_repeat_replaced_is_not_taken_as_done(
    interrupted: Path, tmp_path: Path, lab: Path, capsys: pytest.CaptureFixture
) -> None:
    """Forgery 2: the attacker replaces the interrupted repeat's sealed files with their own
    repeat (1.3x) and adds the case the run had not reached (1.15x)."""
    root = interrupted
    repeat = root / CASE_1N2G / "repeat-03"
    shutil.rmtree(repeat)
    shutil.copytree(root / CASE_1N2G / "repeat-02", repeat)
    record = json.loads((repeat / "record.json").read_text())
    (repeat / "record.json").write_text(json.dumps({**record, "repeat": 3}))
    assert speed_up(repeat, 1.3).ok
    shutil.copytree(cached_session() / CASE_2N2G, root / CASE_2N2G)
    speed_up_case(root, CASE_2N2G.removeprefix("cases/"), 1.15)
    before = seal_bytes(root)
    selection = Selection(list(Session(cached_session()).cases()), "selftest", "test", {})
    # the seal says repeat 3 did not finish: never taken as done, whatever its record says now
    case = next(c for c in selection.cases if c.topology.label == "1n2g")
    resumed = Session(root, sealed_verdicts(root))
    assert resumed.finished(case, 3) is None and resumed.finished(case, 2)
    capsys.readouterr()
    assert resume(root, lab, selection) == 2
    err = capsys.readouterr().err
    assert (
        f"{CASE_1N2G}/repeat-03/record.json: changed since it was sealed (verdict interrupted "
        "sealed, ok now)" in err
    )
    assert f"{CASE_1N2G}/repeat-03/node0.log: changed since it was sealed" in err
    assert f"{CASE_2N2G}/repeat-01/node1.log: added since the session was sealed" in err
    assert seal_bytes(root) == before
    # sealing directly (what the run does when it ends) does not sign over the replaced repeat
    drifted = seal_session(root, lab)
    assert not drifted.written
    assert f"{CASE_1N2G}/repeat-03/node0.log: changed since it was sealed" in drifted.drift
    assert seal_bytes(root) == before


def test_an_interrupted_repeat_is_run_again_and_sealed(
    interrupted: Path, lab: Path, capsys: pytest.CaptureFixture
) -> None:
    """What the kit itself does on resume: the interrupted repeat set aside unchanged, run
    again, the case it had not reached run, all signed."""
    every = Selection(list(Session(cached_session()).cases()), "selftest", "test", {})
    code = resume(interrupted, lab, every)
    out, err = capsys.readouterr()
    assert code == 0, err
    at = "[case 2/3 calibration/calibration/1n2g/bs8/fp32/synthetic]"
    assert f"{at} repeat 2/3: already finished" in out
    assert f"{at} repeat 3/3: already finished" not in out and f"{at} repeat 3/3: " in out
    assert (interrupted / CASE_1N2G / "repeat-03.failed-1" / "record.json").is_file()
    manifest = load_seal((interrupted / SEAL).read_bytes(), SEAL)
    assert manifest.repeats[f"{CASE_1N2G}/repeat-03"].verdict == "ok"
    assert manifest.repeats[f"{CASE_2N2G}/repeat-03"].verdict == "ok"
    assert not manifest.adopted


def _dllogger_log(path: Path) -> Path:
    """A plain-text DLLogger log of 30 steps at 0.25 s, batch 64 (an NGC PyTorch run)."""
    from tests.test_import_logs import _dllogger_plain

    return _dllogger_plain(path, 0.25, 30, batch=64)


IMPORT = ["import-logs", "--source", "ngc-pytorch", "--model", "resnet50", "--batch", "64",
          "--warmup-steps", "10", "--measured-steps", "20"]  # fmt: skip


def test_import_logs_does_not_re_sign_a_run_session(
    signed: Path, tmp_path: Path, lab: Path, capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Forgery 3: forged cases in a run's session, then ``import-logs`` into it with the lab's
    key in the environment; and foreign files added to an import session."""
    monkeypatch.setenv("DLPERF_SIGNING_KEY", str(lab))
    speed_up_case(signed, CASE_1N2G.removeprefix("cases/"), 1.4)
    before = seal_bytes(signed)
    log = _dllogger_log(tmp_path / "a.log")
    at = ["--results", str(signed.parent), "--session", signed.name]
    assert main([*IMPORT, *at, "--logs", str(log)]) == 2
    err = capsys.readouterr().err
    assert f"error: {signed}: not a session of `dlperf import-logs`" in err
    assert seal_bytes(signed) == before and not list(signed.glob("cases/**/imported"))

    # an import session of its own, then a forged case added to it: not re-signed either
    at = ["--results", str(tmp_path / "results"), "--session", "imp"]
    assert main([*IMPORT, *at, "--logs", str(log)]) == 0
    imported = tmp_path / "results" / "imp"
    before = seal_bytes(imported)
    shutil.copytree(signed / CASE_1N2G, imported / CASE_1N2G)
    again = _dllogger_log(tmp_path / "b.log")
    again.write_text(again.read_text() + "\n")  # another run: other bytes
    assert main([*IMPORT, *at, "--logs", str(again)]) == 2
    err = capsys.readouterr().err
    assert f"{CASE_1N2G}/case.json: added since the session was sealed" in err
    assert "import into another --session" in err
    assert seal_bytes(imported) == before
    # and `dlperf run` does not resume an import session
    imported_cases = list(Session(imported).cases())
    assert resume(imported, lab, Selection(imported_cases, "selftest", "test", {})) == 2
    assert "a session of `dlperf import-logs`; `dlperf run` resumes only" in (
        capsys.readouterr().err
    )


def test_attest_hardware_re_signs_only_what_it_adds(
    tmp_path: Path, lab: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLPERF_SIGNING_KEY", str(lab))
    at = ["--results", str(tmp_path / "results"), "--session", "imp"]
    assert main([*IMPORT, *at, "--logs", str(_dllogger_log(tmp_path / "a.log"))]) == 0
    imported = tmp_path / "results" / "imp"
    before = seal_bytes(imported)
    (imported / "notes.txt").write_text("added by someone else\n")
    attest = [
        "attest-hardware",
        str(imported),
        "--label",
        "AMD EPYC 2c avx2",
        "--source",
        "the lab inventory",
    ]
    assert main(attest) == 2
    assert "notes.txt: added since the session was sealed" in capsys.readouterr().err
    assert seal_bytes(imported) == before and not (imported / "hardware.json").exists()
    (imported / "notes.txt").unlink()
    assert main(attest) == 0
    assert "hardware.json" in load_seal((imported / SEAL).read_bytes(), SEAL).files


def test_an_edited_table_of_an_older_readme_fails_the_default_audit(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Forgery 5: one digit of v0.4-cpu's README table changed (README layout 3, which this
    kit does not render): the default audit holds it to what the kit that released it
    re-renders; where that kit cannot run, the verdict is not a PASS."""
    from driver.release.release import DEFAULT_REPORTS

    reports = Path(shutil.copytree(DEFAULT_REPORTS, tmp_path / "reports"))
    readme = reports / "v0.4-cpu" / "README.md"
    assert readme.read_text().count("| 1.71 @1n1g") == 1
    readme.write_text(readme.read_text().replace("| 1.71 @1n1g", "| 2.71 @1n1g"))
    audit = ["audit", "v0.4-cpu", "--reports", str(reports), "--cached-flops"]
    assert main(audit) == 1
    out = capsys.readouterr().out
    assert (
        'README.md: line 34 under "BERT-base pre-training", as the kit that released it '
        "re-renders it: published '2.71 @1n1g', recomputed '1.71 @1n1g'" in out
    )
    assert "verdict: FAIL (1 difference(s))" in out
    # a kit commit this repository does not hold: the README is held to nothing, and says so
    alone = Path(shutil.copytree(reports / "v0.4-cpu", tmp_path / "alone" / "v0.4-cpu"))
    (alone / "README.md").write_bytes((DEFAULT_REPORTS / "v0.4-cpu" / "README.md").read_bytes())
    data = json.loads((alone / "manifest.json").read_text())
    data["kit"]["commit"] = "0" * 40  # not listed in an index: nothing else holds the manifest
    (alone / "manifest.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    assert main(["audit", str(alone), "--reports", str(alone.parent), "--cached-flops"]) == 1
    out = capsys.readouterr().out
    assert (f"skipped: README.md is of README layout 3 (this kit writes {README_LAYOUT}): not "
            "re-rendered") in out  # fmt: skip
    assert "verdict: INCOMPLETE (1 check(s) that could fail skipped, above)" in out
    assert "verdict: PASS" not in out
