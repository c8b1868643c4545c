"""TensorFlow 2: real training steps at tiny shapes through the driver, 1 and 2 processes.

The 2-process cases run MultiWorkerMirroredStrategy over the kit's spawn launcher (one node
with two workers, and two "nodes" of one worker on this host). Horovod is GPU-image only; its
launcher's commands are checked without running it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from driver.launchers.base import NodeRank
from driver.launchers.horovod import HorovodRun, host_list
from TensorFlow.benchmark.cluster import tf_config
from tests.real_frameworks import framework_env, run_case, run_python, run_script

SCRIPT = "TensorFlow/benchmark/train.py"


@pytest.fixture(scope="module")
def tf_python() -> str:
    return framework_env("tensorflow")


def headers(logs: str) -> list[dict]:
    lines = [line[line.index("{") :] for line in logs.splitlines() if '"dlperf": "header"' in line]
    return [json.loads(line) for line in lines]


# --------------------------------------------------------------------------------------------
# Pure pieces (no TensorFlow needed)


def test_tf_config_gives_every_worker_a_port_on_its_node() -> None:
    environ = {
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
        "DLPERF_NODE_ADDRS": "10.0.0.1,10.0.0.2",
        "LOCAL_WORLD_SIZE": "2",
    }
    config = tf_config(environ, rank=3, world_size=4)
    assert config["cluster"]["worker"] == [
        "10.0.0.1:29500",
        "10.0.0.1:29501",
        "10.0.0.2:29502",
        "10.0.0.2:29503",
    ]
    assert config["task"] == {"type": "worker", "index": 3}
    with pytest.raises(ValueError, match="not 2 node"):
        tf_config({**environ, "LOCAL_WORLD_SIZE": "3"}, rank=0, world_size=4)


def test_horovodrun_starts_the_whole_job_from_node_0() -> None:
    rank = NodeRank(0, 2, 8, "10.0.0.1", 29500, ("10.0.0.1", "10.0.0.2"))
    argv = HorovodRun().command("python", [SCRIPT, "--model", "bert"], rank)
    assert argv[:5] == ["horovodrun", "-np", "16", "-H", "10.0.0.1:8,10.0.0.2:8"]
    assert argv[5:] == ["python", SCRIPT, "--model", "bert"]
    other = HorovodRun().command("python", [SCRIPT], NodeRank(1, 2, 8, "10.0.0.1", 29500))
    assert other[:2] == ["python", "-c"] and SCRIPT not in other
    assert host_list(NodeRank(0, 2, 2, "127.0.0.1", 1, ("127.0.0.1", "127.0.0.1"))) == (
        "127.0.0.1:4"
    )


# --------------------------------------------------------------------------------------------
# Real training


def test_single_process_resnet50_amp_is_bf16_on_cpu(tmp_path: Path, tf_python: str) -> None:
    run = run_case(tmp_path, "tensorflow", "resnet50", "1n1g", precision="amp")
    options = run.records[0].header["options"]
    assert options["engine"] == "none"
    assert options["amp_policy"] == "mixed_bfloat16" and options["amp_effective"]
    assert options["grad_clip"] == 0.0  # CNNs: no clipping by default
    assert run.records[0].header["versions"]["tensorflow"] == "2.21.0"


def test_single_process_bert_with_xla_compiles_the_whole_step(
    tmp_path: Path, tf_python: str
) -> None:
    run = run_case(tmp_path, "tensorflow", "bert", "1n1g", xla=True)
    options = run.records[0].header["options"]
    assert options["xla"] and options["xla_scope"] == "step"
    assert options["grad_clip"] == 1.0 and options["optimizer"] == "adamw"


def test_two_workers_on_one_node_mirror_through_tf_config(tmp_path: Path, tf_python: str) -> None:
    options = {"grad_clip": 0, "weights_checksum": True}
    run = run_case(tmp_path, "tensorflow", "bert", "1n2g", options=options)
    run.assert_ranks_in_sync(2)  # different data per rank, same weights: gradients reduced
    found = headers(run.logs())
    assert sorted(h["rank"] for h in found) == [0, 1]
    for header in found:
        options = header["options"]
        assert options["engine"] == "mwms" and options["grad_clip"] == 0.0
        assert len(options["tf_config"]["cluster"]["worker"]) == 2
        assert options["num_threads"] == 1  # 2 cores split between 2 workers
    assert run.records[0].measurement.ranks == run.records[0].measurement.world_size == 2


def test_two_nodes_of_one_worker_each(tmp_path: Path, tf_python: str) -> None:
    run = run_case(tmp_path, "tensorflow", "resnet50", "2n2g", options={"weights_checksum": True})
    run.assert_ranks_in_sync(2)
    found = headers(run.logs())
    assert sorted((h["rank"], h["node_rank"]) for h in found) == [(0, 0), (1, 1)]
    workers = found[0]["options"]["tf_config"]["cluster"]["worker"]
    assert len(set(workers)) == 2


# --------------------------------------------------------------------------------------------
# Failure paths the driver relies on


def test_out_of_memory_prints_the_record_and_exits_86(tf_python: str) -> None:
    code = """
import TensorFlow.benchmark.train as bench

def exhausted(_args):
    raise bench.tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")

bench.train = exhausted
bench.main(["--model", "resnet50", "--batch-size", "4096", "--total-steps", "2"])
"""
    done = run_python(tf_python, code)
    assert done.returncode == 86, done.stderr[-2000:]
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert record["dlperf"] == "oom" and record["batch_size"] == 4096


def test_dali_fails_clearly_on_cpu(tf_python: str) -> None:
    args = ["--model", "resnet50", "--batch-size", "2", "--total-steps", "1"]
    done = run_script(tf_python, SCRIPT, [*args, "--option", "dali=true"])
    assert done.returncode == 2
    assert "dali=true needs a GPU" in done.stderr
