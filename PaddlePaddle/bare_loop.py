"""A bare PaddlePaddle loop of the benchmark's ResNet-50, for ``dlperf parity`` (no harness).

Build the model (dynamic graph), one synthetic batch, forward/backward/step with
``paddle.optimizer.Momentum`` as it comes (``paddle.amp.auto_cast`` for the low-precision path),
a timer around whole steps, one host sync (the loss fetch) at the end. Shares with the kit's
benchmark only the model definition. OMP_NUM_THREADS is read when paddle loads: the parity
command sets it for both sides.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root

import paddle  # noqa: E402
import paddle.nn.functional as F  # noqa: E402

from driver.studies.bareloop import parse_args, print_result  # noqa: E402
from PaddlePaddle.benchmark.models.resnet import ResNet50  # noqa: E402


def main() -> int:
    args = parse_args("paddle", layouts=True)
    on_gpu = paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0
    paddle.set_device("gpu" if on_gpu else "cpu")
    paddle.seed(1234)
    size, classes = args.options["image_size"], args.options["num_classes"]
    layout = "NHWC" if args.options["channels_last"] else "NCHW"
    model = ResNet50(num_classes=classes, data_format=layout)
    model.train()
    optimizer = paddle.optimizer.Momentum(
        learning_rate=0.1 * args.batch_size / 256, momentum=0.9,
        parameters=model.parameters(), weight_decay=1e-4,
    )  # fmt: skip
    shape = (
        [args.batch_size, 3, size, size] if layout == "NCHW" else [args.batch_size, size, size, 3]
    )
    images = paddle.randn(shape, dtype="float32")
    labels = paddle.randint(0, classes, [args.batch_size], dtype="int64")
    amp = args.precision == "amp"
    amp_dtype = "float16" if on_gpu else "bfloat16"
    scaler = paddle.amp.GradScaler() if amp and on_gpu else None

    def step() -> paddle.Tensor:
        with paddle.amp.auto_cast(enable=amp, dtype=amp_dtype):
            loss = F.cross_entropy(model(images).astype("float32"), labels)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.clear_grad()
        return loss

    for _ in range(args.warmup_steps):
        float(step())
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    final_loss = float(loss)  # the one host sync
    seconds = time.perf_counter() - start
    # Every parameter, BatchNorm's running statistics included, as the kit's header counts.
    parameters = sum(int(p.numel()) for p in model.parameters())
    print_result(
        "paddle", args, seconds=seconds, device="gpu" if on_gpu else "cpu",
        loss=final_loss, parameters=parameters,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
