"""TF_CONFIG for MultiWorkerMirroredStrategy, derived from the kit's rank environment.

The kit's launchers only hand each process RANK/WORLD_SIZE/LOCAL_RANK and the node facts
(MASTER_ADDR, MASTER_PORT, DLPERF_NODE_ADDRS, DLPERF_NPROC_PER_NODE); TensorFlow wants every
worker's host:port up front. Each process derives the same list without talking to the others:
worker ``r`` runs on the address of node ``r // procs_per_node`` at port ``MASTER_PORT + r``.
The driver picks MASTER_PORT free on the head node; the ports above it are assumed free too
(the same assumption torchrun-style launchers make for their rendezvous port).

Pure Python: it runs before TensorFlow is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DEFAULT_PORT = 29500


def worker_addresses(environ: Mapping[str, str], world_size: int) -> list[str]:
    """``host:port`` of every worker, in rank order."""
    procs = int(environ.get("LOCAL_WORLD_SIZE") or environ.get("DLPERF_NPROC_PER_NODE") or 0)
    nodes = [a for a in environ.get("DLPERF_NODE_ADDRS", "").split(",") if a]
    if not nodes:  # started by hand on one node
        nodes = [environ.get("MASTER_ADDR") or "127.0.0.1"]
    procs = procs or -(-world_size // len(nodes))  # ceil: procs per node
    if len(nodes) * procs != world_size:
        raise ValueError(
            f"world size {world_size} is not {len(nodes)} node(s) x {procs} process(es); "
            "check DLPERF_NODE_ADDRS and LOCAL_WORLD_SIZE"
        )
    base = int(environ.get("MASTER_PORT") or DEFAULT_PORT)
    return [f"{nodes[rank // procs]}:{base + rank}" for rank in range(world_size)]


def tf_config(environ: Mapping[str, str], rank: int, world_size: int) -> dict[str, Any]:
    return {
        "cluster": {"worker": worker_addresses(environ, world_size)},
        "task": {"type": "worker", "index": rank},
    }
