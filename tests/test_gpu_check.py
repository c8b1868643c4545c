"""tools/gpu_check.py: the one-command GPU check, rehearsed on the CPU.

Its stages select exactly one case of each profile (gpu-check, gpu-check-cpu) through the real
`dlperf run --dry-run`; the budget skips or cuts a stage; a cut stage is interrupted, then
killed; the archive carries a manifest that `unpack` holds every member to; and one real run
of two stages on the CPU (the PyTorch environment as "the machine's python") gives a summary
and an archive whose session passes the kit's own door (`dlperf report`).
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from driver.frameworks.base import FRAMEWORKS

REPO_ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("gpu_check", REPO_ROOT / "tools" / "gpu_check.py")
assert _spec is not None and _spec.loader is not None
gpu_check = importlib.util.module_from_spec(_spec)
sys.modules["gpu_check"] = gpu_check
_spec.loader.exec_module(gpu_check)


def framework_python() -> str:
    from driver.frameworks.envs import ensure_env
    from driver.plugins import load_all

    load_all()
    return str(ensure_env(FRAMEWORKS.get("pytorch"), log=lambda _line: None))


# --------------------------------------------------------------------------------------------
# The stages and the matrix profiles stay in step


@pytest.mark.parametrize("shapes", [gpu_check.GPU, gpu_check.CPU], ids=["gpu", "cpu"])
def test_every_run_stage_selects_exactly_its_case(shapes: gpu_check.Shapes, tmp_path: Path) -> None:
    python = framework_python()
    for stage in (s for s in gpu_check.STAGES if s.kind == "run"):
        argv = stage.argv(shapes, python, tmp_path)
        done = subprocess.run(
            [*argv, "--dry-run"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        cases = [line.split()[0] for line in done.stdout.splitlines() if "/pytorch/1n1g/" in line]
        assert len(cases) == 1, (stage.name, done.stdout)
        model, _fw, _topology, batch, precision, _data, *variant = cases[0].split("/")
        assert batch == ("bsmax" if stage.max_batch else f"bs{shapes.batch}")
        assert variant == ([] if "default" in stage.run_args else [stage.run_args[-1]])
        assert precision == ("amp" if "on" in stage.run_args else "fp32")
        assert model == stage.run_args[1]


def test_the_budget_skips_what_cannot_fit_and_cpu_skips_gpu_only_stages() -> None:
    compile_stage = next(s for s in gpu_check.STAGES if s.name == "resnet50-amp-compile")
    graphs = next(s for s in gpu_check.STAGES if s.name == "resnet50-amp-cuda-graphs")
    reserve = gpu_check.RESERVE_S
    assert gpu_check.decide(compile_stage, reserve + compile_stage.estimate_s, True) is None
    # half of it fits: it starts (cut at the budget, finished repeats kept)
    assert gpu_check.decide(compile_stage, reserve + compile_stage.estimate_s / 2, True) is None
    why = gpu_check.decide(compile_stage, reserve + compile_stage.estimate_s / 2 - 1, True)
    assert why is not None and "not enough time left" in why
    assert gpu_check.decide(graphs, 10_000, False) == "needs a GPU (rehearsal on CPU)"
    assert gpu_check.decide(graphs, 10_000, True) is None


# --------------------------------------------------------------------------------------------
# A stage cut at the budget


def test_a_stage_past_its_time_is_interrupted_and_keeps_what_it_did(tmp_path: Path) -> None:
    script = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, lambda *_: (print('kept', flush=True), sys.exit(130)))\n"
        "time.sleep(60)\n"
    )
    log = tmp_path / "stage.log"
    started = time.monotonic()
    code, detail = gpu_check.run_command([sys.executable, "-c", script], log, 1.0, dict(os.environ))
    assert code == 130 and "interrupted" in detail and time.monotonic() - started < 15
    assert "kept" in log.read_text()


def test_a_stage_that_ignores_the_interrupt_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpu_check, "INTERRUPT_GRACE_S", 1.0)
    script = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)\n"
    code, detail = gpu_check.run_command(
        [sys.executable, "-c", script], tmp_path / "stage.log", 0.5, dict(os.environ)
    )
    assert code is None and "killed" in detail


# --------------------------------------------------------------------------------------------
# The archive: every member held to the manifest


def make_work(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    repeat = work / "results" / gpu_check.SESSION / "cases" / "m" / "repeat-01"
    repeat.mkdir(parents=True)
    (repeat / "node0.log").write_text('{"dlperf": "end"}\n')
    (work / "summary.json").write_text(json.dumps({"host": "h100 box"}))
    return work


def test_an_archive_unpacks_into_a_session_folder_of_its_own(tmp_path: Path) -> None:
    archive = tmp_path / gpu_check.ARCHIVE
    archive.write_bytes(gpu_check.archive_bytes(make_work(tmp_path)))
    target = gpu_check.unpack(archive, tmp_path / "results")
    assert target.name.startswith("gpu-check-h100-box-")
    assert (target / "session" / "cases" / "m" / "repeat-01" / "node0.log").is_file()
    with pytest.raises(gpu_check.UnpackError, match="exists already"):
        gpu_check.unpack(archive, tmp_path / "results")


def rewrite(archive: Path, change) -> None:  # noqa: ANN001
    """Rebuild the archive with ``change(name, data) -> (name, data) | None`` per member."""
    members = []
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member).read()  # type: ignore[union-attr]
            changed = change(member.name, data)
            if changed is not None:
                members.append(changed)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    archive.write_bytes(buffer.getvalue())


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda a: a.write_bytes(a.read_bytes()[: len(a.read_bytes()) // 2]), "not a whole"),
        (lambda a: rewrite(a, lambda n, d: (n, d + b"x") if n.endswith(".log") else (n, d)),
         "does not match its SHA-256"),
        (lambda a: rewrite(a, lambda n, d: None if n.endswith(".log") else (n, d)),
         "differ from its manifest"),
        (lambda a: rewrite(a, lambda n, d: (n, d) if n != gpu_check.MANIFEST else None),
         "no MANIFEST.json"),
        (lambda a: rewrite(a, lambda n, d: ("../escape.json", d) if n == "summary.json"
                           else (n, d)), "not a plain relative file"),
    ],
    ids=["truncated", "edited", "missing", "no-manifest", "escape"],
)  # fmt: skip
def test_a_damaged_archive_is_refused_and_nothing_is_written(
    tmp_path: Path, damage, message: str  # noqa: ANN001
) -> None:
    archive = tmp_path / gpu_check.ARCHIVE
    archive.write_bytes(gpu_check.archive_bytes(make_work(tmp_path)))
    damage(archive)
    results = tmp_path / "results"
    with pytest.raises(gpu_check.UnpackError, match=message):
        gpu_check.unpack(archive, results)
    assert not results.exists() or not any(results.iterdir())
    assert not (tmp_path / "escape.json").exists()


# --------------------------------------------------------------------------------------------
# The whole command, rehearsed: two stages on the CPU


def test_the_rehearsal_writes_a_summary_and_an_archive_the_kit_reads(tmp_path: Path) -> None:
    python = framework_python()
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "tools/gpu_check.py", "run", "--cpu", "--out", str(out),
         "--python", python, "--stages", "facts,resnet50-amp"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "cpu-rehearsal"
    assert [s["status"] for s in summary["stages"]] == ["ok", "ok"]
    (case,) = summary["cases"]
    assert case["case"] == "resnet50/pytorch/1n1g/bs4/amp/synthetic"
    assert case["repeats_ok"] == 2 and case["median"] > 0
    assert case["device_clock"] == [None, None]  # a CPU has no device clock
    assert case["telemetry"][0]["note"].startswith("no GPU")  # NVML missing: a note, no failure
    assert case["flops_per_sample"] > 0 and case["mfu"] is None  # no peak for a CPU
    assert "resnet50/pytorch/1n1g/bs4/amp/synthetic" in (out / "summary.md").read_text()
    target = gpu_check.unpack(out / gpu_check.ARCHIVE, tmp_path / "results")
    assert json.loads((target / "facts" / "fingerprint.json").read_text())["hardware"]
    report = subprocess.run(
        [sys.executable, "-m", "driver", "report", str(target / "session"),
         "--out", str(tmp_path / "report")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    rows = json.loads((tmp_path / "report" / "report.json").read_text())
    assert [row["case_id"] for row in rows] == [case["case"]]
    assert rows[0]["throughput_median"] == pytest.approx(case["median"])


def test_goals_are_judged_from_what_ran_and_missing_ones_say_so() -> None:
    def case(model: str, variant: str, median: float, mfu: float | None, clock: float | None,
             batch: str = "bs256") -> dict:
        suffix = "" if variant == "default" else f"/{variant}"
        return {"model": model, "precision": "amp", "median": median, "mfu": mfu,
                "kit_vs_device_clock": clock, "variant": variant,
                "case": f"{model}/pytorch/1n1g/{batch}/amp/synthetic{suffix}"}  # fmt: skip

    summary = {
        "cases": [case("resnet50", "default", 2950.0, 0.30, 0.0007),
                  case("resnet50", "boundary-sync", 2980.0, 0.30, 0.0007),
                  case("resnet50", "default", 3120.0, 0.31, 0.006, batch="bsmax"),
                  case("bert", "default", 4100.0, 0.41, None, batch="bsmax")],
        "selftest": ["selftest 1n1g: truth 1600.00 samples/s, measured 1599.99, error 0.0010% "
                     "(ok, bound 0.05%)", "selftest on the local runtime: 3.1 s"],
        "parity": None,
    }  # fmt: skip
    verdicts = {row[0]: (row[2], row[3]) for row in gpu_check.goal_rows(summary)}
    assert verdicts["ResNet-50 AMP samples/s (best variant)"] == ("3,120", "met")
    assert verdicts["BERT-base AMP MFU"] == ("41.0%", "met")
    assert verdicts["kit vs device clock, worst case"] == ("0.600%", "MISSED")
    assert verdicts["selftest error, worst topology"] == ("0.0010%", "met")
    assert verdicts["kit / bare loop (parity)"] == ("not measured", "-")
    sync = next(v for k, v in verdicts.items() if k.startswith("per-step device sync"))
    assert sync == ("1.02%", "MISSED")  # 2980 / 2950 - 1: the same batch, max left out
