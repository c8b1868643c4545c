"""Pre-flight against real sshd nodes: it checks what the run will use and names the fix, and a
node that fails it ends its cases with a verdict while the matrix goes on."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.cluster.preflight import failures, run_preflight
from driver.cluster.remote import Remote
from driver.core.results import Session
from driver.core.runner import run_cases
from driver.core.selftest import calibration_cases
from driver.runtimes.process import ProcessRuntime
from tests.cluster_fixtures import SshNode, free_port, write_inventory


@pytest.fixture
def node_without_sftp(ssh_client_key: Path, tmp_path: Path) -> Iterator[SshNode]:
    """A fresh sshd with no SFTP subsystem, as a new user's hand-made node might be."""
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    address = "127.0.0.9"
    node = SshNode(7, address, free_port(address), tmp_path / "bare", ssh_client_key, sftp=False)
    node.root.mkdir()
    node.scratch.mkdir()
    node.start()
    try:
        yield node
    finally:
        node.kill()


def test_a_node_without_sftp_fails_preflight_naming_the_fix(
    node_without_sftp: SshNode, tmp_path: Path
) -> None:
    inventory = write_inventory(
        tmp_path / "cluster.yaml",
        [node_without_sftp],
        defaults={"devices": 1, "python": sys.executable, "container": {"variant": "cpu"}},
    )
    runtime = ProcessRuntime(inventory)
    checks = run_preflight(runtime.remotes, kind="process", framework="calibration")
    bad = failures(checks)
    assert [check.name for check in bad] == ["sftp"]
    assert "Subsystem sftp" in bad[0].detail and "sshd_config" in bad[0].detail


def test_failing_preflight_is_a_verdict_per_case_and_the_matrix_goes_on(
    node_without_sftp: SshNode, tmp_path: Path
) -> None:
    inventory = write_inventory(
        tmp_path / "cluster.yaml",
        [node_without_sftp],
        defaults={"devices": 2, "python": sys.executable, "container": {"variant": "cpu"}},
    )
    cases = calibration_cases(0.002, 8, ["1n1g", "1n2g"], repeats=1, measured_steps=3)
    lines: list[str] = []
    summary = run_cases(
        cases, Session.open(tmp_path / "s"), ProcessRuntime(inventory), printer=lines.append
    )
    assert [verdict for _, _, verdict, _ in summary.failed] == ["failed", "failed"]
    assert all("sftp" in detail for *_, detail in summary.failed)
    assert not any("Traceback" in line for line in lines)


def test_a_gpu_node_without_nvidia_smi_is_told_about_the_cpu_variant(
    ssh_nodes: list[SshNode], tmp_path: Path
) -> None:
    if Path("/usr/bin/nvidia-smi").exists():
        pytest.skip("this machine has nvidia-smi: the check would pass")
    inventory = write_inventory(
        tmp_path / "cluster.yaml",
        ssh_nodes[:1],
        defaults={"devices": 1, "python": sys.executable, "container": {"variant": "gpu"}},
    )
    runtime = ProcessRuntime(inventory)
    checks = run_preflight(
        [Remote(node) for node in runtime.inventory.nodes], kind="process", framework="pytorch"
    )
    devices = next(check for check in checks if check.name == "devices")
    assert not devices.ok and "variant: cpu" in devices.detail
