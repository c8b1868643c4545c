"""OneFlow 0.9.0: our own scripts in OneFlow/benchmark, started by oneflow.distributed.launch."""

from typing import Any

from driver.frameworks.base import Flag, Framework, register

# OneFlow/benchmark/train.py's own options (its ONEFLOW_OPTIONS), besides the shared ones.
ONEFLOW_OPTION_TYPES: dict[str, Any] = {
    "graph": Flag,
    "zero_init_residual": Flag,
}

ONEFLOW = register(
    Framework(
        name="oneflow",
        display="OneFlow",
        folder="OneFlow",
        module="oneflow",
        launcher="oneflow",
        # oneflow 0.9.0 ships wheels for CPython 3.8-3.10 only.
        python="3.10",
        # oneflow 0.9.0 has no CPU AMP: eager autocast disables itself, the graph pass inserts
        # no casts on CPU; the scripts record amp_effective=false.
        has_amp_on_cpu=False,
        # The PyPI wheel is a CUDA build that dlopens cuDNN/cuBLAS at import, also on CPU; the
        # nvidia-*-cu11 wheels keep them in site-packages/nvidia/<lib>/lib.
        venv_library_globs=("lib/python3.10/site-packages/nvidia/*/lib",),
        options=ONEFLOW_OPTION_TYPES,
    ),
)
