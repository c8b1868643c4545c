"""Parity: the kit as ``dlperf run`` starts it, beside a bare loop of the same model.

For one framework, model, batch, precision and variant, :func:`run_parity` plans the case the way
``dlperf run`` does (the framework's matrix under the profile ``auto`` chooses on this host, the
command line's narrowing and overrides: ``driver.core.matrix``), then runs in turn, for
``rounds`` rounds:

- the kit: ``dlperf run`` of exactly that case, one repeat, as a user starts it, in a process of
  its own on a pseudo-terminal: the driver with its runner, local runtime, supervisor,
  telemetry sampler and progress bar, the benchmark script under it, a session written under
  ``results``. Its throughput is the session's record (the window the kit always measures);
- the bare loop (``<Framework>/bare_loop.py``): build, synthetic batch, forward/backward/step,
  a timer around whole steps, one host sync at the end, in a fresh process with the same
  interpreter, environment and CPU threads.

Like with like, by construction: before the rounds, the kit's benchmark command (the node
command of the same plan) is started until its header, which records every option as the kit
resolved it (its defaults, the device, the AMP dtype, the threads, ...). Each option that changes
the computation (all of them but :data:`NOT_HANDED`) is handed to the bare loop, which applies it
in plain framework code or refuses it with a one-line reason; its result line says what it
applied, read back from the framework, and every round fails unless that equals what the kit's
header of that round records (:func:`check_same_work`).

The order alternates (bare first in odd rounds, kit first in even ones) so that a drift of the
machine's load weighs on both sides alike. Each side's CPU share over its measured window (its
CPU time / (window x threads)) shows how much of the cores the machine's other work left it;
the kit's driver's own CPU time over the kit's window (sampled from ``/proc`` once a second by
this process) is the harness's cost that no load can hide.
"""

from __future__ import annotations

import json
import math
import os
import pty
import re
import select
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import Field
from tabulate import tabulate

from driver.bench.host import cpu_count, cpu_model_name
from driver.bench.supervisor import start, stop
from driver.core.command import node_commands, option_text
from driver.core.matrix import (
    MatrixError,
    UnknownProfile,
    apply_overrides,
    load_matrix,
    overrides_from,
)
from driver.core.session import AUTO, choose_profile
from driver.frameworks.base import FRAMEWORKS, REPO_ROOT
from driver.model.case import Case
from driver.model.measure import LogParseError, Window, parse_logs
from driver.model.results import RECORD, RecordError, load_record
from driver.plugins import load_all
from driver.runtimes.base import RuntimeConfigError
from driver.runtimes.local import LocalRuntime, check_framework_python, process_environment
from driver.schema import ConfigError, StrictModel
from driver.studies.bareloop import OPTIONS_TAG
from driver.studies.bareloop import TAG as BARE_TAG

BARE_SCRIPT = "bare_loop.py"  # beside each framework's benchmark folder: <Folder>/bare_loop.py
BARE_MODELS = ("resnet50",)
SHAPE_KEYS = ("image_size", "num_classes", "channels_last")  # the shape columns of a side
# Header options that are not handed to the bare loop, and why: they are passed as its own
# arguments, or they do not change one process's computation on synthetic data.
NOT_HANDED: dict[str, str] = {
    "batch_size": "an argument of its own (compared)",
    "precision": "an argument of its own (compared)",
    "warmup_steps": "an argument of its own",
    "total_steps": "the bare loop counts warm-up and measured steps",
    "global_batch_size": "one process",
    "distributed_backend": "one process: no collective",
    "engine": "one process: no collective",
    "tf_config": "one process: no collective",
    "kvstore": "one process: no collective",
    "dataset": "synthetic data on both sides",
    "data_dir": "synthetic data: no input files",
    "loader_workers": "synthetic data: no loader",
    "normalize_on": "synthetic data: no loader",
    "dali": "synthetic data: no input pipeline",
    "weights_checksum": "after the measurement",
    "parameters": "compared as the count each side built",
    "num_threads_source": "where the count came from; the count is handed",
    "step_sync": "how the kit times its steps (the bare loop syncs once, at the end)",
}
# Shape options of the other models (the header records every shape option).
OTHER_MODEL_KEYS = {
    "resnet50": ("seq_len", "vocab_size", "bert_layers", "bert_hidden", "bert_heads",
                 "bert_intermediate", "max_predictions"),
}  # fmt: skip
KIT_SESSION_PREFIX = "round-"
CPU_SAMPLE_S = 1.0  # how often this process reads the kit's driver's CPU time from /proc
Side = Literal["bare", "kit"]


class ParityError(RuntimeError):
    """A parity run that cannot start or whose two sides did not do the same work."""


@dataclass(frozen=True)
class ParityRequest:
    framework: str
    model: str = "resnet50"
    batch_size: int = 8
    precision: str = "fp32"  # fp32 | amp
    variant: str = "default"  # the matrix's option variant
    xla: bool = False
    profile: str = AUTO  # as dlperf run: auto picks cpu-smoke on a CPU host, dlperf with GPUs
    options: Mapping[str, Any] = field(default_factory=dict)  # --option overrides (both sides)
    rounds: int = 5
    warmup_steps: int = 3
    measured_steps: int = 12
    threads: int = 0  # CPU threads of both sides; 0: the kit's default (bare: the same count)
    python: str | None = None  # an existing framework install instead of .venvs/<framework>
    results: Path = REPO_ROOT / "results"  # the kit's sessions go to <results>/parity-<stamp>
    timeout_s: float = 1800.0  # per process
    terminal: bool = True  # the kit's driver on a pseudo-terminal (its rich progress bar)

    @property
    def cpu_threads(self) -> int:
        return self.threads or cpu_count()


class DriverCost(StrictModel):
    """CPU time of the kit's driver process (every thread of it, not its children) over the
    kit's measured window: the harness's own work beside the benchmark."""

    window_s: float = Field(gt=0)
    main_thread_s: float = Field(ge=0)  # the runner and the local runtime's wait
    other_threads_s: float = Field(ge=0)  # the telemetry sampler, the progress bar's refresh

    @property
    def ms_per_s(self) -> float:
        return 1000.0 * (self.main_thread_s + self.other_threads_s) / self.window_s


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
    shape: dict[str, Any] = {}  # image size, classes, channels_last as this side ran them
    # kit: the handed options as its header records them; bare: as the loop applied them
    options: dict[str, Any] = {}
    load_1min: float  # the host's 1-minute load average when the process started
    # CPU time of the training process over its measured window / (window x threads): well
    # below 1, the machine's other work took cores from this run. 0: not measured.
    cpu_share: float = Field(default=0.0, ge=0)
    session: str | None = None  # kit: the session dlperf run wrote
    driver: DriverCost | None = None  # kit: its driver's own CPU over the window


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
    options: dict[str, Any]  # the --option overrides
    threads: int
    warmup_steps: int
    measured_steps: int
    machine: str
    pairs: list[ParityPair]
    variant: str = "default"
    profile: str = ""
    case_id: str = ""
    handed: dict[str, Any] = {}  # every option handed to the bare loop, from the kit's header
    kit_command: list[str] = []  # the dlperf run command of the kit side (one round's)
    bare_command: list[str] = []
    python: str = ""

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
# The request and the plan


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


def prepare(request: ParityRequest) -> ParityRequest:
    """The request with the framework's own name, checked (options: by the matrix's rules, in
    :func:`plan_case`)."""
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
        raise ParityError(f"--threads must be >= 0 (0: the kit's default), got {request.threads}")
    python = request.python
    if python is not None:
        try:  # as dlperf run checks it: it starts and imports the framework
            python = check_framework_python(python, [framework])
        except RuntimeConfigError as error:
            raise ParityError(str(error)) from None
    options = dict(request.options)
    for name, value in request.options.items():
        if type(value) is int and value in (0, 1):  # channels_last=1: a flag written as 0/1
            try:
                framework.check_option(name, value)
            except ValueError:
                options[name] = bool(value)
    # The kit's driver runs in the repository root: its --results must not depend on our cwd.
    results = Path(request.results).absolute()
    request = replace(
        request, framework=framework.name, options=options, python=python, results=results
    )
    plan_case(request)  # the selection and the options, checked now
    return request


def plan_case(request: ParityRequest) -> tuple[Case, str]:
    """The one case ``dlperf run`` runs for this request on this host, and its profile."""
    framework = FRAMEWORKS.get(request.framework)
    profile, _why = choose_profile(request.profile, "local")
    try:
        matrix = load_matrix(framework.matrix_file, profile)
        overrides = overrides_from(
            {
                "models": (request.model,),
                "topologies": ("1n1g",),
                "batch_sizes": (request.batch_size,),
                "precisions": (request.precision,),
                "xla": request.xla,
                "datasets": ("synthetic",),
                "variants": (request.variant,),
                "repeats": 1,
                "warmup_steps": request.warmup_steps,
                "measured_steps": request.measured_steps,
                "options": dict(request.options),
            }
        )
        cases = apply_overrides(matrix.cases, overrides)
    except UnknownProfile as error:
        raise ParityError(f"--profile {request.profile}: {error.message}") from None
    except (MatrixError, ConfigError) as error:
        raise ParityError(str(error).replace("command line: ", "")) from None
    if len(cases) != 1:
        known = sorted({c.variant for c in matrix.cases if c.model == request.model})
        raise ParityError(
            f"--variant {request.variant} --xla {'on' if request.xla else 'off'}: the "
            f"{profile} profile of {framework.matrix_file.relative_to(REPO_ROOT)} has "
            f"{len(cases)} such {request.model} case(s); its variants: {', '.join(known)}"
        )
    return cases[0], profile


@dataclass(frozen=True)
class SideCommand:
    argv: list[str]
    env: dict[str, str]
    workdir: str
    terminal: bool = False  # stdout and stderr on a pseudo-terminal (the kit's driver)
    stop_after: str | None = None  # stop the process once a line of its output holds this
    watch: bool = False  # sample its own threads' and its children's CPU once a second


def kit_runtime(request: ParityRequest) -> LocalRuntime:
    return LocalRuntime(python_override=request.python)


def threads_environment(request: ParityRequest) -> dict[str, str]:
    return {"OMP_NUM_THREADS": str(request.threads)} if request.threads else {}


def option_arguments(options: Mapping[str, Any]) -> list[str]:
    return [
        arg for key in sorted(options) for arg in ("--option", f"{key}={option_text(options[key])}")
    ]


def commands(
    request: ParityRequest, handed: Mapping[str, Any] | None = None
) -> dict[str, SideCommand]:
    """What runs (``request`` as :func:`prepare` returns it):

    - ``kit``: the kit's benchmark command as ``dlperf run``'s local runtime starts it (the
      node command of the same plan; started until its header before the rounds);
    - ``driver``: the ``dlperf run`` command of the kit side (its session name is set per round);
    - ``bare``: the bare loop with the same interpreter, environment and threads, and the
      ``handed`` options (before the kit's header is known: the case's own options).
    """
    framework = FRAMEWORKS.get(request.framework)
    bare = framework.path / BARE_SCRIPT
    if not bare.is_file():
        raise ParityError(f"{framework.name} has no bare loop ({bare} is missing)")
    runtime = kit_runtime(request)
    python = runtime.python(framework)
    if not Path(python).exists():
        raise ParityError(
            f"{python} does not exist: create the environment with `dlperf envs {framework.name}`"
            " or name an existing install with --python"
        )
    case, _profile = plan_case(request)
    node = node_commands(case, runtime, request.batch_size)[0]
    threads = threads_environment(request)
    env = process_environment({**node.env, **threads})
    workdir = node.workdir or str(REPO_ROOT)
    bare_argv = [
        python, str(bare.relative_to(REPO_ROOT)),
        "--model", request.model,
        "--batch-size", str(request.batch_size),
        "--precision", request.precision,
        "--warmup-steps", str(request.warmup_steps),
        "--steps", str(request.measured_steps),
        *option_arguments(case.options if handed is None else handed),
    ]  # fmt: skip
    return {
        "kit": SideCommand(list(node.argv), env, workdir),
        "driver": SideCommand(
            driver_argv(request, case, Path(request.results), f"{KIT_SESSION_PREFIX}01"),
            {**os.environ, **threads},
            str(REPO_ROOT),
            terminal=request.terminal,
            watch=True,
        ),
        # Watched like the kit's driver, so that this process's once-a-second look at /proc
        # weighs on both sides alike.
        "bare": SideCommand(bare_argv, env, workdir, watch=True),
    }


def driver_argv(request: ParityRequest, case: Case, results: Path, session: str) -> list[str]:
    """``dlperf run`` of exactly ``case``, one repeat (the driver of this interpreter)."""
    return [
        sys.executable, "-m", "driver", "run",
        "--framework", request.framework,
        "--profile", request.profile,
        "--model", case.model,
        "--nodes", "1", "--gpus", "1",
        "--batch", str(request.batch_size),
        "--amp", "on" if case.precision == "amp" else "off",
        "--xla", "on" if case.xla else "off",
        "--dataset", case.dataset,
        "--variant", case.variant,
        "--repeats", "1",
        "--warmup-steps", str(request.warmup_steps),
        "--measured-steps", str(request.measured_steps),
        *option_arguments(request.options),
        *(("--python", request.python) if request.python else ()),
        "--results", str(results),
        "--session", session,
    ]  # fmt: skip


def handed_options(header: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The header's options that change the computation: what the bare loop must apply."""
    options = dict(header.get("options") or {})
    skip = {*NOT_HANDED, *OTHER_MODEL_KEYS.get(model, ())}
    return {key: value for key, value in sorted(options.items()) if key not in skip}


# --------------------------------------------------------------------------------------------
# Running a process


class Finished(NamedTuple):
    code: int
    out: str
    err: str
    # (monotonic time, the process's main thread CPU s, its other threads' CPU s, its
    # descendants' CPU s), once a second while it ran (only for a watched command)
    cpu: tuple[tuple[float, float, float, float], ...] = ()


Runner = Callable[[SideCommand, float], Any]  # returns Finished, or (code, out, err)

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def _stat_cpu_s(path: str) -> float:
    """utime + stime (seconds) of a ``/proc/.../stat`` file; 0 when it is gone."""
    try:
        with open(path, encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) * _TICK_S


def _children(pid: int) -> list[int]:
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as children:
                found += [int(child) for child in children.read().split()]
        except OSError:
            continue
    return found


def cpu_sample(pid: int) -> tuple[float, float, float, float]:
    """(now, main thread CPU s, other threads' CPU s, live descendants' CPU s) of ``pid``."""
    now = time.monotonic()
    main = _stat_cpu_s(f"/proc/{pid}/task/{pid}/stat")
    total = _stat_cpu_s(f"/proc/{pid}/stat")
    descendants, stack = 0.0, _children(pid)
    while stack:
        child = stack.pop()
        descendants += _stat_cpu_s(f"/proc/{child}/stat")
        stack += _children(child)
    return now, main, max(0.0, total - main), descendants


class CpuWatch:
    """Samples :func:`cpu_sample` of one process every :data:`CPU_SAMPLE_S` in a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="parity-cpu-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            sample = cpu_sample(self.pid)
            if sample[1] or sample[2] or sample[3]:
                self.samples.append(sample)
            self._stop.wait(CPU_SAMPLE_S)

    def stop(self) -> tuple[tuple[float, float, float, float], ...]:
        self._stop.set()
        self._thread.join()
        return tuple(self.samples)


def run_process(command: SideCommand, timeout_s: float) -> Finished:
    """Run to the end (killed with this process, past ``timeout_s``, or once a line holds
    ``command.stop_after``): exit code, output, errors (one stream on a terminal)."""
    terminal = pty.openpty() if command.terminal else None
    merged = terminal is not None or command.stop_after is not None
    output = terminal[1] if terminal else subprocess.PIPE
    process = start(
        command.argv,
        new_group=True,
        cwd=command.workdir,
        env=command.env,
        stdout=output,
        stderr=output if terminal else (subprocess.STDOUT if merged else subprocess.PIPE),
        stdin=subprocess.DEVNULL,
    )
    if terminal:
        os.close(terminal[1])
    watch = CpuWatch(process.pid) if command.watch else None
    deadline = time.monotonic() + timeout_s
    try:
        if merged:
            source = terminal[0] if terminal else process.stdout.fileno()  # type: ignore[union-attr]
            out = _read_until(source, process, deadline, command.stop_after)
            err = ""
        else:
            try:
                raw_out, raw_err = process.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                stop([process], groups=True)
                raw_out, raw_err = process.communicate()
                raise _past_timeout(command, timeout_s, raw_err or raw_out) from None
            out, err = raw_out.decode(errors="replace"), raw_err.decode(errors="replace")
    finally:  # also on KeyboardInterrupt
        if process.poll() is None:
            stop([process], groups=True)
        if terminal:
            os.close(terminal[0])
        cpu = watch.stop() if watch else ()
    if out is None:
        raise _past_timeout(command, timeout_s, "")
    return Finished(process.wait(), out, err, cpu)


def _past_timeout(command: SideCommand, timeout_s: float, text: Any) -> ParityError:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return ParityError(
        f"{' '.join(command.argv[:4])} ran past {timeout_s:.0f} s; last output:\n" + _tail(text)
    )


def _read_until(
    fd: int, process: subprocess.Popen, deadline: float, marker: str | None
) -> str | None:
    """Everything ``fd`` gives until EOF (None past ``deadline``); with ``marker``, the
    process is stopped as soon as a complete line holds it."""
    chunks: list[bytes] = []
    pending = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            stop([process], groups=True)
            return None
        ready, _, _ = select.select([fd], [], [], min(left, 5.0))
        if not ready:
            continue
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the terminal's other end is closed
            data = b""
        if not data:
            break
        chunks.append(data)
        if marker is not None:
            pending += data
            lines = pending.split(b"\n")
            pending = lines.pop()
            if any(marker.encode() in line for line in lines):
                stop([process], groups=True)
                break
    return _ANSI.sub("", b"".join(chunks).decode(errors="replace"))


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _finished(result: Any) -> Finished:
    return result if isinstance(result, Finished) else Finished(*result)


# --------------------------------------------------------------------------------------------
# The kit's header, the bare loop's check


def probe_header(request: ParityRequest, runner: Runner) -> dict[str, Any]:
    """The header of the kit's benchmark command (started until it prints it)."""
    kit = commands(request)["kit"]
    probe = replace(kit, stop_after='"dlperf": "header"')
    result = _finished(runner(probe, request.timeout_s))
    for line in (result.out + "\n" + result.err).splitlines():
        if '"header"' in line and line.lstrip().startswith("{"):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("dlperf") == "header":
                return record
    raise ParityError(
        f"the kit's benchmark exited with {result.code} before its header: "
        f"{' '.join(kit.argv)}\n" + _tail(result.err or result.out)
    )


def check_bare_options(
    request: ParityRequest, handed: Mapping[str, Any], runner: Runner
) -> dict[str, Any]:
    """The options the bare loop would apply (it refuses what it cannot mirror, before loading
    the framework)."""
    bare = commands(request, handed)["bare"]
    check = replace(bare, argv=[*bare.argv, "--check-options"])
    result = _finished(runner(check, request.timeout_s))
    if result.code != 0:
        errors = [line for line in result.err.splitlines() if "error:" in line]
        reason = errors[-1].split("error:", 1)[1].strip() if errors else _tail(result.err)
        raise ParityError(f"the bare {request.framework} loop refuses the kit's case: {reason}")
    for line in result.out.splitlines():
        if OPTIONS_TAG in line:
            return dict(json.loads(line)["options"])
    raise ParityError(f"the bare loop's option check printed nothing: {' '.join(check.argv)}")


# --------------------------------------------------------------------------------------------
# Reading one side


def read_kit(session: Path, case: Case, request: ParityRequest, load: float) -> SideRun:
    """The kit's throughput from its session's record, as every reader takes it."""
    path = session / "cases" / case.id / "repeat-01" / RECORD
    try:
        record = load_record(path)
    except RecordError as error:
        raise ParityError(f"the kit's session gives no measurement: {error}") from None
    if not record.ok or record.measurement is None:
        raise ParityError(
            f"the kit's session gives no measurement: its repeat ended {record.verdict}: "
            f"{record.detail} ({path})"
        )
    measured = record.measurement
    header = record.header
    options = dict(header.get("options") or {})
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
        shape={key: options[key] for key in SHAPE_KEYS if key in options},
        options=handed_options(header, request.model),
        load_1min=load,
        session=str(session),
    )


def kit_window(session: Path, case: Case, request: ParityRequest) -> tuple[float, float]:
    """(start, end) of the kit's measured window on this host's monotonic clock."""
    repeat = session / "cases" / case.id / "repeat-01"
    try:
        logs = {p.name: p.read_text(errors="replace") for p in sorted(repeat.glob("node*.log"))}
        parsed = parse_logs("dlperf-jsonl", logs)
        window = Window(request.warmup_steps, request.measured_steps)
        points = {point.step: point.t for point in parsed.ranks[min(parsed.ranks)].points}
        return points[window.first], points[window.last]
    except (OSError, LogParseError, KeyError, ValueError) as error:
        raise ParityError(f"the kit's log in {repeat} has no window: {error}") from None


def interpolate(samples: Sequence[tuple[float, ...]], at: float, column: int) -> float | None:
    """A sampled counter at time ``at``, linear between the samples around it (None when the
    samples do not cover it)."""
    for before, after in zip(samples, samples[1:], strict=False):
        if before[0] <= at <= after[0]:
            span = after[0] - before[0]
            share = (at - before[0]) / span if span > 0 else 0.0
            return before[column] + share * (after[column] - before[column])
    return None


def driver_cost(
    samples: Sequence[tuple[float, float, float, float]], window: tuple[float, float]
) -> tuple[DriverCost | None, float | None]:
    """The driver's own CPU over the window, and its children's (the benchmark's) CPU s."""
    start, end = window
    values = {}
    for column in (1, 2, 3):
        first, last = interpolate(samples, start, column), interpolate(samples, end, column)
        if first is None or last is None:
            return None, None
        values[column] = max(0.0, last - first)
    cost = DriverCost(window_s=end - start, main_thread_s=values[1], other_threads_s=values[2])
    return cost, values[3]


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
        applied = dict(record.get("applied") or record.get("options") or {})
        cpu_seconds, threads = record.get("cpu_seconds"), int(record.get("threads") or 0)
        share = cpu_seconds / (seconds * threads) if cpu_seconds and threads else 0.0
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
            shape={key: applied[key] for key in SHAPE_KEYS if key in applied},
            options=applied,
            load_1min=load,
            cpu_share=max(0.0, float(share)),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ParityError(f"the bare loop's result line is malformed ({error}): {record}") from None


def check_same_work(bare: SideRun, kit: SideRun) -> None:
    """Both sides trained the same model at the same batch and precision, with every option
    the kit's header records for the computation applied alike by the bare loop."""
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
    differ = [
        f"{key}: bare {bare.options.get(key, '(not applied)')!r}, kit {kit.options[key]!r}"
        for key in sorted(kit.options)
        if key not in bare.options or not _same(bare.options[key], kit.options[key])
    ]
    if differ:
        raise ParityError(f"the two sides differ in option {'; '.join(differ)}")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        # Equal to a float32's precision: a framework may hold the learning rate in float32.
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=0.0)
    return bool(a == b)


# --------------------------------------------------------------------------------------------
# The rounds


def run_side(
    side: Side,
    command: SideCommand,
    request: ParityRequest,
    runner: Runner,
    *,
    case: Case,
    threads: int,
    session: Path | None = None,
) -> SideRun:
    """One process of one side; the kit's is read from ``session``, the folder its ``dlperf
    run`` wrote."""
    load = os.getloadavg()[0]
    result = _finished(runner(command, request.timeout_s))
    if result.code != 0:
        raise ParityError(
            f"the {side} side exited with {result.code}: {' '.join(command.argv)}\n"
            + _tail(result.err or result.out)
        )
    if side == "bare" or session is None:
        return read_bare(result.out, load)
    run = read_kit(session, case, request, load)
    window = kit_window(session, case, request)
    cost, benchmark_cpu_s = driver_cost(result.cpu, window)
    share = benchmark_cpu_s / ((window[1] - window[0]) * threads) if benchmark_cpu_s else 0.0
    return run.model_copy(update={"driver": cost, "cpu_share": max(0.0, share)})


def run_parity(
    request: ParityRequest,
    *,
    runner: Runner = run_process,
    progress: Callable[[str], None] = lambda _line: None,
) -> ParityResult:
    request = prepare(request)
    case, profile = plan_case(request)
    header = probe_header(request, runner)
    handed = handed_options(header, request.model)
    check_bare_options(request, handed, runner)
    sides = commands(request, handed)
    threads = int(handed.get("num_threads") or request.cpu_threads)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = Path(request.results) / f"parity-{stamp}-{case.framework}-{case.precision}"
    progress(
        f"case {case.id} (profile {profile}); the bare loop gets {len(handed)} options from the "
        f"kit's header; sessions in {results}"
    )
    pairs: list[ParityPair] = []
    for number in range(1, request.rounds + 1):
        order: Sequence[Side] = ("bare", "kit") if number % 2 else ("kit", "bare")
        session = f"{KIT_SESSION_PREFIX}{number:02d}"
        kit = replace(sides["driver"], argv=driver_argv(request, case, results, session))
        commands_of = {"bare": sides["bare"], "kit": kit}
        runs = {
            side: run_side(
                side,
                commands_of[side],
                request,
                runner,
                case=case,
                threads=threads,
                session=results / session if side == "kit" else None,
            )  # fmt: skip
            for side in order
        }
        check_same_work(runs["bare"], runs["kit"])
        pair = ParityPair(round=number, bare=runs["bare"], kit=runs["kit"], first=order[0])
        pairs.append(pair)
        driver = pair.kit.driver
        progress(
            f"round {number}/{request.rounds}: bare {pair.bare.throughput:.3f}, "
            f"kit {pair.kit.throughput:.3f} samples/s, ratio {pair.ratio:.3f} "
            f"(load {pair.bare.load_1min:.2f}/{pair.kit.load_1min:.2f}, CPU share "
            f"{pair.bare.cpu_share:.2f}/{pair.kit.cpu_share:.2f}, driver "
            f"{_maybe(driver.ms_per_s if driver else None, '.1f')} ms/s)"
        )
    return ParityResult(
        framework=request.framework,
        model=request.model,
        batch_size=request.batch_size,
        precision=request.precision,
        options=dict(request.options),
        threads=threads,
        warmup_steps=request.warmup_steps,
        measured_steps=request.measured_steps,
        machine=machine_description(),
        pairs=pairs,
        variant=case.variant,
        profile=profile,
        case_id=case.id,
        handed=handed,
        kit_command=driver_argv(request, case, results, f"{KIT_SESSION_PREFIX}01"),
        bare_command=sides["bare"].argv,
        python=sides["bare"].argv[0],
    )


def variant_label(result: ParityResult) -> str:
    options = ", ".join(f"{k}={option_text(v)}" for k, v in sorted(result.options.items()))
    variant = "" if result.variant == "default" else f" [{result.variant}]"
    return result.precision + variant + (f" ({options})" if options else "")


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
            _maybe(pair.kit.driver.ms_per_s if pair.kit.driver else None, ".1f"),
        ]
        for pair in result.pairs
    ]
    headers = ["round", "first", "bare samples/s", "kit samples/s", "kit/bare", "load bare/kit",
               "CPU share bare/kit", "kit/bare per CPU share",
               "kit driver CPU ms/s"]  # fmt: skip
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
    if result.handed:
        lines.append(
            f"both sides ran the same {len(result.handed)} options of the kit's header "
            f"(case {result.case_id}, profile {result.profile})"
        )
    return "\n".join(lines)


def _maybe(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)
