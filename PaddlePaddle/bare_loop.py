"""A bare PaddlePaddle loop of the benchmark's ResNet-50, for ``dlperf parity`` (no harness).

Build the model (dynamic graph, NCHW or NHWC), one synthetic batch, forward/backward/step with
``paddle.optimizer.Momentum`` or ``AdamW`` (no weight decay on biases and norm weights,
global-norm clipping), ``paddle.amp.auto_cast`` at level O1 for the low-precision path (a
GradScaler for fp16), a timer around whole steps, one host sync (the loss fetch) at the end.
Shares with the kit's benchmark only the model definition; takes every option that changes the
computation (:data:`OPTIONS`), each applied in plain Paddle. paddle reads OMP_NUM_THREADS when it
loads: the loop sets it first.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root

from driver.studies.bareloop import COMMON_OPTIONS, only, parse_args, print_result  # noqa: E402

OPTIONS: dict[str, Any] = {
    **COMMON_OPTIONS,
    "device": "auto",  # auto: a GPU when one is visible; cpu; gpu
    "channels_last": False,  # NHWC
    "data_format": None,  # a fact it reports (NHWC with channels_last, else NCHW)
    "amp_dtype": None,  # amp only: None (bf16 on CPU, fp16 on GPU), bfloat16, float16
    "amp_level": None,  # amp only: O1
    "amp_effective": False,  # a fact it reports: auto_cast changes dtypes (a no-op on CPU)
    "init_loss_scaling": 32768.0,  # fp16's GradScaler
}
REFUSALS = {
    "device": lambda value: None if value in ("auto", "cpu", "gpu") else "expected cpu or gpu",
    "amp_dtype": lambda value: (
        None if value in (None, "bfloat16", "float16") else "expected bfloat16 or float16"
    ),
    "amp_level": lambda value: None if value in (None, "O1") else "this loop casts at level O1",
    "data_format": lambda value: None if value in (None, "NCHW", "NHWC") else "NCHW or NHWC",
    "xla": only(False, "PaddlePaddle has no XLA"),
}


def main() -> int:
    args = parse_args("paddle", options=OPTIONS, refusals=REFUSALS)
    options = args.options
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # read once, when paddle loads

    import numpy as np
    import paddle
    import paddle.nn.functional as F

    from PaddlePaddle.benchmark.models.resnet import ResNet50

    on_gpu = options["device"] != "cpu" and (
        paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0
    )
    paddle.set_device("gpu" if on_gpu else "cpu")
    paddle.seed(options["seed"])
    size, classes = options["image_size"], options["num_classes"]
    layout = "NHWC" if options["channels_last"] else "NCHW"
    model = ResNet50(
        num_classes=classes, data_format=layout, zero_init_residual=options["zero_init_residual"]
    )
    model.train()
    clip = options["grad_clip"]
    grad_clip = paddle.nn.ClipGradByGlobalNorm(clip) if clip > 0 else None
    decay = [p for p in model.parameters() if not p.stop_gradient and len(p.shape) > 1]
    no_decay = [p for p in model.parameters() if not p.stop_gradient and len(p.shape) <= 1]
    if options["optimizer"] == "sgd":
        optimizer = paddle.optimizer.Momentum(
            learning_rate=options["lr"], momentum=options["momentum"], grad_clip=grad_clip,
            parameters=[{"params": decay, "weight_decay": options["weight_decay"]},
                        {"params": no_decay, "weight_decay": 0.0}],
        )  # fmt: skip
    else:
        names = {p.name for p in decay}
        optimizer = paddle.optimizer.AdamW(
            learning_rate=options["lr"], epsilon=1e-6, parameters=decay + no_decay,
            weight_decay=options["weight_decay"], grad_clip=grad_clip,
            apply_decay_param_fun=lambda name: name in names,
        )  # fmt: skip
    shape = (
        [args.batch_size, 3, size, size] if layout == "NCHW" else [args.batch_size, size, size, 3]
    )
    images = paddle.randn(shape, dtype="float32")
    labels = paddle.randint(0, classes, [args.batch_size], dtype="int64")
    amp = args.precision == "amp"
    amp_dtype = (options["amp_dtype"] or ("float16" if on_gpu else "bfloat16")) if amp else None
    scaler = None
    if amp_dtype == "float16":
        scaler = paddle.amp.GradScaler(init_loss_scaling=options["init_loss_scaling"])
    logits_dtype = "float32"

    def step() -> paddle.Tensor:
        nonlocal logits_dtype
        with paddle.amp.auto_cast(enable=amp, dtype=amp_dtype or "float16", level="O1"):
            logits = model(images)
            loss = F.cross_entropy(logits.astype("float32"), labels)
        logits_dtype = str(logits.dtype)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.clear_grad(set_to_zero=False)
        return loss

    for _ in range(args.warmup_steps):
        float(step())
    cpu_start, start = time.process_time(), time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    final_loss = float(loss)  # the one host sync
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start

    applied = {
        "device": "gpu" if on_gpu else "cpu",
        "channels_last": layout == "NHWC",
        "data_format": layout,
        "amp_dtype": amp_dtype,
        "amp_level": "O1" if amp else None,
        # auto_cast at work: the logits come out in the low precision (on CPU it casts nothing)
        "amp_effective": "float32" not in logits_dtype,
        "init_loss_scaling": options["init_loss_scaling"],
        "image_size": images.shape[-1] if layout == "NCHW" else images.shape[1],
        "num_classes": classes,
        "zero_init_residual": options["zero_init_residual"],
        "optimizer": "adamw" if isinstance(optimizer, paddle.optimizer.AdamW) else "sgd",
        "lr": float(optimizer.get_lr()),
        "momentum": options["momentum"],
        "weight_decay": options["weight_decay"],
        "grad_clip": clip,
        "num_threads": int(os.environ["OMP_NUM_THREADS"]),
        "seed": options["seed"],
        "xla": False,
    }
    # Every parameter, BatchNorm's running statistics included, as the kit's header counts.
    parameters = sum(int(np.prod(p.shape)) for p in model.parameters())
    print_result(
        "paddle", args, seconds=seconds, cpu_seconds=cpu_seconds, device=applied["device"],
        loss=final_loss, parameters=parameters, applied=applied,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
