"""The all-reduce probe's raw log, read back, and the scaling bound a release puts beside each
multi-device efficiency (the probe itself runs from ``driver.diagnose.probes``):

    ring all-reduce, no overlap:  t_allreduce = 2 (n - 1) / n * gradient bytes / busbw
    efficiency bound = t_step / (t_step + t_allreduce)

with ``t_step`` the 1-device step time (batch / 1n1g throughput). busbw is the bus bandwidth
of nccl-tests (algbw x 2(n-1)/n), measured at the largest probed message size.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

TAG = "dlperf_probe"  # the key of every line the probe prints (driver/diagnose/allreduce.py)


class ProbeError(RuntimeError):
    pass


def bus_factor(devices: int) -> float:
    """busbw / algbw of a ring all-reduce (nccl-tests): 2(n-1)/n."""
    return 2.0 * (devices - 1) / devices


def parse_probe_log(text: str) -> dict[str, Any]:
    """The probe's rank-0 lines -> backend, world size and per-size bandwidths (GB/s, 1e9)."""
    header: dict[str, Any] = {}
    sizes: list[dict[str, Any]] = []
    ended = False
    for line in text.splitlines():
        start = line.find("{")
        if start < 0 or f'"{TAG}"' not in line:
            continue
        try:
            record = json.loads(line[start:])
        except json.JSONDecodeError as error:
            raise ProbeError(f"broken probe line: {error.msg}") from None
        kind = record.get(TAG)
        if kind == "header":
            header = record
        elif kind == "allreduce":
            times = [float(t) for t in record["times"]]
            if not times or min(times) <= 0:
                raise ProbeError(f"probe size {record.get('bytes')}: no positive timings")
            size = int(record["bytes"])
            median = statistics.median(times)
            world = int(header.get("world_size", 0))
            algbw = size / median / 1e9
            sizes.append(
                {
                    "bytes": size,
                    "iters": len(times),
                    "median_s": median,
                    "algbw_gbps": algbw,
                    "busbw_gbps": algbw * bus_factor(world) if world > 1 else None,
                }
            )
        elif kind == "end":
            ended = True
    if not header or not sizes or not ended:
        raise ProbeError("the probe log has no complete result (header, sizes, end)")
    largest = max(sizes, key=lambda s: s["bytes"])
    return {
        "kind": "allreduce",
        "backend": header.get("backend"),
        "world_size": int(header["world_size"]),
        "nodes": int(header.get("nodes", 1)),
        "device": header.get("device"),
        "torch": header.get("torch"),
        "hostname": header.get("hostname"),
        "sizes": sizes,
        "busbw_gbps": largest["busbw_gbps"],
        "busbw_at_bytes": largest["bytes"],
    }


def scaling_bound(
    step_time_s: float, gradient_bytes: float, devices: int, busbw_gbps: float
) -> float | None:
    """Efficiency ceiling of data parallelism with a ring all-reduce that does not overlap."""
    if devices < 2 or step_time_s <= 0 or gradient_bytes <= 0 or not busbw_gbps:
        return None
    allreduce_s = bus_factor(devices) * gradient_bytes / (busbw_gbps * 1e9)
    return step_time_s / (step_time_s + allreduce_s)
