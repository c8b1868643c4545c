"""What every log parser returns, and the errors it raises.

A parser turns the raw log text of one repeat (one text per node) into :class:`ParsedLog`:
per rank, a list of :class:`StepPoint` — a timestamp and the samples processed since the
previous point. Our own scripts log every step; upstream sources log every N steps, or only a
rate; both fit this shape. Parsers are registered in ``PARSERS`` (below).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from driver.registry import Registry


class LogParseError(ValueError):
    """A log that cannot give a valid measurement: cut, empty, mixed, malformed."""

    def __init__(self, message: str, *, source: str = "", line: int | None = None) -> None:
        where = source + (f":{line}" if line is not None else "")
        super().__init__(f"{where}: {message}" if where else message)
        self.source, self.line = source, line


@dataclass(frozen=True)
class Window:
    """The measured window: from the end of the last warm-up step to the end of the last
    measured step (step numbers count finished steps)."""

    warmup_steps: int
    measured_steps: int

    @property
    def first(self) -> int:
        return self.warmup_steps

    @property
    def last(self) -> int:
        return self.warmup_steps + self.measured_steps

    def check(self, rank: int, steps: Iterable[int]) -> None:
        """The one window check (our logs and upstream logs): a rank's logged steps must hold
        both boundaries; raises LogParseError saying why not."""
        held = sorted(steps)
        if self.first in held and self.last in held:
            return
        if not held:
            why = "it logged no steps"
        elif held[-1] < self.last:
            why = "cut short: the run ended early"
        else:
            why = "the log interval does not divide the warm-up and measured steps"
        logged = f"{held[0]}..{held[-1]}" if held else "none"
        raise LogParseError(
            f"rank {rank}: the window needs step boundaries {self.first} and {self.last} "
            f"(warm-up {self.warmup_steps}, measured {self.measured_steps}) but the log holds "
            f"steps {logged} ({why})"
        )


@dataclass(frozen=True)
class StepPoint:
    step: int  # the number of steps finished at time t (0 = the start of step 1)
    t: float  # seconds on the rank's monotonic clock (or the log's wall clock)
    samples: int  # samples this rank processed since the previous point
    # False: t was taken without a device sync (``step_sync: boundary``): the host's queueing
    # time, not the device's; only synced points bound a throughput slice.
    synced: bool = True

    def __post_init__(self) -> None:
        # A log's numbers must be finite: NaN or inf would reach the window arithmetic.
        if not math.isfinite(self.t):
            raise LogParseError(f"step {self.step}: timestamp {self.t} is not a finite number")
        if self.samples < 0:
            raise LogParseError(f"step {self.step}: {self.samples} samples (negative)")


@dataclass
class RankLog:
    rank: int
    points: list[StepPoint] = field(default_factory=list)
    header: dict[str, Any] = field(default_factory=dict)
    finished: bool = False  # the log says the rank ended normally
    # The end record's ``peak_memory`` (``bytes``, ``source``, optional ``nvml_bytes``), if any.
    peak_memory: dict[str, Any] | None = None
    # The ``device-window`` record: the measured window by the device's own clock (seconds).
    device_window_s: float | None = None


@dataclass
class ParsedLog:
    ranks: dict[int, RankLog]
    world_size: int
    # Upstream logs often come from rank 0 only: the samples of one rank times this factor are
    # the global samples. 1 when every rank logged its own steps.
    samples_scale: int = 1
    # Devices one data-parallel replica spans (tensor x pipeline x context parallel): ranks of
    # one replica process the same samples, so the global samples are divided by it.
    model_parallel: int = 1
    # A source that prints only a rate (no timestamps) fills this and no points.
    reported_throughput: float | None = None
    reported_note: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def header(self) -> dict[str, Any]:
        """The header of the lowest rank that has one (versions, devices, options)."""
        headers = self.rank_headers()
        return headers[0] if headers else {}

    def rank_headers(self) -> list[dict[str, Any]]:
        """Every rank's header, by rank; a rate-only upstream log has no ranks, only the host
        facts its node 0 printed (``meta["host"]``)."""
        found = [self.ranks[r].header for r in sorted(self.ranks) if self.ranks[r].header]
        if not found and self.meta.get("host"):
            found = [dict(self.meta["host"])]
        return found


class LogParser(Protocol):
    name: str

    def parse(self, texts: Mapping[str, str]) -> ParsedLog:
        """``texts`` maps a log's name (its file, e.g. node0.log) to its content."""
        ...


PARSERS: Registry[type[LogParser]] = Registry("log parser")  # each plug-in module registers
