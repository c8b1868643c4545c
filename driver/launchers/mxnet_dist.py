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

The supervisor is stdlib only (it runs in the framework's environment; the process handling is
``driver.bench.supervisor``'s). It exits with the first failing worker's code, so the
benchmark's out-of-memory code (86) reaches the driver, and stops every role of the node when a
worker fails or when it is terminated itself; every role dies with it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from driver.bench.supervisor import NESTED_GRACE_S, start, stop, stop_on_signals, supervise
from driver.launchers.base import LAUNCHERS, NodeRank
from driver.launchers.builtin import module_command, single_process

# After the last worker exits the servers and the scheduler finish on their own (the workers'
# kvstores tell the scheduler they are done); past this grace period they are stopped.
ROLE_EXIT_GRACE_S = 20.0


@LAUNCHERS.register("mxnet-dist")
class MxnetDist:
    """Starts the dist_sync kvstore roles of one node through this module's supervisor."""

    name = "mxnet-dist"

    def command(self, python: str, script_argv: list[str], rank: NodeRank) -> list[str]:
        flags = {**rank.rendezvous_flags(), "node-addr": rank.node_addr}
        return single_process(python, script_argv, rank) or module_command(
            python, "driver.launchers.mxnet_dist", flags, script_argv
        )


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
    stop_on_signals(lambda: stop([*workers, *helpers], grace_s=NESTED_GRACE_S))
    for role, extra in roles:
        env = {**os.environ, **extra}
        if role == "worker":
            workers.append(start([sys.executable, *command], env=env))
        else:
            # One thread is plenty for summing gradients; leave the cores to the workers.
            env.setdefault("OMP_NUM_THREADS", "1")
            helpers.append(start([sys.executable, "-c", "import mxnet"], env=env))
    return supervise(workers, helpers, helper_exit_grace_s=ROLE_EXIT_GRACE_S)


if __name__ == "__main__":
    sys.exit(main())
