"""No orphans: ``kill -9`` of the head leaves no process of its run, and a resumed session ends
what an earlier run left (``clean_local_leftovers``). Real processes, the calibration workload
(no ML framework) through the local runtime and the kit's spawner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from driver.runtimes.local import (
    RUNNING_DIR,
    SESSION_VAR,
    clean_local_leftovers,
    is_running,
    process_environ,
    session_marker,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
TEST_VAR = "DLPERF_ORPHAN_TEST"

# The head: a calibration case of 2 nodes x 2 ranks (two spawners), long enough to be killed.
HEAD = """
import sys
from pathlib import Path
from driver.model.results import Session
from driver.core.runner import run_cases
from driver.core.selftest import calibration_cases
from driver.runtimes.local import LocalRuntime

cases = calibration_cases(step_time=0.5, batch=4, topologies=["2n4g"], repeats=1,
                          measured_steps=400)
run_cases(cases, Session.open(Path(sys.argv[1])), LocalRuntime(), printer=lambda _l: None,
          progress="off")
"""


def marked(name: str, value: str) -> list[int]:
    """Running processes (zombies aside) whose environment has ``name=value``."""
    return [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit()
        and is_running(int(entry.name))
        and process_environ(int(entry.name)).get(name) == value
    ]


def wait_for(condition, within_s: float) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def test_kill_9_of_the_head_leaves_no_process_of_its_run(tmp_path: Path) -> None:
    run_id = uuid.uuid4().hex
    session = tmp_path / "session"
    head = subprocess.Popen(
        [sys.executable, "-c", HEAD, str(session)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), TEST_VAR: run_id},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        # Running ranks: every rank has logged at least its first step.
        def ranks_run() -> bool:
            logs = "".join(p.read_text() for p in session.rglob("node*.log"))
            return logs.count('"step": 1,') == 4

        assert wait_for(ranks_run, 90), head.stderr.read().decode() if head.poll() else ""
        run = [pid for pid in marked(TEST_VAR, run_id) if pid != head.pid]
        assert len(run) >= 6  # 2 spawners and 4 ranks
        pid_files = list((session / RUNNING_DIR).iterdir())
        assert len(pid_files) == 2  # one per node command while it runs
        head.send_signal(signal.SIGKILL)
        head.wait()
        assert wait_for(lambda: not marked(TEST_VAR, run_id), 10), [
            Path(f"/proc/{pid}/cmdline").read_bytes() for pid in marked(TEST_VAR, run_id)
        ]
        # The pid files a killed head could not remove: nothing of them runs any more.
        assert clean_local_leftovers(session) == []
        assert not any((session / RUNNING_DIR).iterdir())
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()


def start_marked(code: str, session: Path, *, new_session: bool) -> subprocess.Popen:
    env = {**os.environ, SESSION_VAR: session_marker(session)}
    return subprocess.Popen(
        [sys.executable, "-c", code], env=env, start_new_session=new_session
    )


def test_a_resumed_session_ends_what_an_earlier_run_left(tmp_path: Path) -> None:
    session = tmp_path / "session"
    running = session / RUNNING_DIR
    running.mkdir(parents=True)
    ignores_term = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    )
    # A node command left behind: a group leader and a member that ignores SIGTERM.
    leader_code = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {ignores_term!r}])\n"
        "time.sleep(120)\n"
    )
    leader = start_marked(leader_code, session, new_session=True)
    (running / str(leader.pid)).write_text(
        '{"started": "2026-11-23 12:00:00", "node": "local0", "command": "[local0] spawn"}'
    )
    # A worker that left its group (as paddle's launcher starts them), with no pid file.
    stray = start_marked("import time; time.sleep(120)", session, new_session=True)
    # A pid file naming a process that is not this session's (a reused pid): left alone.
    foreign = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    (running / str(foreign.pid)).write_text("{}")
    # A pid file whose process is gone.
    (running / "999999999").write_text("{}")
    try:
        assert wait_for(lambda: len(marked(SESSION_VAR, session_marker(session))) == 3, 10)
        messages = clean_local_leftovers(session)
        assert messages == [
            f"ended leftover pid {leader.pid} of this session "
            "(started 2026-11-23 12:00:00: [local0] spawn)",
            f"ended leftover pid {stray.pid} of this session (outside its process group)",
        ]
        assert leader.wait(timeout=10) == -signal.SIGTERM
        assert stray.wait(timeout=10) == -signal.SIGTERM
        # The member that ignored SIGTERM got SIGKILL after the grace period.
        assert wait_for(lambda: not marked(SESSION_VAR, session_marker(session)), 10)
        assert foreign.poll() is None
        assert not any(running.iterdir())
    finally:
        for process in (leader, stray, foreign):
            process.kill()
            process.wait()


def test_a_finished_run_leaves_no_pid_file(tmp_path: Path) -> None:
    from driver.core.runner import run_cases
    from driver.core.selftest import calibration_cases
    from driver.model.results import Session
    from driver.runtimes.local import LocalRuntime

    cases = calibration_cases(0.01, 4, ["1n2g"], repeats=1, measured_steps=5)
    session = Session.open(tmp_path / "session")
    summary = run_cases(cases, session, LocalRuntime(), printer=lambda _l: None, progress="off")
    assert summary.ok and not (session.root / RUNNING_DIR).exists()


def test_the_wait_for_a_node_command_does_not_wake_while_it_runs(tmp_path: Path) -> None:
    """The local runtime sleeps on the node command's exit (a pidfd), not in 50 ms polls: a
    driver thread that wakes takes a core from a benchmark that uses all of them. Voluntary
    context switches of the waiting thread count its wake-ups whatever else the host runs (the
    thread's own: threads other tests of this process left behind wake on their own)."""
    import resource

    from driver.runtimes.local import run_process_group
    from driver.runtimes.plan import NodeCommand

    command = NodeCommand(node="local0", argv=["sleep", "2"])
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
    outcome = run_process_group([command], tmp_path, 60, session_root=tmp_path)
    wakeups = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw - before
    assert outcome.verdict.value == "ok" and outcome.finished_at - outcome.started_at >= 2
    assert wakeups < 15, wakeups  # polling every 50 ms: 40 and more
