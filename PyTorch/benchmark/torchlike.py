"""Network definitions written against a torch-like library passed in, and no import of torch.

``oneflow`` mirrors ``torch`` (``nn.Conv2d``, ``nn.init``, ``flatten``...) closely enough that
OneFlow's benchmark builds the very same ResNet-50 v1.5 (layers, shapes, initialisation) from
these classes as the PyTorch benchmark does: one definition, no copy to drift. The module sits
outside ``PyTorch.benchmark.models`` because that package imports torch, which OneFlow's
environment does not have.

ResNet-50 v1.5 differs from the original v1 only in where the downsampling bottleneck strides:
on the 3x3 convolution instead of the first 1x1. That is the variant NVIDIA's and torchvision's
ResNet-50 implement, and the one DLPerf measures (about 4.1 GMACs per 224x224 image).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any


def resnet_classes(lib: ModuleType) -> tuple[type, type]:
    """``(Bottleneck, ResNet)`` built on ``lib.nn`` (``torch`` or ``oneflow``)."""
    nn = lib.nn

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, in_channels: int, width: int, stride: int, downsample: Any) -> None:
            super().__init__()
            out_channels = width * self.expansion
            self.conv1 = nn.Conv2d(in_channels, width, kernel_size=1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            # v1.5: the stride sits here, on the 3x3, not on conv1.
            self.conv2 = nn.Conv2d(
                width, width, kernel_size=3, stride=stride, padding=1, bias=False
            )
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, out_channels, kernel_size=1, bias=False)
            self.bn3 = nn.BatchNorm2d(out_channels)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x: Any) -> Any:
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + identity)

    class ResNet(nn.Module):
        def __init__(
            self,
            layers: tuple[int, ...] = (3, 4, 6, 3),
            num_classes: int = 1000,
            zero_init_residual: bool = False,
        ) -> None:
            super().__init__()
            self.in_channels = 64
            self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = self._make_layer(64, layers[0], stride=1)
            self.layer2 = self._make_layer(128, layers[1], stride=2)
            self.layer3 = self._make_layer(256, layers[2], stride=2)
            self.layer4 = self._make_layer(512, layers[3], stride=2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512 * Bottleneck.expansion, num_classes)

            for module in self.modules():
                if isinstance(module, nn.Conv2d):
                    nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(module, nn.BatchNorm2d):
                    nn.init.ones_(module.weight)
                    nn.init.zeros_(module.bias)
            if zero_init_residual:
                # Each residual branch starts as identity (Goyal et al.); NVIDIA's recipe does this.
                for module in self.modules():
                    if isinstance(module, Bottleneck):
                        nn.init.zeros_(module.bn3.weight)

        def _make_layer(self, width: int, blocks: int, stride: int) -> Any:
            out_channels = width * Bottleneck.expansion
            downsample = None
            if stride != 1 or self.in_channels != out_channels:
                downsample = nn.Sequential(
                    nn.Conv2d(
                        self.in_channels, out_channels, kernel_size=1, stride=stride, bias=False
                    ),
                    nn.BatchNorm2d(out_channels),
                )
            layers = [Bottleneck(self.in_channels, width, stride, downsample)]
            self.in_channels = out_channels
            layers += [Bottleneck(out_channels, width, 1, None) for _ in range(1, blocks)]
            return nn.Sequential(*layers)

        def forward(self, x: Any) -> Any:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(lib.flatten(self.avgpool(x), 1))

    return Bottleneck, ResNet
