"""Telemetry beside the measured processes: NVML per GPU, /proc CPU and RSS per process tree.

``sampler`` writes one JSON line per sample to ``telemetry-node<i>.jsonl`` in the repeat folder
(each line carries ``mono``, the host's monotonic clock, and ``wall``); ``summary`` restricts
the samples to the measured window and reduces them to a median and a maximum per metric.
"""

from driver.telemetry.sampler import TelemetrySampler, nvml_status, start_for_processes
from driver.telemetry.summary import parse_samples, summarize_samples

__all__ = [
    "TelemetrySampler",
    "nvml_status",
    "parse_samples",
    "start_for_processes",
    "summarize_samples",
]
