"""PaddlePaddle's launcher, ``python -m paddle.distributed.launch``, behind a small log relay.

paddle 3.3.1's launcher writes each process's output to ``<log_dir>/workerlog.<i>`` and copies
only the first one to its stdout, so a node log would hold the records of one rank per node.
The launcher plug-in therefore starts the relay in this module (``python -m
driver.launchers.paddle``, stdlib only, run by the framework's interpreter), which runs the
launcher with a private log folder and copies every worker log, line by line, to its own
stdout. It also owns the cleanup: paddle starts each worker in its own session, so stopping the
launcher's process group (what a runtime does on a timeout) would leave the workers running
(process handling: ``driver.bench.supervisor``; the launcher gets SIGTERM if the relay dies).

Node rendezvous: ``--master <master addr>:<master port> --nnodes N --rank <node rank>`` and
``--host <this node's inventory address>``: without it paddle takes the address its host name
resolves to, and node 0 starts the rendezvous only when that equals the master address (a node
reached on another interface, or on a loopback address, waits for a master forever);
``--nproc_per_node P`` processes per node, one GPU each on GPU nodes (paddle assigns them), gloo
on CPU (the launcher sets PADDLE_DISTRI_BACKEND=gloo when it finds no device).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import BinaryIO

from driver.bench.protocol import EXIT_OOM, has_oom_record
from driver.bench.supervisor import NESTED_GRACE_S, signal_group, start, stop, stop_on_signals
from driver.launchers.base import LAUNCHERS, NodeRank
from driver.launchers.builtin import module_command, single_process

POLL_S = 0.2


@LAUNCHERS.register("paddle")
class PaddleLaunch:
    name = "paddle"

    def command(self, python: str, script_argv: list[str], rank: NodeRank) -> list[str]:
        flags = {
            "nnodes": rank.nodes,
            "rank": rank.node_rank,
            "nproc-per-node": rank.procs_per_node,
            "master": f"{rank.master_addr}:{rank.master_port}",
            "host": rank.node_addr,
        }
        return single_process(python, script_argv, rank) or module_command(
            python, "driver.launchers.paddle", flags, script_argv
        )


def launch_argv(args: argparse.Namespace, log_dir: str, script_argv: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "paddle.distributed.launch",
        "--nnodes", str(args.nnodes),
        "--rank", str(args.rank),
        "--nproc_per_node", str(args.nproc_per_node),
        "--master", args.master,
        *(["--host", args.host] if args.host else []),
        "--log_dir", log_dir,
        "--max_restart", "0",  # a failed repeat is a verdict, not something to retry
        *script_argv,
    ]  # fmt: skip


class LineRelay:
    """Copies whole lines from several sources to one output (one writer, no torn lines)."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.saw_oom = False

    def write(self, line: bytes) -> None:
        if has_oom_record(line):
            self.saw_oom = True
        with self.lock:
            self.out.write(line if line.endswith(b"\n") else line + b"\n")
            self.out.flush()

    def pump_stream(self, stream: BinaryIO) -> None:
        for line in iter(stream.readline, b""):
            self.write(line)


class WorkerLogs:
    """Follows ``workerlog.<i>`` for i >= 1 (the launcher already prints worker 0's log)."""

    def __init__(self, folder: Path, relay: LineRelay) -> None:
        self.folder, self.relay = folder, relay
        self.offsets: dict[Path, int] = {}
        self.partial: dict[Path, bytes] = {}

    def poll(self, final: bool = False) -> None:
        for path in sorted(self.folder.glob("workerlog.*")):
            if path.suffix == ".0":
                continue
            with path.open("rb") as handle:
                handle.seek(self.offsets.get(path, 0))
                data = self.partial.pop(path, b"") + handle.read()
                self.offsets[path] = handle.tell()
            lines = data.split(b"\n")
            rest = lines.pop()  # the unfinished last line waits for its end
            for line in lines:
                self.relay.write(line + b"\n")
            if rest and final:
                self.relay.write(rest)
            elif rest:
                self.partial[path] = rest


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc; the workers paddle started in new sessions)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def stop_pod(launcher: subprocess.Popen) -> None:
    """Stop the launcher and, whatever it does, every worker session it started."""
    workers = children_of(launcher.pid)
    stop([launcher], grace_s=NESTED_GRACE_S)  # paddle's launcher stops its pod on SIGTERM
    for worker in workers:
        signal_group(worker, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m driver.launchers.paddle")
    parser.add_argument("--nnodes", type=int, required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--nproc-per-node", type=int, required=True)
    parser.add_argument("--master", required=True, help="addr:port of node 0's rendezvous")
    parser.add_argument("--host", default=None, help="this node's address (the inventory's)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    script_argv = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not script_argv:
        parser.error("give the script and its arguments after --")

    relay = LineRelay(sys.stdout.buffer)
    with tempfile.TemporaryDirectory(prefix="dlperf-paddle-logs-") as log_dir:
        launcher = start(
            launch_argv(args, log_dir, script_argv),
            parent_death_signal=signal.SIGTERM,  # it stops its pod on SIGTERM
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        stop_on_signals(lambda: stop_pod(launcher))
        assert launcher.stdout is not None
        pump = threading.Thread(target=relay.pump_stream, args=(launcher.stdout,), daemon=True)
        pump.start()
        logs = WorkerLogs(Path(log_dir), relay)
        try:
            while launcher.poll() is None:
                logs.poll()
                time.sleep(POLL_S)
        finally:
            stop_pod(launcher)
            pump.join(timeout=5)
            logs.poll(final=True)
    code = launcher.returncode
    if code != 0 and relay.saw_oom:
        return EXIT_OOM  # the max-batch search needs the script's verdict, not the launcher's
    return code


if __name__ == "__main__":
    sys.exit(main())
