"""The GPU check's stages and plans: what each runs, what it costs on one H100, which fit.

The estimates decide which stages start within a command's budget (:func:`decide`); the plans
group the stages so that each fits one command of about 7 minutes (docs/gpu-check.md).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from driver.diagnose.gpucheck.archive import SESSION
from driver.workloads.llama import LLAMA_SIZES, training_flops_per_token

SCRATCH = "tmp"  # the stages' TMPDIR beside the work folder: removed with it, not archived
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
# XLA's compile of ResNet-50's jitted step in the first repeat's process, taken as 40 s on a
# 16-core GPU node until one is measured; the later repeats load it from the compilation cache
# the check keeps in its scratch folder (~5 s each).
JAX_COMPILE_S = 40.0
JAX_CACHED_S = 5.0
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
    framework: str = "pytorch"  # of a run stage: its --python is the check's for it

    def argv(self, shapes: Shapes, python: str, work: Path) -> list[str]:
        """The stage's command: the kit under this interpreter, the framework under ``python``
        (on the GPU node both are its python3)."""
        kit = [sys.executable, "-m", "driver"]
        if self.kind == "run":
            fixed = shapes.batch_of(self.run_args[1])
            batch = "max" if self.max_batch else str(fixed)
            return [*kit, "run", "--framework", self.framework, "--profile", shapes.profile,
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
    # JAX's ResNet-50 at resnet50-amp's case, on the same device: the framework factor's pair.
    Stage("jax-resnet50-amp", "run", "JAX ResNet-50 AMP (bf16), fixed batch, beside PyTorch's",
          run_cost(RN50_AMP_STEP_S, extra_s=JAX_COMPILE_S + (REPEATS - 1) * JAX_CACHED_S),
          _run("resnet50", "on", "default"), framework="jax"),
)  # fmt: skip
STAGE_NAMES = tuple(stage.name for stage in STAGES)

# Each plan fits GPU_BUDGET_S less RESERVE_S by the estimates above (a test holds them to it);
# core first: the figures that say most about the node and the kit.
PLANS = {
    "core": ("facts", "resnet50-amp", "bert-amp", "selftest", "parity-amp"),
    "bert-max": ("facts", "bert-amp-max"),
    "resnet50-max": ("facts", "resnet50-amp-max", "resnet50-amp-cuda-graphs"),
    "resnet50-modes": (
        "facts",
        "resnet50-amp-compile",
        "resnet50-tf32",
        "resnet50-amp-boundary-sync",
    ),
    "llama": ("facts", "llama-1b-amp"),
    # `--stages llama,jax` fits one command too (~7 min by these estimates).
    "jax": ("facts", "jax-resnet50-amp"),
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
