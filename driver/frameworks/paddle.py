"""PaddlePaddle: our own scripts in PaddlePaddle/benchmark, started by paddle.distributed.launch.

OMP_NUM_THREADS is set by the script (cores / processes on the node) before paddle is imported:
without it paddle 3.3.1 uses one thread on CPU. AMP is a no-op on CPU (recorded per repeat).
"""

from typing import Any

from driver.frameworks.base import Flag, Framework, PositiveReal, register

# PaddlePaddle/benchmark/trainer.py's own options (its PADDLE_OPTIONS), besides the shared ones.
PADDLE_OPTION_TYPES: dict[str, Any] = {
    "channels_last": Flag,
    "zero_init_residual": Flag,
    "init_loss_scaling": PositiveReal,
}

PADDLE = register(
    Framework(
        name="paddle",
        display="PaddlePaddle",
        folder="PaddlePaddle",
        module="paddle",
        launcher="paddle",
        has_amp_on_cpu=False,
        options=PADDLE_OPTION_TYPES,
    ),
)
