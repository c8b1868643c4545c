"""dlperf JAX training benchmark: ResNet-50 v1.5, BERT-base pre-training and Llama 3 in Flax.

The JAX adapter of ``driver.bench.loop.run_benchmark`` (``JAX.benchmark.adapter``): the same
``--total-steps`` steps, window and records as every framework's script. One process per
device, started by the kit's spawner; several processes join through
``jax.distributed.initialize`` (gloo collectives on CPU, NCCL on GPU) and train one
``jax.jit``-compiled step over a device mesh, the training state donated to it:

- ``ddp`` (ResNet-50, BERT, and Llama when asked): the step is ``shard_map``-ped over the mesh,
  each device its own batch (BatchNorm statistics per device, as DDP), the gradients averaged;
- ``fsdp`` / ``hsdp`` (Llama's default on several devices): the parameters and optimizer state
  are sharded over the mesh's fsdp axis and XLA's partitioner gathers and scatters them.

AMP is bfloat16 compute with float32 parameters and optimizer state (no loss scaling). A
step's time ends after ``jax.block_until_ready`` on its outputs.

    python JAX/benchmark/train.py --model resnet50 --batch-size 64 --total-steps 120 \
        --precision amp

Options (``--option key=value``, all recorded in the header): the shape options of
``driver.bench.contract.SHAPE_OPTIONS``, the shared training knobs of
``driver.bench.contract.TRAINING_OPTIONS`` and :data:`JAX_OPTIONS`. An allocator failure prints
``{"dlperf": "oom", ...}`` and exits with 86.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from driver.bench.contract import MODELS, OptionError  # noqa: E402
from driver.bench.loop import Adapter, Run, run_benchmark  # noqa: E402

JAX_MODELS = tuple(model for model in MODELS if model != "inception3")
JAX_OPTIONS: dict[str, Any] = {
    "parallelism": "auto",  # auto: fsdp for llama on several devices, ddp for the others
    "fsdp_size": 0,  # the mesh's fsdp axis; 0: every device (fsdp) or a node's (hsdp)
    "activation_checkpointing": "none",  # llama: none | selective | full
    "zero_init_residual": False,  # ResNet-50: zero gamma of each block's last BatchNorm
}


def pin_threads(threads: int, local_rank: int) -> list[int] | None:
    """XLA's CPU client sizes its thread pools to the CPUs this process may run on (it has no
    thread-count flag): a process meant to use fewer threads gets a slice of its own of those
    CPUs, by local rank. Returns the CPUs chosen, or None when it may use all of them."""
    allowed = sorted(os.sched_getaffinity(0))
    if threads <= 0 or threads >= len(allowed):
        return None
    first = (local_rank * threads) % len(allowed)
    chosen = [allowed[(first + offset) % len(allowed)] for offset in range(threads)]
    os.sched_setaffinity(0, chosen)
    return chosen


def refuse_unsupported(args: argparse.Namespace) -> None:
    """What the JAX scripts do not do, refused from the arguments alone (before JAX loads)."""
    if args.xla == "on":
        raise OptionError(
            "--xla on: JAX compiles every step with XLA (jax.jit) already; --xla is "
            "TensorFlow's switch, leave it off"
        )
    if args.precision == "amp" and args.amp_dtype == "fp16":
        raise OptionError(
            "--amp-dtype fp16: the JAX scripts train AMP in bfloat16 (no loss scaling); "
            "use --amp-dtype bf16 or auto"
        )


def make_adapter(run: Run) -> Adapter:
    refuse_unsupported(run.args)
    # Before JAX loads: its CPU client sizes its thread pools once, when it starts.
    pin_threads(run.threads, run.local_rank)
    from JAX.benchmark.adapter import JaxAdapter

    return JaxAdapter(run)


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(
        make_adapter, argv, description="dlperf JAX training benchmark", models=JAX_MODELS
    )


if __name__ == "__main__":
    sys.exit(main())
