"""The SSH runtimes' own cost as the node count grows: a benchmark, not a test.

Starts N loopback sshd nodes (``SshNode``, 127.0.0.2..), runs the calibration selftest at
``NnNg`` (one device per node) through a fresh ``process`` (or ``docker``) runtime, and prints
per N: the overhead per repeat (wall minus the workload's steps, as ``dlperf selftest`` says),
the median phase timings of the records (``extra["timings"]``), the session's one-time
preparation (pre-flight, code sync, sweep, provenance), ``outside``: the repeat's wall time
outside the window in which the nodes' processes ran (the driver's part: launch, detection,
collection), and the driver's own CPU seconds per repeat. On one machine the nodes' processes
share its CPUs, so the overhead also grows with their start-up; ``outside`` and the CPU do
not. Needs root (sshd) and, for docker, the cpu-python image::

    .venv/bin/python -m tests.fanout_bench --runtime process --nodes 2,4,8,16,32 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from driver.core.selftest import run_selftest
from driver.model.results import Session
from driver.runtimes.factory import make_runtime
from tests.cluster_fixtures import SshNode, free_port, write_inventory

PHASES = ("prepare_s", "launch_s", "watch_s", "finish_s")


def start_nodes(count: int, root: Path) -> list[SshNode]:
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    key = root / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    known_hosts = root / "known_hosts"
    nodes = []
    for index in range(count):
        address = f"127.0.0.{2 + index}"
        node_root = root / f"node{index}"
        node_root.mkdir()
        node = SshNode(index, address, free_port(address), node_root, key, known_hosts=known_hosts)
        node.scratch.mkdir()
        node.start()
        nodes.append(node)
    return nodes


def docker_image_id() -> str:
    found = subprocess.run(
        ["docker", "images", "--no-trunc", "--format", "{{.ID}}", "dlperf/cpu-python"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    ids = found.stdout.split()
    if not ids:
        raise SystemExit("no dlperf/cpu-python image: build it (tests/test_cluster_docker.py)")
    return ids[0]


def measure(runtime_name: str, nodes: list[SshNode], root: Path, repeats: int) -> dict:
    count = len(nodes)
    defaults: dict = {"devices": 1}
    if runtime_name == "docker":
        defaults["container"] = {"variant": "cpu", "image": {"default": docker_image_id()}}
    inventory = write_inventory(root / f"inventory-{count}.yaml", nodes, defaults=defaults)
    runtime = make_runtime(runtime_name, inventory=inventory)
    # The driver's own CPU time (every thread of this process) in each repeat's runtime.run.
    cpu_per_repeat: list[float] = []
    run_repeat = runtime.run

    def run(plan):  # noqa: ANN001, ANN202 - the Runtime protocol's
        before = time.process_time()
        try:
            return run_repeat(plan)
        finally:
            cpu_per_repeat.append(time.process_time() - before)

    runtime.run = run
    results_dir = Path(tempfile.mkdtemp(prefix=f"results-{runtime_name}-{count}-", dir=root))
    results_dir.rmdir()  # a fresh session, never a resumed one
    started = time.monotonic()
    [result] = run_selftest(
        topologies=(f"{count}n{count}g",), repeats=repeats, results_dir=results_dir,
        runtime=runtime, printer=lambda _line: None,
    )  # fmt: skip
    wall = time.monotonic() - started
    records = [record for _, record, _ in Session.open(results_dir).records()]
    timings = [record.extra.get("timings", {}) for record in records]
    row = {
        "nodes": count,
        "overhead_s": result.overhead_s,
        "error": result.error,
        "wall_s": wall,
        "preparation_s": max(t.get("prepare_s", 0.0) for t in timings),
    }
    # The driver's part of a repeat: its wall time outside the window in which the nodes'
    # processes (or containers) ran, by their own start stamps and run times.
    outside = []
    for record in records[1:] or records:
        windows = [
            (facts.get("process_started_at") or facts.get("container_started_at"),
             facts.get("process_seconds") or facts.get("container_seconds"))
            for facts in record.extra.get("nodes", {}).values()
        ]  # fmt: skip
        if windows and all(start and seconds for start, seconds in windows):
            first = min(start for start, _ in windows)
            last = max(start + seconds for start, seconds in windows)
            outside.append(record.finished_at - record.started_at - (last - first))
    row["outside_s"] = statistics.median(outside) if outside else float("nan")
    row["driver_cpu_s"] = statistics.median(cpu_per_repeat[1:] or cpu_per_repeat)
    for phase in PHASES:
        values = [t[phase] for t in timings[1:] or timings if phase in t]
        row[phase] = statistics.median(values) if values else float("nan")
    for remote in getattr(runtime, "remotes", []):
        remote.close()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", choices=("process", "docker"), default="process")
    parser.add_argument("--nodes", default="2,4,8,16,32")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    counts = [int(n) for n in args.nodes.split(",")]
    with tempfile.TemporaryDirectory(prefix="dlperf-fanout-") as scratch:
        root = Path(scratch)
        nodes = start_nodes(max(counts), root)
        try:
            print(
                f"{'N':>3} {'overhead/rep':>12} {'launch':>7} {'watch':>7} {'finish':>7} "
                f"{'prepare(1st)':>12} {'outside':>8} {'drv cpu':>8} {'error':>8}  "
                f"({args.runtime}, {args.repeats} repeats)",
                flush=True,
            )
            for count in counts:
                row = measure(args.runtime, nodes[:count], root, args.repeats)
                print(
                    f"{row['nodes']:>3} {row['overhead_s']:>12.2f} {row['launch_s']:>7.2f} "
                    f"{row['watch_s']:>7.2f} {row['finish_s']:>7.2f} "
                    f"{row['preparation_s']:>12.2f} {row['outside_s']:>8.2f} "
                    f"{row['driver_cpu_s']:>8.2f} {row['error']:>8.4%}",
                    flush=True,
                )
        finally:
            for node in nodes:
                node.kill()


if __name__ == "__main__":
    main()
