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

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from driver.bench.loop import loaded_after_threads, run_benchmark

MODELS = ("resnet50", "bert")


def main(argv: list[str] | None = None) -> int:
    # The framework is imported only once OMP_NUM_THREADS is in place.
    adapter = loaded_after_threads("PaddlePaddle.benchmark.trainer", "PaddleAdapter")
    description = "dlperf PaddlePaddle training benchmark"
    return run_benchmark(adapter, argv, description=description, models=MODELS)


if __name__ == "__main__":
    sys.exit(main())
