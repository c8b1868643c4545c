"""A bare TensorFlow loop of the benchmark's ResNet-50, for ``dlperf parity`` (no harness).

Build the Keras model, one synthetic batch, a ``tf.function`` step (tape, gradients,
``keras.optimizers.SGD`` as it comes; the mixed_bfloat16 policy for the low-precision path), a
timer around whole steps, one host sync (the loss fetch) at the end. Shares with the kit's
benchmark only the model definition.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from driver.studies.bareloop import parse_args, print_result  # noqa: E402
from TensorFlow.benchmark.models.resnet import resnet50  # noqa: E402


def main() -> int:
    args = parse_args("tensorflow")
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    on_gpu = bool(tf.config.list_physical_devices("GPU"))
    amp = args.precision == "amp"
    keras.mixed_precision.set_global_policy(
        ("mixed_float16" if on_gpu else "mixed_bfloat16") if amp else "float32"
    )
    keras.utils.set_random_seed(1234)
    size, classes = args.options["image_size"], args.options["num_classes"]
    model = resnet50(image_size=size, num_classes=classes)
    optimizer = keras.optimizers.SGD(
        learning_rate=0.1 * args.batch_size / 256, momentum=0.9, weight_decay=1e-4
    )
    if amp and on_gpu:
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    images = tf.random.normal((args.batch_size, size, size, 3))  # NHWC: Keras' layout
    labels = tf.random.uniform((args.batch_size,), 0, classes, dtype=tf.int32)
    variables = model.trainable_variables

    @tf.function
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
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step(images, labels)
    final_loss = float(loss)  # the one host sync
    seconds = time.perf_counter() - start
    parameters = sum(int(tf.size(v)) for v in variables)
    print_result(
        "tensorflow", args, seconds=seconds, device="gpu" if on_gpu else "cpu",
        loss=final_loss, parameters=parameters,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
