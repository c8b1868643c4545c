"""OneFlow 0.9.0: real training steps at tiny shapes through the driver, 1 and 2 processes.

Eager cases train data-parallel through DistributedDataParallel, graph cases (``graph=true``)
through nn.Graph with global tensors; the 2-process cases start through
``python -m oneflow.distributed.launch`` behind the kit's supervisor (one node with two
processes; OneFlow cannot run two "nodes" on one host, see below). The venv runs Python 3.10
and needs the nvidia-*-cu11 lib folders on LD_LIBRARY_PATH (``Framework.venv_library_globs``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from driver.core.command import check_placement, node_commands
from driver.frameworks.base import FRAMEWORKS, REPO_ROOT
from driver.frameworks.envs import venv_environment
from driver.launchers.base import NodeRank
from driver.launchers.oneflow import OneflowLaunch
from driver.model.case import Case, Topology
from driver.runtimes.local import LocalRuntime, process_environment
from tests.real_frameworks import framework_env, run_case

SCRIPT = "OneFlow/benchmark/train.py"


@pytest.fixture(scope="module")
def oneflow_python() -> str:
    return framework_env("oneflow")


def oneflow_environment() -> dict[str, str]:
    """What the local runtime gives a OneFlow process (LD_LIBRARY_PATH for cuDNN/cuBLAS)."""
    return process_environment(LocalRuntime().environment(FRAMEWORKS.get("oneflow")))


def headers(logs: str) -> list[dict]:
    lines = [line[line.index("{") :] for line in logs.splitlines() if '"dlperf": "header"' in line]
    return [json.loads(line) for line in lines]


# --------------------------------------------------------------------------------------------
# Pure pieces (no OneFlow needed)


def test_launcher_runs_oneflow_distributed_launch_behind_the_supervisor() -> None:
    single = OneflowLaunch().command("python", [SCRIPT], NodeRank(0, 1, 1, "127.0.0.1", 1))
    assert single == ["python", SCRIPT]
    rank = NodeRank(1, 2, 4, "10.0.0.1", 29500, ("10.0.0.1", "10.0.0.2"))
    argv = OneflowLaunch().command("python", [SCRIPT, "--model", "bert"], rank)
    assert argv[:4] == ["python", "-m", "driver.launchers.oneflow", "--"]
    assert argv[4:7] == ["python", "-m", "oneflow.distributed.launch"]
    assert {
        "--nnodes=2",
        "--node_rank=1",
        "--nproc_per_node=4",
        "--master_addr=10.0.0.1",
        "--master_port=29500",
    } <= set(argv)
    assert argv[-3:] == [SCRIPT, "--model", "bert"]


def oneflow_case(topology: str, framework: str = "oneflow") -> Case:
    return Case(
        model="resnet50", framework=framework, topology=Topology.parse(topology), batch_size=4,
        precision="fp32", dataset="synthetic",
    )  # fmt: skip


def test_several_loopback_nodes_are_refused_at_planning_with_the_fix() -> None:
    """Such a job hangs at its first collective (module docstring): the planner refuses it,
    so `dlperf run`, the runner and the batch search never start it."""
    with pytest.raises(ValueError) as refused:
        node_commands(oneflow_case("4n4g"), LocalRuntime(), 4)
    message = str(refused.value)
    assert "4 of the 4 nodes are on loopback (127.0.0.1)" in message
    assert "would hang at its first collective (OneFlow/README.md)" in message
    assert "--inventory cluster.yaml" in message and "INVENTORY=cluster.yaml" in message
    assert "(1n4g)" in message and "dlperf selftest --topologies 4n4g" in message
    loopback_hosts = [("n0", "127.0.0.2"), ("n1", "127.0.0.3")]  # the tests' sshd nodes
    with pytest.raises(ValueError, match="2 of the 2 nodes are on loopback"):
        check_placement(oneflow_case("2n4g"), loopback_hosts)
    with pytest.raises(ValueError, match="on loopback \\(localhost\\)"):
        check_placement(oneflow_case("2n2g"), [("n0", "10.0.0.1"), ("n1", "localhost")])


def test_oneflow_on_real_hosts_and_other_frameworks_on_loopback_nodes_are_planned() -> None:
    assert len(node_commands(oneflow_case("1n4g"), LocalRuntime(), 4)) == 1
    check_placement(oneflow_case("2n4g"), [("n0", "10.0.0.1"), ("n1", "10.0.0.2")])
    check_placement(oneflow_case("2n4g"), [("n0", "gpu01"), ("n1", "gpu02")])  # host names
    # Their launchers join nodes at the master's address: 2n2g on the local runtime runs in
    # their own test modules (test_paddle, test_mxnet, test_tensorflow, test_runner).
    for framework in ("pytorch", "tensorflow", "paddle", "mxnet"):
        assert len(node_commands(oneflow_case("2n2g", framework), LocalRuntime(), 4)) == 2


def test_the_venv_library_folders_reach_the_process_environment(oneflow_python: str) -> None:
    paths = venv_environment(FRAMEWORKS.get("oneflow"))["LD_LIBRARY_PATH"].split(":")
    assert any(path.endswith("nvidia/cudnn/lib") for path in paths)
    assert any(path.endswith("nvidia/cublas/lib") for path in paths)


# --------------------------------------------------------------------------------------------
# Real training


def test_single_process_eager_resnet50_amp_is_not_effective_on_cpu(
    tmp_path: Path, oneflow_python: str
) -> None:
    run = run_case(tmp_path, "oneflow", "resnet50", "1n1g", precision="amp")
    header = run.records[0].header
    assert header["options"]["amp_effective"] is False  # no CPU AMP in oneflow 0.9.0
    assert header["options"]["graph"] is False
    assert header["options"]["parameters"] == 23_528_522  # ResNet-50 v1.5, 10-class head
    assert header["versions"]["oneflow"] == "0.9.0"
    assert header["versions"]["python"].startswith("3.10.")
    assert header["rank"] == 0  # not the RANK=-1 oneflow exports when no launcher started it


def test_single_process_graph_bert_with_clipping(tmp_path: Path, oneflow_python: str) -> None:
    run = run_case(tmp_path, "oneflow", "bert", "1n1g", options={"graph": True})
    options = run.records[0].header["options"]
    assert options["graph"] is True and options["grad_clip"] == 1.0
    assert options["optimizer"] == "adamw"


def test_two_processes_on_one_node_eager_ddp(tmp_path: Path, oneflow_python: str) -> None:
    run = run_case(tmp_path, "oneflow", "bert", "1n2g", options={"weights_checksum": True})
    run.assert_ranks_in_sync(2)  # different data per rank, same weights: gradients reduced
    found = headers(run.logs())
    assert sorted(h["rank"] for h in found) == [0, 1]
    for header in found:
        assert header["world_size"] == 2
        assert header["options"]["distributed_backend"] == "DistributedDataParallel"
    measurement = run.records[0].measurement
    assert measurement.ranks == measurement.world_size == 2


def test_two_processes_in_graph_mode_with_global_tensors(
    tmp_path: Path, oneflow_python: str
) -> None:
    # One node only: OneFlow 0.9.0 tells nodes apart by host address, so two "nodes" on one
    # host (two launchers, both LOCAL_RANK 0 on 127.0.0.1) abort at the first collective.
    options = {"graph": True, "grad_clip": 0, "weights_checksum": True}
    run = run_case(tmp_path, "oneflow", "bert", "1n2g", options=options)
    run.assert_ranks_in_sync(2)
    found = headers(run.logs())
    assert sorted(h["rank"] for h in found) == [0, 1]
    for header in found:
        assert header["options"]["distributed_backend"] == "nn.Graph global tensors"
        assert header["options"]["grad_clip"] == 0.0


def test_out_of_memory_prints_the_record_and_exits_86(oneflow_python: str) -> None:
    code = """
import OneFlow.benchmark.train as train

def exhausted(*_args):
    raise RuntimeError("Check failed: ... out of memory (CUDA), requested 4.0 GiB")

train.synthetic_batch = exhausted
train.main(["--model", "bert", "--batch-size", "4096", "--total-steps", "2"])
"""
    done = subprocess.run(
        [oneflow_python, "-c", code],
        cwd=REPO_ROOT, env=oneflow_environment(), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 86, done.stderr[-2000:]
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert record["dlperf"] == "oom" and record["batch_size"] == 4096 and record["rank"] == 0


def test_the_supervisor_turns_a_rank_out_of_memory_into_exit_86(
    tmp_path: Path, oneflow_python: str
) -> None:
    # oneflow.distributed.launch itself exits 1 when a rank fails; the supervisor sees the
    # rank's oom record go by and exits 86, and the other rank (blocked) is stopped.
    worker = tmp_path / "worker.py"
    worker.write_text(
        "import os, sys, time\n"
        "if os.environ['RANK'] == '1':\n"
        '    print(\'{"dlperf": "oom", "rank": 1}\', flush=True)\n'
        "    sys.exit(86)\n"
        "time.sleep(600)\n"
    )
    argv = OneflowLaunch().command(
        oneflow_python, [str(worker)], NodeRank(0, 1, 2, "127.0.0.1", 29431)
    )
    done = subprocess.run(
        argv, cwd=REPO_ROOT, env=oneflow_environment(), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 86, done.stdout[-2000:] + done.stderr[-2000:]
    assert '"dlperf": "oom"' in done.stdout


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--option", "dali=true"], "dali=true needs a GPU"),
        (["--xla", "on"], "OneFlow has no XLA"),
    ],
)
def test_gpu_only_and_unsupported_knobs_fail_clearly(
    oneflow_python: str, extra: list[str], message: str
) -> None:
    args = ["--model", "resnet50", "--batch-size", "2", "--total-steps", "1", *extra]
    done = subprocess.run(
        [oneflow_python, SCRIPT, *args],
        cwd=REPO_ROOT, env=oneflow_environment(), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 2 and message in done.stderr, done.stderr[-2000:]
