"""A bare OneFlow loop of the benchmark's ResNet-50, for ``dlperf parity`` (no harness).

Build the model, one synthetic batch, forward/backward/step with ``flow.optim.SGD`` with
momentum or AdamW (no weight decay on biases and norm weights, global-norm clipping), eagerly or
compiled as one ``nn.Graph``; ``flow.autocast`` on GPU for the low-precision path (oneflow 0.9.0
has no CPU AMP, so a CPU amp run is FP32 as the kit's is), a timer around whole steps, one host
sync at the end. Shares with the kit's benchmark only the model definition; takes every option
that changes the computation (:data:`OPTIONS`), each applied in plain OneFlow.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root

from driver.studies.bareloop import COMMON_OPTIONS, only, parse_args, print_result  # noqa: E402

OPTIONS: dict[str, Any] = {
    **COMMON_OPTIONS,
    "device": "auto",  # auto: cuda:0 when one is visible, else cpu:0; or cpu:0, cuda:<n>
    "amp_dtype": None,  # amp on GPU: None (fp16), float16, bfloat16
    "amp_effective": False,  # a fact it reports: autocast runs (GPU only in 0.9.0)
    "graph": False,  # compile the step as one nn.Graph (else eager)
}
REFUSALS = {
    "amp_dtype": lambda value: (
        None if value in (None, "bfloat16", "float16") else "expected bfloat16 or float16"
    ),
    "xla": only(False, "OneFlow has no XLA (graph=true is its compiler)"),
}


def main() -> int:
    args = parse_args("oneflow", options=OPTIONS, refusals=REFUSALS)
    options = args.options

    import numpy as np
    import oneflow as flow

    from OneFlow.benchmark.models import ImageClassifierLoss, ResNet

    if args.threads < (os.cpu_count() or 1):  # oneflow uses every core unless told otherwise
        flow.set_num_threads(args.threads)
    requested = options["device"]
    if requested == "auto":
        requested = "cuda:0" if flow.cuda.is_available() else "cpu"
    device = flow.device(requested)
    cuda = device.type == "cuda"
    amp_dtype = None
    if args.precision == "amp" and cuda:
        amp_dtype = flow.bfloat16 if options["amp_dtype"] == "bfloat16" else flow.float16
    flow.manual_seed(options["seed"])
    size, classes = options["image_size"], options["num_classes"]
    resnet = ResNet(num_classes=classes, zero_init_residual=options["zero_init_residual"])
    model = ImageClassifierLoss(resnet).to(device)
    model.train()
    clip = options["grad_clip"]
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim <= 1]
    groups: list[dict[str, Any]] = [
        {"params": decay, "weight_decay": options["weight_decay"]},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    if options["graph"] and clip > 0:  # a graph clips from the optimizer's groups
        for group in groups:
            group.update(clip_grad_max_norm=clip, clip_grad_norm_type=2.0)
    if options["optimizer"] == "sgd":
        optimizer = flow.optim.SGD(groups, lr=options["lr"], momentum=options["momentum"])
    else:
        optimizer = flow.optim.AdamW(groups, lr=options["lr"], eps=1e-6, do_bias_correction=False)
    rng = np.random.default_rng(options["seed"])
    images = flow.tensor(
        rng.standard_normal((args.batch_size, 3, size, size), dtype=np.float32), device=device
    )
    labels = flow.tensor(rng.integers(0, classes, (args.batch_size,)), device=device)
    scaler = flow.amp.GradScaler() if amp_dtype == flow.float16 else None
    params = [p for p in model.parameters() if p.requires_grad]

    class TrainStep(flow.nn.Graph):
        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self.add_optimizer(optimizer)
            if amp_dtype is not None:
                self.config.enable_amp(True, dtype=amp_dtype)
                if amp_dtype == flow.float16:
                    self.set_grad_scaler(flow.amp.GradScaler())

        def build(self, images: flow.Tensor, labels: flow.Tensor) -> flow.Tensor:
            loss, _logits = self.model(images, labels)
            loss.backward()
            return loss

    def eager_step() -> flow.Tensor:
        autocast = flow.autocast("cuda", dtype=amp_dtype) if amp_dtype else contextlib.nullcontext()
        with autocast:
            loss, _logits = model(images, labels)
        if scaler is not None:
            scaler.scale(loss).backward()
            if clip > 0:
                scaler.unscale_(optimizer)
                flow.nn.utils.clip_grad_norm_(params, clip)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            if clip > 0:
                flow.nn.utils.clip_grad_norm_(params, clip)
            optimizer.step()
        optimizer.zero_grad()
        return loss

    graph = TrainStep() if options["graph"] else None

    def step() -> flow.Tensor:
        return graph(images, labels) if graph is not None else eager_step()

    for _ in range(args.warmup_steps):
        step()
    flow._oneflow_internal.eager.Sync()  # eager is asynchronous: start on an idle device
    cpu_start, start = time.process_time(), time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    flow._oneflow_internal.eager.Sync()  # the one host sync (covers the last update)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start

    group = optimizer.param_groups[0]
    applied = {
        "device": str(device),
        "amp_dtype": str(amp_dtype).removeprefix("oneflow.") if amp_dtype else None,
        "amp_effective": amp_dtype is not None,
        "graph": graph is not None,
        "image_size": int(images.shape[-1]),
        "num_classes": classes,
        "zero_init_residual": options["zero_init_residual"],
        "optimizer": type(optimizer).__name__.lower(),
        "lr": float(group["lr"]),
        "momentum": float(group["momentum"] if "momentum" in group else options["momentum"]),
        "weight_decay": float(group["weight_decay"]),
        "grad_clip": clip,
        "num_threads": args.threads,
        "seed": options["seed"],
        "xla": False,
    }
    print_result(
        "oneflow", args, seconds=seconds, cpu_seconds=cpu_seconds, device=str(device),
        loss=float(loss.numpy()), applied=applied,
        parameters=sum(p.numel() for p in model.parameters() if p.requires_grad),
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
