"""A bare MXNet loop of the benchmark's ResNet-50, for ``dlperf parity`` (no harness).

Build the Gluon model (hybridized with static memory, as Gluon's own recipes train), one
synthetic batch, forward/backward/``gluon.Trainer`` SGD with momentum (no weight decay on biases
and norm weights, global-norm clipping), ``mxnet.contrib.amp`` for the low-precision path (bf16
on CPUs with oneDNN's bf16 kernels, fp16 with loss scaling on GPUs), a timer around whole steps,
one host sync (``waitall``) at the end. Shares with the kit's benchmark only the model
definition; takes every option that changes the computation (:data:`OPTIONS`), each applied in
plain MXNet. mxnet reads OMP_NUM_THREADS when it loads: the loop sets it first.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root

from driver.studies.bareloop import COMMON_OPTIONS, only, parse_args, print_result  # noqa: E402

OPTIONS: dict[str, Any] = {
    **COMMON_OPTIONS,
    "device": "auto",  # auto: gpu(0) when one is visible, else cpu(0); or cpu(0), gpu(<n>)
    "amp_dtype": None,  # amp only: None (bf16 on CPU, fp16 on GPU), bfloat16, float16
    "amp_effective": False,  # a fact it reports: the low-precision kernels run here
    "hybridize": True,
}
REFUSALS = {
    "device": lambda value: (
        None if re.fullmatch(r"auto|cpu\(0\)|gpu\(\d+\)", value) else "expected cpu(0) or gpu(N)"
    ),
    "amp_dtype": lambda value: (
        None if value in (None, "bfloat16", "float16") else "expected bfloat16 or float16"
    ),
    "optimizer": only("sgd", "MXNet 1.9 has no AdamW of its own (the kit brings one)"),
    "xla": only(False, "MXNet has no XLA"),
}


def main() -> int:
    args = parse_args("mxnet", options=OPTIONS, refusals=REFUSALS)
    options = args.options
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # read once, when mxnet loads

    import mxnet as mx
    import numpy as np
    from mxnet import autograd, gluon
    from mxnet.contrib import amp

    from MxNet.benchmark.models import ImageClassifierLoss, ResNet50V15, initialize

    device = options["device"]
    if device == "auto":
        device = "gpu(0)" if mx.context.num_gpus() > 0 else "cpu(0)"
    ctx = mx.gpu(int(device[4:-1])) if device.startswith("gpu") else mx.cpu()
    amp_dtype = None
    if args.precision == "amp":
        amp_dtype = options["amp_dtype"] or ("float16" if ctx.device_type == "gpu" else "bfloat16")
    effective = amp_dtype is not None and low_precision_kernels(mx, np, ctx, amp_dtype)
    if effective:
        amp.init(target_dtype=amp_dtype)  # before the model is built: it patches the operators
    mx.random.seed(options["seed"])
    size, classes = options["image_size"], options["num_classes"]
    model = ResNet50V15(num_classes=classes, zero_init_residual=options["zero_init_residual"])
    net = ImageClassifierLoss(model)
    initialize(net, ctx)
    for param in net.collect_params().values():
        if len(param.shape) <= 1:  # biases and norm parameters: no weight decay
            param.wd_mult = 0.0
    if options["hybridize"]:
        net.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(
        net.collect_params(), "sgd",
        {"learning_rate": options["lr"], "momentum": options["momentum"],
         "wd": options["weight_decay"]},
    )  # fmt: skip
    loss_scaling = effective and amp_dtype == "float16"
    if loss_scaling:
        amp.init_trainer(trainer)
    images = mx.nd.random.normal(shape=(args.batch_size, 3, size, size), ctx=ctx)
    labels = mx.nd.random.randint(0, classes, shape=(args.batch_size,), ctx=ctx).astype("float32")
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    clip = options["grad_clip"]

    def step() -> mx.nd.NDArray:
        with autograd.record():
            loss, _logits = net(images, labels)
            if loss_scaling:
                with amp.scale_loss(loss, trainer) as scaled:
                    autograd.backward(scaled)
            else:
                loss.backward()
        if clip > 0:
            trainer.allreduce_grads()
            if loss_scaling:
                amp.unscale(trainer)
            grads = [g for p in params for g in p.list_grad()]
            gluon.utils.clip_global_norm(grads, clip, check_isfinite=False)
            trainer.update(1)
        else:
            trainer.step(1)
        return loss

    for _ in range(args.warmup_steps):
        step()
    mx.nd.waitall()
    cpu_start, start = time.process_time(), time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    mx.nd.waitall()  # the one host sync
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start

    optimizer = trainer._optimizer
    applied = {
        "device": str(ctx),
        "amp_dtype": amp_dtype,
        "amp_effective": effective,
        "hybridize": bool(net._active),
        "image_size": int(images.shape[-1]),
        "num_classes": classes,
        "zero_init_residual": options["zero_init_residual"],
        "optimizer": type(optimizer).__name__.lower(),
        "lr": float(trainer.learning_rate),
        "momentum": float(optimizer.momentum),
        "weight_decay": float(optimizer.wd),
        "grad_clip": clip,
        "num_threads": int(os.environ["OMP_NUM_THREADS"]),
        "seed": options["seed"],
        "xla": False,
    }
    print_result(
        "mxnet", args, seconds=seconds, cpu_seconds=cpu_seconds, device=str(ctx),
        loss=float(loss.asscalar()), applied=applied,
        parameters=sum(int(np.prod(p.shape)) for p in params),
    )  # fmt: skip
    return 0


def low_precision_kernels(mx: Any, np: Any, ctx: Any, dtype: str) -> bool:
    """Whether a convolution and a dense layer run in ``dtype`` here (oneDNN's bf16 needs
    AVX-512 on x86); asked before ``amp.init`` patches the operators."""
    target = np.dtype([("bfloat16", np.uint16)]) if dtype == "bfloat16" else np.float16
    try:
        data = mx.nd.amp_cast(mx.nd.ones((1, 3, 8, 8), ctx=ctx), dtype=target)
        kernel = mx.nd.amp_cast(mx.nd.ones((4, 3, 3, 3), ctx=ctx), dtype=target)
        conv = mx.nd.Convolution(data, kernel, no_bias=True, num_filter=4, kernel=(3, 3))
        weight = mx.nd.amp_cast(mx.nd.ones((2, 144), ctx=ctx), dtype=target)
        mx.nd.FullyConnected(conv, weight, no_bias=True, num_hidden=2).wait_to_read()
    except mx.base.MXNetError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
