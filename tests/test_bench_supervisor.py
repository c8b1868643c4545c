"""driver.bench.supervisor on real processes: first failure, TERM then KILL, process groups, and
children that die with their parent (PR_SET_PDEATHSIG)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from driver.bench.supervisor import start, stop, supervise
from driver.runtimes.local import is_running

REPO_ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
SLEEPER = "import time; time.sleep(60)"
IGNORES_TERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def wait_gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not is_running(pid):
            return True
        time.sleep(0.05)
    return False


def test_the_first_failure_stops_the_others_and_is_the_exit_code() -> None:
    sleeper = start(python(SLEEPER))
    failing = start(python("import sys, time; time.sleep(0.3); sys.exit(3)"))
    began = time.monotonic()
    assert supervise([sleeper, failing]) == 3
    assert sleeper.returncode == -signal.SIGTERM and time.monotonic() - began < 10


def test_helpers_get_a_grace_period_after_the_workers_then_are_stopped() -> None:
    worker = start(python("pass"))
    helper = start(python(SLEEPER))
    began = time.monotonic()
    assert supervise([worker], [helper], helper_exit_grace_s=0.5) == 0
    assert helper.returncode == -signal.SIGTERM and 0.5 <= time.monotonic() - began < 10


def test_stop_sends_term_then_kill_after_the_grace_period() -> None:
    polite, stubborn = start(python(SLEEPER)), start(python(IGNORES_TERM))
    time.sleep(0.5)  # the handler is installed
    began = time.monotonic()
    stop([polite, stubborn], grace_s=1.0)
    assert polite.returncode == -signal.SIGTERM
    assert stubborn.returncode == -signal.SIGKILL
    assert 1.0 <= time.monotonic() - began < 5


def test_a_group_is_stopped_whole_even_after_its_leader_exits(tmp_path: Path) -> None:
    # The leader starts a grandchild that ignores SIGTERM (same process group), then exits.
    pid_file = tmp_path / "grandchild"
    code = (
        "import subprocess, sys\n"
        f"child = subprocess.Popen([sys.executable, '-c', {IGNORES_TERM!r}])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
    )
    leader = start(python(code), new_group=True)
    leader.wait(timeout=30)
    grandchild = int(pid_file.read_text())
    assert is_running(grandchild) and os.getpgid(grandchild) == leader.pid
    stop([leader], groups=True, grace_s=0.5)
    assert wait_gone(grandchild, 5)


def test_children_die_with_their_parent_even_on_kill_9(tmp_path: Path) -> None:
    # A middle process starts a rank (SIGKILL on parent death) and a launcher-like child that
    # cleans up on SIGTERM (its parent-death signal), then is killed with SIGKILL itself.
    marker = tmp_path / "terminated"
    launcher_code = (
        "import signal, sys, time\n"
        "def bye(*_):\n"
        f"    open({str(marker)!r}, 'w').write('clean exit'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "time.sleep(60)\n"
    )
    middle_code = (
        "import signal, sys, time\n"
        "from driver.bench.supervisor import start\n"
        f"rank = start([sys.executable, '-c', {SLEEPER!r}])\n"
        f"launcher = start([sys.executable, '-c', {launcher_code!r}],\n"
        "                  parent_death_signal=signal.SIGTERM)\n"
        "print(rank.pid, launcher.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    middle = subprocess.Popen(
        python(middle_code), env=ENV, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT
    )
    assert middle.stdout is not None
    rank, launcher = map(int, middle.stdout.readline().split())
    time.sleep(0.5)  # the launcher's handler is installed
    middle.kill()
    middle.wait()
    assert wait_gone(rank, 5) and wait_gone(launcher, 5)
    assert marker.read_text() == "clean exit"


def test_the_spawner_gives_ranks_their_environment_and_passes_the_first_failure() -> None:
    code = "import os, sys; sys.exit(5 if os.environ['RANK'] == '1' else 0)"
    done = subprocess.run(
        [sys.executable, "-m", "driver.spawn", "--nproc-per-node", "2", "--", "-c", code],
        env=ENV, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 5, done.stderr
