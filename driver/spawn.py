"""Start N processes of one node with the rank environment, like torchrun without torch.

stdlib only: it runs inside framework environments. Every child gets RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE; the first child that fails stops the others, and the exit code is
the first non-zero one.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time


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
    for local in range(args.nproc_per_node):
        env = dict(os.environ)
        env.update(
            RANK=str(args.node_rank * args.nproc_per_node + local),
            WORLD_SIZE=str(world),
            LOCAL_RANK=str(local),
            LOCAL_WORLD_SIZE=str(args.nproc_per_node),
            DLPERF_NODE_RANK=str(args.node_rank),
        )
        children.append(subprocess.Popen([sys.executable, *command], env=env))

    def stop_all(signum: int = signal.SIGTERM, _frame: object = None) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, lambda s, f: (stop_all(s), sys.exit(128 + s)))
    exit_code = 0
    while any(child.poll() is None for child in children):
        failed = [c.returncode for c in children if c.returncode not in (None, 0)]
        if failed:
            exit_code = failed[0]
            stop_all()
            break
        time.sleep(0.05)
    for child in children:
        child.wait()
        if exit_code == 0 and child.returncode:
            exit_code = child.returncode
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
