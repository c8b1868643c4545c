"""dlperf OneFlow training benchmark: ResNet-50 v1.5 and BERT-base pre-training, eager or graph.

Runs exactly ``--total-steps`` training steps and writes the per-step JSON lines of
``driver.bench.protocol`` on every rank; the driver computes throughput from the step timestamps.
One process per device, started by ``python -m oneflow.distributed.launch`` when there are
more (``driver.launchers.oneflow``). Two execution modes:

- eager (default): define-by-run; data parallel through ``nn.parallel.DistributedDataParallel``;
- ``--option graph=true``: the step (forward, backward, optimizer) is compiled once as an
  ``nn.Graph``; data parallel through global tensors (weights broadcast, batch split on dim 0
  over every rank's device), OneFlow's own SPMD way and what DLPerf's OneFlow numbers used.

    python OneFlow/benchmark/train.py --model resnet50 --batch-size 64 --total-steps 120 \
        --option graph=true

AMP: ``oneflow.autocast`` (eager) or ``GraphConfig.enable_amp`` (graph), fp16 with dynamic loss
scaling on GPU. oneflow 0.9.0 has no CPU AMP (eager autocast disables itself with a warning; the
graph pass inserts no casts on CPU), so on CPU ``--precision amp`` runs fp32 and the header says
``amp_effective: false``. An out-of-memory error prints a ``{"dlperf": "oom", ...}`` line and
exits with 86.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import oneflow as flow
import oneflow.sysconfig
from oneflow import nn

from driver.bench.contract import parse_benchmark_args
from driver.benchkit import (
    OptionError,
    cpu_model_name,
    is_oom,
    oom_exit,
    print_weights_checksum,
    threads_per_process,
    training_options,
    warn,
)
from driver.bench.protocol import StepLogger, rank_environment
from OneFlow.benchmark.models import IMAGE_MODELS, build_training_model, count_parameters

FRAMEWORK = "oneflow"
MODELS = ("resnet50", "bert")

# OneFlow's own knobs (the shared ones are driver.bench.contract.TRAINING_OPTIONS: optimizer, lr,
# momentum, weight_decay, grad_clip, num_threads, dali, weights_checksum).
ONEFLOW_OPTIONS: dict[str, Any] = {
    "graph": False,  # compile the training step as an nn.Graph (else eager)
    "zero_init_residual": False,  # ResNet-50: zero gamma of each block's last BatchNorm
}

Batch = list[flow.Tensor]


# --------------------------------------------------------------------------------------------
# Options, device, threads


def resolve_options(args: argparse.Namespace, cuda: bool, world_size: int) -> dict[str, Any]:
    """Shape options + the shared and OneFlow knobs with the model's defaults, checked."""
    if args.xla == "on":
        raise OptionError("--xla on: OneFlow has no XLA (graph=true is its compiler)")
    options = training_options(
        args.model,
        {**ONEFLOW_OPTIONS, **args.options},
        batch_size=args.batch_size,
        world_size=world_size,
        dataset=args.dataset,
        on_gpu=cuda,
        known=ONEFLOW_OPTIONS,
    )
    if args.dataset != "synthetic":
        raise OptionError("the OneFlow scripts generate synthetic data only (--dataset synthetic)")
    options["graph"] = bool(options["graph"])
    if args.model == "bert" and not 0 < int(options["max_predictions"]) < int(options["seq_len"]):
        raise OptionError("max_predictions must be between 1 and seq_len - 1")
    return options


def resolve_amp_dtype(precision: str, requested: str, cuda: bool) -> flow.dtype | None:
    """fp16 (loss-scaled) on GPU unless bf16 is asked for; None on CPU (no CPU AMP in 0.9.0)."""
    if precision != "amp":
        return None
    if not cuda:
        warn("oneflow 0.9.0 has no CPU AMP: running fp32 (amp_effective=false in the header)")
        return None
    return flow.bfloat16 if requested == "bf16" else flow.float16


def configure_threads(requested: int) -> tuple[int, str]:
    """CPU threads per process (driver.benchkit's rule); oneflow.distributed.launch exports
    OMP_NUM_THREADS=1 when it is unset and a node runs more than one process, as torchrun does.
    """
    threads, source = threads_per_process(requested)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    # oneflow uses every core by default and warns when told to use all of them: only lower it.
    if threads < (cores or 1):
        flow.set_num_threads(threads)
    return threads, source


def gpu_name(index: int) -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--id={index}", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    return out or f"cuda:{index}"


# --------------------------------------------------------------------------------------------
# Model, optimizer, step


def parameter_groups(model: nn.Module, options: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Biases and norm weights (1-d) get no weight decay, as in the NVIDIA recipes."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim <= 1]
    groups = [
        {"params": decay, "weight_decay": options["weight_decay"]},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    if options["graph"] and options["grad_clip"] > 0:
        # nn.Graph clips inside the compiled step, from the optimizer's parameter groups.
        for group in groups:
            group.update(clip_grad_max_norm=options["grad_clip"], clip_grad_norm_type=2.0)
    return groups


def build_optimizer(model: nn.Module, options: Mapping[str, Any]) -> flow.optim.Optimizer:
    groups = parameter_groups(model, options)
    if options["optimizer"] == "sgd":
        return flow.optim.SGD(groups, lr=options["lr"], momentum=options["momentum"])
    # No bias correction, eps 1e-6: the BERT reference optimizer.
    return flow.optim.AdamW(
        groups, lr=options["lr"], betas=(0.9, 0.999), eps=1e-6, do_bias_correction=False
    )


def grad_scaler() -> flow.amp.GradScaler:
    return flow.amp.GradScaler(
        init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000
    )


class TrainGraph(nn.Graph):
    """One whole training step, compiled on the first call."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: flow.optim.Optimizer,
        amp_dtype: flow.dtype | None,
    ) -> None:
        super().__init__()
        self.model = model
        self.add_optimizer(optimizer)
        if amp_dtype is not None:
            self.config.enable_amp(True, dtype=amp_dtype)
            if amp_dtype == flow.float16:
                self.set_grad_scaler(grad_scaler())

    def build(self, *batch: flow.Tensor) -> flow.Tensor:
        loss, _logits = self.model(*batch)
        loss.backward()
        return loss


StepFn = Callable[[Batch], flow.Tensor]


def eager_step(
    model: nn.Module,
    optimizer: flow.optim.Optimizer,
    options: Mapping[str, Any],
    device: flow.device,
    amp_dtype: flow.dtype | None,
) -> StepFn:
    scaler = grad_scaler() if amp_dtype == flow.float16 else None
    grad_clip = float(options["grad_clip"])
    params = [p for p in model.parameters() if p.requires_grad]

    def step(batch: Batch) -> flow.Tensor:
        if amp_dtype is not None:
            with flow.autocast(device.type, dtype=amp_dtype):
                loss, _logits = model(*batch)
        else:
            loss, _logits = model(*batch)
        if scaler is not None:
            scaler.scale(loss).backward()
            if grad_clip > 0:
                scaler.unscale_(optimizer)
                flow.nn.utils.clip_grad_norm_(params, grad_clip)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            if grad_clip > 0:
                flow.nn.utils.clip_grad_norm_(params, grad_clip)
            optimizer.step()
        optimizer.zero_grad()
        return loss.detach()

    return step


def synthetic_batch(
    model: str, options: Mapping[str, Any], batch_size: int, device: flow.device, seed: int
) -> Batch:
    """A random batch with the real inputs' shapes, made on the device once and reused."""
    rng = np.random.default_rng(seed)
    if model in IMAGE_MODELS:
        size = int(options["image_size"])
        images = rng.standard_normal((batch_size, 3, size, size), dtype=np.float32)
        labels = rng.integers(0, int(options["num_classes"]), (batch_size,))
        arrays = [images, labels.astype(np.int64)]
    else:
        seq_len, vocab = int(options["seq_len"]), int(options["vocab_size"])
        predictions = int(options["max_predictions"])
        # Distinct masked positions per sequence, never the [CLS] slot 0, in increasing order.
        positions = np.sort(
            np.stack([rng.permutation(seq_len - 1)[:predictions] + 1 for _ in range(batch_size)]),
            axis=1,
        )
        segment_ids = np.zeros((batch_size, seq_len), dtype=np.int64)
        segment_ids[:, seq_len // 2 :] = 1
        arrays = [
            rng.integers(0, vocab, (batch_size, seq_len)),
            segment_ids,
            np.ones((batch_size, seq_len), dtype=np.int64),
            positions,
            rng.integers(0, vocab, (batch_size, predictions)),
            rng.integers(0, 2, (batch_size,)),
        ]
        arrays = [a.astype(np.int64) for a in arrays]
    return [flow.tensor(a, device=device) for a in arrays]


def device_sync() -> None:
    """Wait for every instruction OneFlow's virtual machine has queued (eager is asynchronous
    on CPU too), so the step timestamp covers the optimizer update."""
    flow._oneflow_internal.eager.Sync()


def weights_checksum(model: nn.Module) -> float:
    """Sum of |w| over the rank's local weights: equal on every rank of a data-parallel job."""
    total = 0.0
    for param in model.parameters():
        local = param.to_local() if param.is_global else param
        total += float(local.abs().sum().numpy())
    return total


def rank_env() -> dict[str, int]:
    """The rank environment as OneFlow sees it: importing oneflow in a process that no launcher
    started sets RANK=-1 (and WORLD_SIZE=1), so the generic reader would log rank -1."""
    return {
        **rank_environment(),
        "rank": flow.env.get_rank(),
        "world_size": flow.env.get_world_size(),
        "local_rank": flow.env.get_local_rank(),
    }


def train(args: argparse.Namespace) -> int:
    env = rank_env()
    rank, world_size = env["rank"], env["world_size"]
    if args.device == "gpu" and not flow.cuda.is_available():
        raise OptionError("--device gpu but oneflow sees no CUDA device")
    cuda = args.device != "cpu" and flow.cuda.is_available()
    device = flow.device("cuda", env["local_rank"]) if cuda else flow.device("cpu")
    options = resolve_options(args, cuda, world_size)
    amp_dtype = resolve_amp_dtype(args.precision, args.amp_dtype, cuda)
    threads, threads_source = configure_threads(int(options["num_threads"]))
    graph_mode = options["graph"]
    distributed = world_size > 1

    flow.manual_seed(args.seed)  # same initial weights on every rank
    model = build_training_model(args.model, options).to(device)
    model.train()
    parameters = count_parameters(model)
    placement = None
    if graph_mode and distributed:
        placement = flow.placement(device.type, ranks=list(range(world_size)))
        model.to_global(placement=placement, sbp=flow.sbp.broadcast)
    optimizer = build_optimizer(model, options)
    batch = synthetic_batch(args.model, options, args.batch_size, device, args.seed + rank)

    step: StepFn
    if graph_mode:
        if placement is not None:  # each rank's batch is its shard of the global batch
            batch = [t.to_global(placement=placement, sbp=flow.sbp.split(0)) for t in batch]
        graph = TrainGraph(model, optimizer, amp_dtype)
        step = lambda tensors: graph(*tensors)  # noqa: E731 (the graph takes tensors, not a list)
        backend = "nn.Graph global tensors" if distributed else None
    else:
        train_model = nn.parallel.DistributedDataParallel(model) if distributed else model
        step = eager_step(train_model, optimizer, options, device, amp_dtype)
        backend = "DistributedDataParallel" if distributed else None

    def host_loss(loss: flow.Tensor) -> float:
        if loss.is_global:  # the graph's loss is split over the ranks: gather it first
            loss = loss.to_global(sbp=flow.sbp.broadcast).to_local()
        return float(loss.numpy())

    record = {
        **options,
        "batch_size": args.batch_size,
        "global_batch_size": args.batch_size * world_size,
        "precision": args.precision,
        "amp_dtype": str(amp_dtype).removeprefix("oneflow.") if amp_dtype else None,
        "amp_effective": amp_dtype is not None,
        "dataset": args.dataset,
        "warmup_steps": args.warmup_steps,
        "total_steps": args.total_steps,
        "device": str(device),
        "seed": args.seed,
        "xla": False,
        "num_threads": threads,
        "num_threads_source": threads_source,
        "distributed_backend": backend,
        "parameters": parameters,
    }
    versions = {
        "oneflow": flow.__version__,
        "numpy": np.__version__,
        "oneflow_git": getattr(flow, "__git_commit__", None),
        # The PyPI wheel is a CUDA build even where no GPU is used (hence the nvidia wheels).
        "oneflow_cuda": oneflow.sysconfig.get_cuda_version()
        if oneflow.sysconfig.with_cuda()
        else None,
    }
    devices = [gpu_name(device.index or 0)] if cuda else [cpu_model_name()]
    logger = StepLogger(framework=FRAMEWORK, model=args.model, sync=device_sync, rank_env=env)
    logger.header(versions=versions, devices=devices, options=record)

    if distributed:
        flow.comm.barrier()  # start the clocks of all ranks together
    logger.begin()
    for number in range(1, args.total_steps + 1):
        loss = step(batch)
        logger.sync()
        logger.step(number, args.batch_size, host_loss(loss))
    logger.end()
    if options["weights_checksum"]:
        print_weights_checksum(rank, weights_checksum(model))
    if distributed:
        flow.comm.barrier()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_benchmark_args(
        argv, description="dlperf OneFlow training benchmark", models=MODELS
    )
    try:
        return train(args)
    except BaseException as error:  # re-raised below unless it is an allocator failure
        if isinstance(error, (SystemExit, KeyboardInterrupt)) or not is_oom(error):
            raise
        oom_exit(error, flow.env.get_rank(), args.batch_size)


if __name__ == "__main__":
    sys.exit(main())
