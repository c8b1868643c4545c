"""PaddlePaddle: real training steps at tiny shapes through the driver, 1 and 2 processes.

The 2-process cases go through ``python -m paddle.distributed.launch`` behind the kit's log
relay (one node with two processes, and two "nodes" of one process on this host), over gloo.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from driver.launchers.base import NodeRank
from driver.launchers.paddle import PaddleLaunch
from tests.real_frameworks import framework_env, run_case, run_python, run_script

SCRIPT = "PaddlePaddle/benchmark/train.py"


@pytest.fixture(scope="module")
def paddle_python() -> str:
    return framework_env("paddle")


def headers(logs: str) -> list[dict]:
    lines = [line[line.index("{") :] for line in logs.splitlines() if '"dlperf": "header"' in line]
    return [json.loads(line) for line in lines]


def test_paddle_launcher_command_names_the_node_and_the_master() -> None:
    rank = NodeRank(1, 2, 4, "10.0.0.1", 29500, ("10.0.0.1", "10.0.0.2"))
    argv = PaddleLaunch().command("python", [SCRIPT, "--model", "bert"], rank)
    assert argv[:3] == ["python", "-m", "driver.launchers.paddle"]
    assert {"--nnodes=2", "--rank=1", "--nproc-per-node=4", "--master=10.0.0.1:29500"} <= set(argv)
    assert "--host=10.0.0.2" in argv  # node 1's own address, not what its host name resolves to
    assert argv[argv.index("--") + 1 :] == [SCRIPT, "--model", "bert"]
    single = PaddleLaunch().command("python", [SCRIPT], NodeRank(0, 1, 1, "127.0.0.1", 1))
    assert single == ["python", SCRIPT]


def test_single_process_amp_is_recorded_as_not_effective_on_cpu(
    tmp_path: Path, paddle_python: str
) -> None:
    run = run_case(tmp_path, "paddle", "resnet50", "1n1g", precision="amp")
    header = run.records[0].header
    assert header["options"]["amp_effective"] is False
    assert header["options"]["num_threads"] == 2  # OMP_NUM_THREADS set before paddle loaded
    assert header["versions"]["paddle"] == "3.3.1"


def test_two_processes_on_one_node_log_every_rank(tmp_path: Path, paddle_python: str) -> None:
    options = {"grad_clip": 0, "weights_checksum": True}
    run = run_case(tmp_path, "paddle", "bert", "1n2g", options=options)
    run.assert_ranks_in_sync(2)  # different data per rank, same weights: gradients reduced
    found = headers(run.logs())
    assert sorted(h["rank"] for h in found) == [0, 1]  # worker 1's log came through the relay
    for header in found:
        assert header["options"]["distributed_backend"] == "gloo"
        assert header["options"]["grad_clip"] == 0.0
        assert header["options"]["num_threads"] == 1
    measurement = run.records[0].measurement
    assert measurement.ranks == measurement.world_size == 2


def test_two_nodes_of_one_process_each(tmp_path: Path, paddle_python: str) -> None:
    options = {"channels_last": True, "weights_checksum": True}
    run = run_case(tmp_path, "paddle", "resnet50", "2n2g", options=options)
    run.assert_ranks_in_sync(2)
    found = headers(run.logs())
    assert sorted((h["rank"], h["node_rank"]) for h in found) == [(0, 0), (1, 1)]
    assert found[0]["options"]["data_format"] == "NHWC"


def test_out_of_memory_prints_the_record_and_exits_86(paddle_python: str) -> None:
    code = """
import PaddlePaddle.benchmark.trainer as trainer
from PaddlePaddle.benchmark.train import main

def exhausted(*_args):
    raise MemoryError("Out of memory error on GPU 0")

trainer.train = exhausted
main(["--model", "bert", "--batch-size", "4096", "--total-steps", "2"])
"""
    done = run_python(paddle_python, code)
    assert done.returncode == 86, done.stderr[-2000:]
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert record["dlperf"] == "oom" and record["batch_size"] == 4096


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--option", "dali=true"], "dali=true needs a GPU"),
        (["--xla", "on"], "PaddlePaddle has no XLA"),
    ],
)
def test_gpu_only_and_unsupported_knobs_fail_clearly(
    paddle_python: str, extra: list[str], message: str
) -> None:
    args = ["--model", "resnet50", "--batch-size", "2", "--total-steps", "1", *extra]
    done = run_script(paddle_python, SCRIPT, args)
    assert done.returncode == 2 and message in done.stderr
