"""The JAX adapter of the kit's benchmark loop (see ``JAX.benchmark.train``)."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import flax
import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
import optax
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from driver.bench.contract import OptionError
from driver.bench.host import cpu_model_name
from driver.bench.loop import Adapter
from driver.workloads.base import WorkloadOptionError, check_case_options
from JAX.benchmark.cluster import coordinator_source, join_arguments
from JAX.benchmark.mesh import AXES, MeshPlan, plan_mesh, shard_dimension
from JAX.benchmark.models import (
    IMAGE_MODELS,
    REMAT_POLICIES,
    build_model,
    init_variables,
    loss_function,
    synthetic_batch,
)
from JAX.benchmark.train import JAX_OPTIONS

CUDA_PLUGINS = ("jax_cuda13_plugin", "jax_cuda12_plugin")
INIT_COMPILER_OPTIONS = {
    "xla_backend_optimization_level": 0,
    "xla_llvm_disable_expensive_passes": True,
}
State = dict[str, Any]


# --------------------------------------------------------------------------------------------
# Processes and devices


def has_cuda_plugin() -> bool:
    return any(importlib.util.find_spec(name) is not None for name in CUDA_PLUGINS)


def join_processes(rank: int, world_size: int, local_rank: int, want_gpu: bool) -> str:
    """``jax.distributed.initialize`` the way ``JAX.benchmark.cluster`` decides, before any
    backend starts; how the processes met (the header's ``coordinator``)."""
    arguments = join_arguments(
        rank, world_size, local_rank, want_gpu and has_cuda_plugin(), os.environ
    )
    jax.distributed.initialize(**arguments)
    return coordinator_source(arguments)


def mesh_devices(world_size: int, local_rank: int, distributed: bool) -> list[Any]:
    """One device per process, ordered by process: the mesh's devices."""
    if not distributed:
        local = jax.local_devices()
        if local_rank >= len(local):
            raise OptionError(
                f"local rank {local_rank}, but this JAX build exposes {len(local)} "
                f"{jax.default_backend()} device(s) to the process: the case asks more devices "
                "per node (--gpus) than the node has"
            )
        return [local[local_rank if len(local) > 1 else 0]]
    devices = sorted(jax.devices(), key=lambda device: (device.process_index, device.id))
    if len(devices) != world_size:
        raise OptionError(
            f"JAX sees {len(devices)} device(s) over {jax.process_count()} process(es), the "
            f"case asks one per process ({world_size}): --gpus is more than the nodes expose"
        )
    return devices


def use_compilation_cache() -> str | None:
    """A folder where XLA keeps what it compiled, so that the next repeat of a case (a new
    process) loads its programs instead of compiling them again: only its warm-up gets shorter,
    the measured window runs the same program. JAX_COMPILATION_CACHE_DIR wins (JAX reads it
    itself); else beside the interpreter's environment, where that is writable (not in a
    read-only image)."""
    given = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    if given:
        return given
    folder = Path(sys.prefix) / "dlperf-xla-cache"
    try:
        folder.mkdir(exist_ok=True)
    except OSError:
        return None
    if not os.access(folder, os.W_OK):
        return None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    return str(folder)


# --------------------------------------------------------------------------------------------
# Optimizer, shardings, step


def build_optimizer(options: dict[str, Any]) -> optax.GradientTransformation:
    """SGD with momentum (CNNs) or AdamW (BERT, Llama) as the other frameworks' scripts: the
    global gradient clipped first when ``grad_clip`` > 0, no weight decay on biases and norm
    weights (1-d parameters)."""
    decayed = lambda params: jax.tree.map(lambda p: p.ndim > 1, params)  # noqa: E731
    parts = []
    if options["grad_clip"] > 0:
        parts.append(optax.clip_by_global_norm(options["grad_clip"]))
    if options["optimizer"] == "sgd":
        parts.append(optax.add_decayed_weights(options["weight_decay"], mask=decayed))
        parts.append(optax.sgd(options["lr"], momentum=options["momentum"] or None))
    else:
        parts.append(
            optax.adamw(
                options["lr"], b1=0.9, b2=0.999, eps=1e-6,
                weight_decay=options["weight_decay"], mask=decayed,
            )
        )  # fmt: skip
    return optax.chain(*parts)


def state_shardings(abstract: Any, mesh: Mesh, plan: MeshPlan) -> Any:
    """Every leaf's sharding: split over the fsdp axis along :func:`shard_dimension` where the
    plan shards, else replicated."""

    def sharding(leaf: Any) -> NamedSharding:
        dimension = shard_dimension(getattr(leaf, "shape", ()), plan.fsdp)
        if dimension is None:
            return NamedSharding(mesh, P())
        spec = [None] * len(leaf.shape)
        spec[dimension] = "fsdp"
        return NamedSharding(mesh, P(*spec))

    return jax.tree.map(sharding, abstract)


def make_step(
    loss_fn: Callable, tx: optax.GradientTransformation, mesh: Mesh, plan: MeshPlan, shardings: Any
) -> Callable[[State, Any], tuple[State, jax.Array]]:
    """The training step, jit-compiled, its state donated (updated in place)."""

    def gradients(state: State, batch: Any, key: jax.Array) -> tuple[Any, Any, jax.Array]:
        def objective(params: Any) -> tuple[jax.Array, Any]:
            return loss_fn(params, state["model_state"], batch, key)

        (loss, model_state), grads = jax.value_and_grad(objective, has_aux=True)(state["params"])
        return grads, model_state, loss

    def update(state: State, grads: Any, model_state: Any) -> State:
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        return {
            "params": optax.apply_updates(state["params"], updates),
            "model_state": model_state,
            "opt_state": opt_state,
            "key": jax.random.split(state["key"])[0],
        }

    batch_spec = P(AXES)
    if not plan.sharded:
        # Data parallel as DDP: each device steps on its own batch, the gradients (and the
        # BatchNorm running statistics) averaged over the mesh.
        def local_step(state: State, batch: Any) -> tuple[State, jax.Array]:
            key = jax.random.fold_in(state["key"], jax.lax.axis_index("data"))
            grads, model_state, loss = gradients(state, batch, key)
            grads = jax.lax.pmean(grads, AXES)
            model_state = jax.lax.pmean(model_state, AXES)
            return update(state, grads, model_state), loss[None]

        mapped = jax.shard_map(
            local_step, mesh=mesh, in_specs=(P(), batch_spec), out_specs=(P(), batch_spec)
        )
        return jax.jit(mapped, donate_argnums=0)

    # Sharded parameters: one program over the global batch; XLA's partitioner gathers each
    # parameter where it is used and reduce-scatters its gradient.
    def global_step(state: State, batch: Any) -> tuple[State, jax.Array]:
        grads, model_state, loss = gradients(state, batch, state["key"])
        return update(state, grads, model_state), loss

    batch_sharding = NamedSharding(mesh, batch_spec)
    return jax.jit(
        global_step,
        in_shardings=(shardings, batch_sharding),
        out_shardings=(shardings, NamedSharding(mesh, P())),
        donate_argnums=0,
    )


def local_value(array: jax.Array) -> float:
    """This process's first shard of ``array`` as a float (a replicated scalar, or this rank's
    loss in a data-parallel step)."""
    return float(np.asarray(array.addressable_shards[0].data).reshape(-1)[0])


def cpu_peak_memory() -> dict[str, Any] | None:
    """The process's peak resident memory (Linux ru_maxrss, in KiB): a CPU rank's memory."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"bytes": int(peak_kib) * 1024, "source": "getrusage ru_maxrss"}


# --------------------------------------------------------------------------------------------
# The adapter


class JaxAdapter(Adapter):
    framework = "jax"
    own_options = JAX_OPTIONS
    oom_messages = ("resource_exhausted",)
    # How the processes met (JAX.benchmark.cluster); None for one process.
    coordinator: str | None = None

    def setup(self) -> bool:
        args, run = self.args, self.run
        if args.device == "cpu":
            jax.config.update("jax_platforms", "cpu")
        # CPU processes reduce over gloo (set before the CPU client starts; GPUs use NCCL).
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        self.compilation_cache = use_compilation_cache()
        if run.distributed:
            self.coordinator = join_processes(
                run.rank, run.world_size, run.local_rank, args.device != "cpu"
            )
            if (jax.process_index(), jax.process_count()) != (run.rank, run.world_size):
                raise OptionError(
                    f"jax.distributed.initialize ({self.coordinator}) made this process "
                    f"{jax.process_index()} of {jax.process_count()}, but the launcher's "
                    f"environment says rank {run.rank} of {run.world_size}: the processes of "
                    "a case must be started one per device, by one launcher"
                )
        self.on_gpu = jax.default_backend() == "gpu"
        if args.device == "gpu" and not self.on_gpu:
            raise OptionError(
                f"--device gpu, but this JAX build has only the {jax.default_backend()} backend"
            )
        self.devices_in_mesh = mesh_devices(run.world_size, run.local_rank, run.distributed)
        return self.on_gpu

    def check_options(self, options: dict[str, Any]) -> None:
        args, run = self.args, self.run
        if options["dali"]:
            raise OptionError("dali=true: the JAX scripts have no DALI pipeline (synthetic data)")
        # The devices of a node (hsdp's fsdp axis): the spawner's LOCAL_WORLD_SIZE, else what
        # every runtime exports (one task per device under Slurm sets no LOCAL_WORLD_SIZE).
        per_node = int(
            os.environ.get("LOCAL_WORLD_SIZE")
            or os.environ.get("DLPERF_NPROC_PER_NODE")
            or run.world_size
        )
        try:
            check_case_options(args.model, options, run.world_size)
            self.plan = plan_mesh(
                args.model, str(options["parallelism"]), int(options["fsdp_size"]),
                run.world_size, per_node,
            )  # fmt: skip
        except WorkloadOptionError as error:
            raise OptionError(f"option {error.field}: {error}") from None
        options["parallelism"] = self.plan.parallelism
        options["fsdp_size"] = self.plan.fsdp
        self.dtype = jnp.bfloat16 if args.precision == "amp" else jnp.float32

    def build_model(self) -> int:
        args, options, run, plan = self.args, self.options, self.run, self.plan
        self.mesh = Mesh(np.array(self.devices_in_mesh).reshape(plan.shape), AXES)
        module = build_model(args.model, options, self.dtype)
        sample = synthetic_batch(args.model, options, 1, seed=args.seed)

        def init_state() -> State:
            # The same seed on every rank: the same initial weights (no broadcast needed).
            variables = dict(
                init_variables(args.model, module, sample, jax.random.PRNGKey(args.seed))
            )
            params = variables.pop("params")
            return {
                "params": params,
                "model_state": variables,
                "opt_state": self.tx.init(params),
                "key": jax.random.PRNGKey(args.seed + 1),
            }

        self.tx = build_optimizer(options)
        shardings = state_shardings(jax.eval_shape(init_state), self.mesh, plan)
        # Run once, before the clocks: on a CPU, LLVM's optimisations of the initializers cost
        # more (ResNet-50: about 24 s against 9 s + 5 s here) than they save.
        options_for_init = {} if self.on_gpu else INIT_COMPILER_OPTIONS
        lowered = jax.jit(init_state, out_shardings=shardings).lower()
        self.state = lowered.compile(compiler_options=options_for_init)()
        local = synthetic_batch(args.model, options, args.batch_size, seed=args.seed + run.rank)
        batch_sharding = NamedSharding(self.mesh, P(AXES))
        # The global batch: each process contributes its own rows (same tensors every step).
        self.batch = {
            name: jax.make_array_from_process_local_data(batch_sharding, value)
            for name, value in local.items()
        }
        self.train_step = make_step(
            loss_function(args.model, module), self.tx, self.mesh, plan, shardings
        )
        self.last: Any = None
        return int(sum(int(np.prod(p.shape)) for p in jax.tree.leaves(self.state["params"])))

    def make_batch(self) -> Any:
        return self.batch

    def step(self, batch: Any) -> jax.Array:
        self.state, loss = self.train_step(self.state, batch)
        self.last = (self.state, loss)
        return loss

    def sync(self) -> None:
        jax.block_until_ready(self.last)

    def host_loss(self, loss: jax.Array) -> float:
        return local_value(loss)

    def device(self) -> str:
        return "gpu" if self.on_gpu else "cpu"

    def versions(self) -> dict[str, Any]:
        versions: dict[str, Any] = {
            "jax": jax.__version__,
            "jaxlib": jaxlib.__version__,
            "flax": flax.__version__,
            "optax": optax.__version__,
            "numpy": np.__version__,
        }
        if self.on_gpu:
            versions["platform"] = self.devices_in_mesh[0].client.platform_version
        return versions

    def devices(self) -> list[str]:
        if self.on_gpu:
            return [str(self.devices_in_mesh[0].device_kind)]
        return [cpu_model_name()]

    def header_options(self) -> dict[str, Any]:
        plan, model = self.plan, self.args.model
        amp = self.dtype == jnp.bfloat16
        checkpointing = self.options.get("activation_checkpointing", "none")
        return {
            "amp_dtype": "bfloat16" if amp else None,
            "amp_effective": amp,  # Flax modules compute in their dtype on every backend
            "mesh": {"data": plan.data, "fsdp": plan.fsdp},
            "distributed_backend": (
                ("nccl" if self.on_gpu else jax.config.jax_cpu_collectives_implementation)
                if self.run.distributed
                else None
            ),
            "coordinator": self.coordinator,
            "compiled": "jax.jit, state donated",
            "compilation_cache": self.compilation_cache,
            "checkpoint_policy": (REMAT_POLICIES.get(checkpointing) if model == "llama" else None),
            "data_format": "NHWC" if model in IMAGE_MODELS else None,
            # The CPUs XLA's thread pools were sized to (train.pin_threads).
            "cpu_affinity": None if self.on_gpu else sorted(os.sched_getaffinity(0)),
        }

    def barrier(self) -> None:
        multihost_utils.sync_global_devices("dlperf barrier")

    def peak_memory(self) -> dict[str, Any] | None:
        if self.on_gpu:
            stats = self.devices_in_mesh[0].memory_stats() or {}
            if "peak_bytes_in_use" in stats:
                return {
                    "bytes": int(stats["peak_bytes_in_use"]),
                    "source": "jax Device.memory_stats peak_bytes_in_use",
                }
            return None
        return cpu_peak_memory()

    def weights_checksum(self) -> float:
        total = jax.jit(
            lambda params: sum(jnp.sum(jnp.abs(p)) for p in jax.tree.leaves(params)),
            out_shardings=NamedSharding(self.mesh, P()),
        )(self.state["params"])
        return local_value(total)

    def finish(self) -> None:
        if self.run.distributed:
            jax.distributed.shutdown()
