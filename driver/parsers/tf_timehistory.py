"""tensorflow/models ``keras_utils.TimeHistory`` lines (absl logging)::

    I0915 12:00:01.000000 139 keras_utils.py:145] TimeHistory: 3.21 seconds,
        1276.42 examples/second between steps 20 and 30

(one line, folded here)

Each line times an interval of steps on the worker that prints it (seconds with two decimals);
the intervals of one worker are contiguous, so their running sum is that worker's clock at each
logged step boundary (the first interval starts at 0 s). Every node runs one worker of the
multi-worker strategy and logs its own lines (logging mode per-node); a gap between intervals,
a step going back or a worker without lines is an error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from driver.parsers._upstream import Timeline, line_rank, logging_rank, node_logs, steplog
from driver.parsers.base import LogParseError, ParsedLog
from driver.registry import PARSERS

LINE = re.compile(
    r"TimeHistory: (?P<secs>\d+(?:\.\d+)?) seconds, (?P<rate>\d+(?:\.\d+)?) "
    r"examples/second between steps (?P<start>\d+) and (?P<end>\d+)"
)


@PARSERS.register("tf-timehistory")
class TimeHistoryParser:
    name = "tf-timehistory"

    def parse(self, texts: Mapping[str, str]) -> ParsedLog:
        logs = node_logs(texts, self.name)
        header = logs[0].header
        timelines: dict[int, Timeline] = {}
        clocks: dict[int, float] = {}
        for log in logs:
            for number, raw in log.lines:
                rank, text = line_rank(log, raw)
                match = LINE.search(text)
                if not match:
                    continue
                key = logging_rank(log, rank, number)
                if key is None:
                    continue
                start, end = int(match["start"]), int(match["end"])
                start += header.step_offset
                end += header.step_offset
                timeline = timelines.setdefault(key, Timeline(key))
                if not timeline.points:
                    clocks[key] = 0.0
                    timeline.add(start, 0.0, log.name, number)
                elif timeline.points[-1][0] != start:
                    raise LogParseError(
                        f"worker {key}: an interval from step {start} after one that ended at "
                        f"step {timeline.points[-1][0]} (a gap in the TimeHistory lines)",
                        source=log.name,
                        line=number,
                    )
                clocks[key] += float(match["secs"])
                timeline.add(end, clocks[key], log.name, number)
        return steplog(header, timelines, self.name)
