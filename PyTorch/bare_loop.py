"""A bare PyTorch loop of the benchmark's ResNet-50 (and, with ``--model llama``, of its Llama 3:
``PyTorch/bare_llama.py``), for ``dlperf parity`` (no harness).

The loop anyone would write with PyTorch's own tools: build the model, one synthetic batch,
forward/backward/step, a timer around whole steps, one host sync at the end. It shares with the
kit's benchmark only the model definition, and takes every option that changes the computation
(:data:`OPTIONS`), each applied in plain PyTorch: the device, autocast in bf16 (fp16 with a
GradScaler where bf16 is not supported), channels_last, TF32 and cuDNN autotuning,
``torch.compile``, SGD with momentum or AdamW with no weight decay on biases and norm weights,
the fused/foreach/for-loop optimizer, gradient clipping, ``zero_grad(set_to_none=...)``, the CPU
threads and the seed. Whole-step CUDA graphs are refused: capturing a step is machinery, not a
training loop.

    python PyTorch/bare_loop.py --model resnet50 --batch-size 8 --steps 12 --precision amp \\
        --option channels_last=true
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root

from driver.studies.bareloop import COMMON_OPTIONS, only, parse_args, print_result  # noqa: E402
from PyTorch.bare_steps import backward_and_step, optimizer_groups  # noqa: E402

# What this loop mirrors and what it does when run by hand: PyTorch's good defaults, the kit's.
OPTIONS: dict[str, Any] = {
    **COMMON_OPTIONS,
    "device": "auto",  # auto: cuda:0 when a GPU is visible, else cpu; or cpu, cuda:<n>
    "amp_dtype": None,  # amp only: None (bf16 where supported, else fp16), bfloat16, float16
    "channels_last": False,
    "optimizer_impl": "fused",  # fused | foreach | loop
    "set_to_none": True,
    "tf32": False,
    "cudnn_benchmark": True,
    "compile": False,
    "compile_mode": "default",
    "cuda_graphs": False,
    "aux_logits": False,
}
AMP_DTYPES = (None, "bfloat16", "float16")
REFUSALS = {
    "cuda_graphs": only(False, "a bare loop does not capture its step in a CUDA graph"),
    "aux_logits": only(False, "ResNet-50 has no auxiliary classifier"),
    "xla": only(False, "PyTorch runs without XLA here"),
    "optimizer_impl": lambda value: (
        None if value in ("fused", "foreach", "loop") else "expected fused, foreach or loop"
    ),
    "amp_dtype": lambda value: (
        None if value in AMP_DTYPES else "expected null (auto), bfloat16 or float16"
    ),
}


def main() -> int:
    if "llama" in _model_argument(sys.argv[1:]):  # Llama's own loop, with its own options
        from PyTorch import bare_llama

        llama_args = parse_args("pytorch", options=bare_llama.OPTIONS, refusals=bare_llama.REFUSALS)
        bare_llama.train(llama_args)
        return 0
    args = parse_args("pytorch", options=OPTIONS, refusals=REFUSALS)
    options = args.options

    import torch
    import torch.nn.functional as F

    from PyTorch.benchmark.models.resnet import resnet50

    torch.set_num_threads(args.threads)
    requested = options["device"]
    if requested == "auto":
        requested = "cuda:0" if torch.cuda.is_available() else "cpu"
    device = torch.device(requested)
    amp = args.precision == "amp"
    amp_dtype = None
    if amp:
        amp_dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(options["amp_dtype"])
        if amp_dtype is None:  # bf16 on CPUs and on GPUs that support it, else fp16
            bf16 = device.type == "cpu" or torch.cuda.is_bf16_supported()
            amp_dtype = torch.bfloat16 if bf16 else torch.float16
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.backends.cudnn.benchmark = options["cudnn_benchmark"]
    _set_tf32(torch, options["tf32"])

    torch.manual_seed(options["seed"])
    size, classes = options["image_size"], options["num_classes"]
    layout = torch.channels_last if options["channels_last"] else torch.contiguous_format
    model = resnet50(num_classes=classes, zero_init_residual=options["zero_init_residual"])
    model = model.to(device, memory_format=layout).train()
    groups, flavour = optimizer_groups(model, options)
    if options["optimizer"] == "sgd":
        optimizer: torch.optim.Optimizer = torch.optim.SGD(
            groups, lr=options["lr"], momentum=options["momentum"], **flavour
        )
    else:
        optimizer = torch.optim.AdamW(groups, lr=options["lr"], eps=1e-6, **flavour)
    train_model = torch.compile(model, **_mode(options)) if options["compile"] else model
    images = torch.randn(args.batch_size, 3, size, size, device=device)
    images = images.contiguous(memory_format=layout)
    labels = torch.randint(0, classes, (args.batch_size,), device=device)
    scaler = torch.amp.GradScaler("cuda") if amp_dtype == torch.float16 else None
    clip, set_to_none = options["grad_clip"], options["set_to_none"]
    logits_dtype = torch.float32

    def step() -> torch.Tensor:
        nonlocal logits_dtype
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp):
            logits = train_model(images)
            loss = F.cross_entropy(logits, labels)
        logits_dtype = logits.dtype
        backward_and_step(loss, optimizer, scaler, model.parameters(), clip, set_to_none)
        return loss

    for _ in range(args.warmup_steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    cpu_start, start = time.process_time(), time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    final_loss = float(loss.detach())  # the one host sync
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start

    weight = model.conv1.weight
    group = optimizer.param_groups[0]
    applied = {
        "device": str(weight.device),
        "amp_dtype": None if logits_dtype == torch.float32 else str(logits_dtype)[6:],
        "channels_last": weight.is_contiguous(memory_format=torch.channels_last)
        and not weight.is_contiguous(),
        "image_size": images.shape[-1],
        "num_classes": model.fc.out_features,
        "zero_init_residual": options["zero_init_residual"],
        "optimizer": type(optimizer).__name__.lower(),
        "lr": group["lr"],
        "momentum": group.get("momentum", options["momentum"]),
        "weight_decay": group["weight_decay"],
        "grad_clip": clip,
        "optimizer_impl": "fused"
        if group.get("fused")
        else ("foreach" if group.get("foreach") else "loop"),
        "set_to_none": weight.grad is None,
        "tf32": _tf32(torch),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "compile": train_model is not model,
        "compile_mode": options["compile_mode"],
        "cuda_graphs": False,
        "aux_logits": False,
        "num_threads": torch.get_num_threads(),
        "seed": options["seed"],
        "xla": False,
    }
    print_result(
        "pytorch", args, seconds=seconds, cpu_seconds=cpu_seconds, device=str(device),
        loss=final_loss, parameters=sum(p.numel() for p in model.parameters()), applied=applied,
    )  # fmt: skip
    return 0


def _model_argument(argv: list[str]) -> list[str]:
    """The value(s) of ``--model`` in ``argv`` (``--model x`` or ``--model=x``)."""
    found = [value for flag, value in zip(argv, argv[1:], strict=False) if flag == "--model"]
    return found + [arg.split("=", 1)[1] for arg in argv if arg.startswith("--model=")]


def _set_tf32(torch: Any, on: bool) -> None:
    """FP32 matmuls and convolutions in TF32 on GPUs, as the kit's script sets them: torch >=
    2.9's fp32_precision flags only (never the legacy allow_tf32 beside them), with the float32
    matmul precision made to agree."""
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        precision = "tf32" if on else "ieee"
        torch.backends.cuda.matmul.fp32_precision = precision
        torch.backends.cudnn.conv.fp32_precision = precision
        torch.backends.cudnn.rnn.fp32_precision = precision
    else:
        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on
    torch.set_float32_matmul_precision("high" if on else "highest")


def _tf32(torch: Any) -> bool:
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        return torch.backends.cuda.matmul.fp32_precision == "tf32"
    return bool(torch.backends.cuda.matmul.allow_tf32)


def _mode(options: dict[str, Any]) -> dict[str, Any]:
    return {} if options["compile_mode"] == "default" else {"mode": options["compile_mode"]}


if __name__ == "__main__":
    sys.exit(main())
