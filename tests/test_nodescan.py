"""The node scan (driver/cluster/nodescan.py, `dlperf nodes`): the slow node named."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from driver.cluster.nodescan import NodeResult, judge, table
from driver.frontend.cli import main
from tests.cluster_fixtures import SshNode, write_inventory


def test_the_node_under_the_median_is_slow_and_a_failed_node_is_named() -> None:
    results = [
        NodeResult("n0", (100.0, 101.0, 99.0)),
        NodeResult("n1", (100.5,)),
        NodeResult("n2", (90.0, 91.0)),  # 10% under the median
        NodeResult("n3", (99.0,)),
        NodeResult("n4", (), "failed: node n4: exit 1"),
    ]
    verdicts = {v.result.node: v for v in judge(results, slow_below=0.05)}
    assert {node: v.verdict for node, v in verdicts.items()} == {
        "n0": "ok", "n1": "ok", "n2": "SLOW", "n3": "ok", "n4": "FAILED",
    }  # fmt: skip
    assert verdicts["n2"].ratio == pytest.approx(90.5 / 99.5)  # median of the 4 that ran
    text = table(list(verdicts.values()))
    assert "more than 5% under the median" in text and "exit 1" in text
    # A looser threshold lets the same node pass.
    assert {v.verdict for v in judge(results[:4], slow_below=0.2)} == {"ok"}


def scan(inventory: Path, tmp_path: Path, *options: str) -> int:
    argv = ["nodes", "--inventory", str(inventory), "--runtime", "process", "--framework",
            "calibration", "--repeats", "2", "--results", str(tmp_path / "results")]  # fmt: skip
    for option in options:
        argv += ["--option", option]
    return main(argv)


def test_a_slowed_node_is_named_and_the_others_are_not(
    ssh_nodes: list[SshNode], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Two real sshd nodes run the calibration workload at the same time; on node1 each step
    lasts 1.25 x longer (the workload's slow-node option): the scan names node1 alone."""
    inventory = write_inventory(
        tmp_path / "cluster.yaml",
        ssh_nodes,
        defaults={"devices": 1, "python": sys.executable, "container": {"variant": "cpu"}},
    )
    assert scan(inventory, tmp_path, "slow_node=node1", "slowdown=1.25") == 1
    out = capsys.readouterr().out
    rows = {
        line.split("|")[1].strip(): line
        for line in out.splitlines()
        if line.startswith("| node") and "samples/s" not in line  # the rows, not the header
    }
    assert set(rows) == {"node0", "node1"}, out
    assert "| SLOW " in rows["node1"] and "| ok " in rows["node0"], out
    assert "nodes to look at: node1" in out
    # Each node's repeats are an ordinary session: records, logs, provenance of that node.
    [scan_root] = (tmp_path / "results").iterdir()
    records = sorted((scan_root / "node1").glob("cases/**/record.json"))
    assert len(records) == 2
    record = json.loads(records[0].read_text())
    assert record["measurement"]["throughput"] == pytest.approx(32 / 0.025, rel=0.01)
    assert (scan_root / "node0" / "provenance" / "node0.json").exists()


def test_even_nodes_are_all_within_range(
    ssh_nodes: list[SshNode], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    inventory = write_inventory(
        tmp_path / "cluster.yaml",
        ssh_nodes,
        defaults={"devices": 1, "python": sys.executable, "container": {"variant": "cpu"}},
    )
    assert scan(inventory, tmp_path) == 0
    out = capsys.readouterr().out
    assert "every node within range" in out and "SLOW" not in out


def test_a_bad_threshold_or_session_is_refused(
    ssh_nodes: list[SshNode], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    inventory = write_inventory(tmp_path / "cluster.yaml", ssh_nodes)
    with pytest.raises(SystemExit):
        main(["nodes", "--inventory", str(inventory), "--slow-below", "5"])
    assert "must be between 0 and 1" in capsys.readouterr().err
    assert main(["nodes", "--inventory", str(inventory), "--runtime", "process",
                 "--framework", "calibration", "--session", "../x"]) == 2  # fmt: skip
    assert "--session" in capsys.readouterr().err


def test_a_real_framework_scans_its_matrix_case_on_one_device() -> None:
    import argparse

    from driver.core.matrix import MatrixError
    from driver.frontend.cluster_cli import scan_case

    args = argparse.Namespace(framework="PyTorch", model="resnet50", profile="cpu-smoke",
                              repeats=2, option=[("channels_last", True)])  # fmt: skip
    case = scan_case(args, "process")
    assert (case.framework, case.model, case.topology.label) == ("pytorch", "resnet50", "1n1g")
    assert case.repeats == 2 and case.options["channels_last"] is True
    with pytest.raises(MatrixError, match="--model"):
        scan_case(argparse.Namespace(**{**vars(args), "model": "gpt9"}), "process")


def test_ctrl_c_stops_every_nodes_repeat_and_leaves_nothing_running(
    ssh_nodes: list[SshNode], tmp_path: Path
) -> None:
    import signal
    import subprocess
    import time

    from driver.runtimes.ssh import session_label
    from tests.cluster_fixtures import processes_with_env

    inventory = write_inventory(
        tmp_path / "cluster.yaml",
        ssh_nodes,
        defaults={"devices": 1, "python": sys.executable, "container": {"variant": "cpu"}},
    )
    root = tmp_path / "results" / "scan"
    labels = {node: session_label(root / node) for node in ("node0", "node1")}
    head = subprocess.Popen(
        [sys.executable, "-m", "driver.frontend.cli", "nodes", "--inventory", str(inventory),
         "--runtime", "process", "--framework", "calibration", "--option", "step_time=0.5",
         "--results", str(tmp_path / "results"), "--session", "scan"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not all(processes_with_env(f"DLPERF_RUN_ID=dlperf-{labels[n]}") for n in labels):
            assert head.poll() is None and time.monotonic() < deadline, head.stdout.read()
            time.sleep(0.2)
        head.send_signal(signal.SIGINT)
        out, _ = head.communicate(timeout=90)
    finally:
        head.kill()
    assert head.returncode == 130, out
    assert "node scan interrupted" in out
    def describe(pids: list[int]) -> str:
        return "; ".join(
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            for pid in pids if Path(f"/proc/{pid}").exists()
        )

    for node, label in labels.items():
        left = processes_with_env(f"DLPERF_RUN_ID=dlperf-{label}")
        assert not left, (node, describe(left), out)
        [record] = (root / node).glob("cases/**/record.json")
        assert json.loads(record.read_text())["verdict"] == "interrupted"
