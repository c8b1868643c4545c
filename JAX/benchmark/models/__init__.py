"""The kit's three JAX models, their synthetic inputs and their training losses.

Every model is a Flax (linen) module with float32 parameters and a compute ``dtype``; the
shapes come from the same resolved options as every framework's (``driver.workloads``,
``driver.workloads.llama``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

from driver.workloads.bert import BertShape
from driver.workloads.images import ImageShape
from driver.workloads.llama import llama_shape
from JAX.benchmark.models.bert import BertPretraining, pretraining_loss
from JAX.benchmark.models.llama import REMAT_POLICIES, Llama, causal_lm_loss
from JAX.benchmark.models.resnet import ResNet50

IMAGE_MODELS = ("resnet50",)
Batch = dict[str, np.ndarray]
# (params, model state such as BatchNorm statistics, batch, dropout key) -> (loss, new state)
LossFn = Callable[[Any, Any, Batch, jax.Array], tuple[jax.Array, Any]]

__all__ = ["IMAGE_MODELS", "REMAT_POLICIES", "build_model", "loss_function", "synthetic_batch"]


def build_model(name: str, options: Mapping[str, Any], dtype: Any) -> nn.Module:
    """The model ``name`` at the shapes in ``options``, computing in ``dtype``."""
    if name == "resnet50":
        image = ImageShape.from_options(options)
        return ResNet50(image.num_classes, image.zero_init_residual, dtype)
    if name == "bert":
        return BertPretraining(BertShape.from_options(options), dtype)
    if name == "llama":
        checkpointing = str(options.get("activation_checkpointing", "none"))
        return Llama(llama_shape(options), checkpointing, dtype)
    raise ValueError(f"unknown model {name!r} (the JAX scripts have: resnet50, bert, llama)")


def synthetic_batch(model: str, options: Mapping[str, Any], batch_size: int, seed: int) -> Batch:
    """A random batch with the real inputs' shapes and dtypes (NHWC images), on the host."""
    rng = np.random.default_rng(seed)
    if model in IMAGE_MODELS:
        size, classes = int(options["image_size"]), int(options["num_classes"])
        return {
            "images": rng.standard_normal((batch_size, size, size, 3), dtype=np.float32),
            "labels": rng.integers(0, classes, (batch_size,), dtype=np.int32),
        }
    if model == "bert":
        shape = BertShape.from_options(options)
        seq_len, vocab, predictions = shape.seq_len, shape.vocab_size, shape.predictions
        # Distinct masked positions per sequence, never the [CLS] slot 0, in increasing order.
        order = np.argsort(rng.random((batch_size, seq_len - 1)), axis=1)
        positions = np.sort(order[:, :predictions], axis=1) + 1
        half = seq_len // 2
        segments = np.concatenate(
            [np.zeros((batch_size, half)), np.ones((batch_size, seq_len - half))], axis=1
        )
        return {
            "input_ids": rng.integers(0, vocab, (batch_size, seq_len), dtype=np.int32),
            "segment_ids": segments.astype(np.int32),
            "input_mask": np.ones((batch_size, seq_len), np.int32),
            "masked_lm_positions": positions.astype(np.int32),
            "masked_lm_ids": rng.integers(0, vocab, (batch_size, predictions), dtype=np.int32),
            "next_sentence_labels": rng.integers(0, 2, (batch_size,), dtype=np.int32),
        }
    if model == "llama":
        shape, seq_len = llama_shape(options), int(options["seq_len"])
        tokens = rng.integers(0, shape.vocab_size, (batch_size, seq_len + 1), dtype=np.int32)
        return {"tokens": tokens[:, :-1], "labels": tokens[:, 1:]}
    raise ValueError(f"unknown model {model!r}")


def init_variables(model_name: str, module: nn.Module, batch: Batch, key: jax.Array) -> Any:
    """The module's variables (``params``, and ``batch_stats`` for ResNet) from one sample."""
    one = {name: value[:1] for name, value in batch.items()}
    if model_name in IMAGE_MODELS:
        return module.init(key, one["images"], train=False)
    if model_name == "bert":
        return module.init(key, one, train=False)
    return module.init(key, one["tokens"])


def loss_function(model_name: str, module: nn.Module) -> LossFn:
    """The training loss of ``module`` on a batch (float32), with its updated model state."""
    if model_name in IMAGE_MODELS:

        def image_loss(
            params: Any, state: Any, batch: Batch, key: jax.Array
        ) -> tuple[jax.Array, Any]:
            logits, updated = module.apply(
                {"params": params, **state}, batch["images"], train=True, mutable=["batch_stats"]
            )
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"])
            return jnp.mean(loss), updated

        return image_loss
    if model_name == "bert":

        def bert_loss(
            params: Any, state: Any, batch: Batch, key: jax.Array
        ) -> tuple[jax.Array, Any]:
            outputs = module.apply({"params": params}, batch, train=True, rngs={"dropout": key})
            return pretraining_loss(batch, outputs), state

        return bert_loss

    def llama_loss(params: Any, state: Any, batch: Batch, key: jax.Array) -> tuple[jax.Array, Any]:
        return causal_lm_loss(
            module.apply({"params": params}, batch["tokens"]), batch["labels"]
        ), state

    return llama_loss
