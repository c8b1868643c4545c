"""The door (driver/verify): every consumer refuses what ``dlperf report`` refuses.

Each test breaks one thing in a copy of a real calibration session (logs re-hashed into the
record where the break would otherwise be caught by the checksum alone) and checks that
``report``, ``release`` (with and without --accept-remeasured) and the door itself refuse it,
naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from driver.core.summary import summarize
from driver.files import TEMP_PREFIX
from driver.model.hardware import hardware_of
from driver.model.measure import STRAGGLER_FIELDS
from driver.model.plausible import Implausible, check_throughput
from driver.model.results import Session
from driver.release.refusals import ReleaseError
from driver.release.release import release
from driver.verify.folder import verify_sessions
from tests.session_edits import drop_fingerprint, rewrite_headers, rewrite_session_headers
from tests.synth import cached_session

CASE_1N2G = "calibration/calibration/1n2g/bs8/fp32/synthetic"


def session_copy(tmp_path: Path, name: str = "s") -> Path:
    root = tmp_path / name
    shutil.copytree(cached_session(), root)
    return root


def repeat_dir(root: Path, repeat: int = 1) -> Path:
    return root / "cases" / CASE_1N2G / f"repeat-{repeat:02d}"


def edit_step(root: Path, step: int, change: Callable[[dict], None], rehash: bool = True) -> Path:
    """Change rank 0's record of ``step`` in node0.log of repeat 1; re-hash it into the record
    (as a forger would), so only the door's own checks can catch it."""
    folder = repeat_dir(root)
    log = folder / "node0.log"
    lines = log.read_text().split("\n")
    for index, line in enumerate(lines):
        if '"dlperf": "step"' in line and f'"step": {step},' in line:
            start = line.index("{")
            event = json.loads(line[start:])
            if event.get("rank") == 0:
                change(event)
                lines[index] = line[:start] + json.dumps(event)
                break
    else:
        raise AssertionError(f"no step {step} of rank 0")
    log.write_text("\n".join(lines))
    if rehash:
        record = json.loads((folder / "record.json").read_text())
        record["log_sha256"]["node0.log"] = hashlib.sha256(log.read_bytes()).hexdigest()
        (folder / "record.json").write_text(json.dumps(record))
    return folder


def refused_everywhere(root: Path, tmp_path: Path, expect: str) -> None:
    """report refuses it; release refuses it with and without --accept-remeasured."""
    verified = verify_sessions([root])
    assert any(expect in line for line in verified.refused), verified.refused
    for accept in (False, True):
        with pytest.raises(ReleaseError) as caught:
            release(
                "v0.1",
                [root],
                reports_root=tmp_path / f"reports-{accept}",
                accept_remeasured=accept,
                compute_flops=False,
                printer=lambda _line: None,
            )
        assert expect in str(caught.value), str(caught.value)


LAST_STEP = 35  # the calibration session's window is steps 5..35


@pytest.mark.parametrize(
    ("step", "change", "expect"),
    [
        (20, lambda e: e.update(samples=1_000_000), "1000000 samples, but 1 step(s) of batch 8"),
        (20, lambda e: e.update(samples=1e308), "1e+308 samples, but 1 step(s) of batch 8"),
        (LAST_STEP, lambda e: e.update(t=1e308), "is beyond any clock"),
        (20, lambda e: e.update(t=1e308), "does not follow step 20 (t=1e+308)"),
        (20, lambda e: e.update(t=-5.0), "does not follow step"),
    ],
    ids=["1e6-samples", "1e308-samples", "1e308-last-time", "1e308-time", "time-back"],
)
def test_an_implausible_log_is_refused_by_report_and_release_alike(
    tmp_path: Path, step: int, change: Callable[[dict], None], expect: str
) -> None:
    root = session_copy(tmp_path)
    folder = edit_step(root, step, change)
    refused_everywhere(root, tmp_path, expect)
    assert any(line.startswith(str(folder)) for line in verify_sessions([root]).refused)


def test_the_last_timestamp_far_away_is_refused_not_published_as_a_tiny_throughput(
    tmp_path: Path,
) -> None:
    root = session_copy(tmp_path)
    edit_step(
        root, LAST_STEP, lambda e: e.update(t=9e10)
    )  # the window's end, within the clock bound
    refused_everywhere(root, tmp_path, "outside [0.0001, 1e+07]")


def test_a_log_edited_after_its_record_is_refused_by_release_too(tmp_path: Path) -> None:
    root = session_copy(tmp_path)
    folder = edit_step(root, 20, lambda e: e.update(samples=16), rehash=False)
    refused_everywhere(root, tmp_path, f"{folder / 'node0.log'}: changed since")


def test_a_stray_node_log_is_refused(tmp_path: Path) -> None:
    root = session_copy(tmp_path)
    folder = repeat_dir(root)
    stray = repeat_dir(root) / "node1.log"
    shutil.copyfile(folder / "node0.log", stray)
    refused_everywhere(root, tmp_path, f"{stray}: a node log")


def test_a_symlinked_repeat_folder_is_listed_as_refused_never_dropped(tmp_path: Path) -> None:
    root = session_copy(tmp_path)
    folder = repeat_dir(root, 3)
    elsewhere = tmp_path / "elsewhere"
    folder.rename(elsewhere)
    folder.symlink_to(elsewhere, target_is_directory=True)
    refused_everywhere(root, tmp_path, f"{folder}: a symlink (to {elsewhere})")


def test_a_symlinked_log_is_refused_and_its_target_never_archived(tmp_path: Path) -> None:
    root = session_copy(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("head node secret\n")
    link = repeat_dir(root) / "notes.txt"
    link.symlink_to(secret)
    with pytest.raises(ReleaseError, match=f"{link}: a symlink"):
        release("v0.1", [root], reports_root=tmp_path / "r", compute_flops=False)
    assert not any((tmp_path / "r").glob("v0.1*")) and not any(
        (tmp_path / "r").glob(f"{TEMP_PREFIX}*")
    )


def test_a_symlinked_session_is_refused_by_release(tmp_path: Path) -> None:
    root = session_copy(tmp_path)
    link = tmp_path / "linked"
    link.symlink_to(root, target_is_directory=True)
    with pytest.raises(ReleaseError, match="the session folder is a symlink"):
        release("v0.1", [link], reports_root=tmp_path / "r", compute_flops=False)


def test_a_case_whose_id_leaves_its_folder_is_refused(tmp_path: Path) -> None:
    root = session_copy(tmp_path)
    case_file = root / "cases" / CASE_1N2G / "case.json"
    data = json.loads(case_file.read_text())
    data["variant"] = "../../../x"
    case_file.write_text(json.dumps(data))
    refused_everywhere(root, tmp_path, f"{case_file}: defines case")


def test_a_killed_release_leaves_nothing_the_next_one_does_not_clean(tmp_path: Path) -> None:
    root = session_copy(tmp_path)
    reports = tmp_path / "reports"
    code = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "import driver.release.release as r\n"
        "def die(*a, **k): os._exit(9)\n"  # killed mid-way: no cleanup runs
        "r.load_config = die\n"
        f"r.release('v0.1', [Path({str(root)!r})], reports_root=Path({str(reports)!r}), "
        "compute_flops=False)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 9, done.stderr
    (leftover,) = reports.glob(f"{TEMP_PREFIX}*")
    assert any(leftover.rglob("*.tar.gz"))
    release("v0.1", [root], reports_root=reports, compute_flops=False, printer=lambda _l: None)
    assert not list(reports.glob(f"{TEMP_PREFIX}*"))
    assert (reports / "v0.1" / "manifest.json").exists()


@pytest.mark.parametrize("version", ["v9.9\n", "v1.0\r", "../v1.0", "v1.0/x"])
def test_a_version_name_is_the_whole_name(tmp_path: Path, version: str) -> None:
    with pytest.raises(ReleaseError, match="is not of the form"):
        release(version, [session_copy(tmp_path)], reports_root=tmp_path / "r")


def test_throughput_bounds_refuse_the_absurd_and_keep_the_slowest_real_runs() -> None:
    check_throughput(0.03, 1)  # BERT-base with emulated bf16 on a CPU (v0.2-cpu)
    check_throughput(25_000.0, 8)
    for value in (1e308, 1e-300, float("nan"), float("inf")):
        with pytest.raises(Implausible):
            check_throughput(value, 1)


def test_the_untouched_session_passes_every_door(tmp_path: Path) -> None:
    root = session_copy(tmp_path)
    verified = verify_sessions([root])
    assert verified.refused == [] and len(verified.repeats) == 9
    recorded = {(c.id, r.repeat): r.measurement for c, r, _ in Session(root).records()}
    assert all(not r.remeasured for r in verified.repeats)
    assert {(r.case.id, r.record.repeat) for r in verified.repeats} == set(recorded)


def run_dlperf(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "driver.frontend.cli", *args],
        capture_output=True,
        text=True,
        input=stdin,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )


def test_report_into_an_existing_file_or_a_symlinked_report_folder_is_refused(
    tmp_path: Path,
) -> None:
    root = session_copy(tmp_path)
    (tmp_path / "taken").write_text("")
    done = run_dlperf("report", str(root), "--out", str(tmp_path / "taken"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{tmp_path / 'taken'}: cannot be written (it is a file" in done.stderr
    (tmp_path / "elsewhere").mkdir()
    (root / "report").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    done = run_dlperf("report", str(root))
    assert done.returncode == 2 and f"{root / 'report'}: cannot be written (a symlink" in (
        done.stderr
    )
    assert not list((tmp_path / "elsewhere").iterdir())


def test_output_piped_into_head_ends_quietly(tmp_path: Path) -> None:
    root = session_copy(tmp_path)
    pipeline = (
        f"{sys.executable} -m driver.frontend.cli report {root} --out {tmp_path / 'o'} | head -1"
    )
    done = subprocess.run(
        ["bash", "-c", pipeline],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert done.stdout.startswith("# dlperf report")
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


# --------------------------------------------------------------------------------------------
# Which machine: fingerprints in the logs, attestations of older sessions


def edit_rank_headers(folder: Path, edit: Callable[[int, dict], None]) -> None:
    """Every rank's header of the repeat edited by ``edit(rank, header)`` (the record's header
    is rank 0's), logs re-hashed as a forger would."""
    rewrite_headers(folder, lambda header: edit(header.get("rank", 0), header))


def test_ranks_whose_facts_differ_are_refused_never_averaged(tmp_path: Path) -> None:
    root = session_copy(tmp_path)
    two_nodes = root / "cases" / "calibration/calibration/2n2g/bs8/fp32/synthetic" / "repeat-01"

    def other_memory(rank: int, header: dict) -> None:
        if rank == 1:  # node 1's facts name another machine; its label would read the same
            header["fingerprint"]["memory_gib"] += 64

    edit_rank_headers(two_nodes, other_memory)
    refused_everywhere(root, tmp_path, "its ranks ran on 2 machines by their hardware facts")
    assert "facts that differ: memory_gib" in "\n".join(verify_sessions([root]).refused)


def test_an_edited_label_changes_nothing_shown(tmp_path: Path) -> None:
    root = session_copy(tmp_path)
    before = summarize(verify_sessions([root]).records)
    case_dir = root / "cases" / "calibration/calibration/2n2g/bs8/fp32/synthetic"
    edit_rank_headers(case_dir / "repeat-01", lambda _rank, h: h.update(hardware="8x H100 | x"))
    verified = verify_sessions([root])
    assert verified.refused == []
    after = summarize(verified.records)
    assert [(s.identity, s.stats.repeats) for s in after] == [
        (s.identity, s.stats.repeats) for s in before
    ]
    assert not any("H100" in s.identity for s in after)


def test_facts_edited_on_every_rank_are_another_machine_never_pooled(tmp_path: Path) -> None:
    """Every rank of one repeat claims other facts (memory, which the label does not show):
    one machine within the repeat, but not the machine of the case's other repeats: its own
    row, labelled apart by its facts' digest, with no speedup (no 1n1g of the same facts)."""
    root = session_copy(tmp_path)
    case_dir = root / "cases" / "calibration/calibration/2n2g/bs8/fp32/synthetic"
    edit_rank_headers(
        case_dir / "repeat-01", lambda _rank, h: h["fingerprint"].update(memory_gib=999)
    )
    verified = verify_sessions([root])
    assert verified.refused == []
    two = [s for s in summarize(verified.records) if s.case.topology.label == "2n2g"]
    assert sorted(s.stats.repeats for s in two) == [1, 2]
    edited = next(s for s in two if s.stats.repeats == 1)
    own = next(s for s in two if s.stats.repeats == 2)
    label = hardware_of(
        json.loads((case_dir / "repeat-02" / "record.json").read_text())["header"]
    ).label
    assert edited.identity.startswith(f"{label} [") and own.identity.startswith(f"{label} [")
    assert edited.identity != own.identity
    assert edited.speedup is None  # no 1n1g on that machine: no speedup across machines
    assert own.speedup == pytest.approx(2.0, rel=0.05)


def test_gpus_claimed_in_the_facts_of_a_cpu_run_are_not_its_label(tmp_path: Path) -> None:
    """The facts of every rank claim eight H100s; the ranks' devices still say they ran on no
    GPU: the label names what they ran on (this node's CPU), never the GPUs. Claiming the GPUs
    in the devices too is refused: the facts list no such device, or (with them listed) every
    rank must name them alike."""
    root = session_copy(tmp_path)
    case_dir = root / "cases" / "calibration/calibration/1n2g/bs8/fp32/synthetic"
    gpu = {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "max_sm_clock_mhz": 1980,
           "max_memory_clock_mhz": 2619, "power_limit_w": 700.0, "default_power_limit_w": 700.0,
           "pcie_gen_max": 5, "pcie_width_max": 16, "sm_count": 132}  # fmt: skip

    def eight_h100(_rank: int, header: dict) -> None:
        header["fingerprint"].update(gpus=[gpu] * 8, devices_per_node=8, gpu_link="NVLink",
                                     interconnect="NVLink")  # fmt: skip
        header["hardware"] = "8x H100 80GB HBM3 700W NVLink"

    edit_rank_headers(case_dir / "repeat-01", eight_h100)
    verified = verify_sessions([root])
    assert verified.refused == []
    labels = {r.fingerprint for r in verified.repeats}
    assert not any("H100" in label for label in labels), labels
    edit_rank_headers(case_dir / "repeat-02", lambda _r, h: h.update(devices=["NVIDIA A100"]))
    refused = verify_sessions([root]).refused
    assert any("header field 'devices' names 'NVIDIA A100'" in line for line in refused), refused


def without_fingerprint(root: Path) -> Path:
    """The session as logs from before the fingerprint are."""
    return rewrite_session_headers(root, drop_fingerprint)


def test_attest_hardware_refuses_logs_that_carry_their_own(tmp_path: Path) -> None:
    from driver.frontend.cli import main

    root = session_copy(tmp_path)  # a session of this kit: every header has a fingerprint
    assert main(["attest-hardware", str(root), "--label", "AMD EPYC 2c avx2",
                 "--source", "a test that should be refused"]) == 2  # fmt: skip
    assert not (root / "hardware.json").exists()


def test_attested_sessions_are_split_by_machine_in_report_and_release(tmp_path: Path) -> None:
    from driver.frontend.cli import main

    old = without_fingerprint(session_copy(tmp_path, "old"))
    new = without_fingerprint(session_copy(tmp_path, "new"))
    new_case = new / "cases" / "calibration/calibration/1n1g/bs8/fp32/synthetic"
    shutil.rmtree(new / "cases" / "calibration/calibration/1n2g")  # new: 1n1g and 2n2g only
    assert new_case.exists()
    source = "the session's closing note: the machine had AVX2 only"
    argv = ["attest-hardware", str(old), "--label", "AMD EPYC 2c avx2", "--source", source,
            "--fact", "isa=avx2", "--fact", "cores=2"]  # fmt: skip
    assert main(argv) == 0
    assert main(argv) == 2  # written once
    assert main(["attest-hardware", str(new), "--label", "AMD EPYC 2c avx512_bf16",
                 "--source", "the session's closing note: AVX-512 with bf16"]) == 0  # fmt: skip
    with pytest.raises(ReleaseError, match="is in sessions"):  # one case, one session
        release("v0.1", [old, new], reports_root=tmp_path / "r0", compute_flops=False)
    shutil.rmtree(new / "cases" / "calibration/calibration/1n1g")
    shutil.rmtree(new / "cases" / "calibration/calibration/2n2g")
    verified = verify_sessions([old])
    assert {r.fingerprint for r in verified.repeats} == {"AMD EPYC 2c avx2"}
    version = release("v0.1", [old], reports_root=tmp_path / "r", compute_flops=False,
                      printer=lambda _l: None)  # fmt: skip
    readme = (version / "README.md").read_text()
    assert "| `old`     | AMD EPYC 2c avx2 | the session's hardware.json (attested) |" in readme
    rows = json.loads((version / "results.json").read_text())["cases"]
    assert {row["fingerprint"] for row in rows} == {"AMD EPYC 2c avx2"}


def test_two_attested_machines_never_share_a_median_or_a_baseline(tmp_path: Path) -> None:
    from driver.frontend.cli import main

    a = without_fingerprint(session_copy(tmp_path, "a"))
    b = without_fingerprint(session_copy(tmp_path, "b"))
    for root, label in ((a, "EPYC avx2"), (b, "EPYC avx512_bf16")):
        assert main(["attest-hardware", str(root), "--label", label,
                     "--source", "written by this test for two machines"]) == 0  # fmt: skip
    summaries = summarize(verify_sessions([a, b]).records)
    assert len(summaries) == 6 and all(s.stats.repeats == 3 for s in summaries)
    for s in summaries:
        assert s.identity in ("EPYC avx2", "EPYC avx512_bf16")
        base = next(x for x in summaries if x.case.topology.world_size == 1
                    and x.identity == s.identity)  # fmt: skip
        assert s.speedup == pytest.approx(s.stats.median / base.stats.median)


def test_a_broken_attestation_is_refused_by_name(tmp_path: Path) -> None:
    root = session_copy(tmp_path)
    (root / "hardware.json").write_text('{"schema": 1, "label": "x\\ny", "source": "short"}')
    refused = verify_sessions([root]).refused
    assert refused and all(line.startswith(f"{root / 'hardware.json'}: ") for line in refused)
    assert "field label" in refused[0] and "field source" in refused[0]


@pytest.mark.parametrize(
    "extra",
    [["--label", "x\ny"], ["--source", "short"], ["--fact", "isa=avx2\r=1"], ["--fact", "=v"],
     ["--fact", "isa=a", "--fact", "isa=b"]],
)  # fmt: skip
def test_a_bad_attestation_is_refused_and_nothing_written(tmp_path: Path, extra: list[str]) -> None:
    from driver.frontend.cli import main

    root = without_fingerprint(session_copy(tmp_path))
    argv = ["attest-hardware", str(root), "--label", "AMD EPYC 2c avx2", "--source",
            "a test of hostile attestations", *extra]  # fmt: skip
    assert main(argv) == 2
    assert not (root / "hardware.json").exists()
    link = tmp_path / "linked"
    link.symlink_to(root, target_is_directory=True)
    assert main(["attest-hardware", str(link), "--label", "AMD EPYC 2c avx2", "--source",
                 "a test of a symlinked session"]) == 2  # fmt: skip


CASE_2N2G = "calibration/calibration/2n2g/bs8/fp32/synthetic"


def test_the_slowest_rank_and_node_are_rederived_and_an_older_record_still_verifies(
    tmp_path: Path,
) -> None:
    root = session_copy(tmp_path)
    path = root / "cases" / CASE_2N2G / "repeat-01" / "record.json"
    data = json.loads(path.read_text())
    facts = {name: data["measurement"][name] for name in STRAGGLER_FIELDS}
    node = facts["slowest_node"]  # 2n2g: rank r runs on node r
    assert node in (0, 1) and facts["slowest_rank"] == node
    assert facts["slowest_node_ranks"] == [node] and facts["slowest_node_excess"] >= 0
    # a record written before the facts existed: verified, the facts taken from its logs
    for name in STRAGGLER_FIELDS:
        del data["measurement"][name]
    path.write_text(json.dumps(data))
    verified = verify_sessions([root])
    assert verified.refused == []
    [(_case, record, _machine)] = [
        (c, r, m) for c, r, m in verified.records if c.id == CASE_2N2G and r.repeat == 1
    ]
    assert record.measurement.slowest_node == node
    assert record.measurement.slowest_node_ranks == [node]
    # a record that misstates them is refused: the logs say who was slowest
    data["measurement"].update(facts, slowest_node=1 - node)
    path.write_text(json.dumps(data))
    (refused,) = verify_sessions([root]).refused
    assert f"measurement.slowest_node is {1 - node} in the record but {node} from the logs" in (
        refused
    )


def test_a_record_whose_fingerprints_are_not_its_logs_is_refused_an_older_one_verifies(
    tmp_path: Path,
) -> None:
    """The seal takes every rank's fingerprint facts from the record (schema 3), so the door
    holds them to the logs like the header; a record written before them has none to compare."""
    root = session_copy(tmp_path)
    path = root / "cases" / CASE_2N2G / "repeat-01" / "record.json"
    data = json.loads(path.read_text())
    (group,) = data["fingerprints"]
    assert group["ranks"] == [0, 1] and group["facts"] == data["header"]["fingerprint"]
    group["facts"]["memory_gib"] += 64  # another machine, claimed by the record alone
    path.write_text(json.dumps(data))
    (refused,) = verify_sessions([root]).refused
    assert f"{path}: fingerprints differ from the ranks' headers in the logs" in refused
    del data["fingerprints"]
    path.write_text(json.dumps({**data, "schema": 2}))
    assert verify_sessions([root]).refused == []
