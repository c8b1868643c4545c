"""The node scan (``dlperf nodes``): the same 1n1g case on every node at the same time, each
node's throughput against the median of the nodes, the slow ones named.

On a real cluster the usual reason a multi-node figure is low is one slow node (a throttled GPU,
a bad NIC, a noisy neighbour); a multi-node run only shows the low figure. Running one device's
case on every node at once (so every node sees the same conditions) names the node: a node more
than ``slow_below`` under the median is SLOW, a node where the case failed FAILED, the others
ok. Each node's repeats go to their own session folder under the scan's folder (its records,
logs and provenance, as for any run). Ctrl-C stops every node's repeat the way it stops a run.
"""

from __future__ import annotations

import ctypes
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from tabulate import tabulate

from driver.cluster.inventory import Inventory
from driver.core.case import Case
from driver.core.results import Session
from driver.core.runner import run_cases
from driver.runtimes.base import Runtime

SLOW_BELOW = 0.05  # a node this far under the median of the nodes is slow
POLL_S = 0.1


@dataclass(frozen=True)
class NodeResult:
    node: str
    throughputs: tuple[float, ...]  # one per finished repeat
    failure: str = ""  # why the case failed on this node ("" when it ran)

    @property
    def median(self) -> float | None:
        return statistics.median(self.throughputs) if self.throughputs else None


@dataclass(frozen=True)
class NodeVerdict:
    result: NodeResult
    ratio: float | None  # this node's median / the median of the nodes
    verdict: str  # ok | SLOW | FAILED


def one_node_runtimes(runtime: Runtime, inventory: Inventory) -> dict[str, Runtime]:
    """A runtime of the same kind per node, each seeing an inventory of that node alone, so a
    1n1g case lands on it."""
    return {
        node.name: type(runtime)(replace(inventory, nodes=(node,)))  # type: ignore[call-arg]
        for node in inventory.nodes
    }


def scan_nodes(
    case: Case,
    runtimes: dict[str, Runtime],
    root: Path,
    printer: Callable[[str], None] = print,
) -> list[NodeResult]:
    """Run ``case`` (one device) on every node at the same time, each into ``root/<node>``."""
    if case.topology.world_size != 1:
        raise ValueError(f"the node scan runs a 1n1g case, not {case.topology.label}")
    lock = threading.Lock()
    results: dict[str, NodeResult] = {}

    def scan(node: str, runtime: Runtime) -> None:
        def say(line: str) -> None:
            with lock:
                printer(f"[{node}] {line}")

        throughputs: tuple[float, ...] = ()
        try:
            session = Session.open(root / node, {"kind": "node-scan", "node": node})
            summary = run_cases([case], session, runtime, printer=say, progress="plain")
            throughputs = tuple(
                record.throughput for _case, record, _dir in session.records() if record.ok
            )
            failure = "; ".join(f"{verdict}: {detail}" for *_, verdict, detail in summary.failed)
        except KeyboardInterrupt:  # sent by the main thread: the runtime has cleaned up
            failure = "interrupted"
        except Exception as error:  # noqa: BLE001 - the node's verdict names it
            failure = f"{type(error).__name__}: {error}"
        with lock:
            results[node] = NodeResult(node, throughputs, failure)

    threads = [
        threading.Thread(target=scan, args=(node, runtime), name=f"scan-{node}")
        for node, runtime in runtimes.items()
    ]
    for thread in threads:
        thread.start()
    try:
        # Polled, not join(): a Ctrl-C that lands inside Thread.join() can leave that thread
        # looking finished while it still runs (seen here: its repeat was never stopped).
        while any(thread.is_alive() for thread in threads):
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        printer("interrupted: every node's repeat in flight is stopped and recorded")
        for thread in threads:
            interrupt(thread)
        while any(thread.is_alive() for thread in threads):
            time.sleep(POLL_S)
        raise
    return [results[node] for node in runtimes]


def interrupt(thread: threading.Thread) -> None:
    """Raise KeyboardInterrupt inside ``thread``, as Ctrl-C does in the main thread: its
    runtime then takes its own interrupt path (the repeat recorded as interrupted, every
    process or container of it stopped). Delivered when the thread next runs Python code (the
    runtimes' watch loops poll)."""
    if thread.ident is None or not thread.is_alive():
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread.ident), ctypes.py_object(KeyboardInterrupt)
    )


def judge(results: list[NodeResult], slow_below: float = SLOW_BELOW) -> list[NodeVerdict]:
    """Each node against the median of the nodes that ran."""
    medians = [r.median for r in results if r.median is not None]
    reference = statistics.median(medians) if medians else None
    verdicts = []
    for result in results:
        if result.failure or result.median is None or not reference:
            verdicts.append(NodeVerdict(result, None, "FAILED"))
            continue
        ratio = result.median / reference
        verdicts.append(NodeVerdict(result, ratio, "SLOW" if ratio < 1 - slow_below else "ok"))
    return verdicts


def table(verdicts: list[NodeVerdict], slow_below: float = SLOW_BELOW) -> str:
    rows = [
        [
            v.result.node,
            f"{v.result.median:.2f}" if v.result.median is not None else "-",
            f"{v.ratio:.3f}" if v.ratio is not None else "-",
            len(v.result.throughputs),
            v.verdict,
            v.result.failure
            or (f"more than {slow_below:.0%} under the median" if v.verdict == "SLOW" else ""),
        ]
        for v in verdicts
    ]
    headers = ["node", "samples/s (median)", "vs median", "repeats", "verdict", "detail"]
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)
