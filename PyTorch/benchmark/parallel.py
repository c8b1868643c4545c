"""How the PyTorch benchmark spreads a model over its ranks: DDP, or FSDP2 for Llama.

``parallelism`` (recorded in the header as resolved):

- ``auto``: FSDP2 for Llama when there is more than one rank, DDP for the other models, nothing
  on one rank;
- ``fsdp``: ``torch.distributed.fsdp.fully_shard`` on every transformer block, then on the
  root (parameters, gradients and optimizer state sharded over all ranks; the blocks' weights
  gathered for their forward and backward and freed after, as torchtitan does); under
  ``--precision amp`` with the mixed-precision policy of bf16 parameters and fp32 gradient
  reduction (``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``);
- ``hsdp``: FSDP2 over a two-dimensional mesh (nodes x devices per node): sharded within a
  node, replicated across nodes (gradients all-reduced between the replicas);
- ``ddp``: ``DistributedDataParallel`` (every rank holds the whole model);
- ``none``: one rank only.

``activation_checkpointing`` (Llama): none, selective or full (``models/llama.py``).
``compile=true`` compiles each Llama block in place before sharding (torchtitan's way), the
other models whole.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from driver.bench.contract import OptionError
from driver.workloads.base import WorkloadOptionError, check_case_options, resolve_parallelism


def check_llama_parallel(model: str, options: dict[str, Any], world_size: int) -> None:
    """Check the parallelism and Llama options (naming the field); resolve ``parallelism``
    in place, as the header records it."""
    try:
        check_case_options(model, options, world_size)
    except WorkloadOptionError as error:
        raise OptionError(f"{error.field}: {error}") from None
    options["parallelism"] = resolve_parallelism(model, str(options["parallelism"]), world_size)


def compile_blocks(model: nn.Module, options: dict[str, Any]) -> None:
    """``compile=true``: compile each transformer block in place (before any sharding)."""
    if not options["compile"]:
        return
    mode = None if options["compile_mode"] == "default" else options["compile_mode"]
    for block in model.layers:  # type: ignore[union-attr]
        block.compile(mode=mode)


def mixed_precision(amp_dtype: torch.dtype | None) -> Any:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if amp_dtype is None:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=amp_dtype, reduce_dtype=torch.float32)


def shard_llama(
    model: nn.Module,
    device: torch.device,
    world_size: int,
    amp_dtype: torch.dtype | None,
    hybrid: bool = False,
) -> nn.Module:
    """FSDP2 over all ranks (one mesh dimension), or HSDP (``hybrid``: replicas across nodes,
    shards within one; torchrun's LOCAL_WORLD_SIZE is the devices per node): each block, then
    the root."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if hybrid:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
        mesh = init_device_mesh(
            device.type, (world_size // local, local), mesh_dim_names=("replicate", "shard")
        )
    else:
        mesh = init_device_mesh(device.type, (world_size,))
    policy = mixed_precision(amp_dtype)
    blocks = list(model.layers)  # type: ignore[union-attr]
    for index, block in enumerate(blocks):
        # The last block's weights are needed again at once by the backward: keep them.
        fully_shard(
            block, mesh=mesh, mp_policy=policy, reshard_after_forward=index < len(blocks) - 1
        )
    fully_shard(model, mesh=mesh, mp_policy=policy)
    if model.tok_embeddings.weight.device.type == "meta":  # type: ignore[union-attr]
        # Built without storage: each rank now allocates and initialises only its shards.
        model.to_empty(device=device)
        model.initialize()  # type: ignore[operator]
    return model


def full_weights(model: nn.Module) -> Iterator[torch.Tensor]:
    """Every parameter whole (sharded DTensors gathered), for the weights checksum."""
    for param in model.parameters():
        full = getattr(param, "full_tensor", None)
        yield full() if full is not None else param
