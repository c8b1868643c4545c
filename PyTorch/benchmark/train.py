"""dlperf PyTorch training benchmark: ResNet-50 v1.5, Inception v3, BERT-base and Llama 3.

The PyTorch adapter of ``driver.bench.loop.run_benchmark``, which runs exactly
``--total-steps`` training steps (forward, backward, optimizer step) and writes the step-log
records of ``driver.bench.protocol`` on every rank. One process per device; under torchrun
(WORLD_SIZE > 1) the model is wrapped in DistributedDataParallel over NCCL (GPU) or gloo (CPU),
or, for Llama, sharded by FSDP2 (``PyTorch.benchmark.parallel``; ``parallelism=auto``).

    python PyTorch/benchmark/train.py --model resnet50 --batch-size 64 --total-steps 120 \
        --precision amp --option channels_last=true

Options (``--option key=value``, all recorded in the header): the shape options of
``driver.bench.contract.SHAPE_OPTIONS``, the knobs every framework shares
(``driver.bench.contract.TRAINING_OPTIONS``: optimizer, lr, weight_decay, grad_clip,
num_threads, ...) and PyTorch's own, :data:`PYTORCH_OPTIONS`, checked by :func:`check_options`.
A step does no host synchronisation of its own: the only sync is the one before each step
timestamp, and the loss is read on the host after it. An out-of-memory error prints a
``{"dlperf": "oom", ...}`` line and exits with :data:`EXIT_OOM`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from driver.bench.contract import OptionError, warn
from driver.bench.host import cpu_model_name
from driver.bench.loop import Adapter, DeviceTimer, is_oom, run_benchmark
from driver.bench.protocol import EXIT_OOM
from PyTorch.benchmark.data import (
    DeviceFormat,
    LoaderSource,
    SyntheticSource,
    TokenFileError,
    TokenSource,
    real_data_source,
    synthetic_batch,
    token_data_source,
)
from PyTorch.benchmark.models import (
    IMAGE_MODELS,
    Batch,
    build_model,
    count_parameters,
    training_loss,
)
from PyTorch.benchmark.models.inception import AUX_MIN_IMAGE_SIZE, MIN_IMAGE_SIZE
from PyTorch.benchmark.parallel import (
    check_llama_parallel,
    compile_blocks,
    full_weights,
    shard_llama,
)
from PyTorch.benchmark.torchlike import backward_and_step

# EXIT_OOM (86), the status the driver's max-batch search reads as "does not fit", is the
# protocol's.
__all__ = ["EXIT_OOM", "PYTORCH_OPTIONS", "main"]

# PyTorch's own knobs (the shared ones are driver.bench.contract.TRAINING_OPTIONS).
PYTORCH_OPTIONS: dict[str, Any] = {
    "channels_last": False,  # NHWC activations and weights (image models)
    "compile": False,  # torch.compile the (DDP-wrapped) model
    "compile_mode": "default",  # default | reduce-overhead | max-autotune | ...-no-cudagraphs
    "cuda_graphs": False,  # capture the whole training step in a CUDA graph (GPU only)
    "optimizer_impl": "auto",  # auto (fused) | fused | foreach | loop
    "set_to_none": True,  # zero_grad(set_to_none=...)
    "tf32": False,  # GPU fp32 matmul/conv in TF32 (off: "fp32" means IEEE fp32)
    "cudnn_benchmark": True,  # cuDNN autotuning for the fixed input shapes
    "normalize_on": "device",  # real images: normalise on the device or in the loader workers
    "aux_logits": False,  # Inception v3 auxiliary classifier (needs image_size 299)
    "zero_init_residual": False,  # ResNet-50: zero gamma of each block's last BatchNorm
    "parallelism": "auto",  # auto | none | ddp | fsdp (PyTorch.benchmark.parallel)
    "activation_checkpointing": "none",  # none | selective | full (Llama)
}
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
GRAPH_WARMUP_STEPS = 3  # eager steps on a side stream before capture (CUDA graphs docs)
GRAPH_WARMUP_STEPS_DDP = 11  # DDP needs 11 eager iterations before its backward is captured


# --------------------------------------------------------------------------------------------
# Options, device, threads


def resolve_device(requested: str) -> torch.device:
    cuda = torch.cuda.is_available()
    if requested == "gpu" and not cuda:
        raise OptionError("--device gpu but torch sees no CUDA device")
    if requested == "cpu" or not cuda:
        return torch.device("cpu")
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))


def resolve_amp_dtype(precision: str, requested: str, device: torch.device) -> torch.dtype | None:
    """bf16 on CPU; on GPU bf16 where supported (auto), else fp16 (with a GradScaler)."""
    if precision != "amp":
        return None
    if device.type == "cpu":
        if requested == "fp16":
            raise OptionError("--amp-dtype fp16 is GPU only; CPU autocast runs in bf16")
        return torch.bfloat16
    if requested == "fp16" or (requested == "auto" and not torch.cuda.is_bf16_supported()):
        return torch.float16
    return torch.bfloat16


def autocast_effective(amp_dtype: torch.dtype | None, device: torch.device) -> bool:
    """Whether autocast really computes a dense layer in ``amp_dtype`` on ``device`` (the
    header's ``amp_effective``, as MXNet's and TensorFlow's scripts record it)."""
    if amp_dtype is None:
        return False
    with torch.autocast(device.type, dtype=amp_dtype):
        out = torch.nn.functional.linear(
            torch.ones(2, 4, device=device), torch.ones(3, 4, device=device)
        )
    return out.dtype == amp_dtype


def check_options(
    args: argparse.Namespace, options: dict[str, Any], device: torch.device
) -> None:
    """PyTorch's checks of the resolved options (the shared ones are run_benchmark's)."""
    if options["dali"]:
        raise OptionError("dali=true: the PyTorch scripts have no DALI pipeline (yet)")
    image_model = args.model in IMAGE_MODELS
    if options["compile_mode"] not in COMPILE_MODES:
        raise OptionError(f"compile_mode must be one of {COMPILE_MODES}")
    if options["optimizer_impl"] not in ("auto", "fused", "foreach", "loop"):
        raise OptionError("optimizer_impl must be auto, fused, foreach or loop")
    if options["normalize_on"] not in ("device", "loader"):
        raise OptionError("normalize_on must be device or loader")
    if options["channels_last"] and not image_model:
        warn("channels_last only applies to the image models; ignored for bert")
        options["channels_last"] = False
    if args.model == "inception3":
        size = int(options["image_size"])
        if size < MIN_IMAGE_SIZE:
            raise OptionError(f"inception3 needs image_size >= {MIN_IMAGE_SIZE}, got {size}")
        if options["aux_logits"] and size < AUX_MIN_IMAGE_SIZE:
            raise OptionError(f"aux_logits needs image_size >= {AUX_MIN_IMAGE_SIZE}")
    if options["cuda_graphs"]:
        if device.type != "cuda":
            raise OptionError("cuda_graphs=true needs a GPU")
        if options["compile"]:
            raise OptionError(
                "cuda_graphs and compile do not mix; use compile_mode=reduce-overhead"
            )


def configure_gpu_math(options: Mapping[str, Any]) -> None:
    tf32 = bool(options["tf32"])
    torch.backends.cudnn.benchmark = bool(options["cudnn_benchmark"])
    set_tf32(tf32)


def set_tf32(on: bool) -> None:
    """FP32 matmuls and convolutions in TF32 (on) or IEEE fp32, one API only: torch >= 2.9's
    ``fp32_precision`` flags (setting the legacy ``allow_tf32`` beside them makes every legacy
    getter raise "mix of the legacy and new APIs"), with the float32 matmul precision set to
    agree so that code reading ``torch.get_float32_matmul_precision()`` sees the same."""
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # torch >= 2.9
        precision = "tf32" if on else "ieee"
        torch.backends.cuda.matmul.fp32_precision = precision
        torch.backends.cudnn.conv.fp32_precision = precision
        torch.backends.cudnn.rnn.fp32_precision = precision
    else:
        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on
    torch.set_float32_matmul_precision("high" if on else "highest")


def library_versions(device: torch.device) -> dict[str, Any]:
    versions: dict[str, Any] = {"torch": torch.__version__}
    with contextlib.suppress(ImportError):
        import numpy

        versions["numpy"] = numpy.__version__
    with contextlib.suppress(ImportError):
        import PIL

        versions["pillow"] = PIL.__version__
    if torch.version.cuda:
        versions["cuda"] = torch.version.cuda
    if device.type == "cuda":
        if torch.backends.cudnn.is_available():
            versions["cudnn"] = torch.backends.cudnn.version()
        with contextlib.suppress(Exception):  # NCCL may be absent from a build
            nccl = torch.cuda.nccl.version()
            versions["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    return versions


def device_names(device: torch.device) -> list[str]:
    if device.type == "cuda":
        return [torch.cuda.get_device_name(device)]
    return [cpu_model_name()]


def cpu_peak_memory() -> dict[str, Any] | None:
    """The process's peak resident memory (Linux ru_maxrss, in KiB): a CPU rank's memory."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"bytes": int(peak_kib) * 1024, "source": "getrusage ru_maxrss"}


def nvml_process_memory(device: torch.device) -> int | None:
    """This process's device memory in use by NVML's count (pynvml), or None where NVML, the
    device or this process's entry cannot be read (no pynvml, another PID namespace). Read
    after the last step: PyTorch's caching allocator still holds the largest reservation it
    made, so this is the peak the device saw from the process (its CUDA context included)."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            props = torch.cuda.get_device_properties(device)
            # NVML finds the device by its PCI address, whatever CUDA_VISIBLE_DEVICES renumbered
            address = (
                f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
            )
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(address)
            for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if process.pid == os.getpid() and isinstance(process.usedGpuMemory, int):
                    return int(process.usedGpuMemory)
            return None
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # any NVML or property failure: NVML's figure is not available
        return None


def is_out_of_memory(error: BaseException) -> bool:
    """CUDA OOM, a cuBLAS/cuDNN allocation failure or missing workspace (loop.OOM_MESSAGES),
    the CPU allocator's refusal ("can't allocate memory"), or MemoryError."""
    return is_oom(error, (torch.cuda.OutOfMemoryError,))


# --------------------------------------------------------------------------------------------
# Model, optimizer, step


def resolve_optimizer_impl(requested: str) -> str:
    # auto is fused, on CPU too: ResNet-50's SGD step on 2 EPYC cores took 16 ms fused, 27 ms
    # as PyTorch's default for-loop and 77 ms foreach (torch 2.13; `dlperf parity`, README).
    return "fused" if requested == "auto" else requested


def build_optimizer(
    model: nn.Module, options: Mapping[str, Any], device: torch.device
) -> torch.optim.Optimizer:
    # Biases and norm weights (1-d) get no weight decay, as in the NVIDIA recipes.
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim <= 1]
    groups = [
        {"params": decay, "weight_decay": options["weight_decay"]},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    impl = resolve_optimizer_impl(options["optimizer_impl"])
    kwargs: dict[str, Any] = {
        "fused": impl == "fused" or None,
        "foreach": impl == "foreach" or (False if impl == "loop" else None),
    }
    if options["optimizer"] == "sgd":
        return torch.optim.SGD(groups, lr=options["lr"], momentum=options["momentum"], **kwargs)
    # Captured optimizer steps must keep their step count on the device.
    capturable = bool(options["cuda_graphs"])
    return torch.optim.AdamW(
        groups, lr=options["lr"], betas=(0.9, 0.999), eps=1e-6, capturable=capturable, **kwargs
    )


StepFn = Callable[[Batch, bool], torch.Tensor]


def make_step(
    model_name: str,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    options: Mapping[str, Any],
    device: torch.device,
    amp_dtype: torch.dtype | None,
) -> StepFn:
    """One training step; returns the (device) loss without reading it."""
    scaler = torch.amp.GradScaler("cuda") if amp_dtype == torch.float16 else None
    grad_clip = float(options["grad_clip"])
    set_to_none = bool(options["set_to_none"])
    params = [p for p in model.parameters() if p.requires_grad]

    def autocast() -> contextlib.AbstractContextManager[Any]:
        if amp_dtype is None:
            return contextlib.nullcontext()
        # A captured graph must not rely on autocast's weight-cast cache.
        cache = not options["cuda_graphs"]
        return torch.autocast(device.type, dtype=amp_dtype, cache_enabled=cache)

    def step(batch: Batch, zero_grad: bool = True) -> torch.Tensor:
        with autocast():
            loss = training_loss(model_name, model, batch)
        backward_and_step(torch, loss, optimizer, scaler, params, grad_clip)
        if zero_grad:
            optimizer.zero_grad(set_to_none=set_to_none)
        return loss.detach()

    return step


class GraphedStep:
    """Whole-step CUDA graph: eager warm-up steps on a side stream, capture, then replays.

    Every call is one real training step: the warm-up calls train eagerly, the capture call
    captures and then replays once, and later calls only replay. Inputs are copied into the
    static input tensors first (nothing to copy for synthetic data, which is already static).
    """

    def __init__(self, step: StepFn, warmup_steps: int, set_to_none: bool) -> None:
        self.step = step
        self.warmup_steps = warmup_steps
        self.set_to_none = set_to_none
        self.calls = 0
        self.side_stream = torch.cuda.Stream()
        self.static_batch: Batch | None = None
        self.static_loss: torch.Tensor | None = None
        self.graph: torch.cuda.CUDAGraph | None = None

    def _stage(self, batch: Batch) -> Batch:
        if self.static_batch is None:
            # The first batch's tensors become the graph inputs: synthetic data is the same
            # tensors every step (no copies at all); loader batches are fresh tensors each step.
            self.static_batch = dict(batch)
        else:
            for name, tensor in batch.items():
                if tensor.data_ptr() != self.static_batch[name].data_ptr():
                    self.static_batch[name].copy_(tensor, non_blocking=True)
        return self.static_batch

    def __call__(self, batch: Batch, zero_grad: bool = True) -> torch.Tensor:
        self.calls += 1
        static = self._stage(batch)
        current = torch.cuda.current_stream()
        if self.calls <= self.warmup_steps:
            self.side_stream.wait_stream(current)
            with torch.cuda.stream(self.side_stream):
                loss = self.step(static, True)
            current.wait_stream(self.side_stream)
            return loss
        if self.graph is None:
            self.graph = torch.cuda.CUDAGraph()
            # The last eager step left grads None (set_to_none) or zeroed; the captured
            # backward then writes fresh grads, so only a zeroing variant re-zeroes inside.
            with torch.cuda.graph(self.graph):
                self.static_loss = self.step(static, not self.set_to_none)
        self.graph.replay()
        assert self.static_loss is not None
        return self.static_loss


class CudaEventTimer(DeviceTimer):
    """The window by CUDA events in the training stream (``torch.cuda.Event.elapsed_time``)."""

    source = "cuda-events"

    def __init__(self) -> None:
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def mark_start(self) -> None:
        self.start.record()

    def mark_end(self) -> None:
        self.end.record()

    def seconds(self) -> float:
        self.end.synchronize()
        return self.start.elapsed_time(self.end) / 1000.0


class HostLoss:
    """Moves the step's loss to the host without a sync of its own (read after the step sync)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.buffer = torch.zeros((), dtype=torch.float32, pin_memory=self.cuda)
        self.loss: torch.Tensor | None = None

    def stage(self, loss: torch.Tensor) -> None:
        if self.cuda:
            self.buffer.copy_(loss.float(), non_blocking=True)
        else:
            self.loss = loss

    def read(self) -> float:
        """Only valid after the device sync that follows :meth:`stage`."""
        if self.cuda:
            return float(self.buffer.item())
        assert self.loss is not None
        return float(self.loss.item())


# --------------------------------------------------------------------------------------------
# The adapter


class TorchAdapter(Adapter):
    framework = "pytorch"
    datasets = ("synthetic", "real")
    own_options = PYTORCH_OPTIONS

    def setup(self) -> bool:
        if self.args.xla == "on":
            raise OptionError("--xla on: the PyTorch scripts do not support XLA (no torch_xla)")
        if self.args.model == "llama":
            # As torchtitan's run_train.sh runs it: the caching allocator grows its segments
            # instead of fragmenting at 8192-token activations. Read at CUDA's first
            # allocation, so set before the device is touched; a value given wins.
            os.environ.setdefault("PYTORCH_ALLOC_CONF", "expandable_segments:True")
        self.torch_device = resolve_device(self.args.device)
        # torchrun exports OMP_NUM_THREADS=1 to its workers when it is unset and
        # nproc-per-node > 1; a launcher that wants more threads per process must export it.
        torch.set_num_threads(self.run.threads)
        return self.torch_device.type == "cuda"

    def check_options(self, options: dict[str, Any]) -> None:
        device = self.torch_device
        check_options(self.args, options, device)
        check_llama_parallel(self.args.model, options, self.run.world_size)
        # The header records the implementation that runs (a bare loop mirrors it).
        options["optimizer_impl"] = resolve_optimizer_impl(options["optimizer_impl"])
        self.amp_dtype = resolve_amp_dtype(self.args.precision, self.args.amp_dtype, device)
        if options["parallelism"] in ("fsdp", "hsdp") and self.amp_dtype == torch.float16:
            raise OptionError("parallelism=fsdp/hsdp mixes precision in bf16; use bf16")
        if options["cuda_graphs"] and self.amp_dtype == torch.float16:
            # GradScaler's dynamic loss scale is not part of a captured graph; bf16 needs none.
            raise OptionError("cuda_graphs does not support fp16 AMP (GradScaler); use bf16")
        if device.type == "cuda":
            torch.cuda.set_device(device)
            configure_gpu_math(options)

    def build_model(self) -> int:
        args, options, device, run = self.args, self.options, self.torch_device, self.run
        self.init_distributed()
        # Same initial weights on every rank (DDP broadcasts rank 0's anyway); per-rank data.
        torch.manual_seed(args.seed)
        if options["parallelism"] in ("fsdp", "hsdp"):
            # Sharded before it has storage (wrap_model): no rank ever holds the whole model.
            with torch.device("meta"):
                model = build_model(args.model, options)
        else:
            model = build_model(args.model, options).to(device)
        memory_format = (
            torch.channels_last if options["channels_last"] else torch.contiguous_format
        )
        if options["channels_last"]:
            model = model.to(memory_format=torch.channels_last)
        model.train()
        self.model = model
        train_model = self.wrap_model(model)
        # After wrapping: FSDP2 replaces the parameters by sharded ones in place.
        optimizer = build_optimizer(model, options, device)
        torch.manual_seed(args.seed + run.rank)

        self.source: SyntheticSource | LoaderSource | TokenSource
        if args.dataset == "synthetic":
            batch = synthetic_batch(args.model, options, args.batch_size, device)
            if "images" in batch:
                batch["images"] = batch["images"].contiguous(memory_format=memory_format)
            self.source = SyntheticSource(batch)
        elif args.model == "llama":
            try:
                self.source = token_data_source(
                    options,
                    data_dir=args.data_dir,
                    batch_size=args.batch_size,
                    rank=run.rank,
                    world_size=run.world_size,
                    device=device,
                )
            except TokenFileError as error:
                raise OptionError(str(error)) from None
        else:
            self.source = real_data_source(
                args.model,
                options,
                data_dir=args.data_dir,
                batch_size=args.batch_size,
                workers=args.loader_workers,
                rank=run.rank,
                world_size=run.world_size,
                seed=args.seed,
                target=DeviceFormat(device, memory_format),
            )
        # Under FSDP2 the mixed-precision policy casts the parameters; no autocast on top.
        sharded = options["parallelism"] in ("fsdp", "hsdp")
        autocast_dtype = None if sharded else self.amp_dtype
        step = make_step(args.model, train_model, optimizer, options, device, autocast_dtype)
        if options["cuda_graphs"]:
            warmup = GRAPH_WARMUP_STEPS_DDP if run.distributed else GRAPH_WARMUP_STEPS
            step = GraphedStep(step, warmup, bool(options["set_to_none"]))
        self.train_step: StepFn = step
        self.loss_buffer = HostLoss(device)
        return count_parameters(model)

    def init_distributed(self) -> None:
        run, device = self.run, self.torch_device
        if not run.distributed:
            return
        if device.type == "cuda":
            if self.options["cuda_graphs"]:
                # Captured NCCL calls need the watchdog's async error handling off.
                os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0")
                os.environ.setdefault("NCCL_ASYNC_ERROR_HANDLING", "0")
            dist.init_process_group(
                "nccl", rank=run.rank, world_size=run.world_size, device_id=device
            )
        else:
            dist.init_process_group("gloo", rank=run.rank, world_size=run.world_size)

    def wrap_model(self, model: nn.Module) -> nn.Module:
        options, device = self.options, self.torch_device
        if self.args.model == "llama":
            compile_blocks(model, options)
            if options["parallelism"] in ("fsdp", "hsdp"):
                hybrid = options["parallelism"] == "hsdp"
                return shard_llama(model, device, self.run.world_size, self.amp_dtype, hybrid)
        if options["parallelism"] == "ddp":
            device_ids = [device.index] if device.type == "cuda" else None
            cuda_graphs = options["cuda_graphs"] and device.type == "cuda"
            stream = torch.cuda.Stream() if cuda_graphs else None
            # DDP meant for a captured backward must be built on a side stream (CUDA graphs).
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                model = DistributedDataParallel(
                    model, device_ids=device_ids, gradient_as_bucket_view=True
                )
        if options["compile"] and self.args.model != "llama":
            mode = None if options["compile_mode"] == "default" else options["compile_mode"]
            model = torch.compile(model, mode=mode)
        return model

    def make_batch(self) -> Batch:
        return self.source.next()

    def step(self, batch: Batch) -> torch.Tensor:
        loss = self.train_step(batch, True)
        self.loss_buffer.stage(loss)  # copied to the host by the sync, read after it
        return loss

    def sync(self) -> None:
        if self.torch_device.type == "cuda":
            torch.cuda.synchronize(self.torch_device)

    def device_architecture(self) -> tuple[tuple[int, int], list[str], str] | None:
        """The GPU's capability and the architectures this torch build has kernels for."""
        if self.torch_device.type != "cuda":
            return None
        capability = torch.cuda.get_device_capability(self.torch_device)
        return capability, torch.cuda.get_arch_list(), f"torch {torch.__version__}"

    def host_loss(self, loss: torch.Tensor) -> float:
        return self.loss_buffer.read()

    def is_oom(self, error: BaseException) -> bool:
        return is_out_of_memory(error)

    def device(self) -> str:
        return str(self.torch_device)

    def versions(self) -> dict[str, Any]:
        return library_versions(self.torch_device)

    def devices(self) -> list[str]:
        return device_names(self.torch_device)

    def header_options(self) -> dict[str, Any]:
        amp_dtype = self.amp_dtype
        return {
            "amp_dtype": str(amp_dtype).removeprefix("torch.") if amp_dtype else None,
            "amp_effective": autocast_effective(amp_dtype, self.torch_device),
            "data_dir": self.args.data_dir,
            "loader_workers": self.args.loader_workers,
            "distributed_backend": dist.get_backend() if self.run.distributed else None,
        }

    def barrier(self) -> None:
        if self.torch_device.type == "cuda":
            dist.barrier(device_ids=[self.torch_device.index])
        else:
            dist.barrier()

    def peak_memory(self) -> dict[str, Any] | None:
        if self.torch_device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(self.torch_device)
            found = {"bytes": int(peak), "source": "torch.cuda.max_memory_allocated"}
            nvml = nvml_process_memory(self.torch_device)
            return found if nvml is None else {**found, "nvml_bytes": nvml}
        return cpu_peak_memory()

    def device_timer(self) -> DeviceTimer | None:
        return CudaEventTimer() if self.torch_device.type == "cuda" else None

    def weights_checksum(self) -> float:
        with torch.no_grad():
            return sum(float(p.double().abs().sum()) for p in full_weights(self.model))

    def finish(self) -> None:
        self.source.close()
        if self.run.distributed:
            dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(TorchAdapter, argv, description="dlperf PyTorch training benchmark")


if __name__ == "__main__":
    sys.exit(main())
