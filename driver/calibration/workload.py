"""A framework-free benchmark whose true throughput is known in advance.

Each step ends at a deadline ``t0 + k * step_time``, so over any window of whole steps the true
rate is exactly
``batch_size * world_size / step_time``. ``dlperf selftest`` runs it through the same launcher,
runtime, parser and statistics as a real benchmark and prints the kit's error against that.
Jitter per step does not accumulate: deadlines are absolute.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from driver.bench.contract import parse_benchmark_args  # noqa: E402
from driver.bench.protocol import StepLogger, oom_record  # noqa: E402


def wait_until(deadline: float) -> None:
    # Plain sleeps, no spinning: with more processes than cores, spinning ranks would delay
    # each other's wake-ups, which is the only error source left (deadlines are absolute).
    remaining = deadline - time.monotonic()
    while remaining > 0:
        time.sleep(remaining)
        remaining = deadline - time.monotonic()


def main() -> None:
    args = parse_benchmark_args(description="dlperf calibration workload", models=("calibration",))
    step_time = float(args.options.get("step_time", 0.02))
    logger = StepLogger(framework="calibration", model=args.model)
    logger.header(
        versions={"calibration": "1"},
        devices=["none"],
        options={**args.options, "step_time": step_time, "batch_size": args.batch_size},
    )
    # Fault injection for the kit's own tests: a rank that fails or hangs at a given step.
    fail_at = int(args.options.get("fail_at_step", 0))
    hang_at = int(args.options.get("hang_at_step", 0))
    faulty_rank = int(args.options.get("faulty_rank", 0))
    # A pretend memory limit, for the batch=max search: exit like a real script that ran out.
    if args.batch_size > int(args.options.get("oom_above", 0) or sys.maxsize):
        print(oom_record(logger.rank, args.batch_size), flush=True)
        sys.exit(1)  # as torchrun reports it: only the record tells it was memory
    start = logger.begin()
    for step in range(1, args.total_steps + 1):
        if logger.rank == faulty_rank and step == fail_at:
            sys.exit(3)
        if logger.rank == faulty_rank and step == hang_at:
            while True:
                time.sleep(3600)
        wait_until(start + step * step_time)
        logger.step(step, args.batch_size, loss=0.0)
    logger.end()


if __name__ == "__main__":
    main()
