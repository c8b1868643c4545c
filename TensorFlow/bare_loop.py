"""A bare TensorFlow loop of the benchmark's ResNet-50, for ``dlperf parity`` (no harness).

Build the Keras model, one synthetic batch, a ``tf.function`` step (tape, gradients, Keras' SGD
with momentum or AdamW, no weight decay on biases and norm weights, global-norm clipping; the
``mixed_bfloat16`` policy on CPUs and ``mixed_float16`` with loss scaling on GPUs for the
low-precision path; XLA with ``jit_compile``), a timer around whole steps, one host sync (the loss
fetch) at the end. Shares with the kit's benchmark only the model definition; takes every option
that changes the computation (:data:`OPTIONS`), each applied in plain TensorFlow.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from driver.studies.bareloop import COMMON_OPTIONS, only, parse_args, print_result  # noqa: E402

POLICIES = (None, "mixed_bfloat16", "mixed_float16")
OPTIONS: dict[str, Any] = {
    **COMMON_OPTIONS,
    "device": "auto",  # auto: a GPU when one is visible; cpu; gpu
    "amp_policy": None,  # amp only: None (bf16 on CPU, fp16 on GPU), mixed_bfloat16, ...
    "amp_effective": False,  # a fact it reports (the policy is a mixed one), not a choice
    "loss_scaling": False,  # a fact it reports (mixed_float16 scales the loss)
    "xla_scope": None,  # with xla: the whole step
    "data_format": "channels_last",  # Keras' layout (NHWC)
}
REFUSALS = {
    "device": lambda value: None if value in ("auto", "cpu", "gpu") else "expected cpu or gpu",
    "amp_policy": lambda value: None if value in POLICIES else f"expected one of {POLICIES}",
    "xla_scope": lambda value: (
        None if value in (None, "step") else "one process compiles its whole step or nothing"
    ),
    "data_format": only("channels_last", "Keras' ResNet-50 here is NHWC"),
}


def main() -> int:
    args = parse_args("tensorflow", options=OPTIONS, refusals=REFUSALS)
    options = args.options

    import keras
    import tensorflow as tf

    from TensorFlow.benchmark.models.resnet import resnet50

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    gpus = tf.config.list_physical_devices("GPU")
    on_gpu = bool(gpus) and options["device"] != "cpu"
    if not on_gpu:
        tf.config.set_visible_devices([], "GPU")
    policy = None
    if args.precision == "amp":
        policy = options["amp_policy"] or ("mixed_float16" if on_gpu else "mixed_bfloat16")
    keras.mixed_precision.set_global_policy(policy or "float32")
    keras.utils.set_random_seed(options["seed"])
    size, classes = options["image_size"], options["num_classes"]
    model = resnet50(size, classes, zero_init_residual=options["zero_init_residual"])
    variables = model.trainable_variables
    clip = options["grad_clip"] or None
    if options["optimizer"] == "sgd":
        optimizer = keras.optimizers.SGD(
            learning_rate=options["lr"], momentum=options["momentum"],
            weight_decay=options["weight_decay"], global_clipnorm=clip,
        )  # fmt: skip
    else:
        optimizer = keras.optimizers.AdamW(
            learning_rate=options["lr"], weight_decay=options["weight_decay"], epsilon=1e-6,
            global_clipnorm=clip,
        )  # fmt: skip
    optimizer.exclude_from_weight_decay(var_list=[v for v in variables if len(v.shape) <= 1])
    if policy == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    images = tf.random.normal((args.batch_size, size, size, 3))
    labels = tf.random.uniform((args.batch_size,), 0, classes, dtype=tf.int32)

    @tf.function(jit_compile=options["xla"])
    def step(images: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = tf.cast(model(images, training=True), tf.float32)
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            )
            scaled = optimizer.scale_loss(loss)
        optimizer.apply(tape.gradient(scaled, variables), variables)
        return loss

    for _ in range(args.warmup_steps):
        float(step(images, labels))  # the first call traces; the fetch empties the queue
    cpu_start, start = time.process_time(), time.perf_counter()
    for _ in range(args.steps):
        loss = step(images, labels)
    final_loss = float(loss)  # the one host sync
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start

    scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    inner = optimizer.inner_optimizer if scaling else optimizer
    global_policy = keras.mixed_precision.global_policy().name
    applied = {
        "device": "gpu" if tf.config.get_visible_devices("GPU") else "cpu",
        "amp_policy": None if global_policy == "float32" else global_policy,
        "amp_effective": global_policy != "float32",
        "loss_scaling": scaling,
        "xla": options["xla"],
        "xla_scope": "step" if options["xla"] else None,
        "data_format": keras.backend.image_data_format(),
        "image_size": int(model.input_shape[1]),
        "num_classes": int(model.output_shape[-1]),
        "zero_init_residual": options["zero_init_residual"],
        "optimizer": "adamw" if isinstance(inner, keras.optimizers.AdamW) else "sgd",
        "lr": float(inner.learning_rate.numpy()),
        "momentum": float(getattr(inner, "momentum", options["momentum"])),
        "weight_decay": float(inner.weight_decay),
        "grad_clip": float(inner.global_clipnorm or 0.0),
        "num_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "seed": options["seed"],
    }
    print_result(
        "tensorflow", args, seconds=seconds, cpu_seconds=cpu_seconds, device=applied["device"],
        loss=final_loss, parameters=sum(int(tf.size(v)) for v in variables), applied=applied,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
