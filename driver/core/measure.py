"""The measurement method: window throughput per repeat, statistics per case.

Throughput of a repeat = global samples in the measured window / window duration, where the
window starts at the end of the last warm-up step (the start of the first measured step) and
ends at the end of the last measured step. Each rank's duration comes from its own clock (no
cross-node clock comparison); the job's duration is the slowest rank's, so a straggler counts.
Never a mean of per-step rates.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from driver.parsers.base import LogParseError, ParsedLog, RankLog

UNSTABLE_CV = 0.02  # a case whose repeats vary more than 2% is flagged in every table


@dataclass(frozen=True)
class Window:
    warmup_steps: int
    measured_steps: int

    @property
    def first(self) -> int:
        return self.warmup_steps

    @property
    def last(self) -> int:
        return self.warmup_steps + self.measured_steps


@dataclass(frozen=True)
class RepeatMeasurement:
    throughput: float  # global samples / s
    samples: int  # global samples in the window
    duration_s: float  # slowest rank's window
    ranks: int  # ranks that logged
    world_size: int
    reported_by_source: bool = False  # the source printed a rate; no timestamps were used
    warmup_steps: int = 0
    measured_steps: int = 0
    # The Dell method's stability check: CV of the throughput of equal slices of the window
    # (rank 0's clock); None where the log has too few points to slice.
    interval_cv: float | None = None

    @property
    def interval_unstable(self) -> bool:
        return self.interval_cv is not None and self.interval_cv > UNSTABLE_CV

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "interval_unstable": self.interval_unstable}


INTERVALS = 10


def slice_cv(log: RankLog, window: Window, intervals: int = INTERVALS) -> float | None:
    """CV of throughput over ``intervals`` equal slices of the window (needs >= 2 slices)."""
    by_step = {point.step: point for point in log.points}
    slices = min(intervals, window.measured_steps)
    if slices < 2:
        return None
    bounds = [window.first + round(i * window.measured_steps / slices) for i in range(slices + 1)]
    if any(b not in by_step for b in bounds):
        return None  # the log is sparser than the slices (upstream log frequency)
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
    by_step = {point.step: point for point in log.points}
    if window.first not in by_step or window.last not in by_step:
        logged = f"{log.points[0].step}..{log.points[-1].step}" if log.points else "none"
        raise LogParseError(
            f"rank {log.rank}: the window needs step boundaries {window.first} and {window.last} "
            f"but the log holds steps {logged} (cut short, or warm-up/measured steps do not "
            "match the log frequency)"
        )
    start, end = by_step[window.first], by_step[window.last]
    samples = sum(p.samples for p in log.points if window.first < p.step <= window.last)
    if end.t <= start.t:
        raise LogParseError(f"rank {log.rank}: window has no duration ({start.t} -> {end.t})")
    return samples, end.t - start.t


def measure_repeat(parsed: ParsedLog, window: Window) -> RepeatMeasurement:
    if parsed.reported_throughput is not None and not any(r.points for r in parsed.ranks.values()):
        return RepeatMeasurement(
            throughput=parsed.reported_throughput,
            samples=0,
            duration_s=0.0,
            ranks=len(parsed.ranks),
            world_size=parsed.world_size,
            reported_by_source=True,
            warmup_steps=window.warmup_steps,
            measured_steps=window.measured_steps,
        )
    expected = parsed.world_size // parsed.samples_scale
    if len(parsed.ranks) != expected:
        raise LogParseError(
            f"{len(parsed.ranks)} ranks logged steps, expected {expected} "
            f"(world size {parsed.world_size}): a rank is missing or extra"
        )
    total_samples, longest = 0, 0.0
    for log in parsed.ranks.values():
        samples, duration = _rank_window(log, window)
        total_samples += samples * parsed.samples_scale
        longest = max(longest, duration)
    first_rank = parsed.ranks[min(parsed.ranks)]
    return RepeatMeasurement(
        throughput=total_samples / longest,
        samples=total_samples,
        duration_s=longest,
        ranks=len(parsed.ranks),
        world_size=parsed.world_size,
        warmup_steps=window.warmup_steps,
        measured_steps=window.measured_steps,
        interval_cv=slice_cv(first_rank, window),
    )


@dataclass(frozen=True)
class CaseStats:
    median: float
    minimum: float
    maximum: float
    cv: float  # population std / mean
    repeats: int

    @property
    def unstable(self) -> bool:
        return self.cv > UNSTABLE_CV

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "unstable": self.unstable}


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
