"""The calibration pseudo-framework used by ``dlperf selftest`` (no framework installed)."""

from driver.frameworks.base import Framework
from driver.registry import FRAMEWORKS

CALIBRATION = FRAMEWORKS.add(
    "calibration",
    Framework(
        name="calibration",
        display="Calibration",
        folder="driver/calibration",
        models=("calibration",),
        script="driver/calibration/workload.py",
        launcher="spawn",
    ),
)
