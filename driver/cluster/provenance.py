"""Each node's versions and hardware, captured once per session into its provenance.

Host side, over SSH: host name, kernel, OS, CPU, memory, the container engine's version (field
``docker``, whichever engine: the platform's :class:`~driver.cluster.preflight.Engine`, else
docker's), ``nvidia-smi`` (GPUs, driver) and ``nvidia-smi topo -m`` (the interconnect matrix),
the image digest as the engine gives it. Environment
side, with the Python that runs the benchmark (inside the image, or the node's venv):
:mod:`driver.cluster.probe` (Python, framework versions, NVML). Written to
``<session>/provenance/<node>.json``; the repeat records carry a summary.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from driver.cluster.preflight import Engine
from driver.cluster.remote import NodeUnreachable, Remote, shell
from driver.files import write_json

MARK = "@@dlperf-section "


def host_script(remote: Remote, engine: Engine | None) -> str:
    version = (
        engine.version if engine else remote.docker("version", "--format", "{{.Server.Version}}")
    )
    docker = shell(version)
    sections = {
        "hostname": "hostname",
        "kernel": "uname -srm",
        "os": '. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"',
        "cpu": "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'",
        "nproc": "nproc",
        "memory_kb": "awk '/MemTotal/ {print $2}' /proc/meminfo",
        "docker": f"{docker} 2>&1",
        "nvidia_smi": (
            "nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id "
            "--format=csv,noheader 2>&1"
        ),
        "nvidia_topo": "nvidia-smi topo -m 2>&1",
    }
    if engine and engine.image:
        sections["image"] = shell(engine.image) + " 2>&1"
    parts = [
        f"echo {shell([MARK + name])}; {{ {command}; }} || true"
        for name, command in sections.items()
    ]
    return "; ".join(parts)


def parse_sections(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith(MARK):
            if current is not None:
                out[current] = "\n".join(lines).strip()
            current, lines = line[len(MARK) :].strip(), []
        else:
            lines.append(line)
    if current is not None:
        out[current] = "\n".join(lines).strip()
    return out


def host_facts(remote: Remote, engine: Engine | None = None) -> dict[str, Any]:
    result = remote.run(host_script(remote, engine), timeout=60)
    sections = parse_sections(result.stdout)
    smi = sections.get("nvidia_smi", "")
    gpus = []
    if smi and "not found" not in smi and "failed" not in smi.lower():
        for line in smi.splitlines():
            cells = [cell.strip() for cell in line.split(",")]
            if len(cells) == 5 and cells[0].isdigit():
                gpus.append(
                    dict(
                        zip(("index", "name", "driver", "memory", "pci_bus_id"), cells, strict=True)
                    )
                )
    topo = sections.get("nvidia_topo", "")
    return {
        "hostname": sections.get("hostname"),
        "kernel": sections.get("kernel"),
        "os": sections.get("os"),
        "cpu": sections.get("cpu"),
        "nproc": int(sections["nproc"]) if sections.get("nproc", "").isdigit() else None,
        "memory_kb": int(sections["memory_kb"])
        if sections.get("memory_kb", "").isdigit()
        else None,
        "docker": sections.get("docker"),
        "gpus": gpus,
        "nvidia_smi": smi if gpus else f"unavailable: {smi.splitlines()[-1] if smi else ''}",
        "nvidia_topo": topo if gpus else "unavailable (no nvidia-smi)",
        "image_id": sections.get("image") if engine and engine.image else None,
    }


def environment_facts(remote: Remote, command: str) -> dict[str, Any]:
    """Run the probe (``command`` starts ``python -m driver.cluster.probe`` where it belongs)."""
    result = remote.run(command, timeout=120)
    for line in reversed(result.stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    return {"error": f"probe failed: {result.why()}"}


def collect(remote: Remote, *, engine: Engine | None, probe_command: str | None) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "node": remote.node.describe(),
        "captured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    try:
        facts["host"] = host_facts(remote, engine)
        if probe_command:
            facts["environment"] = environment_facts(remote, probe_command)
    except NodeUnreachable as error:
        facts["error"] = str(error)
    return facts


def summary(facts: dict[str, Any]) -> dict[str, Any]:
    """The part of a node's provenance every repeat record carries."""
    host = facts.get("host", {})
    environment = facts.get("environment", {})
    nvml = environment.get("nvml", {})
    return {
        "hostname": host.get("hostname"),
        "kernel": host.get("kernel"),
        "cpu": host.get("cpu"),
        "docker": host.get("docker"),
        "image_id": host.get("image_id"),
        "gpus": [g.get("name") for g in host.get("gpus", [])],
        "driver": (host.get("gpus") or [{}])[0].get("driver"),
        "nvml": nvml.get("driver_version") if nvml.get("available") else nvml.get("reason"),
        "python": environment.get("python"),
        "packages": environment.get("packages"),
    }


def write(root: Path, node: str, facts: dict[str, Any]) -> Path:
    return write_json(root / "provenance" / f"{node}.json", facts)
