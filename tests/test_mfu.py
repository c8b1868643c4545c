"""Model-FLOPs utilization: FLOPs from the model definitions, peaks per device, cached for audit."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from driver.bench.contract import SHAPE_OPTIONS
from driver.bench.protocol import StepLogger
from driver.core.runner import evaluate, run_cases
from driver.frameworks.base import REPO_ROOT
from driver.model.case import Case, Topology
from driver.model.figures import load_peaks, match_device, mfu, peak_precision
from driver.model.results import RepeatLogs, RepeatRecord, Session
from driver.plugins import load_all
from driver.release.audit import audit
from driver.release.mfu import (
    compute_model_costs,
    cost_key,
)
from driver.release.release import release
from driver.runtimes.local import LocalRuntime
from driver.workloads.base import find_workload
from tests.synth import telemetry_interval

H100 = "NVIDIA H100 80GB HBM3"
PEAKS = load_peaks(REPO_ROOT / "reports" / "peaks.yaml")
TINY_BERT = {
    "bert_layers": 1,
    "bert_hidden": 32,
    "bert_heads": 2,
    "bert_intermediate": 64,
    "seq_len": 16,
    "vocab_size": 100,
    "max_predictions": 2,
}


def bert_case(**fields: Any) -> Case:
    """A synthetic-data PyTorch BERT case on 1n1g; each test gives the rest."""
    return Case(
        model="bert",
        framework="pytorch",
        topology=Topology.parse("1n1g"),
        dataset="synthetic",
        **fields,
    )


def quiet(_line: str) -> None:
    pass


def has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


needs_torch = pytest.mark.skipif(not has_torch(), reason="torch is not installed here")


def test_devices_match_their_peaks() -> None:
    assert match_device(H100, PEAKS)["name"] == "H100 SXM"
    assert match_device("NVIDIA H200", PEAKS)["peaks"]["bf16"] == 989.4
    # the PCIe and NVL parts have their own peaks (an H200 NVL was matched as an SXM H200)
    assert match_device("NVIDIA H100 PCIe", PEAKS)["peaks"]["bf16"] == 756.5
    assert match_device("NVIDIA H100 NVL", PEAKS)["peaks"]["bf16"] == 835.5
    assert match_device("NVIDIA H200 NVL", PEAKS)["peaks"]["bf16"] == 835.5
    assert match_device("NVIDIA H100 96GB HBM2e", PEAKS) is None  # no data sheet: MFU "-"
    assert match_device("NVIDIA A100-SXM4-80GB", PEAKS)["peaks"]["tf32"] == 156.0
    assert match_device("Tesla V100-SXM2-16GB", PEAKS)["peaks"] == {"fp16": 125.0, "fp32": 15.7}
    assert match_device("AMD EPYC 9B14", PEAKS) is None and match_device(None, PEAKS) is None
    assert match_device(H100, PEAKS)["peaks"]["fp32"] == 66.9


def test_the_peak_follows_the_precision_the_run_computed_in() -> None:
    assert peak_precision("amp", {"amp_dtype": "bfloat16"}) == "bf16"
    assert peak_precision("amp", {"amp_dtype": "float16"}) == "fp16"
    assert peak_precision("amp", {}) == "fp16"
    assert peak_precision("fp32", {"tf32": True}) == "tf32"
    assert peak_precision("fp32", {"tf32": False}) == "fp32"
    # a case before it runs (--amp-dtype auto): bf16 where the device has a bf16 peak (an H100),
    # else fp16 (a V100); the case's own dtype wherever it names one
    assert peak_precision("amp", {"amp_dtype": "auto"}, match_device(H100, PEAKS)) == "bf16"
    v100 = match_device("Tesla V100-SXM2-16GB", PEAKS)
    assert peak_precision("amp", {"amp_dtype": "auto"}, v100) == "fp16"
    assert peak_precision("amp", {"amp_dtype": "fp16"}, match_device(H100, PEAKS)) == "fp16"
    # ResNet-50 at 2791 img/s on one H100 in bf16 (Lambda) with 24.5 GFLOP/img: ~6.9%
    assert mfu(2791, 24.5e9, 1, 989.4) == pytest.approx(0.0691, abs=1e-4)
    assert mfu(100.0, None, 1, 989.4) is None and mfu(100.0, 1e9, 1, None) is None


@needs_torch
def test_flops_come_from_the_model_definitions() -> None:
    from PyTorch.benchmark.flops import training_flops_per_sample

    costs = compute_model_costs([("bert", TINY_BERT), ("calibration", {"step_time": 0.01})])
    (key,) = costs
    assert key == cost_key("bert", {**TINY_BERT, "channels_last": True})  # shapes only
    assert costs[key]["flops_per_sample"] == training_flops_per_sample("bert", TINY_BERT)
    assert costs[key]["parameters"] > 0 and costs[key]["torch"]


@needs_torch
@pytest.mark.parametrize("model", ["resnet50", "inception3", "bert"])
def test_the_count_a_workload_holds_is_what_the_flop_counter_counts(model: str) -> None:
    """A session's MFU of a counted model at its default shape uses the count its workload
    holds (no torch in the driver): it must be what PyTorch's FLOP counter counts today, so a
    change to the model definition or to a default shape that moves the count fails here."""
    from PyTorch.benchmark.flops import training_flops_per_sample

    workload = find_workload(model)
    assert workload is not None and workload.counted
    assert workload.counted_flops_per_sample(SHAPE_OPTIONS) == training_flops_per_sample(model)
    other = {**SHAPE_OPTIONS, "seq_len": 512, "image_size": 64}
    assert workload.counted_flops_per_sample(other) is None


def handmade_session(root: Path, case: Case, step_s: float, devices: list[str]) -> Path:
    """A session whose logs are written by the step-log protocol with a known clock."""
    load_all()
    session = Session.open(root, {"profile": "test", "runtime": "local"})
    session.save_case(case)
    batch = int(case.batch_size)
    for repeat in range(1, case.repeats + 1):
        folder = session.fresh_repeat_dir(case, repeat)
        stream = io.StringIO()
        times = iter(100.0 + step_s * (1 + 0.001 * repeat) * i for i in range(case.total_steps + 1))
        logger = StepLogger(
            framework=case.framework,
            model=case.model,
            stream=stream,
            clock=lambda times=times: next(times),
            rank_env={"rank": 0, "world_size": 1, "local_rank": 0, "node_rank": 0},
        )
        logger.header(
            versions={"torch": "2.13.0"},
            devices=devices,
            options={**case.options, "amp_dtype": "bfloat16", "tf32": False},
        )
        logger.begin()
        for step in range(1, case.total_steps + 1):
            logger.step(step, batch, loss=1.0)
        logger.end()
        (folder / "node0.log").write_text(stream.getvalue())
        measurement, parsed = evaluate(case, "dlperf-jsonl", RepeatLogs.read(folder).texts, batch)
        header = parsed.header
        session.write_record(
            folder,
            RepeatRecord(
                case_id=case.id,
                repeat=repeat,
                verdict="ok",
                batch_size=batch,
                started_at=1.0,
                finished_at=2.0,
                commands=[],
                exit_codes={"local0": 0},
                logs=["node0.log"],
                log_sha256=RepeatLogs.read(folder).sha256(),  # as the runner writes it
                parser="dlperf-jsonl",
                measurement=measurement,
                header=header,
            ),
        )
    return root


@needs_torch
def test_mfu_cells_are_computed_cached_and_audited_without_torch(tmp_path: Path) -> None:
    case = bert_case(
        batch_size=64, precision="amp", warmup_steps=2, measured_steps=10, total_steps=12,
        repeats=3,
    )
    session = handmade_session(tmp_path / "h100", case, step_s=0.0144, devices=[H100])
    version = release("v0.1", [session], reports_root=tmp_path / "reports", printer=quiet)
    manifest = json.loads((version / "manifest.json").read_text())
    (cost,) = manifest["model_costs"].values()
    # BERT-base pre-training at seq 128: ~70 GFLOP per sequence (3x forward, MLM head)
    assert cost["flops_per_sample"] == pytest.approx(70e9, rel=0.05)
    (row,) = json.loads((version / "results.json").read_text())["cases"]
    expected = row["throughput_median"] * cost["flops_per_sample"] / 989.4e12
    assert row["mfu"] == expected and row["peak_precision"] == "bf16"
    assert row["peak_device"] == "H100 SXM" and 0.25 < expected < 0.35
    readme = (version / "README.md").read_text()
    assert re.search(r"\| MFU\s+\|", readme)
    assert f"| {expected:.1%}" in readme
    # like with like only: references.yaml has no BERT-base pre-training figure on an H100, so
    # nothing is stored (the V100 figures of DLPerf are another device)
    assert "reference_id" not in row or row["reference_id"] is None
    # The audit trusts the cached FLOPs without torch, and recounts them with torch.
    code = (
        "import sys; sys.modules['torch'] = None\nfrom pathlib import Path\n"
        "from driver.release.audit import audit\n"
        f"r = audit(Path({str(version)!r}))\nprint(r.text())\nsys.exit(0 if r.ok else 1)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cached values used (no torch here)" in done.stdout
    assert audit(version).ok


def test_mfu_is_blank_without_a_peak_or_flops(tmp_path: Path) -> None:
    case = bert_case(
        batch_size=8, precision="fp32", warmup_steps=1, measured_steps=4, total_steps=5, repeats=2,
        options=TINY_BERT,
    )
    session = handmade_session(tmp_path / "cpu", case, step_s=0.5, devices=["AMD EPYC 9B14"])
    version = release(
        "v0.1", [session], reports_root=tmp_path / "r", compute_flops=False, printer=quiet
    )
    (row,) = json.loads((version / "results.json").read_text())["cases"]
    assert row["mfu"] is None and row["peak_device"] is None
    assert row["reference_id"] is None  # a tiny BERT is not BERT-base
    assert "| MFU" not in (version / "README.md").read_text()


@needs_torch
def test_a_real_pytorch_session_releases_and_audits(tmp_path: Path) -> None:
    """The PyTorch benchmark itself (tiny BERT on CPU) through run, release and audit."""
    case = bert_case(
        batch_size=4,
        precision="fp32",
        warmup_steps=2,
        # Long enough for several telemetry samples (every 0.05 s) inside the measured window.
        measured_steps=60,
        total_steps=62,
        repeats=1,
        timeout_s=300,
        options={**TINY_BERT, "num_threads": 1},
        profile="test",
    )
    session = Session.open(tmp_path / "pt", {"profile": "test", "runtime": "local"})
    env = {"OMP_NUM_THREADS": "1"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with telemetry_interval(0.05):
            summary = run_cases(
                [case], session, LocalRuntime(python_override=sys.executable), printer=quiet
            )
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    assert summary.ok, summary.failed
    version = release("v0.1", [session.root], reports_root=tmp_path / "reports", printer=quiet)
    report = audit(version)
    assert report.ok, report.text()
    manifest = json.loads((version / "manifest.json").read_text())
    (cost,) = manifest["model_costs"].values()
    header = json.loads(next(session.root.rglob("record.json")).read_text())["header"]
    assert cost["parameters"] == header["options"]["parameters"]  # counted two ways, same
    (node,) = manifest["nodes"].values()
    assert node["frameworks"] == ["pytorch"] and "torch" in node["versions"]
    data = json.loads((version / "results.json").read_text())
    assert [r["repeats"] for r in data["cases"]] == [1] and len(data["repeats"]) == 1
    assert data["repeats"][0]["telemetry_cpu_pct_max"] is not None  # sampled beside torch
    assert all(r["flops_per_sample"] == cost["flops_per_sample"] for r in data["cases"])
