"""Start N processes of one node with the rank environment, like torchrun without torch.

stdlib only: it runs inside framework environments. Every child gets RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE and dies with this process; the first child that fails stops the
others, and the exit code is the first non-zero one (``driver.bench.supervisor``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from driver.bench.supervisor import NESTED_GRACE_S, start, stop, stop_on_signals, supervise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m driver.spawn")
    parser.add_argument("--nproc-per-node", type=int, required=True)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the script and its arguments after --")
    world = args.nnodes * args.nproc_per_node
    children: list[subprocess.Popen] = []
    stop_on_signals(lambda: stop(children, grace_s=NESTED_GRACE_S))
    for local in range(args.nproc_per_node):
        env = dict(os.environ)
        env.update(
            RANK=str(args.node_rank * args.nproc_per_node + local),
            WORLD_SIZE=str(world),
            LOCAL_RANK=str(local),
            LOCAL_WORLD_SIZE=str(args.nproc_per_node),
            DLPERF_NODE_RANK=str(args.node_rank),
        )
        children.append(start([sys.executable, *command], env=env))
    return supervise(children)


if __name__ == "__main__":
    sys.exit(main())
