"""Parity: the kit's benchmark beside a bare loop of the same model, to show the harness's cost.

For one framework, model, batch, precision and option set, :func:`run_parity` runs in turn, for
``rounds`` rounds, the kit's benchmark script exactly as ``dlperf run`` starts it on this host
(``driver.core.command.node_commands`` with the local runtime: the framework's venv, its
environment) and the framework's bare loop (``<Framework>/bare_loop.py``: build, synthetic batch,
forward/backward/step, a timer around whole steps, one host sync at the end). Both are fresh
processes with the same environment and the same CPU threads (OMP_NUM_THREADS, which the kit's
script and the bare loop both apply). The order alternates (bare first in even rounds, kit first
in odd ones) so that a drift of the machine's load weighs on both sides alike.

The kit's throughput is measured the one way the kit measures (``driver.model.measure``: the
window from the end of the last warm-up step to the end of the last measured step); the bare
loop's is its measured steps' samples over its timer. The ratio kit/bare is reported per round,
with the median and the spread (min..max) over the rounds.

On a GPU the same command measures the per-step device sync of the kit's step log against
boundary-only timing (the bare loop syncs once, at the end).
"""

from __future__ import annotations

import json
import math
import os
import resource
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from tabulate import tabulate

from driver.bench.host import cpu_count, cpu_model_name
from driver.bench.supervisor import start, stop
from driver.core.command import node_commands, option_text
from driver.frameworks.base import FRAMEWORKS, REPO_ROOT, Framework, OptionError
from driver.model.case import Case, Topology
from driver.model.measure import LogParseError, Window, measure_repeat, parse_logs
from driver.plugins import load_all
from driver.runtimes.local import process_environment
from driver.studies.bareloop import TAG as BARE_TAG

BARE_SCRIPT = "bare_loop.py"  # beside each framework's benchmark folder: <Folder>/bare_loop.py
BARE_MODELS = ("resnet50",)
BARE_OPTIONS = ("image_size", "num_classes", "channels_last")  # what the bare loops apply
Side = Literal["bare", "kit"]


class ParityError(RuntimeError):
    """A parity run that cannot start or whose two sides did not do the same work."""


@dataclass(frozen=True)
class ParityRequest:
    framework: str
    model: str = "resnet50"
    batch_size: int = 8
    precision: str = "fp32"  # fp32 | amp
    options: Mapping[str, Any] = field(default_factory=dict)
    rounds: int = 5
    warmup_steps: int = 3
    measured_steps: int = 12
    threads: int = 0  # CPU threads of both sides; 0: every core of this host
    timeout_s: float = 1800.0  # per process

    @property
    def cpu_threads(self) -> int:
        return self.threads or cpu_count()


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class SideRun(StrictModel):
    """One process of one side: what it ran and how fast."""

    side: Side
    throughput: float = Field(gt=0)  # samples / s over the measured steps
    seconds: float = Field(gt=0)  # the measured steps' duration
    samples: int = Field(gt=0)
    model: str
    batch_size: int
    precision: str
    parameters: int
    device: str
    shape: dict[str, Any] = {}  # the options a bare loop applies, as this side ran them
    load_1min: float  # the host's 1-minute load average when the process started
    # CPU time the process used / (its wall time x the threads asked for), start-up included:
    # well below 1, the machine's other work took cores from this run.
    cpu_share: float = Field(default=0.0, ge=0)


class ParityPair(StrictModel):
    round: int
    bare: SideRun
    kit: SideRun
    first: Side

    @property
    def ratio(self) -> float:
        """kit / bare throughput: 1.0 is a harness that costs nothing."""
        return self.kit.throughput / self.bare.throughput

    @property
    def share_adjusted_ratio(self) -> float | None:
        """The ratio with each side's throughput divided by its CPU share: what it would have
        been had both sides had the same share of the cores (a shared machine's other work
        takes cores from one run more than the other). None without both shares."""
        if self.kit.cpu_share <= 0 or self.bare.cpu_share <= 0:
            return None
        return self.ratio * self.bare.cpu_share / self.kit.cpu_share


class ParityResult(StrictModel):
    framework: str
    model: str
    batch_size: int
    precision: str
    options: dict[str, Any]
    threads: int
    warmup_steps: int
    measured_steps: int
    machine: str
    pairs: list[ParityPair]

    @property
    def ratios(self) -> list[float]:
        return [pair.ratio for pair in self.pairs]

    @property
    def median_ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def spread(self) -> tuple[float, float]:
        return min(self.ratios), max(self.ratios)

    @property
    def median_share_adjusted(self) -> float | None:
        adjusted = [pair.share_adjusted_ratio for pair in self.pairs]
        if any(value is None for value in adjusted):
            return None
        return statistics.median(value for value in adjusted if value is not None)

    @property
    def on_gpu(self) -> bool:
        return any(pair.kit.device.startswith(("cuda", "gpu")) for pair in self.pairs)


# --------------------------------------------------------------------------------------------
# Commands


def machine_description() -> str:
    """``<CPU name>, <n> cores, <ISA>``: the facts the ratio depends on."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    if "avx512_bf16" in flags:
        isa = "AVX-512 + bf16"
    elif "avx512f" in flags:
        isa = "AVX-512"
    elif "avx2" in flags:
        isa = "AVX2, no AVX-512"
    else:
        isa = "no AVX2"
    return f"{cpu_model_name()}, {cpu_count()} cores, {isa}"


def checked_options(framework: Framework, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options, typed by the framework's script, and only those a bare loop applies."""
    checked: dict[str, Any] = {}
    for name, value in options.items():
        try:
            checked[name] = framework.check_option(name, value)
        except OptionError as error:
            try:  # channels_last=1: a flag written as 0/1
                if type(value) is not int or value not in (0, 1):
                    raise error
                checked[name] = framework.check_option(name, bool(value))
            except OptionError:
                raise ParityError(f"--option {name}: {error}") from None
        if name not in BARE_OPTIONS:
            raise ParityError(
                f"--option {name}: the bare loops apply only {', '.join(BARE_OPTIONS)}; an "
                "option the bare loop cannot apply would make the two sides differ"
            )
    return checked


def parity_case(request: ParityRequest) -> Case:
    return Case(
        model=request.model,
        framework=request.framework,
        topology=Topology(1, 1),
        batch_size=request.batch_size,
        precision=request.precision,
        dataset="synthetic",
        warmup_steps=request.warmup_steps,
        measured_steps=request.measured_steps,
        total_steps=request.warmup_steps + request.measured_steps,
        repeats=1,
        timeout_s=request.timeout_s,
        options=dict(request.options),
        profile="parity",
    )


@dataclass(frozen=True)
class SideCommand:
    argv: list[str]
    env: dict[str, str]
    workdir: str


def prepare(request: ParityRequest) -> ParityRequest:
    """The request with the framework's own name and its options typed and checked."""
    load_all()
    if request.framework not in FRAMEWORKS:
        raise ParityError(
            f"--framework {request.framework}: not a framework of the kit "
            f"({', '.join(sorted(FRAMEWORKS.names()))})"
        )
    framework = FRAMEWORKS.get(request.framework)
    if request.model not in BARE_MODELS or request.model not in framework.models:
        raise ParityError(
            f"--model {request.model}: the bare loops train {', '.join(BARE_MODELS)} "
            f"({framework.name} has {', '.join(framework.models)})"
        )
    if request.precision not in ("fp32", "amp"):
        raise ParityError(f"--precision {request.precision}: fp32 or amp")
    if request.rounds < 1:
        raise ParityError(f"--rounds must be at least 1, got {request.rounds}")
    if request.measured_steps < 1 or request.warmup_steps < 0 or request.batch_size < 1:
        raise ParityError("--batch and --measured-steps must be positive, --warmup-steps >= 0")
    if request.threads < 0:
        raise ParityError(f"--threads must be >= 0 (0: every core), got {request.threads}")
    options = checked_options(framework, request.options)
    return replace(request, framework=framework.name, options=options)


def commands(request: ParityRequest) -> dict[Side, SideCommand]:
    """The kit's command as ``dlperf run`` builds it on this host, and the bare loop's with the
    same interpreter, environment and threads (``request`` as :func:`prepare` returns it)."""
    from driver.runtimes.local import LocalRuntime

    framework = FRAMEWORKS.get(request.framework)
    bare = framework.path / BARE_SCRIPT
    if not bare.is_file():
        raise ParityError(f"{framework.name} has no bare loop ({bare} is missing)")
    runtime = LocalRuntime()
    python = runtime.python(framework)
    if not Path(python).exists():
        raise ParityError(
            f"{python} does not exist: create the environment with `dlperf envs {framework.name}`"
        )
    kit = node_commands(parity_case(request), runtime, request.batch_size)[0]
    threads = {"OMP_NUM_THREADS": str(request.cpu_threads)}
    env = process_environment({**kit.env, **threads})
    bare_argv = [
        python, str(bare.relative_to(REPO_ROOT)),
        "--model", request.model,
        "--batch-size", str(request.batch_size),
        "--precision", request.precision,
        "--warmup-steps", str(request.warmup_steps),
        "--steps", str(request.measured_steps),
        *(arg for key in sorted(request.options)
          for arg in ("--option", f"{key}={option_text(request.options[key])}")),
    ]  # fmt: skip
    workdir = kit.workdir or str(REPO_ROOT)
    return {
        "kit": SideCommand(list(kit.argv), env, workdir),
        "bare": SideCommand(bare_argv, env, workdir),
    }


# --------------------------------------------------------------------------------------------
# Running and reading one side


def run_process(command: SideCommand, timeout_s: float) -> tuple[int, str, str]:
    """Run to the end (killed with this process or past ``timeout_s``): exit code, out, err."""
    process = start(
        command.argv,
        new_group=True,
        cwd=command.workdir,
        env=command.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop([process], groups=True)
        out, err = process.communicate()
        raise ParityError(
            f"{' '.join(command.argv[:2])} ran past {timeout_s:.0f} s; last output:\n"
            + _tail(err or out)
        ) from None
    finally:  # also on KeyboardInterrupt
        if process.poll() is None:
            stop([process], groups=True)
    return process.returncode, out, err


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def read_kit(stdout: str, request: ParityRequest, load: float) -> SideRun:
    """The kit's window throughput from its step log, measured as every run is."""
    try:
        parsed = parse_logs("dlperf-jsonl", {"node0.log": stdout})
        measured = measure_repeat(parsed, Window(request.warmup_steps, request.measured_steps))
    except LogParseError as error:
        raise ParityError(f"the kit's step log gives no measurement: {error}") from None
    header = parsed.header
    options = header.get("options", {})
    return SideRun(
        side="kit",
        throughput=measured.throughput,
        seconds=measured.duration_s,
        samples=measured.samples,
        model=str(header.get("model")),
        batch_size=int(options.get("batch_size", 0)),
        precision=str(options.get("precision")),
        parameters=int(options.get("parameters", 0)),
        device=str(options.get("device")),
        shape={key: options[key] for key in BARE_OPTIONS if key in options},
        load_1min=load,
    )


def read_bare(stdout: str, load: float) -> SideRun:
    records = []
    for line in stdout.splitlines():
        if BARE_TAG in line:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and BARE_TAG in record:
                records.append(record)
    if len(records) != 1:
        raise ParityError(
            f"the bare loop printed {len(records)} result lines ({BARE_TAG!r}), expected one"
        )
    record = records[0]
    try:
        seconds, steps = float(record["seconds"]), int(record["steps"])
        samples = steps * int(record["batch_size"])
        if not (math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"seconds {seconds} is not a positive finite number")
        return SideRun(
            side="bare",
            throughput=samples / seconds,
            seconds=seconds,
            samples=samples,
            model=str(record["model"]),
            batch_size=int(record["batch_size"]),
            precision=str(record["precision"]),
            parameters=int(record["parameters"]),
            device=str(record["device"]),
            shape={k: v for k, v in dict(record.get("options") or {}).items() if k in BARE_OPTIONS},
            load_1min=load,
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ParityError(f"the bare loop's result line is malformed ({error}): {record}") from None


def check_same_work(bare: SideRun, kit: SideRun) -> None:
    """Both sides trained the same model at the same batch, precision and shape options (those
    both report: TensorFlow's header has no channels_last, its layout is always NHWC)."""
    for name in ("model", "batch_size", "precision", "parameters", "samples"):
        if getattr(bare, name) != getattr(kit, name):
            raise ParityError(
                f"the two sides differ in {name}: bare {getattr(bare, name)!r}, "
                f"kit {getattr(kit, name)!r}"
            )
    for key in sorted(set(bare.shape) & set(kit.shape)):
        if bare.shape[key] != kit.shape[key]:
            raise ParityError(
                f"the two sides differ in option {key}: bare {bare.shape[key]!r}, "
                f"kit {kit.shape[key]!r}"
            )


# --------------------------------------------------------------------------------------------
# The rounds

Runner = Callable[[SideCommand, float], tuple[int, str, str]]


def run_side(
    side: Side, command: SideCommand, request: ParityRequest, runner: Runner = run_process
) -> SideRun:
    load = os.getloadavg()[0]
    before, started = _children_cpu_s(), time.monotonic()
    code, out, err = runner(command, request.timeout_s)
    wall = time.monotonic() - started
    if code != 0:
        raise ParityError(
            f"the {side} side exited with {code}: {' '.join(command.argv)}\n" + _tail(err or out)
        )
    run = read_kit(out, request, load) if side == "kit" else read_bare(out, load)
    share = (_children_cpu_s() - before) / (wall * request.cpu_threads) if wall > 0 else 0.0
    return run.model_copy(update={"cpu_share": max(0.0, share)})


def _children_cpu_s() -> float:
    """User + system CPU seconds of this process's waited-for children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_parity(
    request: ParityRequest,
    *,
    runner: Runner = run_process,
    progress: Callable[[str], None] = lambda _line: None,
) -> ParityResult:
    request = prepare(request)
    sides = commands(request)
    pairs: list[ParityPair] = []
    for number in range(1, request.rounds + 1):
        order: Sequence[Side] = ("bare", "kit") if number % 2 else ("kit", "bare")
        runs = {side: run_side(side, sides[side], request, runner) for side in order}
        check_same_work(runs["bare"], runs["kit"])
        pair = ParityPair(round=number, bare=runs["bare"], kit=runs["kit"], first=order[0])
        pairs.append(pair)
        progress(
            f"round {number}/{request.rounds}: bare {pair.bare.throughput:.3f}, "
            f"kit {pair.kit.throughput:.3f} samples/s, ratio {pair.ratio:.3f} "
            f"(load {pair.bare.load_1min:.2f}/{pair.kit.load_1min:.2f}, CPU share "
            f"{pair.bare.cpu_share:.2f}/{pair.kit.cpu_share:.2f})"
        )
    return ParityResult(
        framework=request.framework,
        model=request.model,
        batch_size=request.batch_size,
        precision=request.precision,
        options=dict(request.options),
        threads=request.cpu_threads,
        warmup_steps=request.warmup_steps,
        measured_steps=request.measured_steps,
        machine=machine_description(),
        pairs=pairs,
    )


def variant_label(result: ParityResult) -> str:
    options = ", ".join(f"{k}={option_text(v)}" for k, v in sorted(result.options.items()))
    return result.precision + (f" ({options})" if options else "")


def format_result(result: ParityResult) -> str:
    """Each pair, then the median ratio and its spread, and what was measured where."""
    rows = [
        [
            pair.round,
            pair.first,
            f"{pair.bare.throughput:.3f}",
            f"{pair.kit.throughput:.3f}",
            f"{pair.ratio:.3f}",
            f"{pair.bare.load_1min:.2f} / {pair.kit.load_1min:.2f}",
            f"{pair.bare.cpu_share:.2f} / {pair.kit.cpu_share:.2f}",
            _maybe(pair.share_adjusted_ratio),
        ]
        for pair in result.pairs
    ]
    headers = ["round", "first", "bare samples/s", "kit samples/s", "kit/bare", "load bare/kit",
               "CPU share bare/kit", "kit/bare per CPU share"]  # fmt: skip
    low, high = result.spread
    what = "per-step sync vs boundary-only timing" if result.on_gpu else "harness cost"
    adjusted = result.median_share_adjusted
    lines = [
        f"{result.framework} {result.model} batch {result.batch_size} {variant_label(result)}, "
        f"{result.warmup_steps} warm-up + {result.measured_steps} measured steps, "
        f"{result.threads} threads; {result.machine}",
        tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True),
        f"median kit/bare {result.median_ratio:.3f} over {len(result.pairs)} rounds "
        f"(spread {low:.3f}..{high:.3f}; {what})",
    ]
    if adjusted is not None:
        values = [pair.share_adjusted_ratio or 0.0 for pair in result.pairs]
        lines.append(
            f"median kit/bare per CPU share {adjusted:.3f} (spread {min(values):.3f}.."
            f"{max(values):.3f}; each side's throughput over the share of the cores it got)"
        )
    return "\n".join(lines)


def _maybe(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
