"""The node scan (``dlperf nodes``): the same 1n1g case on every node at the same time, each
node's throughput against the median of the nodes, the slow ones named; then the all-reduce
probe on pairs of nodes, each node's link against the others', the slow link named.

On a real cluster the usual reason a multi-node figure is low is one slow node (a throttled GPU,
a bad NIC, a noisy neighbour); a multi-node run only shows the low figure. Running one device's
case on every node at once (so every node sees the same conditions) names the node: a node more
than ``slow_below`` under the median is SLOW, a node where the case failed FAILED, the others
ok. Each node's repeats go to their own session folder under the scan's folder (its records,
logs and provenance, as for any run). Ctrl-C stops every node's repeat the way it stops a run.

A bad NIC or cable does not show in a one-device case: the pairs do. Node i and node i+1 (mod
N) run the all-reduce probe (``probes.py``: 2 nodes x 1 process) through a runtime of the
same kind that sees only that pair, disjoint pairs at the same time, in rounds (a ring of N
nodes: 2 rounds when N is even, 3 when odd), so every node is in two pairs (one when N = 2).
Each pair's probe log and result go to ``<scan>/<a>+<b>/probes/`` (``+`` is in no node name).
A node's link is judged by its pairs' bus bandwidth against the reference, the median over the
nodes of each node's pairs' median: a node whose every pair is more than ``slow_below`` under
it is a SLOW link (a neighbour of a slow node has one fast pair, so it is not named). The
reference is per node, not per pair, so that three nodes can name one: with N = 3 the slow
node is in two of the three pairs, and the median pair is a slow one. With N = 2 there is one
pair: its figure is shown, but no pair to compare with says which node it would be. A failed
probe is a FAILED pair, named with why; a node whose every pair failed is FAILED.
"""

from __future__ import annotations

import ctypes
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from tabulate import tabulate

from driver.cluster.inventory import Inventory
from driver.core.runner import run_cases
from driver.diagnose.probes import run_allreduce_probe
from driver.model.case import Case
from driver.model.results import Session
from driver.runtimes.base import Runtime, RuntimeConfigError
from driver.runtimes.slurm.job import Failure as SlurmJobFailure
from driver.runtimes.slurm.runtime import SlurmRuntime

SLOW_BELOW = 0.05  # a node this far under the median of the nodes is slow
# A node whose every pair is this far under the median pair is a slow link: looser than the
# throughput's, as small all-reduces between pairs running at once spread wider.
SLOW_LINK_BELOW = 0.25
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


def slurm_scan_nodes(
    runtime: SlurmRuntime, root: Path, count: int | None
) -> tuple[list[str], Callable[[tuple[str, ...]], Runtime]]:
    """Under Slurm, the nodes come from the job, not an inventory: the enclosing allocation's
    (its first ``count``), or a job of ``count`` nodes submitted for the scan (cancelled when
    ``runtime`` closes). Returns the nodes' names and a function that gives a runtime whose
    steps run on the named nodes only (one node: the 1n1g case; two: the pair's probe), each a
    step of that same job."""
    job = runtime.job
    if job.inside_allocation:
        held = job.allocation or job.enclosing()
        count = count or len(held.nodes)
    elif count is None:
        raise RuntimeConfigError(
            "dlperf nodes --runtime slurm outside an allocation: say how many nodes to scan "
            "(--nodes N), or run it inside `salloc -N N`"
        )
    try:
        allocation = job.ensure(count, root, runtime.config)
    except SlurmJobFailure as failure:
        raise RuntimeConfigError(f"dlperf nodes: {failure.detail}") from None
    nodes = allocation.nodes[:count]

    def on(names: tuple[str, ...]) -> Runtime:
        view = SlurmRuntime(
            config=runtime.config, printer=runtime.printer, python_override=runtime.python_override
        )
        view.inventory = runtime.inventory
        where = [allocation.nodes.index(name) for name in names]
        # A view of the scan's job, never its owner: closing it cancels nothing.
        view.allocation = replace(
            allocation,
            nodes=list(names),
            addresses=[allocation.addresses[i] for i in where],
            owned=False,
            containers=set(),
        )
        return view

    return nodes, on


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

    run_at_once(
        {node: partial(scan, node, runtime) for node, runtime in runtimes.items()},
        printer,
        "every node's repeat in flight is stopped and recorded",
    )
    return [results[node] for node in runtimes]


def run_at_once(
    jobs: dict[str, Callable[[], None]], printer: Callable[[str], None], on_interrupt: str
) -> None:
    """Each job in a thread of its own, all at once; Ctrl-C is raised in every thread (each
    runtime takes its own interrupt path), then here once they have all ended."""
    threads = [threading.Thread(target=job, name=f"scan-{name}") for name, job in jobs.items()]
    for thread in threads:
        thread.start()
    try:
        # Polled, not join(): a Ctrl-C that lands inside Thread.join() can leave that thread
        # looking finished while it still runs (seen here: its repeat was never stopped).
        while any(thread.is_alive() for thread in threads):
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        printer(f"interrupted: {on_interrupt}")
        for thread in threads:
            interrupt(thread)
        while any(thread.is_alive() for thread in threads):
            time.sleep(POLL_S)
        raise


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


# -- pairs: the all-reduce probe between two nodes ---------------------------------------------
PAIR_TOPOLOGY = "2n2g"  # two nodes, one process each: the link between them, not their devices
PAIR_SIZES_MB = "1,8"  # small: a scan wants a comparison between pairs, not the peak
PAIR_ITERS, PAIR_WARMUP = 10, 2
PAIR_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class PairResult:
    nodes: tuple[str, str]
    round: int  # pairs of one round run at the same time; rounds one after the other
    busbw_gbps: float | None  # at the largest probed size
    at_bytes: int | None = None
    failure: str = ""  # why the probe failed ("" when it ran)

    @property
    def name(self) -> str:
        """``a+b``: its folder under the scan's (no node name holds a ``+``)."""
        return "+".join(self.nodes)


@dataclass(frozen=True)
class LinkVerdict:
    node: str
    pairs: tuple[PairResult, ...]  # the pairs this node was in
    median: float | None  # the median busbw of its pairs that ran
    ratio: float | None  # median / the reference (None: nothing to compare with)
    verdict: str  # ok | SLOW link | FAILED | one pair | -
    detail: str = ""

    @property
    def flagged(self) -> bool:
        return self.verdict in ("SLOW link", "FAILED")


def ring_pairs(nodes: list[str]) -> list[tuple[str, str]]:
    """Node i with node i+1 (mod N): every node in two pairs (N = 2: one pair, N = 1: none)."""
    if len(nodes) < 3:
        return [(nodes[0], nodes[1])] if len(nodes) == 2 else []
    return [(nodes[i], nodes[(i + 1) % len(nodes)]) for i in range(len(nodes))]


def pair_rounds(pairs: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """The pairs in rounds of disjoint pairs: each pair in the first round where neither of its
    nodes is busy (a ring: 2 rounds for an even N, 3 for an odd one)."""
    rounds: list[list[tuple[str, str]]] = []
    for pair in pairs:
        for members in rounds:
            if not {node for other in members for node in other} & set(pair):
                members.append(pair)
                break
        else:
            rounds.append([pair])
    return rounds


def pair_runtimes(
    runtime: Runtime, inventory: Inventory, pairs: list[tuple[str, str]]
) -> dict[tuple[str, str], Runtime]:
    """A runtime of the same kind per pair, each seeing an inventory of that pair alone (the
    first node the probe's master), so a 2-node probe lands on it."""
    by_name = {node.name: node for node in inventory.nodes}
    return {
        pair: type(runtime)(replace(inventory, nodes=tuple(by_name[n] for n in pair)))  # type: ignore[call-arg]
        for pair in pairs
    }


def probe_pairs(
    runtimes: dict[tuple[str, str], Runtime],
    root: Path,
    *,
    sizes_mb: str = PAIR_SIZES_MB,
    iters: int = PAIR_ITERS,
    warmup: int = PAIR_WARMUP,
    timeout_s: float = PAIR_TIMEOUT_S,
    printer: Callable[[str], None] = print,
) -> list[PairResult]:
    """The all-reduce probe on every pair, round by round, the pairs of a round at the same
    time; each into ``root/<a>+<b>`` (a session: its probe log and result under ``probes/``).
    A probe that fails is that pair's FAILED verdict, never an exception here (Ctrl-C aside)."""
    lock = threading.Lock()
    results: dict[tuple[str, str], PairResult] = {}

    def probe(pair: tuple[str, str], round_index: int, runtime: Runtime) -> None:
        name = "+".join(pair)
        busbw, at_bytes, failure = None, None, ""
        try:
            session = Session.open(root / name, {"kind": "node-scan-pair", "nodes": list(pair)})
            result = run_allreduce_probe(
                session.root, runtime, PAIR_TOPOLOGY, sizes_mb=sizes_mb, iters=iters,
                warmup=warmup, timeout_s=timeout_s,
            )  # fmt: skip
            busbw, at_bytes = result["busbw_gbps"], result["busbw_at_bytes"]
        except KeyboardInterrupt:  # sent by the main thread: the runtime has cleaned up
            failure = "interrupted"
        except Exception as error:  # noqa: BLE001 - the pair's verdict names it
            failure = f"{type(error).__name__}: {error}"
        with lock:
            results[pair] = PairResult(pair, round_index, busbw, at_bytes, failure)
            if failure:
                printer(f"[{name}] probe FAILED: {failure}")
            else:
                printer(f"[{name}] all-reduce busbw {busbw:.4f} GB/s at {at_bytes} bytes")

    for round_index, members in enumerate(pair_rounds(list(runtimes)), start=1):
        printer(f"pairs, round {round_index}: {', '.join('+'.join(p) for p in members)}")
        run_at_once(
            {"+".join(p): partial(probe, p, round_index, runtimes[p]) for p in members},
            printer,
            "every pair's probe in flight is stopped",
        )
    return [results[pair] for pair in runtimes]


def link_reference(pairs: list[PairResult]) -> tuple[dict[str, float], float | None]:
    """Each node's median busbw over its pairs that ran, and the median of those (the
    reference every pair is held against)."""
    nodes = sorted({node for pair in pairs for node in pair.nodes})
    medians = {
        node: statistics.median(ran)
        for node in nodes
        if (ran := [p.busbw_gbps for p in pairs if node in p.nodes and p.busbw_gbps is not None])
    }
    return medians, (statistics.median(medians.values()) if medians else None)


def judge_links(
    nodes: list[str], pairs: list[PairResult], slow_below: float = SLOW_LINK_BELOW
) -> list[LinkVerdict]:
    """Each node's link: SLOW when every pair it was in that ran is more than ``slow_below``
    under the reference; FAILED when every pair it was in failed."""
    medians, reference = link_reference(pairs)
    verdicts = []
    for node in nodes:
        mine = tuple(p for p in pairs if node in p.nodes)
        failed = [f"pair {p.name} FAILED" for p in mine if p.failure]
        ran = [p for p in mine if p.busbw_gbps is not None]
        median = medians.get(node)
        if not mine:
            verdicts.append(LinkVerdict(node, mine, None, None, "-", "no other node to pair"))
        elif not ran:
            detail = f"every pair's probe failed ({', '.join(p.name for p in mine)})"
            verdicts.append(LinkVerdict(node, mine, None, None, "FAILED", detail))
        elif len(pairs) == 1:
            detail = "one pair only: a slow link could be either node's (a third node tells)"
            verdicts.append(LinkVerdict(node, mine, median, None, "one pair", detail))
        else:
            assert median is not None and reference  # this node has a pair that ran
            bound = (1 - slow_below) * reference
            slow = all(p.busbw_gbps < bound for p in ran)  # type: ignore[operator]
            notes = [f"every pair more than {slow_below:.0%} under the median"] if slow else []
            verdicts.append(
                LinkVerdict(node, mine, median, median / reference, "SLOW link" if slow else "ok",
                            "; ".join(notes + failed))
            )  # fmt: skip
    return verdicts


def pair_table(pairs: list[PairResult]) -> str:
    _medians, reference = link_reference(pairs)
    rows = [
        [
            pair.name,
            pair.round,
            f"{pair.busbw_gbps:.4f}" if pair.busbw_gbps is not None else "-",
            f"{pair.at_bytes / 1e6:g}" if pair.at_bytes else "-",
            f"{pair.busbw_gbps / reference:.3f}"
            if pair.busbw_gbps is not None and reference and len(pairs) > 1
            else "-",
            f"FAILED: {pair.failure}" if pair.failure else "ran",
        ]
        for pair in pairs
    ]
    headers = ["pair", "round", "busbw GB/s", "at MB", "vs median", "probe"]
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


def table(
    verdicts: list[NodeVerdict],
    slow_below: float = SLOW_BELOW,
    links: list[LinkVerdict] | None = None,
) -> str:
    """One row per node: its throughput columns (when the 1n1g case ran) beside its link
    columns (when the pairs ran)."""
    by_node = {v.result.node: v for v in verdicts}
    link_of = {link.node: link for link in links or []}
    headers: list[str] = ["node"]
    if verdicts:
        headers += ["samples/s (median)", "vs median", "repeats", "verdict"]
    if links is not None:
        headers += ["busbw GB/s (pairs' median)", "vs median", "link"]
    headers.append("detail")
    rows = []
    for node in [*by_node, *(n for n in link_of if n not in by_node)]:
        row: list[object] = [node]
        details = []
        if verdicts:
            v = by_node.get(node)
            if v is None:
                row += ["-", "-", 0, "-"]
            else:
                row += [
                    f"{v.result.median:.2f}" if v.result.median is not None else "-",
                    f"{v.ratio:.3f}" if v.ratio is not None else "-",
                    len(v.result.throughputs),
                    v.verdict,
                ]
                if v.result.failure or v.verdict == "SLOW":
                    details.append(
                        v.result.failure or f"more than {slow_below:.0%} under the median"
                    )
        if links is not None:
            link = link_of.get(node)
            if link is None:
                row += ["-", "-", "-"]
            else:
                row += [
                    f"{link.median:.4f}" if link.median is not None else "-",
                    f"{link.ratio:.3f}" if link.ratio is not None else "-",
                    link.verdict,
                ]
                if link.detail:
                    details.append(f"link: {link.detail}")
        rows.append([*row, "; ".join(details)])
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)
