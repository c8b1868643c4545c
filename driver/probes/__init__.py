"""Probes the kit runs before a matrix: an all-reduce bandwidth probe (``allreduce.py``).

``run_allreduce_probe`` plans the probe with the torchrun launcher for a topology, runs it
through any runtime into ``<session>/probes/allreduce-<topology>/node<i>.log`` and stores the
parsed result beside it (``allreduce-<topology>.json``). The release re-parses the raw log, and
puts the scaling bound it implies beside each multi-device efficiency:

    ring all-reduce, no overlap:  t_allreduce = 2 (n - 1) / n * gradient bytes / busbw
    efficiency bound = t_step / (t_step + t_allreduce)

with ``t_step`` the 1-device step time (batch / 1n1g throughput). busbw is the bus bandwidth
of nccl-tests (algbw x 2(n-1)/n), measured at the largest probed message size.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from driver.core.command import free_port
from driver.core.repeatplan import NodeCommand, RepeatPlan
from driver.launchers.base import NodeRank
from driver.model.case import Topology
from driver.model.results import write_json
from driver.runtimes.base import Runtime, Verdict

PROBE_DIR = "probes"
SCRIPT = "driver/probes/allreduce.py"
TAG = "dlperf_probe"


class ProbeError(RuntimeError):
    pass


def probe_name(topology: str) -> str:
    return f"allreduce-{topology}"


def bus_factor(devices: int) -> float:
    """busbw / algbw of a ring all-reduce (nccl-tests): 2(n-1)/n."""
    return 2.0 * (devices - 1) / devices


def parse_probe_log(text: str) -> dict[str, Any]:
    """The probe's rank-0 lines -> backend, world size and per-size bandwidths (GB/s, 1e9)."""
    header: dict[str, Any] = {}
    sizes: list[dict[str, Any]] = []
    ended = False
    for line in text.splitlines():
        start = line.find("{")
        if start < 0 or f'"{TAG}"' not in line:
            continue
        try:
            record = json.loads(line[start:])
        except json.JSONDecodeError as error:
            raise ProbeError(f"broken probe line: {error.msg}") from None
        kind = record.get(TAG)
        if kind == "header":
            header = record
        elif kind == "allreduce":
            times = [float(t) for t in record["times"]]
            if not times or min(times) <= 0:
                raise ProbeError(f"probe size {record.get('bytes')}: no positive timings")
            size = int(record["bytes"])
            median = statistics.median(times)
            world = int(header.get("world_size", 0))
            algbw = size / median / 1e9
            sizes.append(
                {
                    "bytes": size,
                    "iters": len(times),
                    "median_s": median,
                    "algbw_gbps": algbw,
                    "busbw_gbps": algbw * bus_factor(world) if world > 1 else None,
                }
            )
        elif kind == "end":
            ended = True
    if not header or not sizes or not ended:
        raise ProbeError("the probe log has no complete result (header, sizes, end)")
    largest = max(sizes, key=lambda s: s["bytes"])
    return {
        "kind": "allreduce",
        "backend": header.get("backend"),
        "world_size": int(header["world_size"]),
        "nodes": int(header.get("nodes", 1)),
        "device": header.get("device"),
        "torch": header.get("torch"),
        "hostname": header.get("hostname"),
        "sizes": sizes,
        "busbw_gbps": largest["busbw_gbps"],
        "busbw_at_bytes": largest["bytes"],
    }


def probe_commands(
    runtime: Runtime,
    topology: Topology,
    python: str,
    script_args: list[str],
    master_port: int | None = None,
) -> list[NodeCommand]:
    """One torchrun command per node (the probe always goes through torchrun)."""
    from driver.launchers.builtin import TorchRun

    nodes = runtime.node_addresses(topology.nodes)
    master = nodes[0][1]
    port = master_port or free_port(master if master.startswith("127.") else "127.0.0.1")
    launcher = TorchRun()
    commands = []
    for node_rank, (name, _address) in enumerate(nodes):
        rank = NodeRank(
            node_rank=node_rank,
            nodes=topology.nodes,
            procs_per_node=topology.devices_per_node,
            master_addr=master,
            master_port=port,
            node_addrs=tuple(address for _, address in nodes),
        )
        argv = launcher.command(python, [SCRIPT, *script_args], rank)
        commands.append(
            NodeCommand(node=name, argv=argv, env=rank.environment(), workdir=runtime.workdir())
        )
    return commands


def probe_plan(
    topology: Topology,
    commands: list[NodeCommand],
    folder: Path,
    session_root: Path,
    timeout_s: float,
) -> RepeatPlan:
    """The probe as a repeat plan: PyTorch's environment (image, interpreter) on every node."""
    from driver.model.case import Case

    case = Case(
        model="allreduce-probe",
        framework="pytorch",
        topology=topology,
        batch_size=1,
        precision="fp32",
        dataset="synthetic",
        timeout_s=timeout_s,
        profile="probe",
    )
    return RepeatPlan(
        case=case,
        repeat=0,
        batch_size=1,
        commands=tuple(commands),
        repeat_dir=folder,
        session_root=session_root,
        parser="allreduce-probe",  # read by parse_probe_log, not a registered step-log parser
        probe=True,
    )


def default_python(runtime: Runtime) -> str:
    """The PyTorch framework's interpreter in ``runtime``; locally, this one if that is absent."""
    from driver.plugins import load_all
    from driver.registry import FRAMEWORKS

    load_all()
    python = runtime.python(FRAMEWORKS.get("pytorch"))
    if runtime.name == "local" and not Path(python).exists():
        return sys.executable
    return python


def run_allreduce_probe(
    session_root: Path,
    runtime: Runtime,
    topology: str,
    *,
    python: str | None = None,
    sizes_mb: str = "1,16,64",
    iters: int = 10,
    warmup: int = 3,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Run the probe for ``topology`` and store its raw log and result in the session."""
    topo = Topology.parse(topology)
    if topo.world_size < 2:
        raise ProbeError("an all-reduce probe needs at least 2 devices")
    folder = Path(session_root) / PROBE_DIR / probe_name(topology)
    if folder.exists():
        attempt = 1
        while folder.with_name(f"{folder.name}.old-{attempt}").exists():
            attempt += 1
        folder.rename(folder.with_name(f"{folder.name}.old-{attempt}"))
    folder.mkdir(parents=True)
    args = ["--sizes-mb", sizes_mb, "--iters", str(iters), "--warmup", str(warmup)]
    commands = probe_commands(runtime, topo, python or default_python(runtime), args)
    outcome = runtime.run(probe_plan(topo, commands, folder, Path(session_root), timeout_s))
    if outcome.verdict != Verdict.OK:
        raise ProbeError(f"probe {topology}: {outcome.verdict.value} {outcome.detail} ({folder})")
    result = parse_probe_log((folder / "node0.log").read_text(errors="replace"))
    result.update(
        topology=topology,
        log=f"{PROBE_DIR}/{probe_name(topology)}/node0.log",
        started_at=outcome.started_at,
        finished_at=outcome.finished_at,
        runtime=runtime.name,
    )
    write_json(folder.with_suffix(".json"), result)
    return result


def scaling_bound(
    step_time_s: float, gradient_bytes: float, devices: int, busbw_gbps: float
) -> float | None:
    """Efficiency ceiling of data parallelism with a ring all-reduce that does not overlap."""
    if devices < 2 or step_time_s <= 0 or gradient_bytes <= 0 or not busbw_gbps:
        return None
    allreduce_s = bus_factor(devices) * gradient_bytes / (busbw_gbps * 1e9)
    return step_time_s / (step_time_s + allreduce_s)


def probe_topologies(
    session_root: Path, runtime: Runtime, topologies: list[Topology], printer: Any = print
) -> list[dict[str, Any]]:
    """Probe every multi-device topology once per session (kept probes are reused); a failed
    probe is reported and skipped, never fatal: the matrix runs without that bound."""
    results = []
    for label in sorted({t.label for t in topologies if t.world_size > 1}):
        stored = Path(session_root) / PROBE_DIR / f"{probe_name(label)}.json"
        if stored.exists():
            results.append(json.loads(stored.read_text()))
            continue
        try:
            result = run_allreduce_probe(session_root, runtime, label)
        except (ProbeError, ValueError, OSError) as error:
            printer(f"probe {label}: skipped ({error})")
            continue
        printer(
            f"probe {label}: {result['backend']} all-reduce busbw {result['busbw_gbps']:.3f} GB/s"
        )
        results.append(result)
    return results
