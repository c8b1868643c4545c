"""tensorflow/models ``keras_utils.TimeHistory`` lines (absl logging)::

    I0915 12:00:01.000000 139 keras_utils.py:145] TimeHistory: 3.21 seconds,
        1276.42 examples/second between steps 20 and 30

(one line, folded here)

Each line times an interval of steps on the worker that prints it (seconds with two decimals);
the intervals of one worker follow each other, so their running sum is that worker's clock at
each logged step boundary (the first interval starts at 0 s). An interval starts when its first
batch begins, not when the previous one ended: the callbacks between two batches (a few ms) are
left out of the clock. Every node runs one worker of the
multi-worker strategy and logs its own lines (logging mode per-node); a gap between intervals,
a step going back or a worker without lines is an error.

Newer releases' BERT pre-training (``official/legacy/bert``, tf-models-official 2.x) installs no
TimeHistory callback; its custom training loop logs after every ``--steps_per_loop`` steps, once
the loss is fetched from the device::

    I1123 13:01:02.503556 1400596 model_training_utils.py:518] Train Step: 20/30  / loss = 7.6

A log without TimeHistory lines is read from those: ``Train Step: N`` is steps finished, and the
absl prefix's time (month, day, microseconds; no year) is that worker's clock at step N.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

from driver.parsers._runheader import NodeLog, node_logs
from driver.parsers._upstream import Timeline, step_lines, steplog
from driver.parsers.base import PARSERS, LogParseError, ParsedLog

# an index's minus sign is read (a negative one refused with its line), never skipped
LINE = re.compile(
    r"TimeHistory: (?P<secs>\d+(?:\.\d+)?) seconds, (?P<rate>\d+(?:\.\d+)?) "
    r"examples/second between steps (?P<start>-?\d+) and (?P<end>-?\d+)"
)

TRAIN_STEP = re.compile(
    r"^[IWEF](?P<month>\d{2})(?P<day>\d{2}) (?P<clock>\d{2}:\d{2}:\d{2}\.\d{6})\s+\d+\s+\S+\] "
    r"Train Step: (?P<step>-?\d+)/\d+"
)
YEAR_S = 366 * 86400.0


def absl_seconds(match: re.Match[str], previous: float | None) -> float:
    """Seconds since a leap year's start of an absl line's time; a new year continues the clock."""
    text = f"2000-{match['month']}-{match['day']} {match['clock']}"
    stamp = datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f")
    seconds = (stamp - datetime(2000, 1, 1)).total_seconds()
    while previous is not None and seconds < previous - YEAR_S / 2:
        seconds += YEAR_S  # the log crossed New Year (absl prints no year)
    return seconds


def _train_step_timelines(logs: list[NodeLog]) -> dict[int, Timeline]:
    timelines: dict[int, Timeline] = {}
    for line in step_lines(logs, TRAIN_STEP.match):
        timeline = timelines.setdefault(line.rank, Timeline(line.rank))
        previous = timeline.points[-1][1] if timeline.points else None
        timeline.add(line.step, absl_seconds(line.match, previous), line.log.name, line.number)
    return timelines


@PARSERS.register("tf-timehistory")
class TimeHistoryParser:
    name = "tf-timehistory"

    def parse(self, texts: Mapping[str, str]) -> ParsedLog:
        logs = node_logs(texts, self.name)
        timelines: dict[int, Timeline] = {}
        for line in step_lines(logs, LINE.search):
            key, start, end = line.rank, line.at("start"), line.at("end")
            timeline = timelines.setdefault(key, Timeline(key))
            last = timeline.points[-1][0] if timeline.points else start
            if start < last:
                raise line.error(
                    f"worker {key}: an interval from step {start} after step "
                    f"{last} (restarted or mixed output)"
                )
            elif last != start:
                raise line.error(
                    f"worker {key}: an interval from step {start} after one that ended at "
                    f"step {last} (a gap in the TimeHistory lines)"
                )
            timeline.add_interval(line, start, end)
        if not timelines:
            timelines = _train_step_timelines(logs)
        if not timelines:
            raise LogParseError(
                "no 'TimeHistory: ... between steps A and B' lines and no absl 'Train Step: N/M' "
                "lines",
                source=logs[0].name,
            )
        return steplog(logs, timelines, self.name)
