"""PyTorch: our own scripts in PyTorch/benchmark, started by torchrun."""

from driver.frameworks.base import Framework
from driver.registry import FRAMEWORKS

PYTORCH = FRAMEWORKS.add(
    "pytorch",
    Framework(
        name="pytorch",
        display="PyTorch",
        folder="PyTorch",
        models=("resnet50", "inception3", "bert"),
        script="PyTorch/benchmark/train.py",
        launcher="torchrun",
    ),
)
