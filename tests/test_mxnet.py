"""MXNet 1.9.1: real training steps at tiny shapes through the driver, 1 and 2 processes.

The 2-process cases train through the dist_sync kvstore: ``driver.launchers.mxnet_dist``
starts the scheduler, the servers and the workers from DMLC_* variables (one node with two
workers, and two "nodes" of one worker each on this host).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from driver.core.footnotes import footnotes
from driver.core.summary import summarize
from driver.frameworks.base import REPO_ROOT
from driver.launchers.base import NodeRank
from driver.launchers.mxnet_dist import MxnetDist, role_environments
from driver.runtimes.local import process_environment
from tests.real_frameworks import framework_env, run_case, run_python, run_script

SCRIPT = "MxNet/benchmark/train.py"


@pytest.fixture(scope="module")
def mxnet_python() -> str:
    return framework_env("mxnet")


def headers(logs: str) -> list[dict]:
    lines = [line[line.index("{") :] for line in logs.splitlines() if '"dlperf": "header"' in line]
    return [json.loads(line) for line in lines]


# --------------------------------------------------------------------------------------------
# Pure pieces (no MXNet needed)


def test_launcher_runs_one_process_directly_and_more_through_the_supervisor() -> None:
    single = MxnetDist().command("python", [SCRIPT], NodeRank(0, 1, 1, "127.0.0.1", 1))
    assert single == ["python", SCRIPT]
    rank = NodeRank(1, 2, 4, "10.0.0.1", 29500, ("10.0.0.1", "10.0.0.2"))
    argv = MxnetDist().command("python", [SCRIPT, "--model", "bert"], rank)
    assert argv[:3] == ["python", "-m", "driver.launchers.mxnet_dist"]
    assert {
        "--nnodes=2",
        "--node-rank=1",
        "--nproc-per-node=4",
        "--master-addr=10.0.0.1",
        "--master-port=29500",
        "--node-addr=10.0.0.2",
    } <= set(argv)
    assert argv[argv.index("--") + 1 :] == [SCRIPT, "--model", "bert"]


def test_roles_one_scheduler_one_server_per_node_and_the_workers() -> None:
    node0 = role_environments(
        nnodes=2, node_rank=0, nproc_per_node=2, master_addr="10.0.0.1", master_port=9000
    )
    node1 = role_environments(
        nnodes=2, node_rank=1, nproc_per_node=2, master_addr="10.0.0.1", master_port=9000
    )
    assert [role for role, _ in node0] == ["scheduler", "server", "worker", "worker"]
    assert [role for role, _ in node1] == ["server", "worker", "worker"]
    for _, env in node0 + node1:
        assert env["DMLC_PS_ROOT_URI"] == "10.0.0.1" and env["DMLC_PS_ROOT_PORT"] == "9000"
        assert env["DMLC_NUM_SERVER"] == "2" and env["DMLC_NUM_WORKER"] == "4"
    assert [env["RANK"] for role, env in node1 if role == "worker"] == ["2", "3"]


def test_supervisor_passes_the_out_of_memory_code_and_stops_the_other_roles(
    tmp_path: Path,
) -> None:
    # Stub roles: the "workers" are a script (rank 1 runs out of memory), and "import mxnet" of
    # the scheduler/server is shadowed by a module that blocks like a waiting server would.
    (tmp_path / "mxnet.py").write_text("import time\ntime.sleep(600)\n")
    worker = tmp_path / "worker.py"
    worker.write_text(
        "import os, sys, time\n"
        "if os.environ['RANK'] == '1':\n"
        '    print(\'{"dlperf": "oom", "rank": 1}\', flush=True)\n'
        "    sys.exit(86)\n"
        "time.sleep(600)\n"
    )
    env = process_environment({})
    env["PYTHONPATH"] = f"{tmp_path}:{REPO_ROOT}"
    done = subprocess.run(
        [sys.executable, "-m", "driver.launchers.mxnet_dist", "--nproc-per-node=2",
         "--master-addr=127.0.0.1", "--master-port=1", "--", str(worker)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 86, done.stderr
    assert '"dlperf": "oom"' in done.stdout


# --------------------------------------------------------------------------------------------
# Real training


def cpu_has_avx512() -> bool:
    """oneDNN (MXNet 1.9.1's) has bf16 convolutions only on x86 CPUs with AVX-512."""
    flags = Path("/proc/cpuinfo").read_text().split()
    return "avx512f" in flags and "avx512bw" in flags


def test_single_process_resnet50_with_bf16_amp(tmp_path: Path, mxnet_python: str) -> None:
    """bf16 where the CPU has the kernels; elsewhere the same case still trains, in FP32, and its
    header says AMP was not effective (the report footnotes such rows)."""
    run = run_case(tmp_path, "mxnet", "resnet50", "1n1g", precision="amp")
    options = run.records[0].header["options"]
    assert options["amp_dtype"] == "bfloat16"
    assert options["amp_effective"] is cpu_has_avx512()
    if not cpu_has_avx512():
        assert "bfloat16 kernels unavailable here" in run.logs()
    notes = footnotes(summarize([(run.case, record) for record in run.records]))
    assert any(note.startswith("AMP was not effective for MXNet") for note in notes) is not (
        cpu_has_avx512()
    )
    assert options["hybridize"] is True and options["optimizer"] == "sgd"
    assert options["parameters"] == 23_528_522  # ResNet-50 v1.5 with a 10-class head
    assert options["num_threads"] == 2  # OMP_NUM_THREADS set before mxnet was imported
    assert run.records[0].header["versions"]["mxnet"] == "1.9.1"


def test_two_processes_on_one_node_train_through_dist_sync(
    tmp_path: Path, mxnet_python: str
) -> None:
    run = run_case(tmp_path, "mxnet", "bert", "1n2g", options={"weights_checksum": True})
    run.assert_ranks_in_sync(2)  # different data per worker, same weights: gradients summed
    found = headers(run.logs())
    assert sorted(h["rank"] for h in found) == [0, 1]
    for header in found:
        assert header["world_size"] == 2
        assert header["options"]["distributed_backend"] == "dist_sync"
        assert header["options"]["grad_clip"] == 1.0 and header["options"]["num_threads"] == 1
    measurement = run.records[0].measurement
    assert measurement.ranks == measurement.world_size == 2


def test_two_nodes_of_one_worker_each_without_clipping(tmp_path: Path, mxnet_python: str) -> None:
    options = {"weights_checksum": True, "grad_clip": 0}
    run = run_case(tmp_path, "mxnet", "bert", "2n2g", options=options)
    run.assert_ranks_in_sync(2)
    found = headers(run.logs())
    assert sorted(h["node_rank"] for h in found) == [0, 1]
    assert all(h["options"]["grad_clip"] == 0.0 for h in found)


def test_out_of_memory_prints_the_record_and_exits_86(mxnet_python: str) -> None:
    code = """
import MxNet.benchmark.train as train
import MxNet.benchmark.trainer as trainer

def exhausted(*_args):
    raise RuntimeError("pooled_storage_manager.h:161: cudaMalloc retry failed: out of memory")

trainer.synthetic_batch = exhausted
train.main(["--model", "resnet50", "--batch-size", "4096", "--total-steps", "2",
            "--option", "image_size=32", "--option", "num_classes=10"])
"""
    done = run_python(mxnet_python, code)
    assert done.returncode == 86, done.stderr[-2000:]
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert record["dlperf"] == "oom" and record["batch_size"] == 4096
    assert "out of memory" in record["message"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--option", "dali=true"], "dali=true needs a GPU"),
        (["--xla", "on"], "MXNet has no XLA"),
        (["--amp-dtype", "fp16", "--precision", "amp"], "fp16 is GPU only"),
    ],
)
def test_gpu_only_and_unsupported_knobs_fail_clearly(
    mxnet_python: str, extra: list[str], message: str
) -> None:
    args = ["--model", "resnet50", "--batch-size", "2", "--total-steps", "1", *extra]
    done = run_script(mxnet_python, SCRIPT, args)
    assert done.returncode == 2 and message in done.stderr, done.stderr[-2000:]
