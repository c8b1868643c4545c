"""PyTorch/benchmark/train.py as the driver runs it: a real subprocess, tiny shapes, real steps.

Every run is checked against the step-log protocol: header, begin, one step per training step
(1-based, monotonic timestamps, the per-rank batch as samples, a finite host loss), end.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# The PyTorch package lives at the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from driver.bench.contract import SHAPE_OPTIONS, TRAINING_OPTIONS
from driver.bench.protocol import EXIT_OOM
from driver.frontend.cli import main as cli_main
from PyTorch.benchmark.make_fake_imagenet import make_fake_imagenet
from PyTorch.benchmark.train import PYTORCH_OPTIONS

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "PyTorch" / "benchmark" / "train.py"
STEPS = 3
TIMEOUT_S = 180

TINY = {
    "resnet50": {"image_size": 32, "num_classes": 4},
    "inception3": {"image_size": 75, "num_classes": 4},  # the smallest input it works with
    "bert": {
        "bert_layers": 2,
        "bert_hidden": 64,
        "bert_heads": 2,
        "bert_intermediate": 128,
        "seq_len": 32,
        "max_predictions": 5,
        "vocab_size": 512,
    },
}

CORPUS = """Benchmarks measure training throughput in samples per second.
Each step logs a timestamp after the device has finished its work.
The driver computes throughput from the timestamps of a window.
Warm-up steps are left out of the window.

Convolutional networks classify images into a thousand classes.
Residual connections let very deep networks train.
Inception modules run several filter sizes side by side.

Transformers attend to every token of the sequence.
Masked language modelling predicts hidden words from their context.
Next sentence prediction decides whether two segments follow each other.
"""


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("imagenet")
    make_fake_imagenet(root, classes=4, per_class=4)
    return root


@pytest.fixture(scope="module")
def shard_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bert")
    corpus = root / "corpus.txt"
    corpus.write_text(CORPUS * 4, encoding="utf-8")
    # a vocab.txt of the corpus's own words and punctuation (lower case), the specials first
    words = sorted(set(re.findall(r"\w+|[^\w\s]", CORPUS.lower())))
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    shape = TINY["bert"]
    assert len(words) + 5 <= shape["vocab_size"]
    argv = ["data", "bert-kit", str(corpus), str(vocab), str(root / "shards"), "--shards", "2",
            "--max-seq-length", str(shape["seq_len"]), "--dupe-factor", "2",
            "--max-predictions-per-seq", str(shape["max_predictions"])]  # fmt: skip
    assert cli_main(argv) == 0
    return root / "shards"


def script_args(model: str, precision: str, dataset: str, data_dir: Path | None) -> list[str]:
    argv = [
        str(SCRIPT),
        "--model", model,
        "--batch-size", "2",
        "--precision", precision,
        "--dataset", dataset,
        "--warmup-steps", "1",
        "--total-steps", str(STEPS),
        "--loader-workers", "1",
    ]  # fmt: skip
    if data_dir is not None:
        argv += ["--data-dir", str(data_dir)]
    for key, value in TINY[model].items():
        argv += ["--option", f"{key}={value}"]
    return argv


def launch(argv: list[str]) -> subprocess.CompletedProcess[str]:
    # One thread per process: tiny shapes gain nothing from more, and on a shared 2-core machine
    # OpenMP barriers of several threads stall for seconds whenever another process runs.
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )


def records_of(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith('{"')]


def run(argv: list[str]) -> list[dict[str, Any]]:
    done = launch(argv)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-4000:]}"
    return records_of(done.stdout)


def check_rank(records: list[dict[str, Any]], rank: int, world_size: int = 1) -> dict[str, Any]:
    """Protocol sequence of one rank; returns its header."""
    mine = [record for record in records if record["rank"] == rank]
    kinds = [record["dlperf"] for record in mine]
    assert kinds == ["header", "begin", *["step"] * STEPS, "end"], kinds
    header = mine[0]
    assert header["framework"] == "pytorch" and header["world_size"] == world_size
    assert header["versions"]["torch"] and header["devices"] and header["devices"][0]
    missing = {*SHAPE_OPTIONS, *TRAINING_OPTIONS, *PYTORCH_OPTIONS} - set(header["options"])
    assert not missing, f"options not recorded: {missing}"
    steps = mine[2:-1]
    assert [step["step"] for step in steps] == list(range(1, STEPS + 1))
    times = [mine[1]["t"], *(step["t"] for step in steps)]
    assert all(later > earlier for earlier, later in itertools.pairwise(times))
    assert all(step["samples"] == 2 for step in steps)
    assert all(isinstance(step["loss"], float) and math.isfinite(step["loss"]) for step in steps)
    assert mine[-1]["steps"] == STEPS
    return header


@pytest.mark.parametrize(
    ("model", "precision", "dataset", "extra"),
    [
        ("resnet50", "fp32", "synthetic", []),
        ("resnet50", "amp", "real", ["--option", "channels_last=true"]),
        ("inception3", "amp", "synthetic", ["--option", "channels_last=true"]),
        ("inception3", "fp32", "real", ["--option", "normalize_on=loader"]),
        ("bert", "fp32", "real", []),
        ("bert", "amp", "synthetic", []),
    ],
)
def test_single_process_run_logs_every_step(
    model: str,
    precision: str,
    dataset: str,
    extra: list[str],
    image_dir: Path,
    shard_dir: Path,
) -> None:
    data_dir = None if dataset == "synthetic" else (shard_dir if model == "bert" else image_dir)
    header = check_rank(run([sys.executable, *script_args(model, precision, dataset, data_dir)]), 0)
    options = header["options"]
    assert options["precision"] == precision and options["dataset"] == dataset
    assert options["amp_dtype"] == ("bfloat16" if precision == "amp" else None)
    assert options["amp_effective"] is (precision == "amp")  # bf16 autocast runs on any x86
    assert options["device"] == "cpu" and options["num_threads"] == 1
    for key, value in TINY[model].items():
        assert options[key] == value


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_two_process_gloo_run_logs_every_step_on_both_ranks(image_dir: Path) -> None:
    launcher = [
        sys.executable, "-m", "torch.distributed.run",
        "--nproc-per-node", "2",
        "--master-port", str(free_port()),
    ]  # fmt: skip
    argv = [*script_args("resnet50", "fp32", "real", image_dir), "--option", "weights_checksum=on"]
    done = launch([*launcher, *argv])
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-4000:]}"
    records = records_of(done.stdout)
    # DDP all-reduces the gradients, so both ranks end with the same weights.
    checksums = re.findall(r"dlperf-weights-checksum rank=(\d) sum=(\S+)", done.stdout)
    assert sorted(rank for rank, _ in checksums) == ["0", "1"]
    assert checksums[0][1] == checksums[1][1]
    for rank in (0, 1):
        header = check_rank(records, rank, world_size=2)
        assert header["local_rank"] == rank
        assert header["options"]["distributed_backend"] == "gloo"
        assert header["options"]["global_batch_size"] == 4


@pytest.mark.skipif(
    not os.environ.get("DLPERF_SLOW_TESTS"),
    reason="torch.compile takes about a minute on CPU; set DLPERF_SLOW_TESTS=1",
)
def test_compiled_run_logs_every_step() -> None:
    argv = [*script_args("bert", "amp", "synthetic", None), "--option", "compile=true"]
    header = check_rank(run([sys.executable, *argv]), 0)
    assert header["options"]["compile"] is True


def test_a_batch_that_cannot_fit_exits_with_the_oom_status() -> None:
    # 1 x 3 x 10^7 x 10^7 floats (1.2 PB) is beyond any address space: the allocator refuses.
    argv = [str(SCRIPT), "--model", "resnet50", "--batch-size", "1", "--total-steps", "1"]
    done = launch([sys.executable, *argv, "--option", "image_size=10000000"])
    assert done.returncode == EXIT_OOM, done.stderr[-4000:]
    (record,) = records_of(done.stdout)
    assert record["dlperf"] == "oom" and record["rank"] == 0 and record["batch_size"] == 1
