"""A framework-free benchmark whose true throughput is known in advance.

It is an adapter of the same loop as every framework script (``driver.bench.loop``), so
``dlperf selftest`` measures the kit's whole path: launcher, runtime, the benchmark loop, parser
and statistics. Each step ends at a deadline ``t0 + k * step_time`` (``t0``: the first step's
start), so over any window of whole steps the true rate is exactly
``batch_size * world_size / step_time``. Jitter per step does not accumulate: deadlines are
absolute.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from driver.bench.loop import Adapter, run_benchmark  # noqa: E402
from driver.bench.protocol import oom_record  # noqa: E402

CALIBRATION_OPTIONS: dict[str, Any] = {
    "step_time": 0.02,  # seconds per step: the known truth
    # Fault injection for the kit's own tests: a rank that fails or hangs at a given step.
    "fail_at_step": 0,
    "hang_at_step": 0,
    "faulty_rank": 0,
    "oom_above": 0,  # a pretend memory limit (batch size), for the batch=max search; 0: none
}


def wait_until(deadline: float) -> None:
    # Plain sleeps, no spinning: with more processes than cores, spinning ranks would delay
    # each other's wake-ups, which is the only error source left (deadlines are absolute).
    remaining = deadline - time.monotonic()
    while remaining > 0:
        time.sleep(remaining)
        remaining = deadline - time.monotonic()


class CalibrationAdapter(Adapter):
    framework = "calibration"
    own_options = CALIBRATION_OPTIONS

    def setup(self) -> bool:
        return False

    def build_model(self) -> int:
        limit = int(self.options["oom_above"] or 0)
        if limit and self.args.batch_size > limit:
            print(oom_record(self.run.rank, self.args.batch_size), flush=True)
            sys.exit(1)  # as torchrun reports it: only the record tells it was memory
        self.step_time = float(self.options["step_time"])
        self.steps = 0
        self.start: float | None = None
        return 0

    def make_batch(self) -> None:
        return None

    def step(self, batch: None) -> float:
        self.start = self.start if self.start is not None else time.monotonic()
        self.steps += 1
        faulty = self.run.rank == int(self.options["faulty_rank"])
        if faulty and self.steps == int(self.options["fail_at_step"]):
            sys.exit(3)
        if faulty and self.steps == int(self.options["hang_at_step"]):
            while True:
                time.sleep(3600)
        wait_until(self.start + self.steps * self.step_time)
        return 0.0

    def device(self) -> str:
        return "none"

    def versions(self) -> dict[str, Any]:
        return {"calibration": "1"}

    def devices(self) -> list[str]:
        return ["none"]

    def barrier(self) -> None:
        """No collective: each rank's deadlines are its own."""

    def weights_checksum(self) -> float:
        return 0.0


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(
        CalibrationAdapter, argv, description="dlperf calibration workload", models=("calibration",)
    )


if __name__ == "__main__":
    sys.exit(main())
