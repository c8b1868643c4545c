"""From a case to the command of every node: one function for every framework.

``driver.core.plan`` wraps these commands into the repeat plan a runtime receives."""

from __future__ import annotations

import ipaddress
import json
import socket
from typing import TYPE_CHECKING, Any

from driver.frameworks.base import FRAMEWORKS, Framework
from driver.launchers.base import LAUNCHERS, NodeRank
from driver.model.case import Case
from driver.plugins import load
from driver.runtimes.plan import NodeCommand
from driver.sources.base import SOURCES

if TYPE_CHECKING:  # the runtime only answers questions here: planning does not import runtimes
    from driver.runtimes.base import Runtime


def option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return json.dumps(value)


# Dell method: drop the page cache before a repeat where allowed, and say which happened (the
# runner copies this line into the repeat's record). In containers /proc/sys is read-only.
DROP_CACHES_SCRIPT = (
    'if [ "$(id -u)" = 0 ] && sync && (echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null; '
    'then echo "dlperf-cache-drop: dropped"; '
    'else echo "dlperf-cache-drop: skipped (not root, or /proc/sys is read-only)"; fi; '
    'exec "$@"'
)


def with_cache_drop(argv: list[str]) -> list[str]:
    return ["sh", "-c", DROP_CACHES_SCRIPT, "dlperf-drop-caches", *argv]


def script_argv(case: Case, framework: Framework, batch_size: int) -> list[str]:
    """The benchmark script's arguments (``driver.bench.contract`` parses them)."""
    warmup, _measured, total = case.window_for(batch_size)
    argv = [
        framework.script,
        "--model", case.model,
        "--batch-size", str(batch_size),
        "--precision", case.precision,
        "--xla", "on" if case.xla else "off",
        "--dataset", case.dataset,
        "--warmup-steps", str(warmup),
        "--total-steps", str(total),
        "--loader-workers", str(case.loader_workers),
    ]  # fmt: skip
    if case.data_dir:
        argv += ["--data-dir", case.data_dir]
    if case.amp_dtype != "auto":
        argv += ["--amp-dtype", case.amp_dtype]
    for key in sorted(case.options):
        argv += ["--option", f"{key}={option_text(case.options[key])}"]
    return argv


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


def is_loopback(address: str) -> bool:
    if address.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # a host name (or a runtime's placeholder): a host of its own
        return False


def check_placement(case: Case, nodes: list[tuple[str, str]]) -> None:
    """Refuse (ValueError, with the fix) a multi-node case its launcher cannot run where the
    runtime places it: OneFlow's launcher on several loopback "nodes" hangs, it never fails."""
    if case.source != "dlperf" or case.topology.nodes < 2:
        return  # an upstream source brings its own launcher
    load("frameworks", "launchers")
    framework = FRAMEWORKS.get(case.framework)
    if not getattr(LAUNCHERS.get(framework.launcher), "nodes_told_apart_by_address", False):
        return
    loopback = [address for _name, address in nodes if is_loopback(address)]
    if not loopback:
        return
    one_host = f"1n{case.topology.world_size}g"
    raise ValueError(
        f"{case.id}: {framework.display}'s launcher tells nodes apart by the address their ranks "
        f"connect from, and {len(loopback)} of the {case.topology.nodes} nodes are on loopback "
        f"({', '.join(sorted(set(loopback)))}): they would all look like one host and the job "
        f"would hang at its first collective ({framework.folder}/README.md). Give an inventory "
        "of real nodes (`--inventory cluster.yaml`; with make, INVENTORY=cluster.yaml "
        "RUNTIME=docker or process; docs/clusters.md), or run this shape on this machine on "
        "simulated hosts, each with its own address (as root: `make "
        f"{case.model}-{case.framework} NODES={case.topology.nodes} "
        f"GPUS={case.topology.devices_per_node} REHEARSE=on`, i.e. `dlperf run "
        "--simulated-hosts --runtime process`; docs/clusters.md); without root, all the "
        f"processes on one node ({one_host}), or the shape with the calibration workload "
        f"(`dlperf selftest --topologies {case.topology.label}`)"
    )


def node_commands(
    case: Case, runtime: Runtime, batch_size: int, *, master_port: int | None = None
) -> list[NodeCommand]:
    """The command each node runs for one repeat of ``case``, with its rank environment."""
    load("frameworks", "launchers")
    framework = FRAMEWORKS.get(case.framework)
    launcher = LAUNCHERS.get(framework.launcher)()
    nodes = runtime.node_addresses(case.topology.nodes)
    check_placement(case, nodes)
    master_addr = nodes[0][1]
    port = master_port or free_port(master_addr if master_addr.startswith("127.") else "127.0.0.1")
    argv = script_argv(case, framework, batch_size)
    source = SOURCES.get(case.source)() if case.source != "dlperf" else None
    # The runtime's own environment (the local venv's LD_LIBRARY_PATH), then the rank's.
    base_env = {**framework.env, **runtime.environment(framework)}
    commands = []
    for node_rank, (name, _address) in enumerate(nodes):
        rank = NodeRank(
            node_rank=node_rank,
            nodes=case.topology.nodes,
            procs_per_node=case.topology.devices_per_node,
            master_addr=master_addr,
            master_port=port,
            node_addrs=tuple(address for _, address in nodes),
        )
        env = {**base_env, **rank.environment()}
        if source is not None:  # upstream code: its own launcher, inside its own image
            node_argv, workdir = source.command(case, rank, batch_size), source.workdir
        else:
            node_argv = launcher.command(runtime.python(framework), argv, rank)
            workdir = runtime.workdir()
        if case.drop_caches:
            node_argv = with_cache_drop(node_argv)
        commands.append(NodeCommand(node=name, argv=node_argv, env=env, workdir=workdir))
    return commands


def parser_for(case: Case) -> str:
    """The log parser of a case: its upstream source's format, or our JSON lines."""
    load("frameworks", "sources")
    if case.source != "dlperf":
        return SOURCES.get(case.source)().parser
    return FRAMEWORKS.get(case.framework).parser
