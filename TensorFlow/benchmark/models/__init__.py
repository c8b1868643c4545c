"""The three DLPerf models in Keras 3, their synthetic inputs and their training losses.

ResNet-50 v1.5 and BERT are our own code; InceptionV3 is ``keras.applications.InceptionV3``
built without weights (the reference definition of Szegedy et al., nothing downloaded).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import tensorflow as tf

from driver.workloads.bert import BertShape
from TensorFlow.benchmark.models.bert import BertPretraining, pretraining_loss
from TensorFlow.benchmark.models.resnet import resnet50

IMAGE_MODELS = ("resnet50", "inception3")
INCEPTION_MIN_IMAGE_SIZE = 75  # keras.applications.InceptionV3's smallest input

Batch = dict[str, tf.Tensor]

__all__ = [
    "IMAGE_MODELS",
    "INCEPTION_MIN_IMAGE_SIZE",
    "Batch",
    "BertPretraining",
    "build_model",
    "synthetic_batch",
    "training_loss",
]


def build_model(name: str, options: Mapping[str, Any]) -> keras.Model:
    """The model ``name`` at the shapes in ``options`` (contract.SHAPE_OPTIONS), built."""
    if name == "resnet50":
        return resnet50(
            image_size=int(options["image_size"]),
            num_classes=int(options["num_classes"]),
            zero_init_residual=bool(options.get("zero_init_residual", False)),
        )
    if name == "inception3":
        size = int(options["image_size"])
        if size < INCEPTION_MIN_IMAGE_SIZE:
            raise ValueError(f"inception3 needs image_size >= {INCEPTION_MIN_IMAGE_SIZE}")
        return keras.applications.InceptionV3(
            include_top=True,
            weights=None,
            input_shape=(size, size, 3),
            classes=int(options["num_classes"]),
            classifier_activation=None,  # logits: the loss applies the softmax
        )
    if name == "bert":
        model = BertPretraining(BertShape.from_options(options), name="bert_pretraining")
        batch = synthetic_batch("bert", options, 1)
        model(batch, training=False)  # create the variables now, before the optimizer's
        return model
    raise ValueError(f"unknown model {name!r}")


def synthetic_batch(
    model: str, options: Mapping[str, Any], batch_size: int, seed: int = 0
) -> Batch:
    """A random batch with the real inputs' shapes and dtypes (NHWC images)."""
    rng = tf.random.Generator.from_seed(seed)
    if model in IMAGE_MODELS:
        size, classes = int(options["image_size"]), int(options["num_classes"])
        return {
            "images": rng.normal((batch_size, size, size, 3)),
            "labels": rng.uniform((batch_size,), 0, classes, dtype=tf.int32),
        }
    if model == "bert":
        shape = BertShape.from_options(options)
        seq_len, vocab, predictions = shape.seq_len, shape.vocab_size, shape.predictions
        # Distinct masked positions per sequence, never the [CLS] slot 0, in increasing order.
        order = tf.argsort(rng.uniform((batch_size, seq_len - 1)), axis=1)
        positions = tf.sort(order[:, :predictions], axis=1) + 1
        half = seq_len // 2
        segment_ids = tf.concat(
            [
                tf.zeros((batch_size, half), tf.int32),
                tf.ones((batch_size, seq_len - half), tf.int32),
            ],
            axis=1,
        )
        return {
            "input_ids": rng.uniform((batch_size, seq_len), 0, vocab, dtype=tf.int32),
            "segment_ids": segment_ids,
            "input_mask": tf.ones((batch_size, seq_len), tf.int32),
            "masked_lm_positions": tf.cast(positions, tf.int32),
            "masked_lm_ids": rng.uniform((batch_size, predictions), 0, vocab, dtype=tf.int32),
            "next_sentence_labels": rng.uniform((batch_size,), 0, 2, dtype=tf.int32),
        }
    raise ValueError(f"unknown model {model!r}")


def training_loss(name: str, model: keras.Model, batch: Batch) -> tf.Tensor:
    """The mean loss of ``batch`` over this replica's samples (float32)."""
    if name in IMAGE_MODELS:
        logits = tf.cast(model(batch["images"], training=True), tf.float32)
        return tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=batch["labels"], logits=logits)
        )
    return pretraining_loss(batch, model(batch, training=True))
