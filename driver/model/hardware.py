"""What a repeat ran on: :class:`Hardware` (a label and the facts behind it), read from a header.

Five kinds, told apart by :attr:`Hardware.origin` and never equal to one another:

- ``fingerprint``: the node's own fingerprint (``driver.bench.fingerprint``), in the header of
  every rank of the kit's scripts and in an upstream node's ``DLPERF-HOST`` line. The facts are
  checked against their schema (:class:`FingerprintFacts`: a known schema version, the types
  and ranges of every fact, facts that agree with one another, no control or format character)
  and the label every table shows is computed here from them (:func:`machine_label`); the
  header's own ``hardware`` label is never read, so editing it changes nothing shown. The
  label names what the ranks ran on (:func:`run_devices`): the GPUs where they used GPUs, the
  CPU where they ran on it (a CPU run on a GPU node is not labelled with the GPUs it left
  idle), and a rank whose devices are neither its node's CPU nor GPUs it lists is refused;
- ``header``: an older header without one, known by the facts it recorded. Only the device
  names are hardware facts there (the CPU model on a CPU, the GPU's name on a GPU): ``versions``
  are the frameworks' builds (a CUDA toolkit version says nothing of the machine, and would set
  every framework on a machine of its own), the options are run settings. Two older headers that
  name different devices get different keys; two that name the same cannot be told apart;
- ``declared``: what a person said of logs the kit did not run (``import-logs --hardware``),
  parsed by :func:`parse_hardware`;
- ``attested``: what a person stated of a session whose logs predate the fingerprint
  (``dlperf attest-hardware``, ``driver.verify.hardware``);
- ``unknown``: a header that says nothing (imported logs without ``--hardware``).

Also the GPU names NVML sees on the driver's own host (``dlperf selftest``, telemetry).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from driver.bench.fingerprint import (
    FINGERPRINT_SCHEMA,
    KERNEL_ISA,
    LABEL_ISA,
    interconnect_line,
    label_of,
    parse_cpuinfo,
    short_cpu_name,
    short_gpu_name,
)
from driver.files import sha256_bytes
from driver.schema import StrictModel, field_path, schema_version
from driver.text import LIMITS, FreeText, check_free_text

UNKNOWN_LABEL = "unknown device"
# A node's GPUs, one "index, UUID" line each (nvidia-smi's index is the PCI bus order, which
# CUDA_DEVICE_ORDER=PCI_BUS_ID gives CUDA too): pre-flight and an upstream source's guard read it.
GPU_QUERY = "nvidia-smi --query-gpu=index,uuid --format=csv,noheader"
_MAX_DECLARED = LIMITS["label"]
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
    origin: Literal["fingerprint", "header", "declared", "attested", "unknown"]

    @property
    def key(self) -> str:
        """``<origin>:<digest of the facts>``: equal facts of one origin, equal keys."""
        if self.origin == "unknown":
            return "unknown"
        canonical = json.dumps(self.facts, sort_keys=True, separators=(",", ":"))
        return f"{self.origin}:{sha256_bytes(canonical.encode())[:16]}"

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
        elif self.origin == "attested":
            names = [self.label]
        else:
            return UNKNOWN_LABEL
        shorts = sorted({short_device_name(n) for n in names if n.strip()})
        return ", ".join(shorts) or UNKNOWN_LABEL


UNKNOWN = Hardware(label=UNKNOWN_LABEL, facts={}, origin="unknown")


def short_device_name(name: str) -> str:
    """A device name without trademarks, clock, filler and vendor prefixes (CPU or GPU)."""
    return short_gpu_name(short_cpu_name(name.strip()))


# --- the fingerprint's schema ---------------------------------------------------------------------

_FIX = "the log was edited or written by another tool; re-run the case"
MAX_GPUS_PER_NODE = 64
Count = Annotated[int, Field(ge=1, le=1_000_000)]
Megahertz = Annotated[int, Field(ge=1, le=100_000)]
Watts = Annotated[float, Field(ge=0, le=100_000)]
# What nvidia-smi topo -m gives (driver.bench.fingerprint.parse_topology).
GPU_LINK = re.compile(r"NVLink|(NVLink\+)?PCIe (PIX|PXB|PHB|NODE|SYS)")


class GpuFacts(StrictModel):
    """One GPU of a node, as ``driver.bench.fingerprint`` takes it (NVML or nvidia-smi)."""

    name: Annotated[FreeText("label"), Field(min_length=1)]
    memory_mib: Annotated[int, Field(ge=1, le=16 * 2**20)] | None = None  # up to 16 TiB
    max_sm_clock_mhz: Megahertz | None = None
    max_memory_clock_mhz: Megahertz | None = None
    power_limit_w: Watts | None = None
    default_power_limit_w: Watts | None = None
    pcie_gen_max: Annotated[int, Field(ge=1, le=64)] | None = None
    pcie_width_max: Annotated[int, Field(ge=1, le=256)] | None = None
    sm_count: Annotated[int, Field(ge=1, le=100_000)] | None = None


class FingerprintFacts(StrictModel):
    """The facts of one node's fingerprint (``driver.bench.fingerprint.fingerprint``), of the
    schema versions this kit reads: every fact of its type and in its range, finite, text of
    one short line, and facts that agree with one another (a GPU count that is the GPUs listed,
    an interconnect line that is the link and network given)."""

    schema_: schema_version((FINGERPRINT_SCHEMA,)) = Field(alias="schema")
    arch: FreeText("name") | None = None
    cpu_model: Annotated[FreeText("label"), Field(min_length=1)]
    cpu_vendor: FreeText("name") | None = None
    cpu_family: FreeText("name") | None = None
    cpu_model_number: FreeText("name") | None = None
    isa: Annotated[list[str], Field(max_length=len(KERNEL_ISA))]
    sockets: Annotated[int, Field(ge=1, le=1024)] = 1
    physical_cores: Count | None = None
    logical_cpus: Count | None = None
    memory_gib: Annotated[int, Field(ge=0, le=2**20)] | None = None  # whole GiB, up to 1 PiB
    # the most GPUs one node holds: 8 on a DGX/HGX board, 16 on the largest PCIe servers;
    # 64 leaves room, and 1,000 on one node is a forged fingerprint
    gpus: Annotated[list[GpuFacts], Field(max_length=MAX_GPUS_PER_NODE)]
    gpu_driver: FreeText("name") | None = None
    cuda_driver: FreeText("name") | None = None
    gpu_link: FreeText("name") | None = None
    devices_per_node: Annotated[int, Field(ge=0, le=MAX_GPUS_PER_NODE)]
    network: FreeText("label") | None = None
    interconnect: FreeText("label") | None = None

    @field_validator("isa")
    @classmethod
    def _kernel_isa(cls, isa: list[str]) -> list[str]:
        unknown = [flag for flag in isa if flag not in KERNEL_ISA]
        if unknown:
            raise ValueError(
                f"{unknown[0]!r} is not an ISA feature the fingerprint takes "
                f"({', '.join(KERNEL_ISA)})"
            )
        if isa != sorted(set(isa)):
            raise ValueError("the ISA features are listed sorted, each once")
        return isa

    @field_validator("gpu_link")
    @classmethod
    def _gpu_link(cls, link: str | None) -> str | None:
        if link is not None and not GPU_LINK.fullmatch(link):
            raise ValueError(
                f"{link!r} is not a GPU link nvidia-smi's topology gives (NVLink, PCIe <path>, "
                "NVLink+PCIe <path>)"
            )
        return link

    @model_validator(mode="after")
    def _facts_agree(self) -> FingerprintFacts:
        if self.devices_per_node != len(self.gpus):
            raise ValueError(
                f"devices_per_node is {self.devices_per_node} but {len(self.gpus)} GPU(s) are "
                "listed"
            )
        if self.gpu_link is not None and len(self.gpus) < 2:
            raise ValueError("gpu_link is set with fewer than two GPUs listed")
        cores, logical = self.physical_cores, self.logical_cpus
        if cores is not None and logical is not None and cores > logical:
            raise ValueError(f"physical_cores ({cores}) exceed logical_cpus ({logical})")
        expected = interconnect_line({"gpu_link": self.gpu_link, "network": self.network})
        if self.interconnect != expected:
            raise ValueError(
                f"interconnect is {self.interconnect!r} but the GPU link and network make "
                f"{expected!r}"
            )
        return self


def check_fingerprint(facts: Any) -> FingerprintFacts:
    """A header's ``fingerprint`` checked against :class:`FingerprintFacts`; a
    :class:`HardwareError` naming the first bad fact otherwise."""
    if not isinstance(facts, dict):
        raise HardwareError(
            f"header field 'fingerprint' must be a JSON object of facts, got "
            f"{type(facts).__name__}: {_FIX}"
        )
    try:
        return FingerprintFacts.model_validate(facts)
    except ValidationError as error:
        first = error.errors()[0]
        where = field_path(("fingerprint", *first.get("loc", ())))
        message = str(first.get("msg", "")).removeprefix("Value error, ")
        if first.get("type") == "extra_forbidden":
            message = "not a fact of the fingerprint schemas this kit reads"
        elif first.get("type") == "missing":
            message = "missing"
        shown = repr(first.get("input"))
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        plain = first.get("type") in ("missing", "model_type") or not first.get("loc")
        plain = plain or shown in message  # the message quotes the value already
        got = "" if plain else f" (got {shown})"
        raise HardwareError(f"header field '{where}': {message}{got}: {_FIX}") from None


# Devices a rank names that are no device of the node's fingerprint: the calibration workload
# runs on no device at all.
NO_DEVICE = ("none",)
# A GPU named by its handle where a framework could not read its name (TensorFlow's
# "/physical_device:GPU:0", OneFlow's "cuda:0" without nvidia-smi): one of the node's GPUs.
GPU_HANDLE = re.compile(r"(/physical_device:)?(gpu|cuda):\d+", re.IGNORECASE)


def _same_name(name: str) -> str:
    return " ".join(short_device_name(name).lower().split())


def run_devices(facts: Mapping[str, Any], devices: Any) -> str:
    """What a rank ran on, by the devices its header names, checked against its node's
    fingerprint (checked already): ``"gpu"`` when they are GPUs the fingerprint lists (a MIG
    slice by its GPU's name), ``"cpu"`` when they name the node's CPU or no device; a rank
    whose devices are neither is a :class:`HardwareError`. ``"node"`` when the header names no
    devices (nothing to tell the run from its node)."""
    if devices is None or devices == []:
        return "node"
    if not isinstance(devices, list) or not all(isinstance(d, str) for d in devices):
        raise HardwareError(
            f"header field 'devices' must be a list of device names, got {devices!r}"
        )
    cpu = _same_name(str(facts["cpu_model"]))
    gpus = [_same_name(str(gpu["name"])) for gpu in facts["gpus"]]
    kinds = set()
    for device in devices:
        name = _same_name(device)
        if name in NO_DEVICE or name == cpu:
            kinds.add("cpu")
        elif any(name == gpu or name.startswith(gpu + " ") for gpu in gpus) or (
            gpus and ("unknown gpu" in gpus or GPU_HANDLE.fullmatch(device.strip()))
        ):
            kinds.add("gpu")
        else:
            listed = ", ".join(repr(str(g["name"])) for g in facts["gpus"]) or "no GPU"
            raise HardwareError(
                f"header field 'devices' names {device!r}, which is neither its node's CPU "
                f"({facts['cpu_model']!r}) nor a GPU its fingerprint lists ({listed}): {_FIX}"
            )
    if len(kinds) > 1:
        raise HardwareError(
            f"header field 'devices' names CPU and GPU devices at once ({devices!r}): {_FIX}"
        )
    return kinds.pop()


def machine_label(facts: Mapping[str, Any], ran_on: str) -> str:
    """The label of the machine a repeat ran on, from its checked facts alone: the node's GPUs
    (``8x V100-SXM2-16GB 300W NVLink``) where the ranks used GPUs, else its CPU (``AMD EPYC 2c
    avx2``), whatever GPUs the node also has."""
    if ran_on == "cpu":
        return label_of({**facts, "gpus": []})
    return label_of(dict(facts))


def hardware_of(header: Mapping[str, Any]) -> Hardware:
    """The hardware a header (a rank's, or an upstream node's host facts) says it ran on.

    A header with a ``fingerprint`` gives its checked facts and the label computed from them
    (its own ``hardware`` label is not read); one with only a ``hardware`` is a declared
    hardware (imported logs: :func:`declared_hardware`); an older one is read from its
    ``devices``; one without either is :data:`UNKNOWN`. A malformed fingerprint, or devices it
    does not list, is a :class:`HardwareError` naming the field (the caller adds the file).
    """
    facts = header.get("fingerprint")
    if facts is not None:
        checked = check_fingerprint(facts).model_dump(by_alias=True)
        label = machine_label(checked, run_devices(checked, header.get("devices")))
        return Hardware(label=label, facts=facts, origin="fingerprint")
    declared = header.get("hardware")
    if declared is not None and declared != "":
        return declared_hardware(declared)
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


def declared_hardware(text: Any) -> Hardware:
    """What a person declared of logs the kit did not run (``import-logs --hardware``), as a
    header carries it: the text as they wrote it (beside published figures that name the same
    device in the same words), with the facts :func:`parse_hardware` reads from it, which make
    its key (two spellings of one device are one machine)."""
    if not isinstance(text, str):
        raise HardwareError(f"header field 'hardware' must be text, got {text!r}: {_FIX}")
    parsed = parse_hardware(text)
    return Hardware(label=text.strip(), facts=parsed.facts, origin="declared")


def display_labels(items: Iterable[Hardware]) -> dict[str, str]:
    """key -> the label a table shows: the label, with the key's digest added where two
    different keys share one label (say, two V100 nodes on different drivers)."""
    by_key: dict[str, Hardware] = {}
    for hardware in items:  # two spellings of one declared device: the first in sort order
        known = by_key.get(hardware.key)
        if known is None or hardware.label < known.label:
            by_key[hardware.key] = hardware
    labels: dict[str, list[str]] = {}
    for key, hardware in sorted(by_key.items()):
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
    try:
        check_free_text(text, "label")
    except ValueError as error:
        raise HardwareError(
            f"hardware {text[:60]!r}{'...' if len(text) > 60 else ''}: {error} (one line of at "
            f"most {_MAX_DECLARED} characters, {example})"
        ) from None
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


# CPU flags of native bf16 kernels: x86 AVX-512 BF16 or AMX, Arm's BF16 extension. Without one,
# bf16 autocast on a CPU is emulated (PyTorch measured 0.18-0.35 samples/s on ResNet-50 where
# FP32 gave 1.2-3.1 on a 2-core AVX2 EPYC): an AMP case costs hours instead of minutes.
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


def cpu_native_bf16(cpuinfo_text: str | None = None) -> bool:
    """Whether this CPU (or the given ``/proc/cpuinfo`` text) has native bf16 kernels."""
    if cpuinfo_text is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
                cpuinfo_text = cpuinfo.read()
        except OSError:
            return False  # no /proc (not Linux): assume the slow path, as on most laptops
    isa = parse_cpuinfo(cpuinfo_text)["isa"]
    return any(flag in isa for flag in NATIVE_BF16_FLAGS)
