"""The PaddlePaddle adapter behind ``PaddlePaddle/benchmark/train.py`` (imports paddle).

AMP is ``paddle.amp.auto_cast`` at level O1: fp16 with a GradScaler on GPU (bf16 when asked).
On CPU paddle 3.3.1 makes auto_cast a no-op (it warns "amp_guard can only be enabled on
CUDAPlace..."), so an amp case on CPU really trains in fp32: the header records
``amp_effective: false`` and the framework plug-in declares ``has_amp_on_cpu=False``.

A step does no host synchronisation of its own; its time ends when its loss is fetched to the
host (``float(loss)``), which waits for the device.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import paddle
import paddle.distributed as dist
from paddle import nn

from driver.bench.contract import OptionError
from driver.bench.host import cpu_model_name
from driver.bench.loop import Adapter
from PaddlePaddle.benchmark.models import (
    IMAGE_MODELS,
    Batch,
    build_model,
    synthetic_batch,
    training_loss,
)

PADDLE_OPTIONS: dict[str, Any] = {
    "channels_last": False,  # NHWC activations (ResNet-50), Paddle's fast AMP layout on GPU
    "zero_init_residual": False,  # ResNet-50: zero gamma of each block's last BatchNorm
    "init_loss_scaling": 32768.0,  # fp16 GradScaler's first scale
}


def resolve_device(requested: str, local_rank: int) -> bool:
    """Select this process's device; returns whether it trains on a GPU."""
    cuda = paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0
    if requested == "gpu" and not cuda:
        raise OptionError("--device gpu but this paddle build sees no CUDA device")
    if requested == "cpu" or not cuda:
        paddle.set_device("cpu")
        return False
    paddle.set_device(f"gpu:{local_rank}")
    return True


def amp_dtype(precision: str, requested: str, on_gpu: bool) -> str | None:
    if precision != "amp":
        return None
    if not on_gpu:
        if requested == "fp16":
            raise OptionError("--amp-dtype fp16 is GPU only")
        return "bfloat16"  # what auto_cast would use on CPU, were it not a no-op there
    return "bfloat16" if requested == "bf16" else "float16"


def build_optimizer(model: nn.Layer, options: Mapping[str, Any]) -> paddle.optimizer.Optimizer:
    clip = nn.ClipGradByGlobalNorm(options["grad_clip"]) if options["grad_clip"] > 0 else None
    # Biases and norm weights (1-d) get no weight decay, as in the NVIDIA recipes.
    decay = [p for p in model.parameters() if not p.stop_gradient and len(p.shape) > 1]
    no_decay = [p for p in model.parameters() if not p.stop_gradient and len(p.shape) <= 1]
    if options["optimizer"] == "sgd":
        return paddle.optimizer.Momentum(
            learning_rate=options["lr"],
            momentum=options["momentum"],
            parameters=[
                {"params": decay, "weight_decay": options["weight_decay"]},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            grad_clip=clip,
        )
    decay_names = {p.name for p in decay}
    return paddle.optimizer.AdamW(
        learning_rate=options["lr"],
        beta1=0.9,
        beta2=0.999,
        epsilon=1e-6,
        parameters=decay + no_decay,
        weight_decay=options["weight_decay"],
        apply_decay_param_fun=lambda name: name in decay_names,
        grad_clip=clip,
    )


def make_step(
    model_name: str,
    model: nn.Layer,
    optimizer: paddle.optimizer.Optimizer,
    dtype: str | None,
    scaler: paddle.amp.GradScaler | None,
) -> Callable[[Batch], paddle.Tensor]:
    def step(batch: Batch) -> paddle.Tensor:
        with paddle.amp.auto_cast(enable=dtype is not None, dtype=dtype or "float16", level="O1"):
            loss = training_loss(model_name, model, batch)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)  # unscales, then the optimizer clips and updates
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.clear_grad(set_to_zero=False)
        return loss

    return step


def library_versions(on_gpu: bool) -> dict[str, Any]:
    versions: dict[str, Any] = {"paddle": paddle.__version__, "numpy": np.__version__}
    if on_gpu:
        versions["cuda"] = paddle.version.cuda()
        versions["cudnn"] = paddle.version.cudnn()
    return versions


def device_names(on_gpu: bool) -> list[str]:
    if on_gpu:
        return [paddle.device.cuda.get_device_name()]
    return [cpu_model_name()]


class PaddleAdapter(Adapter):
    framework = "paddle"
    own_options = PADDLE_OPTIONS

    def setup(self) -> bool:
        args = self.args
        if args.xla == "on":
            raise OptionError("--xla on: PaddlePaddle has no XLA (framework has_xla=False)")
        # The threads were set before paddle loaded (OMP_NUM_THREADS, train.py).
        self.on_gpu = resolve_device(args.device, self.run.local_rank)
        return self.on_gpu

    def build_model(self) -> int:
        args, options, run = self.args, self.options, self.run
        if run.distributed:  # gloo on CPU (the launcher sets PADDLE_DISTRI_BACKEND), NCCL on GPU
            dist.init_parallel_env()
        paddle.seed(args.seed)  # same initial weights on every rank (DataParallel syncs them too)
        image_model = args.model in IMAGE_MODELS
        self.data_format = "NHWC" if options["channels_last"] and image_model else "NCHW"
        model = build_model(args.model, options, self.data_format)
        model.train()
        self.model = model
        optimizer = build_optimizer(model, options)
        self.dtype = amp_dtype(args.precision, args.amp_dtype, self.on_gpu)
        scaler = None
        if self.dtype == "float16":
            scaler = paddle.amp.GradScaler(init_loss_scaling=float(options["init_loss_scaling"]))
        train_model = paddle.DataParallel(model) if run.distributed else model
        paddle.seed(args.seed + run.rank)
        self.batch = synthetic_batch(args.model, options, args.batch_size, self.data_format)
        self.train_step = make_step(args.model, train_model, optimizer, self.dtype, scaler)
        return int(sum(int(np.prod(p.shape)) for p in model.parameters()))

    def make_batch(self) -> Batch:
        return self.batch

    def step(self, batch: Batch) -> paddle.Tensor:
        return self.train_step(batch)  # host_loss's fetch waits for the step: the device sync

    def device(self) -> str:
        return "gpu" if self.on_gpu else "cpu"

    def versions(self) -> dict[str, Any]:
        return library_versions(self.on_gpu)

    def devices(self) -> list[str]:
        return device_names(self.on_gpu)

    def header_options(self) -> dict[str, Any]:
        dtype, distributed = self.dtype, self.run.distributed
        return {
            "amp_dtype": dtype,
            "amp_level": "O1" if dtype else None,
            "amp_effective": dtype is not None and self.on_gpu,
            "data_format": self.data_format if self.args.model in IMAGE_MODELS else None,
            "distributed_backend": ("nccl" if self.on_gpu else "gloo") if distributed else None,
        }

    def barrier(self) -> None:
        dist.barrier()

    def weights_checksum(self) -> float:
        return sum(float(p.abs().sum()) for p in self.model.parameters() if not p.stop_gradient)
