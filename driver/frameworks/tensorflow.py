"""TensorFlow 2 (Keras 3): our own scripts in TensorFlow/benchmark, two distributed engines.

``tensorflow``: processes started by the kit's spawner; the script builds TF_CONFIG for
MultiWorkerMirroredStrategy from the rank environment. ``tensorflow-horovod``: the same script
started by ``horovodrun`` (it switches to Horovod's allreduce when horovodrun's variables are
set); GPU images only, with its own GPU matrix in TensorFlow/horovod.
"""

from dataclasses import replace
from typing import Any, Literal

from driver.frameworks.base import Flag, Framework, register

# TensorFlow's C++ INFO lines (oneDNN banner, CPU features) would drown the protocol records.
ENV = {"TF_CPP_MIN_LOG_LEVEL": "1"}
# TensorFlow/benchmark/train.py's own options (its TF_OPTIONS), besides the shared ones.
TF_OPTION_TYPES: dict[str, Any] = {
    "engine": Literal["auto", "mwms", "horovod"],
    "zero_init_residual": Flag,
}

TENSORFLOW = register(
    Framework(
        name="tensorflow",
        display="TensorFlow",
        folder="TensorFlow",
        module="tensorflow",
        models=("resnet50", "inception3", "bert"),
        launcher="spawn",
        has_xla=True,
        env=ENV,
        options=TF_OPTION_TYPES,
    ),
)

TENSORFLOW_HOROVOD = register(
    replace(
        TENSORFLOW,
        name="tensorflow-horovod",
        display="TensorFlow (Horovod)",
        folder="TensorFlow/horovod",
        launcher="horovodrun",
    ),
)
