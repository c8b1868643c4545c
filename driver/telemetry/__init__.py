"""Telemetry beside the measured processes: NVML per GPU, /proc CPU and RSS per process tree.

``sampler`` writes one JSON line per sample to ``telemetry-node<i>.jsonl`` in the repeat folder
(each line carries ``mono``, the host's monotonic clock, and ``wall``); ``summary`` restricts
the samples to the measured window and reduces them to a median and a maximum per metric.
"""

from driver.telemetry.sampler import (
    DEFAULT_INTERVAL_S,
    TelemetrySampler,
    interval_from_env,
    nvml_status,
    start_for_processes,
)
from driver.telemetry.summary import (
    TELEMETRY_FIELDS,
    parse_samples,
    summarize_samples,
    telemetry_file_name,
)

__all__ = [
    "DEFAULT_INTERVAL_S",
    "TELEMETRY_FIELDS",
    "TelemetrySampler",
    "interval_from_env",
    "nvml_status",
    "parse_samples",
    "start_for_processes",
    "summarize_samples",
    "telemetry_file_name",
]
