"""A bare PyTorch loop of the benchmark's Llama 3, for ``dlperf parity`` (no harness).

The loop anyone would write with PyTorch's own tools: build the model from the benchmark's
definition (``PyTorch/benchmark/models/llama.py``, sizes by name from ``driver.workloads.llama``),
one synthetic batch of ``seq_len + 1`` token ids, forward, next-token cross-entropy, backward,
gradient clipping, AdamW (no weight decay on norm weights; fused, foreach or for-loop), a timer
around whole steps, one host sync at the end. Activation checkpointing, ``torch.compile`` of
each block and autocast in bf16 are applied in plain PyTorch as the options say.

On one process the kit does not shard (``parallelism`` resolves to ``none`` on one rank) and
neither does this loop. Started by ``torchrun`` with several processes, it shards every block
and then the root with ``torch.distributed.fsdp.fully_shard`` (bf16 parameters, fp32 gradient
reduction under ``--precision amp``) over one mesh of all ranks, each rank its own batch, as
``dlperf parity --topology 1n<k>g`` starts it; its result line is then the slowest rank's window
(``parallelism`` and ``distributed_backend`` as applied, compared with the kit's header).

    python PyTorch/bare_loop.py --model llama --batch-size 2 --steps 10 \\
        --option llama_size=llama-small --option seq_len=256
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from driver.studies.bareloop import COMMON_OPTIONS, only, print_result
from PyTorch.bare_steps import backward_and_step, optimizer_groups

# What this loop mirrors and what it does when run by hand: the kit's defaults for Llama.
OPTIONS: dict[str, Any] = {
    # AdamW has no momentum; image options are the vision models'.
    **{
        k: v
        for k, v in COMMON_OPTIONS.items()
        if k not in ("image_size", "num_classes", "momentum")
    },
    "optimizer": "adamw",
    "grad_clip": 1.0,
    "device": "auto",  # auto: cuda:0 when a GPU is visible, else cpu; or cpu, cuda:<n>
    "amp_dtype": None,  # amp only: None (bf16 where supported, else fp16), bfloat16, float16
    "llama_size": "llama-small",
    "seq_len": 256,
    "activation_checkpointing": "none",
    "optimizer_impl": "fused",  # fused | foreach | loop
    "set_to_none": True,
    "tf32": False,
    "cudnn_benchmark": True,
    "compile": False,
    "compile_mode": "default",
    "cuda_graphs": False,
    # auto: fsdp on several processes, none on one (the kit's auto for Llama); or fsdp, none
    "parallelism": "auto",
    "distributed_backend": None,  # as the kit: nccl on GPUs, gloo on CPUs (None: one process)
}
PARALLELISMS = ("auto", "none", "fsdp")
REFUSALS = {
    "cuda_graphs": only(False, "a bare loop does not capture its step in a CUDA graph"),
    "xla": only(False, "PyTorch runs without XLA here"),
    "zero_init_residual": only(False, "Llama has no zero-initialised residual branch"),
    "optimizer": only("adamw", "the Llama loop trains with AdamW, as the kit"),
    "optimizer_impl": lambda value: (
        None if value in ("fused", "foreach", "loop") else "expected fused, foreach or loop"
    ),
    "amp_dtype": lambda value: (
        None if value in (None, "bfloat16", "float16") else "expected null, bfloat16 or float16"
    ),
    "parallelism": lambda value: (
        None if value in PARALLELISMS else "the bare loop shards with FSDP2: auto, none or fsdp"
    ),
    "distributed_backend": lambda value: (
        None if value in (None, "gloo", "nccl") else "expected null (one process), gloo or nccl"
    ),
    "activation_checkpointing": lambda value: (
        None if value in ("none", "selective", "full") else "expected none, selective or full"
    ),
}


def train(args: argparse.Namespace) -> None:
    """Train ``args.steps`` timed steps after ``args.warmup_steps`` and print the result line."""
    options = args.options

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from driver.workloads.llama import LLAMA_SIZES, LlamaOptionError, llama_shape
    from PyTorch.benchmark.models.llama import Llama

    try:
        shape = llama_shape(options)
    except LlamaOptionError as error:
        raise SystemExit(f"bare_loop.py: error: --option {error.field}: {error}") from None
    torch.set_num_threads(args.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    requested = options["device"]
    if requested == "auto":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        requested = f"cuda:{local}" if torch.cuda.is_available() else "cpu"
    device = torch.device(requested)
    amp = args.precision == "amp"
    amp_dtype = None
    if amp:
        amp_dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(options["amp_dtype"])
        if amp_dtype is None:
            bf16 = device.type == "cpu" or torch.cuda.is_bf16_supported()
            amp_dtype = torch.bfloat16 if bf16 else torch.float16
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.backends.cudnn.benchmark = options["cudnn_benchmark"]
    tf32 = "tf32" if options["tf32"] else "ieee"
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = tf32
        torch.backends.cudnn.conv.fp32_precision = tf32
    else:
        torch.backends.cuda.matmul.allow_tf32 = options["tf32"]
        torch.backends.cudnn.allow_tf32 = options["tf32"]
    torch.set_float32_matmul_precision("high" if options["tf32"] else "highest")

    sharded = world > 1
    resolved = "fsdp" if sharded else "none"
    if options["parallelism"] not in ("auto", resolved):
        raise SystemExit(
            f"bare_loop.py: error: --option parallelism={options['parallelism']}: {world} "
            f"process(es) run {resolved} (start it with torchrun --nproc_per_node k to shard)"
        )
    if sharded:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    torch.manual_seed(options["seed"])
    seq_len = int(options["seq_len"])
    checkpointing = options["activation_checkpointing"]
    if sharded:
        with torch.device("meta"):
            model = Llama(shape, seq_len, checkpointing)
    else:
        model = Llama(shape, seq_len, checkpointing).to(device)
    model.train()
    if options["compile"]:
        mode = {} if options["compile_mode"] == "default" else {"mode": options["compile_mode"]}
        for block in model.layers:
            block.compile(**mode)
    if sharded:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = (
            MixedPrecisionPolicy(param_dtype=amp_dtype, reduce_dtype=torch.float32)
            if amp_dtype is not None
            else MixedPrecisionPolicy()
        )
        for index, block in enumerate(model.layers):
            last = index == len(model.layers) - 1  # its backward needs its weights at once
            fully_shard(block, mp_policy=policy, reshard_after_forward=not last)
        fully_shard(model, mp_policy=policy)
        model.to_empty(device=device)
        model.initialize()
    groups, flavour = optimizer_groups(model, options)
    optimizer = torch.optim.AdamW(groups, lr=options["lr"], eps=1e-6, **flavour)

    torch.manual_seed(options["seed"] + rank)
    stream = torch.randint(0, shape.vocab_size, (args.batch_size, seq_len + 1), device=device)
    tokens, labels = stream[:, :-1], stream[:, 1:]
    autocast = amp and not sharded  # under FSDP2 the policy casts the parameters
    scaler = torch.amp.GradScaler("cuda") if autocast and amp_dtype == torch.float16 else None
    clip, set_to_none = float(options["grad_clip"]), options["set_to_none"]
    logits_dtype = torch.float32
    params = list(model.parameters())

    def step() -> torch.Tensor:
        nonlocal logits_dtype
        with torch.autocast(device.type, dtype=amp_dtype, enabled=autocast):
            logits = model(tokens)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        logits_dtype = logits.dtype
        backward_and_step(loss, optimizer, scaler, params, clip, set_to_none)
        return loss

    for _ in range(args.warmup_steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    if sharded:
        dist.barrier()
    cpu_start, start = time.process_time(), time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    final_loss = float(loss.detach())  # the one host sync
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    if sharded:  # the slowest rank's window (as the kit measures), every rank's CPU time
        windows = torch.tensor([seconds], dtype=torch.float64)
        cpu = torch.tensor([cpu_seconds], dtype=torch.float64)
        dist.all_reduce(windows, op=dist.ReduceOp.MAX)
        dist.all_reduce(cpu, op=dist.ReduceOp.SUM)
        seconds, cpu_seconds = float(windows), float(cpu)

    group = optimizer.param_groups[0]
    weight = model.tok_embeddings.weight
    size = next((name for name, known in LLAMA_SIZES.items() if known == model.shape), None)
    from torch.distributed.fsdp import FSDPModule

    fsdp = all(isinstance(m, FSDPModule) for m in (model, *model.layers))
    applied = {
        "device": str(weight.device),
        "amp_dtype": None if logits_dtype == torch.float32 else str(logits_dtype)[6:],
        "llama_size": size,
        "seq_len": int(tokens.shape[1]),
        "activation_checkpointing": model.checkpointing,
        "optimizer": type(optimizer).__name__.lower(),
        "lr": group["lr"],
        "weight_decay": group["weight_decay"],
        "grad_clip": clip,
        "optimizer_impl": "fused"
        if group.get("fused")
        else ("foreach" if group.get("foreach") else "loop"),
        "set_to_none": weight.grad is None,
        "tf32": torch.backends.cuda.matmul.fp32_precision == "tf32"
        if hasattr(torch.backends.cuda.matmul, "fp32_precision")
        else bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "compile": any(getattr(b, "_compiled_call_impl", None) for b in model.layers),
        "compile_mode": options["compile_mode"],
        "cuda_graphs": False,
        "parallelism": "fsdp" if fsdp else "none",
        "distributed_backend": dist.get_backend() if sharded else None,
        "zero_init_residual": False,
        "num_threads": torch.get_num_threads(),
        "seed": options["seed"],
        "xla": False,
    }
    # Distinct parameters over all ranks (a tied output projection is the embedding table).
    parameters = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print_result(
            "pytorch", args, seconds=seconds, cpu_seconds=cpu_seconds, device=str(device),
            loss=final_loss, parameters=parameters, applied=applied, world_size=world,
        )  # fmt: skip
    if sharded:
        dist.destroy_process_group()
