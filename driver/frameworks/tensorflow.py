"""TensorFlow 2 (Keras 3): our own scripts in TensorFlow/benchmark.

Multi-process jobs start through the kit's spawner: the script builds TF_CONFIG for
MultiWorkerMirroredStrategy from the rank environment. Horovod is the second engine
(``horovodrun`` launcher, GPU images only).
"""

from driver.frameworks.base import Framework
from driver.registry import FRAMEWORKS

TENSORFLOW = FRAMEWORKS.add(
    "tensorflow",
    Framework(
        name="tensorflow",
        display="TensorFlow",
        folder="TensorFlow",
        models=("resnet50", "inception3", "bert"),
        script="TensorFlow/benchmark/train.py",
        launcher="spawn",
        has_xla=True,
        # oneDNN's start-up banner and TF's C++ INFO lines drown the protocol records.
        env={"TF_CPP_MIN_LOG_LEVEL": "1"},
    ),
)
