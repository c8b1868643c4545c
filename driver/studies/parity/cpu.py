"""The CPU time of a watched process: sampled from ``/proc`` once a second, read over a window.

A watched process's samples give, over the kit's measured window, its driver's own CPU (main
thread and other threads: the harness's cost that no load can hide) and its children's (the
benchmark's, for its CPU share).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence

from driver.studies.parity.records import DriverCost

CPU_SAMPLE_S = 1.0  # how often this process reads the kit's driver's CPU time from /proc
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


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
