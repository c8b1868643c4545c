"""All-reduce bandwidth probe: times ``all_reduce`` of a few message sizes over torch.distributed.

Run under torchrun, one process per device (the kit does this through a runtime, see
``driver.diagnose.probes.run_allreduce_probe``)::

    python -m torch.distributed.run --nproc-per-node=2 driver/diagnose/allreduce.py --sizes-mb 1,16

NCCL on GPUs, gloo on CPUs. Each timed iteration is fenced by a barrier and a device sync; its
time is the slowest rank's (an all-reduce MAX of the per-rank times). Rank 0 prints JSON lines
tagged ``"dlperf_probe"``: a header, one line per size with every timed iteration, an end line.
The driver computes bandwidths from these raw times
(``driver.release.scaling.parse_probe_log``), so the numbers a report shows can be recomputed
from this log.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist

TAG = "dlperf_probe"
ELEMENT_BYTES = 4  # float32, the gradient dtype of fp32 and AMP (fp32 master weights) training


def emit(kind: str, **fields: object) -> None:
    # one write per line: ranks share an unbuffered pipe (see driver.bench.protocol.write_line)
    sys.stdout.write(json.dumps({TAG: kind, "v": 1, **fields}, sort_keys=True) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", default="1,16,64", help="message sizes, MB (1e6 bytes)")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"))
    args = parser.parse_args(argv)
    sizes = [int(float(x) * 1e6) // ELEMENT_BYTES * ELEMENT_BYTES for x in args.sizes_mb.split(",")]
    use_cuda = torch.cuda.is_available() and args.backend in ("auto", "nccl")
    backend = "nccl" if use_cuda else "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))

    def sync() -> None:
        if use_cuda:
            torch.cuda.synchronize(device)

    if rank == 0:
        emit(
            "header",
            backend=backend,
            world_size=world,
            local_world_size=local_world,
            nodes=max(1, world // max(1, local_world)),
            hostname=socket.gethostname(),
            device=torch.cuda.get_device_name(device) if use_cuda else "cpu",
            torch=torch.__version__,
        )
    for size in sizes:
        tensor = torch.ones(size // ELEMENT_BYTES, dtype=torch.float32, device=device)
        slowest = torch.zeros(1, dtype=torch.float64, device=device)
        times = []
        for iteration in range(args.warmup + args.iters):
            dist.barrier()
            sync()
            start = time.perf_counter()
            dist.all_reduce(tensor)
            sync()
            slowest.fill_(time.perf_counter() - start)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            if iteration >= args.warmup:
                times.append(float(slowest.item()))
        if rank == 0:
            emit("allreduce", bytes=size, times=times)
    if rank == 0:
        emit("end")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
