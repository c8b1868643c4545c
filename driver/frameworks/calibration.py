"""The calibration pseudo-framework used by ``dlperf selftest`` (no framework installed)."""

from typing import Annotated

from pydantic import Field

from driver.frameworks.base import Count, Framework, PositiveReal, register

CALIBRATION = register(
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
            # A node name (DLPERF_NODE_NAME, set by the SSH runtimes) whose steps last
            # `slowdown` times longer: a slow node for the node scan's own tests.
            "slow_node": Annotated[str, Field(strict=True, pattern=r"^[A-Za-z0-9_.-]{0,64}$")],
            "slowdown": Annotated[float, Field(ge=1.0, le=100.0, allow_inf_nan=False)],
        },
        shared_options=False,
        occupies_device=False,  # its ranks sleep: any topology rehearses on any node
    ),
)
