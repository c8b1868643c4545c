"""A bare OneFlow loop of the benchmark's ResNet-50, for ``dlperf parity`` (no harness).

Build the model (eager, the kit's default mode), one synthetic batch, forward/backward/step with
``flow.optim.SGD`` as it comes (``flow.autocast`` on GPU for the low-precision path; oneflow
0.9.0 has no CPU AMP, so a CPU amp run is FP32 as the kit's is), a timer around whole steps, one
host sync at the end. Shares with the kit's benchmark only the model definition.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root

import numpy as np  # noqa: E402
import oneflow as flow  # noqa: E402

from driver.studies.bareloop import parse_args, print_result  # noqa: E402
from OneFlow.benchmark.models import ImageClassifierLoss, ResNet  # noqa: E402


def main() -> int:
    args = parse_args("oneflow")
    if args.threads < (os.cpu_count() or 1):  # oneflow uses every core unless told otherwise
        flow.set_num_threads(args.threads)
    cuda = flow.cuda.is_available()
    device = flow.device("cuda" if cuda else "cpu")
    flow.manual_seed(1234)
    size, classes = args.options["image_size"], args.options["num_classes"]
    model = ImageClassifierLoss(ResNet(num_classes=classes)).to(device)
    model.train()
    optimizer = flow.optim.SGD(
        model.parameters(), lr=0.1 * args.batch_size / 256, momentum=0.9, weight_decay=1e-4
    )
    rng = np.random.default_rng(1234)
    images = flow.tensor(
        rng.standard_normal((args.batch_size, 3, size, size), dtype=np.float32), device=device
    )
    labels = flow.tensor(rng.integers(0, classes, (args.batch_size,)), device=device)
    amp = args.precision == "amp" and cuda
    scaler = flow.amp.GradScaler() if amp else None

    def step() -> flow.Tensor:
        with flow.autocast("cuda", dtype=flow.float16) if amp else contextlib.nullcontext():
            loss, _logits = model(images, labels)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad()
        return loss

    for _ in range(args.warmup_steps):
        step()
    flow._oneflow_internal.eager.Sync()  # eager is asynchronous: start on an idle device
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    flow._oneflow_internal.eager.Sync()  # the one host sync (covers the last update)
    seconds = time.perf_counter() - start
    print_result(
        "oneflow", args, seconds=seconds, device=str(device), loss=float(loss.numpy()),
        parameters=sum(p.numel() for p in model.parameters() if p.requires_grad),
        extra={"amp_effective": amp},
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
