"""Progress of a session: cases and repeats done and left, elapsed time, and an ETA.

The remaining time is estimated from repeats measured in this run: a repeat still to run costs
the median wall time of its own case's finished repeats, else the median of all finished ones
scaled by its steps (a 120-step case is not a 13-step one). Before any repeat finished there
is no estimate, and the line says so rather than guess.

Two renderings of the same numbers: a rich progress bar on a terminal, and plain lines (one per
repeat, ``--progress plain`` or any non-terminal output such as CI logs).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from driver.model.case import Case

Printer = Callable[[str], None]


def duration_text(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


@dataclass
class ProgressTracker:
    """The numbers: what is planned, what is done, what it cost."""

    cases: list[Case]
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)
    done: dict[str, int] = field(init=False)  # case id -> repeats finished or skipped
    closed: set[str] = field(init=False)  # cases that will run no more repeats (failed)
    seconds: dict[str, list[float]] = field(init=False)  # case id -> wall s of its repeats

    def __post_init__(self) -> None:
        self.started = self.clock()
        self.done = {case.id: 0 for case in self.cases}
        self.closed = set()
        self.seconds = {case.id: [] for case in self.cases}

    @property
    def total_repeats(self) -> int:
        return sum(case.repeats for case in self.cases)

    @property
    def repeats_done(self) -> int:
        return sum(self.done.values())

    def left(self, case: Case) -> int:
        return 0 if case.id in self.closed else max(0, case.repeats - self.done[case.id])

    @property
    def cases_left(self) -> int:
        return sum(1 for case in self.cases if self.left(case))

    def skipped(self, case: Case) -> None:
        self.done[case.id] += 1

    def finished(self, case: Case, wall_s: float) -> None:
        self.done[case.id] += 1
        self.seconds[case.id].append(wall_s)

    def stopped(self, case: Case) -> None:
        """A failed repeat ends its case for this run: its remaining repeats are not waited for."""
        self.closed.add(case.id)

    def elapsed(self) -> float:
        return self.clock() - self.started

    def remaining_s(self) -> float | None:
        measured = [(case, s) for case in self.cases for s in self.seconds[case.id]]
        if not measured:
            return None
        per_step = statistics.median(s / max(1, case.total_steps) for case, s in measured)
        total = 0.0
        for case in self.cases:
            own = self.seconds[case.id]
            each = statistics.median(own) if own else per_step * case.total_steps
            total += each * self.left(case)
        return total

    def summary(self) -> str:
        remaining = self.remaining_s()
        eta = "no estimate yet" if remaining is None else f"about {duration_text(remaining)} left"
        return (
            f"{self.repeats_done}/{self.total_repeats} repeats, "
            f"{len(self.cases) - self.cases_left}/{len(self.cases)} cases done; "
            f"elapsed {duration_text(self.elapsed())}, {eta}"
        )


class Progress:
    """Reports a tracker: plain lines, or a rich bar on a terminal. ``printer`` gets the
    per-repeat lines in both modes (above the bar on a terminal)."""

    def __init__(self, cases: list[Case], printer: Printer = print, mode: str = "auto") -> None:
        if mode not in ("auto", "plain", "rich", "off"):
            raise ValueError(f"progress mode must be auto, plain, rich or off, got {mode!r}")
        self.tracker = ProgressTracker(cases)
        self.printer = printer
        self.mode = mode
        if mode == "auto":
            self.mode = "rich" if printer is print and sys.stdout.isatty() else "plain"
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self.mode == "rich":
            from rich.progress import BarColumn, TextColumn
            from rich.progress import Progress as RichProgress

            # Drawn when a repeat ends, not 10 times a second: nothing on the bar changes in
            # between, and each refresh took CPU from the benchmark under it (~10 ms per second).
            self._bar = RichProgress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[summary]}"),
                transient=False,
                auto_refresh=False,
            )
            self._bar.start()
            self._task = self._bar.add_task(
                "repeats", total=self.tracker.total_repeats, summary=self.tracker.summary()
            )
            self._bar.refresh()
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def line(self, text: str) -> None:
        """A per-repeat line: printed, with the progress summary appended in plain mode."""
        if self.mode == "plain":
            self.printer(f"{text}  [{self.tracker.summary()}]")
        elif self.mode == "rich":
            self._bar.console.print(text, markup=False, highlight=False)  # "[case 1/4 ...]"
            self._bar.update(
                self._task,
                completed=self.tracker.repeats_done,
                summary=self.tracker.summary(),
                refresh=True,
            )
        else:
            self.printer(text)
