"""The calibration pseudo-framework used by ``dlperf selftest`` (no framework installed)."""

from driver.frameworks.base import Count, Framework, PositiveReal
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
        # What driver/calibration/workload.py reads; no model shapes or training knobs.
        options={
            "step_time": PositiveReal,
            "fail_at_step": Count,
            "hang_at_step": Count,
            "faulty_rank": Count,
            "oom_above": Count,
        },
        shared_options=False,
        occupies_device=False,  # its ranks sleep: any topology rehearses on any node
    ),
)
