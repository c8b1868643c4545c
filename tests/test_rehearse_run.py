"""``dlperf run --simulated-hosts``: a real matrix case on simulated hosts of this machine.

The real test runs OneFlow ResNet-50 2n2g (tiny shape) through the CLI on two simulated hosts,
each with its own address: the shape OneFlow's launcher cannot run on loopback "nodes" (it tells
nodes apart by the address ranks connect from). Needs root, iproute2 and sshd (skips, or fails
under DLPERF_REQUIRE_REAL=1), and the OneFlow venv. The refusals need none of them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from driver.frontend.cli import main
from driver.model.results import Session
from driver.testbed import rehearse
from driver.testbed.namespaces import TAG, SimulatedHostsError
from driver.testbed.simhosts import SimulatedHosts, missing_requirements
from tests.conftest import require_real

ONEFLOW_2N2G = [
    "run", "--framework", "oneflow", "--model", "resnet50", "--profile", "cpu-smoke",
    "--variant", "eager", "--amp", "off", "--nodes", "2", "--gpus", "1", "--batch", "2",
    "--option", "image_size=32", "--option", "num_classes=10",
    "--repeats", "1", "--warmup-steps", "1", "--measured-steps", "2",
]  # fmt: skip


def needs_simulated_hosts() -> None:
    why = missing_requirements(sshd=True)
    if why:
        require_real(why)


def our_hosts_left() -> list[str]:
    """Namespaces and links this process's simulated hosts would leave behind."""
    prefix = f"{TAG}{os.getpid()}"
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    names = (f"{prefix}-", f"{prefix}h")  # namespaces <prefix>-<host>, the link <prefix>h
    return [line for line in (netns + links).splitlines() if any(n in line for n in names)]


def header_hostnames(repeat_dir: Path) -> dict[int, str]:
    """rank -> the hostname its header gives, from every node's log."""
    found = {}
    for log in sorted(repeat_dir.glob("node*.log")):
        for line in log.read_text(errors="replace").splitlines():
            start = line.find('{"')
            if start >= 0 and '"dlperf": "header"' in line:
                header = json.loads(line[start:])
                found[int(header["rank"])] = header["hostname"]
    return found


# -- refusals: one line with the fix, exit 2, nothing made ---------------------------------------


def test_without_root_it_refuses_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(
        rehearse,
        "missing_requirements",
        lambda **_: "simulated hosts need root (network, mount and time namespaces): run as root",
    )
    code = main([*ONEFLOW_2N2G, "--simulated-hosts", "--results", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: --simulated-hosts: simulated hosts need root") and "run as" in err
    assert not list(tmp_path.iterdir()) and our_hosts_left() == []


def test_with_an_inventory_it_refuses(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    inventory = Path(__file__).parents[1] / "examples" / "inventory-cpu.yaml"
    argv = [*ONEFLOW_2N2G, "--simulated-hosts", "--inventory", str(inventory)]
    assert main([*argv, "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"drop --inventory {inventory}" in err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("runtime", ["local", "docker", "slurm"])
def test_with_another_runtime_it_refuses(
    runtime: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    argv = [*ONEFLOW_2N2G, "--simulated-hosts", "--runtime", runtime, "--results", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "through the process runtime" in err and f"drop --runtime {runtime}" in err


def test_loopback_refusal_of_oneflow_names_the_rehearsal(capsys: pytest.CaptureFixture) -> None:
    """`make resnet50-oneflow NODES=2` with no inventory: the fix names REHEARSE=on."""
    assert main([*ONEFLOW_2N2G, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "would hang" in err
    assert (
        "`make resnet50-oneflow NODES=2 GPUS=1 REHEARSE=on`" in err and "--simulated-hosts" in err
    )


def test_dry_run_plans_oneflow_on_the_hosts_own_addresses(capsys: pytest.CaptureFixture) -> None:
    """A dry run makes no host (no root needed) and shows each node's command at its own
    address, with the OneFlow venv's interpreter; the loopback refusal does not apply."""
    if not shutil.which("ip"):  # the hosts' free subnet is chosen from this machine's routes
        require_real("no ip (apt-get install iproute2)")
    assert main([*ONEFLOW_2N2G, "--simulated-hosts", "--dry-run"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.strip().startswith("[n")]
    assert [line.split()[0] for line in lines] == ["[n1]", "[n2]"]
    addresses = [line.split()[1].split("@")[1].split(":")[0] for line in lines]
    assert all(a.startswith("10.251.") for a in addresses) and len(set(addresses)) == 2
    assert all(".venvs/oneflow/bin/python -m driver.launchers.oneflow" in line for line in lines)
    assert all(f"--master_addr={addresses[0]} " in line for line in lines)
    assert our_hosts_left() == []


def test_hosts_that_do_not_start_are_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    def fails(_hosts: SimulatedHosts) -> None:
        raise SimulatedHostsError("sshd of n2: sshd exited:\nBad configuration option")

    monkeypatch.setattr(rehearse, "missing_requirements", lambda **_: None)
    monkeypatch.setattr(SimulatedHosts, "start", fails)
    monkeypatch.setattr(  # not the point
        "driver.frameworks.envs.ensure_env", lambda *_a, **_k: None
    )
    code = main([*ONEFLOW_2N2G, "--simulated-hosts", "--results", str(tmp_path), "--dry-run"])
    assert code == 0  # a dry run makes no host
    capsys.readouterr()
    code = main([*ONEFLOW_2N2G, "--simulated-hosts", "--results", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert "error: --simulated-hosts: sshd of n2: sshd exited: Bad configuration option" in err
    assert not list(tmp_path.iterdir())


# -- real simulated hosts ------------------------------------------------------------------------


@pytest.mark.parametrize("ending", [KeyboardInterrupt, RuntimeError])
def test_the_hosts_are_removed_on_ctrl_c_and_on_failure(
    ending: type[BaseException], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The run ends inside the runner (Ctrl-C: recorded and exit 130; an error: raised): the
    hosts existed while it ran and are gone after."""
    needs_simulated_hosts()
    seen: list[list[str]] = []

    def run_cases(*_args: object, **_kwargs: object) -> None:
        seen.append(our_hosts_left())
        raise ending("stopped inside the run")

    monkeypatch.setattr("driver.core.runner.run_cases", run_cases)
    monkeypatch.setattr("driver.frameworks.envs.ensure_env", lambda *_a, **_k: None)  # nothing runs
    argv = ["run", "--framework", "pytorch", "--model", "resnet50", "--profile", "cpu-smoke",
            "--nodes", "2", "--gpus", "1", "--simulated-hosts", "--results", str(tmp_path),
            "--session", "s"]  # fmt: skip
    if ending is KeyboardInterrupt:
        assert main(argv) == 130
    else:
        with pytest.raises(RuntimeError, match="stopped inside the run"):
            main(argv)
    assert len(seen) == 1 and len(seen[0]) >= 3  # two hosts' namespaces, the bridge's, a link
    assert our_hosts_left() == []


def test_oneflow_2n2g_runs_on_two_simulated_hosts(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    needs_simulated_hosts()
    from tests.real_frameworks import framework_env

    framework_env("oneflow")
    argv = [*ONEFLOW_2N2G, "--simulated-hosts", "--results", str(tmp_path), "--session", "r"]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, out + err
    session = Session(tmp_path / "r")
    [(case, record, directory)] = list(session.records())
    assert case.topology.label == "2n2g" and record.verdict == "ok" and record.throughput > 0
    # Each rank on its own host: their hostnames differ, one rank per simulated host.
    assert header_hostnames(directory) == {0: "n1", 1: "n2"}
    assert record.header["framework"] == "oneflow"
    assert sorted(record.extra["provenance"]) == ["n1", "n2"]
    # The record says where it ran: a simulated cluster, on this one machine.
    assert record.extra["cluster"] == rehearse.cluster_name()
    assert record.extra["cluster"].startswith("simulated-hosts-on-")
    meta = session.meta["simulated_hosts"]
    assert sorted(meta["hosts"]) == ["n1", "n2"] and "one machine" in meta["note"]
    assert (session.root / "simulated-hosts.yaml").is_file()
    assert "oneflow" in record.extra["provenance"]["n2"]["packages"]
    assert our_hosts_left() == []


def test_a_killed_rehearsals_scratch_folder_is_swept_by_the_next(tmp_path: Path) -> None:
    """A rehearsal killed with SIGKILL runs no cleanup: its scratch folder (keys, inventory)
    stays. The next one removes it, by its creator's pid being gone; a live one's is kept."""
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid is free now (reused only after a wrap-around)
    dead = tmp_path / f"{rehearse.SCRATCH_PREFIX}{gone.pid}-abc123"
    (dead / "client").mkdir(parents=True)
    (dead / "client" / "id_ed25519").write_text("key\n")
    live = tmp_path / f"{rehearse.SCRATCH_PREFIX}{os.getppid()}-def456"
    live.mkdir()
    other = tmp_path / f"{rehearse.SCRATCH_PREFIX}older-kit"  # no pid: never ours to remove
    other.mkdir()
    assert rehearse.sweep_stale_scratch(tmp_path) == [str(dead)]
    assert not dead.exists() and live.exists() and other.exists()
    assert rehearse.sweep_stale_scratch(tmp_path) == []


def test_more_hosts_than_one_machine_makes_are_refused_on_a_dry_run_too(
    capsys: pytest.CaptureFixture,
) -> None:
    argv = ["run", "--framework", "oneflow", "--model", "resnet50", "--profile", "cpu-smoke",
            "--nodes", "201", "--simulated-hosts", "--dry-run"]  # fmt: skip
    assert main(argv) == 2
    assert "--simulated-hosts: the selection's largest case has 201 nodes" in (
        capsys.readouterr().err
    )
