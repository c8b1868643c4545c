"""The local runtime: every node's command as a subprocess of this host.

With more than one node in a case, each "node" is one more launcher on this host talking over
127.0.0.1 (a real multi-node rendezvous, on one machine). Each node's command runs in its own
process group so that a timeout, a failure or Ctrl-C stops every process it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from driver.frameworks.base import REPO_ROOT, Framework
from driver.registry import RUNTIMES
from driver.runtimes.base import (
    NodeCommand,
    NodeOutcome,
    RepeatOutcome,
    Verdict,
    command_line,
)

if TYPE_CHECKING:
    from driver.core.plan import RepeatPlan

EXIT_OOM = 86  # the benchmark scripts' exit code for out-of-memory
POLL_S = 0.05
GRACE_S = 5.0


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


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM the process group, then SIGKILL what is left after a grace period."""
    if process.poll() is not None:
        try:  # children may outlive the leader: sweep the group anyway
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, GRACE_S)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_process_group(
    commands: list[NodeCommand],
    repeat_dir: Path,
    timeout_s: float,
    argv_for: Callable[[NodeCommand], list[str]] = lambda command: command.argv,
    telemetry: bool = False,
) -> RepeatOutcome:
    """Start every command in its own process group, log each to node<i>.log, wait for all.

    Shared by every runtime whose node commands are local processes (the local runtime runs the
    launcher itself; the SSH runtimes run ``ssh``/``docker`` clients here). ``telemetry``:
    sample each command's process tree (and this host's GPUs) into telemetry-node<i>.jsonl
    (``driver.telemetry``); only meaningful where the commands are the benchmark itself.
    """
    started = time.time()
    processes: list[tuple[NodeCommand, subprocess.Popen, Path]] = []
    handles = []
    sampler = None
    telemetry_facts: dict | None = None
    try:
        for index, command in enumerate(commands):
            log_path = repeat_dir / f"node{index}.log"
            handle = log_path.open("wb")
            handles.append(handle)
            process = subprocess.Popen(
                argv_for(command),
                cwd=command.workdir or REPO_ROOT,
                env=process_environment(command.env),
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            processes.append((command, process, log_path))
        if telemetry:
            from driver.telemetry import start_for_processes

            sampler = start_for_processes(repeat_dir, [p.pid for _, p, _ in processes])
        verdict, detail = Verdict.OK, ""
        deadline = time.monotonic() + timeout_s
        while any(p.poll() is None for _, p, _ in processes):
            failed = [(c, p) for c, p, _ in processes if p.poll() not in (None, 0)]
            if failed:
                command, process = failed[0]
                verdict = exit_verdict(process.returncode)
                detail = f"node {command.node}: {describe_exit(process.returncode)}"
                break
            if time.monotonic() > deadline:
                verdict, detail = Verdict.TIMEOUT, f"ran past the timeout of {timeout_s:.0f} s"
                break
            time.sleep(POLL_S)
        else:
            failed = [(c, p) for c, p, _ in processes if p.returncode != 0]
            if failed:
                command, process = failed[0]
                verdict = exit_verdict(process.returncode)
                detail = f"node {command.node}: {describe_exit(process.returncode)}"
    except KeyboardInterrupt:
        for _, process, _ in processes:
            stop_group(process)
        for handle in handles:
            handle.close()
        raise
    finally:
        for _, process, _ in processes:
            stop_group(process)
        for handle in handles:
            handle.close()
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


@RUNTIMES.register("local")
class LocalRuntime:
    name = "local"

    def __init__(self, python_override: str | None = None) -> None:
        self.python_override = python_override

    def node_addresses(self, count: int) -> list[tuple[str, str]]:
        return [(f"local{i}", "127.0.0.1") for i in range(count)]

    def python(self, framework: Framework) -> str:
        if self.python_override:
            return self.python_override
        if framework.name == "calibration":
            return sys.executable
        from driver.core.envs import venv_python

        return str(venv_python(framework))

    def environment(self, framework: Framework) -> dict[str, str]:
        """Extra environment of the framework's venv (LD_LIBRARY_PATH from venv_library_globs)."""
        if self.python_override or framework.name == "calibration":
            return {}
        from driver.core.envs import venv_environment

        return venv_environment(framework)

    def workdir(self) -> str:
        return str(REPO_ROOT)

    def describe(self, plan: RepeatPlan) -> list[str]:
        return [command_line(command) for command in plan.commands]

    def run(self, plan: RepeatPlan) -> RepeatOutcome:
        return run_process_group(
            list(plan.commands), plan.repeat_dir, plan.timeout_s, telemetry=not plan.probe
        )

    def clean_leftovers(self, session_root: Path) -> list[str]:
        return []
