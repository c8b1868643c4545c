"""Megatron-LM's iteration lines, read by the clock of the timestamp each one opens with::

    [default7]: [2026-12-07 10:00:21.512345] iteration       21/      60 | consumed samples:
        2688 | elapsed time per iteration (ms): 12270.4 | throughput per GPU ... | loss scale: 1.0 |

``megatron/training/training.py`` (``training_log``) prints the line from the last global rank
only (``print_rank_last``: the last pipeline stage holds the loss), after the ``iteration``
counter was advanced, so ``iteration N`` closes the Nth iteration. Its timestamp is taken after
the interval timer stopped with a barrier and ``torch.cuda.synchronize()`` on every rank: the end
of that iteration on the device. The kit measures the window from those timestamps and never
reads ``elapsed time per iteration``, an average over the logging interval.

Megatron-Core 0.16.0 and later print microseconds (``%H:%M:%S.%f``); 0.14 and 0.15 printed
whole seconds. A log of whole seconds (``dlperf import-logs`` of an older run) is read with each
boundary truncated to its second, so the window's duration is off by less than one second: it
is refused where the window is shorter than :data:`SECOND_STAMPED_MIN_WINDOW_S` (the error
would pass 1%), and otherwise accepted with ``clock_resolution_s`` 1 in the log's meta. Lines
without a timestamp (Megatron before it printed one) cannot be measured and are refused.
The timestamp has no time zone: only differences count, and a clock that goes back is refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

from driver.parsers._runheader import node_logs
from driver.parsers._upstream import Timeline, step_lines, steplog
from driver.parsers.base import PARSERS, LogParseError, ParsedLog

# an index's minus sign is read (a negative one refused with its line), never skipped
LINE = re.compile(
    r"^\s*\[(?P<stamp>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.(?P<micro>\d{6}))?\]"
    r" iteration\s+(?P<step>-?\d+)/\s*\d+ \|"
)
UNSTAMPED = re.compile(r"^\s*iteration\s+-?\d+/\s*\d+ \| consumed samples:")
SECOND_STAMPED_MIN_WINDOW_S = 100.0  # 1 s of truncation is at most 1% of such a window
_EPOCH = datetime(1970, 1, 1)


def clock(stamp: str, micro: str | None) -> float:
    """Seconds of Megatron's ``%Y-%m-%d %H:%M:%S[.%f]`` on a naive wall clock."""
    whole = (datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S") - _EPOCH).total_seconds()
    return whole + (int(micro) / 1e6 if micro else 0.0)


def _refuse_unstamped(texts: Mapping[str, str]) -> None:
    for name, text in texts.items():
        for number, raw in enumerate(text.splitlines(), start=1):
            if UNSTAMPED.match(re.sub(r"^\[[^\]]*\]:", "", raw.strip())):
                raise LogParseError(
                    "an iteration line without a timestamp (a Megatron-LM that printed none): "
                    "the kit measures the window from timestamps, never from the printed "
                    "'elapsed time per iteration'",
                    source=name,
                    line=number,
                )


@PARSERS.register("megatron")
class MegatronParser:
    name = "megatron"

    def parse(self, texts: Mapping[str, str]) -> ParsedLog:
        logs = node_logs(texts, self.name)
        timelines: dict[int, Timeline] = {}
        seconds_only = False
        for line in step_lines(logs, LINE.match, unprefixed_is_node=True):
            timeline = timelines.setdefault(line.rank, Timeline(line.rank))
            micro = line.match["micro"]
            seconds_only = seconds_only or micro is None
            timeline.add(line.step, clock(line.match["stamp"], micro), line.log.name, line.number)
        if not timelines:
            _refuse_unstamped(texts)
        parsed = steplog(logs, timelines, self.name)
        if seconds_only:
            _check_second_window(parsed)
            parsed.meta["clock_resolution_s"] = 1.0
        return parsed


def _check_second_window(parsed: ParsedLog) -> None:
    """Refuse a whole-second log whose window is too short for its clock (see the module)."""
    first = int(parsed.header["warmup_steps"])
    last = first + int(parsed.header["measured_steps"])
    for rank, log in parsed.ranks.items():
        times = {point.step: point.t for point in log.points}
        if first in times and last in times:
            span = times[last] - times[first]
            if span < SECOND_STAMPED_MIN_WINDOW_S:
                raise LogParseError(
                    f"rank {rank}: the timestamps are whole seconds (Megatron-Core 0.15 "
                    f"or older) and the window from step {first} to {last} spans {span:.0f} s: "
                    f"under {SECOND_STAMPED_MIN_WINDOW_S:.0f} s their truncation could move "
                    "the figure by more than 1%; measure more steps"
                )
