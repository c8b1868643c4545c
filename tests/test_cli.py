"""The dlperf command line: dry runs, errors, reports."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from driver.frontend.cli import main


def test_dry_run_prints_cases_and_torchrun_commands(capsys: pytest.CaptureFixture) -> None:
    code = main(
        [
            "run",
            "--framework",
            "pytorch",
            "--model",
            "resnet50",
            "--profile",
            "dlperf",
            "--nodes",
            "1",
            "--gpus",
            "8",
            "--batch",
            "128",
            "--amp",
            "off",
            "--dry-run",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "resnet50/pytorch/1n8g/bs128/fp32/synthetic" in out
    assert "torch.distributed.run" in out and "--nproc-per-node=8" in out


def test_dry_run_on_the_process_runtime_shows_what_each_node_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    example = Path(__file__).parents[1] / "examples" / "inventory-cpu.yaml"
    key = tmp_path / "id_ed25519"  # the inventory check wants the key file to exist
    key.write_text("")
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(example.read_text().replace("~/.ssh/id_ed25519", str(key)))
    code = main(
        ["run", "--framework", "pytorch", "--model", "resnet50", "--profile", "cpu-smoke",
         "--variant", "default", "--amp", "off", "--nodes", "2", "--gpus", "2",
         "--runtime", "process", "--inventory", str(inventory), "--dry-run"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    lines = [line.strip() for line in out.splitlines() if line.startswith("    [")]
    assert [line.split(" $ ")[0] for line in lines] == [
        "[cpu01] bench@192.168.1.21:22",
        "[cpu02] bench@192.168.1.22:22",
    ]
    for rank, line in enumerate(lines):
        # The inventory's interpreter for pytorch, the node's copy of the kit, its rank.
        assert " && cd /var/tmp/dlperf/code/" in line.split(" $ ")[1]
        assert " /opt/venvs/pytorch/bin/python -m torch.distributed.run " in line
        assert f"--node-rank={rank} " in line and "GLOO_SOCKET_IFNAME=eth0 " in line


def test_oneflow_on_several_nodes_without_an_inventory_refuses_with_the_fix(
    capsys: pytest.CaptureFixture,
) -> None:
    """`make resnet50-oneflow NODES=4` with no inventory: four loopback "nodes", on which
    OneFlow hangs; refused before anything starts, as a dry run shows."""
    code = main(["run", "--framework", "oneflow", "--model", "resnet50", "--nodes", "4",
                 "--dry-run"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 2
    assert "would hang" in captured.err and "INVENTORY=cluster.yaml" in captured.err
    assert "Traceback" not in captured.err
    assert "oneflow.distributed.launch" not in captured.out  # no command was planned
    # All the processes on one node, the fix the message gives for this host, is planned.
    assert main(["run", "--framework", "oneflow", "--model", "resnet50", "--nodes", "1",
                 "--dry-run"]) == 0  # fmt: skip
    capsys.readouterr()


def test_oneflow_on_an_inventory_of_real_hosts_is_planned_on_loopback_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    example = Path(__file__).parents[1] / "examples" / "inventory-cpu.yaml"
    key = tmp_path / "id_ed25519"
    key.write_text("")
    real = tmp_path / "real.yaml"
    real.write_text(example.read_text().replace("~/.ssh/id_ed25519", str(key)))
    loopback = tmp_path / "loopback.yaml"
    loopback.write_text(real.read_text().replace("192.168.1.2", "127.0.0."))
    argv = ["run", "--framework", "oneflow", "--model", "resnet50", "--profile", "cpu-smoke",
            "--nodes", "2", "--gpus", "2", "--runtime", "process", "--dry-run"]  # fmt: skip
    assert main([*argv, "--inventory", str(real)]) == 0
    out = capsys.readouterr().out
    assert "[cpu02] bench@192.168.1.22:22" in out and "oneflow.distributed.launch" in out
    assert main([*argv, "--inventory", str(loopback)]) == 2
    assert "2 of the 2 nodes are on loopback (127.0.0.1, 127.0.0.2)" in capsys.readouterr().err


def test_bad_matrix_is_a_clear_error_and_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    bad = tmp_path / "m.yaml"
    bad.write_text("framework: pytorch\nsuites: [{model: resnet50, batch_size: 0}]\n")
    code = main(
        ["run", "--matrix", str(bad), "--profile", "dlperf", "--results", str(tmp_path / "r")]
    )
    assert code == 2
    assert "suites[0].batch_size[0]" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_selftest_command_reports_every_topology(capsys: pytest.CaptureFixture) -> None:
    # The error bound itself is asserted in test_runner (median of 3); here the command's
    # output and exit code must agree with each other.
    code = main(["selftest", "--step-time", "0.01", "--repeats", "1"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("selftest")]
    assert [line.split(":")[0] for line in lines] == [
        "selftest 1n1g",
        "selftest 1n2g",
        "selftest 2n2g",
        "selftest on the local runtime",
    ]
    assert all("driver overhead" in line for line in lines)
    assert code == (0 if all("(ok," in line for line in lines[:3]) else 1)


@pytest.mark.slow  # 14 s on the 2-core AVX2 EPYC, in make test
def test_selftest_at_sixteen_ranks_on_two_nodes_stays_within_five_hundredths_of_a_percent(
    capsys: pytest.CaptureFixture,
) -> None:
    """A cluster's shape rehearsed on the local runtime (`--topologies`): with 8-32 ranks on
    this 2-core host the error was 0.07-0.56% before the calibration's barrier and shifted
    deadlines (the slowest rank's window ended while its peers started or exited, 5-15 ms
    late); now 0.001-0.01% on a calm machine. With other jobs saturating the machine the
    slowest of 16 ranks may still wake 1-8 ms late at the window's end: that is the host's
    lateness, which the selftest prints apart from the kit's error (its truth is what the
    workload delivered by its own clock). What the barrier and the shifted deadlines do is
    tested in tests/test_calibration.py."""
    code = main(["selftest", "--topologies", "2n16g", "--repeats", "3", "--step-time", "0.02"])
    out = capsys.readouterr().out
    errors = {
        match[1]: float(match[2]) / 100
        for match in re.finditer(r"^selftest (\S+): .* error ([0-9.]+)%", out, re.MULTILINE)
    }
    assert set(errors) == {"2n16g"}, out
    assert errors["2n16g"] < 0.0005, out
    assert code == 0, out


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1n8g,2n9g", "'2n9g': total devices must be a positive multiple of nodes"),
        ("1n8g,eight", "'eight' is not of the form <nodes>n<total devices>g"),
        ("1n8g,1n8g", "a topology is named twice"),
        (",", "give at least one topology"),
    ],
)
def test_selftest_refuses_a_bad_topology_list_before_starting_anything(
    capsys: pytest.CaptureFixture, value: str, message: str
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["selftest", "--topologies", value])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--topologies" in err and message in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGINT-from-a-background-shell"])
def test_a_stop_signal_on_the_head_records_interrupted_and_leaves_no_process(
    tmp_path: Path, stop: str
) -> None:
    """SIGTERM, and SIGINT to a run that a shell started in the background (SIGINT ignored and
    inherited), both end the repeat as interrupted with every rank gone."""
    import json
    import signal
    import subprocess
    import sys
    import time

    # A step time of this run's own (0.05 s and six more digits, the last never 0 so that it
    # reads back as written), so that the leftover search below finds this run's ranks only,
    # not those of another run on the machine.
    step_time = f"0.05{time.time_ns() % 10**5:05d}7"

    def as_a_background_job() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        "framework: calibration\n"
        "defaults: {warmup_steps: 1, measured_steps: 500, repeats: 1}\n"
        "suites: [{model: calibration, batch_size: 8, topology: 1n2g}]\n"
    )
    head = subprocess.Popen(
        [sys.executable, "-m", "driver.frontend.cli", "run", "--matrix", str(matrix),
         "--profile", "dlperf", "--results", str(tmp_path / "r"), "--session", "s",
         "--option", f"step_time={step_time}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=as_a_background_job if stop.startswith("SIGINT") else None,
    )  # fmt: skip
    logs = tmp_path / "r" / "s" / "cases"
    deadline = time.monotonic() + 30
    while not any(logs.rglob("node0.log")) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    head.send_signal(signal.SIGINT if stop.startswith("SIGINT") else signal.SIGTERM)
    out, _ = head.communicate(timeout=30)
    assert head.returncode == 130, out
    (record_path,) = logs.rglob("record.json")
    assert json.loads(record_path.read_text())["verdict"] == "interrupted"
    # The ranks' command lines carry this run's step time; none may be left running.
    leftovers = subprocess.run(
        ["pgrep", "-f", f"calibration/workload.py.*step_time={step_time}"],
        capture_output=True,
        text=True,
    )
    assert leftovers.stdout.strip() == "", leftovers.stdout


@pytest.mark.parametrize("name", ["20261123-120000-cpu-smoke", "run.1", "A_b-c"])
def test_a_session_is_a_name_under_results(name: str) -> None:
    from driver.frontend.args import check_session_name

    assert check_session_name(name) == name


@pytest.mark.parametrize("name", ["../x", "/abs/path", ".", "..", "a/b", ".hidden", "x\n", ""])
def test_a_session_path_is_refused_and_nothing_is_written(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    code = main(["run", "--profile", "cpu-smoke", "--results", str(tmp_path / "r"),
                 "--session", name])  # fmt: skip
    assert code == 2 and "--session" in capsys.readouterr().err
    assert not (tmp_path / "r").exists() and not any(tmp_path.iterdir())


@pytest.mark.frameworks  # makes or finds every environment
def test_envs_names_every_local_environment_and_refuses_an_unknown_one(
    capsys: pytest.CaptureFixture,
) -> None:
    from driver.frontend.commands.envs import local_environments

    known = local_environments()
    # Each framework with CPU requirements, and each upstream source released on PyPI.
    assert {"pytorch", "tensorflow", "paddle", "mxnet", "oneflow"} <= set(known)
    assert "tensorflow-models" in known
    assert main(["envs", "tensorflow-modles"]) == 2
    error = capsys.readouterr().err
    assert "'tensorflow-modles' is not an environment (did you mean 'tensorflow-models'?)" in error
    for blank in ("", " ", ",", "pytorch,"):  # never "every environment" (gigabytes)
        assert main(["envs", blank]) == 2
        out, error = capsys.readouterr()
        assert out == "" and f"envs: {blank!r} holds an empty environment name" in error
    assert main(["envs", "pytorch"]) == 0  # made once (here, or by `make envs` in CI)
    out = capsys.readouterr().out
    assert out.startswith("pytorch: ") and "/pytorch/bin/python" in out
    # MaxText's 1.4 GB on Python 3.12 is made only by name: every other one by `make envs`
    assert known["maxtext"].by_name_only  # type: ignore[attr-defined]
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    assert "maxtext: made only by name (1.4 GB on Python 3.12" in out
    assert "dlperf envs maxtext" in out and "\nmaxtext: /" not in "\n" + out
    assert all(f"\n{name}: /" in "\n" + out for name in known if name != "maxtext")


@pytest.mark.frameworks  # runs PyTorch from its environment
def test_python_points_the_local_runtime_at_an_existing_framework_install(
    capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    """`--python`: a machine's own interpreter with the framework (a GPU machine's python3)
    runs the scripts instead of .venvs/<framework>; one that lacks it is refused with the fix."""
    from driver.frameworks.base import FRAMEWORKS
    from driver.frameworks.envs import ensure_env
    from driver.plugins import load_all

    load_all()
    link = ensure_env(FRAMEWORKS.get("pytorch"), log=lambda _line: None)  # "the machine's"
    argv = ["run", "--framework", "pytorch", "--model", "resnet50", "--batch", "8",
            "--amp", "off", "--profile", "dlperf", "--dry-run"]  # fmt: skip
    assert main([*argv, "--python", str(link)]) == 0
    out = capsys.readouterr().out
    assert f" {link} PyTorch/benchmark/train.py" in out
    bare = tmp_path / "bare-python3"  # an interpreter without torch
    bare.symlink_to(Path(__file__).resolve().parents[1] / ".venv" / "bin" / "python")
    assert main([*argv, "--python", str(bare)]) == 2
    err = capsys.readouterr().err
    assert f"--python {bare}: cannot import torch" in err and "No module named 'torch'" in err
    assert main([*argv, "--python", str(tmp_path / "nothing")]) == 2
    assert "no such executable" in capsys.readouterr().err
    assert main([*argv, "--python", str(link), "--runtime", "slurm"]) == 2
    assert "--python goes with --runtime local" in capsys.readouterr().err
