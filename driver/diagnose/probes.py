"""Running the all-reduce bandwidth probe (``allreduce.py``) through a runtime.

``run_allreduce_probe`` plans the probe with the torchrun launcher for a topology, runs it
through any runtime into ``<session>/probes/allreduce-<topology>/node<i>.log`` and stores the
parsed result beside it (``allreduce-<topology>.json``). The log's format and the scaling bound
a release computes from it are the release's (``driver.release.scaling``): a release reads the
raw log back and never imports this module.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from driver.core.command import free_port
from driver.launchers.base import NodeRank
from driver.model.case import Topology
from driver.model.results import write_json
from driver.release.scaling import ProbeError, parse_probe_log
from driver.runtimes.base import Runtime, Verdict
from driver.runtimes.plan import NodeCommand, RepeatPlan

PROBE_DIR = "probes"
SCRIPT = "driver/diagnose/allreduce.py"
# The probe's message sizes (MB: at least 1 KB, at most what fits in a device's memory) and
# timed iterations (a probe takes seconds to minutes, not hours), as a command line may give them.
PROBE_MIN_MB, PROBE_MAX_MB, PROBE_MAX_ITERS = 0.001, 16384.0, 100_000


def probe_name(topology: str) -> str:
    return f"allreduce-{topology}"


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
    from driver.frameworks.base import FRAMEWORKS
    from driver.plugins import load

    load("frameworks")
    python = runtime.python(FRAMEWORKS.get("pytorch"))
    if runtime.runs_here and not Path(python).exists():
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
