"""driver.bench.fingerprint: the node's hardware facts and label, from what nodes print.

The parsers read recorded or documented samples (tests/fixtures/fingerprint/README.md); the
NVML and CUDA paths run for real through ctypes against compiled stand-ins of the two driver
libraries, beside a stand-in ``nvidia-smi`` printing the samples of the same machine.
"""

from __future__ import annotations

import ast
import base64
import ctypes.util
import json
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from driver.bench import fingerprint, host
from driver.bench.fingerprint import (
    label_of,
    network_line,
    parse_cpuinfo,
    parse_meminfo,
    parse_smi_cuda_version,
    parse_smi_query,
    parse_topology,
)
from driver.model.hardware import check_fingerprint, machine_label
from driver.sources.base import HOST_PROGRAM

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "tests" / "fixtures" / "fingerprint"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def cpu_facts(name: str) -> dict:
    return parse_cpuinfo(sample(name))


# --- CPU --------------------------------------------------------------------------------------


def test_the_two_epyc_machines_share_a_name_and_differ_in_their_facts_and_labels() -> None:
    old, new = cpu_facts("cpuinfo-epyc-avx2.txt"), cpu_facts("cpuinfo-epyc-avx512bf16.txt")
    assert old["cpu_model"] == new["cpu_model"] == "AMD EPYC"  # what the old headers recorded
    assert old["isa"] == ["avx", "avx2", "f16c", "fma"]
    assert {"avx512f", "avx512_bf16", "avx512_vnni"} <= set(new["isa"])
    assert (old["physical_cores"], old["logical_cpus"], old["sockets"]) == (2, 2, 1)
    assert label_of(old) == "AMD EPYC 2c avx2"
    assert label_of(new) == "AMD EPYC 2c avx512_bf16"


def test_volatile_lines_change_nothing() -> None:
    # cpu MHz and bogomips move between reads; the facts must not.
    assert cpu_facts("cpuinfo-epyc-avx2.txt") == cpu_facts("cpuinfo-epyc-avx2-later.txt")


def test_hyper_threads_count_once_and_the_label_names_the_best_isa() -> None:
    facts = cpu_facts("cpuinfo-xeon-2s-ht.txt")
    assert (facts["sockets"], facts["physical_cores"], facts["logical_cpus"]) == (2, 4, 8)
    assert {"amx_bf16", "amx_int8", "amx_tile", "avx512_fp16"} <= set(facts["isa"])
    assert "sse2" not in facts["isa"] and "ht" not in facts["isa"]  # kernel-neutral flags
    assert label_of(facts) == "Intel Xeon Platinum 8480+ 4c amx_bf16"


def test_an_arm_cpu_without_a_model_name_is_named_by_its_ids() -> None:
    facts = cpu_facts("cpuinfo-neoverse-v2.txt")
    assert facts["cpu_model"] == "Arm 0x41:0xd4f" and facts["cpu_vendor"] == "0x41"
    assert {"asimd", "sve", "sve2", "bf16", "i8mm"} <= set(facts["isa"])
    assert label_of(facts) == "Arm 0x41:0xd4f 2c sve2"


def test_memory_is_whole_gib() -> None:
    assert parse_meminfo("MemTotal:       24683656 kB\nMemFree: 1 kB\n") == 24
    assert parse_meminfo("MemTotal:       24683000 kB\n") == 24  # a kernel's reserve apart
    assert parse_meminfo("MemFree: 1 kB\n") is None


def test_short_cpu_names() -> None:
    assert fingerprint.short_cpu_name("Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz") == (
        "Intel Xeon Gold 6148"
    )
    assert fingerprint.short_cpu_name("AMD EPYC 7763 64-Core Processor") == "AMD EPYC 7763"


# --- GPU --------------------------------------------------------------------------------------


def test_smi_query_gives_every_gpu_and_the_driver() -> None:
    gpus, driver = parse_smi_query(sample("smi-query-dgx1.csv"))
    assert driver == "450.80.02" and len(gpus) == 8
    assert gpus[0] == {
        "name": "Tesla V100-SXM2-16GB",
        "memory_mib": 16160,
        "max_sm_clock_mhz": 1530,
        "max_memory_clock_mhz": 877,
        "power_limit_w": 300.0,
        "default_power_limit_w": 300.0,
        "pcie_gen_max": 3,
        "pcie_width_max": 16,
    }
    (gpu,), driver = parse_smi_query(sample("smi-query-na.csv"))
    assert gpu["power_limit_w"] is None and gpu["default_power_limit_w"] is None
    assert gpu["memory_mib"] == 24576 and driver == "535.104.05"


def test_smi_query_of_another_shape_is_refused() -> None:
    with pytest.raises(ValueError, match="printed 3 fields where 9 were asked"):
        parse_smi_query("Tesla V100-SXM2-16GB, 16160, 1530\n")


def test_cuda_version_from_the_banner() -> None:
    assert parse_smi_cuda_version(sample("smi-banner-450.txt")) == "11.0"
    assert parse_smi_cuda_version(sample("smi-banner-535.txt")) == "12.2"
    assert parse_smi_cuda_version("no banner") is None


@pytest.mark.parametrize(
    ("name", "link"),
    [
        ("topo-dgx1.txt", "NVLink+PCIe SYS"),  # hybrid cube mesh: some pairs over SYS
        ("topo-dgx-a100.txt", "NVLink"),  # NVSwitch, ANSI-underlined header
        ("topo-pcie-4gpu.txt", "PCIe SYS"),
        ("topo-1gpu.txt", None),
    ],
)
def test_topology_in_one_line(name: str, link: str | None) -> None:
    assert parse_topology(sample(name)) == link
    assert parse_topology("") is None


def dgx1_facts(query: str = "smi-query-dgx1.csv", topo: str = "topo-dgx1.txt") -> dict:
    gpus, driver = parse_smi_query(sample(query))
    return {"gpus": gpus, "gpu_driver": driver, "gpu_link": parse_topology(sample(topo))}


def test_gpu_labels_tell_power_caps_and_links_apart() -> None:
    assert label_of(dgx1_facts()) == "8x V100-SXM2-16GB 300W NVLink"
    assert label_of(dgx1_facts("smi-query-dgx1-250w.csv")) == "8x V100-SXM2-16GB 250W NVLink"
    assert label_of(dgx1_facts(topo="topo-pcie-4gpu.txt")) == "8x V100-SXM2-16GB 300W PCIe"
    # A driver change keeps the label and changes the facts (the driver side's key).
    assert label_of(dgx1_facts("smi-query-dgx1-driver535.csv")) == label_of(dgx1_facts())
    assert dgx1_facts("smi-query-dgx1-driver535.csv") != dgx1_facts()
    mixed = dgx1_facts()
    mixed["gpus"] = mixed["gpus"][:2] + [dict(mixed["gpus"][0], name="NVIDIA A100-SXM4-40GB")]
    assert label_of(mixed) == "2x V100-SXM2-16GB 300W + 1x A100-SXM4-40GB 300W NVLink"


# --- network ----------------------------------------------------------------------------------


def make_net(root: Path, name: str, *, kind: str = "1", speed: str, physical: bool) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "type").write_text(kind + "\n")
    (folder / "speed").write_text(speed + "\n")
    if physical:
        (folder / "device").mkdir()


def test_network_speeds_from_sysfs(tmp_path: Path) -> None:
    net, ib = tmp_path / "net", tmp_path / "infiniband"
    make_net(net, "eth0", speed="25000", physical=True)
    make_net(net, "eth1", speed="25000", physical=True)
    make_net(net, "eno1", speed="1000", physical=True)
    make_net(net, "eth2", speed="-1", physical=True)  # down
    make_net(net, "docker0", speed="10000", physical=False)  # a bridge
    make_net(net, "ib0", kind="32", speed="100000", physical=True)  # IPoIB: counted as ib
    for device, state in (("mlx5_0", "4: ACTIVE"), ("mlx5_1", "4: ACTIVE"), ("mlx5_2", "1: DOWN")):
        port = ib / device / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text(state + "\n")
        (port / "rate").write_text("100 Gb/sec (4X EDR)\n")
    ethernet, infiniband = fingerprint.ethernet_speeds(str(net)), fingerprint.infiniband_rates(
        str(ib)
    )
    assert ethernet == [25000, 25000, 1000] and infiniband == [100, 100]
    assert network_line(ethernet, infiniband) == "eth 25Gb/s x2, eth 1Gb/s, ib 100Gb/s x2"
    assert network_line([100], []) == "eth 100Mb/s"
    assert network_line([], []) is None
    assert fingerprint.ethernet_speeds(str(tmp_path / "none")) == []


# --- this node, for real ----------------------------------------------------------------------


def test_this_node_gives_the_same_fingerprint_twice_and_agrees_with_host() -> None:
    first, second = fingerprint.take(), fingerprint.take()
    assert first == second
    facts = first["fingerprint"]
    assert first["hardware"] == label_of(facts)
    assert facts["schema"] == fingerprint.FINGERPRINT_SCHEMA
    assert facts["physical_cores"] == host.physical_cores()
    assert facts["cpu_model"] == host.cpu_model_name()
    flags = set(Path("/proc/cpuinfo").read_text().split())
    assert set(facts["isa"]) == flags & set(fingerprint.KERNEL_ISA)
    json.dumps(facts, allow_nan=False)  # JSON-ready, nothing a header could not hold
    check_fingerprint(facts)  # within the schema the door checks every header's against


def test_the_module_runs_on_an_old_python_from_its_source_alone() -> None:
    source = Path(fingerprint.__file__).read_text()
    tree = ast.parse(source, feature_version=(3, 6))  # upstream images' oldest Python
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)
    assert "__future__" not in imported  # annotations would not load on Python 3.6
    # The upstream node's program is this file, byte for byte.
    packed = HOST_PROGRAM.split("b64decode('")[1].split("'")[0]
    assert zlib.decompress(base64.b64decode(packed)) == Path(fingerprint.__file__).read_bytes()
    assert "\n" not in HOST_PROGRAM


# --- NVML, CUDA and nvidia-smi stand-ins: the same machine read every way -------------------------

FAKE_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=*) cat "{samples}/smi-query-dgx1.csv" ;;
  topo) cat "{samples}/topo-dgx1.txt" ;;
  "") cat "{samples}/smi-banner-450.txt" ;;
  *) exit 6 ;;
esac
"""


def real_nvidia_driver() -> bool:
    """The stand-ins replace libraries this machine lacks; a real driver would answer too."""
    return bool(ctypes.util.find_library("nvidia-ml") or shutil.which("nvidia-smi"))


@pytest.fixture(scope="module")
def driver_stand_ins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if real_nvidia_driver():
        pytest.skip("an NVIDIA driver is installed: the stand-ins could not be told from it")
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the NVML and CUDA stand-ins")
    root = tmp_path_factory.mktemp("drivers")
    folders = {name: root / name for name in ("nvml", "old-nvml", "cuda", "bin")}
    for folder in folders.values():
        folder.mkdir()
    builds = [
        ("fake_nvml.c", folders["nvml"] / "libnvidia-ml.so.1", []),
        ("fake_nvml.c", folders["old-nvml"] / "libnvidia-ml.so.1", ["-DOLD_NVML"]),
        ("fake_cuda.c", folders["cuda"] / "libcuda.so.1", []),
    ]
    for source, target, flags in builds:
        subprocess.run(
            [compiler, "-shared", "-fPIC", *flags, "-o", str(target), str(SAMPLES / source)],
            check=True,
        )
    smi = folders["bin"] / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(samples=SAMPLES))
    smi.chmod(0o755)
    return folders


def node_fingerprint(libraries: list[Path], path: list[Path], **env: str) -> dict:
    """``python -m driver.bench.fingerprint`` in a process whose loader sees ``libraries``
    (LD_LIBRARY_PATH is read when a process starts) and whose PATH starts with ``path``."""
    environ = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH",)}
    environ["LD_LIBRARY_PATH"] = ":".join(str(p) for p in libraries)
    environ["PATH"] = os.pathsep.join([*(str(p) for p in path), environ.get("PATH", "")])
    environ.update(env)
    done = subprocess.run(
        [sys.executable, "-m", "driver.bench.fingerprint"],
        cwd=REPO_ROOT,
        env=environ,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def test_nvml_and_nvidia_smi_read_the_same_machine_alike(driver_stand_ins: dict) -> None:
    cuda, bin_ = driver_stand_ins["cuda"], driver_stand_ins["bin"]
    through_nvml = node_fingerprint([driver_stand_ins["nvml"], cuda], [bin_])
    through_smi = node_fingerprint([cuda], [bin_])  # no libnvidia-ml: nvidia-smi's csv
    assert through_nvml == through_smi
    facts = through_nvml["fingerprint"]
    assert through_nvml["hardware"] == "8x V100-SXM2-16GB 300W NVLink"
    assert (facts["gpu_driver"], facts["cuda_driver"]) == ("450.80.02", "11.0")
    assert facts["devices_per_node"] == 8 and facts["gpu_link"] == "NVLink+PCIe SYS"
    assert facts["interconnect"] == "NVLink+PCIe SYS" or facts["interconnect"].startswith(
        "NVLink+PCIe SYS; "
    )  # this node's network, where it has a physical link with a speed
    assert {g["sm_count"] for g in facts["gpus"]} == {80}  # from the CUDA driver
    assert {g["memory_mib"] for g in facts["gpus"]} == {16160}
    checked = check_fingerprint(facts).model_dump(by_alias=True)  # the door's schema
    assert machine_label(checked, "gpu") == through_nvml["hardware"]  # the kit's own label
    assert machine_label(checked, "cpu") == label_of({**facts, "gpus": []})  # a CPU run there


def test_a_rank_given_no_gpu_still_counts_every_sm(driver_stand_ins: dict) -> None:
    libraries = [driver_stand_ins["nvml"], driver_stand_ins["cuda"]]
    everyone = node_fingerprint(libraries, [driver_stand_ins["bin"]])
    hidden = node_fingerprint(libraries, [driver_stand_ins["bin"]], CUDA_VISIBLE_DEVICES="")
    assert hidden == everyone  # one node, one fingerprint, whatever a rank was given


def test_an_old_nvml_takes_the_cuda_version_from_nvidia_smi(driver_stand_ins: dict) -> None:
    libraries = [driver_stand_ins["old-nvml"], driver_stand_ins["cuda"]]
    old = node_fingerprint(libraries, [driver_stand_ins["bin"]])
    assert old["fingerprint"]["cuda_driver"] == "11.0"
    without_smi = node_fingerprint(libraries, [])
    assert without_smi["fingerprint"]["cuda_driver"] is None  # nowhere to read it from
    assert without_smi["fingerprint"]["gpu_link"] is None  # nor the topology
    assert without_smi["hardware"] == "8x V100-SXM2-16GB 300W"


@pytest.mark.skipif(real_nvidia_driver(), reason="an NVIDIA driver is installed here")
def test_without_gpu_libraries_or_nvidia_smi_the_node_is_its_cpu() -> None:
    facts = node_fingerprint([], [])["fingerprint"]
    assert facts["gpus"] == [] and facts["devices_per_node"] == 0
    assert facts["gpu_driver"] is None and facts["cuda_driver"] is None
