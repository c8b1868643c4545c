"""The node's hardware fingerprint: what a benchmark ran on, as facts and one short label.

Taken on every node by the benchmark process (every rank's header) and by the node command of
an upstream source (its ``DLPERF-HOST`` line, ``driver.sources.base``), so that the driver never
sets two machines side by side as one: CPU model and the ISA features that change kernels
(AVX2 and AVX-512 bf16 EPYCs both call themselves "AMD EPYC"), cores, memory; per GPU its name,
memory, SM count, clock and power limits; driver and CUDA versions; devices per node; the
interconnect in one line where it can be read.

Deterministic: the same machine gives the same facts and label. Nothing volatile is taken (free
memory, current clocks, temperatures, PCI addresses, serial numbers, CPU affinity of the
process), and memory is rounded to whole GiB (two nodes of one model differ by the kernel's
reserve).

Self-contained, standard library only, and valid Python 3.6 (no ``from __future__`` import,
annotations as strings): upstream images run it from source (``driver.sources.base``) with
their own, sometimes old, Python. GPU facts come from NVML through ctypes where libnvidia-ml is
present, else from ``nvidia-smi --query-gpu``; the SM count from the CUDA driver (libcuda) in a
child process, so that the calling process never initialises CUDA itself.

One file of over 500 lines because it must be: upstream images run this module alone from
source, so every reader it needs (cpuinfo, meminfo, NVML through ctypes, nvidia-smi, the
topology, the network links) travels in it, with no import of the kit.
"""

import ctypes
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys

# Bumped when a fact is taken or written differently: a fingerprint's identity includes it.
FINGERPRINT_SCHEMA = 1
# CPU flags that change which kernels a framework runs (x86 /proc/cpuinfo "flags", Arm
# "Features"); every other flag is left out, so that a microcode or kernel update does not
# make a machine look new.
KERNEL_ISA = (
    "avx", "avx2", "fma", "f16c",
    "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16",
    "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
    "asimd", "asimddp", "sve", "sve2", "bf16", "i8mm", "sme",
)  # fmt: skip
# The one ISA feature a label names: the most capable present, in this order.
LABEL_ISA = ("amx_bf16", "avx512_bf16", "avx512f", "avx2", "avx", "sme", "sve2", "sve", "asimd")
# nvidia-smi --query-gpu fields, in the order GPU_FIELDS names them (``nvidia-smi
# --help-query-gpu``); --format=csv,noheader,nounits prints one line per GPU, "[N/A]" or
# "[Not Supported]" where a GPU has no value.
SMI_QUERY = (
    "name",
    "memory.total",
    "clocks.max.sm",
    "clocks.max.memory",
    "power.limit",
    "power.default_limit",
    "pcie.link.gen.max",
    "pcie.link.width.max",
    "driver_version",
)
GPU_FIELDS = (
    "name",
    "memory_mib",
    "max_sm_clock_mhz",
    "max_memory_clock_mhz",
    "power_limit_w",
    "default_power_limit_w",
    "pcie_gen_max",
    "pcie_width_max",
)
# nvidia-smi topo -m: GPU-to-GPU paths, from the nearest to the farthest (its legend).
PCIE_PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TIMEOUT_S = 60
# The CUDA driver's SM count per device name, printed as JSON by a child process (see
# sm_counts): the calling process never initialises CUDA (a framework may fork after it).
_SM_PROGRAM = """
import ctypes, json
counts = {}
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError:
    cuda = None
number = ctypes.c_int(0)
if cuda is not None and cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(number)) == 0:
    name, value, device = ctypes.create_string_buffer(256), ctypes.c_int(0), ctypes.c_int(0)
    for index in range(number.value):
        if (
            cuda.cuDeviceGet(ctypes.byref(device), index) == 0
            and cuda.cuDeviceGetName(name, 256, device) == 0
            # 16: CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
            and cuda.cuDeviceGetAttribute(ctypes.byref(value), 16, device) == 0
        ):
            counts[name.value.decode()] = value.value
print(json.dumps(counts))
"""


# --- parsers of what the node prints (pure: tested on recorded samples) --------------------------


def parse_cpuinfo(text):  # type: (str) -> dict
    """CPU facts from /proc/cpuinfo: model, vendor, family and model number, the
    kernel-changing ISA features, sockets, physical cores and logical CPUs."""
    model = vendor = family = number = ""
    flags = set()  # type: set
    cores = set()  # type: set
    sockets = set()  # type: set
    logical = 0
    physical = "0"
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "processor":
            logical += 1
        elif key == "model name" and not model:
            model = value
        elif key == "vendor_id" and not vendor:
            vendor = value
        elif key == "cpu family" and not family:
            family = value
        elif key == "model" and not number:
            number = value
        elif key in ("flags", "features"):
            flags.update(value.split())
        elif key == "physical id":
            physical = value
            sockets.add(value)
        elif key == "core id":
            cores.add((physical, value))
    if not vendor:  # Arm: "CPU implementer" / "CPU part" instead of a vendor and a model name
        vendor = _first_value(text, "cpu implementer")
        number = number or _first_value(text, "cpu part")
        if not model and vendor:
            model = f"Arm {vendor}:{number}"  # implementer:part
    return {
        "cpu_model": model or "unknown CPU",
        "cpu_vendor": vendor or None,
        "cpu_family": family or None,
        "cpu_model_number": number or None,
        "isa": sorted(flag for flag in flags if flag in KERNEL_ISA),
        "sockets": len(sockets) or 1,
        "physical_cores": len(cores) or logical or None,
        "logical_cpus": logical or None,
    }


def _first_value(text, wanted):  # type: (str, str) -> str
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == wanted:
            return value.strip()
    return ""


def parse_meminfo(text):  # type: (str) -> object
    """Total memory in whole GiB (rounded) from /proc/meminfo; None when it is not there."""
    match = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(round(int(match.group(1)) / 2.0**20)) if match else None


def _number(text):  # type: (str) -> object
    """A value of nvidia-smi's csv (nounits): an int or a float; None for [N/A] and the like."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value == int(value) else round(value, 1)


def parse_smi_query(text):  # type: (str) -> tuple
    """(GPUs, driver version) from ``nvidia-smi --query-gpu=<SMI_QUERY>
    --format=csv,noheader,nounits``: one dict of GPU_FIELDS per line."""
    gpus = []
    drivers = set()
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(SMI_QUERY):
            raise ValueError(
                f"nvidia-smi printed {len(cells)} fields where {len(SMI_QUERY)} were asked: "
                f"{line!r}"
            )
        gpu = {"name": cells[0]}
        for index, field in enumerate(GPU_FIELDS[1:], start=1):
            gpu[field] = _number(cells[index])
        for field in ("power_limit_w", "default_power_limit_w"):
            if gpu[field] is not None:
                gpu[field] = float(gpu[field])
        gpus.append(gpu)
        if cells[-1] and not cells[-1].startswith("["):
            drivers.add(cells[-1])
    return gpus, (sorted(drivers)[0] if len(drivers) == 1 else None)


def parse_smi_cuda_version(text):  # type: (str) -> object
    """The CUDA version the driver supports, from the banner of plain ``nvidia-smi``
    (``| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |``)."""
    match = re.search(r"CUDA Version:\s*([0-9]+\.[0-9]+)", text)
    return match.group(1) if match else None


def parse_topology(text):  # type: (str) -> object
    """The GPUs' interconnect in one word or two, from ``nvidia-smi topo -m``: "NVLink" when
    every GPU pair has NVLinks, "PCIe <farthest path>" when none does, "NVLink+PCIe <farthest
    path>" when some do; None with fewer than two GPUs or no matrix."""
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    header = next((line.split() for line in lines if re.match(r"^\s+GPU0\b", line)), None)
    if header is None:
        return None
    gpu_columns = [i for i, name in enumerate(header) if re.fullmatch(r"GPU\d+", name)]
    paths = set()
    for line in lines:
        cells = line.split()
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            continue
        row = cells[1:]
        for column in gpu_columns:
            if column < len(row) and header[column] != cells[0]:
                paths.add(row[column])
    if not paths:
        return None
    pcie = [path for path in PCIE_PATHS if path in paths]
    farthest = pcie[-1] if pcie else None
    nvlink = any(re.fullmatch(r"NV\d+", path) for path in paths)
    if nvlink and farthest is None:
        return "NVLink"
    if nvlink:
        return "NVLink+PCIe " + farthest
    return "PCIe " + farthest if farthest else None


def _speed_text(mbits):  # type: (int) -> str
    return f"{mbits / 1000.0:g}Gb/s" if mbits >= 1000 else f"{mbits}Mb/s"


def network_line(ethernet_mbits, infiniband_gbits):  # type: (list, list) -> object
    """The node's links in one line, e.g. ``eth 25Gb/s x2, ib 100Gb/s x4``; None without any."""
    parts = []
    for kind, speeds in (
        ("eth", [_speed_text(s) for s in ethernet_mbits]),
        ("ib", [f"{s:g}Gb/s" for s in infiniband_gbits]),
    ):
        for speed in sorted(set(speeds), key=speeds.index):
            count = speeds.count(speed)
            parts.append(f"{kind} {speed}" + (f" x{count}" if count > 1 else ""))
    return ", ".join(parts) or None


# --- readers of this node ------------------------------------------------------------------------


def _read(path):  # type: (str) -> str
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def _run(argv, env=None):  # type: (list, object) -> str
    try:
        done = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            universal_newlines=True,  # noqa: UP021 (``text`` is Python 3.7+)
            timeout=_TIMEOUT_S,
            env=env,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def ethernet_speeds(root="/sys/class/net"):  # type: (str) -> list
    """Link speeds (Mb/s) of the physical Ethernet interfaces that report one: virtual ones
    (bridges, veths, loopback) have no ``device`` link, IPoIB is not type 1 (Ethernet)."""
    speeds = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return speeds
    for name in names:
        folder = os.path.join(root, name)
        if not os.path.exists(os.path.join(folder, "device")):
            continue
        if _read(os.path.join(folder, "type")).strip() != "1":
            continue
        speed = _read(os.path.join(folder, "speed")).strip()
        if speed.isdigit() and int(speed) > 0:
            speeds.append(int(speed))
    return sorted(speeds, reverse=True)


def infiniband_rates(root="/sys/class/infiniband"):  # type: (str) -> list
    """Rates (Gb/s) of the active InfiniBand/RoCE ports (``ports/N/rate``: "100 Gb/sec ...")."""
    rates = []
    try:
        devices = sorted(os.listdir(root))
    except OSError:
        return rates
    for device in devices:
        ports = os.path.join(root, device, "ports")
        try:
            numbers = sorted(os.listdir(ports))
        except OSError:
            continue
        for number in numbers:
            if "ACTIVE" not in _read(os.path.join(ports, number, "state")):
                continue
            match = re.match(r"\s*([0-9.]+)\s*Gb/sec", _read(os.path.join(ports, number, "rate")))
            if match:
                rate = float(match.group(1))
                rates.append(int(rate) if rate == int(rate) else rate)
    return sorted(rates, reverse=True)


class _NvmlMemory(ctypes.Structure):
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


def _nvml_library():  # type: () -> object
    for name in ("libnvidia-ml.so.1", "libnvidia-ml.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _nvml_call(nvml, function, *args):  # type: (object, str, object) -> int
    """NVML's status of ``function(*args)`` (0: success); -1 where this NVML lacks it."""
    try:
        return getattr(nvml, function)(*args)
    except AttributeError:  # an older libnvidia-ml without the symbol
        return -1


def nvml_gpus():  # type: () -> object
    """(GPUs, driver version, CUDA version) through NVML; None where NVML cannot be used."""
    nvml = _nvml_library()
    if nvml is None or _nvml_call(nvml, "nvmlInit_v2") != 0:
        return None
    try:
        count = ctypes.c_uint(0)
        if _nvml_call(nvml, "nvmlDeviceGetCount_v2", ctypes.byref(count)) != 0:
            return None
        text = ctypes.create_string_buffer(96)
        driver = None
        if _nvml_call(nvml, "nvmlSystemGetDriverVersion", text, 96) == 0:
            driver = text.value.decode()
        version = ctypes.c_int(0)
        cuda = None
        if _nvml_call(nvml, "nvmlSystemGetCudaDriverVersion_v2", ctypes.byref(version)) == 0:
            cuda = f"{version.value // 1000}.{version.value % 1000 // 10}"
        gpus = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            if _nvml_call(nvml, "nvmlDeviceGetHandleByIndex_v2", index, ctypes.byref(handle)):
                return None
            gpus.append(_nvml_gpu(nvml, handle))
        return gpus, driver, cuda
    finally:
        _nvml_call(nvml, "nvmlShutdown")


def _nvml_gpu(nvml, handle):  # type: (object, object) -> dict
    def unsigned(function, *args):  # type: (str, object) -> object
        value = ctypes.c_uint(0)
        status = _nvml_call(nvml, function, handle, *(args + (ctypes.byref(value),)))
        return value.value if status == 0 else None

    def watts(function):  # type: (str) -> object
        milliwatts = unsigned(function)
        return round(milliwatts / 1000.0, 1) if milliwatts is not None else None

    text = ctypes.create_string_buffer(96)
    name = "unknown GPU"
    if _nvml_call(nvml, "nvmlDeviceGetName", handle, text, 96) == 0:
        name = text.value.decode()
    memory = _NvmlMemory()
    memory_mib = None
    if _nvml_call(nvml, "nvmlDeviceGetMemoryInfo", handle, ctypes.byref(memory)) == 0:
        memory_mib = memory.total // 2**20
    return {
        "name": name,
        "memory_mib": memory_mib,
        "max_sm_clock_mhz": unsigned("nvmlDeviceGetMaxClockInfo", 1),  # NVML_CLOCK_SM
        "max_memory_clock_mhz": unsigned("nvmlDeviceGetMaxClockInfo", 2),  # NVML_CLOCK_MEM
        "power_limit_w": watts("nvmlDeviceGetPowerManagementLimit"),
        "default_power_limit_w": watts("nvmlDeviceGetPowerManagementDefaultLimit"),
        "pcie_gen_max": unsigned("nvmlDeviceGetMaxPcieLinkGeneration"),
        "pcie_width_max": unsigned("nvmlDeviceGetMaxPcieLinkWidth"),
    }


def smi_gpus(smi):  # type: (str) -> object
    """(GPUs, driver version, CUDA version) from nvidia-smi; None when it printed nothing."""
    text = _run([smi, "--query-gpu=" + ",".join(SMI_QUERY), "--format=csv,noheader,nounits"])
    if not text.strip():
        return None
    try:
        gpus, driver = parse_smi_query(text)
    except ValueError:
        return None
    return gpus, driver, parse_smi_cuda_version(_run([smi]))


def sm_counts():  # type: () -> dict
    """SM count per GPU name, from the CUDA driver in a child process ({} without one).
    CUDA_VISIBLE_DEVICES is left out of its environment: every GPU of the node counts, as in
    NVML, whatever devices the calling rank was given."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    try:
        data = json.loads(_run([sys.executable, "-c", _SM_PROGRAM], env=env) or "{}")
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, int)}


def gpu_facts():  # type: () -> dict
    """The node's GPUs (NVML, else nvidia-smi), their driver and CUDA versions and topology."""
    smi = shutil.which("nvidia-smi")
    found = nvml_gpus()
    if found is None and smi:
        found = smi_gpus(smi)
    gpus, driver, cuda = found if found else ([], None, None)
    if gpus and cuda is None and smi:  # an NVML older than its CUDA query (before CUDA 10.1)
        cuda = parse_smi_cuda_version(_run([smi]))
    if gpus:
        counts = sm_counts()
        for gpu in gpus:
            gpu["sm_count"] = counts.get(gpu["name"])
    link = parse_topology(_run([smi, "topo", "-m"])) if smi and len(gpus) > 1 else None
    return {"gpus": gpus, "gpu_driver": driver, "cuda_driver": cuda, "gpu_link": link}


# --- the fingerprint and its label ---------------------------------------------------------------


def short_cpu_name(model):  # type: (str) -> str
    """A CPU model without trademarks, clock and filler words: ``Intel(R) Xeon(R) Gold 6148 CPU
    @ 2.40GHz`` -> ``Intel Xeon Gold 6148``, ``AMD EPYC 7763 64-Core Processor`` -> ``AMD EPYC
    7763``."""
    name = re.sub(r"\((R|TM|tm|r)\)", "", model)
    name = re.sub(r"@\s*[0-9.]+\s*[GM]Hz", "", name)
    name = re.sub(r"\b\d+-Core\b|\bCPU\b|\bProcessor\b", "", name)
    return " ".join(name.split()) or model.strip()


def short_gpu_name(name):  # type: (str) -> str
    """A GPU name without the vendor's and the line's prefix: ``Tesla V100-SXM2-16GB`` ->
    ``V100-SXM2-16GB``, ``NVIDIA A100-SXM4-80GB`` -> ``A100-SXM4-80GB``."""
    words = name.split()
    while len(words) > 1 and words[0].lower() in ("nvidia", "tesla"):
        words = words[1:]
    return " ".join(words)


def label_of(facts):  # type: (dict) -> str
    """One short stable label: ``8x V100-SXM2-16GB 300W NVLink`` on a GPU node (mixed GPUs:
    groups joined by " + "), ``AMD EPYC 2c avx2`` on a CPU node."""
    gpus = facts.get("gpus") or []
    if gpus:
        groups = []  # type: list
        for gpu in gpus:
            power = gpu.get("power_limit_w")
            group = short_gpu_name(str(gpu.get("name"))) + (
                f" {power:g}W" if power is not None else ""
            )
            if groups and groups[-1][1] == group:
                groups[-1][0] += 1
            else:
                groups.append([1, group])
        label = " + ".join(f"{count}x {group}" for count, group in groups)
        link = str(facts.get("gpu_link") or "")  # the label says which; the facts say how far
        return label + (" NVLink" if "NVLink" in link else " PCIe" if link else "")
    cores = facts.get("physical_cores")
    isa = [flag for flag in LABEL_ISA if flag in (facts.get("isa") or [])]
    words = [short_cpu_name(str(facts.get("cpu_model", "unknown CPU")))]
    if cores:
        words.append(f"{cores}c")
    return " ".join(words + isa[:1])


def interconnect_line(facts):  # type: (dict) -> object
    """The GPUs' link and the network in one line, e.g. ``NVLink; ib 100Gb/s x4``."""
    parts = [part for part in (facts.get("gpu_link"), facts.get("network")) if part]
    return "; ".join(parts) or None


def fingerprint(cpuinfo="/proc/cpuinfo", meminfo="/proc/meminfo"):  # type: (str, str) -> dict
    """Every fact of this node (see the module docstring), a JSON-ready dict."""
    facts = {"schema": FINGERPRINT_SCHEMA, "arch": platform.machine() or None}
    facts.update(parse_cpuinfo(_read(cpuinfo)))
    facts["memory_gib"] = parse_meminfo(_read(meminfo))
    facts.update(gpu_facts())
    facts["devices_per_node"] = len(facts["gpus"])
    facts["network"] = network_line(ethernet_speeds(), infiniband_rates())
    facts["interconnect"] = interconnect_line(facts)
    return facts


def take():  # type: () -> dict
    """What a header carries: ``fingerprint`` (the facts) and ``hardware`` (their label)."""
    facts = fingerprint()
    return {"fingerprint": facts, "hardware": label_of(facts)}


def host_facts():  # type: () -> dict
    """An upstream node's host line: hostname, devices (GPU names, else the CPU model), and the
    fingerprint with its label."""
    taken = take()
    facts = taken["fingerprint"]
    gpus = [gpu["name"] for gpu in facts["gpus"]]
    # The devices are the case's: the node command narrows CUDA_VISIBLE_DEVICES to them (indexes
    # in PCI order, as the fingerprint lists the node's GPUs); the fingerprint stays the node's.
    ids = [i.strip() for i in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if i.strip()]
    if ids and gpus and all(i.isdigit() and int(i) < len(gpus) for i in ids):
        gpus = [gpus[int(i)] for i in ids]
    devices = gpus or [facts["cpu_model"]]
    return dict(taken, hostname=socket.gethostname(), devices=devices)


def cpu_model_name():  # type: () -> str
    return str(parse_cpuinfo(_read("/proc/cpuinfo"))["cpu_model"])


def physical_cores():  # type: () -> object
    """Physical cores of this node (hyper-threads counted once); None when unreadable."""
    return parse_cpuinfo(_read("/proc/cpuinfo"))["physical_cores"]


if __name__ == "__main__":  # python -m driver.bench.fingerprint: this node's, for a person
    print(json.dumps(take(), indent=1, sort_keys=True))
