"""dlperf TensorFlow 2 training benchmark: ResNet-50 v1.5, InceptionV3 and BERT-base pre-training.

The TensorFlow adapter of ``driver.bench.loop.run_benchmark``: a custom training loop of exactly
``--total-steps`` steps, with the step-log records of ``driver.bench.protocol`` on every rank.
One process per device, three engines:

- single process: the default strategy; with ``--xla on`` the whole step (forward, backward,
  optimizer update) is one ``tf.function(jit_compile=True)``.
- ``mwms``: MultiWorkerMirroredStrategy, one worker per process, TF_CONFIG derived from the rank
  environment (``TensorFlow.benchmark.cluster``); started by the kit's ``spawn`` launcher.
- ``horovod``: Horovod allreduce, started by ``horovodrun`` (GPU images; Horovod does not
  build against TensorFlow 2.21 on CPU).

Gradients are all-reduced once, by us, before the optimizer: the optimizer then clips the
global gradient (``grad_clip``, as NVIDIA's BERT clips after the allreduce) and Keras' own
allreduce is skipped. With XLA in a multi-process engine, forward and backward are compiled and
the collective and update stay outside the cluster (collectives are not XLA ops on CPU).

The step's time ends when its loss is fetched to the host: that fetch is the device sync.

    python TensorFlow/benchmark/train.py --model resnet50 --batch-size 64 --total-steps 120 \
        --precision amp --xla on

Options (``--option key=value``, all recorded in the header): the shape options of
``driver.bench.contract.SHAPE_OPTIONS``, the shared training knobs of
``driver.bench.contract.TRAINING_OPTIONS`` (grad_clip, optimizer, lr, dali, ...) and
:data:`TF_OPTIONS`. Out of memory (``ResourceExhaustedError``) prints ``{"dlperf": "oom", ...}``
and exits with 86.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# Before TensorFlow loads: its C++ INFO lines (oneDNN banner, cpu features) are noise here.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from driver.bench.contract import OptionError  # noqa: E402
from driver.bench.host import cpu_model_name  # noqa: E402
from driver.bench.loop import Adapter, run_benchmark  # noqa: E402
from TensorFlow.benchmark.cluster import tf_config  # noqa: E402
from TensorFlow.benchmark.models import (  # noqa: E402
    IMAGE_MODELS,
    INCEPTION_MIN_IMAGE_SIZE,
    Batch,
    build_model,
    synthetic_batch,
    training_loss,
)

ENGINES = ("auto", "mwms", "horovod")
TF_OPTIONS: dict[str, Any] = {
    "engine": "auto",  # auto: horovod under horovodrun, mwms for > 1 process, else none
    "zero_init_residual": False,  # ResNet-50: zero gamma of each block's last BatchNorm
}
HOROVOD_VARS = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


# --------------------------------------------------------------------------------------------
# Devices, engine, precision


@dataclass
class Context:
    rank: int
    world_size: int
    local_rank: int
    on_gpu: bool
    engine: str  # none | mwms | horovod
    strategy: tf.distribute.Strategy


def choose_engine(requested: str, world_size: int) -> str:
    if requested not in ENGINES:
        raise OptionError(f"engine must be one of {ENGINES}, got {requested!r}")
    under_horovod = any(name in os.environ for name in HOROVOD_VARS)
    if requested == "auto":
        if under_horovod:
            return "horovod"
        return "mwms" if world_size > 1 else "none"
    if requested == "mwms" and world_size == 1:
        return "none"  # one worker: nothing to mirror
    return requested


def amp_policy(precision: str, requested: str, on_gpu: bool) -> str | None:
    """mixed_float16 on GPU (the NGC recipe), mixed_bfloat16 on CPU (oneDNN's fast path)."""
    if precision != "amp":
        return None
    if not on_gpu:
        if requested == "fp16":
            raise OptionError("--amp-dtype fp16 is GPU only; CPU mixed precision runs in bf16")
        return "mixed_bfloat16"
    return "mixed_bfloat16" if requested == "bf16" else "mixed_float16"


def policy_effective(policy: str | None) -> bool:
    """Whether a dense layer under ``policy`` really computes in its low precision (the header's
    ``amp_effective``, as MXNet's and PyTorch's scripts record it). Constant weights: the probe
    draws nothing from the seeded generators the model and data use."""
    if policy is None:
        return False
    layer = keras.layers.Dense(2, dtype=policy, kernel_initializer="ones")
    out = layer(np.ones((1, 4), dtype="float32"))
    return keras.backend.standardize_dtype(out.dtype) == layer.compute_dtype != "float32"


def configure_devices(requested: str, local_rank: int, threads: int) -> bool:
    """Threads and the one visible GPU of this process; returns whether it trains on a GPU.

    Must run before anything initialises TensorFlow's runtime (both settings are fixed then).
    """
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    gpus = tf.config.list_physical_devices("GPU")
    if requested == "gpu" and not gpus:
        raise OptionError("--device gpu but TensorFlow sees no GPU")
    if requested == "cpu" or not gpus:
        tf.config.set_visible_devices([], "GPU")
        return False
    if len(gpus) > 1 and local_rank >= len(gpus):
        raise OptionError(f"local rank {local_rank} but only {len(gpus)} GPU(s) are visible")
    # One visible GPU: the launcher or the container already chose this process's device.
    gpu = gpus[local_rank] if len(gpus) > 1 else gpus[0]
    # One GPU per process; TensorFlow then reserves most of its memory up front (no memory
    # growth), so a batch that does not fit fails at once for the max-batch search.
    tf.config.set_visible_devices([gpu], "GPU")
    return True


def make_strategy(engine: str, rank: int, world_size: int, on_gpu: bool) -> tf.distribute.Strategy:
    if engine != "mwms":
        return tf.distribute.get_strategy()  # the default (no-op) strategy
    # TF_CONFIG is read when the strategy's cluster resolver is made, i.e. right here.
    os.environ["TF_CONFIG"] = json.dumps(tf_config(os.environ, rank, world_size))
    implementation = (
        tf.distribute.experimental.CommunicationImplementation.NCCL
        if on_gpu
        else tf.distribute.experimental.CommunicationImplementation.RING
    )
    return tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=implementation
        )
    )


def import_horovod():  # noqa: ANN201
    try:
        import horovod.tensorflow as hvd
    except ImportError as error:
        raise OptionError(
            f"engine horovod: horovod.tensorflow does not import ({error}); Horovod is in the "
            "NGC TensorFlow images (see TensorFlow/README.md), not in the CPU environment"
        ) from None
    hvd.init()
    return hvd


# --------------------------------------------------------------------------------------------
# Optimizer and step


def pre_reduced(optimizer_class: type[keras.optimizers.Optimizer]) -> type:
    """``optimizer_class`` minus Keras' own gradient allreduce: the step reduces them first.

    Keras 3 sums gradients across replicas inside ``apply`` after clipping, so a global-norm
    clip would see per-replica gradients; reducing first and skipping the second sum keeps one
    collective per step and clips the global gradient.
    """

    class PreReduced(optimizer_class):  # type: ignore[misc, valid-type]
        def _all_reduce_sum_gradients(self, grads_and_vars):  # noqa: ANN001, ANN202
            return list(grads_and_vars)

    PreReduced.__name__ = f"PreReduced{optimizer_class.__name__}"
    return PreReduced


def build_optimizer(
    options: Mapping[str, Any], variables: list, loss_scaling: bool
) -> keras.optimizers.Optimizer:
    clip = options["grad_clip"] or None
    if options["optimizer"] == "sgd":
        optimizer = pre_reduced(keras.optimizers.SGD)(
            learning_rate=options["lr"],
            momentum=options["momentum"],
            weight_decay=options["weight_decay"],
            global_clipnorm=clip,
        )
    else:
        optimizer = pre_reduced(keras.optimizers.AdamW)(
            learning_rate=options["lr"],
            weight_decay=options["weight_decay"],
            beta_1=0.9,
            beta_2=0.999,
            epsilon=1e-6,
            global_clipnorm=clip,
        )
    # Biases and norm weights (1-d) get no weight decay, as in the NVIDIA recipes.
    optimizer.exclude_from_weight_decay(var_list=[v for v in variables if len(v.shape) <= 1])
    if loss_scaling:  # fp16 only: bf16 has fp32's range
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(variables)
    return optimizer


StepFn = Callable[[Batch], tf.Tensor]


def make_step(
    model_name: str,
    model: keras.Model,
    optimizer: keras.optimizers.Optimizer,
    ctx: Context,
    xla: bool,
    hvd: Any = None,
) -> StepFn:
    """One training step as a tf.function; returns this replica's loss (not yet fetched)."""
    variables = model.trainable_variables
    # Summed over replicas by the allreduce below, the per-replica mean becomes the global one.
    replicas = ctx.strategy.num_replicas_in_sync if ctx.engine == "mwms" else 1

    def gradients(batch: Batch) -> tuple[tf.Tensor, list[tf.Tensor]]:
        with tf.GradientTape() as tape:
            loss = training_loss(model_name, model, batch)
            scaled = optimizer.scale_loss(loss / replicas)
        return loss, tape.gradient(scaled, variables)

    if ctx.engine == "none":
        # Everything in one function, compiled whole by XLA when asked.
        @tf.function(jit_compile=xla)
        def single_step(batch: Batch) -> tf.Tensor:
            loss, grads = gradients(batch)
            optimizer.apply(grads, variables)
            return loss

        return single_step

    compute = tf.function(gradients, jit_compile=True) if xla else gradients

    if ctx.engine == "horovod":

        @tf.function
        def horovod_step(batch: Batch) -> tf.Tensor:
            loss, grads = compute(batch)
            grads = hvd.grouped_allreduce(grads, op=hvd.Average)
            optimizer.apply(grads, variables)
            return loss

        return horovod_step

    def replica_step(batch: Batch) -> tf.Tensor:
        loss, grads = compute(batch)
        context = tf.distribute.get_replica_context()
        grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        optimizer.apply(grads, variables)
        return loss

    @tf.function
    def mirrored_step(batch: Batch) -> tf.Tensor:
        per_replica = ctx.strategy.run(replica_step, args=(batch,))
        return ctx.strategy.experimental_local_results(per_replica)[0]

    return mirrored_step


def make_barrier(ctx: Context, hvd: Any = None) -> Callable[[], None]:
    """A collective every rank must reach (fetched), so that all clocks start together."""
    if ctx.engine == "horovod":
        return lambda: float(hvd.allreduce(tf.constant(0.0), op=hvd.Sum))  # type: ignore[return-value]
    if ctx.engine == "mwms":

        @tf.function
        def reduce_one() -> tf.Tensor:
            def one() -> tf.Tensor:
                context = tf.distribute.get_replica_context()
                return context.all_reduce(tf.distribute.ReduceOp.SUM, tf.constant(1.0))

            return ctx.strategy.experimental_local_results(ctx.strategy.run(one))[0]

        return lambda: float(reduce_one())  # type: ignore[return-value]
    return lambda: None


# --------------------------------------------------------------------------------------------
# Header


def library_versions(on_gpu: bool, hvd: Any = None) -> dict[str, Any]:
    versions: dict[str, Any] = {
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "numpy": np.__version__,
    }
    if on_gpu:
        build = tf.sysconfig.get_build_info()
        versions["cuda"] = build.get("cuda_version")
        versions["cudnn"] = build.get("cudnn_version")
    if hvd is not None:
        import horovod

        versions["horovod"] = horovod.__version__
    return versions


def device_names(on_gpu: bool) -> list[str]:
    if on_gpu:
        gpu = tf.config.get_visible_devices("GPU")[0]
        details = tf.config.experimental.get_device_details(gpu)
        return [str(details.get("device_name", gpu.name))]
    return [cpu_model_name()]


# --------------------------------------------------------------------------------------------
# The adapter


class TensorFlowAdapter(Adapter):
    framework = "tensorflow"
    own_options = TF_OPTIONS
    oom_types = (tf.errors.ResourceExhaustedError,)

    def setup(self) -> bool:
        args, run = self.args, self.run
        self.engine = choose_engine(str(args.options.get("engine", "auto")), run.world_size)
        self.hvd = import_horovod() if self.engine == "horovod" else None
        if self.hvd is not None:  # horovodrun's ranks win over anything inherited
            run.rank, run.world_size = self.hvd.rank(), self.hvd.size()
            run.local_rank = self.hvd.local_rank()
        self.on_gpu = configure_devices(args.device, run.local_rank, run.threads)
        return self.on_gpu

    def check_options(self, options: dict[str, Any]) -> None:
        args, run, engine = self.args, self.run, self.engine
        options["engine"] = engine
        size = int(options["image_size"] or 0)
        if args.model == "inception3" and size < INCEPTION_MIN_IMAGE_SIZE:
            raise OptionError(
                f"inception3 needs image_size >= {INCEPTION_MIN_IMAGE_SIZE}, got {size}"
            )
        strategy = make_strategy(engine, run.rank, run.world_size, self.on_gpu)
        self.ctx = Context(run.rank, run.world_size, run.local_rank, self.on_gpu, engine, strategy)
        if engine == "mwms" and strategy.num_replicas_in_sync != run.world_size:
            raise RuntimeError(
                f"MultiWorkerMirroredStrategy has {strategy.num_replicas_in_sync} replicas, "
                f"the launcher started {run.world_size} processes"
            )
        self.policy = amp_policy(args.precision, args.amp_dtype, self.on_gpu)
        self.xla_scope = None
        if args.xla == "on":  # multi-process engines keep the collective outside the cluster
            self.xla_scope = "step" if engine == "none" else "forward+backward"

    def build_model(self) -> int:
        args, options, hvd = self.args, self.options, self.hvd
        keras.mixed_precision.set_global_policy(self.policy or "float32")
        keras.utils.set_random_seed(args.seed)  # same initial weights on every rank
        with self.ctx.strategy.scope():
            model = build_model(args.model, options)
            self.variables = model.trainable_variables
            optimizer = build_optimizer(options, self.variables, self.policy == "mixed_float16")
        if hvd is not None:  # rank 0's initial state everywhere (Keras 3 variables: .value)
            hvd.broadcast_variables([v.value for v in model.variables], root_rank=0)
            hvd.broadcast_variables([v.value for v in optimizer.variables], root_rank=0)
        self.batch = synthetic_batch(
            args.model, options, args.batch_size, seed=args.seed + self.run.rank
        )
        self.train_step = make_step(args.model, model, optimizer, self.ctx, args.xla == "on", hvd)
        self.reduce_barrier = make_barrier(self.ctx, hvd)
        return int(sum(int(np.prod(v.shape)) for v in self.variables))

    def make_batch(self) -> Batch:
        return self.batch

    def step(self, batch: Batch) -> tf.Tensor:
        return self.train_step(batch)  # host_loss's fetch waits for the step: the device sync

    def device(self) -> str:
        return "gpu" if self.on_gpu else "cpu"

    def versions(self) -> dict[str, Any]:
        return library_versions(self.on_gpu, self.hvd)

    def devices(self) -> list[str]:
        return device_names(self.on_gpu)

    def device_architecture(self) -> tuple[tuple[int, int], list[str], str] | None:
        """The visible GPU's capability and the architectures this TensorFlow build lists."""
        gpus = tf.config.get_visible_devices("GPU") if self.on_gpu else []
        if not gpus:
            return None
        capability = tf.config.experimental.get_device_details(gpus[0]).get("compute_capability")
        listing = tf.sysconfig.get_build_info().get("cuda_compute_capabilities") or []
        if not capability:
            return None
        return tuple(capability)[:2], list(listing), f"tensorflow {tf.__version__}"  # type: ignore[return-value]

    def header_options(self) -> dict[str, Any]:
        policy, engine = self.policy, self.engine
        return {
            "amp_policy": policy,
            "amp_effective": policy_effective(policy),
            "loss_scaling": policy == "mixed_float16",
            "xla_scope": self.xla_scope,
            "engine": engine,
            "tf_config": json.loads(os.environ["TF_CONFIG"]) if engine == "mwms" else None,
            "data_format": "channels_last" if self.args.model in IMAGE_MODELS else None,
        }

    def barrier(self) -> None:
        self.reduce_barrier()

    def weights_checksum(self) -> float:
        return sum(float(tf.reduce_sum(tf.abs(v.value))) for v in self.variables)


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(
        TensorFlowAdapter, argv, description="dlperf TensorFlow 2 training benchmark"
    )


if __name__ == "__main__":
    sys.exit(main())
