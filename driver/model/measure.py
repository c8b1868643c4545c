"""The measurement method: window throughput per repeat, statistics per case.

Throughput of a repeat = global samples in the measured window / window duration, where the
window starts at the end of the last warm-up step (the start of the first measured step) and
ends at the end of the last measured step. Each rank's duration comes from its own clock (no
cross-node clock comparison); the job's duration is the slowest rank's, so a straggler counts.
Never a mean of per-step rates.

Every repeat with several ranks also says who was slowest (``STRAGGLER_FIELDS``): the rank with
the longest window and how much longer it is than the median rank's, and, across nodes, the node
whose ranks' median window is longest (a rank's node is the ``node_rank`` its own log header
states: node<i>.log, the record's i-th command) and how much longer that is than the other
nodes' ranks' median window. Durations only, each from its own rank's clock, like the window.

:func:`measure_logs` is the one path from raw logs to a measurement (parser, world-size check,
window): the runner, ``dlperf report``, the release and the audit all call it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    computed_field,
    model_serializer,
    model_validator,
)

from driver.parsers.base import LogParseError, ParsedLog, RankLog, Window
from driver.schema import StrictModel

if TYPE_CHECKING:
    from driver.model.case import Case

__all__ = ["LogParseError", "Window"]  # Window lives beside the parsers (they check it too)

UNSTABLE_CV = 0.02  # a case whose repeats vary more than 2% is flagged in every table
INTERVALS = 10
# Who held a repeat back: facts of the records (re-derived from the logs by the door) and of
# ``dlperf report``, not columns of a release's results files (``RepeatMeasurement.columns``).
STRAGGLER_FIELDS = (
    "slowest_rank",
    "slowest_rank_excess",
    "slowest_node",
    "slowest_node_ranks",
    "slowest_node_excess",
)
# The largest peak memory of any rank, as the end records give it (framework's count and its
# source; NVML's where every rank had it): per device, for the tables. Like the straggler facts,
# facts of the records and of the tables, not columns of a release's results files.
PEAK_MEMORY_FIELDS = ("peak_memory_bytes", "peak_memory_source", "peak_memory_nvml_bytes")
# The fields a record written before them does not hold: the door fills them from its logs.
LOG_FACT_FIELDS = (*STRAGGLER_FIELDS, *PEAK_MEMORY_FIELDS)


class RepeatMeasurement(StrictModel):
    throughput: Annotated[float, Field(gt=0)]  # global samples / s
    samples: Annotated[int, Field(ge=0)]  # global samples in the window
    duration_s: Annotated[float, Field(ge=0)]  # slowest rank's window
    ranks: Annotated[int, Field(ge=0)]  # ranks that logged
    world_size: Annotated[int, Field(ge=1)]
    reported_by_source: bool = False  # the source printed a rate; no timestamps were used
    warmup_steps: Annotated[int, Field(ge=0)] = 0
    measured_steps: Annotated[int, Field(ge=0)] = 0
    # The Dell method's stability check: CV of the throughput of slices of the window (rank 0's
    # clock, slice bounds at logged steps); None where the log has too few points to slice.
    interval_cv: Annotated[float, Field(ge=0)] | None = None
    # The straggler facts (None with one rank, or where the log holds one rank's steps only or
    # just a rate): the rank whose window is the job's duration, and its window over the
    # median rank's window, minus 1 (0.05: 5% longer).
    slowest_rank: Annotated[int, Field(ge=0)] | None = None
    slowest_rank_excess: Annotated[float, Field(ge=0)] | None = None
    # With ranks on several nodes whose headers state their node_rank: the node (its index:
    # node<i>.log, the record's i-th command) whose ranks' median window is longest, its ranks,
    # and that median over the median window of the other nodes' ranks, minus 1.
    slowest_node: Annotated[int, Field(ge=0)] | None = None
    # a list, as JSON reads it back (a dump of the measurement equals its record's)
    slowest_node_ranks: list[Annotated[int, Field(ge=0)]] | None = None
    slowest_node_excess: Annotated[float, Field(ge=0)] | None = None
    # ``PEAK_MEMORY_FIELDS``: None where a rank's end record states no peak memory.
    peak_memory_bytes: Annotated[int, Field(ge=0)] | None = None
    peak_memory_source: str | None = None
    peak_memory_nvml_bytes: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _derived_field_is_not_input(cls, data: Any) -> Any:
        # ``interval_unstable`` is written (computed) but follows from interval_cv on read.
        if isinstance(data, dict) and "interval_unstable" in data:
            data = {k: v for k, v in data.items() if k != "interval_unstable"}
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def interval_unstable(self) -> bool:
        return self.interval_cv is not None and self.interval_cv > UNSTABLE_CV

    @model_serializer(mode="wrap")
    def _name_only_who_is_known(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A straggler fact is written only where there is one to state (several ranks, node
        # facts in the headers): a record written before these fields existed, or of one rank,
        # reads and writes back as it was, byte for byte.
        data = handler(self)
        for name in LOG_FACT_FIELDS:
            if data.get(name) is None:
                data.pop(name, None)
        return data

    @classmethod
    def columns(cls) -> tuple[str, ...]:
        """The columns of a release's results files: every field but the straggler and peak
        memory facts (the released versions were written before them and render as published;
        records, ``dlperf report`` and the tables carry them)."""
        fields = [name for name in cls.model_fields if name not in LOG_FACT_FIELDS]
        return (*fields, *cls.model_computed_fields)

    def filled_from(self, derived: RepeatMeasurement) -> RepeatMeasurement:
        """This measurement as read from a record, with the straggler facts its file does not
        hold taken from ``derived`` (the logs' measurement): a record written before those
        fields existed claims nothing about them, so it still agrees with its logs, and every
        reader gets the facts from the logs. A field the file holds stays as written (a record
        that misstates it disagrees with its logs)."""
        missing = {
            name: getattr(derived, name)
            for name in LOG_FACT_FIELDS
            if name not in self.model_fields_set
        }
        return self.model_copy(update=missing) if missing else self


def slice_cv(log: RankLog, window: Window, intervals: int = INTERVALS) -> float | None:
    """CV of throughput over up to ``intervals`` slices of the window, bounded by the steps the
    log holds: every step for our logs (equal slices), every N steps for upstream logs (as many
    slices as the log has intervals, up to ``intervals``). Only points timed after a device sync
    bound a slice (``step_sync: boundary`` logs have two: no CV). None with fewer than 2 slices."""
    by_step = {point.step: point for point in log.points}
    held = sorted(s for s, p in by_step.items() if window.first <= s <= window.last and p.synced)
    if not held or held[0] != window.first or held[-1] != window.last:
        return None
    slices = min(intervals, len(held) - 1)
    if slices < 2:
        return None
    bounds = [held[round(i * (len(held) - 1) / slices)] for i in range(slices + 1)]
    rates = []
    for start, end in zip(bounds, bounds[1:], strict=False):
        samples = sum(p.samples for p in log.points if start < p.step <= end)
        duration = by_step[end].t - by_step[start].t
        if duration <= 0:
            return None
        rates.append(samples / duration)
    mean = statistics.fmean(rates)
    return statistics.pstdev(rates) / mean if mean else None


def _rank_window(log: RankLog, window: Window) -> tuple[int, float]:
    window.check(log.rank, (point.step for point in log.points))
    by_step = {point.step: point for point in log.points}
    start, end = by_step[window.first], by_step[window.last]
    samples = sum(p.samples for p in log.points if window.first < p.step <= window.last)
    if end.t <= start.t:
        raise LogParseError(f"rank {log.rank}: window has no duration ({start.t} -> {end.t})")
    return samples, end.t - start.t


def straggler_facts(parsed: ParsedLog, windows: Mapping[int, float]) -> dict[str, Any]:
    """Who held the repeat back (``STRAGGLER_FIELDS``), from every rank's window duration.

    Ties go to the lowest rank or node (a deterministic answer for equal windows). A node is
    the ``node_rank`` of its ranks' headers; when a rank's header states none (upstream logs),
    or all ranks sit on one node, the node facts are None."""
    facts: dict[str, Any] = dict.fromkeys(STRAGGLER_FIELDS)
    if len(windows) < 2:
        return facts
    slowest = max(sorted(windows), key=lambda rank: windows[rank])
    facts["slowest_rank"] = slowest
    facts["slowest_rank_excess"] = max(
        0.0, windows[slowest] / statistics.median(windows.values()) - 1
    )
    node_of = {rank: parsed.ranks[rank].header.get("node_rank") for rank in windows}
    if not all(type(node) is int and node >= 0 for node in node_of.values()):
        return facts
    ranks_of: dict[int, list[int]] = {}
    for rank in sorted(windows):
        ranks_of.setdefault(node_of[rank], []).append(rank)
    if len(ranks_of) < 2:
        return facts
    node_median = {
        node: statistics.median(windows[rank] for rank in ranks) for node, ranks in ranks_of.items()
    }
    node = max(sorted(node_median), key=lambda n: node_median[n])
    others = statistics.median(windows[rank] for rank in windows if node_of[rank] != node)
    facts["slowest_node"] = node
    facts["slowest_node_ranks"] = ranks_of[node]
    facts["slowest_node_excess"] = max(0.0, node_median[node] / others - 1)
    return facts


def device_clock_duration(parsed: ParsedLog) -> float | None:
    """The measured window as the devices' own clocks timed it (``device-window`` records): the
    longest rank's, as the kit's figure takes the longest rank's host window; None unless every
    rank logged one. Samples over it are the throughput by the device's clock."""
    windows = [log.device_window_s for log in parsed.ranks.values()]
    if not windows or any(window is None for window in windows):
        return None
    return max(window for window in windows if window is not None)


def peak_memory_facts(parsed: ParsedLog) -> dict[str, Any]:
    """``PEAK_MEMORY_FIELDS`` from every rank's end record: the largest peak of any rank (the
    device that needed most), the sources named, and NVML's largest where every rank gave one;
    all None unless every rank that logged states its peak."""
    facts: dict[str, Any] = dict.fromkeys(PEAK_MEMORY_FIELDS)
    peaks = [log.peak_memory for log in parsed.ranks.values()]
    if not peaks or any(peak is None for peak in peaks):
        return facts
    stated = [peak for peak in peaks if peak is not None]
    facts["peak_memory_bytes"] = max(int(peak["bytes"]) for peak in stated)
    facts["peak_memory_source"] = ", ".join(sorted({str(peak["source"]) for peak in stated}))
    if all("nvml_bytes" in peak for peak in stated):
        facts["peak_memory_nvml_bytes"] = max(int(peak["nvml_bytes"]) for peak in stated)
    return facts


def _measurement(**fields: Any) -> RepeatMeasurement:
    try:
        return RepeatMeasurement(**fields)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']} (got {e.get('input')!r})"
            for e in error.errors()
        )
        raise LogParseError(f"the log gives no valid measurement: {problems}") from None


def measure_repeat(parsed: ParsedLog, window: Window) -> RepeatMeasurement:
    if parsed.reported_throughput is not None and not any(r.points for r in parsed.ranks.values()):
        return _measurement(
            throughput=parsed.reported_throughput,
            samples=0,
            duration_s=0.0,
            ranks=len(parsed.ranks),
            world_size=parsed.world_size,
            reported_by_source=True,
            warmup_steps=window.warmup_steps,
            measured_steps=window.measured_steps,
            **straggler_facts(parsed, {}),  # written as None: no timestamps, nobody to name
            **peak_memory_facts(parsed),
        )
    expected = parsed.world_size // parsed.samples_scale
    if len(parsed.ranks) != expected:
        raise LogParseError(
            f"{len(parsed.ranks)} ranks logged steps, expected {expected} "
            f"(world size {parsed.world_size}): a rank is missing or extra"
        )
    total_samples, windows = 0, {}
    for log in parsed.ranks.values():
        samples, windows[log.rank] = _rank_window(log, window)
        total_samples += samples * parsed.samples_scale
    if total_samples % parsed.model_parallel:
        raise LogParseError(
            f"the window holds {total_samples} device-samples, not a multiple of the "
            f"{parsed.model_parallel} devices of one model-parallel replica"
        )
    total_samples //= parsed.model_parallel  # samples count replicas, not devices
    longest = max(windows.values(), default=0.0)
    if total_samples <= 0:
        raise LogParseError("the measured window holds no samples")
    first_rank = parsed.ranks[min(parsed.ranks)]
    return _measurement(
        throughput=total_samples / longest,
        samples=total_samples,
        duration_s=longest,
        ranks=len(parsed.ranks),
        world_size=parsed.world_size,
        warmup_steps=window.warmup_steps,
        measured_steps=window.measured_steps,
        interval_cv=slice_cv(first_rank, window),
        **straggler_facts(parsed, windows),
        **peak_memory_facts(parsed),
    )


def parse_logs(parser_name: str, texts: Mapping[str, str]) -> ParsedLog:
    """Run a registered parser; any failure on bad input is a LogParseError naming the logs."""
    from driver.parsers.base import PARSERS
    from driver.plugins import load

    load("parsers")
    if parser_name not in PARSERS:
        raise LogParseError(f"unknown log parser {parser_name!r}")
    if not texts:
        raise LogParseError("no node*.log file")
    try:
        return PARSERS.get(parser_name)().parse(dict(texts))
    except LogParseError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, OverflowError) as error:
        # a protocol line with a missing or mistyped field
        raise LogParseError(
            f"malformed record ({type(error).__name__}: {error})", source=",".join(sorted(texts))
        ) from None


def measure_logs(
    case: Case,
    parser_name: str,
    texts: Mapping[str, str],
    batch_size: int,
    check: Callable[[ParsedLog, Window], None] | None = None,
) -> tuple[RepeatMeasurement, ParsedLog]:
    """A repeat's measurement from its raw logs (raises LogParseError): the one statistics
    path, from the parser through the world-size check to the window. ``check`` sees the parsed
    logs before any arithmetic on them (the door's plausibility checks)."""
    parsed = parse_logs(parser_name, texts)
    if parsed.world_size != case.topology.world_size:
        raise LogParseError(
            f"the log reports world size {parsed.world_size}, the case has "
            f"{case.topology.world_size} devices"
        )
    warmup, measured, _total = case.window_for(batch_size)
    window = Window(warmup, measured)
    if check is not None:
        check(parsed, window)
    return measure_repeat(parsed, window), parsed


class CaseStats(StrictModel):
    median: float
    minimum: float
    maximum: float
    cv: float  # population std / mean
    repeats: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def unstable(self) -> bool:
        return self.cv > UNSTABLE_CV


def case_stats(throughputs: list[float]) -> CaseStats:
    if not throughputs:
        raise ValueError("no finished repeats to summarise")
    mean = statistics.fmean(throughputs)
    cv = statistics.pstdev(throughputs) / mean if len(throughputs) > 1 and mean else 0.0
    return CaseStats(
        median=statistics.median(throughputs),
        minimum=min(throughputs),
        maximum=max(throughputs),
        cv=cv,
        repeats=len(throughputs),
    )


def speedup(
    throughput: float, baseline_1n1g: float | None, devices: int
) -> tuple[float | None, float | None]:
    """(speedup, efficiency) against the 1n1g figure at the same per-device batch."""
    if not baseline_1n1g:
        return None, None
    value = throughput / baseline_1n1g
    return value, value / devices
