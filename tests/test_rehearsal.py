"""The cluster's real shape, rehearsed: 1n1g, 1n8g, 2n16g and 4n32g of the calibration workload
on 4 simulated hosts whose clocks run hours apart, through the process, docker and slurm
runtimes; the kit's error stays under 0.05% at every topology (driver.core.selftest). The
truth is what the workload delivered by its own clock: a rank that this 2-core machine (or its
hypervisor) wakes late at a window's end is the host's lateness, printed apart, not the kit's
error (a clean-clone CI run on the AVX2 EPYC failed 2n16g at 0.0676% of the deadlines' rate
that way, 1.35 ms of a 2 s window, before the selftest told the two apart).

Margins, measured in a clean-clone CI run (two xdist workers, docker images built fresh) on the
2-core AVX2 EPYC: the kit's error at most 0.0011% (process), 0.0018% (slurm) and 0.0005%
(docker, tests/test_cluster_docker.py) of the 0.05% bound, 28x below it, while the host's
lateness reached 0.0097% (slurm 4n32g) and 0.47% (docker 4n32g, no real-time priority in a
container). On the AVX-512 Xeon/EPYC kind the kit's part is the same few microseconds between a
rank's wake-up and its timestamp; that kind measured at most 0.0068% against the deadlines,
lateness included (docs/measurements.md), so the same margin or more.

One Slurm cluster for the module (its hosts run sshd too, for the process runtime). The docker
runtime's rehearsal is in tests/test_cluster_docker.py, beside the engine's other tests, on
loopback hosts (its containers use the engine's network and clock).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from driver.cluster.slurm import SlurmConfig
from driver.core.selftest import ERROR_BOUND, SelftestResult, run_selftest
from driver.model.results import Session
from driver.runtimes.slurm.runtime import SlurmRuntime
from driver.runtimes.ssh.runtime import ProcessRuntime

if TYPE_CHECKING:  # imported by pytest_plugins first, so pytest rewrites its asserts
    from driver.testbed.simhosts import SimulatedHosts
    from tests.slurm_fixtures import SlurmCluster

pytest_plugins = ["tests.slurm_fixtures"]

SHAPES = ("1n1g", "1n8g", "2n16g", "4n32g")
# The kit's figure is a case's median over its repeats (selftest's default: 3). One repeat is a
# single window whose end one rare hiccup can delay (seen here in 2 of 12 single-repeat runs: a
# lone 1n1g rank 0.48 ms late, 0.06% of a 0.8 s window; a 4n32g rank 2 ms, 0.25%; this VM's
# /proc/stat counts steal time, its vCPUs also run its host's work); the median of three is the
# method's own answer to one bad repeat, on a real cluster as here. The window is 2 s (100 steps,
# the kit's default count): at 4n32g the 2 cores wake 16 ranks each at the window's end, and the
# last is late by its turn, not by the kit (0.5-0.7 ms in a full CI run: 0.06-0.09% of a 0.8 s
# window, 0.03% of 2 s).
STEP_TIME, MEASURED_STEPS, REPEATS = 0.02, 100, 3


def rehearse(
    runtime,
    results: Path,
    measured_steps: int = MEASURED_STEPS,  # noqa: ANN001
) -> list[SelftestResult]:
    """Every shape, 3 repeats x 100 measured steps of 0.02 s, through ``runtime``."""
    return run_selftest(
        step_time=STEP_TIME, topologies=SHAPES, repeats=REPEATS, measured_steps=measured_steps,
        results_dir=results, printer=print, runtime=runtime,
    )  # fmt: skip


def assert_within_bound(results: list[SelftestResult]) -> None:
    assert [r.topology for r in results] == list(SHAPES)
    assert ERROR_BOUND == 0.0005  # the 0.05%
    for result in results:
        assert result.error < ERROR_BOUND, f"{result.topology}: error {result.error:.4%}"


def rank_facts(repeat_dir: Path) -> dict[int, dict]:
    """rank -> its header's hostname and its first measured step's monotonic time, read from
    every log the runtime brought back."""
    facts: dict[int, dict] = {}
    for log in repeat_dir.glob("*.log"):
        for line in log.read_text(errors="replace").splitlines():
            start = line.find("{")
            if start < 0 or '"dlperf":' not in line:
                continue
            try:
                record = json.loads(line[start:])
            except ValueError:
                continue
            rank = int(record.get("rank", -1))
            if record["dlperf"] == "header":
                facts.setdefault(rank, {})["hostname"] = record.get("hostname")
            elif record["dlperf"] == "step" and record.get("step") == 1:
                facts.setdefault(rank, {})["t"] = float(record["t"])
    return facts


def the_4n32g_repeat(results: Path) -> Path:
    session = Session(results)
    found = [(c, r.repeat) for c, r, _ in session.records() if c.topology.label == "4n32g"]
    assert sorted(repeat for _, repeat in found) == list(range(1, REPEATS + 1))
    return session.repeat_dir(found[0][0], 1)


def assert_ranks_on_four_hosts(results: Path, hosts: SimulatedHosts, *, own_clocks: bool) -> None:
    """8 ranks on each host's hostname, and (own_clocks) each host's ranks on its clock:
    their first steps' timestamps apart by the hosts' offsets (hours), not by seconds."""
    facts = rank_facts(the_4n32g_repeat(results))
    assert sorted(facts) == list(range(32))
    if not own_clocks:
        return
    by_host: dict[str, list[float]] = {}
    for rank in range(32):
        by_host.setdefault(facts[rank]["hostname"], []).append(facts[rank]["t"])
    assert sorted(by_host) == sorted(hosts.names)
    assert all(len(times) == 8 for times in by_host.values())
    first = {name: min(times) for name, times in by_host.items()}
    for host in hosts.hosts[1:]:
        apart = first[host.name] - first[hosts.hosts[0].name]
        expected = host.offset_s - hosts.hosts[0].offset_s
        assert expected >= 7200
        assert abs(apart - expected) < 5, (host.name, apart, expected)


def test_every_host_has_its_own_clock_hostname_and_network(slurm_hosts: SlurmCluster) -> None:
    offsets = set()
    for host in slurm_hosts.hosts:
        declared = Path(f"/proc/{host.holder_pid}/timens_offsets").read_text().split()
        assert declared[:2] == ["monotonic", str(host.offset_s)]
        seen, within = slurm_hosts.measured_offset(host.name)
        assert abs(seen - host.offset_s) < within + 0.05
        offsets.add(host.offset_s)
        assert slurm_hosts.run_in(host.name, ["hostname"]).stdout.strip() == host.name
        route = slurm_hosts.run_in(host.name, ["ip", "-4", "-o", "addr", "show", "dev", "eth0"])
        assert f"{host.address}/24" in route.stdout
    assert len(offsets) == len(slurm_hosts.hosts) and min(offsets) >= 7200


def test_process_runtime_rehearses_4n32g(slurm_hosts: SlurmCluster, tmp_path: Path) -> None:
    inventory = slurm_hosts.write_inventory(tmp_path / "hosts.yaml", devices=8)
    results = tmp_path / "session"
    assert_within_bound(rehearse(ProcessRuntime(inventory), results))
    assert_ranks_on_four_hosts(results, slurm_hosts, own_clocks=True)


def test_slurm_runtime_rehearses_4n32g(
    slurm_hosts: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("SLURM_CONF", str(slurm_hosts.conf))
    runtime = SlurmRuntime(config=SlurmConfig(time_limit="10", container="none"), printer=print)
    results = tmp_path / "session"
    try:
        assert_within_bound(rehearse(runtime, results))
    finally:
        runtime.close()
    assert slurm_hosts.drained() == []
    assert_ranks_on_four_hosts(results, slurm_hosts, own_clocks=True)
