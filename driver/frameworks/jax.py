"""JAX (Flax + Optax): our own scripts in JAX/benchmark, one process per device, started by the
kit's spawner; the script joins them with ``jax.distributed.initialize``."""

from typing import Any, Literal

from driver.frameworks.base import Count, Flag, Framework, register

# JAX/benchmark/train.py's own options (its JAX_OPTIONS), besides the shared ones.
JAX_OPTION_TYPES: dict[str, Any] = {
    # How the step is spread over the device mesh: ddp replicates the parameters and averages
    # the gradients; fsdp/hsdp (Llama) shard them (hsdp: within a node, replicated across).
    "parallelism": Literal["auto", "none", "ddp", "fsdp", "hsdp"],
    # The mesh's fsdp axis (the devices a parameter is sharded over); 0: by the parallelism.
    "fsdp_size": Count,
    "activation_checkpointing": Literal["none", "selective", "full"],
    "zero_init_residual": Flag,
}

JAX = register(
    Framework(
        name="jax",
        display="JAX",
        folder="JAX",
        module="jax",
        models=("resnet50", "bert", "llama"),
        # RANK/WORLD_SIZE/LOCAL_RANK per process; the coordinator is MASTER_ADDR:MASTER_PORT.
        launcher="spawn",
        options=JAX_OPTION_TYPES,
    ),
)
