"""What a node's training environment is: run there (``python -m driver.cluster.probe``).

Stdlib only, plus the NVML bindings (nvidia-ml-py) when the environment has them. Prints one
JSON object: Python, framework package versions (read from package metadata, without importing
the frameworks), NVML's driver and devices. Without a GPU driver ``pynvml.nvmlInit`` raises
NVMLError_LibraryNotFound: that is recorded as the reason, not an error.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from importlib import metadata
from typing import Any

PACKAGES = (
    "torch", "tensorflow", "tensorflow-cpu", "keras", "paddlepaddle", "paddlepaddle-gpu",
    "mxnet", "oneflow", "horovod", "numpy", "nvidia-ml-py", "nvidia-dali-cuda120",
    "jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt", "flax", "optax",
)  # fmt: skip


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def nvml_facts() -> dict[str, Any]:
    try:
        import pynvml
    except ImportError:
        return {"available": False, "reason": "nvidia-ml-py is not installed"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:  # NVMLError_LibraryNotFound without a driver
        return {"available": False, "reason": f"{type(error).__name__}: {error}"}
    try:
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            device: dict[str, Any] = {
                "index": index,
                "name": _text(pynvml.nvmlDeviceGetName(handle)),
                "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                "memory_total_bytes": int(memory.total),
                "pci_bus_id": _text(pynvml.nvmlDeviceGetPciInfo(handle).busId),
            }
            try:
                clocks = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
                device["max_sm_clock_mhz"] = int(clocks)
            except pynvml.NVMLError:
                pass
            devices.append(device)
        return {
            "available": True,
            "driver_version": _text(pynvml.nvmlSystemGetDriverVersion()),
            "cuda_driver_version": int(pynvml.nvmlSystemGetCudaDriverVersion()),
            "devices": devices,
        }
    finally:
        pynvml.nvmlShutdown()


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def facts() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "packages": package_versions(),
        "nvml": nvml_facts(),
        "cpu_count": os.cpu_count(),
        "in_container": os.path.exists("/.dockerenv"),
    }


if __name__ == "__main__":
    print(json.dumps(facts(), sort_keys=True))
