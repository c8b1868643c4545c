"""MXNet 1.9.1 (Gluon): our own scripts in MxNet/benchmark, multi-process via dist_sync kvstore.

MXNet is retired upstream (Apache Attic, 2023); 1.9.1 is its last release and the one pinned.
"""

from driver.frameworks.base import Framework
from driver.registry import FRAMEWORKS

MXNET = FRAMEWORKS.add(
    "mxnet",
    Framework(
        name="mxnet",
        display="MXNet",
        folder="MxNet",
        models=("resnet50", "bert"),
        script="MxNet/benchmark/train.py",
        # The parameter-server kvstore (scheduler, servers, workers from DMLC_* variables).
        launcher="mxnet-dist",
        python="3.11",
    ),
)
