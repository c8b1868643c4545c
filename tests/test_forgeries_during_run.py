"""The forgeries of a results folder an attacker with write access makes while the lab's signed
run goes on (the check before the run has passed): their own repeats of a case the run has not
reached yet, whole cases outside the selection, a ``session.json`` of another machine; and an
``--adopt ''`` (an unset make variable) that would adopt the whole session. Each is refused,
named, and nothing of it is signed as the lab's."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from driver.core.session import Selection, run_session
from driver.model.drift import seal_session
from driver.model.results import Session
from driver.model.seal import SEAL, SEAL_SIGNATURE
from driver.runtimes.local import LocalRuntime
from driver.runtimes.plan import RepeatPlan
from tests.forgery import speed_up_case
from tests.synth import cached_session
from tests.test_forgeries import CASE_1N2G, CASE_2N2G, resume, seal_bytes, selection_of
from tests.test_signing import allow, new_key

CASE_1N1G = "cases/calibration/calibration/1n1g/bs8/fp32/synthetic"


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    key = new_key(tmp_path, "lab")
    allow(tmp_path / "allowed_signers", "lab@example.org", key)
    return key


class Stranger(LocalRuntime):
    """The local runtime, and someone who writes into the session folder while it runs: once,
    when the run starts (``at_start``), or when the first repeat of the 1n1g case starts."""

    def __init__(self, write: Callable[[Path], None], at_start: bool = False) -> None:
        super().__init__()
        self.write, self.at_start, self.done = write, at_start, False

    def clean_leftovers(self, session_root: Path) -> list[str]:
        if self.at_start:
            self._once(session_root)
        return super().clean_leftovers(session_root)

    def run(self, plan: RepeatPlan):  # noqa: ANN201 - the runtime's outcome
        if plan.case.topology.label == "1n1g" and not plan.probe:
            self._once(plan.session_root)
        return super().run(plan)

    def _once(self, root: Path) -> None:
        if not self.done:
            self.done = True
            self.write(Path(root))


def cases(*labels: str, repeats: int) -> list:
    return [
        replace(case, repeats=repeats)
        for case in Session(cached_session()).cases()
        if case.topology.label in labels
    ]


def run(root: Path, key: Path, runtime: LocalRuntime, selected: list, **kwargs) -> int:
    selection = Selection(selected, "selftest", "test", {})
    return run_session(selection, runtime, root, argv=["run"], progress="plain",
                       signing_key=key, **kwargs)  # fmt: skip


def copy_repeats(root: Path, case: str, repeats: list[int]) -> None:
    """The stranger's own repeats of ``case`` (a real calibration run's) and its case.json."""
    source = cached_session() / case
    (root / case).mkdir(parents=True, exist_ok=True)
    shutil.copy(source / "case.json", root / case / "case.json")
    for repeat in repeats:
        shutil.copytree(source / f"repeat-{repeat:02d}", root / case / f"repeat-{repeat:02d}")


def test_a_strangers_repeats_written_during_the_run_are_not_taken_as_finished(
    tmp_path: Path, lab: Path, capsys: pytest.CaptureFixture
) -> None:
    """Attack 1: a new signed session of 1n1g and 1n2g (2 repeats each); while 1n1g runs, a
    stranger writes their own 1n2g repeats into it. The run runs 1n2g itself; the stranger's
    repeats, set aside, are named; nothing is signed; the lab's repeats stay in place."""
    root = tmp_path / "results" / "new"
    stranger = Stranger(lambda r: copy_repeats(r, CASE_1N2G, [1, 2]))
    theirs = json.loads((cached_session() / CASE_1N2G / "repeat-01/record.json").read_text())
    capsys.readouterr()
    code = run(root, lab, stranger, cases("1n1g", "1n2g", repeats=2))
    out, err = capsys.readouterr()
    assert stranger.done
    assert "already finished" not in out  # the stranger's 1n2g is not the run's
    at = "[case 2/2 calibration/calibration/1n2g/bs8/fp32/synthetic]"
    assert f"{at} repeat 1/2: " in out and f"{at} repeat 2/2: " in out
    assert code == 1
    assert f"error: {root}: nothing signed: the session holds files this run neither" in err
    assert (
        f"{CASE_1N2G}/repeat-01.failed-1/record.json: written into the session during the run, "
        "not by it"
    ) in err
    assert f"{CASE_1N2G}/case.json: written into the session during the run, not by it" in err
    assert "To publish them as measured, remove the files named above" in err
    assert not (root / SEAL).exists() and not (root / SEAL_SIGNATURE).exists()
    ours = json.loads((root / CASE_1N2G / "repeat-01/record.json").read_text())
    assert ours["verdict"] == "ok" and ours["started_at"] != theirs["started_at"]
    assert (root / CASE_1N1G / "repeat-02/record.json").is_file()  # nothing the lab ran is lost
    # The lab removes what the seal named and runs the same command: its own repeats, held by
    # the claim its key signed, are finished; nothing runs again; the seal is signed, and no
    # row is marked adopted (they were measured, by this kit, under this key).
    for rel in ("case.json", "repeat-01.failed-1", "repeat-02.failed-1"):
        target = root / CASE_1N2G / rel
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    claim = json.loads((root / "session-claim.json").read_text())
    assert f"{CASE_1N2G}/case.json" in claim["refused"]
    assert (root / "session-claim.json.sig").is_file()
    capsys.readouterr()
    code = run(root, lab, LocalRuntime(), cases("1n1g", "1n2g", repeats=2))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.count("already finished") == 4 and "repeat 1/2: ok" not in out
    assert (root / SEAL_SIGNATURE).is_file() and not (root / "session-claim.json").exists()
    assert json.loads((root / SEAL).read_text()).get("adopted", {}) == {}


class IntoTheRepeat(LocalRuntime):
    """The local runtime, and someone who drops files into the folder of the repeat it runs,
    while it runs: a file of a name the kit never writes, and a log of a node the case has not."""

    def run(self, plan: RepeatPlan):  # noqa: ANN201 - the runtime's outcome
        outcome = super().run(plan)
        (plan.repeat_dir / "notes.md").write_text("[results](http://evil.example)\n")
        (plan.repeat_dir / "node7.log").write_text("step 1 100.0 samples/s\n")
        return outcome


def test_files_slipped_into_a_repeat_folder_while_it_runs_are_not_signed(
    tmp_path: Path, lab: Path, capsys: pytest.CaptureFixture
) -> None:
    """The run takes as its own, in a repeat's folder, its record, the logs the record hashes
    and the files the kit writes beside them (telemetry): not whatever else is there when the
    record is written. Before, the whole folder was taken as the run's and signed."""
    root = tmp_path / "results" / "new"
    capsys.readouterr()
    code = run(root, lab, IntoTheRepeat(), cases("1n1g", repeats=1))
    err = capsys.readouterr().err
    assert code == 1, err
    repeat = f"{CASE_1N1G}/repeat-01"
    for name in ("notes.md", "node7.log"):
        assert f"{repeat}/{name}: written into the session during the run, not by it" in err
    assert f"{repeat}/record.json: " not in err and f"{repeat}/telemetry-node0.jsonl" not in err
    assert "Traceback" not in err
    assert not (root / SEAL).exists()
    assert (root / repeat / "record.json").is_file()  # the lab's repeat stays


@pytest.mark.parametrize("session", ["new", "resumed"])
def test_whole_cases_written_during_the_run_outside_its_selection_are_not_signed(
    tmp_path: Path, lab: Path, capsys: pytest.CaptureFixture, session: str
) -> None:
    """Attack 2: while the run goes on, a stranger writes whole cases (1.5x faster, re-measured
    with the kit's own functions) outside its selection into the session: not signed."""

    def forge(root: Path) -> None:
        copy_repeats(root, CASE_2N2G, [1, 2, 3])
        speed_up_case(root, CASE_2N2G.removeprefix("cases/"), 1.5)

    if session == "new":
        root = tmp_path / "results" / "new"
        selected, before = cases("1n1g", repeats=1), None
        stranger = Stranger(forge)
    else:  # a signed session of 1n1g and 1n2g; the lab resumes it as usual
        root = Path(shutil.copytree(cached_session(), tmp_path / "results" / "s"))
        shutil.rmtree(root / CASE_2N2G)
        assert seal_session(root, lab).written
        selected, before = selection_of(root).cases, seal_bytes(root)
        stranger = Stranger(forge, at_start=True)
    capsys.readouterr()
    code = run(root, lab, stranger, selected)
    err = capsys.readouterr().err
    assert stranger.done and code == 1
    assert "nothing signed" in err
    assert (
        f"{CASE_2N2G}/repeat-01/record.json: written into the session during the run, not by it"
    ) in err
    if before is None:
        assert not (root / SEAL).exists()
    else:
        assert seal_bytes(root) == before  # the old seal stays as it was


def test_a_session_json_put_in_a_folder_before_a_new_signed_run_is_not_its_provenance(
    tmp_path: Path, lab: Path, capsys: pytest.CaptureFixture
) -> None:
    """Attack 3: a session.json naming another machine and runtime, put in the folder before a
    new signed run: refused before anything runs, not signed as the run's provenance."""
    root = tmp_path / "results" / "new"
    root.mkdir(parents=True)
    meta = json.loads((cached_session() / "session.json").read_text())
    meta.update(head_node="dgx-h100-07", runtime="slurm")
    (root / "session.json").write_text(json.dumps(meta))
    capsys.readouterr()
    assert run(root, lab, LocalRuntime(), cases("1n1g", repeats=1)) == 2
    out, err = capsys.readouterr()
    assert "session: " not in out  # nothing ran
    assert f"session.json: no seal covers it (the session has no {SEAL})" in err
    assert not (root / SEAL).exists()


def test_a_session_json_changed_during_the_run_is_not_signed(
    tmp_path: Path, lab: Path, capsys: pytest.CaptureFixture
) -> None:
    """Attack 3 while the run goes on: session.json rewritten to name another head node."""

    def rewrite(root: Path) -> None:
        meta = json.loads((root / "session.json").read_text())
        (root / "session.json").write_text(json.dumps({**meta, "head_node": "dgx-h100-07"}))

    root = tmp_path / "results" / "new"
    assert run(root, lab, Stranger(rewrite), cases("1n1g", repeats=1)) == 1
    err = capsys.readouterr().err
    assert "session.json: changed after this run wrote it" in err
    assert not (root / SEAL).exists()


def test_an_empty_adopt_is_refused(
    tmp_path: Path, lab: Path, capsys: pytest.CaptureFixture
) -> None:
    """Attack 4: ``--adopt ''`` (``make ... ADOPT=`` with the variable unset) would adopt the
    whole session: refused, nothing runs, the seal stays."""
    root = Path(shutil.copytree(cached_session(), tmp_path / "results" / "s"))
    assert seal_session(root, lab).written
    speed_up_case(root, CASE_2N2G.removeprefix("cases/"), 1.5)  # a forgery to adopt
    before = seal_bytes(root)
    capsys.readouterr()
    assert resume(root, lab, adopt=[""]) == 2
    out, err = capsys.readouterr()
    assert "adopting" not in out and "session: " not in out
    assert "error: --adopt '': an empty path (an unset make variable, ADOPT=) would adopt" in err
    assert "name the file or folder you vouch for (`--adopt .` for all of it)" in err
    assert seal_bytes(root) == before


def test_adopted_rows_carry_the_mark_in_the_results_files(
    tmp_path: Path, lab: Path, capsys: pytest.CaptureFixture
) -> None:
    """A case a person adopted on resume (``--adopt``) is published signed, as the session is,
    but its rows in results.csv and results.json say adopted, not only the README; the audit
    recomputes the mark."""
    import csv

    from driver.frontend.cli import main

    root = Path(shutil.copytree(cached_session(), tmp_path / "results" / "s"))
    shutil.rmtree(root / CASE_2N2G)
    assert seal_session(root, lab).written
    selection = selection_of(root)
    shutil.copytree(cached_session() / CASE_2N2G, root / CASE_2N2G)  # not measured by this run
    assert resume(root, lab, selection, adopt=[CASE_2N2G]) == 0, capsys.readouterr().err
    reports, allowed = tmp_path / "reports", str(tmp_path / "allowed_signers")
    release = ["release", "v1.0", str(root), "--reports", str(reports), "--no-flops",
               "--allowed-signers", allowed]  # fmt: skip
    assert main(release) == 0, capsys.readouterr().err
    data = json.loads((reports / "v1.0" / "results.json").read_text())
    two_nodes = "calibration/calibration/2n2g/bs8/fp32/synthetic"
    for row in data["cases"]:
        assert row.get("adopted") is (True if row["case_id"] == two_nodes else None), row
    for row in data["repeats"]:
        assert row.get("adopted") is (True if row["case_id"] == two_nodes else None), row
    with (reports / "v1.0" / "results.csv").open() as rows:
        marks = {(r["row"], r["case_id"], r["adopted"]) for r in csv.DictReader(rows)}
    assert ("case", two_nodes, "true") in marks and ("repeat", two_nodes, "true") in marks
    assert all(mark == "" for _row, case, mark in marks if case != two_nodes)
    audit = ["audit", "v1.0", "--reports", str(reports), "--allowed-signers", allowed]
    assert main(audit) == 0, capsys.readouterr().out


def test_a_session_json_put_in_between_the_check_and_the_session_is_written_anew(
    tmp_path: Path,
) -> None:
    """Attack 3 in the moment between the check and the session's opening: the session.json
    the check did not vouch for is not the session's provenance; the run writes its own."""
    import platform

    from driver.model.warrant import Warrant

    root = tmp_path / "results" / "new"
    warrant = Warrant(root, None, "ED25519 key SHA256:lab")
    root.mkdir(parents=True)
    (root / "session.json").write_text(json.dumps({"head_node": "dgx-h100-07"}))
    Session.open(root, {"runtime": "local"}, warrant=warrant)
    meta = json.loads((root / "session.json").read_text())
    assert meta["head_node"] == platform.node() and meta["runtime"] == "local"


def test_the_session_tells_the_warrant_of_the_folder_the_probes_write() -> None:
    from driver.core.session import PROBES
    from driver.diagnose.probes import PROBE_DIR

    assert PROBES == PROBE_DIR


def test_a_claim_another_key_signed_or_nobody_signed_vouches_for_nothing(
    tmp_path: Path, lab: Path, capsys: pytest.CaptureFixture
) -> None:
    """A stranger who writes their repeats into a session and a session-claim.json listing them
    (signed with their own key, or unsigned) gets nothing carried: the lab's signed run takes a
    claim only of its own key, over the seal the session holds."""
    import hashlib

    from driver.signing import CLAIM_NAMESPACE, sign_bytes

    root = tmp_path / "results" / "s"
    copy_repeats(root, CASE_1N2G, [1, 2])
    files = {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*") if p.is_file()
    }  # fmt: skip
    claim = {"kind": "dlperf-session-claim", "schema": 1, "session": "s", "seal_sha256": None,
             "files": files, "adopted": {}, "refused": []}  # fmt: skip
    data = json.dumps(claim).encode()
    stranger = new_key(tmp_path, "stranger")
    for signature in (sign_bytes(data, stranger, CLAIM_NAMESPACE), None):
        (root / "session-claim.json").write_bytes(data)
        sig = root / "session-claim.json.sig"
        sig.write_bytes(signature) if signature else sig.unlink(missing_ok=True)
        capsys.readouterr()
        code = run(root, lab, LocalRuntime(), cases("1n2g", repeats=2))
        err = capsys.readouterr().err
        assert code == 2, err
        assert f"{CASE_1N2G}/repeat-01/record.json: no seal covers it" in err
