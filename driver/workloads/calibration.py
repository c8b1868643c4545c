"""The calibration workload of known step time (``driver/calibration/workload.py``): no model,
no data, no FLOPs; ``dlperf selftest`` measures the kit's own path with it."""

from driver.workloads.base import WORKLOADS, Workload

CALIBRATION = WORKLOADS.add(
    "calibration",
    Workload(
        name="calibration",
        title="Calibration workload",
        listed=5,
        framework_model=False,
        flops_source="",
    ),
)
