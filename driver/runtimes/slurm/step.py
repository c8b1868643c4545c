"""One repeat as one ``srun`` job step: started, watched, stopped, and its verdict read.

Each node's command appends its output to ``node<i>.log`` in the repeat folder itself (not
through srun's stdio, which would split long lines; see ``render.step_script``); srun's own
messages go to ``srun.log``, where the per-task exits are read from. Faults are verdicts: a
task's exit (86: out of memory), a node Slurm sees down or not responding, the job cancelled
from outside or at its time limit, the repeat's timeout.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from driver.bench.protocol import EXIT_OOM
from driver.model.results import SRUN_LOG
from driver.runtimes.base import Verdict
from driver.runtimes.plan import NodeCommand
from driver.runtimes.slurm import client
from driver.runtimes.slurm.job import Allocation

POLL_S = 0.05
CHECK_S = 2.0  # how often the job and its nodes are asked about during a step
STOP_GRACE_S = 15.0  # srun's own step cancel (SIGTERM -> tasks killed) before scancel
_TASK_EXIT = re.compile(r"srun: error: (\S+): tasks? ([\d,\-]+): Exited with exit code (\d+)")
_TASK_SIGNAL = re.compile(r"srun: error: (\S+): tasks? ([\d,\-]+): ([A-Z][\w ]*)$")


def _task_ids(text: str) -> list[int]:
    ids: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        ids += list(range(int(first), int(last or first) + 1))
    return ids


@dataclass
class Step:
    """One repeat's job step while it runs."""

    process: subprocess.Popen
    nodes: list[str]
    tasks_per_node: int
    logs: list[Path]
    srun_log: Path
    first_output_at: float | None = None  # when a node's log first grew

    @classmethod
    def start(
        cls,
        argv: list[str],
        commands: list[NodeCommand],
        repeat_dir: Path,
        tasks_per_node: int,
        inside_allocation: bool,
    ) -> Step:
        logs = [repeat_dir / f"node{i}.log" for i in range(len(commands))]
        for log in logs:
            log.unlink(missing_ok=True)  # the tasks append
        env = dict(os.environ)
        if not inside_allocation:
            # srun --jobid from outside: nothing of another job may leak into the step.
            env = {k: v for k, v in env.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
        srun_log = repeat_dir / SRUN_LOG
        with srun_log.open("wb") as own:  # srun's own messages (task exits, cancels)
            process = subprocess.Popen(
                argv,
                stdout=own,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # Ctrl-C reaches the kit, which stops the step itself
            )
        nodes = [c.node for c in commands]
        return cls(process, nodes, tasks_per_node, logs, srun_log)

    def watch(self, allocation: Allocation, timeout_s: float) -> tuple[Verdict, str]:
        deadline = time.monotonic() + timeout_s
        next_check = time.monotonic() + CHECK_S
        while self.process.poll() is None:
            if self.first_output_at is None and any(
                log.exists() and log.stat().st_size for log in self.logs
            ):
                self.first_output_at = time.time()
            if time.monotonic() > deadline:
                return Verdict.TIMEOUT, f"ran past the timeout of {timeout_s:.0f} s"
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + CHECK_S
                found = job_or_node_fault(allocation, self.nodes)
                if found is not None:
                    return found
            time.sleep(POLL_S)
        return Verdict.OK, ""  # the exit code is read in conclude

    def stop(self, allocation: Allocation | None) -> None:
        """srun's own cancel (SIGTERM: the step's tasks are killed on every node), then scancel
        of the step and SIGKILL if it does not end."""
        process = self.process
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                if allocation is not None:
                    _scancel_steps(allocation)
                process.kill()
                process.wait(timeout=30)

    def conclude(
        self,
        allocation: Allocation | None,
        verdict: Verdict,
        detail: str,
        inside_allocation: bool,
    ) -> tuple[dict[int, int | None], Verdict, str]:
        """Per-node exit codes from srun's messages, and the verdict they (or the job) give."""
        srun_log = self.srun_log
        messages = srun_log.read_text(errors="replace") if srun_log.exists() else ""
        failures: list[tuple[int, str, int | None]] = []  # node index, what, exit code
        for line in messages.splitlines():
            exited = _TASK_EXIT.search(line)
            if exited:
                for task in _task_ids(exited.group(2)):
                    node = task // self.tasks_per_node
                    code = int(exited.group(3))
                    failures.append((node, f"exit {code}", code))
                continue
            signalled = _TASK_SIGNAL.search(line)
            if signalled:
                for task in _task_ids(signalled.group(2)):
                    failures.append((task // self.tasks_per_node, signalled.group(3).lower(), None))
        rc = self.process.returncode
        codes: dict[int, int | None] = dict.fromkeys(range(len(self.logs)), 0 if rc == 0 else None)
        for node, _what, code in failures:
            if code is not None and codes.get(node) in (None, 0):
                codes[node] = code
        if verdict != Verdict.OK:
            return codes, verdict, detail
        if rc == 0:
            return codes, Verdict.OK, ""
        if allocation is not None:
            found = job_or_node_fault(allocation, self.nodes)
            if found is None and not inside_allocation:
                # The job's state can lag srun's exit by a moment (cancel, node failure).
                time.sleep(1.0)
                found = job_or_node_fault(allocation, self.nodes)
            if found is not None:
                return codes, found[0], found[1]
        first = next((f for f in failures if f[2] not in (None, 0)), None) or (
            failures[0] if failures else None
        )
        if first is None:
            return codes, Verdict.FAILED, f"srun exit {rc} (see srun.log)"
        node, what, code = first
        where = f"node {self.nodes[node] if node < len(self.nodes) else node}"
        said = [line.split("dlperf-slurm: ", 1)[1] for line in messages.splitlines()
                if "dlperf-slurm: " in line]  # fmt: skip
        if said:  # the step script's own reason (outside the OCI bundle)
            return codes, Verdict.FAILED, f"{where}: {what}: {said[0]}"
        if code == EXIT_OOM:
            return codes, Verdict.OOM, f"{where}: out of memory (exit {EXIT_OOM})"
        return codes, Verdict.FAILED, f"{where}: {what}"


def job_or_node_fault(allocation: Allocation, nodes: list[str]) -> tuple[Verdict, str] | None:
    """What Slurm says ended the step from outside it (its job, or one of its nodes)."""
    try:
        info = client.show_job(allocation.job_id)
        down = client.down_nodes(nodes)
    except client.SlurmError:
        return None  # slurmctld busy: the next check, or srun's own exit, tells
    if info.state == "TIMEOUT":
        return Verdict.TIMEOUT, (
            f"Slurm job {allocation.job_id} reached its time limit ({info.time_limit}; "
            "slurm.time_limit)"
        )
    if info.state == "NODE_FAIL" or down:
        where = ", ".join(f"{n} {s}" for n, s in down.items()) or info.reason
        return Verdict.NODE_LOST, f"Slurm job {allocation.job_id}: node down ({where})"
    if info.state in ("CANCELLED", "PREEMPTED", "DEADLINE"):
        return Verdict.INTERRUPTED, (
            f"Slurm job {allocation.job_id} was {info.state.lower()} from outside the kit"
        )
    if info.ended:
        return Verdict.FAILED, f"Slurm job {allocation.job_id} ended: {info.state or 'gone'}"
    return None


def _scancel_steps(allocation: Allocation) -> None:
    try:
        out = client.slurm("squeue", "--noheader", "--steps", f"--jobs={allocation.job_id}",
                           "--format=%i %j")  # fmt: skip
    except client.SlurmError:
        return
    for line in out.splitlines():
        step_id, _, name = line.strip().partition(" ")
        if name.startswith("dlperf-") and name != "dlperf-container":
            try:
                client.slurm("scancel", "--signal=KILL", step_id)
            except client.SlurmError:
                pass
