"""driver.model.hardware: the hardware a header says it ran on, old headers and declared ones."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest

from driver.bench.fingerprint import label_of, parse_cpuinfo, parse_smi_query, parse_topology
from driver.model.hardware import (
    UNKNOWN,
    Hardware,
    HardwareError,
    check_fingerprint,
    cpu_native_bf16,
    display_labels,
    hardware_of,
    parse_hardware,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "tests" / "fixtures" / "fingerprint"


def cpu_facts(cpuinfo: str, **more: Any) -> dict[str, Any]:
    """Every fact ``driver.bench.fingerprint.fingerprint`` takes on a CPU node of ``cpuinfo``."""
    return {
        "schema": 1, "arch": "x86_64", **parse_cpuinfo((SAMPLES / cpuinfo).read_text()),
        "memory_gib": 24, "gpus": [], "gpu_driver": None, "cuda_driver": None, "gpu_link": None,
        "devices_per_node": 0, "network": None, "interconnect": None, **more,
    }  # fmt: skip


def node(cpuinfo: str, **more: Any) -> dict[str, Any]:
    """A header as a rank of the kit writes it on the node of ``cpuinfo`` (a sample)."""
    facts = cpu_facts(cpuinfo, **more)
    return {"devices": [facts["cpu_model"]], "fingerprint": facts, "hardware": label_of(facts)}


def test_a_fingerprinted_header_gives_its_label_and_a_key_of_its_facts() -> None:
    header = node("cpuinfo-epyc-avx2.txt")
    hardware = hardware_of(header)
    assert hardware.origin == "fingerprint" and hardware.label == "AMD EPYC 2c avx2"
    assert hardware.facts == header["fingerprint"] and hardware.device_model == "AMD EPYC"
    reordered = dict(header, fingerprint=dict(reversed(list(header["fingerprint"].items()))))
    assert hardware_of(reordered).key == hardware.key  # the facts, not their order
    assert hardware_of(json.loads(json.dumps(header))).key == hardware.key  # through a log


def test_two_nodes_that_differ_in_one_isa_flag_are_two_machines() -> None:
    old, new = node("cpuinfo-epyc-avx2.txt"), node("cpuinfo-epyc-avx512bf16.txt")
    assert old["devices"] == new["devices"] == ["AMD EPYC"]  # what the old headers could say
    found = [hardware_of(old), hardware_of(new)]
    assert [h.label for h in found] == ["AMD EPYC 2c avx2", "AMD EPYC 2c avx512_bf16"]
    assert found[0].key != found[1].key
    # Facts the label does not show still make another machine.
    more_memory = node("cpuinfo-epyc-avx2.txt", memory_gib=48)
    assert hardware_of(more_memory).label == found[0].label
    assert hardware_of(more_memory).key != found[0].key


def test_display_labels_set_apart_machines_that_share_a_label() -> None:
    gpus, driver = parse_smi_query((SAMPLES / "smi-query-dgx1.csv").read_text())
    link = parse_topology((SAMPLES / "topo-dgx1.txt").read_text())
    facts = {"schema": 1, "gpus": gpus, "gpu_driver": driver, "gpu_link": link}
    v450 = Hardware(label=label_of(facts), facts=facts, origin="fingerprint")
    v535 = Hardware(
        label=label_of(facts), facts=dict(facts, gpu_driver="535.104.05"), origin="fingerprint"
    )
    epyc = hardware_of(node("cpuinfo-epyc-avx2.txt"))
    shown = display_labels([v450, v535, epyc, v450])
    assert shown[epyc.key] == "AMD EPYC 2c avx2"
    assert shown[v450.key] != shown[v535.key]
    assert shown[v450.key].startswith("8x V100-SXM2-16GB 300W NVLink [")
    assert v450.device_model == "V100-SXM2-16GB"


def test_older_headers_are_known_by_their_device_names() -> None:
    old = {"devices": ["AMD EPYC"], "versions": {"torch": "2.13.0+cpu"}, "hostname": "vm"}
    hardware = hardware_of(old)
    assert (hardware.origin, hardware.label, hardware.device_model) == (
        "header", "AMD EPYC", "AMD EPYC",
    )  # fmt: skip
    # Framework builds and run settings are not the machine: the same key.
    other_build = dict(old, versions={"tensorflow": "2.21.0"}, options={"num_threads": 1})
    assert hardware_of(other_build).key == hardware.key
    # A recorded hardware fact that differs: another key.
    v100 = hardware_of({"devices": ["Tesla V100-SXM2-16GB"]})
    assert v100.key != hardware.key and v100.device_model == "V100-SXM2-16GB"
    assert v100.label == "Tesla V100-SXM2-16GB"  # as the header said it, as tables showed it
    # Never the same as a fingerprint, even of the very machine: it cannot be shown to be.
    assert hardware.key != hardware_of(node("cpuinfo-epyc-avx2.txt")).key


def test_a_header_that_names_nothing_is_unknown() -> None:
    imported = {"source": "gluon-nlp", "model": "bert", "batch": 4}  # imported, no host line
    assert hardware_of(imported) == UNKNOWN and not UNKNOWN.known
    assert hardware_of({"devices": []}) == UNKNOWN
    assert UNKNOWN.key == "unknown" and UNKNOWN.device_model == "unknown device"


@pytest.mark.parametrize(
    ("header", "fragment"),
    [
        ({"fingerprint": [1], "hardware": "x"}, "'fingerprint' must be a JSON object"),
        ({"fingerprint": {"schema": 1}}, "'fingerprint.cpu_model': missing"),
        ({"hardware": ["AMD EPYC"]}, "'hardware' must be text"),
        ({"hardware": "8x 300W NVLink"}, "no device model"),
        ({"hardware": "H100\u202e"}, "U\\+202E RIGHT-TO-LEFT"),
        ({"devices": "AMD EPYC"}, "'devices' must be a list of device names"),
    ],
)
def test_a_malformed_header_names_the_field(header: dict, fragment: str) -> None:
    with pytest.raises(HardwareError, match=fragment):
        hardware_of(header)


# --- the fingerprint's schema and the label the kit computes --------------------------------------


def dgx1_facts(**more: Any) -> dict[str, Any]:
    """Every fact of a DGX-1 node (the recorded nvidia-smi samples) as the fingerprint takes it."""
    gpus, driver = parse_smi_query((SAMPLES / "smi-query-dgx1.csv").read_text())
    for gpu in gpus:
        gpu["sm_count"] = 80
    link = parse_topology((SAMPLES / "topo-dgx1.txt").read_text())
    return cpu_facts(
        "cpuinfo-xeon-2s-ht.txt", gpus=gpus, gpu_driver=driver, cuda_driver="11.0",
        gpu_link=link, devices_per_node=len(gpus), interconnect=link, **more,
    )  # fmt: skip


def with_fact(facts: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(facts))
    target = out
    *parents, last = dotted.split(".")
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    target[last] = value
    return out


@pytest.mark.parametrize(
    ("dotted", "value", "named", "why"),
    [
        ("schema", 99, "fingerprint.schema", "schema version 99 is not one this kit reads"),
        ("schema", "1", "fingerprint.schema", "not one this kit reads"),
        ("physical_cores", "2", "fingerprint.physical_cores", "valid integer"),
        ("physical_cores", True, "fingerprint.physical_cores", "valid integer"),
        ("physical_cores", 0, "fingerprint.physical_cores", "greater than or equal to 1"),
        ("memory_gib", 1e308, "fingerprint.memory_gib", "valid integer"),
        ("memory_gib", 10**308, "fingerprint.memory_gib", "less than or equal to"),
        ("gpus.0.power_limit_w", 1e308, "fingerprint.gpus[0].power_limit_w", "less than"),
        ("gpus.0.power_limit_w", float("nan"), "fingerprint.gpus[0].power_limit_w", "finite"),
        ("gpus.0.power_limit_w", -300.0, "fingerprint.gpus[0].power_limit_w", "greater than"),
        ("gpus.0.name", "Tesla\u202eV100", "fingerprint.gpus[0].name", "U+202E RIGHT-TO-LEFT"),
        ("gpus.0.name", "V100\n| x |", "fingerprint.gpus[0].name", "U+000A"),
        ("gpus.0.name", "V" * 10_000, "fingerprint.gpus[0].name", "10000 characters long"),
        ("gpus.0.name", "", "fingerprint.gpus[0].name", "at least 1"),
        ("cpu_model", "<script>\u200b", "fingerprint.cpu_model", "U+200B ZERO WIDTH SPACE"),
        ("gpus.0.color", "red", "fingerprint.gpus[0].color", "not a fact of the fingerprint"),
        ("extra", 1, "fingerprint.extra", "not a fact of the fingerprint"),
        ("isa", ["avx2", "rdrand"], "fingerprint.isa", "'rdrand' is not an ISA feature"),
        ("isa", ["avx2", "avx"], "fingerprint.isa", "sorted, each once"),
        ("gpu_link", "warp drive", "fingerprint.gpu_link", "not a GPU link"),
        ("devices_per_node", 16, "'fingerprint'", "devices_per_node is 16 but 8 GPU(s)"),
        ("interconnect", "NVLink", "'fingerprint'", "interconnect is 'NVLink' but"),
        ("logical_cpus", 1, "'fingerprint'", "physical_cores (4) exceed logical_cpus (1)"),
        ("gpus", "8x V100", "fingerprint.gpus", "valid list"),
    ],
)
def test_facts_outside_the_fingerprint_schema_are_refused_by_field(
    dotted: str, value: Any, named: str, why: str
) -> None:
    assert hardware_of({"fingerprint": dgx1_facts(), "devices": []}).label == (
        "8x V100-SXM2-16GB 300W NVLink"
    )
    header = {"fingerprint": with_fact(dgx1_facts(), dotted, value), "devices": []}
    with pytest.raises(HardwareError) as caught:
        hardware_of(header)
    message = str(caught.value)
    assert f"header field {named if named.startswith(chr(39)) else repr(named)}" in message
    assert why in message and message.endswith("re-run the case")


def test_a_missing_fact_is_named() -> None:
    facts = dgx1_facts()
    del facts["cpu_model"]
    with pytest.raises(HardwareError, match="'fingerprint.cpu_model': missing"):
        check_fingerprint(facts)


def test_the_label_is_the_kits_own_never_the_headers() -> None:
    """The header's ``hardware`` label is not read: an edited label changes nothing; the facts
    give the label, of the devices the ranks ran on."""
    header = {"fingerprint": dgx1_facts(), "devices": ["Tesla V100-SXM2-16GB"]}
    for label in ("8x H100 80GB HBM3 700W NVLink", "a | b", "<script>", "x" * 10_000, None):
        assert hardware_of({**header, "hardware": label}) == hardware_of(header)
    assert hardware_of(header).label == "8x V100-SXM2-16GB 300W NVLink"
    # a CPU run on the same node: its CPU, not the GPUs it left idle (one node, one key)
    on_cpu = hardware_of({**header, "devices": [header["fingerprint"]["cpu_model"]]})
    assert on_cpu.label == "Intel Xeon Platinum 8480+ 4c amx_bf16"
    assert on_cpu.key == hardware_of(header).key
    calibration = hardware_of({**header, "devices": ["none"]})  # the workload uses no device
    assert calibration.label == on_cpu.label
    mig = hardware_of({**header, "devices": ["Tesla V100-SXM2-16GB MIG 1g.5gb"]})
    assert mig.label == "8x V100-SXM2-16GB 300W NVLink"
    for handle in ("/physical_device:GPU:0", "cuda:3"):  # a framework that read no GPU name
        assert hardware_of({**header, "devices": [handle]}).label == mig.label
    cpu_only = {
        "fingerprint": {
            **header["fingerprint"],
            "gpus": [],
            "devices_per_node": 0,
            "gpu_link": None,
            "interconnect": None,
        },
        "devices": ["cuda:0"],
    }
    with pytest.raises(HardwareError, match="names 'cuda:0', which is neither"):
        hardware_of(cpu_only)  # a GPU handle on a node without GPUs


@pytest.mark.parametrize(
    ("devices", "why"),
    [
        (["NVIDIA H100 80GB HBM3"], "names 'NVIDIA H100 80GB HBM3', which is neither"),
        (["AMD EPYC"], "neither its node's CPU ('Intel(R) Xeon(R) Platinum 8480+')"),
        (["none", "Tesla V100-SXM2-16GB"], "CPU and GPU devices at once"),
        ("Tesla V100-SXM2-16GB", "'devices' must be a list"),
    ],
)
def test_devices_the_fingerprint_does_not_list_are_refused(devices: Any, why: str) -> None:
    with pytest.raises(HardwareError, match=re.escape(why)):
        hardware_of({"fingerprint": dgx1_facts(), "devices": devices})


def test_gpus_claimed_in_the_facts_of_a_cpu_run_never_reach_its_label() -> None:
    """Facts edited to claim eight H100s on a 2-core CPU run whose ranks name their CPU: the
    label says what the ranks ran on. Naming the GPUs in the devices too is a forgery the log
    alone cannot tell (a signature can: docs/reports.md)."""
    cpu = cpu_facts("cpuinfo-epyc-avx2.txt")
    h100 = {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "power_limit_w": 700.0}
    claimed = {**cpu, "gpus": [h100] * 8, "devices_per_node": 8, "gpu_link": "NVLink",
               "interconnect": "NVLink"}  # fmt: skip
    shown = hardware_of({"fingerprint": claimed, "devices": ["AMD EPYC"]})
    assert shown.label == "AMD EPYC 2c avx2"
    assert shown.key != hardware_of({"fingerprint": cpu, "devices": ["AMD EPYC"]}).key


def released_headers(version: str) -> dict[str, list[dict[str, Any]]]:
    """Every record header of a released version's raw archives, by session."""
    sessions: dict[str, list[dict[str, Any]]] = {}
    for archive in sorted((REPO_ROOT / "reports" / version / "raw").glob("*.tar.gz")):
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.name.endswith("/record.json"):
                    handle = tar.extractfile(member)
                    assert handle is not None
                    record = json.loads(handle.read())
                    sessions.setdefault(archive.name, []).append(record["header"])
    return sessions


def test_the_released_cpu_sessions_cannot_be_told_apart_by_their_headers() -> None:
    """v0.1/v0.2 ran on an AVX2-only EPYC, v0.3's new sessions on an AVX-512 one: their headers
    record the same hardware facts (device "AMD EPYC", nothing else of the machine), so they
    read as one machine; telling them apart needs a fact from outside the headers."""
    old, new = released_headers("v0.1-cpu"), released_headers("v0.3-cpu")
    assert set(old) < set(new)  # v0.3 carries every v0.1 session over
    added = sorted(set(new) - set(old))
    assert "cpu-smoke-tensorflow-bs2.tar.gz" in added
    keys: dict[str, set[str]] = {}
    for session, headers in new.items():
        for header in headers:
            assert "fingerprint" not in header  # records of before the fingerprint
            hardware = hardware_of(header)
            keys.setdefault(hardware.key, set()).add(session)
    unknown = keys.pop(UNKNOWN.key)
    assert unknown == {"imported-gluon-nlp-bert.tar.gz"}  # its log names no device
    ((key, sessions),) = keys.items()
    assert sessions == set(new) - unknown
    assert hardware_of(new["cpu-smoke-tensorflow-bs2.tar.gz"][0]).label == "AMD EPYC"


# --- declared hardware (import-logs --hardware) ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "label", "device_model"),
    [
        ("V100-SXM2-16GB", "V100-SXM2-16GB", "V100-SXM2-16GB"),
        ("Tesla V100-SXM2-16GB", "V100-SXM2-16GB", "V100-SXM2-16GB"),
        ("8x V100-SXM2-16GB 300W NVLink", "8x V100-SXM2-16GB 300W NVLink", "V100-SXM2-16GB"),
        ("8 x tesla V100-SXM2-16GB 300w nvlink", "8x V100-SXM2-16GB 300W NVLink", "V100-SXM2-16GB"),
        ("AMD EPYC 2c avx512_bf16", "AMD EPYC 2c avx512_bf16", "AMD EPYC"),
        ("AMD EPYC avx2 2c avx512f", "AMD EPYC 2c avx512f avx2", "AMD EPYC"),
        ("NVIDIA H100 80GB HBM3", "H100 80GB HBM3", "H100 80GB HBM3"),
    ],
)
def test_a_declared_hardware_reads_as_its_label_says(
    text: str, label: str, device_model: str
) -> None:
    hardware = parse_hardware(text)
    assert (hardware.origin, hardware.label, hardware.device_model) == (
        "declared", label, device_model,
    )  # fmt: skip
    assert parse_hardware(hardware.label) == hardware  # its own label reads back to it


def test_declared_forms_that_mean_the_same_share_a_key_and_others_do_not() -> None:
    assert parse_hardware("Tesla V100-SXM2-16GB").key == parse_hardware(" V100-SXM2-16GB ").key
    assert parse_hardware("V100-SXM2-16GB").key != parse_hardware("V100-SXM2-32GB").key
    assert parse_hardware("8x V100-SXM2-16GB 300W").key != (
        parse_hardware("8x V100-SXM2-16GB 250W").key
    )
    declared = parse_hardware("AMD EPYC")
    assert declared.key != hardware_of({"devices": ["AMD EPYC"]}).key  # said, not recorded
    assert parse_hardware("8x V100-SXM2-16GB 300W NVLink").facts == {
        "devices_per_node": 8,
        "device_model": "V100-SXM2-16GB",
        "power_limit_w": 300.0,
        "gpu_link": "NVLink",
    }


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty; name the device model"),
        ("   ", "empty"),
        ("8x 300W NVLink", "no device model"),
        ("V100\nA100", "one line"),
        ("x" * 201, "at most 200 characters"),
        ("0x V100-SXM2-16GB", "0 devices per node"),
    ],
)
def test_a_bad_declared_hardware_says_what_to_write(text: str, fragment: str) -> None:
    with pytest.raises(HardwareError, match=fragment) as caught:
        parse_hardware(text)
    assert "for example 'V100-SXM2-16GB'" in str(caught.value)


@pytest.mark.parametrize(
    ("flags", "native"),
    [
        ("fpu sse2 avx avx2 fma", False),  # AMD EPYC / most laptops: bf16 emulated
        ("avx2 avx512f avx512bw avx512vl", False),  # AVX-512 without its BF16 extension
        ("avx2 avx512f avx512_bf16", True),  # Cooper Lake, Zen 4
        ("avx2 avx512f amx_tile amx_bf16", True),  # Sapphire Rapids
    ],
)
def test_native_bf16_is_read_from_the_cpu_flags(flags: str, native: bool) -> None:
    cpuinfo = f"processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: {flags}\n"
    assert cpu_native_bf16(cpuinfo) is native


def test_native_bf16_on_arm_is_its_bf16_feature() -> None:
    cpuinfo = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\nCPU implementer\t: 0x41\n"
    assert cpu_native_bf16(cpuinfo) is True
