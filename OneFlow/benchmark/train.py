"""dlperf OneFlow training benchmark: ResNet-50 v1.5 and BERT-base pre-training, eager or graph.

The OneFlow adapter of ``driver.bench.loop.run_benchmark``: exactly ``--total-steps`` training
steps, with the step-log records of ``driver.bench.protocol`` on every rank. One process per
device, started by ``python -m oneflow.distributed.launch`` when there are
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

from driver.bench.contract import OptionError, warn
from driver.bench.host import cpu_count, cpu_model_name
from driver.bench.loop import Adapter, run_benchmark
from OneFlow.benchmark.models import IMAGE_MODELS, build_training_model, count_parameters
from PyTorch.benchmark.torchlike import backward_and_step

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


def resolve_amp_dtype(precision: str, requested: str, cuda: bool) -> flow.dtype | None:
    """fp16 (loss-scaled) on GPU unless bf16 is asked for; None on CPU (no CPU AMP in 0.9.0)."""
    if precision != "amp":
        return None
    if not cuda:
        warn("oneflow 0.9.0 has no CPU AMP: running fp32 (amp_effective=false in the header)")
        return None
    return flow.bfloat16 if requested == "bf16" else flow.float16


def apply_threads(threads: int) -> None:
    """oneflow uses every core by default and warns when told to use all of them: only lower
    it (oneflow.distributed.launch exports OMP_NUM_THREADS=1 when it is unset and a node runs
    more than one process, as torchrun does)."""
    if threads < cpu_count():
        flow.set_num_threads(threads)


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
        backward_and_step(flow, loss, optimizer, scaler, params, grad_clip)
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


class OneflowAdapter(Adapter):
    framework = "oneflow"
    own_options = ONEFLOW_OPTIONS

    def setup(self) -> bool:
        args, run = self.args, self.run
        # Importing oneflow in a process that no launcher started sets RANK=-1 (and
        # WORLD_SIZE=1): the ranks are OneFlow's own.
        run.rank, run.world_size = flow.env.get_rank(), flow.env.get_world_size()
        run.local_rank = flow.env.get_local_rank()
        if args.device == "gpu" and not flow.cuda.is_available():
            raise OptionError("--device gpu but oneflow sees no CUDA device")
        if args.xla == "on":
            raise OptionError("--xla on: OneFlow has no XLA (graph=true is its compiler)")
        self.cuda = args.device != "cpu" and flow.cuda.is_available()
        self.flow_device = flow.device("cuda", run.local_rank) if self.cuda else flow.device("cpu")
        return self.cuda

    def check_options(self, options: dict[str, Any]) -> None:
        args = self.args
        options["graph"] = bool(options["graph"])
        self.amp_dtype = resolve_amp_dtype(args.precision, args.amp_dtype, self.cuda)
        apply_threads(self.run.threads)

    def build_model(self) -> int:
        args, options, run, device = self.args, self.options, self.run, self.flow_device
        flow.manual_seed(args.seed)  # same initial weights on every rank
        model = build_training_model(args.model, options).to(device)
        model.train()
        self.model = model
        parameters = count_parameters(model)
        placement = None
        if options["graph"] and run.distributed:
            placement = flow.placement(device.type, ranks=list(range(run.world_size)))
            model.to_global(placement=placement, sbp=flow.sbp.broadcast)
        optimizer = build_optimizer(model, options)
        batch = synthetic_batch(args.model, options, args.batch_size, device, args.seed + run.rank)
        self.backend: str | None
        if options["graph"]:
            if placement is not None:  # each rank's batch is its shard of the global batch
                batch = [t.to_global(placement=placement, sbp=flow.sbp.split(0)) for t in batch]
            graph = TrainGraph(model, optimizer, self.amp_dtype)
            self.train_step: StepFn = lambda tensors: graph(*tensors)  # noqa: E731
            self.backend = "nn.Graph global tensors" if run.distributed else None
        else:
            train_model = nn.parallel.DistributedDataParallel(model) if run.distributed else model
            self.train_step = eager_step(train_model, optimizer, options, device, self.amp_dtype)
            self.backend = "DistributedDataParallel" if run.distributed else None
        self.batch = batch
        return parameters

    def make_batch(self) -> Batch:
        return self.batch

    def step(self, batch: Batch) -> flow.Tensor:
        return self.train_step(batch)

    def sync(self) -> None:
        device_sync()

    def host_loss(self, loss: flow.Tensor) -> float:
        if loss.is_global:  # the graph's loss is split over the ranks: gather it first
            loss = loss.to_global(sbp=flow.sbp.broadcast).to_local()
        return float(loss.numpy())

    def device(self) -> str:
        return str(self.flow_device)

    def versions(self) -> dict[str, Any]:
        return {
            "oneflow": flow.__version__,
            "numpy": np.__version__,
            "oneflow_git": getattr(flow, "__git_commit__", None),
            # The PyPI wheel is a CUDA build even where no GPU is used (hence the nvidia wheels).
            "oneflow_cuda": oneflow.sysconfig.get_cuda_version()
            if oneflow.sysconfig.with_cuda()
            else None,
        }

    def devices(self) -> list[str]:
        return [gpu_name(self.flow_device.index or 0)] if self.cuda else [cpu_model_name()]

    def header_options(self) -> dict[str, Any]:
        amp_dtype = self.amp_dtype
        return {
            "amp_dtype": str(amp_dtype).removeprefix("oneflow.") if amp_dtype else None,
            "amp_effective": amp_dtype is not None,
            "distributed_backend": self.backend,
        }

    def barrier(self) -> None:
        flow.comm.barrier()

    def weights_checksum(self) -> float:
        return weights_checksum(self.model)


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(
        OneflowAdapter, argv, description="dlperf OneFlow training benchmark", models=MODELS
    )


if __name__ == "__main__":
    sys.exit(main())
