"""Sample GPUs (NVML) and process trees (/proc) at a fixed interval into JSON lines.

stdlib only (``pynvml`` when present): it also runs on remote nodes and inside containers, as
``python -m driver.telemetry.sampler``. Every line is one JSON object with ``kind``:

- ``meta``: once, first: node, host, interval, clock, and the GPU status (``"nvml"`` or
  ``"no GPU: <reason>"``, e.g. ``NVMLError_LibraryNotFound`` on a machine without a driver).
- ``cpu``: the process tree of the node's command: ``processes``, ``cpu_pct`` (percent of one
  core over the interval since the previous sample, summed over the tree; None in the first
  sample) and ``rss_mib`` (summed resident memory).
- ``gpu``: one per GPU per sample: ``power_w``, ``sm_pct``, ``mem_pct``, ``mem_used_mib``,
  ``sm_clock_mhz``, ``mem_clock_mhz``, ``temp_c`` (None where the GPU does not report one).

Each sample carries ``mono`` (``time.monotonic``: the clock of the benchmark's step records on
the same host, so the summary can cut the measured window exactly) and ``wall`` (``time.time``).
The process tree is followed through ``ppid`` links, because launchers (torchrun) start their
workers in new sessions and process groups.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import IO, Any

DEFAULT_INTERVAL_S = 0.5
ENV_INTERVAL = "DLPERF_TELEMETRY_INTERVAL_S"  # seconds; 0 turns telemetry off
FORMAT_VERSION = 1
MIB = 1024 * 1024


def interval_from_env(default: float = DEFAULT_INTERVAL_S) -> float:
    """The sampling interval from ``DLPERF_TELEMETRY_INTERVAL_S`` (0 or negative: off)."""
    text = os.environ.get(ENV_INTERVAL, "").strip()
    if not text:
        return default
    try:
        return max(0.0, float(text))
    except ValueError:
        return default


# --------------------------------------------------------------------------------------------
# /proc


def parse_stat(text: str) -> tuple[int, int, int]:
    """(ppid, utime + stime in clock ticks, rss in pages) from a ``/proc/<pid>/stat`` line.

    The command name (field 2) is in parentheses and may hold spaces or parentheses itself, so
    the fields are counted from the last ``)``.
    """
    rest = text[text.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state): ppid is field 4, utime 14, stime 15, rss 24.
    return int(rest[1]), int(rest[11]) + int(rest[12]), int(rest[21])


def read_process_table(proc_root: Path = Path("/proc")) -> dict[int, tuple[int, int, int]]:
    """pid -> (ppid, cpu ticks, rss pages) of every process visible now."""
    table: dict[int, tuple[int, int, int]] = {}
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return table
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            table[int(entry)] = parse_stat((proc_root / entry / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue  # the process ended between listdir and read
    return table


def has_children_lists(proc_root: Path = Path("/proc")) -> bool:
    """Whether the kernel lists each thread's children (``/proc/<pid>/task/<tid>/children``,
    CONFIG_PROC_CHILDREN; every distribution kernel has it)."""
    return (proc_root / "self" / "task" / str(threading.get_native_id()) / "children").exists()


def read_tree_table(
    roots: Iterable[int], proc_root: Path = Path("/proc")
) -> dict[int, tuple[int, int, int]]:
    """pid -> (ppid, cpu ticks, rss pages) of ``roots`` and their descendants only, found
    through the kernel's children lists: a few files per process of the tree, however many
    processes the host runs (reading all of them every sample cost the driver more CPU than
    everything else it does while a benchmark runs)."""
    table: dict[int, tuple[int, int, int]] = {}
    stack = list(roots)
    while stack:
        pid = stack.pop()
        if pid in table:
            continue
        folder = proc_root / str(pid)
        try:
            table[pid] = parse_stat((folder / "stat").read_text())
            tasks = os.listdir(folder / "task")
        except (OSError, ValueError, IndexError):
            continue  # the process ended
        for tid in tasks:
            try:
                stack += [
                    int(child) for child in (folder / "task" / tid / "children").read_text().split()
                ]
            except (OSError, ValueError):
                continue  # the thread ended
    return table


def process_tree(roots: Iterable[int], table: dict[int, tuple[int, int, int]]) -> set[int]:
    """The roots that still run and all their descendants (through ppid links)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _ticks, _rss) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    stack = [pid for pid in roots if pid in table]
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found.add(pid)
        stack.extend(children.get(pid, ()))
    return found


class CpuTracker:
    """CPU utilisation and RSS of one process tree, from successive process tables."""

    def __init__(self, roots: Iterable[int]) -> None:
        self.roots = set(roots)
        self.ticks_per_s = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
        self.page_mib = (os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096) / MIB
        self._previous: dict[int, int] | None = None
        self._previous_mono = 0.0

    def sample(self, table: dict[int, tuple[int, int, int]], mono: float) -> dict[str, Any]:
        tree = process_tree(self.roots, table)
        ticks = {pid: table[pid][1] for pid in tree}
        cpu_pct: float | None = None
        if self._previous is not None and mono > self._previous_mono:
            # A process seen for the first time started after the previous sample: all its
            # ticks fall inside the interval. Processes that ended are dropped (their last
            # partial interval is lost; the interval is short).
            delta = sum(t - self._previous.get(pid, 0) for pid, t in ticks.items())
            cpu_pct = 100.0 * max(0, delta) / self.ticks_per_s / (mono - self._previous_mono)
        self._previous, self._previous_mono = ticks, mono
        rss = sum(table[pid][2] for pid in tree) * self.page_mib
        return {"processes": len(tree), "cpu_pct": cpu_pct, "rss_mib": rss}


# --------------------------------------------------------------------------------------------
# NVML


def _load_pynvml() -> ModuleType | None:
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Nvml:
    """The GPUs NVML sees; every reading that a GPU does not support is None."""

    def __init__(self, module: ModuleType, handles: list[Any], names: list[str]) -> None:
        self.module, self.handles, self.names = module, handles, names

    @classmethod
    def open(cls, module: ModuleType | None = None) -> tuple[Nvml | None, str]:
        """(the NVML wrapper, "nvml") or (None, "no GPU: <reason>"); never raises."""
        nvml = module if module is not None else _load_pynvml()
        if nvml is None:
            return None, "no GPU: pynvml not installed"
        try:
            nvml.nvmlInit()
        except Exception as error:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
            return None, f"no GPU: {type(error).__name__}"
        try:
            count = nvml.nvmlDeviceGetCount()
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            names = [_decode(nvml.nvmlDeviceGetName(h)) for h in handles]
        except Exception as error:
            _quiet(nvml.nvmlShutdown)
            return None, f"no GPU: {type(error).__name__}"
        if not handles:
            _quiet(nvml.nvmlShutdown)
            return None, "no GPU: NVML sees no device"
        return cls(nvml, handles, names), "nvml"

    def sample(self) -> list[dict[str, Any]]:
        nvml = self.module
        out = []
        for index, handle in enumerate(self.handles):
            util = _quiet(nvml.nvmlDeviceGetUtilizationRates, handle)
            memory = _quiet(nvml.nvmlDeviceGetMemoryInfo, handle)
            power_mw = _quiet(nvml.nvmlDeviceGetPowerUsage, handle)
            out.append(
                {
                    "gpu": index,
                    "name": self.names[index],
                    "power_w": None if power_mw is None else power_mw / 1000.0,
                    "sm_pct": None if util is None else float(util.gpu),
                    "mem_pct": None if util is None else float(util.memory),
                    "mem_used_mib": None if memory is None else memory.used / MIB,
                    "sm_clock_mhz": _number(
                        _quiet(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
                    ),
                    "mem_clock_mhz": _number(
                        _quiet(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM)
                    ),
                    "temp_c": _number(
                        _quiet(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
                    ),
                }
            )
        return out

    def close(self) -> None:
        _quiet(self.module.nvmlShutdown)


def _quiet(function: Any, *args: Any) -> Any:
    try:
        return function(*args)
    except Exception:  # an unsupported query (e.g. power on some boards) is a missing value
        return None


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def nvml_status(module: ModuleType | None = None) -> str:
    """``"nvml"`` when NVML sees a GPU, else ``"no GPU: <reason>"``."""
    nvml, status = Nvml.open(module)
    if nvml is not None:
        nvml.close()
    return status


# --------------------------------------------------------------------------------------------
# The sampler


class TelemetrySampler:
    """Samples in a background thread into ``<out_dir>/telemetry-node<i>.jsonl``, one per node.

    ``roots`` maps a node index to the pids whose process trees are that node's processes. GPU
    samples go to the file of ``gpu_node`` (on the local runtime every "node" shares the host's
    GPUs; None: no GPU sampling).
    """

    def __init__(
        self,
        out_dir: Path,
        roots: dict[int, list[int]],
        interval_s: float = DEFAULT_INTERVAL_S,
        *,
        gpu_node: int | None = 0,
        nvml_module: ModuleType | None = None,
        proc_root: Path = Path("/proc"),
        node_names: dict[int, str] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("the telemetry interval must be positive")
        self.out_dir = Path(out_dir)
        self.interval_s = interval_s
        self.proc_root = proc_root
        self.trackers = {node: CpuTracker(pids) for node, pids in roots.items()}
        self.children_lists = has_children_lists(proc_root)
        self.node_names = node_names or {}
        self.gpu_node = gpu_node if gpu_node in roots else None
        self._nvml_module = nvml_module
        self.nvml: Nvml | None = None
        self.gpu_status = "not sampled"
        self._files: dict[int, IO[str]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples = 0
        self.errors: list[str] = []

    @staticmethod
    def file_name(node: int) -> str:
        return f"telemetry-node{node}.jsonl"

    def _write(self, node: int, record: dict[str, Any]) -> None:
        self._files[node].write(json.dumps(record, sort_keys=True) + "\n")

    def open(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if self.gpu_node is not None:
            self.nvml, self.gpu_status = Nvml.open(self._nvml_module)
        now_wall, now_mono = time.time(), time.monotonic()
        for node in self.trackers:
            self._files[node] = (self.out_dir / self.file_name(node)).open("w", buffering=1)
            self._write(
                node,
                {
                    "kind": "meta",
                    "v": FORMAT_VERSION,
                    "node": node,
                    "node_name": self.node_names.get(node, ""),
                    "host": socket.gethostname(),
                    "interval_s": self.interval_s,
                    "clock": "monotonic",
                    "gpu": (
                        "not sampled"
                        if self.gpu_node is None
                        else self.gpu_status
                        if node == self.gpu_node
                        else "sampled on another node"
                    ),
                    "gpus": self.nvml.names if (self.nvml and node == self.gpu_node) else [],
                    "wall": now_wall,
                    "mono": now_mono,
                },
            )

    def sample_once(self) -> None:
        wall, mono = time.time(), time.monotonic()
        if self.children_lists:
            roots = [pid for tracker in self.trackers.values() for pid in tracker.roots]
            table = read_tree_table(roots, self.proc_root)
        else:
            table = read_process_table(self.proc_root)
        for node, tracker in self.trackers.items():
            self._write(
                node, {"kind": "cpu", "wall": wall, "mono": mono, **tracker.sample(table, mono)}
            )
        if self.nvml is not None and self.gpu_node is not None:
            for reading in self.nvml.sample():
                self._write(self.gpu_node, {"kind": "gpu", "wall": wall, "mono": mono, **reading})
        self.samples += 1

    def _loop(self) -> None:
        while True:
            try:
                self.sample_once()
            except Exception as error:  # telemetry never fails a benchmark
                self.errors.append(f"{type(error).__name__}: {error}")
                if len(self.errors) > 10:
                    return
            if self._stop.wait(self.interval_s):
                return

    def start(self) -> TelemetrySampler:
        self.open()
        self._thread = threading.Thread(target=self._loop, name="dlperf-telemetry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        """Stop, take one last sample, close the files; returns facts for the repeat record."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._files:
            try:
                self.sample_once()
            except Exception as error:
                self.errors.append(f"{type(error).__name__}: {error}")
        for handle in self._files.values():
            handle.close()
        self._files.clear()
        if self.nvml is not None:
            self.nvml.close()
            self.nvml = None
        return {
            "files": [self.file_name(node) for node in sorted(self.trackers)],
            "interval_s": self.interval_s,
            "gpu": self.gpu_status,
            "samples": self.samples,
            "errors": self.errors,
        }


def start_for_processes(
    out_dir: Path, pids: list[int], interval_s: float | None = None
) -> TelemetrySampler | None:
    """A started sampler with one node per pid (the local runtime's hook); None when off.

    Never raises: a sampler that cannot start leaves the repeat without telemetry.
    """
    interval = interval_from_env() if interval_s is None else interval_s
    if interval <= 0 or not pids:
        return None
    try:
        return TelemetrySampler(out_dir, {i: [pid] for i, pid in enumerate(pids)}, interval).start()
    except Exception as error:  # pragma: no cover - e.g. an unwritable folder
        print(f"dlperf: telemetry off for this repeat ({error})", file=sys.stderr)
        return None


# --------------------------------------------------------------------------------------------
# Command line (remote nodes, containers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m driver.telemetry.sampler",
        description="Sample NVML and a process tree into telemetry-node<i>.jsonl. Either watch "
        "running pids (--pid, until they exit or SIGTERM) or run a command (after --) and "
        "exit with its exit code.",
    )
    parser.add_argument("--out", required=True, help="folder for telemetry-node<NODE>.jsonl")
    parser.add_argument("--node", type=int, default=0)
    parser.add_argument("--pid", type=int, action="append", default=[])
    parser.add_argument("--interval", type=float, default=None)
    parser.add_argument("--no-gpu", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if bool(command) == bool(args.pid):
        parser.error("give either --pid or a command after --")
    interval = interval_from_env() if args.interval is None else args.interval
    child = subprocess.Popen(command) if command else None
    pids = [child.pid] if child else args.pid
    stopping = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if child is not None and child.poll() is None:
            child.send_signal(signum)
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    sampler = None
    if interval > 0:
        sampler = TelemetrySampler(
            Path(args.out), {args.node: pids}, interval, gpu_node=None if args.no_gpu else args.node
        ).start()
    while not stopping.is_set():
        if child is not None and child.poll() is not None:
            break
        if child is None and not read_tree_table(pids):
            break
        stopping.wait(0.1)
    code = child.wait() if child is not None else 0
    if sampler is not None:
        sampler.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
