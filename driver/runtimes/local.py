"""The local runtime: every node's command as a subprocess of this host.

With more than one node in a case, each "node" is one more launcher on this host talking over
127.0.0.1 (a real multi-node rendezvous, on one machine). Each node's command runs in its own
process group so that a timeout, a failure or Ctrl-C stops every process it started, and gets
SIGTERM when the driver dies, even by ``kill -9`` (``driver.bench.supervisor``).

While a node command runs, ``<session>/.running/<pid>`` names it, and its environment carries
the session (``DLPERF_LOCAL_SESSION``); a run killed too hard to clean up after itself leaves
both, and :func:`clean_local_leftovers` ends what is left when the session is resumed.

What each node's process is belongs to the run's container platform (``--container``,
``driver.runtimes.local_platform``): with none (the default) the command itself with the kit's
venvs; with docker or podman the engine's attached client running it in the framework's
image, labelled with the session so that a resume removes a container a killed run left.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from driver.bench.protocol import EXIT_OOM
from driver.bench.supervisor import GRACE_S, POLL_S, signal_group, start, stop
from driver.files import write_text
from driver.frameworks.base import REPO_ROOT, Framework
from driver.frameworks.envs import venv_environment, venv_python
from driver.runtimes.base import (
    RUNTIMES,
    Failure,
    NodeOutcome,
    RepeatOutcome,
    Runtime,
    RuntimeConfigError,
    Verdict,
    ctrl_c_held,
    name_slug,
    session_label,
)
from driver.runtimes.containers import Context, platform_for
from driver.runtimes.local_platform import COMMAND_LINE, SETTING, HostRun, LocalPlatform
from driver.runtimes.plan import NodeCommand, command_line

if TYPE_CHECKING:
    from driver.model.case import Case
    from driver.runtimes.plan import RepeatPlan

# Frameworks whose "devices" are CPU processes even where there are GPUs.
CPU_ONLY_FRAMEWORKS = frozenset({"calibration"})


def count_gpus() -> int:
    """This machine's NVIDIA GPUs: NVML where the driver's library loads, else the lines of
    ``nvidia-smi -L``; 0 without either (a CPU machine)."""
    from driver.model.hardware import gpu_names

    names = gpu_names()
    if names:
        return len(names)
    try:
        listing = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if listing.returncode != 0:
        return 0
    return sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))


def gpus_needed(case: Case) -> int:
    """The GPUs ``case`` takes on this one host (its every "node" runs here); 0 for CPU-only."""
    if case.framework in CPU_ONLY_FRAMEWORKS:
        return 0
    return case.topology.world_size


def fit_to_gpus(
    cases: list[Case], gpus: int, topologies_given: bool
) -> tuple[list[Case], list[str]]:
    """The cases this machine's ``gpus`` can run, and what was left out, one line each.

    Without GPUs every case runs (a "device" is a CPU process). A case that needs more GPUs
    than there are is an error (RuntimeConfigError) when the user named its topology; when the
    matrix chose the topologies, the case is left out and said so."""
    if gpus <= 0:
        return list(cases), []
    kept, left_out = [], []
    for case in cases:
        needed = gpus_needed(case)
        if needed <= gpus:
            kept.append(case)
            continue
        if topologies_given:
            raise RuntimeConfigError(
                f"case {case.id} needs {needed} GPUs and this machine has {gpus}: run it on a "
                f"cluster (RUNTIME=ssh or slurm), or here with NODES=1 GPUS={gpus} "
                f"(--nodes 1 --gpus {gpus})"
            )
        left_out.append(f"{case.id}: needs {needed} GPUs, this machine has {gpus}")
    return kept, left_out


SESSION_VAR = "DLPERF_LOCAL_SESSION"  # in every node command's environment: its session
RUNNING_DIR = ".running"  # <session>/.running/<pid>: a node command of this session runs
WAKE_S = 5.0  # the longest the wait for a node command's exit sleeps before it looks again


def exit_verdict(code: int | None) -> Verdict:
    if code == 0:
        return Verdict.OK
    if code == EXIT_OOM:
        return Verdict.OOM
    return Verdict.FAILED


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else -code
        return f"killed by {name}" + (" (out of memory?)" if code == -signal.SIGKILL else "")
    if code == EXIT_OOM:
        return "out of memory (exit 86)"
    return f"exit {code}"


def process_environment(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def session_marker(session_root: Path) -> str:
    return str(Path(session_root).resolve())


def process_environ(pid: int) -> dict[str, str]:
    """``/proc/<pid>/environ`` as a dict; empty when the process is gone or not ours to read."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (entry.decode(errors="replace").partition("=") for entry in raw.split(b"\0") if entry)
    return {key: value for key, _, value in pairs}


def process_group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def session_processes(session_root: Path) -> list[int]:
    """Processes (other than this one) whose environment names this session."""
    marker, found = session_marker(session_root), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            if process_environ(int(entry.name)).get(SESSION_VAR) == marker:
                found.append(int(entry.name))
    return found


def clean_local_leftovers(session_root: Path) -> list[str]:
    """End what an earlier run of this session left running, and say what.

    A pid file whose process group still has members carrying this session's marker is a
    leftover: its group gets SIGTERM, then SIGKILL after the grace period. Marked processes
    that left their group (launchers that start workers in new sessions) are ended too. Pid
    files of processes gone (or of a pid the system reused) are removed.
    """
    running = Path(session_root) / RUNNING_DIR
    pid_files = sorted(running.iterdir()) if running.is_dir() else []
    messages: list[str] = []
    marked = set(session_processes(session_root))
    groups: dict[int, str] = {}
    for pid_file in pid_files:
        if pid_file.name.isdigit():
            pid = int(pid_file.name)
            members = {p for p in marked if process_group(p) == pid}
            if members:
                groups[pid] = _started(pid_file)
                marked -= members
        pid_file.unlink(missing_ok=True)
    for pgid, started in groups.items():
        messages.append(f"ended leftover pid {pgid} of this session (started {started})")
    for pid in sorted(marked):
        messages.append(f"ended leftover pid {pid} of this session (outside its process group)")
    _end([*groups], sorted(marked))
    return messages


def _started(pid_file: Path) -> str:
    try:
        facts = json.loads(pid_file.read_text())
        return f"{facts['started']}: {facts['command']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "at an unknown time"


def is_running(pid: int) -> bool:
    """The process exists and is not a zombie (a zombie has exited; only its parent's wait is
    missing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _end(pgids: list[int], pids: list[int]) -> None:
    """SIGTERM the groups and the single processes, SIGKILL what is left after the grace."""
    members = [p for p in Path("/proc").iterdir() if p.name.isdigit()]
    watched = {*pids, *(int(p.name) for p in members if process_group(int(p.name)) in pgids)}

    def send(sig: int) -> None:
        for pgid in pgids:
            signal_group(pgid, sig)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    send(signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and any(is_running(pid) for pid in watched):
        time.sleep(POLL_S)
    send(signal.SIGKILL)


def _write_pid_file(session_root: Path, process: subprocess.Popen, command: NodeCommand) -> Path:
    running = Path(session_root) / RUNNING_DIR
    running.mkdir(parents=True, exist_ok=True)
    pid_file = running / str(process.pid)
    facts = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "node": command.node,
        "command": command_line(command)[:300],
    }
    write_text(pid_file, json.dumps(facts))
    return pid_file


def wait_for_an_exit(processes: list[subprocess.Popen], timeout_s: float) -> None:
    """Sleep until one of ``processes`` exits or ``timeout_s`` passes (at most WAKE_S).

    On pidfds (Linux 5.3+) the driver does not wake while the benchmark runs: every wake-up of
    a driver thread takes a core from a benchmark that uses all of them (polling every 50 ms
    cost as much CPU as the telemetry sampler). Elsewhere, one poll interval.
    """
    try:
        handles = [os.pidfd_open(process.pid) for process in processes]
    except (AttributeError, OSError):
        time.sleep(POLL_S)
        return
    try:
        select.select(handles, [], [], max(0.0, min(timeout_s, WAKE_S)))
    finally:
        for handle in handles:
            os.close(handle)


def run_process_group(
    commands: list[NodeCommand],
    repeat_dir: Path,
    timeout_s: float,
    *,
    session_root: Path,
    telemetry: bool = False,
) -> RepeatOutcome:
    """Start every command in its own process group, log each to node<i>.log, wait for all.

    ``telemetry``: sample each command's process tree (and this host's GPUs) into
    telemetry-node<i>.jsonl (``driver.telemetry``). Nothing is left running afterwards, also
    when interrupted (the interrupt is re-raised after the cleanup).
    """
    started = time.time()
    processes: list[tuple[NodeCommand, subprocess.Popen, Path]] = []
    pid_files: list[Path] = []
    handles = []
    sampler = None
    telemetry_facts: dict | None = None
    marker = {SESSION_VAR: session_marker(session_root)}
    try:
        for index, command in enumerate(commands):
            log_path = repeat_dir / f"node{index}.log"
            handle = log_path.open("wb")
            handles.append(handle)
            process = start(
                command.argv,
                new_group=True,
                parent_death_signal=signal.SIGTERM,  # launchers stop their ranks on SIGTERM
                cwd=command.workdir or REPO_ROOT,
                env=process_environment({**command.env, **marker}),
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            processes.append((command, process, log_path))
            pid_files.append(_write_pid_file(session_root, process, command))
        if telemetry:
            from driver.telemetry import start_for_processes

            sampler = start_for_processes(repeat_dir, [p.pid for _, p, _ in processes])
        verdict, detail = Verdict.OK, ""
        deadline = time.monotonic() + timeout_s
        while True:  # until a node fails, every node has exited, or the timeout
            failed = [(c, p) for c, p, _ in processes if p.poll() not in (None, 0)]
            if failed:
                command, process = failed[0]
                verdict = exit_verdict(process.returncode)
                detail = f"node {command.node}: {describe_exit(process.returncode)}"
                break
            running = [p for _, p, _ in processes if p.poll() is None]
            if not running:
                break
            if time.monotonic() > deadline:
                verdict, detail = Verdict.TIMEOUT, f"ran past the timeout of {timeout_s:.0f} s"
                break
            wait_for_an_exit(running, deadline - time.monotonic())
    finally:  # also on KeyboardInterrupt, which then goes on up
        stop([p for _, p, _ in processes], groups=True)
        for handle in handles:
            handle.close()
        for pid_file in pid_files:
            pid_file.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # empty once no node command of it runs
            (Path(session_root) / RUNNING_DIR).rmdir()
        if sampler is not None:
            telemetry_facts = sampler.stop()
    return RepeatOutcome(
        verdict=verdict,
        nodes=[
            NodeOutcome(node=c.node, exit_code=p.returncode, log_path=path)
            for c, p, path in processes
        ],
        started_at=started,
        finished_at=time.time(),
        detail=detail,
        extra={"telemetry": telemetry_facts} if telemetry_facts else {},
    )


_CHECKED_PYTHONS: dict[tuple[str, tuple[str, ...]], str] = {}


def check_framework_python(python: str, frameworks: list[Framework]) -> str:
    """The interpreter ``python`` (a path, or a name on PATH) as an absolute path, once it has
    started and imported every framework's package; else a RuntimeConfigError with the fix.
    This is how a machine's own framework install (a GPU machine's ``python3`` with its CUDA
    build of torch) stands in for ``.venvs/<framework>``."""
    import shutil

    found = shutil.which(python)
    if found is None:
        raise RuntimeConfigError(
            f"--python {python}: no such executable; give the path of an interpreter that has "
            "the framework installed (e.g. --python /usr/bin/python3)"
        )
    modules = sorted({f.module for f in frameworks if f.module})
    checked = (found, tuple(modules))
    if checked in _CHECKED_PYTHONS:  # one probe per interpreter and frameworks in a process
        return _CHECKED_PYTHONS[checked]
    probe = "import importlib, sys\nfor name in sys.argv[1:]: importlib.import_module(name)"
    try:
        result = subprocess.run(
            [found, "-c", probe, *modules], capture_output=True, text=True, timeout=300
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise RuntimeConfigError(f"--python {found}: does not start ({error})") from None
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeConfigError(
            f"--python {found}: cannot import {', '.join(modules) or 'anything'} ({last}); "
            "install the framework into that interpreter, or leave --python out to use the "
            "kit's own environments (.venvs/<framework>)"
        )
    _CHECKED_PYTHONS[checked] = str(Path(found).absolute())
    return _CHECKED_PYTHONS[checked]


def local_platform(container: str, build_options: Any = None) -> LocalPlatform:
    """The platform ``--container`` names for a run on this host; a one-line RuntimeConfigError
    naming the flag and the platforms that run here otherwise (platform_for's)."""
    context = Context(COMMAND_LINE, build_options=build_options)
    return platform_for(LocalPlatform, container, context, SETTING)


@RUNTIMES.register("local")
class LocalRuntime(Runtime):
    name = "local"

    def __init__(
        self,
        python_override: str | None = None,
        gpus: int | None = None,
        *,
        container: str = "none",
        build_options: Any = None,
    ) -> None:
        """``container``: the platform each node's command runs in (``--container``);
        ``build_options``: how an engine's platform resolves the framework's image."""
        self.python_override = python_override
        self._gpus = gpus  # None: counted on first use (count_gpus)
        self.platform = local_platform(container, build_options)
        if python_override and self.platform.image_python:
            raise RuntimeConfigError(
                f"--python {python_override} runs the scripts with an interpreter of this host; "
                f"--container {container} runs them with its image's: give one of the two"
            )
        # In an image the kit's venvs are neither used nor made (the session's ensure_env).
        self.runs_here = self.platform.image_python is None
        # (framework, source, image choice) -> the image its cases run in
        self._images: dict[tuple[str, str, str], str | None] = {}

    def gpu_count(self) -> int:
        """This host's GPUs (given at construction, else counted once)."""
        if self._gpus is None:
            self._gpus = count_gpus()
        return self._gpus

    def has_gpu(self) -> bool:
        # A count that fails (no driver, a broken nvidia-smi) is a host without a GPU to use.
        with contextlib.suppress(Exception):
            return bool(self.gpu_count())
        return False

    def fit_cases(self, cases: list[Case], topologies_given: bool) -> tuple[list[Case], list[str]]:
        """The cases this host's GPUs can run and one line per case left out (fit_to_gpus);
        in an image, a RuntimeConfigError for an upstream source that has none."""
        if self.platform.image_python:
            from driver.sources.base import SOURCES

            for case in cases:
                if case.source == "dlperf":
                    continue
                if not SOURCES.get(case.source)().image:
                    raise RuntimeConfigError(
                        f"source {case.source!r} runs from its environment .venvs/{case.source} "
                        f"beside the kit's (no image), which a {self.platform.name} container "
                        "does not hold: run it without --container"
                    )
                if not self.platform.runs_sources:
                    raise RuntimeConfigError(
                        f"source {case.source!r} runs in its own image, which the "
                        f"{self.platform.name} platform does not run: --container docker or "
                        "podman runs it"
                    )
        return fit_to_gpus(cases, self.gpu_count(), topologies_given)

    def node_addresses(self, count: int) -> list[tuple[str, str]]:
        return [(f"local{i}", "127.0.0.1") for i in range(count)]

    def python(self, framework: Framework) -> str:
        if self.python_override:
            return self.python_override
        in_image = self.platform.python(framework.name)
        if in_image:
            return in_image
        if framework.name == "calibration":
            return sys.executable
        return str(venv_python(framework))

    def environment(self, framework: Framework) -> dict[str, str]:
        """Extra environment of the framework's venv (LD_LIBRARY_PATH from venv_library_globs);
        none in an image (the venv's libraries are this host's)."""
        if self.python_override or framework.name == "calibration" or self.platform.image_python:
            return {}
        return venv_environment(framework)

    def workdir(self) -> str:
        return self.platform.workdir(str(REPO_ROOT))

    def describe(self, plan: RepeatPlan) -> list[str]:
        return [command_line(command) for command, _run in self.host_commands(plan, planned=True)]

    def host_commands(
        self, plan: RepeatPlan, *, planned: bool = False
    ) -> list[tuple[NodeCommand, HostRun]]:
        """The plan's node commands as this host starts them, each with what it runs with;
        ``planned``: the image's tag, asking no engine (a dry run). Raises Failure where the
        image is not here."""
        image = self.image_for(plan, planned=planned)
        root = str(Path(plan.session_root).resolve())
        data = plan.case.data_dir
        mounts = (
            f"{REPO_ROOT}:{self.workdir()}:ro",
            f"{root}:{root}",
            *([f"{data}:{data}:ro"] if data and os.path.isabs(data) else []),
        )
        label = session_label(plan.session_root)
        gpus = gpus_needed(plan.case) > 0 and self.has_gpu()
        run_id = uuid.uuid4().hex[:8]  # a fresh name per repeat, beside a leftover of the last
        commands = []
        for command in plan.commands:
            name = name_slug(f"dlperf-{label}-{command.node}-{run_id}", 120)
            run = HostRun(name, label, image, mounts, gpus)
            commands.append((self.platform.host_command(command, run), run))
        return commands

    def image_for(self, plan: RepeatPlan, *, planned: bool = False) -> str | None:
        """The image the plan's case runs in here (None: none): the framework's for this host's
        variant, or an upstream source's own; ``planned``: its tag (a dry run)."""
        case, variant = plan.case, "gpu" if self.has_gpu() else "cpu"
        key = (case.framework, case.source, case.image)
        if key in self._images and not planned:
            return self._images[key]
        image = self.platform.local_image(
            case.framework, variant, case.source, case.image, planned=planned
        )
        if not planned:
            self._images[key] = image
        return image

    def run(self, plan: RepeatPlan) -> RepeatOutcome:
        try:
            commands = self.host_commands(plan)
        except Failure as failure:  # e.g. the framework's image is not built here
            now = time.time()
            return RepeatOutcome(failure.verdict, [], now, now, failure.detail)
        try:
            outcome = run_process_group(
                [command for command, _run in commands],
                plan.repeat_dir,
                plan.timeout_s,
                session_root=plan.session_root,
                telemetry=not plan.probe and self.platform.tree_on_host,
            )
        finally:  # also on Ctrl-C: no container outlives the repeat
            with ctrl_c_held():
                self.platform.remove_runs([run.name for _command, run in commands])
        images = {command.node: run.image for command, run in commands if run.image}
        if images:  # the platform and the image by its digest, as over SSH
            outcome.extra.update(container=self.platform.name, images=images)
        return outcome

    def clean_leftovers(self, session_root: Path) -> list[str]:
        ended = clean_local_leftovers(session_root)  # processes first: an engine's clients
        return ended + self.platform.remove_leftovers(session_label(session_root))
