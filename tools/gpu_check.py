"""The GPU check: a smoke check of a booked GPU node. Is this node healthy, and is the kit
right on it? One command runs the kit's one-GPU path in stages under a time budget.

Each stage writes what it has into ``--out`` as soon as it ends: ``summary.md``,
``summary.json`` and ``gpu-check.tar.gz`` (the session with every raw log, the node's facts,
the stage logs; a manifest of SHA-256s inside). A stage that cannot finish in the time left is
not started and says so; a stage cut short keeps its finished repeats. ``--resume`` carries an
earlier archive in, so a later command continues the same session. ``unpack`` checks an archive
and moves its session into ``results/``, from where ``dlperf release`` publishes it.

    OUT=DIR bash tools/gpu-check.sh [--stages core] [--budget-s S]    # on the node
    python3 tools/gpu_check.py run --out DIR [--python PY] [--budget-s S] [--stages LIST]
                                   [--resume ARCHIVE] [--cpu]
    python3 tools/gpu_check.py plan [--cpu]           # the stages, their estimates, the plans
    python3 tools/gpu_check.py unpack ARCHIVE [--results results]

``--stages`` takes stage names and plan names (``core``, ``bert-max``, ``resnet50-max``,
``resnet50-modes``, ``llama``, ``all``), comma-separated;
the default is ``core``: the node's facts (nvidia-smi, the processes already on the GPU, NVML,
torch's view), PyTorch ResNet-50 1n1g AMP (bf16, channels_last) at 256, BERT-base seq 128 AMP at
256, ``dlperf selftest`` and ``dlperf parity`` against a bare loop; every run stage also times
its window by CUDA events. The other plans hold the rest (TF32, CUDA graphs, boundary-only
sync, torch.compile, both ``batch: max``, Llama 3.2 1B at seq 8192). Without a GPU (``--cpu``,
or none found) the same stages run at tiny shapes (``--profile gpu-check-cpu``): a rehearsal
that leaves the GPU itself as the only unknown. A GPU that ``nvidia-smi -L`` lists and torch
does not see is no rehearsal: only the facts run, and the check exits 3 with torch's words.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gzip
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
import zlib
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from driver.workloads.llama import LLAMA_SIZES, training_flops_per_token  # noqa: E402 (stdlib only)

ARCHIVE = "gpu-check.tar.gz"
MANIFEST = "MANIFEST.json"
SESSION = "gpu-check"
SCRATCH = "tmp"  # the stages' TMPDIR inside the work folder: removed with it, not archived
SCRATCH_VAR = "DLPERF_GPU_CHECK_SCRATCH"  # set by tools/gpu-check.sh
MODES = {True: "gpu", False: "cpu-rehearsal"}  # a session's stages all run in one of them
RESERVE_S = 25.0  # kept back for a stage's interrupt grace and the last archive
INTERRUPT_GRACE_S = 20.0  # after SIGINT (the kit keeps finished repeats), then SIGKILL
# About 7 minutes of stages: with the wheels' install, the GPU probe and the final summary
# the whole command stays under 8 minutes, below a 10-minute limit on one command.
GPU_BUDGET_S = 420.0
CPU_BUDGET_S = 3600.0
# Goals the check reports against: the kit's own targets for one H100/H200.
GOALS = {
    "resnet50_amp_samples_s": 3000.0,
    "bert_amp_mfu": 0.35,
    "llama_1b_amp_mfu": 0.40,
    "kit_vs_device_clock": 0.005,
    "selftest_error": 0.0005,
    "kit_over_bare": 0.98,
    "step_sync_cost": 0.005,
}

# ---------------------------------------------------------------------------------------------
# What a stage costs on one H100, from measured start-up costs and published step rates.
#
# Start-up, measured: in an offline rehearsal of the check on the kit's test machine (2-core
# CPU, no GPU) every repeat and every batch probe is a fresh process at ~12 s (9 BERT probes in
# ~110 s, mostly start-up); on a GPU node the same start adds CUDA init and cuDNN autotune
# (8-12 s), so 12 s stands. A `dlperf` command's own start (import, the `--python` import check
# of torch) ~6 s; a cold torch.compile of ResNet-50 146 s on that CPU, 60-120 s on a 16-core
# node (its cache is reused by the later repeats: 23 s). Step times: ResNet-50 AMP bf16 ~2,900
# images/s on an H100 (Lambda publishes 2,790), TF32 ~1,400; BERT-base seq 128 AMP ~3,000
# sequences/s at 35% MFU.
DRIVER_S = 6.0
PROCESS_S = 12.0
WINDOW_STEPS = 120  # 20 warm-up + 100 measured (the gpu-check profile)
PROBE_STEPS = 3  # driver/core/batchsearch.py
COMPILE_S = 120.0
REPEATS = 3  # the gpu-check profile


def run_cost(step_s: float, *, processes: int = REPEATS, probes: int = 0,
             probe_step_s: float = 0.0, extra_s: float = 0.0) -> float:  # fmt: skip
    """Seconds of a stage: the driver's start, each process's start and window, each batch
    probe's start and steps, and any one-off (a compile)."""
    return (
        DRIVER_S
        + processes * (PROCESS_S + WINDOW_STEPS * step_s)
        + probes * (PROCESS_S + PROBE_STEPS * probe_step_s)
        + extra_s
    )


RN50_AMP_STEP_S = 256 / 2900  # batch 256
RN50_TF32_STEP_S = 256 / 1400
BERT_AMP_STEP_S = 256 / 3000  # batch 256
# batch: max on an 80 GB card (the desk check's estimates): ResNet-50 AMP ~1,000 after 8 probes
# from 256; BERT-base AMP ~1,100 after 10 probes from 64 (doubling to the first failure, then
# bisecting to a sixteenth).
RN50_MAX_STEP_S, RN50_MAX_PROBES = 1000 / 2900, 8
BERT_MAX_STEP_S, BERT_MAX_PROBES = 1100 / 3000, 10
# Llama 3.2 1B, bf16, batch 2 x 8192 tokens: no published H100 rate to take, so the step from
# the formula the kit's MFU uses (driver.workloads.llama, torchtitan's count since 4ed3c536:
# 1.0636e10 training FLOPs per token at 8192, its tied output projection counted) at 35% of the
# H100's dense bf16 989.4 TFLOP/s, below the 40% goal so that a slower first run still fits its
# plan: 16,384 tokens / (0.35 x 989.4e12 / 1.0636e10) = 0.50 s. Its AdamW state and
# activations (~60 GB without checkpointing) fit an 80 GB card; the model builds in seconds.
LLAMA_1B_TOKENS_PER_STEP = 2 * 8192
LLAMA_1B_FLOPS_PER_TOKEN = training_flops_per_token(LLAMA_SIZES["llama3-1b"], 8192)
LLAMA_1B_STEP_S = LLAMA_1B_TOKENS_PER_STEP * LLAMA_1B_FLOPS_PER_TOKEN / (0.35 * 989.4e12)


@dataclass(frozen=True)
class Shapes:
    """What differs between the GPU check and its CPU rehearsal."""

    profile: str
    batch: int  # the fixed ResNet-50 batch
    bert_batch: int  # the fixed BERT batch
    llama_batch: int  # the fixed Llama batch (sequences of the variant's seq_len)
    parity: list[str]  # parity's window and options
    selftest: list[str]
    budget_s: float

    def batch_of(self, model: str) -> int:
        """The fixed batch of a run stage's model."""
        return {"bert": self.bert_batch, "llama": self.llama_batch}.get(model, self.batch)


# BERT-base seq 128 AMP at 256: its activations take ~55 MB a sequence in bf16 (12 layers x
# 128 x 768 x ~44 bytes, Korthikanti et al.'s count, plus the masked-LM logits), so 256 use
# ~14 GB and the weights, gradients and optimizer state ~2 GB: a fifth of an 80 GB card, room
# to spare on any 40 GB one, and enough sequences a step to keep the tensor cores busy.
GPU = Shapes(
    profile="gpu-check",
    batch=256,
    bert_batch=256,
    llama_batch=2,
    parity=["--batch", "256", "--rounds", "3", "--warmup-steps", "20", "--measured-steps", "100"],
    selftest=["--repeats", "3"],
    budget_s=GPU_BUDGET_S,
)
CPU = Shapes(
    profile="gpu-check-cpu",
    batch=4,
    bert_batch=4,
    llama_batch=2,
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
    run_args: tuple[str, ...] = ()  # for kind run: --model/--amp/--variant
    max_batch: bool = False
    gpu_only: bool = False

    def argv(self, shapes: Shapes, python: str, work: Path) -> list[str]:
        """The stage's command: the kit under this interpreter, the framework under ``python``
        (on the GPU node both are its python3)."""
        kit = [sys.executable, "-m", "driver"]
        if self.kind == "run":
            fixed = shapes.batch_of(self.run_args[1])
            batch = "max" if self.max_batch else str(fixed)
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
    Stage("facts", "facts", "the node: fingerprint, nvidia-smi and the processes on the GPU, "
          "NVML, torch", 15),
    Stage("resnet50-amp", "run", "ResNet-50 AMP (bf16, channels_last), fixed batch",
          run_cost(RN50_AMP_STEP_S), _run("resnet50", "on", "default")),
    Stage("bert-amp", "run", "BERT-base seq 128 AMP, fixed batch",
          run_cost(BERT_AMP_STEP_S), _run("bert", "on", "default")),
    Stage("selftest", "selftest", "dlperf selftest: the kit's error on the calibration", 45),
    # 3 rounds of the kit and the bare loop: 6 processes, 2 driver starts
    Stage("parity-amp", "parity", "dlperf parity: the kit against a bare loop, AMP",
          run_cost(RN50_AMP_STEP_S, processes=6, extra_s=DRIVER_S)),
    Stage("resnet50-tf32", "run", "ResNet-50 FP32 with TF32 math, fixed batch",
          run_cost(RN50_TF32_STEP_S), _run("resnet50", "off", "tf32")),
    Stage("resnet50-amp-cuda-graphs", "run", "ResNet-50 AMP, the whole step a CUDA graph",
          run_cost(RN50_AMP_STEP_S, extra_s=6), _run("resnet50", "on", "cuda-graphs"),
          gpu_only=True),
    Stage("resnet50-amp-boundary-sync", "run", "ResNet-50 AMP, device sync at the window's "
          "ends only (the per-step sync's cost)", run_cost(RN50_AMP_STEP_S),
          _run("resnet50", "on", "boundary-sync")),
    Stage("resnet50-amp-compile", "run", "ResNet-50 AMP under torch.compile",
          run_cost(RN50_AMP_STEP_S, extra_s=COMPILE_S), _run("resnet50", "on", "compile")),
    Stage("bert-amp-max", "run", "BERT-base seq 128 AMP at batch: max",
          run_cost(BERT_MAX_STEP_S, probes=BERT_MAX_PROBES, probe_step_s=BERT_MAX_STEP_S),
          _run("bert", "on", "default"), max_batch=True),
    Stage("resnet50-amp-max", "run", "ResNet-50 AMP at batch: max",
          run_cost(RN50_MAX_STEP_S, probes=RN50_MAX_PROBES, probe_step_s=RN50_MAX_STEP_S),
          _run("resnet50", "on", "default"), max_batch=True),
    Stage("llama-1b-amp", "run", "Llama 3.2 1B bf16, seq 8192, fixed batch 2 (MFU goal 40%)",
          run_cost(LLAMA_1B_STEP_S), _run("llama", "on", "1b")),
)  # fmt: skip
STAGE_NAMES = tuple(stage.name for stage in STAGES)

# Each plan fits GPU_BUDGET_S less RESERVE_S by the estimates above (a test holds them to it);
# core first: the figures that say most about the node and the kit.
PLANS = {
    "core": ("facts", "resnet50-amp", "bert-amp", "selftest", "parity-amp"),
    "bert-max": ("facts", "bert-amp-max"),
    "resnet50-max": ("facts", "resnet50-amp-max", "resnet50-amp-cuda-graphs"),
    "resnet50-modes": (
        "facts", "resnet50-amp-compile", "resnet50-tf32", "resnet50-amp-boundary-sync"
    ),
    "llama": ("facts", "llama-1b-amp"),
}
DEFAULT_PLAN = "core"


class UsageError(Exception):
    """A bad command line: one line naming the option and the fix."""


def chosen_stages(text: str | None) -> list[Stage]:
    """The stages ``--stages`` names (stage and plan names, comma-separated; ``all``), in the
    order of STAGES, each once."""
    wanted: set[str] = set()
    for item in (text or DEFAULT_PLAN).split(","):
        name = item.strip()
        if name == "all":
            wanted.update(STAGE_NAMES)
        elif name in PLANS:
            wanted.update(PLANS[name])
        elif name in STAGE_NAMES:
            wanted.add(name)
        else:
            known = ", ".join([*PLANS, "all", *STAGE_NAMES])
            raise UsageError(f"--stages: unknown stage or plan {name!r}; one of: {known}")
    return [stage for stage in STAGES if stage.name in wanted]


def budget_seconds(text: str) -> float:
    """``--budget-s``: a finite number of seconds above 0 (0: the default for the machine)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a finite number of seconds >= 0 (0: {GPU_BUDGET_S:.0f} on a GPU)"
        )
    return value


@dataclass
class StageResult:
    name: str
    status: str  # ok | failed | cut (budget) | skipped
    seconds: float = 0.0
    exit_code: int | None = None
    detail: str = ""
    command: list[str] = field(default_factory=list)
    run: int = 1  # which command of a resumed session ran it: 1, 2, ...


# ---------------------------------------------------------------------------------------------
# Running: nothing outlives the check


PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """This process gets SIGTERM when the shell that started it dies (even by SIGKILL), and
    SIGTERM ends the check as SIGINT does: every stage is stopped first."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    signal.signal(signal.SIGTERM, _terminated)
    # Started in the background by tools/gpu-check.sh, this process inherits SIGINT ignored,
    # and so would every stage, which the budget stops with SIGINT: restore it.
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _terminated(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


class Budget:
    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.deadline = clock() + seconds

    def left(self) -> float:
        return self.deadline - self.clock()


def decide(stage: Stage, budget_left: float, on_gpu: bool) -> str | None:
    """Why ``stage`` does not start (None: it starts). A stage starts only when its estimate
    fits in what is left of the budget."""
    if stage.gpu_only and not on_gpu:
        return "needs a GPU (rehearsal on CPU)"
    usable = budget_left - RESERVE_S
    if usable < stage.estimate_s:
        left = max(usable, 0.0)
        return f"not enough time left ({left:.0f} s of the budget; needs ~{stage.estimate_s:.0f} s)"
    return None


def start_stage(argv: list[str], env: dict[str, str], **popen: Any) -> subprocess.Popen:
    """A stage's process: its own process group (stopped as a whole at the budget), and
    SIGKILL when the check dies, even by SIGKILL (the check publishes nothing more then, so
    nothing is gained by letting the stage seal its session); the kit's local runtime ties each
    benchmark to the stage's driver the same way (SIGTERM, launchers stop their ranks)."""
    from driver.bench.supervisor import start

    return start(argv, parent_death_signal=signal.SIGKILL, new_group=True, cwd=REPO_ROOT,
                 env=env, stdin=subprocess.DEVNULL, **popen)  # fmt: skip


def run_command(
    argv: list[str], log: Path, timeout_s: float, env: dict[str, str]
) -> tuple[int | None, str]:
    """Run to the end or to ``timeout_s``; then SIGINT (the kit keeps finished repeats), then
    SIGKILL after a grace. (exit code or None when killed, how it ended)."""
    with open(log, "ab") as out:
        process = start_stage(argv, env, stdout=out, stderr=subprocess.STDOUT)
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
        finally:  # the check itself interrupted or terminated: take the stage's group with it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            if process.poll() is None:
                process.wait()


def run_quiet(argv: list[str], env: dict[str, str], timeout_s: float) -> tuple[int, str, str]:
    """A short command's (exit code, stdout, stderr), stopped at ``timeout_s`` and with the
    check (OSError, subprocess.TimeoutExpired as subprocess.run raises them)."""
    process = start_stage(argv, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
        return process.returncode, stdout, stderr
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        if process.poll() is None:
            process.wait()


def collect_facts(python: str, work: Path, env: dict[str, str]) -> StageResult:
    """The node as the kit and its tools see it; raw outputs kept for test fixtures. The
    compute-apps query shows a GPU that something else is using."""
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
        "nvidia-smi-compute-apps.csv": ["nvidia-smi", "--query-compute-apps="
                                        "pid,process_name,used_memory", "--format=csv"],
        "nvidia-smi-topo.txt": ["nvidia-smi", "topo", "-m"],
        "lscpu.txt": ["lscpu"],
        "uname.txt": ["uname", "-a"],
    }  # fmt: skip
    started, problems = time.monotonic(), []
    for name, argv in commands.items():
        try:
            code, stdout, stderr = run_quiet(argv, env, 60)
            text = stdout + (f"\n[stderr]\n{stderr}" if stderr.strip() else "")
            if code != 0:
                problems.append(f"{name}: exit {code}")
        except (OSError, subprocess.TimeoutExpired) as error:
            text = f"not run: {error}"
            problems.append(f"{name}: {error}")
        (facts / name).write_text(text)
    busy = gpu_processes(facts / "nvidia-smi-compute-apps.csv")
    if busy:
        problems.insert(0, f"the GPU is in use already: {busy}")
    return StageResult(
        "facts", "ok", time.monotonic() - started, 0, "; ".join(problems) or "all read"
    )


def gpu_processes(csv_file: Path) -> str:
    """The processes nvidia-smi lists on the GPU, one ``pid name MiB`` each ('' for none)."""
    try:
        lines = csv_file.read_text().splitlines()
    except OSError:
        return ""
    if not lines or not lines[0].startswith("pid"):
        return ""
    return "; ".join(line.strip() for line in lines[1:] if line.strip() and "[stderr]" not in line)


TORCH_FACTS = """
import json, torch
facts = {"torch": torch.__version__, "cuda": torch.version.cuda,
         "cuda_available": torch.cuda.is_available()}
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    facts.update(name=p.name, capability=f"{p.major}.{p.minor}",
                 multiprocessors=p.multi_processor_count, memory_gib=p.total_memory / 2**30,
                 bf16=torch.cuda.is_bf16_supported(), cudnn=torch.backends.cudnn.version(),
                 devices=torch.cuda.device_count(), arch_list=torch.cuda.get_arch_list())
print(json.dumps(facts, indent=1))
"""


def smi_fields() -> str:
    from driver.bench.fingerprint import SMI_QUERY

    return ",".join(SMI_QUERY)


def framework_sees_gpu(python: str, env: dict[str, str]) -> tuple[bool, str]:
    """(torch under ``python`` sees a GPU, the probe's last words when it does not)."""
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no GPU found')"
    try:
        code, stdout, stderr = run_quiet([python, "-c", probe], env, 300)
    except (OSError, subprocess.TimeoutExpired) as error:
        return False, str(error)
    lines = [line.strip() for line in (stderr + stdout).splitlines() if line.strip()]
    return code == 0, (lines[-1] if lines else f"exit {code}")[:300]


def gpus_listed(env: dict[str, str]) -> str:
    """The GPUs ``nvidia-smi -L`` lists ('' where it lists none or is missing): a node with
    one that torch does not see is broken for the check, not a CPU to rehearse on."""
    try:
        code, stdout, _stderr = run_quiet(["nvidia-smi", "-L"], env, 60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    gpus = [line.split(" (UUID")[0] for line in stdout.splitlines() if line.startswith("GPU ")]
    return "; ".join(gpus) if code == 0 else ""


def run_check(args: argparse.Namespace) -> int:
    """The check into ``args.out``; its work folder (and every scratch file of the stages) is
    removed on any exit, after the last archive was written."""
    stages = chosen_stages(args.stages)  # a bad option is refused before anything is made
    out = Path(args.out).absolute()
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: a file, not a folder; give a folder for the results")
    resume = Path(args.resume).absolute() if args.resume else None
    if resume is not None and not resume.is_file():
        raise UsageError(f"--resume {resume}: no such archive; give an earlier {ARCHIVE}")
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="dlperf-gpu-check-"))
    try:
        return _run_stages(args, stages, out, work, resume)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_stages(
    args: argparse.Namespace, stages: list[Stage], out: Path, work: Path, resume: Path | None
) -> int:
    (work / "logs").mkdir()
    (work / SCRATCH).mkdir()
    # Every scratch file of a stage stays inside the work folder: the selftest's session,
    # torch.compile's and Triton's caches, the CUDA driver's PTX cache, matplotlib's config.
    scratch = work / SCRATCH
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "TMPDIR": str(scratch),
        "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor"),
        "TRITON_CACHE_DIR": str(scratch / "triton"),
        "CUDA_CACHE_PATH": str(scratch / "nv"),
        "XDG_CACHE_HOME": str(scratch / "cache"),
        "MPLCONFIGDIR": str(scratch / "mpl"),
    }
    results: list[StageResult] = []
    run, earlier_mode = 1, None
    if resume is not None:
        results, earlier_mode = resume_into(resume, work)
        run = max((r.run for r in results), default=0) + 1
    # A node whose GPU torch does not see is reported, with its facts, not rehearsed on.
    on_gpu, unseen = False, ""
    if not args.cpu:
        on_gpu, why = framework_sees_gpu(args.python, env)
        listed = "" if on_gpu else gpus_listed(env)
        if listed:
            on_gpu, unseen = True, f"torch under {args.python} does not see {listed}: {why}"
    mode = MODES[on_gpu]
    if earlier_mode not in (None, mode):
        why = "--cpu" if args.cpu else "torch sees no GPU here"
        raise UsageError(
            f"--resume {resume}: that session ran as {earlier_mode} and this command would run "
            f"as {mode} ({why}); resume it on a node like the one it ran on, or leave "
            "--resume out to start a new session"
        )
    if resume is not None:
        print(
            f"gpu-check: resumed {resume} ({len(results)} earlier stage(s)); "
            f"command {run} of the session"
        )
    shapes = GPU if on_gpu else CPU
    budget = Budget(args.budget_s or shapes.budget_s)
    print(f"gpu-check: {'GPU' if on_gpu else 'CPU rehearsal'}, profile {shapes.profile}, "
          f"budget {budget.left():.0f} s, stages {', '.join(s.name for s in stages)}",
          flush=True)  # fmt: skip
    if unseen:
        print(f"gpu-check: {unseen}; only the facts run (--cpu rehearses on the CPU)", flush=True)
    for stage in stages:
        why = unseen if unseen and stage.kind != "facts" else decide(stage, budget.left(), on_gpu)
        if why:
            results.append(StageResult(stage.name, "skipped", detail=why, run=run))
            print(f"gpu-check: {stage.name}: skipped: {why}", flush=True)
            continue
        print(f"gpu-check: {stage.name}: {stage.what} ({budget.left():.0f} s left)", flush=True)
        if stage.kind == "facts":
            if (work / "facts").is_dir():  # an earlier command's facts stay beside this one's
                os.replace(work / "facts", work / f"facts-run{run - 1}")
            result = collect_facts(args.python, work, env)
            result.run = run
        else:
            argv = stage.argv(shapes, args.python, work)
            started = time.monotonic()
            log = work / "logs" / f"{stage.name}.log"
            code, cut = run_command(argv, log, budget.left() - RESERVE_S, env)
            status = "cut" if cut else ("ok" if code == 0 else "failed")
            detail = cut or (_tail(log) if code != 0 else "")
            seconds = time.monotonic() - started
            result = StageResult(stage.name, status, seconds, code, detail, argv, run)
        results.append(result)
        print(f"gpu-check: {stage.name}: {result.status} in {result.seconds:.0f} s"
              f"{': ' + result.detail if result.status != 'ok' else ''}", flush=True)  # fmt: skip
        # Between stages the summary leaves MFU out: counting FLOPs starts torch, and the
        # budget is the GPU's (the archive holds what the count needs; it is made at the end).
        publish(work, out, results, on_gpu, shapes, None)
    summary = publish(work, out, results, on_gpu, shapes, args.python)
    print(summary["markdown"], flush=True)
    if unseen:
        return 3  # as tools/gpu-check.sh: the kit cannot run on this node
    # A stage cut or skipped at the budget is a planned outcome; only a failure is an error.
    return 1 if any(r.status == "failed" for r in results if r.run == run) else 0


def resume_into(archive: Path, work: Path) -> tuple[list[StageResult], str | None]:
    """An earlier command's archive, checked as ``unpack`` checks it, extracted into ``work``; its
    stages as they ended (the session in ``results/`` resumes under ``dlperf run``) and the
    mode they ran in."""
    extract_checked(archive, work)
    (work / MANIFEST).unlink(missing_ok=True)
    summary = read_summary(archive, work / "summary.json")
    earlier = []
    for index, entry in enumerate(summary.get("stages") or []):
        try:
            earlier.append(StageResult(**{k: entry[k] for k in StageResult.__dataclass_fields__
                                          if k in entry}))  # fmt: skip
        except (TypeError, KeyError):
            raise UnpackError(
                f"{archive}: summary.json stages[{index}] is not a stage result; use the "
                "archive the check wrote"
            ) from None
    mode = summary.get("mode")
    return earlier, mode if isinstance(mode, str) else None


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
    rank0 = rank0_log(log.read_text(errors="replace") if log.exists() else "")
    window = rank0.device_window_s if rank0 is not None else None
    samples = measurement.get("samples")
    run = (record.get("started_at"), record.get("finished_at"))
    return {
        "verdict": record.get("verdict"),
        "throughput": measurement.get("throughput"),
        "header": record.get("header"),
        "device_throughput": samples / window if window and samples else None,
        "telemetry": gpu_telemetry(record_file.parent, host_window(rank0), run),
    }


def rank0_log(log_text: str) -> Any:
    """Rank 0 of a node log as the kit's own parser reads it (its steps, header and the
    device clock's window); None where the log does not parse."""
    from driver.parsers.base import LogParseError
    from driver.parsers.dlperf_jsonl import DlperfJsonlParser

    try:
        return DlperfJsonlParser().parse({"node0.log": log_text}).ranks.get(0)
    except (LogParseError, KeyError, TypeError, ValueError):
        return None


def host_window(rank: Any) -> tuple[float, float] | None:
    """(start, end) of the measured window on the host's monotonic clock: rank 0's steps
    (``rank0_log``), None without them."""
    if rank is None:
        return None
    options = rank.header.get("options") or {}
    times = {point.step: point.t for point in rank.points}
    warmup, total = options.get("warmup_steps"), options.get("total_steps")
    return (times[warmup], times[total]) if warmup in times and total in times else None


def gpu_telemetry(
    repeat_dir: Path, window: tuple[float, float] | None, run: tuple[Any, Any]
) -> dict[str, Any]:
    """The GPU's NVML samples over the measured window (the whole run on the wall clock where
    the steps give none), median and maximum per metric as a release summarizes them."""
    from driver.telemetry.summary import summarize_samples

    files = {
        path.name: path.read_text(errors="replace")
        for path in sorted(repeat_dir.glob("telemetry-node*.jsonl"))
    }
    whole = run if all(isinstance(t, (int, float)) for t in run) else None
    summary = summarize_samples(files, {0: window} if window else None, whole)
    prefix = "telemetry_gpu_"
    gpu = {k.removeprefix(prefix): v for k, v in summary.items() if k.startswith(prefix)}
    if not any(v is not None for v in gpu.values()):
        status = summary["telemetry_status"]
        return {"note": "no GPU samples in the window" if status == "nvml" else status}
    return {"samples": summary["telemetry_samples"], "window": summary["telemetry_window"], **gpu}


SHAPE_KEYS = ("image_size", "num_classes", "seq_len", "vocab_size", "bert_layers",
              "bert_hidden", "bert_heads", "bert_intermediate", "max_predictions")  # fmt: skip


def flops_per_sample(model: str | None, options: dict[str, Any], python: str) -> float | None:
    """Training FLOPs per sample from the model definitions, counted by the framework's own
    interpreter (``python -m PyTorch.benchmark.flops``); None when it cannot count."""
    if not model:
        return None
    if model == "llama":  # the formula every consumer of a Llama MFU uses (no torch needed)
        from driver.workloads.llama import training_flops_per_sample

        return training_flops_per_sample(options)
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
        "mode": MODES[on_gpu],
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
            _num(telemetry.get("power_w_median")), _num(telemetry.get("sm_clock_mhz_median")),
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
    # (goal, target, measured, below the target is met, format, a GPU's figure: a CPU
    # rehearsal's is shown, not judged)
    rows = [
        ("ResNet-50 AMP samples/s (best variant)", GOALS["resnet50_amp_samples_s"],
         best("resnet50", "median"), False, "{:,.0f}", True),
        ("BERT-base AMP MFU", GOALS["bert_amp_mfu"], best("bert", "mfu"), False, "{:.1%}", True),
        ("Llama 3.2 1B AMP MFU", GOALS["llama_1b_amp_mfu"], best("llama", "mfu"), False,
         "{:.1%}", True),
        ("kit vs device clock, worst case", GOALS["kit_vs_device_clock"],
         max(clock) if clock else None, True, "{:.3%}", True),
        ("selftest error, worst topology", GOALS["selftest_error"],
         max(errors) if errors else None, True, "{:.4%}", False),
        ("kit / bare loop (parity)", GOALS["kit_over_bare"], parity, False, "{:.3f}", False),
        ("per-step device sync's cost (boundary-only / every step - 1; above it, boundary "
         "timing becomes the GPU default)", GOALS["step_sync_cost"], sync_cost, True, "{:.2%}",
         True),
    ]  # fmt: skip
    rehearsal = summary.get("mode") != "gpu"
    out = []
    for name, target, value, below, shape, on_gpu_only in rows:
        bound = ("< " if below else ">= ") + shape.format(target)
        if value is None:
            out.append([name, bound, "not measured", "-"])
        elif rehearsal and on_gpu_only:
            out.append([name, bound, shape.format(value), "n/a (CPU rehearsal)"])
        else:
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
    """The work folder as a tar.gz, with a manifest of every file's SHA-256 and size (the
    stages' scratch folder left out)."""
    files = sorted(
        p for p in work.rglob("*")
        if p.is_file() and not p.is_symlink() and p.relative_to(work).parts[0] != SCRATCH
    )  # fmt: skip
    manifest = {
        str(p.relative_to(work)): {"sha256": _sha256_file(p), "size": p.stat().st_size}
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


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------
# Back home: the archive, checked, into results/

CHUNK = 1 << 20
MAX_MEMBERS = 20_000
MAX_MEMBER_BYTES = 1 << 30  # one raw log or telemetry file
MAX_TOTAL_BYTES = 4 << 30  # everything unpacked, counted while it streams
MAX_MANIFEST_BYTES = 16 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")


class UnpackError(Exception):
    pass


def _member_name(archive: Path, member: tarfile.TarInfo) -> str:
    """The member's checked name: a regular file at a plain relative path."""
    name = member.name
    parts = Path(name).parts
    if (
        not member.isfile()
        or not name
        or name.startswith("/")
        or "\\" in name
        or any(part in ("", ".", "..") for part in name.split("/"))
        or not parts
    ):
        raise UnpackError(f"{archive}: member {name!r} is not a plain relative file")
    return name


def _read_limited(handle: IO[bytes], limit: int, what: str) -> bytes:
    data = handle.read(limit + 1)
    if len(data) > limit:
        raise UnpackError(f"{what}: larger than {limit} bytes")
    return data


def _check_manifest(archive: Path, data: bytes) -> dict[str, dict[str, Any]]:
    where = f"{archive}: {MANIFEST}"
    try:
        manifest = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise UnpackError(
            f"{where} is not JSON ({error}); use the archive the check wrote"
        ) from None
    if not isinstance(manifest, dict):
        raise UnpackError(f"{where} is not an object of files; use the archive the check wrote")
    for name, entry in manifest.items():
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("sha256"), str)
            or not _SHA256.fullmatch(entry["sha256"])
            or not isinstance(entry.get("size"), int)
            or isinstance(entry.get("size"), bool)
            or entry["size"] < 0
        ):
            raise UnpackError(
                f"{where}: the entry of {name!r} needs a 64-hex sha256 and a size in bytes"
            )
    return manifest


def check_whole_gzip(archive: Path) -> None:
    """Read the compressed stream to its end marker first: a gzip cut short can end the tar
    stream at a member's header, where tarfile stops without an error, so that a truncated
    archive would read as one without a manifest. Bounded like the unpacking (tar headers and
    the manifest on top of the members' bytes)."""
    limit = MAX_TOTAL_BYTES + MAX_MEMBERS * 2048 + MAX_MANIFEST_BYTES + 10240
    size = 0
    try:
        with gzip.open(archive, "rb") as stream:
            while chunk := stream.read(CHUNK):
                size += len(chunk)
                if size > limit:
                    raise UnpackError(f"{archive}: unpacks to over {MAX_TOTAL_BYTES} bytes")
    except (EOFError, OSError, zlib.error) as error:
        raise UnpackError(
            f"{archive}: not a whole gpu-check archive ({error}); fetch it again"
        ) from None


def extract_checked(archive: Path, destination: Path) -> dict[str, dict[str, Any]]:
    """Stream ``archive`` into ``destination`` (an empty folder), every member checked before
    its bytes are written (a regular file at a plain relative path, not a folder of another
    member, not seen before, within the size bounds, the running total within
    :data:`MAX_TOTAL_BYTES`) and hashed as it is written; then every file held to the manifest
    (nothing missing or extra, each SHA-256 and size). Raises UnpackError; the caller removes
    ``destination`` then."""
    check_whole_gzip(archive)
    seen: dict[str, tuple[str, int]] = {}
    folders: set[str] = set()
    manifest_data: bytes | None = None
    total = 0
    try:
        with tarfile.open(archive, mode="r|gz") as tar:
            for count, member in enumerate(tar, start=1):
                if count > MAX_MEMBERS:
                    raise UnpackError(f"{archive}: more than {MAX_MEMBERS} members")
                name = _member_name(archive, member)
                parents = {"/".join(name.split("/")[:i]) for i in range(1, name.count("/") + 1)}
                if (
                    name in seen
                    or name in folders
                    or parents & set(seen)
                    or (name == MANIFEST and manifest_data is not None)
                ):
                    raise UnpackError(f"{archive}: member {name!r} clashes with another member")
                folders |= parents
                if member.size > MAX_MEMBER_BYTES:
                    raise UnpackError(f"{archive}: member {name!r} is over {MAX_MEMBER_BYTES} B")
                total += member.size
                if total > MAX_TOTAL_BYTES:
                    raise UnpackError(f"{archive}: unpacks to over {MAX_TOTAL_BYTES} bytes")
                source = tar.extractfile(member)
                if source is None:
                    raise UnpackError(f"{archive}: member {name!r} has no content")
                if name == MANIFEST:
                    manifest_data = _read_limited(source, MAX_MANIFEST_BYTES, f"{archive}: {name}")
                    continue
                target = destination / name
                target.parent.mkdir(parents=True, exist_ok=True)
                digest, size = hashlib.sha256(), 0
                with open(target, "xb") as sink:
                    while chunk := source.read(CHUNK):
                        size += len(chunk)
                        if size > member.size:
                            raise UnpackError(f"{archive}: member {name!r} longer than declared")
                        digest.update(chunk)
                        sink.write(chunk)
                seen[name] = (digest.hexdigest(), size)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as error:
        raise UnpackError(
            f"{archive}: not a whole gpu-check archive ({error}); fetch it again"
        ) from None
    if manifest_data is None:
        raise UnpackError(f"{archive}: no {MANIFEST}; not made by tools/gpu_check.py")
    manifest = _check_manifest(archive, manifest_data)
    if set(manifest) != set(seen):
        missing, extra = sorted(set(manifest) - set(seen)), sorted(set(seen) - set(manifest))
        raise UnpackError(
            f"{archive}: files differ from its manifest (missing {missing}, extra {extra})"
        )
    for name, (sha256, size) in seen.items():
        if sha256 != manifest[name]["sha256"] or size != manifest[name]["size"]:
            raise UnpackError(f"{archive}: {name} does not match its SHA-256 in the manifest")
    return manifest


def read_summary(archive: Path, path: Path) -> dict[str, Any]:
    """The archive's summary.json as an object ({} when the archive has none)."""
    if not path.exists():
        return {}
    try:
        summary = json.loads(_read_limited(path.open("rb"), MAX_MANIFEST_BYTES, str(path)))
    except (ValueError, UnicodeDecodeError, OSError) as error:
        raise UnpackError(f"{archive}: summary.json is not JSON ({error})") from None
    if not isinstance(summary, dict) or not isinstance(summary.get("stages", []), list):
        raise UnpackError(
            f"{archive}: summary.json is not the check's summary (an object with a stages list)"
        )
    return summary


def unpack(archive: Path, results: Path) -> Path:
    """Check every member against the manifest as it streams (:func:`extract_checked`), then
    move the session into ``results/`` under a name of its own (``gpu-check-<host>-<date>``);
    nothing is left behind if any check fails."""
    if results.exists() and not results.is_dir():
        raise UnpackError(f"--results {results}: a file, not a folder; give a folder")
    if not archive.is_file():
        raise UnpackError(f"{archive}: no such archive file")
    made_results = not results.exists()
    results.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".dlperf-tmp-unpack-", dir=results))
    try:
        extract_checked(archive, staging)
        summary = read_summary(archive, staging / "summary.json")
        host = summary.get("host") if isinstance(summary.get("host"), str) else "host"
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(archive.stat().st_mtime))
        target = results / f"gpu-check-{_slug(host or 'host')}-{stamp}"
        if target.exists():
            raise UnpackError(
                f"{target} exists already; remove it or unpack into another --results"
            )
        session = staging / "results" / SESSION
        if session.is_dir():
            os.replace(session, staging / "session")
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        if made_results:  # a results folder made for nothing goes again
            with contextlib.suppress(OSError):
                results.rmdir()
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
    estimates = {stage.name: stage.estimate_s for stage in STAGES}
    yield f"\nplans (--stages NAME; budget {shapes.budget_s:.0f} s, {RESERVE_S:.0f} s kept back):"
    for name, members in PLANS.items():
        total = sum(estimates[m] for m in members)
        default = " (the default)" if name == DEFAULT_PLAN else ""
        yield f"{name:6} ~{total:>4.0f} s{default}: {', '.join(members)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the check into --out")
    run.add_argument("--out", required=True, help="the folder the results go to")
    run.add_argument("--python", default=sys.executable, help="the interpreter with torch")
    run.add_argument("--budget-s", type=budget_seconds, default=0.0,
                     help=f"seconds of stages (0: {GPU_BUDGET_S:.0f} on a GPU, "
                     f"{CPU_BUDGET_S:.0f} on CPU)")  # fmt: skip
    run.add_argument("--stages", help=f"stage and plan names, comma-separated (default "
                     f"{DEFAULT_PLAN}; `plan` lists them)")  # fmt: skip
    run.add_argument("--resume", help="an earlier gpu-check.tar.gz: continue its session")
    run.add_argument("--cpu", action="store_true", help="the CPU rehearsal even with a GPU")
    plan = sub.add_parser("plan", help="the stages, their estimates and the plans")
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
    die_with_parent()
    try:
        return run_check(args)
    except (UsageError, UnpackError) as error:
        print(f"gpu-check: error: {error}", file=sys.stderr)
        return 2
    finally:
        # tools/gpu-check.sh's scratch folder (the wheels' install, this check's TMPDIR): the
        # script removes it as it ends, unless it was killed first; then this does.
        scratch = os.environ.get(SCRATCH_VAR)
        if scratch and Path(scratch).name.startswith("dlperf-gpu-check."):
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
