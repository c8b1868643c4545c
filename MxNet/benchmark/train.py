"""dlperf MXNet training benchmark: ResNet-50 v1.5 and BERT-base pre-training (Gluon, hybridized).

Runs exactly ``--total-steps`` training steps and writes the per-step JSON lines of
``driver.bench.protocol`` on every worker; the driver computes throughput from the step timestamps.
One process per device; more than one (``DMLC_ROLE=worker``, from
``driver.launchers.mxnet_dist``) train data-parallel through the ``dist_sync`` kvstore.

    python MxNet/benchmark/train.py --model resnet50 --batch-size 64 --total-steps 120 \
        --precision amp

This entry only parses the arguments and sets OMP_NUM_THREADS before mxnet is imported: MXNet's
engine and oneDNN size their thread pools when the library loads. The training itself is in
``MxNet.benchmark.trainer``. Out of memory prints ``{"dlperf": "oom", ...}`` and exits with 86.
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
# MXNet's allocator failures that do not say "out of memory" (CPU: std::bad_alloc).
OOM_MARKERS = ("cudamalloc", "std::bad_alloc", "cannot allocate memory")


def out_of_memory(error: BaseException) -> bool:
    text = str(error).lower()
    return is_oom(error) or (
        isinstance(error, Exception) and any(marker in text for marker in OOM_MARKERS)
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_benchmark_args(argv, "dlperf MXNet training benchmark", models=MODELS)
    threads, source = threads_per_process(int(args.options.get("num_threads", 0)))
    os.environ["OMP_NUM_THREADS"] = str(threads)
    # mxnet is imported only now, with the thread count in place.
    from MxNet.benchmark import trainer

    try:
        return trainer.train(args, threads, source)
    except BaseException as error:  # re-raised below unless it is an allocator failure
        if isinstance(error, (SystemExit, KeyboardInterrupt)) or not out_of_memory(error):
            raise
        # The kvstore numbers the workers itself; RANK (from the launcher) is close enough here.
        oom_exit(error, rank_environment()["rank"], args.batch_size)


if __name__ == "__main__":
    sys.exit(main())
