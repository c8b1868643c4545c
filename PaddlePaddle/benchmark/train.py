"""dlperf PaddlePaddle training benchmark: ResNet-50 v1.5 and BERT-base pre-training.

Runs exactly ``--total-steps`` training steps (forward, backward, optimizer step, dynamic graph)
and writes the per-step JSON lines of ``driver.bench.protocol`` on every rank; the driver computes
throughput from the step timestamps. One process per device; under
``python -m paddle.distributed.launch`` (PADDLE_TRAINERS_NUM > 1) the model is wrapped in
``paddle.DataParallel`` over NCCL (GPU) or gloo (CPU).

    python PaddlePaddle/benchmark/train.py --model resnet50 --batch-size 64 --total-steps 120 \
        --precision amp --option channels_last=true

This entry only parses the arguments and sets OMP_NUM_THREADS before paddle is imported: paddle
3.3.1 runs its CPU kernels on one OpenMP thread unless told otherwise, and OpenMP reads the
variable once, when the library loads. The training itself is in
``PaddlePaddle.benchmark.trainer``. Out of memory prints ``{"dlperf": "oom", ...}`` and exits
with 86.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from driver.bench.contract import parse_benchmark_args
from driver.benchkit import is_oom, oom_exit, threads_per_process
from driver.bench.protocol import rank_environment

MODELS = ("resnet50", "bert")


def main(argv: list[str] | None = None) -> int:
    args = parse_benchmark_args(argv, "dlperf PaddlePaddle training benchmark", models=MODELS)
    threads, source = threads_per_process(int(args.options.get("num_threads", 0)))
    os.environ["OMP_NUM_THREADS"] = str(threads)
    # paddle is imported only now, with the thread count in place.
    from PaddlePaddle.benchmark.trainer import train

    try:
        return train(args, threads, source)
    except BaseException as error:  # re-raised below unless it is an allocator failure
        if isinstance(error, (SystemExit, KeyboardInterrupt)) or not is_oom(error):
            raise
        oom_exit(error, rank_environment()["rank"], args.batch_size)


if __name__ == "__main__":
    sys.exit(main())
