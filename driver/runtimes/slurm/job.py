"""The session's job: the allocation every repeat's ``srun`` step runs in.

**Inside an allocation** (``SLURM_JOB_ID`` set: ``salloc``, or a batch script running the kit)
that job is the session's. **Outside**, one job is submitted per session (``sbatch`` of a script
that only holds the nodes) when the first repeat needs nodes: on a shared cluster every job
waits in the queue, so per-case jobs would add a queue wait to every case, and a pyxis
container is kept per job, so one job lets every repeat reuse the container each node made
once. A case that needs more nodes than the job holds cancels it and submits a bigger one;
smaller cases run on its first nodes. The job is cancelled when the runtime closes, and
:meth:`SessionJob.leftovers` cancels what a killed earlier run of the session left (the job's
name carries the session's label). Its time limit bounds it in every other case.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from driver.cluster.slurm import SlurmConfig, time_limit_seconds
from driver.files import write_text
from driver.runtimes.base import Failure, Verdict, session_label
from driver.runtimes.slurm import client
from driver.runtimes.slurm.render import HOLDER_SCRIPT, sbatch_argv

# How long a cancelled job may take to end (its step's processes signalled, its epilog run)
# before the session is sealed anyway, and how often Slurm is asked meanwhile.
END_WAIT_S = 30.0
END_POLL_S = 0.5


def job_name(session_root: Path) -> str:
    return f"dlperf-{session_label(session_root)}"


@dataclass
class Allocation:
    job_id: str
    nodes: list[str]  # hostnames, in Slurm's order (the first is the head)
    addresses: list[str]  # NodeAddr of each
    partition: str
    cpus_per_node: int
    owned: bool  # submitted by this runtime, which cancels it
    submitted_at: float = 0.0
    running_at: float = 0.0
    containers: set[str] = field(default_factory=set)  # pyxis containers made in this job


class SessionJob:
    """The job the session's steps run in, from its submission (or the enclosing one) to its
    cancellation."""

    def __init__(self, printer: Callable[[str], None]) -> None:
        self.printer = printer
        self.allocation: Allocation | None = None
        self._version: str | None = None

    @property
    def inside_allocation(self) -> bool:
        return bool(os.environ.get("SLURM_JOB_ID"))

    def enclosing(self) -> Allocation:
        job_id = os.environ["SLURM_JOB_ID"]
        info = client.show_job(job_id)
        nodes = client.hostnames(info.nodes or os.environ.get("SLURM_JOB_NODELIST", ""))
        return Allocation(
            job_id=job_id,
            nodes=nodes,
            addresses=[client.node_address(n) for n in nodes],
            partition=info.partition,
            cpus_per_node=info.cpus_per_node,
            owned=False,
        )

    def ensure(
        self,
        count: int,
        session_root: Path,
        config: SlurmConfig,
        needed_s: float | None = None,
    ) -> Allocation:
        """The job to run ``count`` nodes' step in: the enclosing one, the session's, or a new
        one (submitted, and waited for with its queue state printed). ``needed_s``: the step's
        estimate where slurm.split_jobs is on: a session's job with less time left is
        cancelled for a new one, so that no repeat is cut by the time limit."""
        if self.inside_allocation:
            if self.allocation is None:
                self.allocation = self.enclosing()
            if count > len(self.allocation.nodes):
                raise Failure(
                    Verdict.FAILED,
                    f"the case needs {count} nodes; job {self.allocation.job_id} has "
                    f"{len(self.allocation.nodes)}",
                )
            return self.allocation
        held = self.allocation
        if held is not None:
            info = client.show_job(held.job_id)
            left = time_limit_seconds(config.time_limit) - (time.time() - held.running_at)
            short = config.split_jobs and needed_s is not None and needed_s > left
            if info.state == "RUNNING" and count <= len(held.nodes) and not short:
                return held
            if info.state == "RUNNING" and short:
                why = (
                    f"{max(0.0, left) / 60:.1f} min of slurm.time_limit left, the next repeat "
                    f"is estimated at {needed_s / 60:.1f} min (split_jobs): a new job"
                )
            elif info.state == "RUNNING":
                why = f"it has {len(held.nodes)} nodes, the case needs {count}"
            else:
                why = f"it is {info.state or 'gone'}"
            self.cancel(held, why)
        return self._submit(count, session_root, config)

    def _submit(self, count: int, session_root: Path, config: SlurmConfig) -> Allocation:
        name = job_name(session_root)
        out_dir = Path(session_root).absolute() / "slurm"
        out_dir.mkdir(parents=True, exist_ok=True)
        argv = sbatch_argv(config, count, name, str(out_dir / "job-%j.out"))
        write_text(out_dir / "sbatch.txt", shlex.join(argv) + "\n" + HOLDER_SCRIPT)
        submitted = time.time()
        try:
            job_id = client.slurm(*argv, stdin=HOLDER_SCRIPT).strip().split(";")[0]
        except client.SlurmError as error:
            raise Failure(Verdict.FAILED, f"sbatch refused the session's job: {error}") from None
        allocation = Allocation(
            job_id=job_id, nodes=[], addresses=[], partition="", cpus_per_node=0, owned=True,
            submitted_at=submitted,
        )  # fmt: skip
        self.allocation = allocation
        self.printer(f"slurm: submitted job {job_id} ({name}, {count} nodes)")
        self._wait_running(allocation, config.queue_timeout_s)
        return allocation

    def _wait_running(self, allocation: Allocation, queue_timeout_s: float) -> None:
        deadline = time.monotonic() + queue_timeout_s
        last = ""
        while True:
            info = client.show_job(allocation.job_id)
            state = info.state
            if info.reason not in ("", "None"):
                state = f"{state} ({info.reason})"
            if state != last:
                waited = time.time() - allocation.submitted_at
                self.printer(f"slurm: job {allocation.job_id} {state or 'gone'} ({waited:.0f} s)")
                last = state
            if info.state == "RUNNING":
                break
            if info.ended:
                self.allocation = None
                raise Failure(
                    Verdict.FAILED,
                    f"job {allocation.job_id} ended before it ran: {info.state or 'gone'} "
                    f"({info.reason})",
                )
            if time.monotonic() > deadline:
                self.cancel(allocation, "it waited past slurm.queue_timeout_s")
                raise Failure(
                    Verdict.TIMEOUT,
                    f"job {allocation.job_id} still {state} after {queue_timeout_s:.0f}"
                    " s in the queue (slurm.queue_timeout_s); cancelled",
                )
            time.sleep(0.5)
        allocation.running_at = time.time()
        allocation.nodes = client.hostnames(info.nodes)
        allocation.addresses = [client.node_address(n) for n in allocation.nodes]
        allocation.partition = info.partition
        allocation.cpus_per_node = info.cpus_per_node

    def cancel(self, allocation: Allocation, why: str) -> None:
        if not allocation.owned:
            return
        try:
            client.cancel(allocation.job_id)
            self.printer(f"slurm: cancelled job {allocation.job_id} ({why})")
        except client.SlurmError as error:
            self.printer(f"slurm: could not cancel job {allocation.job_id}: {error}")
        if self.allocation is allocation:
            self.allocation = None

    def end(self) -> None:
        """Cancel the session's job and wait until Slurm has ended it, so that what Slurm
        writes as it cancels (the last line of ``slurm/job-<id>.out``, in the session folder)
        is written before the session is sealed, not after (a seal that no longer holds)."""
        held = self.allocation
        if held is None or not held.owned:
            return
        self.cancel(held, "the session's runs are over")
        deadline = time.monotonic() + END_WAIT_S
        while time.monotonic() < deadline:
            try:
                if client.show_job(held.job_id).ended:
                    return
            except client.SlurmError:  # no controller answers: nothing more to wait for
                return
            time.sleep(END_POLL_S)
        self.printer(
            f"slurm: job {held.job_id} has not ended {END_WAIT_S:.0f} s after it was cancelled; "
            "its output may still change after the seal"
        )

    def close(self) -> None:
        """Cancel the session's job (the kit never leaves one in the queue)."""
        if self.allocation is not None and self.allocation.owned:
            self.cancel(self.allocation, "the session's runs are over")

    def leftovers(self, session_root: Path) -> list[str]:
        """Cancel jobs an earlier, killed run of this session left in the queue."""
        if not client.available():
            return []
        done = []
        held = self.allocation.job_id if self.allocation else None
        try:
            for job_id in client.jobs_named(job_name(session_root)):
                if job_id == held:
                    continue
                client.cancel(job_id)
                done.append(f"cancelled leftover Slurm job {job_id} ({job_name(session_root)})")
        except client.SlurmError as error:  # no controller answers: the first repeat will say
            done.append(f"could not look for leftover Slurm jobs: {error}")
        return done

    def facts(self, allocation: Allocation, container: str) -> dict[str, Any]:
        """Provenance of every repeat: the job, its nodes and partition, Slurm's version, the
        container platform, and ``scontrol show job`` as Slurm printed it."""
        if self._version is None:
            self._version = client.version()
        info = client.show_job(allocation.job_id)
        return {
            "job_id": allocation.job_id,
            "job_owned": allocation.owned,
            "nodes": allocation.nodes,
            "node_addresses": allocation.addresses,
            "partition": allocation.partition,
            "version": self._version,
            "container": container,
            "queue_wait_s": round(allocation.running_at - allocation.submitted_at, 3)
            if allocation.owned
            else None,
            "scontrol_show_job": info.raw,
        }
