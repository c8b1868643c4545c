"""The calibration workload's barrier and pacing (driver/calibration): real sockets, real ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from driver.calibration.barrier import BarrierError, TcpBarrier
from driver.core.command import free_port
from driver.core.runner import run_cases
from driver.core.selftest import calibration_cases
from driver.frameworks.base import REPO_ROOT
from driver.model.results import Session
from driver.runtimes.local import LocalRuntime


def run_ranks(world: int, body, port: int) -> dict[int, object]:  # noqa: ANN001
    """Run ``body(rank, barrier)`` on ``world`` threads; return each rank's result or error."""
    outcome: dict[int, object] = {}

    def rank_main(rank: int) -> None:
        try:
            barrier = TcpBarrier(rank, world, "127.0.0.1", port, timeout_s=20)
            try:
                outcome[rank] = body(rank, barrier)
            finally:
                barrier.close()
        except Exception as error:  # noqa: BLE001 - the test reads it
            outcome[rank] = error

    threads = [threading.Thread(target=rank_main, args=(rank,)) for rank in range(world)]
    for thread in reversed(threads):  # peers first: they must wait for rank 0 to listen
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return outcome


def test_no_rank_leaves_a_barrier_before_the_last_one_arrives() -> None:
    late_arrival: dict[int, float] = {}

    def body(rank: int, barrier: TcpBarrier) -> list[float]:
        left = []
        for round_ in range(2):  # the same connections serve every barrier
            if rank == 2:
                time.sleep(0.3)
                late_arrival[round_] = time.monotonic()
            barrier.wait()
            left.append(time.monotonic())
        return left

    outcome = run_ranks(4, body, free_port())
    assert set(outcome) == {0, 1, 2, 3}
    for rank, left in outcome.items():
        assert isinstance(left, list), (rank, left)
        assert all(left[i] >= late_arrival[i] for i in range(2)), (rank, left, late_arrival)


def test_a_peer_that_exits_fails_the_barrier_naming_it() -> None:
    def body(rank: int, barrier: TcpBarrier) -> str:
        if rank == 1:
            return "left without waiting"  # run_ranks closes its connection
        barrier.wait()
        return "passed"

    outcome = run_ranks(3, body, free_port())
    assert isinstance(outcome[0], BarrierError)
    assert "rank 1 closed its connection" in str(outcome[0])


def test_a_rank_that_cannot_reach_rank_0_says_where_it_looked() -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(BarrierError, match=rf"rank 1 could not reach rank 0 at 127.0.0.1:{port}"):
        TcpBarrier(1, 2, "127.0.0.1", port, timeout_s=0.5)
    assert time.monotonic() - started < 5


def test_several_ranks_without_a_rendezvous_are_refused_with_the_fix() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    env.update(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1")
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "driver/calibration/workload.py"), "--model",
         "calibration", "--batch-size", "8", "--total-steps", "3", "--warmup-steps", "1"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "need MASTER_ADDR and MASTER_PORT" in result.stderr
    assert "Traceback" not in result.stderr


def step_records(repeat_dir: Path) -> dict[int, dict[str, list[float]]]:
    ranks: dict[int, dict[str, list[float]]] = {}
    for log in repeat_dir.glob("node*.log"):
        for line in log.read_text().splitlines():
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if record.get("dlperf") in ("begin", "step"):
                ranks.setdefault(record["rank"], {}).setdefault(record["dlperf"], []).append(
                    record["t"]
                )
    return ranks


def test_ranks_start_together_and_wake_a_share_of_a_step_apart(tmp_path: Path) -> None:
    """8 ranks on one node (one monotonic clock): the barrier starts their clocks within
    milliseconds (without it, Python's start-up spread them over 100-200 ms here, and over
    2 s at 32 ranks), and rank r's step ends sit r/8 of a step after rank 0's."""
    step = 0.08
    case = calibration_cases(step, 8, ["1n8g"], repeats=1, measured_steps=10)[0]
    session = Session.open(tmp_path / "s")
    summary = run_cases([case], session, LocalRuntime(), printer=lambda _line: None)
    assert summary.ok, summary.failed
    ranks = step_records(session.repeat_dir(case, 1))
    assert sorted(ranks) == list(range(8))
    begins = [ranks[rank]["begin"][0] for rank in range(8)]
    assert max(begins) - min(begins) < 0.05, begins
    last_step_ends = [ranks[rank]["step"][-1] for rank in range(8)]
    shifts = [(end - last_step_ends[0]) % step for end in last_step_ends]
    # Each rank's last wake-up, modulo a step, against its share of the step: within half the
    # 10 ms spacing (wake-ups here are ~0.2 ms late); unshifted ranks would all sit near 0.
    for rank, shift in enumerate(shifts):
        assert abs(shift - rank / 8 * step) < step / 8 / 2, (rank, shifts)


def test_a_stranger_on_the_port_does_not_take_a_ranks_place() -> None:
    """A connection that is not one of the job's ranks (a port scan, a peer naming a rank out of
    range) is closed, and rank 0 goes on waiting for the real ranks."""
    import socket

    port = free_port()
    outcome: dict[int, object] = {}

    def rank_main(rank: int) -> None:
        barrier = TcpBarrier(rank, 2, "127.0.0.1", port, timeout_s=20)
        barrier.wait()
        barrier.close()
        outcome[rank] = "passed"

    first = threading.Thread(target=rank_main, args=(0,))
    first.start()
    deadline = time.monotonic() + 10
    while True:  # rank 0 listens once its thread runs
        try:
            stranger = socket.create_connection(("127.0.0.1", port), timeout=10)
            break
        except OSError:
            assert time.monotonic() < deadline, "rank 0 never listened"
            time.sleep(0.01)
    with stranger:
        stranger.sendall((99).to_bytes(8, "big"))
        assert stranger.recv(1) == b""  # rank 0 closed it
    second = threading.Thread(target=rank_main, args=(1,))
    second.start()
    for thread in (first, second):
        thread.join(timeout=30)
    assert outcome == {0: "passed", 1: "passed"}


def lateness_on_one_cpu(share_cpu: bool) -> tuple[float, float]:
    """Two real-time processes on CPU 0: the spinner is awake from 1 ms before the sleeper's
    deadline to 4 ms after it (its own deadline); the sleeper sleeps until its deadline. Returns
    how late each left its wait (s), as each measured it on the shared monotonic clock."""
    import multiprocessing

    from driver.calibration.workload import realtime, tighten_timer_slack, wait_until

    context = multiprocessing.get_context("fork")
    lateness = context.Queue()
    start = time.monotonic() + 0.2  # both processes are up and asleep by then

    def rank(name: str, deadline: float, awake_s: float) -> None:
        os.sched_setaffinity(0, {0})
        tighten_timer_slack()
        if not realtime(True):
            lateness.put((name, None))
            return
        wait_until(deadline, awake_s, share_cpu=share_cpu)
        late = time.monotonic() - deadline
        realtime(False)  # the queue's feeder thread must not hold the CPU from the other
        lateness.put((name, late))

    processes = [
        context.Process(target=rank, args=("spinner", start + 0.004, 0.005)),
        context.Process(target=rank, args=("sleeper", start, 0.0)),
    ]
    for process in processes:
        process.start()
    found = dict(lateness.get(timeout=20) for _ in processes)
    for process in processes:
        process.join(timeout=20)
    if None in found.values():
        pytest.fail("real-time priority is not permitted here (root or CAP_SYS_NICE needed)")
    return found["spinner"], found["sleeper"]


@pytest.mark.skipif(os.geteuid() != 0 and not os.environ.get("CI"), reason="needs root")
def test_real_time_ranks_awake_before_a_window_end_let_a_woken_peer_run() -> None:
    """A SCHED_FIFO rank awake before its window end yields to an equal woken on its CPU: the
    sleeper leaves on time (not after the spinner's deadline, 4 ms late, as it did before the
    4n32g rehearsal's 0.056% in CI), and the spinner still leaves on time.

    The best of up to three pairs: one pair is a few milliseconds of one vCPU, which its
    hypervisor may take away; what yielding does shows in any pair the host leaves alone.
    Measured on the 2-core AVX2 EPYC (10 pairs, spinner/sleeper): 0.002-0.022 / 0.037-0.052 ms
    late with yielding, the sleeper 4.08-4.11 ms without; on the AVX-512 Xeon 0.07 ms with,
    4.1 ms without (docs/measurements.md): a margin of 10x to the 0.5 ms asked."""
    pairs = []
    for _ in range(3):
        pairs.append(lateness_on_one_cpu(share_cpu=True))
        if max(pairs[-1]) < 0.0005:
            break
    spinner, sleeper = min(pairs, key=max)
    assert sleeper < 0.0005, f"sleeper {sleeper * 1e3:.3f} ms late (best of {pairs})"
    assert spinner < 0.0005, f"spinner {spinner * 1e3:.3f} ms late (best of {pairs})"
    # Without yielding, the same pair shows the delay this guards against.
    _spinner, held_back = lateness_on_one_cpu(share_cpu=False)
    assert held_back > 0.003, f"sleeper only {held_back * 1e3:.3f} ms late without yielding"


def test_a_rank_the_host_wakes_late_is_the_hosts_lateness_not_the_kits_error(
    tmp_path: Path,
) -> None:
    """The host stops the rank (SIGSTOP, as a hypervisor takes a vCPU) across its window's last
    deadline: the workload's own clock (``device-window``, source ``calibration-wake``) sees the
    window 0.15-0.4 s longer, the kit's figure agrees with it within the bound, and the selftest
    shows the gap as the host's lateness. Held to the deadlines alone, the kit's error here
    would be ~10%."""
    from driver.core.selftest import ERROR_BOUND, run_selftest

    step, measured = 0.3, 8  # a 2.4 s window; the stop holds the rank 0.4 s
    stopped: list[float] = []

    def stop_before_the_last_deadline() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not stopped:
            for log in tmp_path.glob("s/cases/**/repeat-01/node0.log"):
                text = log.read_text(errors="replace")
                if f'"step": {5 + measured - 1},' not in text:
                    continue
                (pid,) = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
                          and b"calibration/workload.py" in _cmdline(p)]  # fmt: skip
                os.kill(pid, 19)  # SIGSTOP, within the last step's sleep
                time.sleep(0.4)
                os.kill(pid, 18)  # SIGCONT: the wait returns ~0.1-0.4 s past its deadline
                stopped.append(time.monotonic())
            time.sleep(0.005)

    stopper = threading.Thread(target=stop_before_the_last_deadline)
    stopper.start()
    lines: list[str] = []
    try:
        (result,) = run_selftest(step_time=step, topologies=("1n1g",), repeats=1,
                                 measured_steps=measured, results_dir=tmp_path / "s",
                                 printer=lines.append)  # fmt: skip
    finally:
        stopper.join(timeout=130)
    assert stopped, "the rank's second-to-last step never appeared in its log"
    assert result.truth == 32 / step and result.delivered is not None
    assert 0.04 < result.host_lateness < 0.15, lines  # 0.1-0.4 s of a 2.4 s window
    assert result.measured == pytest.approx(result.delivered, rel=ERROR_BOUND)
    assert result.error < ERROR_BOUND and result.passed
    (record,) = (tmp_path / "s").rglob("node0.log")
    windows = [json.loads(line) for line in record.read_text().splitlines()
               if '"device-window"' in line]  # fmt: skip
    assert [(w["source"], w["steps"]) for w in windows] == [("calibration-wake", measured)]
    assert "delivered" in lines[0] and "late)" in lines[0], lines


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""
