"""The one process supervisor: start a node's processes so that none outlives its parent, wait
for them, and stop them (SIGTERM, then SIGKILL after a grace period).

stdlib only: the kit's spawner and launcher wrappers run it inside framework environments, and
the local runtime runs it in the driver. Linux:

- every child gets a parent-death signal (``prctl(PR_SET_PDEATHSIG)`` through ctypes), so a
  ``kill -9`` of the head reaches every level: the runtime's node command gets SIGTERM (a
  launcher then stops its own ranks), a rank under the kit's spawner gets SIGKILL. The signal
  follows the *thread* that started the child: start children from the thread that waits.
- a node command leads its own process group (a new session), so that stopping it reaches
  every process it started, whatever the launcher does with its own children.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
GRACE_S = 5.0  # between SIGTERM and SIGKILL
# A supervisor inside a node command (spawner, launcher wrapper) must have stopped its children
# before the runtime's own SIGKILL arrives: a shorter grace.
NESTED_GRACE_S = 3.0
POLL_S = 0.05

_prctl: Callable[..., int] | None = None


def libc_prctl() -> Callable[..., int] | None:
    """libc's prctl (None off Linux), looked up once, in the parent (a forked child should not
    load libraries); the calibration workload's timer slack uses it too."""
    global _prctl
    if _prctl is None and sys.platform.startswith("linux"):
        # The process's own symbols (libc is linked into every Python): no library search, which
        # would run `ldconfig -p` in a subprocess at every node's start.
        _prctl = ctypes.CDLL(None, use_errno=True).prctl
    return _prctl


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child receive ``sig`` when this process dies."""
    prctl = libc_prctl()
    parent = os.getpid()

    def arm() -> None:  # runs in the child, between fork and exec
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), sig)

    return arm


def start(
    argv: Sequence[str],
    *,
    parent_death_signal: int = signal.SIGKILL,
    new_group: bool = False,
    **popen: Any,
) -> subprocess.Popen:
    """``subprocess.Popen(argv)`` that dies with this process.

    ``parent_death_signal``: SIGKILL for a leaf (a rank); SIGTERM for a child that must stop
    children of its own first (a launcher). ``new_group``: lead a new session and process
    group, which :func:`stop` then signals as a whole.
    """
    return subprocess.Popen(
        list(argv),
        start_new_session=new_group,
        preexec_fn=die_with_parent(parent_death_signal),
        **popen,
    )


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to process group ``pgid``; False when no process of it is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal: not ours to stop
        return False
    return True


def stop(
    processes: Sequence[subprocess.Popen], *, groups: bool = False, grace_s: float = GRACE_S
) -> None:
    """SIGTERM every process still running, SIGKILL what is left after ``grace_s``.

    ``groups``: each process leads its own group (see :func:`start`) and the whole group is
    signalled; then the groups are swept with SIGKILL even when their leader has exited,
    because children may outlive it.
    """

    def send(process: subprocess.Popen, sig: int) -> None:
        if groups:
            signal_group(process.pid, sig)
        elif process.poll() is None:
            try:
                process.send_signal(sig)
            except ProcessLookupError:
                pass

    alive = [p for p in processes if p.poll() is None]
    for process in alive:
        send(process, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(p.poll() is None for p in alive):
        time.sleep(POLL_S)
    for process in processes if groups else alive:
        send(process, signal.SIGKILL)
    for process in alive:
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:  # unkillable (uninterruptible sleep): leave it
            pass


def first_failure(codes: Sequence[int | None]) -> int | None:
    return next((code for code in codes if code not in (None, 0)), None)


def supervise(
    workers: Sequence[subprocess.Popen],
    helpers: Sequence[subprocess.Popen] = (),
    *,
    helper_exit_grace_s: float = 0.0,
) -> int:
    """Wait for ``workers``; the first failure (a worker's or a helper's) stops everything and
    is the exit code. After the workers finished, ``helpers`` (servers that end when the
    workers are done) get ``helper_exit_grace_s`` to exit on their own, then are stopped."""
    everything = [*helpers, *workers]
    while True:
        # Poll every process each round (any() would stop at the first one still running).
        states = [w.poll() for w in workers]
        failed = first_failure(states)
        if failed is None:  # a helper dying early leaves the workers blocked in a collective
            failed = first_failure([h.poll() for h in helpers])
        if failed is not None:
            stop(everything)
            return failed
        if None not in states:
            break
        time.sleep(POLL_S)
    deadline = time.monotonic() + helper_exit_grace_s
    while time.monotonic() < deadline and any(h.poll() is None for h in helpers):
        time.sleep(POLL_S)
    stop(helpers)
    return first_failure([w.returncode for w in workers]) or 0


def stop_on_signals(stop_all: Callable[[], None]) -> None:
    """On SIGTERM or SIGINT (or a parent-death SIGTERM): ``stop_all()``, then exit 128+signal."""

    def handler(signum: int, _frame: object) -> None:
        stop_all()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
