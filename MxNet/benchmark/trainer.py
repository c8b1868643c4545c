"""The MXNet adapter of ``run_benchmark`` (imported by ``train.py`` once OMP_NUM_THREADS is set).

Data parallelism across processes is the parameter-server ``dist_sync`` kvstore: the servers
sum the gradients and every worker runs the optimizer on its own copy
(``update_on_kvstore=False``), so gradient clipping sees the global gradient. AMP is
``mxnet.contrib.amp``: bf16 on CPU (oneDNN runs convolutions and dense layers in bf16), fp16
with dynamic loss scaling on GPU; ``amp_effective`` in the header says whether low-precision
kernels really ran.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from typing import Any

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.contrib import amp

from driver.bench.contract import OptionError, warn
from driver.bench.host import cpu_model_name
from driver.bench.loop import Adapter
from MxNet.benchmark.models import build_training_net, count_parameters, initialize
from MxNet.benchmark.optim import register_adamw

# MXNet's own knobs (the shared ones are driver.bench.contract.TRAINING_OPTIONS: optimizer, lr,
# momentum, weight_decay, grad_clip, num_threads, dali, weights_checksum).
MXNET_OPTIONS: dict[str, Any] = {
    "hybridize": True,  # compile the Gluon blocks into a static graph (static_alloc/shape)
    "zero_init_residual": False,  # ResNet-50: zero gamma of each block's last BatchNorm
    "kvstore": "dist_sync",  # multi-process kvstore: dist_sync | dist_device_sync
}
# MXNet's allocator failures that do not say "out of memory" (CPU: std::bad_alloc).
OOM_MESSAGES = ("cudamalloc", "std::bad_alloc", "cannot allocate memory")


def gpu_names() -> list[str]:
    """Visible GPUs by name (MXNet 1.9 has no device-name API); empty without a driver."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    names = [line.strip() for line in out.splitlines() if line.strip()]
    if visible:
        indices = [int(i) for i in visible.split(",") if i.strip().isdigit()]
        names = [names[i] for i in indices if i < len(names)]
    return names


def low_precision_supported(ctx: mx.Context, dtype: str) -> bool:
    """Whether this build and device run dense layers and convolutions in ``dtype``.

    Asked before ``amp.init`` patches the operators: oneDNN's bf16 kernels need AVX-512 on
    x86, and on a CPU without it every bf16 convolution fails at its first use. Then AMP is
    not effective here; the run trains in FP32 and its header says so.
    """
    # MXNet names bf16 by numpy's structured dtype (mxnet.contrib.amp.amp.bfloat16).
    target = np.dtype([("bfloat16", np.uint16)]) if dtype == "bfloat16" else np.float16
    try:
        data = mx.nd.amp_cast(mx.nd.ones((1, 3, 8, 8), ctx=ctx), dtype=target)
        kernel = mx.nd.amp_cast(mx.nd.ones((4, 3, 3, 3), ctx=ctx), dtype=target)
        conv = mx.nd.Convolution(data, kernel, no_bias=True, num_filter=4, kernel=(3, 3))
        weight = mx.nd.amp_cast(mx.nd.ones((2, 144), ctx=ctx), dtype=target)
        dense = mx.nd.FullyConnected(conv, weight, no_bias=True, num_hidden=2)
        dense.wait_to_read()
    except mx.base.MXNetError as error:
        warn(f"{dtype} kernels unavailable here, AMP runs FP32 (amp_effective=false): {error}")
        return False
    return True


def synthetic_batch(
    model: str, options: Mapping[str, Any], batch_size: int, ctx: mx.Context
) -> list[mx.nd.NDArray]:
    """A random batch with the real inputs' shapes, made on the device once and reused.

    Index inputs are float32: MXNet's Embedding/take/pick take float indices (exact to 2^24).
    """
    nd = mx.nd
    if model == "resnet50":
        size, classes = int(options["image_size"]), int(options["num_classes"])
        images = nd.random.normal(shape=(batch_size, 3, size, size), ctx=ctx)
        labels = nd.random.randint(0, classes, shape=(batch_size,), ctx=ctx).astype("float32")
        return [images, labels]
    seq_len, vocab = int(options["seq_len"]), int(options["vocab_size"])
    predictions = int(options["max_predictions"])
    # Distinct masked positions per sequence, never the [CLS] slot 0, in increasing order.
    rng = np.random.default_rng(int(nd.random.randint(0, 2**31 - 1).asscalar()))
    positions = np.sort(
        np.stack([rng.permutation(seq_len - 1)[:predictions] + 1 for _ in range(batch_size)]),
        axis=1,
    )
    segment_ids = np.zeros((batch_size, seq_len), dtype="float32")
    segment_ids[:, seq_len // 2 :] = 1
    return [
        nd.random.randint(0, vocab, shape=(batch_size, seq_len), ctx=ctx).astype("float32"),
        nd.array(segment_ids, ctx=ctx),
        nd.ones((batch_size, seq_len), ctx=ctx),
        nd.array(positions, ctx=ctx, dtype="float32"),
        nd.random.randint(0, vocab, shape=(batch_size, predictions), ctx=ctx).astype("float32"),
        nd.random.randint(0, 2, shape=(batch_size,), ctx=ctx).astype("float32"),
    ]


class MxnetAdapter(Adapter):
    framework = "mxnet"
    own_options = MXNET_OPTIONS
    oom_messages = OOM_MESSAGES

    def setup(self) -> bool:
        args, run = self.args, self.run
        self.gpus = gpu_names() if args.device != "cpu" else []
        self.use_gpu = bool(self.gpus)
        if args.device == "gpu" and not self.use_gpu:
            raise OptionError("--device gpu but no GPU is visible")
        if args.xla == "on":
            raise OptionError("--xla on: MXNet has no XLA")
        # The threads were set before mxnet loaded (OMP_NUM_THREADS, train.py).
        self.distributed = os.environ.get("DMLC_ROLE") == "worker"
        run.world_size = int(os.environ.get("DMLC_NUM_WORKER", "1")) if self.distributed else 1
        return self.use_gpu

    def check_options(self, options: dict[str, Any]) -> None:
        if options["kvstore"] not in ("dist_sync", "dist_device_sync"):
            raise OptionError("kvstore must be dist_sync or dist_device_sync")

    def build_model(self) -> int:
        args, options, run = self.args, self.options, self.run
        use_gpu = self.use_gpu
        self.ctx = ctx = mx.gpu(run.local_rank) if use_gpu else mx.cpu()
        amp_dtype = None
        if args.precision == "amp":
            if not use_gpu and args.amp_dtype == "fp16":
                raise OptionError("--amp-dtype fp16 is GPU only; CPU AMP runs in bf16 (oneDNN)")
            if use_gpu and args.amp_dtype == "bf16":
                raise OptionError("--amp-dtype bf16: MXNet 1.9's bf16 AMP is CPU only (oneDNN)")
            amp_dtype = "float16" if use_gpu else "bfloat16"
        self.amp_dtype = amp_dtype
        self.amp_effective = amp_dtype is not None and low_precision_supported(ctx, amp_dtype)
        if self.amp_effective:
            amp.init(target_dtype=amp_dtype)  # before the model is built: it patches the ops

        kvstore = mx.kv.create(options["kvstore"]) if self.distributed else None
        self.kvstore = kvstore
        if kvstore is not None:
            run.rank, run.world_size = kvstore.rank, kvstore.num_workers
        mx.random.seed(args.seed)  # same initial weights on every worker
        net = build_training_net(args.model, options)
        initialize(net, ctx)
        parameters = count_parameters(net)
        for param in net.collect_params().values():
            if len(param.shape) <= 1:  # biases and norm parameters: no weight decay
                param.wd_mult = 0.0
        if options["hybridize"]:
            net.hybridize(static_alloc=True, static_shape=True)
        self.net = net
        self.trainer = self.build_trainer(net)
        self.loss_scaling = self.amp_effective and amp_dtype == "float16"
        if self.loss_scaling:
            amp.init_trainer(self.trainer)

        mx.random.seed(args.seed + run.rank)  # per-worker data and dropout
        self.batch = synthetic_batch(args.model, options, args.batch_size, ctx)
        self.params = [p for p in net.collect_params().values() if p.grad_req != "null"]
        return parameters

    def build_trainer(self, net: gluon.Block) -> gluon.Trainer:
        options, kvstore = self.options, self.kvstore
        optimizer_params: dict[str, Any] = {
            "learning_rate": options["lr"],
            "wd": options["weight_decay"],
        }
        if options["optimizer"] == "sgd":
            optimizer_params["momentum"] = options["momentum"]
            optimizer_name = "sgd"
        else:
            optimizer_name = register_adamw()
        # update_on_kvstore=False: the servers only sum gradients; each worker runs the
        # optimizer, so clipping and AMP's overflow check see the summed gradient (and no
        # pickled optimizer has to travel to the servers).
        trainer = gluon.Trainer(
            net.collect_params(),
            optimizer_name,
            optimizer_params,
            kvstore=kvstore,
            update_on_kvstore=False if kvstore is not None else None,
        )
        if kvstore is not None:
            # Broadcast worker 0's initial weights now, not lazily inside the first step: the
            # Trainer uses one kvstore key per parameter for both its initial value and its
            # gradients, and without this barrier about half of our 2-process runs on MXNet
            # 1.9.1 ended with workers out of sync (a slow worker pulled a gradient sum as its
            # weights).
            trainer._init_kvstore()
            trainer._init_params()
            mx.nd.waitall()
            kvstore._barrier()
        return trainer

    def make_batch(self) -> list[mx.nd.NDArray]:
        return self.batch

    def step(self, batch: list[mx.nd.NDArray]) -> mx.nd.NDArray:
        trainer, loss_scaling = self.trainer, self.loss_scaling
        grad_clip, world_size = float(self.options["grad_clip"]), self.run.world_size
        with autograd.record():
            loss, _logits = self.net(*batch)
            if loss_scaling:
                with amp.scale_loss(loss, trainer) as scaled:
                    autograd.backward(scaled)
            else:
                loss.backward()
        # Each worker's loss is its batch mean and the kvstore sums over workers: normalise by
        # the worker count.
        if grad_clip > 0:
            trainer.allreduce_grads()
            if loss_scaling:
                amp.unscale(trainer)
            grads = [g for p in self.params for g in p.list_grad()]
            # check_isfinite=False: no host sync inside the step.
            gluon.utils.clip_global_norm(grads, grad_clip, check_isfinite=False)
            trainer.update(world_size)
        else:
            trainer.step(world_size)
        return loss

    def sync(self) -> None:
        mx.nd.waitall()

    def host_loss(self, loss: mx.nd.NDArray) -> float:
        return float(loss.asscalar())

    def device(self) -> str:
        return str(self.ctx)

    def versions(self) -> dict[str, Any]:
        features = mx.runtime.Features()
        return {
            "mxnet": mx.__version__,
            "numpy": np.__version__,
            "mkldnn": features.is_enabled("MKLDNN"),
            "cuda": features.is_enabled("CUDA"),
        }

    def devices(self) -> list[str]:
        if self.use_gpu:
            return [self.gpus[self.run.local_rank % len(self.gpus)]]
        return [cpu_model_name()]

    def header_options(self) -> dict[str, Any]:
        kvstore = self.kvstore
        return {
            "amp_dtype": self.amp_dtype,
            "amp_effective": self.amp_effective,
            "distributed_backend": kvstore.type if kvstore is not None else None,
        }

    def barrier(self) -> None:
        if self.kvstore is not None:
            self.kvstore._barrier()

    def weights_checksum(self) -> float:
        return sum(float(p.data().abs().sum().asscalar()) for p in self.params)
