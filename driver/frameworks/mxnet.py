"""MXNet 1.9.1 (Gluon): our own scripts in MxNet/benchmark, multi-process via dist_sync kvstore.

MXNet is retired upstream (Apache Attic, 2023); 1.9.1 is its last release and the one pinned.
"""

from typing import Any, Literal

from driver.frameworks.base import Flag, Framework, register

# MxNet/benchmark/trainer.py's own options (its MXNET_OPTIONS), besides the shared ones.
MXNET_OPTION_TYPES: dict[str, Any] = {
    "hybridize": Flag,
    "zero_init_residual": Flag,
    "kvstore": Literal["dist_sync", "dist_device_sync"],
}

MXNET = register(
    Framework(
        name="mxnet",
        display="MXNet",
        folder="MxNet",
        module="mxnet",
        # The parameter-server kvstore (scheduler, servers, workers from DMLC_* variables).
        launcher="mxnet-dist",
        python="3.11",
        options=MXNET_OPTION_TYPES,
    ),
)
