"""ResNet-50 v1.5 in Flax (linen), NHWC: each downsampling bottleneck strides on its 3x3 conv.

The same network as PyTorch/benchmark/models/resnet.py and the Keras one: BatchNorm momentum
0.9 (Flax counts it as the running statistics' keep rate, PyTorch's 0.1 the other way round)
and epsilon 1e-5, He-normal (fan-out) convolutions, the classifier N(0, 0.01). Parameters are
float32; ``dtype`` is the compute dtype (bfloat16 under AMP), the logits float32.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax.numpy as jnp
from flax import linen as nn

STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, first stride)
EXPANSION = 4
CONV_INIT = nn.initializers.variance_scaling(2.0, "fan_out", "truncated_normal")


class Bottleneck(nn.Module):
    width: int
    stride: int
    zero_init: bool
    dtype: Any

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool) -> jnp.ndarray:
        conv = partial(nn.Conv, use_bias=False, dtype=self.dtype, kernel_init=CONV_INIT)
        norm = partial(
            nn.BatchNorm, use_running_average=not train, momentum=0.9, epsilon=1e-5,
            dtype=self.dtype,
        )  # fmt: skip
        shortcut = x
        if self.stride != 1 or x.shape[-1] != self.width * EXPANSION:
            shortcut = conv(self.width * EXPANSION, (1, 1), (self.stride, self.stride))(x)
            shortcut = norm()(shortcut)
        y = nn.relu(norm()(conv(self.width, (1, 1))(x)))
        y = conv(self.width, (3, 3), (self.stride, self.stride), padding=((1, 1), (1, 1)))(y)
        y = nn.relu(norm()(y))
        y = conv(self.width * EXPANSION, (1, 1))(y)
        # zero_init_residual: each block starts as the identity (Goyal et al.).
        y = norm(scale_init=nn.initializers.zeros if self.zero_init else nn.initializers.ones)(y)
        return nn.relu(y + shortcut)


class ResNet50(nn.Module):
    num_classes: int = 1000
    zero_init_residual: bool = False
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, images: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        x = images.astype(self.dtype)
        x = nn.Conv(
            64, (7, 7), (2, 2), padding=((3, 3), (3, 3)), use_bias=False, dtype=self.dtype,
            kernel_init=CONV_INIT,
        )(x)  # fmt: skip
        x = nn.BatchNorm(
            use_running_average=not train, momentum=0.9, epsilon=1e-5, dtype=self.dtype
        )(x)
        x = nn.relu(x)
        x = nn.max_pool(x, (3, 3), (2, 2), padding=((1, 1), (1, 1)))
        for width, blocks, stride in STAGES:
            for block in range(blocks):
                x = Bottleneck(
                    width, stride if block == 0 else 1, self.zero_init_residual, self.dtype
                )(x, train)
        x = jnp.mean(x, axis=(1, 2))
        # The classifier in float32, as the other frameworks' AMP keeps it.
        return nn.Dense(
            self.num_classes, kernel_init=nn.initializers.normal(0.01), dtype=jnp.float32
        )(x.astype(jnp.float32))
