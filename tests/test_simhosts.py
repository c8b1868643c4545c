"""Simulated hosts (driver.testbed.simhosts) and the cost curve (driver.testbed.costcurve)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from driver.core.selftest import median_phases, phase_timings
from driver.frontend.cli import main
from driver.testbed import namespaces, simhosts
from driver.testbed.costcurve import curve_table, refusal, run_cost_curve
from driver.testbed.namespaces import sweep_stale
from driver.testbed.simhosts import SimulatedHosts, missing_requirements
from tests.conftest import require_real


@pytest.fixture
def can_make_hosts() -> None:
    why = missing_requirements(sshd=True)
    if why:
        require_real(why)


def ssh(hosts: SimulatedHosts, name: str, command: str) -> subprocess.CompletedProcess:
    host = hosts.host(name)
    return subprocess.run(
        ["ssh", "-i", str(hosts.client_key), "-p", str(host.port),
         "-o", f"UserKnownHostsFile={hosts.known_hosts}", "-o", "StrictHostKeyChecking=yes",
         "-o", "BatchMode=yes", f"root@{host.address}", command],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip


def alive(pid: int | str, settle_s: float = 5.0) -> bool:
    """Whether ``pid`` still runs (a zombie waiting for its new parent to reap it does not)."""
    deadline = time.monotonic() + settle_s
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        if state != "Z" and time.monotonic() > deadline:
            return True
        if state == "Z":
            return False
        time.sleep(0.1)


@pytest.mark.parametrize("network", [True, False], ids=["own-network", "loopback"])
def test_hosts_have_their_own_clock_name_and_files_and_leave_nothing(
    can_make_hosts: None, tmp_path: Path, network: bool
) -> None:
    hosts = SimulatedHosts(tmp_path / "hosts", 3, network=network)
    with hosts:
        for host in hosts.hosts:
            # What a process started over SSH sees: the host's name, /etc/hosts and clock.
            seen = ssh(hosts, host.name, "hostname; cat /proc/self/timens_offsets; cat /etc/hosts")
            assert seen.returncode == 0, seen.stderr
            lines = seen.stdout.splitlines()
            assert lines[0] == host.name
            assert lines[1].split() == ["monotonic", str(host.offset_s), "0"]
            assert all(f"{h.address} {h.name}" in seen.stdout for h in hosts.hosts)
            offset, within = hosts.measured_offset(host.name)
            assert abs(offset - host.offset_s) < within + 0.05
        assert len({h.offset_s for h in hosts.hosts}) == 3
        assert min(h.offset_s for h in hosts.hosts) >= 7200
        # This machine keeps its own name and clock.
        assert Path("/proc/self/timens_offsets").read_text().split()[1] == "0"
        if network:
            reach = hosts.run_in("n1", ["ping", "-c1", "-W2", hosts.address("n3")])
            assert reach.returncode == 0 or "ping" in reach.stderr  # ping may be absent
        pids = [p for h in hosts.hosts for p in hosts.processes(h.name)]
        assert pids
    assert hosts.leftovers() == []
    assert not any(alive(pid) for pid in pids)


def test_kill_host_kills_its_processes_and_sshd_comes_back(
    can_make_hosts: None, tmp_path: Path
) -> None:
    with SimulatedHosts(tmp_path / "hosts", 2) as hosts:
        sleeper = subprocess.Popen(
            [*hosts.host("n2").enter(), "sleep", "300"], stdout=subprocess.DEVNULL
        )
        # nsenter joins the host's namespaces, then becomes sleep: only then is it the host's
        # (killed at once, it could still be this machine's nsenter, and rightly spared).
        comm = Path(f"/proc/{sleeper.pid}/comm")
        deadline = time.monotonic() + 10
        while comm.read_text().strip() != "sleep" and time.monotonic() < deadline:
            time.sleep(0.01)
        killed = hosts.kill_host("n2")
        assert sleeper.pid in killed and sleeper.wait(timeout=10) == -signal.SIGKILL
        assert ssh(hosts, "n2", "true").returncode != 0
        assert ssh(hosts, "n1", "true").returncode == 0
        hosts.start_sshd("n2")
        assert ssh(hosts, "n2", "hostname").stdout.strip() == "n2"
    assert hosts.leftovers() == []


def test_a_killed_run_is_swept(can_make_hosts: None, tmp_path: Path) -> None:
    """A run killed outright leaves its hosts; the next sweep removes them (the creating pid is
    gone), and nothing of a live run."""
    program = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        from driver.testbed.simhosts import SimulatedHosts
        hosts = SimulatedHosts({str(tmp_path / "killed")!r}, 2)
        hosts.start()
        print(hosts.prefix, hosts.hosts[0].holder_pid, hosts.hosts[1].holder_pid, flush=True)
        time.sleep(300)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True)
    prefix, *holders = child.stdout.readline().split()
    child.kill()
    child.wait(timeout=10)
    with SimulatedHosts(tmp_path / "live", 1) as live:
        removed = sweep_stale()
        assert f"{prefix}-n1" in removed and f"{prefix}-ctl" in removed
        assert not any(alive(pid) for pid in holders)
        netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert prefix not in netns and f"{live.prefix}-n1" in netns
        assert live.run_in("n1", ["hostname"]).stdout.strip() == "n1"
    assert prefix not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


RECEIVE = """
import socket, sys
server = socket.create_server(("0.0.0.0", 5201))
print("ready", flush=True)
conn, _ = server.accept()
got = 0
while got < int(sys.argv[1]) and (chunk := conn.recv(1 << 16)):
    got += len(chunk)
conn.sendall(b"k")
print(got, flush=True)
"""
SEND = """
import socket, sys, time
conn = socket.create_connection((sys.argv[1], 5201), timeout=30)
start = time.monotonic()
conn.sendall(b"x" * int(sys.argv[2]))
conn.recv(1)
print(time.monotonic() - start)
"""


def test_throttle_limits_what_a_host_sends_and_is_removed(
    can_make_hosts: None, tmp_path: Path
) -> None:
    """4 MB from n1 to n2 over their bridge: at most 40 Mbit/s once n1 is throttled (tc tbf
    on its eth0), fast again once the throttle is removed; nothing left after the hosts."""
    if not shutil.which("tc"):
        require_real("tc is missing: apt-get install iproute2")
    size, rate_bits = 4_000_000, 40e6

    def send_time(hosts: SimulatedHosts) -> float:
        receiver = subprocess.Popen(
            [*hosts.host("n2").enter(), sys.executable, "-c", RECEIVE, str(size)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert receiver.stdout.readline().strip() == "ready"
            sent = hosts.run_in("n1", [sys.executable, "-c", SEND, hosts.address("n2"), str(size)])
            assert sent.returncode == 0, sent.stderr
            assert receiver.stdout.readline().strip() == str(size)
        finally:
            receiver.kill()
            receiver.wait(timeout=10)
        return float(sent.stdout)

    with SimulatedHosts(tmp_path / "hosts", 2) as hosts:
        hosts.throttle("n1", "40mbit")
        shown = hosts.run_in("n1", ["tc", "qdisc", "show", "dev", "eth0"]).stdout
        assert "tbf" in shown and "40Mbit" in shown, shown
        throttled = send_time(hosts)
        assert throttled >= 0.9 * size * 8 / rate_bits, throttled  # 0.8 s at 40 Mbit/s
        hosts.throttle("n1", "")
        assert "tbf" not in hosts.run_in("n1", ["tc", "qdisc", "show", "dev", "eth0"]).stdout
        assert send_time(hosts) < throttled / 4
        with pytest.raises(namespaces.SimulatedHostsError, match="tbf rate fast .*: exit"):
            hosts.throttle("n2", "fast")  # tc's own refusal, named
    assert hosts.leftovers() == []


def test_missing_requirements_name_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "run as root" in str(missing_requirements())
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(simhosts.shutil, "which", lambda name: None)
    why = str(missing_requirements(slurm=True))
    assert why.startswith("simulated hosts need") and "apt-get install" in why
    assert "iproute2" in why and "slurmd" in why and "munge" in why


def test_phase_timings_take_every_seconds_key_the_runtimes_record() -> None:
    ssh_extra = {"timings": {"prepare_s": 1.5, "launch_s": 0.25, "hosts": 3}, "nodes": {}}
    slurm_extra = {"slurm": {"timings": {"allocation_s": 2.0, "step_started_at": 1.0}}}
    assert phase_timings(ssh_extra) == {"prepare_s": 1.5, "launch_s": 0.25}
    assert phase_timings(slurm_extra) == {"allocation_s": 2.0}
    assert phase_timings({}) == {}
    nodes = {
        "node0": {"process_seconds": 3.0, "process_cpu_seconds": 0.2},
        "node1": {"process_seconds": 3.5, "process_cpu_seconds": 0.4},
        "node2": {"process_seconds": 3.2, "process_cpu_seconds": 0.3},
        "node3": {"lost": "dropped"},  # nothing measured on it: not counted
    }
    assert phase_timings({"nodes": nodes}) == pytest.approx(
        {"nodes_process_s": 3.5, "node_cpu_s": 0.3, "nodes_cpu_s": 0.9}
    )
    extras = [{"timings": {"launch_s": v}} for v in (0.1, 0.3, 0.2)] + [{}]
    assert median_phases(extras) == {"launch_s": 0.2}


def test_selftest_nodes_refusals_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["selftest", "--nodes", "2", "--runtime", "docker"]) == 2
    assert "--runtime process or slurm" in capsys.readouterr().err
    assert main(["selftest", "--nodes", "2", "--runtime", "process", "--inventory", "x"]) == 2
    assert "drop --inventory" in capsys.readouterr().err
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["selftest", "--nodes", "2", "--runtime", "process"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run as root" in err
    assert refusal("slurm") is not None


def test_cost_curve_small_end_through_process(
    can_make_hosts: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """2 simulated hosts, 2n2g through the process runtime: the error, the overhead and the
    SSH runtime's phases come out per node count (not timed: the benchmark is not a test)."""
    (point,) = run_cost_curve([2], "process", repeats=1, step_time=0.02, measured_steps=20)
    assert point.nodes == 2 and point.result.topology == "2n2g"
    assert point.result.passed, point.result
    assert 0 < point.result.overhead_s < 60
    # One repeat: the case's overhead is that repeat's plus the session's preparation.
    assert point.case_overhead_s >= point.result.overhead_s and point.hosts_s > 0
    assert {"prepare_s", "launch_s", "watch_s", "finish_s"} <= set(point.result.phases)
    # The nodes' own processes (each node's longest, as the process runtime measured it on the
    # node) are set apart from the driver's share; the two add up to the overhead.
    steps_s = (5 + 20) * 0.02
    assert point.result.phases["nodes_process_s"] >= steps_s
    # The CPU its processes used, per node (the calibration sleeps: far below its run time).
    phases = point.result.phases
    assert 0 < phases["node_cpu_s"] < phases["nodes_process_s"]
    assert phases["nodes_cpu_s"] == pytest.approx(2 * phases["node_cpu_s"])  # 2 nodes, 1 repeat
    assert point.nodes_side_s is not None and point.driver_s is not None
    assert point.nodes_side_s + point.driver_s == pytest.approx(point.result.overhead_s, abs=1e-6)
    assert point.driver_s < point.result.overhead_s
    # After the run: the door over the sealed session and a release of it, timed
    assert point.door_s is not None and 0 < point.door_s < 60
    assert point.release_s is not None and 0 < point.release_s < 300
    table = capsys.readouterr().out
    assert "| 2       | 2n2g" in table and "launch_s" in table and "overhead s/case" in table
    assert curve_table([point], "process") in table and "release s" in table


def test_the_kit_s_own_parts_are_fitted_by_a_line_and_read_at_1024_nodes(tmp_path: Path) -> None:
    """Points on a line in N read back exactly (largest miss 0%); a part measured at one node
    count alone has no line."""
    from driver.core.selftest import SelftestResult
    from driver.testbed.costcurve import CurvePoint, extrapolation, plot_curve

    def point(nodes: int) -> CurvePoint:
        result = SelftestResult(f"{nodes}n{nodes}g", 1.0, 1.0, overhead_s=1.0,
                                phases={"nodes_process_s": 2.0 + 0.5})  # fmt: skip
        return CurvePoint(nodes, result, 1.0, repeat_steps_s=2.0, door_s=0.01 * nodes,
                          release_s=3.0 + 0.1 * nodes)  # fmt: skip

    lines = extrapolation([point(8), point(16), point(32), point(64)])
    assert len(lines) == 3  # the driver's part, the door, the release
    door = next(line for line in lines if line.startswith("the door"))
    assert "10.00 ms per node" in door and "largest miss of the line 0%" in door
    assert door.endswith("at 1,024 nodes 10.2 s")
    release = next(line for line in lines if line.startswith("a release"))
    assert "3.000 s + 100.00 ms per node" in release and release.endswith("105.4 s")
    assert extrapolation([point(8)]) == []
    drawn = plot_curve([point(8), point(16), point(32), point(64)], tmp_path / "c.png", "process")
    assert drawn.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and drawn.stat().st_size > 5000


def test_a_plot_without_a_curve_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["selftest", "--plot", "curve.png"]) == 2
    assert "--plot draws the cost curve of --nodes" in capsys.readouterr().err


def test_two_runs_starting_hosts_at_once_never_share_a_subnet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subnet is claimed (a file with the claimer's pid) from its choice until its hosts
    stop: a second choice meanwhile, by this process or another test worker, takes the next
    free one; a claim whose process is gone is taken over."""
    if not shutil.which("ip"):
        require_real("no ip (apt-get install iproute2)")
    monkeypatch.setattr(namespaces, "SUBNET_CLAIMS", tmp_path / "claims")
    first, second = namespaces.free_subnet(), namespaces.free_subnet()
    assert first != second
    assert (tmp_path / "claims" / first).read_text() == str(os.getpid())
    namespaces.release_subnet(first)
    assert namespaces.free_subnet() == first
    dead = subprocess.Popen(["true"])  # a pid that has exited
    dead.wait()
    for prefix in (first, second):
        (tmp_path / "claims" / prefix).write_text(str(dead.pid))
    assert namespaces.free_subnet() == first  # the dead claimer's subnet, taken over
