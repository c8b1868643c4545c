"""``dlperf selftest``: run the calibration workload through the whole kit, compare with truth.

The workload's steps end on exact deadlines, so its nominal throughput is known
(batch x processes / step time). Running it through the same planner, launcher, runtime,
parser and statistics as a real benchmark measures the kit's own error.

A rank the host wakes late at a window's end (a busy scheduler, a hypervisor's stolen time:
1-2 ms seen on 2-core VMs) delivers less than the nominal rate, and no measurement of it could
say otherwise. So the truth the kit is held to is the rate the workload delivered by its own
clock (``WakeClock``: when its waits at the window's two ends returned, every rank, as a device
clock would time a GPU's window); the kit's error is its figure against that, and the host's
lateness (nominal against delivered) is printed beside it, the machine's and not the kit's.

Its steps also take a known time, so the rest of each repeat's wall time is the kit's overhead:
starting the processes (and containers, over SSH), collecting the logs, parsing, recording.
``dlperf selftest --runtime docker --inventory FILE`` measures it across nodes.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from driver.core.runner import run_cases
from driver.core.session import seal_finished
from driver.core.summary import summarize
from driver.model.case import Case, Topology
from driver.model.measure import device_clock_duration, parse_logs
from driver.model.results import RepeatLogs, RepeatRecord, Session
from driver.runtimes.base import Runtime
from driver.runtimes.local import LocalRuntime

ERROR_BOUND = 0.0005  # the kit must be within 0.05% of the truth
# Quick by default; `--topologies` rehearses the cluster's shape (1n8g, 2n16g, 4n32g, ...).
DEFAULT_TOPOLOGIES = ("1n1g", "1n2g", "2n2g")
WARMUP_STEPS = 5


class SelftestError(RuntimeError):
    """A calibration repeat failed: no error to measure (the CLI prints it in one line)."""


@dataclass(frozen=True)
class SelftestResult:
    topology: str
    truth: float  # nominal: batch x processes / step time
    measured: float  # the kit's figure: the median over the repeats
    # The median over the repeats of the rate by the workload's own clock (its ``device-window``
    # records); None where a repeat's logs carry none (the nominal truth stands in).
    delivered: float | None = None
    # Median over repeats of (repeat wall time - the workload's own steps x step time): process
    # (and container) start, log collection, parsing and the record, per repeat.
    overhead_s: float = 0.0
    # Median over repeats of each phase timing (``*_s``) the runtime recorded in the record's
    # extra (SSH runtimes: extra["timings"]; slurm: extra["slurm"]["timings"]).
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def reference(self) -> float:
        """What the kit's figure is held to: the delivered rate, else the nominal one."""
        return self.delivered if self.delivered is not None else self.truth

    @property
    def error(self) -> float:
        """The kit's own error: its figure against what the workload delivered."""
        return abs(self.measured - self.reference) / self.reference

    @property
    def host_lateness(self) -> float:
        """How much of the nominal rate the host's late wake-ups took (the machine's share)."""
        return (self.truth - self.reference) / self.truth

    @property
    def passed(self) -> bool:
        return self.error < ERROR_BOUND


def calibration_cases(
    step_time: float, batch: int, topologies: list[str], repeats: int, measured_steps: int
) -> list[Case]:
    return [
        Case(
            model="calibration",
            framework="calibration",
            topology=Topology.parse(label),
            batch_size=batch,
            precision="fp32",
            dataset="synthetic",
            warmup_steps=WARMUP_STEPS,
            measured_steps=measured_steps,
            total_steps=WARMUP_STEPS + measured_steps,
            repeats=repeats,
            timeout_s=120 + 2 * (WARMUP_STEPS + measured_steps) * step_time,
            options={"step_time": step_time},
            profile="selftest",
        )
        for label in topologies
    ]


def phase_timings(extra: dict) -> dict[str, float]:
    """The ``*_s`` phase timings a runtime recorded in a record's ``extra``, whatever their
    names (the runtimes add phases over time)."""
    found: dict[str, float] = {}
    # The SSH runtimes also record each node's own process time: the longest is the repeat's
    # node side (start-up, steps, exit), which the cost curve sets apart from the driver's.
    # And the CPU time each node's processes used (the process runtime): the median node's is
    # ``node_cpu_s``, the sum over the nodes ``nodes_cpu_s``.
    nodes = extra.get("nodes")
    if isinstance(nodes, dict):

        def each(key: str) -> list[float]:
            return [
                float(facts[key])
                for facts in nodes.values()
                if isinstance(facts, dict) and isinstance(facts.get(key), int | float)
            ]

        if seconds := each("process_seconds"):
            found["nodes_process_s"] = max(seconds)
        if cpu := each("process_cpu_seconds"):
            found["node_cpu_s"] = statistics.median(cpu)
            found["nodes_cpu_s"] = sum(cpu)
    for timings in (extra.get("timings"), (extra.get("slurm") or {}).get("timings")):
        if isinstance(timings, dict):
            found.update(
                (key, float(value))
                for key, value in timings.items()
                if key.endswith("_s") and isinstance(value, int | float)
            )
    return found


def median_phases(extras: list[dict]) -> dict[str, float]:
    """Per phase, the median over the repeats that recorded it."""
    by_phase: dict[str, list[float]] = {}
    for extra in extras:
        for key, value in phase_timings(extra).items():
            by_phase.setdefault(key, []).append(value)
    return {key: statistics.median(values) for key, values in by_phase.items()}


def delivered_rate(repeats: list[tuple[RepeatRecord, Path]]) -> float | None:
    """The median over ``repeats`` of samples / the window by the workload's own clock (every
    rank's ``device-window``, the longest, as the kit takes the longest host window); None if
    a repeat's logs lack one."""
    rates = []
    for record, folder in repeats:
        parsed = parse_logs("dlperf-jsonl", RepeatLogs.read(folder).texts)
        seconds = device_clock_duration(parsed)
        if seconds is None or record.measurement is None:
            return None
        rates.append(record.measurement.samples / seconds)
    return statistics.median(rates) if rates else None


def _results(
    records: list[tuple[Case, RepeatRecord, Path]], batch: int, step_time: float
) -> list[SelftestResult]:
    """Each topology's measured throughput against the truth the calibration workload sets
    (``batch`` samples per device every ``step_time`` seconds); ``records``: the session's
    (case, record, folder)."""
    return [
        SelftestResult(
            topology=s.case.topology.label,
            truth=batch * s.case.topology.world_size / step_time,
            measured=s.stats.median,
            delivered=delivered_rate([(r, folder) for c, r, folder in records
                                      if c.id == s.case.id]),  # fmt: skip
            overhead_s=statistics.median(
                r.finished_at - r.started_at - c.total_steps * step_time
                for c, r, _ in records
                if c.id == s.case.id
            ),
            phases=median_phases([r.extra for c, r, _ in records if c.id == s.case.id]),
        )
        for s in summarize((c, r) for c, r, _ in records)
    ]


def _result_line(result: SelftestResult) -> str:
    delivered = (
        f", delivered {result.delivered:.2f} (the host woke its ranks "
        f"{max(0.0, result.host_lateness):.4%} late)"
        if result.delivered is not None
        else ""
    )
    return (
        f"selftest {result.topology}: truth {result.truth:.2f} samples/s{delivered}"
        f", measured {result.measured:.2f}, error {result.error:.4%} "
        f"({'ok' if result.passed else 'FAIL'}, bound {ERROR_BOUND:.2%}); "
        f"driver overhead {result.overhead_s:.2f} s per repeat"
    )


def run_selftest(
    step_time: float = 0.02,
    batch: int = 32,
    topologies: tuple[str, ...] = DEFAULT_TOPOLOGIES,
    repeats: int = 3,
    measured_steps: int = 100,
    results_dir: Path | None = None,
    printer=print,  # noqa: ANN001
    runtime: Runtime | None = None,
) -> list[SelftestResult]:
    cases = calibration_cases(step_time, batch, list(topologies), repeats, measured_steps)
    runtime = runtime or LocalRuntime()
    with tempfile.TemporaryDirectory(prefix="dlperf-selftest-") as scratch:
        session = Session.open(results_dir or Path(scratch) / "selftest", {"kind": "selftest"})
        started = time.monotonic()
        try:
            summary = run_cases(cases, session, runtime, printer=lambda _line: None)
        finally:
            runtime.disconnect()  # before the seal, as a run's (a Slurm job's output ends)
        elapsed = time.monotonic() - started
        if not seal_finished(session.root):
            raise SelftestError(f"{session.root}: the session could not be sealed (above)")
        if not summary.ok:
            failed = "; ".join(
                f"{case_id} repeat {repeat}: {verdict} {' '.join(detail.split())}"
                for case_id, repeat, verdict, detail in summary.failed
            )
            raise SelftestError(f"calibration runs failed: {failed}")
        results = _results(list(session.records()), batch, step_time)
    for result in results:
        printer(_result_line(result))
    steps_s = sum(c.repeats * c.total_steps * step_time for c in cases)
    printer(
        f"selftest on the {runtime.name} runtime: {elapsed:.1f} s for {len(cases)} cases x "
        f"{repeats} repeats, of which {steps_s:.1f} s in the workload's steps; driver overhead "
        f"{(elapsed - steps_s) / len(cases):.2f} s per case ({repeats} repeats, with preparation)"
    )
    return results
