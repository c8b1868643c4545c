"""PyTorch: our own scripts in PyTorch/benchmark, started by torchrun."""

from typing import Any, Literal

from driver.frameworks.base import Flag, Framework, register

# The names and values PyTorch/benchmark/train.py reads besides the shared ones (its
# PYTORCH_OPTIONS; a test keeps the two name lists equal).
PYTORCH_OPTION_TYPES: dict[str, Any] = {
    "channels_last": Flag,
    "compile": Flag,
    "compile_mode": Literal[
        "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"
    ],
    "cuda_graphs": Flag,
    "optimizer_impl": Literal["auto", "fused", "foreach", "loop"],
    "set_to_none": Flag,
    "tf32": Flag,
    "cudnn_benchmark": Flag,
    "normalize_on": Literal["device", "loader"],
    "aux_logits": Flag,
    "zero_init_residual": Flag,
    "parallelism": Literal["auto", "none", "ddp", "fsdp", "hsdp"],
    "activation_checkpointing": Literal["none", "selective", "full"],
}

PYTORCH = register(
    Framework(
        name="pytorch",
        display="PyTorch",
        folder="PyTorch",
        module="torch",
        models=("resnet50", "inception3", "bert", "llama"),
        launcher="torchrun",
        options=PYTORCH_OPTION_TYPES,
    ),
)
