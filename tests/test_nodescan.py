"""The node scan (driver/diagnose/nodescan.py, `dlperf nodes`): the slow node named, and the
pairs' all-reduce probe: the slow link named (4 simulated hosts, one host's NIC throttled with
tc)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from driver.diagnose.nodescan import (
    LinkVerdict,
    NodeResult,
    PairResult,
    judge,
    judge_links,
    pair_rounds,
    pair_table,
    ring_pairs,
    table,
)
from driver.frontend.cli import main
from tests.cluster_fixtures import SshNode, write_inventory
from tests.conftest import require_real

if TYPE_CHECKING:  # imported by pytest_plugins first, so pytest rewrites its asserts
    from driver.testbed.simhosts import SimulatedHosts
    from tests.slurm_fixtures import SlurmCluster

pytest_plugins = ["tests.slurm_fixtures"]  # simulated_hosts: 4 sshd hosts, own networks


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


def pairs_of(busbw: dict[str, float | None], failures: dict[str, str] | None = None) -> list:
    return [
        PairResult(tuple(name.split("+")), 1, value, 8_000_000 if value else None,  # type: ignore[arg-type]
                   (failures or {}).get(name, ""))
        for name, value in busbw.items()
    ]  # fmt: skip


def test_the_pairs_are_a_ring_in_rounds_of_disjoint_pairs() -> None:
    assert ring_pairs(["a"]) == [] and ring_pairs(["a", "b"]) == [("a", "b")]
    for count, rounds in ((3, 3), (4, 2), (5, 3), (8, 2), (9, 3)):
        nodes = [f"n{i}" for i in range(count)]
        pairs = ring_pairs(nodes)
        assert len(pairs) == count
        assert all(sum(node in pair for pair in pairs) == 2 for node in nodes)  # two pairs each
        planned = pair_rounds(pairs)
        assert len(planned) == rounds, planned
        assert sorted(p for members in planned for p in members) == sorted(pairs)
        for members in planned:  # a node in one pair of a round at most
            busy = [node for pair in members for node in pair]
            assert len(busy) == len(set(busy)), members


def test_a_node_whose_every_pair_is_slow_is_a_slow_link_and_its_neighbours_are_not() -> None:
    nodes = ["n1", "n2", "n3", "n4", "n5"]
    pairs = pairs_of({"n1+n2": 1.0, "n2+n3": 0.1, "n3+n4": 0.12, "n4+n5": 0.95, "n5+n1": 1.05})
    verdicts = {v.node: v for v in judge_links(nodes, pairs, slow_below=0.25)}
    assert {n: v.verdict for n, v in verdicts.items()} == {
        "n1": "ok", "n2": "ok", "n3": "SLOW link", "n4": "ok", "n5": "ok",
    }  # fmt: skip
    # reference: the median of the nodes' medians (1.025, 0.55, 0.11, 0.535, 1.0) = 0.55
    assert verdicts["n3"].median == pytest.approx(0.11)
    assert verdicts["n3"].ratio == pytest.approx(0.11 / 0.55)
    assert "every pair more than 25% under the median" in verdicts["n3"].detail
    # Three nodes: the slow node is in two of the three pairs, and is still named.
    three = pairs_of({"a+b": 1.0, "b+c": 0.2, "c+a": 0.25})
    assert [v.verdict for v in judge_links(["a", "b", "c"], three, 0.25)] == [
        "ok", "ok", "SLOW link"]  # fmt: skip
    # Even pairs within the threshold: nobody.
    even = pairs_of({"a+b": 1.0, "b+c": 0.9, "c+d": 0.85, "d+a": 1.1})
    assert {v.verdict for v in judge_links(["a", "b", "c", "d"], even, 0.25)} == {"ok"}


def test_one_pair_cannot_tell_which_node_and_a_failed_probe_is_named() -> None:
    [a, b] = judge_links(["a", "b"], pairs_of({"a+b": 0.01}), 0.25)
    assert (a.verdict, b.verdict) == ("one pair", "one pair") and not a.flagged
    assert a.median == pytest.approx(0.01) and a.ratio is None
    assert "a slow link could be either node's" in a.detail
    # n3's probes fail (torch missing there, say): n3 FAILED, its neighbours judged on the rest.
    why = "ProbeError: probe 2n2g: failed exit 1 on n3"
    pairs = pairs_of(
        {"n1+n2": 1.0, "n2+n3": None, "n3+n4": None, "n4+n1": 0.9},
        {"n2+n3": why, "n3+n4": why},
    )
    verdicts = {v.node: v for v in judge_links(["n1", "n2", "n3", "n4"], pairs, 0.25)}
    assert verdicts["n3"].verdict == "FAILED" and verdicts["n3"].flagged
    assert "n2+n3, n3+n4" in verdicts["n3"].detail
    assert verdicts["n2"].verdict == "ok" and "pair n2+n3 FAILED" in verdicts["n2"].detail
    text = pair_table(pairs)
    assert f"FAILED: {why}" in text and text.splitlines()[2].startswith("n1+n2 ")
    assert "|" not in text and "---" in text.splitlines()[1]  # a terminal's table, not Markdown
    # The node table: throughput columns beside the link columns, one row per node.
    results = [NodeResult(n, (100.0,)) for n in ("n1", "n2", "n3", "n4")]
    both = table(judge(results), links=list(verdicts.values()))
    header = both.splitlines()[0]
    assert "samples/s (median)" in header and "busbw GB/s (pairs' median)" in header
    assert " FAILED " in next(line for line in both.splitlines() if line.startswith("n3 "))
    pairs_only = table([], links=list(verdicts.values()))
    assert "samples/s" not in pairs_only and " SLOW" not in pairs_only
    assert isinstance(verdicts["n1"], LinkVerdict)


def interrupt_scan(args: list[str], started) -> str:  # noqa: ANN001
    """Run ``dlperf nodes`` with ``args``, press Ctrl-C once ``started()`` holds (its work is
    running on the nodes), and return its output; it must exit 130."""
    import signal
    import subprocess
    import time

    head = subprocess.Popen(
        [sys.executable, "-m", "driver.frontend.cli", "nodes", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not started():
            assert head.poll() is None and time.monotonic() < deadline, head.stdout.read()
            time.sleep(0.2)
        head.send_signal(signal.SIGINT)
        out, _ = head.communicate(timeout=90)
    finally:
        head.kill()
    assert head.returncode == 130, out
    return out


def scan(inventory: Path, tmp_path: Path, *options: str, pairs: bool = True) -> int:
    argv = ["nodes", "--inventory", str(inventory), "--runtime", "process", "--framework",
            "calibration", "--repeats", "2", "--results", str(tmp_path / "results")]  # fmt: skip
    for option in options:
        argv += ["--option", option]
    return main(argv + ([] if pairs else ["--no-pairs"]))


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
    assert scan(inventory, tmp_path, "slow_node=node1", "slowdown=1.25", pairs=False) == 1
    out = capsys.readouterr().out
    rows = node_rows(out)
    assert set(rows) == {"node0", "node1"}, out
    assert rows["node1"][4] == "SLOW" and rows["node0"][4] == "ok", out
    assert "nodes to look at: node1" in out
    # Each node's repeats are an ordinary session: records, logs, provenance of that node.
    [scan_root] = (tmp_path / "results").iterdir()
    records = sorted((scan_root / "node1").glob("cases/**/record.json"))
    assert len(records) == 2
    record = json.loads(records[0].read_text())
    assert record["measurement"]["throughput"] == pytest.approx(32 / 0.025, rel=0.01)
    assert (scan_root / "node0" / "provenance" / "node0.json").exists()


def torch_inventory(ssh_nodes: list[SshNode], tmp_path: Path) -> Path:
    """The nodes with the PyTorch environment the all-reduce probe needs, on loopback."""
    from tests.real_frameworks import framework_env

    python = {"default": sys.executable, "pytorch": framework_env("pytorch")}
    return write_inventory(
        tmp_path / "cluster.yaml",
        ssh_nodes,
        defaults={"devices": 1, "python": python, "interface": "lo",
                  "container": {"variant": "cpu"}},
    )  # fmt: skip


def test_even_nodes_are_all_within_range_and_one_pair_cannot_tell_which(
    ssh_nodes: list[SshNode], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Both halves by default: the 1n1g case, then the one pair's probe (two nodes: its figure
    is shown, no node is named for it)."""
    inventory = torch_inventory(ssh_nodes, tmp_path)
    assert scan(inventory, tmp_path) == 0
    out = capsys.readouterr().out
    assert "every node within range" in out and "SLOW" not in out
    rows = node_rows(out)
    assert set(rows) == {"node0", "node1"}, out
    for row in rows.values():
        assert row[4] == "ok" and row[7] == "one pair", out  # throughput verdict, link verdict
        assert "a slow link could be either node's" in row[8]
    [scan_root] = (tmp_path / "results").iterdir()
    result = json.loads((scan_root / "node0+node1" / "probes" / "allreduce-2n2g.json").read_text())
    assert result["world_size"] == 2 and result["nodes"] == 2 and result["busbw_gbps"] > 0
    assert float(rows["node0"][5]) == pytest.approx(result["busbw_gbps"], abs=1e-4)


def is_dashes(line: str) -> bool:
    return line.startswith("-") and not set(line) - {"-", " "}


def terminal_tables(out: str) -> list[list[list[str]]]:
    """Every plain-text table the command printed (a header, a line of dashes per column,
    rows until a line that is not one): each a list of rows, the header first, cut at the
    columns the dashes mark."""
    lines, tables = out.splitlines(), []
    for number, line in enumerate(lines):
        if not is_dashes(line) or number == 0:
            continue
        spans, start = [], 0
        for dashes in line.split(" "):
            if dashes:
                spans.append((start, start + len(dashes)))
            start += len(dashes) + 1
        table = []
        for at in range(number - 1, len(lines)):
            row = lines[at]
            if at == number:
                continue  # the dashes
            ends = not row.strip() or row.startswith(("nodes to look", "pairs whose", "every"))
            if ends or (at > number and at + 1 < len(lines) and is_dashes(lines[at + 1])):
                break  # the table's end, or the next table's header
            table.append([row[a:b].strip() for a, b in spans[:-1]] + [row[spans[-1][0] :].strip()])
        tables.append(table)
    return tables


def node_rows(out: str) -> dict[str, list[str]]:
    """The node table's rows by node: its cells (node first)."""
    [table] = [t for t in terminal_tables(out) if t[0][0] == "node"]
    return {row[0]: row for row in table[1:]}


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
    # The pairs' sizes are checked as the probe command's --sizes-mb; one half or the other.
    refusals = (
        (["--probe-sizes-mb", "1,,8"], "argument --probe-sizes-mb: expects comma-separated"),
        (["--probe-sizes-mb", "0"], "argument --probe-sizes-mb"),
        (["--probe-iters", "0"], "argument --probe-iters"),
        (["--no-pairs", "--pairs-only"], "--pairs-only: not allowed with argument --no-pairs"),
    )
    for bad, said in refusals:
        with pytest.raises(SystemExit):
            main(["nodes", "--inventory", str(inventory), *bad])
        assert said in capsys.readouterr().err


def test_a_failed_probe_is_a_failed_pair_named_with_why(
    ssh_nodes: list[SshNode], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """No torch where the probe runs (the inventory's PyTorch interpreter runs without its
    site-packages): the pair FAILED with why, both nodes FAILED, exit 1, no traceback."""
    without_torch = tmp_path / "python-without-torch"
    without_torch.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    without_torch.chmod(0o755)
    inventory = write_inventory(
        tmp_path / "cluster.yaml",
        ssh_nodes,
        defaults={"devices": 1, "python": {"default": sys.executable,
                                           "pytorch": str(without_torch)},
                  "interface": "lo", "container": {"variant": "cpu"}},
    )  # fmt: skip
    status = main(["nodes", "--inventory", str(inventory), "--runtime", "process",
                   "--pairs-only", "--results", str(tmp_path / "results")])  # fmt: skip
    captured = capsys.readouterr()
    assert status == 1 and "Traceback" not in captured.out + captured.err
    [pairs] = [t for t in terminal_tables(captured.out) if t[0][0] == "pair"]
    [row] = [row for row in pairs if row[0] == "node0+node1"]
    assert "FAILED: ProbeError: probe 2n2g: failed" in row[-1], captured.out
    rows = node_rows(captured.out)
    assert {node: row[3] for node, row in rows.items()} == {"node0": "FAILED", "node1": "FAILED"}
    assert "samples/s" not in captured.out  # --pairs-only: no 1n1g case
    assert "pairs whose probe failed: node0+node1" in captured.out
    assert "cannot import torch" in row[-1]  # the why: the runtime's check on every node


def test_a_real_framework_scans_its_matrix_case_on_one_device() -> None:
    import argparse

    from driver.core.matrix import MatrixError
    from driver.frontend.commands.nodes import scan_case

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
    from driver.runtimes.base import session_label
    from tests.cluster_fixtures import processes_with_env

    inventory = write_inventory(
        tmp_path / "cluster.yaml",
        ssh_nodes,
        defaults={"devices": 1, "python": sys.executable, "container": {"variant": "cpu"}},
    )
    root = tmp_path / "results" / "scan"
    labels = {node: session_label(root / node) for node in ("node0", "node1")}
    out = interrupt_scan(
        ["--inventory", str(inventory), "--runtime", "process", "--framework", "calibration",
         "--option", "step_time=0.5", "--results", str(tmp_path / "results"), "--session",
         "scan", "--no-pairs"],
        lambda: all(processes_with_env(f"DLPERF_RUN_ID=dlperf-{labels[n]}") for n in labels),
    )  # fmt: skip
    assert "node scan interrupted" in out

    def describe(pids: list[int]) -> str:
        return "; ".join(
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            for pid in pids
            if Path(f"/proc/{pid}").exists()
        )

    for node, label in labels.items():
        left = processes_with_env(f"DLPERF_RUN_ID=dlperf-{label}")
        assert not left, (node, describe(left), out)
        [record] = (root / node).glob("cases/**/record.json")
        assert json.loads(record.read_text())["verdict"] == "interrupted"


THROTTLE = "200mbit"  # 25 MB/s out of n3; gloo between two unthrottled hosts: ~0.6-1.1 GB/s here


def test_a_throttled_nic_is_named_a_slow_link_and_no_other_node(
    simulated_hosts: SimulatedHosts, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """4 simulated hosts (own network namespaces, an eth0 each into one bridge); n3's eth0
    sends at 200 Mbit/s (tc tbf in its namespace). `dlperf nodes` runs the calibration case on
    every host, then the probe on the ring n1+n2, n3+n4 | n2+n3, n4+n1: n3's two pairs run at
    the throttle's rate, its neighbours have one fast pair each: n3 alone is named. About 40 s
    on this 2-core machine (torch imported by torchrun and the probe on 2 hosts per pair)."""
    from driver.release.scaling import parse_probe_log
    from tests.real_frameworks import framework_env

    if not shutil.which("tc"):
        require_real("tc is missing: apt-get install iproute2")
    python = {"default": sys.executable, "pytorch": framework_env("pytorch")}
    inventory = simulated_hosts.write_inventory(
        tmp_path / "cluster.yaml",
        python=python,
        container={"variant": "cpu"},  # type: ignore[arg-type]
    )
    simulated_hosts.throttle("n3", THROTTLE)
    try:
        status = main(["nodes", "--inventory", str(inventory), "--runtime", "process",
                       "--framework", "calibration", "--repeats", "1", "--probe-sizes-mb", "1,8",
                       "--results", str(tmp_path / "results"), "--session", "scan"])  # fmt: skip
    finally:
        simulated_hosts.throttle("n3", "")
    out = capsys.readouterr().out
    print(out)  # the tables, for the docs' example (pytest -s)
    assert status == 1, out
    rows = node_rows(out)
    assert set(rows) == {"n1", "n2", "n3", "n4"}, out
    assert {node: row[7] for node, row in rows.items()} == {
        "n1": "ok", "n2": "ok", "n3": "SLOW link", "n4": "ok"}, out  # fmt: skip
    assert {row[4] for row in rows.values()} == {"ok"}, out  # the 1n1g case: nobody slow
    assert "nodes to look at: n3" in out
    # Each pair's probe log and result are in the scan's folder; the log gives the figure.
    root = tmp_path / "results" / "scan"
    busbw = {}
    for pair in ("n1+n2", "n2+n3", "n3+n4", "n4+n1"):
        stored = json.loads((root / pair / "probes" / "allreduce-2n2g.json").read_text())
        log = (root / pair / "probes" / "allreduce-2n2g" / "node0.log").read_text()
        assert parse_probe_log(log)["busbw_gbps"] == pytest.approx(stored["busbw_gbps"])
        assert stored["hostname"] == pair.split("+")[0]  # rank 0 on the pair's first host
        busbw[pair] = stored["busbw_gbps"]
    # The throttle is real: n3's pairs move at most 25 MB/s (2 ranks: busbw = algbw), and
    # the others more than 4 times that.
    assert max(busbw["n2+n3"], busbw["n3+n4"]) <= 0.025 * 1.05, busbw
    assert min(busbw["n1+n2"], busbw["n4+n1"]) > 4 * 0.025, busbw


def test_ctrl_c_during_the_pairs_stops_every_probe_and_leaves_nothing_running(
    ssh_nodes: list[SshNode], tmp_path: Path
) -> None:
    from driver.runtimes.base import session_label
    from tests.cluster_fixtures import processes_with_env

    inventory = torch_inventory(ssh_nodes, tmp_path)
    root = tmp_path / "results" / "scan"
    label = f"DLPERF_RUN_ID=dlperf-{session_label(root / 'node0+node1')}"
    out = interrupt_scan(
        ["--inventory", str(inventory), "--runtime", "process", "--pairs-only",
         "--probe-sizes-mb", "8", "--probe-iters", "100000", "--results",
         str(tmp_path / "results"), "--session", "scan"],
        lambda: len(processes_with_env(label)) >= 4,  # torchrun and the probe on both nodes
    )  # fmt: skip
    assert "interrupted: every pair's probe in flight is stopped" in out
    assert "node scan interrupted" in out
    assert not processes_with_env(label), out
    assert (root / "node0+node1" / "probes" / "allreduce-2n2g" / "interrupted.json").exists()


def test_under_slurm_each_node_is_a_step_of_one_job_then_the_pair(
    slurm_cluster: SlurmCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`dlperf nodes --runtime slurm` on the 2-node test cluster: a job of 2 nodes submitted for
    the scan, the 1n1g case on each node at once (one step each, pinned by --nodelist), then
    the pair's all-reduce probe, and the job cancelled at the end."""
    for key in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(key)  # outside any allocation: the scan submits its own job
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    cluster = tmp_path / "slurm.yaml"
    cluster.write_text('slurm: {container: none, time_limit: "10"}\n')
    argv = ["nodes", "--runtime", "slurm", "--inventory", str(cluster), "--nodes", "2",
            "--framework", "calibration", "--repeats", "1", "--probe-sizes-mb", "1",
            "--probe-iters", "5", "--results", str(tmp_path / "results")]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "on 2 nodes at once" in out and "every node within range" in out, out
    assert set(node_rows(out)) == {"n1", "n2"}, out
    [scan_root] = (tmp_path / "results").iterdir()
    for node in ("n1", "n2"):
        [record] = (scan_root / node).glob("cases/**/record.json")
        ran = json.loads(record.read_text())
        assert ran["verdict"] == "ok" and ran["extra"]["slurm"]["commands"][0]["node"] == node
    probe = json.loads((scan_root / "n1+n2" / "probes" / "allreduce-2n2g.json").read_text())
    assert probe["nodes"] == 2 and probe["busbw_gbps"] > 0
    assert slurm_cluster.drained() == []


def test_under_slurm_outside_an_allocation_the_node_count_is_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    argv = ["nodes", "--runtime", "slurm", "--framework", "calibration",
            "--results", str(tmp_path)]  # fmt: skip
    assert main(argv) == 2
    assert "--nodes N" in capsys.readouterr().err
