"""What a repeat ran on: :class:`Hardware` (a label and the facts behind it), read from a header.

Four kinds, told apart by :attr:`Hardware.origin` and never equal to one another:

- ``fingerprint``: the node's own fingerprint (``driver.bench.fingerprint``), in the header of
  every rank of the kit's scripts and in an upstream node's ``DLPERF-HOST`` line;
- ``header``: an older header without one, known by the facts it recorded. Only the device
  names are hardware facts there (the CPU model on a CPU, the GPU's name on a GPU): ``versions``
  are the frameworks' builds (a CUDA toolkit version says nothing of the machine, and would set
  every framework on a machine of its own), the options are run settings. Two older headers that
  name different devices get different keys; two that name the same cannot be told apart;
- ``declared``: what a person said of logs the kit did not run (``import-logs --hardware``),
  parsed by :func:`parse_hardware`;
- ``unknown``: a header that says nothing (imported logs without ``--hardware``).

Also the GPU names NVML sees on the driver's own host (``dlperf selftest``, telemetry).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from driver.bench.fingerprint import KERNEL_ISA, LABEL_ISA, short_cpu_name, short_gpu_name
from driver.schema import StrictModel

UNKNOWN_LABEL = "unknown device"
_MAX_DECLARED = 200
# parse_hardware's words: "8x" (or "8 x"), "300W", "2c", the GPU link, ISA features.
_COUNT = re.compile(r"(\d+)x", re.IGNORECASE)
_POWER = re.compile(r"(\d+(?:\.\d+)?)W", re.IGNORECASE)
_CORES = re.compile(r"(\d+)c", re.IGNORECASE)
_LINKS = {"nvlink": "NVLink", "pcie": "PCIe"}
_ISA_ORDER = {flag: i for i, flag in enumerate(LABEL_ISA)}


class HardwareError(ValueError):
    """A header's fingerprint or a declared hardware that cannot be read; says what to fix."""


class Hardware(StrictModel):
    """A machine as the kit knows it: a short label for tables and the facts it stands for.
    :attr:`key` is the identity: repeats with different keys never share a table row, a
    median, a speedup or a baseline."""

    label: str
    facts: dict[str, Any]
    origin: Literal["fingerprint", "header", "declared", "unknown"]

    @property
    def key(self) -> str:
        """``<origin>:<digest of the facts>``: equal facts of one origin, equal keys."""
        if self.origin == "unknown":
            return "unknown"
        canonical = json.dumps(self.facts, sort_keys=True, separators=(",", ":"))
        return f"{self.origin}:{hashlib.sha256(canonical.encode()).hexdigest()[:16]}"

    @property
    def known(self) -> bool:
        return self.origin != "unknown"

    @property
    def device_model(self) -> str:
        """The device model alone, short (``V100-SXM2-16GB``, ``AMD EPYC``): what a published
        reference names, for matching like with like."""
        facts = self.facts
        if self.origin == "fingerprint":
            gpus = facts.get("gpus") or []
            names = [str(g.get("name")) for g in gpus if isinstance(g, dict)] or [
                str(facts.get("cpu_model", ""))
            ]
        elif self.origin == "header":
            names = list(facts.get("device_names", []))
        elif self.origin == "declared":
            names = [str(facts.get("device_model", ""))]
        else:
            return UNKNOWN_LABEL
        shorts = sorted({short_device_name(n) for n in names if n.strip()})
        return ", ".join(shorts) or UNKNOWN_LABEL


UNKNOWN = Hardware(label=UNKNOWN_LABEL, facts={}, origin="unknown")


def short_device_name(name: str) -> str:
    """A device name without trademarks, clock, filler and vendor prefixes (CPU or GPU)."""
    return short_gpu_name(short_cpu_name(name.strip()))


def hardware_of(header: Mapping[str, Any]) -> Hardware:
    """The hardware a header (a rank's, or an upstream node's host facts) says it ran on.

    A header with ``fingerprint`` and ``hardware`` gives them; an older one is read from its
    ``devices``; one without either is :data:`UNKNOWN`. A malformed fingerprint is a
    :class:`HardwareError` naming the field (the caller adds the file).
    """
    facts, label = header.get("fingerprint"), header.get("hardware")
    if facts is not None or label is not None:
        if not isinstance(facts, dict):
            raise HardwareError(
                f"header field 'fingerprint' must be a JSON object of facts, got "
                f"{type(facts).__name__}: the log was edited or written by another tool; "
                "re-run the case"
            )
        if not isinstance(label, str) or not label.strip():
            raise HardwareError(
                f"header field 'hardware' must be the fingerprint's label (text), got "
                f"{label!r}: the log was edited or written by another tool; re-run the case"
            )
        return Hardware(label=label.strip(), facts=facts, origin="fingerprint")
    devices = header.get("devices")
    if devices is None:
        return UNKNOWN
    if not isinstance(devices, list) or not all(isinstance(d, str) for d in devices):
        raise HardwareError(
            f"header field 'devices' must be a list of device names, got {devices!r}"
        )
    names = sorted({d.strip() for d in devices if d.strip()})
    if not names:
        return UNKNOWN
    return Hardware(label=", ".join(names), facts={"device_names": names}, origin="header")


def distinct_hardware(headers: Iterable[Mapping[str, Any]]) -> list[Hardware]:
    """The different hardware among ``headers`` (one per key, first seen first): every rank
    of one case on one machine gives one; two means the case spans machines."""
    seen: dict[str, Hardware] = {}
    for header in headers:
        hardware = hardware_of(header)
        seen.setdefault(hardware.key, hardware)
    return list(seen.values())


def display_labels(items: Iterable[Hardware]) -> dict[str, str]:
    """key -> the label a table shows: the label, with the key's digest added where two
    different keys share one label (say, two V100 nodes on different drivers)."""
    by_key = {h.key: h for h in items}
    labels: dict[str, list[str]] = {}
    for key, hardware in by_key.items():
        labels.setdefault(hardware.label, []).append(key)
    shown = {}
    for label, keys in labels.items():
        for key in keys:
            shown[key] = label if len(keys) == 1 else f"{label} [{key.split(':')[-1][:8]}]"
    return shown


def parse_hardware(text: str) -> Hardware:
    """What a person says logs ran on (``import-logs --hardware``, a facts file's
    ``hardware``): a device model, optionally with the words a fingerprint's label uses.

    ``V100-SXM2-16GB``, ``Tesla V100-SXM2-16GB`` (the same), ``8x V100-SXM2-16GB 300W NVLink``,
    ``AMD EPYC 2c avx512_bf16``. Words: ``<n>x`` GPUs per node, ``<w>W`` power limit, ``NVLink``
    or ``PCIe``, ``<n>c`` physical cores, ISA features (``avx2``, ``avx512_bf16``, ...); the rest
    is the model. Written forms that mean the same give the same label and key.
    """
    where = f"hardware {text!r}"
    example = "for example 'V100-SXM2-16GB', '8x V100-SXM2-16GB 300W NVLink', 'AMD EPYC 2c avx2'"
    if not isinstance(text, str) or not text.strip():
        raise HardwareError(f"{where}: empty; name the device model ({example})")
    if len(text) > _MAX_DECLARED or re.search(r"[\x00-\x1f\x7f]", text):
        raise HardwareError(
            f"{where}: one line of at most {_MAX_DECLARED} characters expected ({example})"
        )
    words = text.split()
    if len(words) > 1 and words[0].isdigit() and words[1].lower() == "x":
        words = [f"{words[0]}x", *words[2:]]  # "8 x V100" as "8x V100"
    facts: dict[str, Any] = {}
    isa: list[str] = []
    model: list[str] = []
    for index, word in enumerate(words):
        lower = word.lower()
        if index == 0 and _COUNT.fullmatch(word) and len(words) > 1:
            facts["devices_per_node"] = int(word[:-1])
        elif _POWER.fullmatch(word):
            facts["power_limit_w"] = float(word[:-1])
        elif _CORES.fullmatch(word):
            facts["physical_cores"] = int(word[:-1])
        elif lower in _LINKS:
            facts["gpu_link"] = _LINKS[lower]
        elif lower in KERNEL_ISA:
            isa.append(lower)
        else:
            model.append(word)
    if not model:
        raise HardwareError(f"{where}: no device model among the words ({example})")
    name = short_device_name(" ".join(model))
    facts["device_model"] = name
    if isa:
        facts["isa"] = sorted(set(isa))
    if facts.get("devices_per_node") == 0:
        raise HardwareError(f"{where}: 0 devices per node ({example})")
    return Hardware(label=_declared_label(facts), facts=facts, origin="declared")


def _declared_label(facts: Mapping[str, Any]) -> str:
    words = []
    if "devices_per_node" in facts:
        words.append(f"{facts['devices_per_node']}x")
    words.append(str(facts["device_model"]))
    if "power_limit_w" in facts:
        words.append(f"{facts['power_limit_w']:g}W")
    if "gpu_link" in facts:
        words.append(facts["gpu_link"])
    if "physical_cores" in facts:
        words.append(f"{facts['physical_cores']}c")
    isa = sorted(facts.get("isa", []), key=lambda f: (_ISA_ORDER.get(f, len(LABEL_ISA)), f))
    return " ".join(words + isa)


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
