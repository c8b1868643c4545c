"""driver.core.estimate and what it reads (driver.core.knowledge): the cost of a selection before
it runs, and beside what it took."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest
import yaml

from driver.bench.contract import MODELS
from driver.core.estimate import (
    ASSUMED_MFU,
    estimate_case,
    split_job_count,
    time_limit_problem,
    total_seconds,
)
from driver.core.knowledge import Knowledge, load_knowledge
from driver.frontend.cli import main
from driver.model.case import Case, Topology
from driver.model.figures import match_device, peak_precision
from driver.model.measure import RepeatMeasurement
from driver.model.results import RepeatRecord
from driver.workloads.llama import MODEL as LLAMA
from driver.workloads.llama import training_flops_per_sample

EXAMPLES = Path(__file__).parents[1] / "examples"
# A released version's rows to start from (every field a release writes), the test's own
# figures put in: the estimate reads a version through the release's reader.
RELEASED = json.loads((EXAMPLES.parent / "reports" / "v0.4-cpu" / "results.json").read_text())


def case(model: str = "resnet50", batch: int | str = 8, precision: str = "fp32", **more) -> Case:
    return Case(
        model=model, framework="pytorch", topology=Topology(1, 1), batch_size=batch,
        precision=precision, dataset="synthetic", warmup_steps=10, measured_steps=90,
        total_steps=100, repeats=2, **more,
    )  # fmt: skip


@pytest.fixture
def kit(tmp_path: Path) -> Path:
    """A kit folder with one released CPU figure, one published GPU figure and peaks."""
    release = tmp_path / "reports" / "v1"
    release.mkdir(parents=True)
    measured = {"case_id": "x", "model": "resnet50", "framework": "pytorch", "precision": "fp32",
                "devices": 1, "batch_per_device": 8, "device_names": ["AMD EPYC"],
                "throughput_median": 4.0, "flops_per_sample": 12e9, "options": {}}  # fmt: skip
    # a repeat of 100 steps, 20 s measured over 90 of them, 32 s wall: 10 s start-up
    repeat = {"case_id": "x", "runtime": "local", "verdict": "ok", "started_at": 100.0,
              "finished_at": 132.2222222, "warmup_steps": 10, "measured_steps": 90,
              "duration_s": 20.0}  # fmt: skip
    local = next(r for r in RELEASED["repeats"] if r["runtime"] == "local")
    rows = {**RELEASED, "version": "v1", "cases": [{**RELEASED["cases"][0], **measured}],
            "repeats": [{**local, **repeat}]}  # fmt: skip
    (release / "results.json").write_text(json.dumps(rows, indent=2, sort_keys=True))
    published = tmp_path / "published" / "paper"
    published.mkdir(parents=True)
    figure = {"framework": "mxnet", "model": "resnet50", "hardware": "Tesla V100-SXM2-16GB",
              "nodes": 1, "devices": 8, "batch": 128, "precision": "fp32",
              "throughput": 2560.0}  # fmt: skip
    cited = {"publisher": "the test", "url": "https://example.com/"}  # as dlperf import asks
    (published / "figures.yaml").write_text(
        yaml.safe_dump({"schema": 1, **cited, "figures": [figure]})
    )
    # fp16 beside bf16, as every device's data sheet with both gives them (a record that names
    # no amp_dtype computed in fp16: model.figures.peak_precision)
    h100 = {"name": "H100", "match": ["H100"], "peaks": {"bf16": 1000.0, "fp16": 1000.0},
            "source": "the test's round figure", "link": "https://example.com/"}  # fmt: skip
    peaks = {"schema": 1, "unit": "TFLOP/s", "devices": [h100]}
    (tmp_path / "reports" / "peaks.yaml").write_text(yaml.safe_dump(peaks))
    return tmp_path


@pytest.mark.parametrize(
    ("hardware", "the_case", "seconds", "basis"),
    [
        # 2 repeats x (10 s start-up + 100 steps x 8/4 s)
        ("AMD EPYC 7B13", case(), 2 * (10 + 100 * 2.0), "reports/v1/results.csv"),
        # published: 320 samples/s per V100 -> 0.4 s a step at 128
        ("V100", case(batch=128), 2 * (10 + 100 * 0.4), "published/paper/figures.yaml"),
        # no figure on H100: 12 GFLOP/sample at 30% of 1000 TFLOP/s, batch 250 -> 0.01 s; a
        # GPU of peaks.yaml starts in the assumed 30 s on one node (the measured 10 s: a CPU's)
        ("H100", case(batch=250, precision="amp"), 2 * (30 + 100 * 0.01), "peaks.yaml"),
    ],
)
def test_the_step_time_comes_from_the_nearest_figure(
    kit: Path, hardware: str, the_case: Case, seconds: float, basis: str
) -> None:
    estimate = estimate_case(the_case, hardware, load_knowledge(kit))
    assert estimate.seconds == pytest.approx(seconds, rel=1e-3)
    assert basis in estimate.basis


def test_equally_near_figures_give_their_median(kit: Path) -> None:
    again = kit / "reports" / "v2"
    again.mkdir()
    text = (kit / "reports" / "v1" / "results.json").read_text()
    faster = text.replace('"throughput_median": 4.0,', '"throughput_median": 8.0,', 1)
    assert faster != text
    (again / "results.json").write_text(faster)  # twice as fast
    estimate = estimate_case(case(), "AMD EPYC", load_knowledge(kit))
    assert estimate.step_s == pytest.approx(8 / 6.0)  # the median of 4 and 8 samples/s
    assert "median of 2" in estimate.basis


def test_a_published_file_the_import_loader_refuses_is_left_out_with_one_warning(
    kit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Published figures are read by ``dlperf import``'s loader: a file it refuses (here a
    figure of no plausible samples/s) is named once and left out, the others still count."""
    broken = kit / "published" / "broken"
    broken.mkdir()
    figure = {"framework": "pytorch", "model": "resnet50", "hardware": "A100", "nodes": 1,
              "devices": 1, "batch": 64, "precision": "fp32", "throughput": 1e9}  # fmt: skip
    (broken / "figures.yaml").write_text(yaml.safe_dump(
        {"schema": 1, "publisher": "x", "url": "https://example.com/", "figures": [figure]}
    ))  # fmt: skip
    knowledge = load_knowledge(kit)
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning:" in line]
    assert len(warnings) == 1 and "published/broken/figures.yaml: figures[0].throughput" in (
        warnings[0]
    )
    assert "left out of the estimate" in warnings[0]
    assert estimate_case(case(), "A100", knowledge).seconds is None  # no A100 figure taken
    assert "published/paper" in estimate_case(case(batch=128), "V100", knowledge).basis


def test_a_released_version_its_reader_refuses_is_left_out_with_one_warning(
    kit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A version's results.json is read by the release's reader: one it refuses (an unknown
    field here) is named once and left out, never a traceback; the other versions still count."""
    forged = kit / "reports" / "v2"
    forged.mkdir()
    rows = json.loads((kit / "reports" / "v1" / "results.json").read_text())
    rows["cases"][0]["throughput_median_x"] = 1.0
    (forged / "results.json").write_text(json.dumps(rows))
    knowledge = load_knowledge(kit)
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning:" in line]
    assert len(warnings) == 1 and "reports/v2/results.json: cases." in warnings[0], warnings
    assert "reports/v1/results.csv" in estimate_case(case(), "AMD EPYC", knowledge).basis


def test_nothing_known_is_said_and_left_out_of_the_total(kit: Path) -> None:
    knowledge = load_knowledge(kit)
    unknown = estimate_case(case(model="bert"), "", knowledge)
    assert unknown.seconds is None and "--hardware" in unknown.basis
    known = estimate_case(case(), "AMD EPYC", knowledge)
    assert total_seconds([unknown, known]) == known.seconds


def test_a_new_model_plugs_its_flop_count_in_by_its_workload(kit: Path) -> None:
    from tests.tiny_workload import NAME, PARAMETERS

    estimate = estimate_case(case(model=NAME, batch=3, precision="amp"), "H100",
                             load_knowledge(kit))  # fmt: skip
    flops = 6 * PARAMETERS * 2048  # its formula at the sequence it is planned with
    assert estimate.step_s == pytest.approx(3 * flops / (1000e12 * 0.3))


@pytest.mark.parametrize(
    ("precision", "options", "amp_dtype", "column"),
    [
        ("fp32", {"tf32": True}, "auto", "tf32"),  # the plan read fp32 here, the release tf32
        ("fp32", {}, "auto", "fp32"),
        ("amp", {}, "fp16", "fp16"),  # the plan read bf16 (the device has it), the release fp16
        ("amp", {}, "bf16", "bf16"),
        ("amp", {}, "auto", "bf16"),  # --amp-dtype auto: bf16 where the device has it
    ],
)
def test_the_plan_and_the_release_read_one_peak_column(
    precision: str, options: dict, amp_dtype: str, column: str
) -> None:
    """The plan's FLOP estimate and a release's MFU take a device's peak from one column, by one
    rule (model.figures.peak_precision). They disagreed: the plan read an fp32 case with TF32
    math on at the IEEE fp32 peak and an fp16 AMP case at the bf16 peak, where the release read
    tf32 and fp16. A device whose columns all differ shows which one each reads."""
    device = {"name": "X1", "match": ["X1"],
              "peaks": {"bf16": 800.0, "fp16": 400.0, "tf32": 200.0, "fp32": 100.0}}  # fmt: skip
    knowledge = Knowledge([], {"resnet50": 12e9}, [device], 10.0, "")
    planned = case(batch=300, precision=precision, options=options, amp_dtype=amp_dtype)
    estimate = estimate_case(planned, "X1", knowledge)
    peak = device["peaks"][column]
    assert estimate.step_s == pytest.approx(300 * 12e9 / (peak * 1e12 * ASSUMED_MFU))
    assert f"of {peak:g} TFLOP/s" in estimate.basis
    # the run's record names the dtype that ran: the release reads the same column
    ran = {"auto": "bfloat16", "bf16": "bfloat16", "fp16": "float16"}[amp_dtype]
    recorded = {**options, "amp_dtype": ran} if precision == "amp" else options
    assert peak_precision(precision, recorded) == column
    assert match_device("NVIDIA X1 80GB", [device])["peaks"][column] == peak


def test_batch_search_and_epochs_are_counted(kit: Path) -> None:
    knowledge = Knowledge(load_knowledge(kit).figures, {}, [], 10.0, "")
    fixed = estimate_case(case(batch=32), "AMD EPYC", knowledge).seconds
    searched = estimate_case(case(batch="max"), "AMD EPYC", knowledge)
    assert searched.seconds > fixed and "batch search" in searched.basis
    epoch = estimate_case(case(epochs=1.0, epoch_samples=8000), "AMD EPYC", knowledge)
    assert epoch.seconds == pytest.approx(2 * (10 + (10 + 1000) * 2.0))  # 1000 steps of 8


def test_a_slurm_job_that_cannot_fit_is_refused_with_the_fix(kit: Path) -> None:
    estimates = [estimate_case(case(), "AMD EPYC", load_knowledge(kit))]  # 420 s
    assert time_limit_problem(estimates, 3600, "cluster.yaml") is None
    problem = time_limit_problem(estimates, 300, "cluster.yaml")
    assert "exceeds slurm.time_limit" in problem and "at least 9 minutes" in problem
    assert "split_jobs: true" in problem


def test_split_jobs_need_only_each_repeat_and_the_setup_to_fit_a_job(kit: Path) -> None:
    """slurm.split_jobs: a 420 s case of 2 repeats may span jobs of 300 s (210 s a repeat),
    not jobs of 200 s; the setup every job repeats (an image import) counts with the repeat."""
    from driver.core.estimate import CaseEstimate

    (estimate,) = [estimate_case(case(), "AMD EPYC", load_knowledge(kit))]
    repeats = {estimate.case_id: 2}
    assert time_limit_problem([estimate], 300, "c.yaml", split=True, repeats=repeats) is None
    problem = time_limit_problem([estimate], 200, "c.yaml", split=True, repeats=repeats)
    assert f"a repeat of {estimate.case_id} is estimated at 3m30s" in problem
    assert "no job of the split selection could hold it" in problem
    setup = CaseEstimate("pyxis import", 120.0, None, "assumed", kind="setup")
    assert time_limit_problem([estimate, setup], 300, "c.yaml", split=True, repeats=repeats)
    assert split_job_count([estimate], 300, repeats) == 2  # 210 s, then 210 s in a new job
    assert split_job_count([estimate], 420, repeats) == 1
    # every job imports first (120 s): one 210 s repeat a 500 s job, two a 560 s one
    assert split_job_count([estimate, estimate, setup], 500, repeats) == 4
    assert split_job_count([estimate, estimate, setup], 560, repeats) == 2


@pytest.mark.parametrize(("limit", "code"), [("00:01:00", 2), ("08:00:00", 0)])
def test_plan_under_slurm_checks_time_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture, limit: str, code: int
) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text((EXAMPLES / "slurm-4n32g.yaml").read_text().replace("04:00:00", limit))
    argv = ["plan", "--runtime", "slurm", "--inventory", str(cluster), "--hardware", "H100",
            "--model", "resnet50", "--nodes", "1", "--gpus", "8", "--amp", "on", "--batch", "256",
            "--profile", "dlperf", "--results", str(tmp_path)]  # fmt: skip
    assert main(argv) == code
    captured = capsys.readouterr()
    assert "resnet50/pytorch/1n8g/bs256/amp/synthetic" in captured.out
    assert ("raise time_limit" in captured.err) is (code == 2)
    assert "torch.distributed.run" not in captured.out  # plan prints no commands


@pytest.mark.frameworks  # runs PyTorch from its environment
def test_a_run_records_its_estimate_beside_what_it_took(tmp_path: Path) -> None:
    argv = ["run", "--model", "resnet50", "--profile", "cpu-smoke", "--variant", "default",
            "--amp", "off", "--repeats", "1", "--warmup-steps", "1", "--measured-steps", "2",
            "--option", "image_size=32", "--option", "num_classes=10", "--hardware", "AMD EPYC",
            "--results", str(tmp_path), "--session", "s"]  # fmt: skip
    assert main(argv) == 0
    recorded = json.loads((tmp_path / "s" / "report" / "estimate.json").read_text())
    [row] = recorded["cases"]
    assert row["seconds"] > 0 and row["actual_s"] > 0 and recorded["wall_s"] >= row["actual_s"]


def _record(folder: Path, throughput: float | str, **times: float) -> Path:
    """A finished repeat's record.json, as the runner writes one (the kit's record type)."""
    folder.mkdir(parents=True)
    header = {"model": "resnet50", "framework": "pytorch", "options": {"precision": "fp32"},
              "devices": ["AMD EPYC"]}
    measured = {"throughput": 1.0, "samples": 720, "duration_s": 9.0, "ranks": 1,
                "world_size": 1, "warmup_steps": 10, "measured_steps": 90}
    record = RepeatRecord(
        case_id="x", repeat=1, verdict="ok", batch_size=8, started_at=0.0, finished_at=20.0,
        commands=[], exit_codes={}, logs=[], parser="dlperf-jsonl",
        measurement=RepeatMeasurement(**measured), header=header,
    ).to_dict()  # fmt: skip
    record.update(times)
    text = json.dumps(record).replace('"throughput": 1.0', f'"throughput": {throughput}')
    (folder / "record.json").write_text(text)
    return folder / "record.json"


def test_the_users_sessions_are_read_newest_first_up_to_the_limit(tmp_path: Path) -> None:
    """Every run starts with this read: its cost is bounded, and what it keeps is the newest."""
    import os

    from driver.core.knowledge import _session_figures

    for number, (name, throughput) in enumerate([("zz-old", 1.0), ("aa-new", 2.0)]):
        _record(tmp_path / name / "cases" / "c" / "repeat-1", throughput)
        os.utime(tmp_path / name, (1_000_000 + number, 1_000_000 + number))
    figures, _ = _session_figures(tmp_path, limit=1)
    assert [(f.per_device, f.where) for f in figures] == [(2.0, "session aa-new")]
    figures, _ = _session_figures(tmp_path)
    assert sorted(f.per_device for f in figures) == [1.0, 2.0]


REPO = Path(__file__).parents[1]
H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("model", MODELS)
def test_every_model_of_the_kit_is_estimated_before_booking(model: str) -> None:
    """A model the kit runs has a figure or a FLOP count to estimate from: a model added
    without one fails here (a formula in its workload, or a released run)."""
    options = {"llama_size": "llama3-1b", "seq_len": 8192} if model == LLAMA else {}
    estimate = estimate_case(
        case(model=model, batch=2, precision="amp", options=options), H100, load_knowledge(REPO)
    )
    assert estimate.seconds is not None and estimate.seconds > 0, estimate.basis


def test_a_llama_figure_holds_for_its_size_and_sequence_only() -> None:
    knowledge = load_knowledge(REPO)
    eight = {"llama_size": "llama3-8b", "seq_len": 8192}
    estimate = estimate_case(case(model=LLAMA, batch=2, precision="amp", options=eight), "H100",
                             knowledge)  # fmt: skip
    # on "H100" (any H100): the published 8B figures at batch 2 (torchtitan's, in tokens/s per
    # device; NeMo's are at batch 1): their median
    per_device = [f.per_device for f in knowledge.figures
                  if f.shape == "llama3-8b at 8192 tokens" and f.batch_per_device == 2]  # fmt: skip
    assert per_device and "published/llama3/torchtitan.yaml" in estimate.basis
    assert estimate.step_s == pytest.approx(2 / statistics.median(per_device))
    # no 1B figure anywhere: the formula's FLOPs at the assumed MFU of the H100's bf16 peak,
    # never an 8B figure
    one = {"llama_size": "llama3-1b", "seq_len": 8192}
    small = estimate_case(case(model=LLAMA, batch=2, precision="amp", options=one), "H100",
                          knowledge)  # fmt: skip
    flops = training_flops_per_sample(one)
    assert "GFLOP/sample" in small.basis and small.step_s == pytest.approx(
        2 * flops / (989.4e12 * ASSUMED_MFU)
    )
    # the same size at another sequence length takes no 8192-token figure
    short = {"llama_size": "llama3-8b", "seq_len": 2048}
    other = estimate_case(case(model=LLAMA, batch=2, precision="amp", options=short), "H100",
                          knowledge)  # fmt: skip
    assert "GFLOP/sample" in other.basis


PLAN = ["plan", "--model", "resnet50", "--profile", "cpu-smoke", "--variant", "default",
        "--amp", "off", "--repeats", "1", "--hardware", "AMD EPYC"]  # fmt: skip


@pytest.mark.parametrize("throughput", ["0", "-5.0", "NaN", "Infinity", "1e-250", "1e300"])
def test_a_forged_figure_under_results_is_left_out_with_one_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], throughput: str
) -> None:
    """One record with throughput 0, negative, NaN or absurd made every `run` and `plan`
    traceback before anything ran, or print a negative or 260-digit estimate."""
    bad = _record(tmp_path / "forged" / "cases" / "c" / "repeat-1", throughput)
    assert main([*PLAN, "--results", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "session forged" not in out and "Traceback" not in err
    [warning] = [line for line in err.splitlines() if line.startswith("warning:")]
    assert str(bad) in warning and "left out of the estimate" in warning
    for line in out.splitlines()[1:]:
        shown = line.split()[0]
        assert shown == "?" or (not shown.startswith("-") and len(shown) <= 12), line


def test_times_no_run_has_are_left_out_with_one_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = _record(tmp_path / "s" / "cases" / "c" / "repeat-1", 2.0, finished_at=1e15)
    figures, startups = _session_figures_of(tmp_path)
    assert (figures, startups) == ([], [])
    assert str(bad) in capsys.readouterr().err


def _session_figures_of(results: Path) -> tuple[list, list]:
    from driver.core.knowledge import _session_figures

    return _session_figures(results)


def test_a_fifo_or_unreadable_record_is_skipped_without_hanging(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    folder = tmp_path / "s" / "cases" / "c" / "repeat-1"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "record.json")
    (tmp_path / "t" / "cases" / "c" / "repeat-1").mkdir(parents=True)
    (tmp_path / "t" / "cases" / "c" / "repeat-1" / "record.json").write_bytes(b"\xff{")
    done = subprocess.run(
        [sys.executable, "-m", "driver.frontend.cli", *PLAN, "--results", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2, done.stderr
    assert any("s/cases/c/repeat-1/record.json" in w and "not a regular file" in w
               for w in warnings)  # fmt: skip
    assert any("t/cases/c/repeat-1/record.json" in w for w in warnings)


def test_a_figure_past_the_devices_peak_cannot_make_a_time_limit_look_ample(
    kit: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """1e7 samples/s of ResNet-50 (12 GFLOP each) on one H100 is 120 PFLOP/s: forged. Taken,
    it made a job fit a time limit the honest estimate (from the peak) exceeds."""
    results = tmp_path / "results"
    path = _record(results / "forged" / "cases" / "c" / "repeat-1", 1e7)
    record = json.loads(path.read_text())
    record["header"].update(devices=["NVIDIA H100"], options={"precision": "amp"})
    path.write_text(json.dumps(record))
    knowledge = load_knowledge(kit, results=results)
    estimates = [estimate_case(case(batch=2560, precision="amp"), "H100", knowledge)]
    assert "peaks.yaml" in estimates[0].basis
    assert time_limit_problem(estimates, 30, "cluster.yaml") is not None
    assert "past the device's peak" in capsys.readouterr().err


@pytest.mark.parametrize("label", ["H100\x1b[2J", "H100\nfake line", "x" * 300, "<b>H100</b>"])
def test_hardware_is_held_to_the_rules_of_every_label(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], label: str
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main([*PLAN[:-2], "--hardware", label, "--results", str(tmp_path)])
    assert stopped.value.code == 2
    assert "--hardware" in capsys.readouterr().err


# --- the Llama day (issue #49) ---------------------------------------------------------------


def test_the_llama_matrix_on_the_readme_cluster_plans_within_a_day_of_8_hours(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """PyTorch's Llama matrix on 4 x 8 H100 (the README's Slurm example): 100 hours with the
    DLPerf protocol, batch max planned at 32 and the CPU runs' 6 s start-up; with the LLM
    protocol, the memory estimate's batch and start-ups by size, at most 8 h."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text((EXAMPLES / "slurm-4n32g.yaml").read_text().replace("04:00:00", "08:00:00"))
    argv = ["plan", "--runtime", "slurm", "--inventory", str(cluster), "--hardware", "H100",
            "--framework", "pytorch", "--model", "llama", "--results", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    total = next(line for line in out.splitlines() if "total, 25 case(s)" in line)
    hours, minutes = re.match(r"\s*(\d+)h(\d+)m", total).groups()
    assert int(hours) * 60 + int(minutes) <= 8 * 60, total
    assert "measured at batch 32" not in out  # no Llama max planned at twice 16
    # beside the wall time, what the day costs in devices: used by the cases, and held by a
    # job that keeps 4 x 8 devices throughout (the total's hours x 32)
    costs = next(line for line in out.splitlines() if "device-hours:" in line)
    used, held = (float(n.replace(",", "")) for n in re.findall(r"([\d,]+\.\d) ", costs))
    assert held == pytest.approx((int(hours) + int(minutes) / 60) * 32, abs=0.6)
    assert 0 < used < held and "largest topology's 32 devices" in costs
    eight_b = next(line for line in out.splitlines() if "1n8g/bs2/amp/synthetic/8b " in line)
    assert "start-up 60 s per repeat (assumed for llama3-8b on GPUs)" in eight_b
    assert "by the memory estimate it needs 82.7 GiB of the device's 80 GiB" in eight_b
    assert "median of 4" in eight_b  # torchtitan's bf16 rows only: no Float8 figure


def test_the_memory_estimate_holds_torchtitans_published_peak_and_sizes_batch_max() -> None:
    from driver.workloads.llama import LLAMA_SIZES, largest_batch, training_memory_bytes

    state, per_sequence = training_memory_bytes(LLAMA_SIZES["llama3-8b"], 8192, 8, "selective")
    assert (state + 2 * per_sequence) / 2**30 == pytest.approx(82.4, rel=0.01)  # published
    eight_b = {"llama_size": "llama3-8b", "seq_len": 8192, "activation_checkpointing": "selective"}
    assert largest_batch(eight_b, 8, 8, 80 * 2**30) == 1  # batch 2 is a 96 GB figure
    assert largest_batch(eight_b, 8, 8, 96 * 2**30) == 2
    full = {**eight_b, "activation_checkpointing": "full"}
    assert largest_batch(full, 8, 8, 80 * 2**30) > largest_batch(eight_b, 8, 8, 80 * 2**30)
    seventy_b = {"llama_size": "llama3-70b", "seq_len": 8192, "activation_checkpointing": "full"}
    assert largest_batch(seventy_b, 1, 1, 80 * 2**30) == 0  # its state alone is 1 TB
    assert largest_batch(seventy_b, 32, 8, 80 * 2**30) >= 1


def test_the_time_limit_guard_applies_without_hardware_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make llama-pytorch RUNTIME=slurm ...` passed no --hardware, nothing was estimated and a
    99-hour selection went to sbatch under a 4-hour limit. The device is named by the cluster
    file's slurm.hardware or make's HARDWARE= ($DLPERF_HARDWARE); a GPU job nothing of which
    can be estimated is refused before it is submitted (a dry run and a plan warn)."""
    from driver.cluster.slurm import SlurmConfig
    from driver.core.estimate import CaseEstimate
    from driver.frontend.commands.run import time_limit_refusal
    from driver.runtimes.slurm.runtime import SlurmRuntime

    monkeypatch.delenv("DLPERF_HARDWARE", raising=False)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text((EXAMPLES / "slurm-4n32g.yaml").read_text() + "  hardware: H100\n")
    argv = ["plan", "--runtime", "slurm", "--inventory", str(cluster), "--framework", "pytorch",
            "--model", "llama", "--results", str(tmp_path)]  # fmt: skip
    assert main(argv) == 2  # 6-7 hours do not fit the example's 4: the guard applies
    captured = capsys.readouterr()
    assert "estimate on H100" in captured.out and "exceeds slurm.time_limit 4h00m" in captured.err
    monkeypatch.setenv("DLPERF_HARDWARE", "NVIDIA H100 80GB HBM3")
    assert main([*argv[:4], str(EXAMPLES / "slurm-4n32g.yaml"), *argv[5:]]) == 2
    assert "estimate on NVIDIA H100 80GB HBM3" in capsys.readouterr().out
    gpu_job = SlurmRuntime(config=SlurmConfig(gpus_per_node=8, container="none"))
    blind = [CaseEstimate("x", None, None, "no hardware")]
    assert "name the nodes' device with --hardware" in time_limit_refusal(gpu_job, "c", blind)
    assert time_limit_refusal(gpu_job, "c", blind, submitting=False) == ""
    assert "warning: nothing of the selection can be estimated" in capsys.readouterr().err
    cpu_job = SlurmRuntime(config=SlurmConfig(container="none"))  # the test cluster: no GPUs
    assert time_limit_refusal(cpu_job, "c", blind) == ""


def test_nodes_and_gpus_leave_out_what_no_device_could_hold_instead_of_rewriting_it() -> None:
    """`--nodes 1 --gpus 1` once put Llama 3.1 8B and 70B on one GPU; now a case whose training
    state and one sequence need more than the largest device of reports/peaks.yaml is left
    out, in one line; what fits some device (1B, 8B with full checkpointing on an H200) stays."""
    from driver.core.matrix import Overrides
    from driver.core.session import select_cases

    matrix = Path(__file__).parents[1] / "PyTorch" / "matrix.yaml"
    selection = select_cases([matrix], "dlperf", "test",
                             Overrides(topologies=("1n1g",), models=("llama",)))  # fmt: skip
    kept = {c.variant for c in selection.cases}
    assert {"1b", "1b-compile", "8b-full-ac"} <= kept
    assert not kept & {"8b", "8b-compile", "70b", "8b-hsdp"}
    assert "left out: on the topology given, by the memory estimate" in selection.note
    assert "the largest 141 GiB" in selection.note
    untouched = select_cases([matrix], "dlperf", "test", Overrides(models=("llama",)))
    assert "70b" in {c.variant for c in untouched.cases} and not untouched.note


# --- the cluster day's hidden costs (issue #50) -----------------------------------------------


def test_a_slurm_plan_prices_the_image_import_gpu_start_ups_and_whole_epoch_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """On 4 x 8 H100 under pyxis: one image import per framework image and job (held by the
    job's 32 devices), the assumed GPU start-up of a ResNet-50 repeat (30 s on one node, 60 s
    across nodes; the CPU runs' 6 s is not a GPU's), and pytorch/examples' repeats priced by
    the ImageNet epoch its main.py trains whatever the window."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text((EXAMPLES / "slurm-4n32g.yaml").read_text().replace("04:00:00", "99:00:00"))
    base = ["plan", "--runtime", "slurm", "--inventory", str(cluster), "--hardware", "H100",
            "--results", str(tmp_path)]  # fmt: skip
    assert main([*base, "--framework", "pytorch", "--model", "resnet50", "--batch", "256"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    imports = [line for line in lines if "image import:" in line]
    assert len(imports) == 1 and "pytorch (pyxis, every node at once)" in imports[0]
    assert imports[0].split()[0] == "5m00s"
    total = next(line for line in lines if " total, " in line)
    assert "case(s) and 1 image import(s)" in total
    one_node = next(line for line in lines if "/1n8g/bs256/amp/" in line)
    assert "start-up 30 s per repeat (assumed for GPUs on one node)" in one_node
    four_nodes = next(line for line in lines if "/4n32g/bs256/amp/" in line)
    assert "start-up 60 s per repeat (assumed for GPUs on several nodes)" in four_nodes
    matrix = Path(__file__).parents[1] / "PyTorch" / "upstream" / "matrix.yaml"
    assert main([*base, "--matrix", str(matrix), "--nodes", "1", "--gpus", "8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert not any("image import:" in line for line in lines)  # imported on the login node
    epoch = next(line for line in lines if "src-pytorch-examples" in line)
    # 1,281,167 / (128 x 8) = 1,252 training steps + 49 validation steps at a third: 1,268
    assert "trains a whole epoch per repeat (1,281,167 samples, then 50,000 validated)" in epoch
    assert "1,268 steps' time" in epoch
