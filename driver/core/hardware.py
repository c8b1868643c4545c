"""What this host has: GPUs (through NVML, when its library is there), CPU, kernel."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any


def gpu_names() -> list[str]:
    """Names of the NVIDIA GPUs NVML sees; [] without a driver (NVMLError_LibraryNotFound)."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        names = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
            names.append(name.decode() if isinstance(name, bytes) else name)
        return names
    finally:
        pynvml.nvmlShutdown()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def host_facts() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "kernel": platform.release(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpus": gpu_names(),
    }
