"""A bare MXNet loop of the benchmark's ResNet-50, for ``dlperf parity`` (no harness).

Build the Gluon model (hybridized, as Gluon's own recipes train), one synthetic batch,
forward/backward/``gluon.Trainer`` SGD as it comes (``mxnet.contrib.amp`` bf16 for the
low-precision path where this CPU has bf16 kernels), a timer around whole steps, one host sync
(``waitall``) at the end. Shares with the kit's benchmark only the model definition.
OMP_NUM_THREADS is read when mxnet loads: the parity command sets it for both sides.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402
from mxnet.contrib import amp  # noqa: E402

from driver.studies.bareloop import parse_args, print_result  # noqa: E402
from MxNet.benchmark.models import ImageClassifierLoss, ResNet50V15, initialize  # noqa: E402


def bf16_kernels(ctx: mx.Context) -> bool:
    """Whether a bf16 convolution runs here (oneDNN's bf16 needs AVX-512 on x86)."""
    bf16 = np.dtype([("bfloat16", np.uint16)])
    try:
        data = mx.nd.amp_cast(mx.nd.ones((1, 3, 8, 8), ctx=ctx), dtype=bf16)
        kernel = mx.nd.amp_cast(mx.nd.ones((4, 3, 3, 3), ctx=ctx), dtype=bf16)
        mx.nd.Convolution(data, kernel, no_bias=True, num_filter=4, kernel=(3, 3)).wait_to_read()
    except mx.base.MXNetError:
        return False
    return True


def main() -> int:
    args = parse_args("mxnet")
    ctx = mx.gpu(0) if mx.context.num_gpus() > 0 else mx.cpu()
    amp_dtype = None
    if args.precision == "amp":
        amp_dtype = "float16" if ctx.device_type == "gpu" else "bfloat16"
        if amp_dtype == "bfloat16" and not bf16_kernels(ctx):
            amp_dtype = None  # no bf16 kernels on this CPU: FP32, as the kit's run
        if amp_dtype is not None:
            amp.init(target_dtype=amp_dtype)
    mx.random.seed(1234)
    size, classes = args.options["image_size"], args.options["num_classes"]
    net = ImageClassifierLoss(ResNet50V15(num_classes=classes))
    initialize(net, ctx)
    net.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(
        net.collect_params(), "sgd",
        {"learning_rate": 0.1 * args.batch_size / 256, "momentum": 0.9, "wd": 1e-4},
    )  # fmt: skip
    loss_scaling = amp_dtype == "float16"
    if loss_scaling:
        amp.init_trainer(trainer)
    images = mx.nd.random.normal(shape=(args.batch_size, 3, size, size), ctx=ctx)
    labels = mx.nd.random.randint(0, classes, shape=(args.batch_size,), ctx=ctx).astype("float32")

    def step() -> mx.nd.NDArray:
        with autograd.record():
            loss, _logits = net(images, labels)
            if loss_scaling:
                with amp.scale_loss(loss, trainer) as scaled:
                    autograd.backward(scaled)
            else:
                loss.backward()
        trainer.step(1)
        return loss

    for _ in range(args.warmup_steps):
        step()
    mx.nd.waitall()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    mx.nd.waitall()  # the one host sync
    seconds = time.perf_counter() - start
    parameters = sum(
        int(np.prod(p.shape)) for p in net.collect_params().values() if p.grad_req != "null"
    )
    print_result(
        "mxnet", args, seconds=seconds, device=str(ctx), loss=float(loss.asscalar()),
        parameters=parameters, extra={"amp_effective": amp_dtype is not None},
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
