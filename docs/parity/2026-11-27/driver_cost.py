"""The kit driver's own CPU while a node command runs, part by part.

Load-independent: CPU seconds and context switches of the driver's own process, not wall
time, so the numbers hold on a machine other work shares. Each part alone, for SECONDS:

- wait: the local runtime waiting on a node command that sleeps (no telemetry);
- telemetry: the same with the telemetry sampler on (every 0.5 s);
- progress: dlperf run's progress bar (rich) on a pseudo-terminal, in a process of its own.

    DLPERF_VENVS=... .venv/bin/python docs/parity/2026-11-27/driver_cost.py [SECONDS]
"""

from __future__ import annotations

import json
import os
import pty
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = "progress-child"


def per_second(before: resource.struct_rusage, after: resource.struct_rusage, wall: float):
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    switches = (after.ru_nvcsw - before.ru_nvcsw) + (after.ru_nivcsw - before.ru_nivcsw)
    return 1000 * cpu / wall, switches / wall


def show(label: str, ms: float, switches: float, wall: float) -> None:
    processes = sum(1 for name in os.listdir("/proc") if name.isdigit())
    print(
        f"{label:10s} {ms:6.2f} ms CPU per s  {switches:6.1f} context switches per s  "
        f"({wall:.0f} s; {processes} processes on the host)",
        flush=True,
    )


def wait(seconds: float, telemetry: bool) -> None:
    from driver.runtimes.local import run_process_group
    from driver.runtimes.plan import NodeCommand

    folder = Path(tempfile.mkdtemp())
    command = NodeCommand(node="local0", argv=["sleep", str(seconds)])
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    run_process_group([command], folder, 600, session_root=folder, telemetry=telemetry)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    show("telemetry" if telemetry else "wait", *per_second(before, after, wall), wall)


def progress_child(seconds: float, out: str) -> None:
    from driver.core.progress import Progress
    from driver.model.case import Case, Topology

    case = Case("resnet50", "pytorch", Topology(1, 1), 8, "fp32", "synthetic", repeats=2)
    with Progress([case], print, "rich") as report:
        before, started = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        report.line("[case 1/1] repeat 1/2: 10.00 samples/s")
        time.sleep(seconds)
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
    Path(out).write_text(json.dumps([*per_second(before, after, wall), wall]))


def progress(seconds: float) -> None:
    out = Path(tempfile.mkdtemp()) / "progress.json"
    master, terminal = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, __file__, CHILD, str(seconds), str(out)],
        stdout=terminal,
        stderr=terminal,
        stdin=subprocess.DEVNULL,
    )
    os.close(terminal)
    try:
        while os.read(master, 65536):
            pass
    except OSError:  # the terminal's other end closed
        pass
    child.wait()
    show("progress", *json.loads(out.read_text()))


if __name__ == "__main__":
    if sys.argv[1:2] == [CHILD]:
        progress_child(float(sys.argv[2]), sys.argv[3])
    else:
        seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
        wait(seconds, telemetry=False)
        wait(seconds, telemetry=True)
        progress(seconds)
