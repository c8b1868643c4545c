"""A framework-free benchmark whose true throughput is known in advance.

It is an adapter of the same loop as every framework script (``driver.bench.loop``), so
``dlperf selftest`` measures the kit's whole path: launcher, runtime, the benchmark loop, parser
and statistics. Each step ends at a deadline ``t0 + k * step_time`` (``t0``: the first step's
start), so over any window of whole steps the true rate is exactly
``batch_size * world_size / step_time``. Jitter per step does not accumulate: deadlines are
absolute.

What is left is the lateness of a window's two end points (a rank woken late), and the job's
duration is its slowest rank's window, so with many ranks on a small host the latest of them
sets the figure. Two things keep the wake-ups on time, as in a real data-parallel job whose
collectives hold the ranks together: a real barrier (``driver.calibration.barrier``) starts
every rank's clock together, after every rank has started, and lets no rank exit before the
last one has logged its last step; and each rank's deadlines are shifted by its share of a step,
so the ranks never wake at the same instant and queue for the CPU.

The two window ends are the only wake-ups whose lateness counts, and on a busy host (other jobs,
the kit's own driver, 32 ranks on 2 cores) a sleeping rank's wake-up there was 1-7 ms late: 0.2-
0.6% of a 2 s window at 1n32g, and at load 30 every rank's wake-ups stalled 20-70 ms for a
few steps before the window's end. So from the window's start to its end a rank waits at
real-time priority (SCHED_FIFO 1, where permitted: root, CAP_SYS_NICE or an ``rtprio`` limit;
not in a default docker container) with 1 ns timer slack, and stays awake for the last half
millisecond before each of the two window ends, yielding the CPU on every turn to an equal (a
peer rank whose own window end falls then: the barrier's release jitter can put several within
that half millisecond): the window then ends when the emulated device would, whatever else the
host's CPUs run. The warm-up steps sleep at the default priority.

What no priority can hold (a vCPU its hypervisor takes away: 1-4 ms at a window's end on 2-core
VMs) the workload times itself: ``WakeClock`` is its device clock, when its waits at the two
window ends returned, so ``dlperf selftest`` holds the kit to the rate the workload delivered
and prints the host's lateness apart.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from driver.bench.loop import Adapter, DeviceTimer, run_benchmark  # noqa: E402
from driver.bench.protocol import oom_record  # noqa: E402
from driver.bench.supervisor import libc_prctl  # noqa: E402
from driver.calibration.barrier import TcpBarrier  # noqa: E402

CALIBRATION_OPTIONS: dict[str, Any] = {
    "step_time": 0.02,  # seconds per step: the known truth
    # Fault injection for the kit's own tests: a rank that fails or hangs at a given step.
    "fail_at_step": 0,
    "hang_at_step": 0,
    "faulty_rank": 0,
    "oom_above": 0,  # a pretend memory limit (batch size), for the batch=max search; 0: none
    # A slow node for the node scan's tests: on the node the runtime names so (DLPERF_NODE_NAME,
    # set by the SSH runtimes) every step lasts `slowdown` x step_time.
    "slow_node": "",
    "slowdown": 1.0,
}


# The window's two end points (the last warm-up step's end, the last measured step's end) are
# the only wake-ups whose lateness counts: a rank sleeps until this long before them, then
# stays awake until the deadline. Every other step sleeps (32 spinning ranks on 2 cores would
# delay each other); the ranks' staggered deadlines keep few of them awake at once.
BOUNDARY_AWAKE_S = 0.0005
PR_SET_TIMERSLACK = 29  # prctl(2): how late the kernel may fire this process's timers


def tighten_timer_slack() -> None:
    """Ask for 1 ns of timer slack (default 50 us) so sleeps end when asked; harmless where
    prctl is missing (not Linux), which only costs accuracy."""
    prctl = libc_prctl()
    if prctl is not None:
        prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)


def realtime(on: bool) -> bool:
    """Run this process at real-time priority (SCHED_FIFO 1), or back at the default; False
    where it is not permitted (no CAP_SYS_NICE: a container, a user without rtprio), which
    only costs accuracy under load."""
    if not hasattr(os, "sched_setscheduler"):
        return False
    policy, priority = (os.SCHED_FIFO, 1) if on else (os.SCHED_OTHER, 0)
    try:
        os.sched_setscheduler(0, policy, os.sched_param(priority))
    except OSError:
        return False
    return True


def wait_until(deadline: float, awake_s: float = 0.0, share_cpu: bool = False) -> None:
    """Sleep until ``deadline`` (monotonic); ``awake_s``: the last part awake, not asleep.

    ``share_cpu`` (at real-time priority): the awake part yields the CPU on every turn. A
    SCHED_FIFO process is never preempted by its equals, so a peer rank woken on a CPU where
    another is awake would wait out that one's whole awake part (up to ``awake_s`` late: 0.45 ms
    at 4n32g, 0.056% of a 0.8 s window, when the barrier's release jitter had put three ranks'
    window ends within half a millisecond on 2 cores). Yielding lets it run within a context
    switch. Only at real-time priority: there a yield goes to an equal, a waiting rank; at the
    default priority it could hand the CPU to any process for a whole time slice."""
    remaining = deadline - awake_s - time.monotonic()
    while remaining > 0:
        time.sleep(remaining)
        remaining = deadline - awake_s - time.monotonic()
    while time.monotonic() < deadline:
        if share_cpu:
            os.sched_yield()


def rendezvous() -> tuple[str, int]:
    """Rank 0's address and port, as every runtime exports them to every node."""
    address, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT", "")
    if not address or not port.isdigit():
        raise SystemExit(
            "calibration workload: several ranks need MASTER_ADDR and MASTER_PORT (rank 0's "
            "address and a free port) for their barrier; the kit's runtimes export both, so "
            "start it through `dlperf run` or `dlperf selftest`"
        )
    return address, int(port)


class CalibrationAdapter(Adapter):
    framework = "calibration"
    own_options = CALIBRATION_OPTIONS

    def setup(self) -> bool:
        return False

    def build_model(self) -> int:
        limit = int(self.options["oom_above"] or 0)
        if limit and self.args.batch_size > limit:
            print(oom_record(self.run.rank, self.args.batch_size), flush=True)
            sys.exit(1)  # as torchrun reports it: only the record tells it was memory
        self.step_time = float(self.options["step_time"])
        slow_node = str(self.options["slow_node"])
        if slow_node and os.environ.get("DLPERF_NODE_NAME") == slow_node:
            self.step_time *= float(self.options["slowdown"])
        self.steps = 0
        self.woke = 0.0  # when the last step's wait returned (monotonic): WakeClock reads it
        self.window_ends = {self.args.warmup_steps, self.args.total_steps}
        self.awake_s = min(BOUNDARY_AWAKE_S, self.step_time / 2)
        tighten_timer_slack()
        self.realtime = self.realtime_asked = False
        self.start: float | None = None
        self.tcp_barrier: TcpBarrier | None = None
        if self.run.distributed:
            self.tcp_barrier = TcpBarrier(self.run.rank, self.run.world_size, *rendezvous())
        return 0

    def make_batch(self) -> None:
        return None

    def step(self, batch: None) -> float:
        if self.start is None:
            # Rank r's deadlines sit r slots later than rank 0's, a slot being 1/world of a step
            # but at least the time a rank stays awake before a window end: the ranks, started
            # together by the barrier, never wake at the same instant, and at most one is awake
            # before its window end at a time, so none waits for a CPU behind its peers (32
            # ranks on 2 cores). A constant shift: every measured step still lasts exactly
            # step_time on every rank.
            slot = max(self.step_time / self.run.world_size, self.awake_s)
            self.start = time.monotonic() + self.run.rank * slot
        self.steps += 1
        if self.steps >= self.args.warmup_steps and not self.realtime_asked:
            # The window (from the last warm-up step's end to the last measured step's end)
            # stands for a device's steps, which other jobs on the host's CPUs do not delay:
            # its wake-ups run at real-time priority where permitted, back to the default at
            # the closing barrier. A rank is awake ~0.1 ms per step, so its peers and the
            # host's other processes keep the CPUs.
            self.realtime, self.realtime_asked = realtime(True), True
        faulty = self.run.rank == int(self.options["faulty_rank"])
        if faulty and self.steps == int(self.options["fail_at_step"]):
            sys.exit(3)
        if faulty and self.steps == int(self.options["hang_at_step"]):
            while True:
                time.sleep(3600)
        awake = self.awake_s if self.steps in self.window_ends else 0.0
        wait_until(self.start + self.steps * self.step_time, awake, share_cpu=self.realtime)
        self.woke = time.monotonic()
        return 0.0

    def device_timer(self) -> DeviceTimer:
        return WakeClock(self)

    def device(self) -> str:
        return "none"

    def versions(self) -> dict[str, Any]:
        return {"calibration": "1"}

    def devices(self) -> list[str]:
        return ["none"]

    def barrier(self) -> None:
        """Start every rank's clock together, and keep every rank alive until the last one has
        logged its last step (see driver.calibration.barrier for why it matters)."""
        assert self.tcp_barrier is not None, "the loop calls barrier() only with several ranks"
        if self.realtime:  # the last step's end is logged: wait for the peers as a peer
            self.realtime = not realtime(False)
        self.tcp_barrier.wait()

    def finish(self) -> None:
        if self.realtime:
            self.realtime = not realtime(False)
        if self.tcp_barrier is not None:
            self.tcp_barrier.close()

    def weights_checksum(self) -> float:
        return 0.0


class WakeClock(DeviceTimer):
    """The emulated device's own clock: when the workload's waits at the window's two ends
    returned. Its window is the true one as this host delivered it (a rank woken late by the
    host's scheduler or hypervisor lengthens it); the kit's timestamps, taken after the step
    returns, add only the kit's own part, so ``dlperf selftest`` tells the two apart."""

    source = "calibration-wake"

    def __init__(self, adapter: CalibrationAdapter) -> None:
        self.adapter = adapter
        self.start = self.end = 0.0

    def mark_start(self) -> None:
        # before step 1 (no warm-up) the window starts at the kit's begin, just taken
        self.start = self.adapter.woke if self.adapter.steps else time.monotonic()

    def mark_end(self) -> None:
        self.end = self.adapter.woke

    def seconds(self) -> float:
        return self.end - self.start


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(
        CalibrationAdapter, argv, description="dlperf calibration workload", models=("calibration",)
    )


if __name__ == "__main__":
    sys.exit(main())
