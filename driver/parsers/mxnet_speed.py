"""MXNet ``Speed: ... samples/sec`` lines (DeepLearningExamples MXNet ResNet-50, Speedometer).

DeepLearningExamples' ``fit.py`` logs, every ``--disp-batches`` batches, the global rate over
those batches, naming the 0-based batch range (``Batch [0-19]``: batches 0 to 19, 20 steps)::

    [1,0]<stderr>:INFO:root:Epoch[0] Batch [0-19]	Speed: 2456.78 samples/sec	LR: 0.1

MXNet's ``Speedometer`` callback names the batch count instead: ``Epoch[0] Batch [20]``. There are
no timestamps: the result is the time-weighted mean of the rates of the lines that tile the
measured window, reported by the source. ``mpirun --tag-output`` prefixes name the rank; rank
0's lines are read (every rank prints the same global rate).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from driver.parsers._runheader import node_logs
from driver.parsers._upstream import RateInterval, logged_index, positive_rate, reported, step_lines
from driver.parsers.base import PARSERS, LogParseError, ParsedLog

# an index's minus sign is read (a negative one refused with its line), never skipped
LINE = re.compile(
    r"Epoch\[(?P<epoch>-?\d+)\] Batch \[(?:(?P<first>-?\d+)-)?(?P<last>-?\d+)\]\s+"
    r"Speed: (?P<rate>\d+(?:\.\d+)?) samples/sec"
)


@PARSERS.register("mxnet-speed")
class MxnetSpeedParser:
    name = "mxnet-speed"

    def parse(self, texts: Mapping[str, str]) -> ParsedLog:
        logs = node_logs(texts, self.name)
        intervals: list[RateInterval] = []
        previous = 0
        for line in step_lines(logs, LINE.search, first_epoch=("epoch", "epoch")):
            end = line.at("last")
            first = line.match["first"]
            start = previous if first is None else logged_index(first, line.log.name, line.number)
            if end <= start or start < previous:
                raise line.error(
                    f"batches {start}..{end} after step {previous} (restarted, mixed or "
                    "malformed output)"
                )
            rate = positive_rate(line.match["rate"], line.log.name, line.number)
            intervals.append(RateInterval(start, end, rate, line.log.name, line.number))
            previous = end
        if not intervals:
            raise LogParseError("no 'Speed: ... samples/sec' lines", source=logs[0].name)
        return reported(logs, intervals, self.name)
