"""ResNet-50 v1.5 with paddle.nn: the stride of each downsampling bottleneck is on its 3x3 conv.

v1.5 is what NVIDIA's, MLPerf's and Paddle's own references train. NCHW by default; NHWC
(``channels_last``) is the fast layout for AMP on tensor cores, as in Paddle's ResNet benchmark.
BatchNorm momentum 0.9 and epsilon 1e-5; He-normal conv initialisation.
"""

from __future__ import annotations

import paddle
from paddle import nn

STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, first stride)
EXPANSION = 4


def _conv(cin: int, cout: int, kernel: int, stride: int, data_format: str) -> nn.Conv2D:
    return nn.Conv2D(
        cin,
        cout,
        kernel,
        stride=stride,
        padding=kernel // 2,
        bias_attr=False,
        data_format=data_format,
        weight_attr=paddle.ParamAttr(initializer=nn.initializer.KaimingNormal()),
    )


def _bn(channels: int, data_format: str, zero: bool = False) -> nn.BatchNorm2D:
    gamma = nn.initializer.Constant(0.0 if zero else 1.0)
    return nn.BatchNorm2D(
        channels,
        momentum=0.9,
        epsilon=1e-5,
        data_format=data_format,
        weight_attr=paddle.ParamAttr(initializer=gamma),
    )


class Bottleneck(nn.Layer):
    def __init__(
        self, cin: int, width: int, stride: int, data_format: str, zero_init: bool
    ) -> None:
        super().__init__()
        cout = width * EXPANSION
        self.conv1, self.bn1 = _conv(cin, width, 1, 1, data_format), _bn(width, data_format)
        # v1.5: the stride is on the 3x3 conv.
        self.conv2, self.bn2 = _conv(width, width, 3, stride, data_format), _bn(width, data_format)
        self.conv3 = _conv(width, cout, 1, 1, data_format)
        self.bn3 = _bn(cout, data_format, zero=zero_init)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                _conv(cin, cout, 1, stride, data_format), _bn(cout, data_format)
            )

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + shortcut)


class ResNet50(nn.Layer):
    """Logits (no softmax) for images in ``data_format`` (NCHW or NHWC)."""

    def __init__(
        self, num_classes: int = 1000, data_format: str = "NCHW", zero_init_residual: bool = False
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            _conv(3, 64, 7, 2, data_format),
            _bn(64, data_format),
            nn.ReLU(),
            nn.MaxPool2D(3, stride=2, padding=1, data_format=data_format),
        )
        blocks, cin = [], 64
        for width, count, stride in STAGES:
            for index in range(count):
                blocks.append(
                    Bottleneck(
                        cin, width, stride if index == 0 else 1, data_format, zero_init_residual
                    )
                )
                cin = width * EXPANSION
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2D(1, data_format=data_format)
        self.fc = nn.Linear(
            cin,
            num_classes,
            weight_attr=paddle.ParamAttr(initializer=nn.initializer.Normal(std=0.01)),
        )

    def forward(self, images: paddle.Tensor) -> paddle.Tensor:
        x = self.pool(self.blocks(self.stem(images)))
        return self.fc(paddle.flatten(x, 1))
