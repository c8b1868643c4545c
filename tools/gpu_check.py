"""The GPU check: the kit's whole one-GPU path in one command, within a time budget.

A lent GPU machine is rare and brief (one call of a few minutes, nothing reachable from it), so
this runs every stage of the check in priority order under one budget, and after each stage
writes what it has into ``--out``: ``summary.md``, ``summary.json`` and ``gpu-check.tar.gz`` (the
session with every raw log, the machine's facts, the stage logs; a manifest of SHA-256s
inside). A stage that cannot fit in the time left is skipped and says so; one cut short keeps
its finished repeats (the kit's sessions resume). Back here, ``unpack`` checks the archive and
moves its session into ``results/``, from where ``dlperf release`` publishes it.

    bash tools/gpu-check.sh                                  # on the GPU machine (make gpu-check)
    python3 tools/gpu_check.py run --out DIR [--python PY] [--budget-s S] [--stages a,b] [--cpu]
    python3 tools/gpu_check.py plan [--cpu]                  # the stages and their commands
    python3 tools/gpu_check.py unpack ARCHIVE [--results results]

The stages (``plan`` lists them): the machine's facts (the kit's fingerprint, raw nvidia-smi
output, NVML, torch's view of the device); PyTorch ResNet-50 1n1g AMP (bf16, channels_last) at
the DLPerf batch; BERT-base AMP at ``batch: max``; ``dlperf parity`` against a bare loop;
``dlperf selftest``; ResNet-50 in TF32; then the fastest options as variants (CUDA graphs,
boundary-only step sync, torch.compile) and ResNet-50 AMP at ``batch: max``. Every ``run``
stage is one ``dlperf run --profile gpu-check`` into the same session. Without a GPU (``--cpu``,
or none found) the same stages run at tiny shapes (``--profile gpu-check-cpu``): the rehearsal
that leaves the GPU itself as the only unknown.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

ARCHIVE = "gpu-check.tar.gz"
MANIFEST = "MANIFEST.json"
SESSION = "gpu-check"
RESERVE_S = 25.0  # kept back for a stage's interrupt grace and the last archive
INTERRUPT_GRACE_S = 20.0  # after SIGINT (the kit keeps finished repeats), then SIGKILL
GPU_BUDGET_S = 450.0  # one device call: 8 minutes of command, a margin kept
CPU_BUDGET_S = 3600.0
# Goals the check reports against (issue-independent facts: NVIDIA/Lambda anchors are in
# docs; these are the kit's own targets for one H100/H200).
GOALS = {
    "resnet50_amp_samples_s": 3000.0,
    "bert_amp_mfu": 0.35,
    "kit_vs_device_clock": 0.005,
    "selftest_error": 0.0005,
    "kit_over_bare": 0.98,
    "step_sync_cost": 0.005,
}


@dataclass(frozen=True)
class Shapes:
    """What differs between the GPU check and its CPU rehearsal."""

    profile: str
    batch: int  # the fixed ResNet-50 batch; BERT's comes from batch: max
    parity: list[str]  # parity's window and options
    selftest: list[str]
    budget_s: float


GPU = Shapes(
    profile="gpu-check",
    batch=256,
    parity=["--batch", "256", "--rounds", "3", "--warmup-steps", "20", "--measured-steps", "100"],
    selftest=["--repeats", "3"],
    budget_s=GPU_BUDGET_S,
)
CPU = Shapes(
    profile="gpu-check-cpu",
    batch=4,
    parity=["--batch", "4", "--rounds", "1", "--warmup-steps", "2", "--measured-steps", "3"],
    selftest=["--repeats", "1", "--topologies", "1n1g", "--step-time", "0.005"],
    budget_s=CPU_BUDGET_S,
)


@dataclass(frozen=True)
class Stage:
    name: str
    kind: str  # facts | run | parity | selftest
    what: str
    estimate_s: float  # on one H100, start-up of every process included
    run_args: tuple[str, ...] = ()  # for kind run: --model/--amp/--variant (+ batch)
    max_batch: bool = False
    gpu_only: bool = False

    def argv(self, shapes: Shapes, python: str, work: Path) -> list[str]:
        """The stage's command: the kit under this interpreter, the framework under ``python``
        (on the GPU machine both are its python3)."""
        kit = [sys.executable, "-m", "driver"]
        if self.kind == "run":
            batch = "max" if self.max_batch else str(shapes.batch)
            return [*kit, "run", "--framework", "pytorch", "--profile", shapes.profile,
                    *self.run_args, "--batch", batch, "--python", python,
                    "--results", str(work / "results"), "--session", SESSION,
                    "--progress", "plain"]  # fmt: skip
        if self.kind == "parity":  # the case of the resnet50-amp stage, planned as run plans it
            return [*kit, "parity", "--framework", "pytorch", "--model", "resnet50",
                    "--precision", "amp", "--profile", shapes.profile, "--variant", "default",
                    *shapes.parity, "--python", python, "--results", str(work / "results"),
                    "--kit-progress", "plain", "--json", str(work / "parity.json")]  # fmt: skip
        if self.kind == "selftest":
            return [*kit, "selftest", *shapes.selftest]
        return []


def _run(model: str, amp: str, variant: str) -> tuple[str, ...]:
    return ("--model", model, "--amp", amp, "--variant", variant)


STAGES = (
    Stage("facts", "facts", "the machine: fingerprint, nvidia-smi, NVML, torch", 15),
    Stage("resnet50-amp", "run", "ResNet-50 AMP (bf16, channels_last), fixed batch", 75,
          _run("resnet50", "on", "default")),
    Stage("bert-amp-max", "run", "BERT-base seq 128 AMP at batch: max", 210,
          _run("bert", "on", "default"), max_batch=True),
    Stage("parity-amp", "parity", "dlperf parity: the kit against a bare loop, AMP", 140),
    Stage("selftest", "selftest", "dlperf selftest: the kit's error on the calibration", 45),
    Stage("resnet50-tf32", "run", "ResNet-50 FP32 with TF32 math, fixed batch", 85,
          _run("resnet50", "off", "tf32")),
    Stage("resnet50-amp-cuda-graphs", "run", "ResNet-50 AMP, the whole step a CUDA graph", 75,
          _run("resnet50", "on", "cuda-graphs"), gpu_only=True),
    Stage("resnet50-amp-boundary-sync", "run", "ResNet-50 AMP, device sync at the window's "
          "ends only (the per-step sync's cost)", 75, _run("resnet50", "on", "boundary-sync")),
    Stage("resnet50-amp-compile", "run", "ResNet-50 AMP under torch.compile", 180,
          _run("resnet50", "on", "compile")),
    Stage("resnet50-amp-max", "run", "ResNet-50 AMP at batch: max", 330,
          _run("resnet50", "on", "default"), max_batch=True),
)  # fmt: skip


@dataclass
class StageResult:
    name: str
    status: str  # ok | failed | cut (budget) | skipped
    seconds: float = 0.0
    exit_code: int | None = None
    detail: str = ""
    command: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Running


class Budget:
    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.deadline = clock() + seconds

    def left(self) -> float:
        return self.deadline - self.clock()


def decide(stage: Stage, budget_left: float, on_gpu: bool) -> str | None:
    """Why ``stage`` does not start (None: it starts). A stage starts when it fits, or when at
    least half of it does (it is cut at the budget and keeps its finished repeats)."""
    if stage.gpu_only and not on_gpu:
        return "needs a GPU (rehearsal on CPU)"
    usable = budget_left - RESERVE_S
    if usable < stage.estimate_s / 2:
        left = max(usable, 0.0)
        return f"not enough time left ({left:.0f} s of the budget; needs ~{stage.estimate_s:.0f} s)"
    return None


def run_command(
    argv: list[str], log: Path, timeout_s: float, env: dict[str, str]
) -> tuple[int | None, str]:
    """Run to the end or to ``timeout_s``; then SIGINT (the kit keeps finished repeats), then
    SIGKILL after a grace. (exit code or None when killed, how it ended)."""
    with open(log, "ab") as out:
        process = subprocess.Popen(
            argv, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            return process.wait(timeout=max(timeout_s, 1.0)), ""
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGINT)
            try:
                code = process.wait(timeout=INTERRUPT_GRACE_S)
                return code, f"cut at the budget after {timeout_s:.0f} s (interrupted)"
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                return None, f"cut at the budget after {timeout_s:.0f} s (killed)"
        finally:
            if process.poll() is None:  # this script interrupted: take the stage with it
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)


def collect_facts(python: str, work: Path, env: dict[str, str]) -> StageResult:
    """The machine as the kit and its tools see it; raw outputs kept for test fixtures."""
    facts = work / "facts"
    facts.mkdir(parents=True, exist_ok=True)
    commands = {
        "fingerprint.json": [sys.executable, "-m", "driver.bench.fingerprint"],
        "nvml.txt": [sys.executable, "-c", "from driver.telemetry.sampler import nvml_status; "
                     "print(nvml_status())"],
        "torch.json": [python, "-c", TORCH_FACTS],
        "nvidia-smi.txt": ["nvidia-smi"],
        "nvidia-smi-q.txt": ["nvidia-smi", "-q"],
        "nvidia-smi-query.csv": ["nvidia-smi", f"--query-gpu={smi_fields()}",
                                 "--format=csv,noheader,nounits"],
        "nvidia-smi-topo.txt": ["nvidia-smi", "topo", "-m"],
        "lscpu.txt": ["lscpu"],
        "uname.txt": ["uname", "-a"],
    }  # fmt: skip
    started, problems = time.monotonic(), []
    for name, argv in commands.items():
        try:
            done = subprocess.run(
                argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60
            )
            text = done.stdout + (f"\n[stderr]\n{done.stderr}" if done.stderr.strip() else "")
            if done.returncode != 0:
                problems.append(f"{name}: exit {done.returncode}")
        except (OSError, subprocess.TimeoutExpired) as error:
            text = f"not run: {error}"
            problems.append(f"{name}: {error}")
        (facts / name).write_text(text)
    return StageResult(
        "facts", "ok", time.monotonic() - started, 0, "; ".join(problems) or "all read"
    )


TORCH_FACTS = """
import json, torch
facts = {"torch": torch.__version__, "cuda": torch.version.cuda,
         "cuda_available": torch.cuda.is_available()}
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    facts.update(name=p.name, capability=f"{p.major}.{p.minor}",
                 multiprocessors=p.multi_processor_count, memory_gib=p.total_memory / 2**30,
                 bf16=torch.cuda.is_bf16_supported(), cudnn=torch.backends.cudnn.version(),
                 devices=torch.cuda.device_count())
print(json.dumps(facts, indent=1))
"""


def smi_fields() -> str:
    from driver.bench.fingerprint import SMI_QUERY

    return ",".join(SMI_QUERY)


def framework_sees_gpu(python: str, env: dict[str, str]) -> bool:
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    try:
        return subprocess.run([python, "-c", probe], env=env, timeout=300).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def run_check(args: argparse.Namespace) -> int:
    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    on_gpu = not args.cpu and framework_sees_gpu(args.python, env)
    shapes = GPU if on_gpu else CPU
    budget = Budget(args.budget_s or shapes.budget_s)
    work = Path(tempfile.mkdtemp(prefix="dlperf-gpu-check-"))
    (work / "logs").mkdir()
    wanted = set(args.stages.split(",")) if args.stages else None
    unknown = (wanted or set()) - {stage.name for stage in STAGES}
    if unknown:
        print(
            f"gpu-check: unknown stage(s) {', '.join(sorted(unknown))}; see `plan`", file=sys.stderr
        )
        return 2
    print(f"gpu-check: {'GPU' if on_gpu else 'CPU rehearsal'}, profile {shapes.profile}, "
          f"budget {budget.left():.0f} s, work {work}", flush=True)  # fmt: skip
    results: list[StageResult] = []
    for stage in STAGES:
        if wanted is not None and stage.name not in wanted:
            continue
        why = decide(stage, budget.left(), on_gpu)
        if why:
            results.append(StageResult(stage.name, "skipped", detail=why))
            print(f"gpu-check: {stage.name}: skipped: {why}", flush=True)
            continue
        print(f"gpu-check: {stage.name}: {stage.what} ({budget.left():.0f} s left)", flush=True)
        if stage.kind == "facts":
            result = collect_facts(args.python, work, env)
        else:
            argv = stage.argv(shapes, args.python, work)
            started = time.monotonic()
            code, cut = run_command(argv, work / "logs" / f"{stage.name}.log",
                                    budget.left() - RESERVE_S, env)  # fmt: skip
            status = "cut" if cut else ("ok" if code == 0 else "failed")
            failed = bool(cut) or code != 0
            detail = cut or (_tail(work / "logs" / f"{stage.name}.log") if failed else "")
            seconds = time.monotonic() - started
            result = StageResult(stage.name, status, seconds, code, detail, argv)
        results.append(result)
        print(f"gpu-check: {stage.name}: {result.status} in {result.seconds:.0f} s"
              f"{': ' + result.detail if result.status != 'ok' else ''}", flush=True)  # fmt: skip
        # Between stages the summary leaves MFU out: counting FLOPs starts torch, and the
        # budget is the GPU's (the archive holds what the count needs; it is made at the end).
        publish(work, out, results, on_gpu, shapes, None)
    summary = publish(work, out, results, on_gpu, shapes, args.python)
    print(summary["markdown"], flush=True)
    return 0 if all(r.status in ("ok", "skipped") for r in results) else 1


def _tail(log: Path, lines: int = 3) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])[:600]


# ---------------------------------------------------------------------------------------------
# Reading what ran


def session_rows(session: Path, python: str | None) -> list[dict[str, Any]]:
    """One row per case of the session: the kit's figures (every repeat as its record gives
    it), the device clock's figure from each repeat's ``device-window`` record, the GPU's
    telemetry in the windows, and MFU against ``reports/peaks.yaml``."""
    rows = []
    for case_file in sorted(session.glob("cases/**/case.json")):
        case_dir = case_file.parent
        repeats = []
        for record_file in sorted(case_dir.glob("repeat-*/record.json")):
            with contextlib.suppress(OSError, ValueError):
                repeats.append(repeat_row(record_file))
        if not repeats:
            continue
        ok = [r for r in repeats if r["verdict"] == "ok" and r["throughput"]]
        header = next((r["header"] for r in ok), repeats[0]["header"]) or {}
        options = dict(header.get("options") or {})
        case = json.loads(case_file.read_text())
        row: dict[str, Any] = {
            "case": case.get("id") or str(case_dir.relative_to(session / "cases")),
            "model": header.get("model"),
            "precision": options.get("precision"),
            "variant": case.get("variant", ""),
            "batch": options.get("batch_size"),
            "device": (header.get("devices") or [None])[0],
            "repeats_ok": len(ok),
            "repeats": len(repeats),
            "verdicts": [r["verdict"] for r in repeats],
            "throughputs": [r["throughput"] for r in ok],
            "median": statistics.median([r["throughput"] for r in ok]) if ok else None,
            "device_clock": [r["device_throughput"] for r in ok],
            "telemetry": [r["telemetry"] for r in ok],
        }
        pairs = [(r["throughput"], r["device_throughput"]) for r in ok if r["device_throughput"]]
        row["kit_vs_device_clock"] = (
            max(abs(kit / device - 1) for kit, device in pairs) if pairs else None
        )
        row["flops_per_sample"] = (
            flops_per_sample(row["model"], options, python) if python else None
        )
        peak = peak_tflops(row["device"], row["precision"], options)
        row["peak_tflops"] = peak
        row["mfu"] = (
            row["median"] * row["flops_per_sample"] / (peak * 1e12)
            if row["median"] and row["flops_per_sample"] and peak
            else None
        )
        rows.append(row)
    return rows


def repeat_row(record_file: Path) -> dict[str, Any]:
    record = json.loads(record_file.read_text())
    measurement = record.get("measurement") or {}
    log = record_file.parent / "node0.log"
    window = device_window(log) if log.exists() else None
    samples = measurement.get("samples")
    return {
        "verdict": record.get("verdict"),
        "throughput": measurement.get("throughput"),
        "header": record.get("header"),
        "device_throughput": samples / window if window and samples else None,
        "telemetry": gpu_telemetry(record_file.parent, log),
    }


def device_window(log: Path) -> float | None:
    """Seconds of the measured window by the device's clock (the rank-0 ``device-window``)."""
    for line in log.read_text(errors="replace").splitlines():
        if '"device-window"' in line:
            with contextlib.suppress(ValueError):
                record = json.loads(line[line.index("{") :])
                seconds = record.get("seconds")
                if isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0:
                    return float(seconds)
    return None


def host_window(log: Path) -> tuple[float, float] | None:
    """(start, end) of the measured window on the host's monotonic clock, from the step log."""
    header_options: dict[str, Any] = {}
    times: dict[int, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        if '"dlperf"' not in line or "{" not in line:
            continue
        with contextlib.suppress(ValueError):
            record = json.loads(line[line.index("{") :])
            if record.get("dlperf") == "header":
                header_options = record.get("options") or {}
            elif record.get("dlperf") == "step" and record.get("rank") == 0:
                times[int(record["step"])] = float(record["t"])
    warmup, total = header_options.get("warmup_steps"), header_options.get("total_steps")
    if warmup in times and total in times:
        return times[warmup], times[total]
    return None


def gpu_telemetry(repeat_dir: Path, log: Path) -> dict[str, Any] | None:
    """GPU power, SM clock, memory used and temperature over the window (NVML samples)."""
    window = host_window(log) if log.exists() else None
    samples: list[dict[str, Any]] = []
    note = None
    for path in sorted(repeat_dir.glob("telemetry-node*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if record.get("kind") == "meta" and record.get("gpu") != "nvml":
                    note = record.get("gpu")
                if record.get("kind") == "gpu" and (
                    window is None or window[0] <= record.get("mono", -1) <= window[1]
                ):
                    samples.append(record)
    if not samples:
        return {"note": note or "no GPU samples in the window"}

    def stat(key: str, pick: Callable[[list[float]], float]) -> float | None:
        values = [s[key] for s in samples if isinstance(s.get(key), (int, float))]
        return round(pick(values), 1) if values else None

    return {
        "samples": len(samples),
        "power_w_mean": stat("power_w", statistics.fmean),
        "power_w_max": stat("power_w", max),
        "sm_clock_mhz_mean": stat("sm_clock_mhz", statistics.fmean),
        "sm_pct_mean": stat("sm_pct", statistics.fmean),
        "mem_used_mib_max": stat("mem_used_mib", max),
        "temp_c_max": stat("temp_c", max),
    }


SHAPE_KEYS = ("image_size", "num_classes", "seq_len", "vocab_size", "bert_layers",
              "bert_hidden", "bert_heads", "bert_intermediate", "max_predictions")  # fmt: skip


def flops_per_sample(model: str | None, options: dict[str, Any], python: str) -> float | None:
    """Training FLOPs per sample from the model definitions, counted by the framework's own
    interpreter (``python -m PyTorch.benchmark.flops``); None when it cannot count."""
    if not model:
        return None
    pairs = [f"--option={key}={options[key]}" for key in SHAPE_KEYS if options.get(key) is not None]
    key = (python, model, *pairs)
    if key not in _FLOPS:  # counted once per shape: the summary is rewritten after every stage
        _FLOPS[key] = _count_flops(python, model, pairs)
    return _FLOPS[key]


_FLOPS: dict[tuple[str, ...], float | None] = {}


def _count_flops(python: str, model: str, pairs: list[str]) -> float | None:
    try:
        done = subprocess.run(
            [python, "-m", "PyTorch.benchmark.flops", model, *pairs],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        return float(json.loads(done.stdout)["flops_per_sample"]["total"])
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError, TypeError):
        return None


def peak_tflops(device: str | None, precision: str | None, options: dict[str, Any]) -> float | None:
    """The dense peak of ``device`` at the precision the run computed in (reports/peaks.yaml)."""
    if not device:
        return None
    import yaml

    peaks = yaml.safe_load((REPO_ROOT / "reports" / "peaks.yaml").read_text()) or {}
    if precision == "amp":
        column = "bf16" if str(options.get("amp_dtype")) in ("bfloat16", "bf16") else "fp16"
    else:
        column = "tf32" if options.get("tf32") else "fp32"
    for entry in peaks.get("devices", []):
        if any(str(m).lower() in device.lower() for m in entry.get("match", [])):
            value = (entry.get("peaks") or {}).get(column)
            return float(value) if value else None
    return None


def parity_figures(work: Path) -> dict[str, Any] | None:
    path = work / "parity.json"
    if not path.exists():
        return None
    with contextlib.suppress(ValueError, OSError):
        data = json.loads(path.read_text())
        ratios = [p["kit"]["throughput"] / p["bare"]["throughput"] for p in data.get("pairs", [])]
        if ratios:
            return {"median_kit_over_bare": statistics.median(ratios), "ratios": ratios}
    return None


def selftest_errors(work: Path) -> list[str]:
    log = work / "logs" / "selftest.log"
    if not log.exists():
        return []
    return [line for line in log.read_text(errors="replace").splitlines()
            if line.startswith("selftest ")]  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Publishing into --out (atomic: a machine that goes away leaves the last whole set)


def summarize(
    work: Path, results: list[StageResult], on_gpu: bool, shapes: Shapes, python: str | None
) -> dict[str, Any]:
    session = work / "results" / SESSION
    rows = session_rows(session, python) if session.exists() else []
    facts = {}
    with contextlib.suppress(OSError, ValueError):
        facts = json.loads((work / "facts" / "torch.json").read_text())
    with contextlib.suppress(OSError, ValueError):
        facts["hardware"] = json.loads((work / "facts" / "fingerprint.json").read_text())[
            "hardware"
        ]
    summary: dict[str, Any] = {
        "mode": "gpu" if on_gpu else "cpu-rehearsal",
        "profile": shapes.profile,
        "host": platform.node(),
        "torch": facts,
        "stages": [asdict(r) for r in results],
        "cases": rows,
        "parity": parity_figures(work),
        "selftest": selftest_errors(work),
        "goals": GOALS,
    }
    summary["markdown"] = markdown(summary)
    return summary


def markdown(summary: dict[str, Any]) -> str:
    from tabulate import tabulate

    torch_facts = summary["torch"] or {}
    lines = [
        f"# GPU check ({summary['mode']}, profile {summary['profile']}) on {summary['host']}",
        "",
        f"machine: {torch_facts.get('hardware', '?')}; device: {torch_facts.get('name', 'none')}"
        f", torch {torch_facts.get('torch', '?')}, CUDA {torch_facts.get('cuda', '-')}",
        "",
        tabulate(
            [
                [r["name"], r["status"], f"{r['seconds']:.0f}", r["detail"][:120]]
                for r in summary["stages"]
            ],
            headers=["stage", "status", "s", "detail"],
            tablefmt="github",
        ),  # fmt: skip
        "",
    ]
    rows = []
    for case in summary["cases"]:
        telemetry = next((t for t in case["telemetry"] if t and "samples" in t), None) or {}
        rows.append([
            case["case"], case["batch"], f"{case['repeats_ok']}/{case['repeats']}",
            _num(case["median"]), _pct(case["kit_vs_device_clock"], 3), _pct(case["mfu"], 1),
            _num(telemetry.get("power_w_mean")), _num(telemetry.get("sm_clock_mhz_mean")),
            _num(telemetry.get("mem_used_mib_max")), _num(telemetry.get("temp_c_max")),
        ])  # fmt: skip
    if rows:
        lines += [
            tabulate(rows, headers=["case", "batch", "ok", "samples/s (median)",
                                    "kit vs device clock", "MFU", "W", "SM MHz", "mem MiB max",
                                    "temp C max"], tablefmt="github", disable_numparse=True),
            "",
        ]  # fmt: skip
    if summary["parity"]:
        lines.append(f"parity: kit/bare median {summary['parity']['median_kit_over_bare']:.3f}")
    lines += summary["selftest"]
    lines += ["", tabulate(goal_rows(summary), headers=["goal", "target", "measured", "verdict"],
                           tablefmt="github", disable_numparse=True)]  # fmt: skip
    return "\n".join(lines) + "\n"


SELFTEST_ERROR = re.compile(r"error (?P<pct>[0-9.]+)%")


def goal_rows(summary: dict[str, Any]) -> list[list[str]]:
    """Each goal of the check against what this run measured ("not measured" when it did not)."""
    cases = summary["cases"]

    def best(model: str, key: str) -> float | None:
        values = [c[key] for c in cases if c["model"] == model and c["precision"] == "amp"]
        values = [v for v in values if v is not None]
        return max(values) if values else None

    clock = [c["kit_vs_device_clock"] for c in cases if c["kit_vs_device_clock"] is not None]
    errors = [float(m["pct"]) / 100 for line in summary["selftest"]
              if (m := SELFTEST_ERROR.search(line))]  # fmt: skip
    parity = (summary["parity"] or {}).get("median_kit_over_bare")
    synced = {c["variant"]: c["median"] for c in cases
              if c["model"] == "resnet50" and c["precision"] == "amp" and "/bsmax/" not in c["case"]
              and c["variant"] in ("", "default", "boundary-sync") and c["median"]}  # fmt: skip
    every = synced.get("default") or synced.get("")
    sync_cost = synced["boundary-sync"] / every - 1 if every and "boundary-sync" in synced else None
    rows = [
        ("ResNet-50 AMP samples/s (best variant)", GOALS["resnet50_amp_samples_s"],
         best("resnet50", "median"), False, "{:,.0f}"),
        ("BERT-base AMP MFU", GOALS["bert_amp_mfu"], best("bert", "mfu"), False, "{:.1%}"),
        ("kit vs device clock, worst case", GOALS["kit_vs_device_clock"],
         max(clock) if clock else None, True, "{:.3%}"),
        ("selftest error, worst topology", GOALS["selftest_error"],
         max(errors) if errors else None, True, "{:.4%}"),
        ("kit / bare loop (parity)", GOALS["kit_over_bare"], parity, False, "{:.3f}"),
        ("per-step device sync's cost (boundary-only / every step - 1; above it, boundary "
         "timing becomes the GPU default)", GOALS["step_sync_cost"], sync_cost, True, "{:.2%}"),
    ]  # fmt: skip
    out = []
    for name, target, value, below, shape in rows:
        bound = ("< " if below else ">= ") + shape.format(target)
        if value is None:
            out.append([name, bound, "not measured", "-"])
            continue
        met = value <= target if below else value >= target
        out.append([name, bound, shape.format(value), "met" if met else "MISSED"])
    return out


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _pct(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}%}"


def publish(
    work: Path,
    out: Path,
    results: list[StageResult],
    on_gpu: bool,
    shapes: Shapes,
    python: str | None,
) -> dict[str, Any]:
    summary = summarize(work, results, on_gpu, shapes, python)
    text = summary.pop("markdown")
    summary_json = json.dumps(summary, indent=1, sort_keys=True, default=str) + "\n"
    (work / "summary.json").write_text(summary_json)
    (work / "summary.md").write_text(text)
    _write_atomic(out / "summary.json", summary_json.encode())
    _write_atomic(out / "summary.md", text.encode())
    _write_atomic(out / ARCHIVE, archive_bytes(work))
    summary["markdown"] = text
    return summary


def _write_atomic(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def archive_bytes(work: Path) -> bytes:
    """The work folder as a tar.gz, with a manifest of every file's SHA-256 and size."""
    files = sorted(p for p in work.rglob("*") if p.is_file() and not p.is_symlink())
    manifest = {
        str(p.relative_to(work)): {"sha256": _sha256(p.read_bytes()), "size": p.stat().st_size}
        for p in files
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in files:
            tar.add(path, arcname=str(path.relative_to(work)), recursive=False)
        data = json.dumps(manifest, indent=1, sort_keys=True).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size, info.mtime = len(data), int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------
# Back here: the archive, checked, into results/


class UnpackError(Exception):
    pass


def unpack(archive: Path, results: Path) -> Path:
    """Check every member against the manifest (regular files only, no path outside the
    archive, nothing missing or extra), then move the session into ``results/`` under a name of
    its own (``gpu-check-<host>-<date>``); nothing is written if any check fails."""
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            members = tar.getmembers()
            contents: dict[str, bytes] = {}
            for member in members:
                name = member.name
                if not member.isfile() or name.startswith("/") or ".." in Path(name).parts:
                    raise UnpackError(f"{archive}: member {name!r} is not a plain relative file")
                extracted = tar.extractfile(member)
                assert extracted is not None
                contents[name] = extracted.read()
    except (tarfile.TarError, EOFError, OSError) as error:
        raise UnpackError(
            f"{archive}: not a whole gpu-check archive ({error}); fetch it again"
        ) from None
    if MANIFEST not in contents:
        raise UnpackError(f"{archive}: no {MANIFEST}; not made by tools/gpu_check.py")
    manifest = json.loads(contents.pop(MANIFEST))
    if set(manifest) != set(contents):
        missing, extra = (
            sorted(set(manifest) - set(contents)),
            sorted(set(contents) - set(manifest)),
        )
        raise UnpackError(
            f"{archive}: files differ from its manifest (missing {missing}, extra {extra})"
        )
    for name, data in contents.items():
        if _sha256(data) != manifest[name]["sha256"]:
            raise UnpackError(f"{archive}: {name} does not match its SHA-256 in the manifest")
    summary = json.loads(contents.get("summary.json", b"{}") or b"{}")
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(archive.stat().st_mtime))
    target = results / f"gpu-check-{_slug(summary.get('host') or 'host')}-{stamp}"
    if target.exists():
        raise UnpackError(f"{target} exists already; remove it or unpack into another --results")
    results.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".dlperf-tmp-unpack-", dir=results))
    try:
        for name, data in contents.items():
            destination = staging / name
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(data)
        session = staging / "results" / SESSION
        if session.is_dir():
            os.replace(session, staging / "session")
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text)[:40] or "host"


# ---------------------------------------------------------------------------------------------


def plan_lines(shapes: Shapes, python: str) -> Iterable[str]:
    work = Path("<work>")
    for stage in STAGES:
        argv = stage.argv(shapes, python, work)
        command = (
            " ".join(argv[1:]) if argv else "(the facts: fingerprint, nvidia-smi, NVML, torch)"
        )
        yield f"{stage.name:28} ~{stage.estimate_s:>4.0f} s  {stage.what}\n    {command}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the check into --out")
    run.add_argument("--out", required=True)
    run.add_argument("--python", default=sys.executable, help="the interpreter with torch")
    run.add_argument("--budget-s", type=float, default=0.0, help="0: 450 on a GPU, 3600 on CPU")
    run.add_argument("--stages", help="comma-separated stage names (default: all, in order)")
    run.add_argument("--cpu", action="store_true", help="the CPU rehearsal even with a GPU")
    plan = sub.add_parser("plan", help="the stages and their commands")
    plan.add_argument("--cpu", action="store_true")
    take = sub.add_parser("unpack", help="check an archive and move its session into results/")
    take.add_argument("archive")
    take.add_argument("--results", default=str(REPO_ROOT / "results"))
    args = parser.parse_args(argv)
    if args.command == "plan":
        print("\n".join(plan_lines(CPU if args.cpu else GPU, "python3")))
        return 0
    if args.command == "unpack":
        try:
            target = unpack(Path(args.archive), Path(args.results))
        except UnpackError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        print(f"unpacked: {target} (session: {target / 'session'}); publish it with "
              f"`dlperf release VERSION {target / 'session'}`")  # fmt: skip
        return 0
    return run_check(args)


if __name__ == "__main__":
    sys.exit(main())
