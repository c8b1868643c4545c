"""ResNet-50 v1.5 on torch, written out so the benchmark needs no torchvision.

The definition is ``PyTorch.benchmark.torchlike.resnet_classes``, shared with OneFlow.
"""

from __future__ import annotations

import torch

from PyTorch.benchmark.torchlike import resnet_classes

Bottleneck, ResNet = resnet_classes(torch)


def resnet50(num_classes: int = 1000, zero_init_residual: bool = False) -> torch.nn.Module:
    return ResNet((3, 4, 6, 3), num_classes=num_classes, zero_init_residual=zero_init_residual)
