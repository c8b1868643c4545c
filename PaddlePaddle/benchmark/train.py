"""dlperf PaddlePaddle training benchmark: ResNet-50 v1.5 and BERT-base pre-training.

Runs exactly ``--total-steps`` training steps (forward, backward, optimizer step, dynamic graph)
through ``driver.bench.loop.run_benchmark`` and writes the step-log records of
``driver.bench.protocol`` on every rank. One process per device; under
``python -m paddle.distributed.launch`` (PADDLE_TRAINERS_NUM > 1) the model is wrapped in
``paddle.DataParallel`` over NCCL (GPU) or gloo (CPU).

    python PaddlePaddle/benchmark/train.py --model resnet50 --batch-size 64 --total-steps 120 \
        --precision amp --option channels_last=true

This entry sets OMP_NUM_THREADS before paddle is imported: paddle 3.3.1 runs its CPU kernels on
one OpenMP thread unless told otherwise, and OpenMP reads the variable once, when the library
loads. The adapter is ``PaddlePaddle.benchmark.trainer``. Out of memory prints
``{"dlperf": "oom", ...}`` and exits with 86.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from driver.bench.loop import Adapter, Run, run_benchmark

MODELS = ("resnet50", "bert")


def load_adapter(run: Run) -> Adapter:
    os.environ["OMP_NUM_THREADS"] = str(run.threads)
    # paddle is imported only now, with the thread count in place.
    from PaddlePaddle.benchmark.trainer import PaddleAdapter

    return PaddleAdapter(run)


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(
        load_adapter, argv, description="dlperf PaddlePaddle training benchmark", models=MODELS
    )


if __name__ == "__main__":
    sys.exit(main())
