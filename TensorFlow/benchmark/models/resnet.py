"""ResNet-50 v1.5 in Keras: the stride of each downsampling bottleneck is on its 3x3 conv.

v1.5 is what NVIDIA's and MLPerf's references train (keras.applications.ResNet50 is v1, with the
stride on the first 1x1 conv, which is why this is our own). NHWC throughout, TensorFlow's
native layout on GPU with cuDNN and on CPU with oneDNN. BatchNorm momentum 0.9 and epsilon 1e-5
as in the reference; He-normal (fan-out) conv initialisation as torchvision.
"""

from __future__ import annotations

import keras
from keras import layers

STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, first stride)
EXPANSION = 4
BN = {"momentum": 0.9, "epsilon": 1e-5}


def _conv(filters: int, kernel: int, stride: int, name: str) -> layers.Conv2D:
    return layers.Conv2D(
        filters,
        kernel,
        strides=stride,
        padding="same",
        use_bias=False,
        kernel_initializer=keras.initializers.VarianceScaling(2.0, "fan_out", "truncated_normal"),
        name=name,
    )


def _bottleneck(x, width: int, stride: int, zero_init: bool, name: str):  # noqa: ANN001, ANN202
    shortcut = x
    if stride != 1 or x.shape[-1] != width * EXPANSION:
        shortcut = _conv(width * EXPANSION, 1, stride, f"{name}_down_conv")(x)
        shortcut = layers.BatchNormalization(**BN, name=f"{name}_down_bn")(shortcut)
    y = _conv(width, 1, 1, f"{name}_conv1")(x)
    y = layers.ReLU(name=f"{name}_relu1")(layers.BatchNormalization(**BN, name=f"{name}_bn1")(y))
    y = _conv(width, 3, stride, f"{name}_conv2")(y)  # v1.5: the stride is here
    y = layers.ReLU(name=f"{name}_relu2")(layers.BatchNormalization(**BN, name=f"{name}_bn2")(y))
    y = _conv(width * EXPANSION, 1, 1, f"{name}_conv3")(y)
    gamma = "zeros" if zero_init else "ones"
    y = layers.BatchNormalization(**BN, gamma_initializer=gamma, name=f"{name}_bn3")(y)
    return layers.ReLU(name=f"{name}_out")(layers.Add(name=f"{name}_add")([y, shortcut]))


def resnet50(
    image_size: int = 224, num_classes: int = 1000, zero_init_residual: bool = False
) -> keras.Model:
    """Logits (no softmax); the classifier runs in float32 under a mixed-precision policy."""
    inputs = keras.Input((image_size, image_size, 3), name="images")
    x = _conv(64, 7, 2, "stem_conv")(inputs)
    x = layers.ReLU(name="stem_relu")(layers.BatchNormalization(**BN, name="stem_bn")(x))
    x = layers.MaxPooling2D(3, strides=2, padding="same", name="stem_pool")(x)
    for stage, (width, blocks, stride) in enumerate(STAGES, start=1):
        for block in range(blocks):
            x = _bottleneck(
                x, width, stride if block == 0 else 1, zero_init_residual, f"s{stage}b{block}"
            )
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    logits = layers.Dense(
        num_classes,
        kernel_initializer=keras.initializers.RandomNormal(stddev=0.01),
        dtype="float32",
        name="fc",
    )(x)
    return keras.Model(inputs, logits, name="resnet50_v1_5")
