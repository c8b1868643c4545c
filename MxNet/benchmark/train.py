"""dlperf MXNet training benchmark: ResNet-50 v1.5 and BERT-base pre-training (Gluon, hybridized).

Runs exactly ``--total-steps`` training steps through ``driver.bench.loop.run_benchmark`` and
writes the step-log records of ``driver.bench.protocol`` on every worker. One process per
device; more than one (``DMLC_ROLE=worker``, from ``driver.launchers.mxnet_dist``) train
data-parallel through the ``dist_sync`` kvstore.

    python MxNet/benchmark/train.py --model resnet50 --batch-size 64 --total-steps 120 \
        --precision amp

This entry sets OMP_NUM_THREADS before mxnet is imported: MXNet's engine and oneDNN size their
thread pools when the library loads. The adapter is ``MxNet.benchmark.trainer``. Out of memory
prints ``{"dlperf": "oom", ...}`` and exits with 86.
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
    adapter = loaded_after_threads("MxNet.benchmark.trainer", "MxnetAdapter")
    description = "dlperf MXNet training benchmark"
    return run_benchmark(adapter, argv, description=description, models=MODELS)


if __name__ == "__main__":
    sys.exit(main())
