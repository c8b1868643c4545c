"""MXNet's parameter-server kvstore (``dist_sync``): scheduler, servers and workers of one node.

MXNet has no torchrun-like launcher of its own (``tools/launch.py`` lives in the source tree, not
in the wheel), so this module is both the launcher plug-in and the supervisor it starts on every
node: ``python -m driver.launchers.mxnet_dist --nnodes ... -- <script> <args>``. The roles are
told apart by ps-lite's ``DMLC_*`` variables:

- node 0 runs the one **scheduler** (``DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT`` is its address);
- every node runs one **server** (``DMLC_NUM_SERVER`` = nodes) that sums the gradients pushed to
  it; a server or scheduler is just ``import mxnet`` with ``DMLC_ROLE`` set: the import runs the
  role and exits when the workers are done (``mxnet/kvstore/kvstore_server.py``);
- every node runs ``nproc_per_node`` **workers** (``DMLC_NUM_WORKER`` = world size): the script.

The supervisor is stdlib only (it runs in the framework's environment). It exits with the first
failing worker's code, so the benchmark's out-of-memory code (86) reaches the driver, and stops
every role of the node when a worker fails or when it is terminated itself.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from driver.launchers.base import NodeRank
from driver.launchers.builtin import single_process
from driver.registry import LAUNCHERS

POLL_S = 0.05
# After the last worker exits the servers and the scheduler finish on their own (the workers'
# kvstores tell the scheduler they are done); past this grace period they are stopped.
ROLE_EXIT_GRACE_S = 20.0
STOP_GRACE_S = 5.0


@LAUNCHERS.register("mxnet-dist")
class MxnetDist:
    """Starts the dist_sync kvstore roles of one node through this module's supervisor."""

    name = "mxnet-dist"

    def command(self, python: str, script_argv: list[str], rank: NodeRank) -> list[str]:
        return single_process(python, script_argv, rank) or [
            python, "-m", "driver.launchers.mxnet_dist",
            f"--nnodes={rank.nodes}",
            f"--node-rank={rank.node_rank}",
            f"--nproc-per-node={rank.procs_per_node}",
            f"--master-addr={rank.master_addr}",
            f"--master-port={rank.master_port}",
            *([f"--node-addr={rank.node_addr}"] if rank.node_addr else []),
            "--", *script_argv,
        ]  # fmt: skip


def role_environments(
    *,
    nnodes: int,
    node_rank: int,
    nproc_per_node: int,
    master_addr: str,
    master_port: int,
    node_addr: str | None = None,
) -> list[tuple[str, dict[str, str]]]:
    """(role, environment additions) of every process this node starts, scheduler first."""
    common = {
        # The scheduler listens on the job's master port; ps-lite picks the others' ports.
        "DMLC_PS_ROOT_URI": master_addr,
        "DMLC_PS_ROOT_PORT": str(master_port),
        "DMLC_NUM_SERVER": str(nnodes),
        "DMLC_NUM_WORKER": str(nnodes * nproc_per_node),
    }
    if node_addr:  # the address the other nodes reach this one at (ps-lite guesses otherwise)
        common["DMLC_NODE_HOST"] = node_addr
    roles: list[tuple[str, dict[str, str]]] = []
    if node_rank == 0:
        roles.append(("scheduler", {**common, "DMLC_ROLE": "scheduler"}))
    roles.append(("server", {**common, "DMLC_ROLE": "server"}))
    for local in range(nproc_per_node):
        roles.append(
            (
                "worker",
                {
                    **common,
                    "DMLC_ROLE": "worker",
                    # For the step log and thread sizing; the kvstore numbers workers itself
                    # (kv.rank), and the script logs that rank.
                    "RANK": str(node_rank * nproc_per_node + local),
                    "WORLD_SIZE": str(nnodes * nproc_per_node),
                    "LOCAL_RANK": str(local),
                    "LOCAL_WORLD_SIZE": str(nproc_per_node),
                    "DLPERF_NODE_RANK": str(node_rank),
                },
            )
        )
    return roles


def _stop(processes: Sequence[subprocess.Popen]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in processes if p.poll() is None]
        if not alive:
            return
        for process in alive:
            process.send_signal(sig)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and any(p.poll() is None for p in alive):
            time.sleep(POLL_S)


def supervise(workers: list[subprocess.Popen], helpers: list[subprocess.Popen]) -> int:
    """Wait for the workers; the first failure stops everything and is the exit code."""
    everything = [*helpers, *workers]
    while True:
        # Poll every process each round (any() would stop at the first one still running).
        states = [w.poll() for w in workers]
        failed = [code for code in states if code not in (None, 0)]
        # A server or scheduler dying early leaves the workers blocked in a push/pull.
        dead_helpers = [code for code in (h.poll() for h in helpers) if code not in (None, 0)]
        if failed or dead_helpers:
            _stop(everything)
            return failed[0] if failed else dead_helpers[0]
        if None not in states:
            break
        time.sleep(POLL_S)
    codes = [w.returncode for w in workers]
    deadline = time.monotonic() + ROLE_EXIT_GRACE_S
    while time.monotonic() < deadline and any(h.poll() is None for h in helpers):
        time.sleep(POLL_S)
    _stop(helpers)
    return next((code for code in codes if code), 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m driver.launchers.mxnet_dist")
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--nproc-per-node", type=int, required=True)
    parser.add_argument("--master-addr", required=True)
    parser.add_argument("--master-port", type=int, required=True)
    parser.add_argument("--node-addr", default=None)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the script and its arguments after --")
    roles = role_environments(
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        nproc_per_node=args.nproc_per_node,
        master_addr=args.master_addr,
        master_port=args.master_port,
        node_addr=args.node_addr,
    )
    workers: list[subprocess.Popen] = []
    helpers: list[subprocess.Popen] = []

    def terminate(signum: int, _frame: object) -> None:
        _stop([*workers, *helpers])
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    for role, extra in roles:
        env = {**os.environ, **extra}
        if role == "worker":
            workers.append(subprocess.Popen([sys.executable, *command], env=env))
        else:
            # One thread is plenty for summing gradients; leave the cores to the workers.
            env.setdefault("OMP_NUM_THREADS", "1")
            helpers.append(subprocess.Popen([sys.executable, "-c", "import mxnet"], env=env))
    try:
        return supervise(workers, helpers)
    except KeyboardInterrupt:
        _stop([*workers, *helpers])
        return 130


if __name__ == "__main__":
    sys.exit(main())
