"""Pre-flight against real sshd nodes: it checks what the run will use and names the fix, and a
node that fails it ends its cases with a verdict while the matrix goes on."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from driver.cluster.inventory import load_inventory
from driver.cluster.preflight import (
    GPU_QUERY,
    check_devices,
    container_gpus,
    devices_check,
    failures,
    parse_gpus,
    run_preflight,
)
from driver.cluster.remote import Remote, Result
from driver.core.runner import run_cases
from driver.core.selftest import calibration_cases
from driver.frameworks.base import FRAMEWORKS
from driver.frameworks.calibration import CALIBRATION
from driver.model.results import Session
from driver.plugins import load_all
from driver.runtimes.ssh.runtime import ProcessRuntime
from tests.cluster_fixtures import SshNode, free_port, write_inventory


def process_inventory(
    tmp_path: Path, nodes: list[SshNode], *, variant: str = "cpu", **defaults: object
) -> Path:
    """An inventory of ``nodes`` for the process runtime, one device each, this Python."""
    merged = {"devices": 1, "python": sys.executable, "container": {"variant": variant}}
    return write_inventory(tmp_path / "cluster.yaml", nodes, defaults={**merged, **defaults})


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


def test_a_node_without_sftp_passes_preflight_and_runs(
    node_without_sftp: SshNode, tmp_path: Path
) -> None:
    """The kit sends its code on a command's stdin and reads logs from a command's stdout, so a
    hand-made node whose sshd has no SFTP subsystem is a node like any other."""
    inventory = process_inventory(tmp_path, [node_without_sftp])
    runtime = ProcessRuntime(inventory)
    checks = run_preflight(runtime.remotes, engine=lambda _remote: None, framework="calibration")
    assert failures(checks) == []
    assert "sftp" not in [check.name for check in checks]
    cases = calibration_cases(0.002, 8, ["1n1g"], repeats=1, measured_steps=3)
    summary = run_cases(cases, Session.open(tmp_path / "s"), runtime, printer=lambda _: None)
    assert summary.ok and summary.failed == []


def test_failing_preflight_is_a_verdict_per_case_and_the_matrix_goes_on(
    node_without_sftp: SshNode, tmp_path: Path
) -> None:
    inventory = process_inventory(
        tmp_path, [node_without_sftp], devices=2, python=str(tmp_path / "no-such-python")
    )
    cases = calibration_cases(0.002, 8, ["1n1g", "1n2g"], repeats=1, measured_steps=3)
    lines: list[str] = []
    summary = run_cases(
        cases, Session.open(tmp_path / "s"), ProcessRuntime(inventory), printer=lines.append
    )
    assert [verdict for _, _, verdict, _ in summary.failed] == ["failed", "failed"]
    assert all("python" in detail and "no-such-python" in detail for *_, detail in summary.failed)
    assert not any("Traceback" in line for line in lines)


def test_a_gpu_node_without_nvidia_smi_is_told_about_the_cpu_variant(
    ssh_nodes: list[SshNode], tmp_path: Path
) -> None:
    if Path("/usr/bin/nvidia-smi").exists():
        pytest.skip("this machine has nvidia-smi: the check would pass")
    inventory = process_inventory(tmp_path, ssh_nodes[:1], variant="gpu")
    runtime = ProcessRuntime(inventory)
    checks = run_preflight(
        [Remote(node) for node in runtime.inventory.nodes],
        engine=lambda _remote: None,
        framework="pytorch",
    )
    devices = next(check for check in checks if check.name == "devices")
    assert not devices.ok and "variant: cpu" in devices.detail


# -- the devices check: one rule for every topology ------------------------------------------


def test_ranks_that_need_no_device_pass_on_any_node_with_the_facts() -> None:
    check = devices_check("n0", "cpu", 2, "", 16, "calibration")
    assert check.ok and check.found == 2
    assert "2 CPUs" in check.detail and "need no device of their own" in check.detail
    # No GPU at all: still fine for a workload that sleeps, and the reason is kept.
    why = f"{GPU_QUERY} failed: not found"
    check = devices_check("n0", "gpu", None, why, 8, "calibration")
    assert check.ok and why in check.detail


def test_a_real_framework_oversubscribing_a_node_fails_with_the_fix() -> None:
    check = devices_check("n0", "cpu", 2, "", 8, "pytorch")
    assert not check.ok
    assert "2 CPUs (one training process each); 8 needed" in check.detail
    assert "at most 2 per node" in check.detail  # the fix: a topology that fits
    assert "dlperf selftest --topologies" in check.detail  # or rehearse the shape
    assert devices_check("n0", "gpu", 8, "", 8, "pytorch").ok
    gpu = devices_check("n0", "gpu", 4, "", 8, "pytorch")
    assert not gpu.ok and "4 GPUs visible to nvidia-smi; 8 needed" in gpu.detail
    missing = devices_check("n0", "gpu", None, f"{GPU_QUERY} failed: x", 1, "pytorch")
    assert not missing.ok and "variant: cpu" in missing.detail


# -- the GPUs: the node's list (index and UUID) against the container's and the case's ----------
def uuid(index: int) -> str:
    return f"GPU-{index:08x}-1b2c-4d5e-8f90-{index:012x}"


def listing(gpus: int, unreadable: tuple[int, ...] = ()) -> str:
    """What GPU_QUERY prints on a node of ``gpus`` GPUs; nvidia-smi prints a complaint instead
    of the row of a GPU it cannot read."""
    return "".join(
        f"Unable to determine the device handle for GPU 0000:{i:02X}:00.0: Unknown Error\n"
        if i in unreadable
        else f"{i}, {uuid(i)}\n"
        for i in range(gpus)
    )


class ShellRemote:
    """A node's shell without the SSH hop: the check's own command, run by ``sh`` with a
    stand-in ``nvidia-smi`` first on PATH (a GPU node cannot be had here; the sshd-backed
    Remote runs the same command string, see the tests above)."""

    def __init__(self, node: object, folder: Path, printed: str) -> None:
        self.node = node
        folder.mkdir(parents=True, exist_ok=True)
        smi = folder / "nvidia-smi"
        (folder / "listing").write_text(printed)
        smi.write_text(
            "#!/bin/sh\n"
            f'[ "$*" = "{GPU_QUERY.removeprefix("nvidia-smi ")}" ] || exit 9\n'
            f"cat {folder / 'listing'}\n"
        )
        smi.chmod(0o755)
        self.env = {"PATH": f"{folder}:/usr/bin:/bin"}

    def run(self, command: str, timeout: float | None = 60) -> Result:
        done = subprocess.run(
            ["sh", "-c", command], capture_output=True, text=True, env=self.env, timeout=timeout,
            check=False,
        )  # fmt: skip
        return Result(done.returncode, done.stdout, done.stderr)


def gpu_devices(tmp_path: Path, printed: str, gpus: str | None, kind: str = "docker",
                needed: int = 2) -> dict[str, object]:  # fmt: skip
    """The devices check of a GPU node whose container gets ``--gpus <gpus>`` (inventory)."""
    container: dict[str, object] = {"variant": "gpu"} | ({"gpus": gpus} if gpus else {})
    path = tmp_path / "cluster.yaml"
    node = {"name": "g0", "address": "10.0.0.1", "devices": needed, "container": container}
    path.write_text(json.dumps({"nodes": [node]}))
    remote = ShellRemote(load_inventory(path).nodes[0], tmp_path / "bin", printed)
    request = remote.node.container.gpus if kind == "docker" else None  # process: every GPU
    return check_devices(remote, needed, request, "pytorch").__dict__  # type: ignore[arg-type]


def test_the_container_s_gpus_are_found_in_the_node_s_list_by_index_or_uuid(
    tmp_path: Path,
) -> None:
    every = gpu_devices(tmp_path, listing(8), "all")
    assert every["ok"] and every["found"] == 8
    assert every["gpus"] == tuple(f"{i}={uuid(i)}" for i in range(8))
    assert f"(the case's: 0={uuid(0)}, 1={uuid(1)}); 2 needed" in str(every["detail"])
    # A count is docker's GPUs 0..N-1; device= names them by index or UUID, in PCI order.
    assert gpu_devices(tmp_path, listing(8), "3")["gpus"] == tuple(
        f"{i}={uuid(i)}" for i in range(3)
    )
    named = gpu_devices(tmp_path, listing(8), f"device={uuid(6)},2")
    assert named["ok"] and named["gpus"] == (f"2={uuid(2)}", f"6={uuid(6)}")
    # The process runtime gives the case every GPU of the node, whatever container.gpus says.
    assert gpu_devices(tmp_path, listing(4), "device=1", kind="process")["found"] == 4


def test_gpus_the_node_does_not_list_fail_with_the_list_and_the_fix(tmp_path: Path) -> None:
    unknown = gpu_devices(tmp_path, listing(4), f"device=3,7,{uuid(9)}")
    assert not unknown["ok"] and unknown["found"] is None
    assert f"names GPU(s) 7, {uuid(9)} that this node does not list" in str(unknown["detail"])
    assert f"it lists 0={uuid(0)}, 1={uuid(1)}, 2={uuid(2)}, 3={uuid(3)}" in str(unknown["detail"])
    too_few = gpu_devices(tmp_path, listing(8), "device=0", needed=2)
    assert not too_few["ok"] and "1 GPUs visible to nvidia-smi; 2 needed" in str(too_few["detail"])


def test_a_gpu_nvidia_smi_cannot_read_is_not_counted_as_a_gpu(tmp_path: Path) -> None:
    """8 lines for 8 GPUs, one of them nvidia-smi's complaint about GPU 5: a count passed it
    (and the case then used GPU 5); the list does not. Naming the healthy GPUs passes."""
    broken = gpu_devices(tmp_path, listing(8, unreadable=(5,)), "all")
    assert not broken["ok"]
    assert "nvidia-smi cannot read a GPU (Unable to determine the device handle for GPU " in str(
        broken["detail"]
    )
    assert "container.gpus: device=" in str(broken["detail"])
    assert not gpu_devices(tmp_path, listing(8, unreadable=(5,)), "8")["ok"]
    healthy = gpu_devices(tmp_path, listing(8, unreadable=(5,)), "device=0,1")
    assert healthy["ok"] and healthy["gpus"] == (f"0={uuid(0)}", f"1={uuid(1)}")
    assert not gpu_devices(tmp_path, listing(8, unreadable=(5,)), "device=5")["ok"]


def test_the_gpu_listing_is_parsed_row_by_row() -> None:
    gpus, unreadable = parse_gpus(f"1, {uuid(1)}\n0, {uuid(0)}\n\nNo devices were found\n")
    assert [str(gpu) for gpu in gpus] == [f"0={uuid(0)}", f"1={uuid(1)}"]
    assert unreadable == ["No devices were found"]
    assert container_gpus([], [], "all") == ([], "")
    chosen, why = container_gpus(gpus, [], "device=0,0," + uuid(0))
    assert chosen is not None and [gpu.index for gpu in chosen] == [0] and why == ""


def node_cpus() -> int:
    """What `nproc` says on the loopback nodes (the same host)."""
    return int(subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout)


def shapes_beyond_the_cpus() -> list[str]:
    """1n1g, then one and two nodes with more ranks per node than the node has CPUs."""
    per_node = node_cpus() + 1
    return ["1n1g", f"1n{per_node}g", f"2n{2 * per_node}g"]


def test_the_calibration_workload_passes_preflight_at_every_topology(
    ssh_nodes: list[SshNode], tmp_path: Path
) -> None:
    """The shape of the real cluster rehearsed on small nodes: pre-flight passes each of them,
    and says why (before: 1n8g ran unchecked and 2n16g failed with '2 CPUs; 8 needed')."""
    inventory = process_inventory(tmp_path, ssh_nodes[:2])
    shapes = shapes_beyond_the_cpus()
    cases = calibration_cases(0.002, 8, shapes, repeats=1, measured_steps=3)
    session = Session.open(tmp_path / "s")
    summary = run_cases(cases, session, ProcessRuntime(inventory), printer=lambda _line: None)
    assert summary.ok and summary.finished == len(shapes), summary.failed
    facts = json.loads((session.root / "provenance" / "node1.json").read_text())
    devices = next(c for c in facts["preflight"] if c["name"] == "devices")
    assert devices["ok"] and "need no device of their own" in devices["detail"]


def test_a_real_framework_is_checked_the_same_way_at_every_topology(
    ssh_nodes: list[SshNode], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workload whose ranks each take a CPU (the calibration workload declared as a real
    framework): the first case fits and runs; every later case with more ranks per node than
    CPUs fails pre-flight with the same message, also on the node already prepared (before,
    1n8g after 1n1g reused the first pre-flight and was never checked)."""
    load_all()
    monkeypatch.setitem(
        FRAMEWORKS._entries, "calibration", replace(CALIBRATION, occupies_device=True)
    )
    inventory = process_inventory(tmp_path, ssh_nodes[:2])
    shapes = shapes_beyond_the_cpus()
    cases = calibration_cases(0.002, 8, shapes, repeats=1, measured_steps=3)
    summary = run_cases(
        cases, Session.open(tmp_path / "s"), ProcessRuntime(inventory), printer=lambda _l: None
    )
    assert summary.finished == 1  # 1n1g
    failed = {
        case_id.split("/")[2]: (verdict, detail) for case_id, _, verdict, detail in summary.failed
    }
    assert sorted(failed) == sorted(shapes[1:]), summary.failed
    cpus, per_node = node_cpus(), node_cpus() + 1
    for verdict, detail in failed.values():
        assert verdict == "failed"
        assert f"{cpus} CPUs (one training process each); {per_node} needed" in detail
        assert f"at most {cpus} per node" in detail


# -- one command over the node's connection (Remote.run), as pre-flight and the runtimes use it --
@pytest.fixture
def remote(ssh_nodes: list[SshNode], tmp_path: Path) -> Iterator[Remote]:
    inventory = write_inventory(tmp_path / "cluster.yaml", ssh_nodes[:1], defaults={"devices": 1})
    remote = ProcessRuntime(inventory).remotes[0]
    try:
        yield remote
    finally:
        remote.close()


def test_a_command_gives_its_exit_code_and_both_streams_apart(remote: Remote) -> None:
    result = remote.run("echo out; echo err >&2; exit 3")
    assert (result.code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert remote.run_argv(["printf", "%s", "a b; $(x)"]).stdout == "a b; $(x)"


def test_output_beyond_the_channel_window_comes_back_whole(remote: Remote) -> None:
    # 8 MiB on stdout and 3 MiB on stderr, both beyond paramiko's 2 MiB window: the command
    # must neither block on an unread stream nor lose a byte.
    script = "head -c 3145728 /dev/zero | tr '\\0' e >&2; head -c 8388608 /dev/zero | tr '\\0' o"
    result = remote.run(script, timeout=60)
    assert result.ok and len(result.stdout) == 8 << 20 and len(result.stderr) == 3 << 20


def test_a_command_past_its_timeout_is_exit_124_and_the_connection_stays(remote: Remote) -> None:
    result = remote.run("sleep 30", timeout=0.5)
    assert result.code == 124 and "timed out after 0.5 s" in result.stderr
    assert remote.run("echo again").stdout == "again\n"
    assert remote.connections_opened == 1


def test_a_command_reading_stdin_sees_its_end(remote: Remote) -> None:
    assert remote.run("cat; echo done", timeout=10).stdout == "done\n"
