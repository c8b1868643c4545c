"""MaxText's per-step lines, read by the clock of the absl prefix each one opens with::

    I1207 15:02:11.512345 140234567 metric_logger.py:230] completed step: 20, seconds: 5.668,
        TFLOP/s/device: 134.909, Tokens/s/device: 8671.794, total_weights: 196608, loss: 10.879

``maxtext/common/metric_logger.py`` (``_log_training_metrics``) writes the line through
``max_logging.log``, absl's ``logging.info``: absl's prefix holds the month, day and the time
to the microsecond, with no year. ``completed step: N`` counts from 0 (the loop's ``step``
starts at 0), so the line of step N closes N + 1 steps (``step_offset`` 1). The line is
buffered one step (``buffer_and_write_metrics``): it is written after step N + 1 was dispatched,
when formatting step N's loss waits for that value to reach the host, so its timestamp is the
end of step N on the device (JAX dispatches asynchronously; this is where the host waits). The
last step's line is written by ``flush_metrics_and_cleanup`` after the loop, the same way.

The kit measures the window from those timestamps and never reads ``seconds``,
``TFLOP/s/device`` or ``Tokens/s/device`` (each one step's host-side interval). Every JAX
process (one per node on GPU) writes its own lines without a rank prefix: logging ``per-node``.

Lines of the batch-size ramp-up (``[Rampup Batch Size Phase]``) train another batch than the
case's and are refused; a ``completed profiler activation/deactivation step`` line carries no
step time and leaves a gap that the timeline refuses. absl's clock has no year: a month lower
than the line before's is the next year (a run over New Year), and only differences count.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

from driver.parsers._runheader import node_logs
from driver.parsers._upstream import Timeline, step_lines, steplog
from driver.parsers.base import PARSERS, LogParseError, ParsedLog

# absl's prefix: level letter, MMDD, HH:MM:SS.micro, thread id, file:line]. An index's minus
# sign is read (a negative one refused with its line), never skipped.
LINE = re.compile(
    r"^[IWEF](?P<month>\d{2})(?P<day>\d{2}) (?P<time>\d{2}:\d{2}:\d{2}\.\d{6})\s+\d+ \S+:\d+\] "
    r"(?P<rampup>\[Rampup Batch Size Phase\] )?completed step: (?P<step>-?\d+), seconds:"
)
_EPOCH = datetime(1970, 1, 1)
_FIRST_YEAR = 2000  # a leap year, so that a log of 29 February reads


class _AbslClock:
    """Seconds of absl's ``MMDD HH:MM:SS.ffffff`` stamps of one log, in log order: the year is
    not printed, so it advances where the month goes back (December to January)."""

    def __init__(self) -> None:
        self.year = _FIRST_YEAR
        self.month = 0

    def seconds(self, month: str, day: str, time: str) -> float:
        if int(month) < self.month:
            self.year += 1
        self.month = int(month)
        stamp = datetime.strptime(f"{self.year}{month}{day} {time}", "%Y%m%d %H:%M:%S.%f")
        return (stamp - _EPOCH).total_seconds()


@PARSERS.register("maxtext")
class MaxTextParser:
    name = "maxtext"

    def parse(self, texts: Mapping[str, str]) -> ParsedLog:
        logs = node_logs(texts, self.name)
        timelines: dict[int, Timeline] = {}
        clocks: dict[str, _AbslClock] = {}
        for line in step_lines(logs, LINE.match, unprefixed_is_node=True):
            if line.match["rampup"]:
                raise LogParseError(
                    "a step of MaxText's batch-size ramp-up: it trains another batch than the "
                    "case's (the kit never sets enable_rampup_batch_size)",
                    source=line.log.name,
                    line=line.number,
                )
            clock = clocks.setdefault(line.log.name, _AbslClock())
            seconds = clock.seconds(line.match["month"], line.match["day"], line.match["time"])
            timeline = timelines.setdefault(line.rank, Timeline(line.rank))
            timeline.add(line.step, seconds, line.log.name, line.number)
        return steplog(logs, timelines, self.name)
