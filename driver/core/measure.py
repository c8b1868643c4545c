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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    return RepeatMeasurement(
        throughput=total_samples / longest,
        samples=total_samples,
        duration_s=longest,
        ranks=len(parsed.ranks),
        world_size=parsed.world_size,
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
