"""torchtitan's per-step metric lines, read by the clock of their logging timestamp::

    [rank0]:[titan] 2026-11-27 10:00:21,512 - root - INFO - step: 21  loss:  7.1  grad_norm: ...
        memory: 60.1GiB(63.2%)  tps: 6,612  tflops: 383.1  mfu: 38.7%

``step`` counts the optimizer steps finished (1-based: ``self.step += 1`` before the step), and
the line is logged after the step's loss reached the host (a device sync), so its timestamp is
the end of that step. The kit measures the window from those timestamps (the log's own clock,
millisecond resolution) and never reads ``tps``, ``tflops`` or ``mfu``: torchtitan's rate is per
logging interval, and averaging interval rates is not the window's rate.

Every rank logs the line; the node command starts torchtitan under ``torchrun --tee 3
--local-ranks-filter 0``, so each node's log holds its local rank 0's lines tagged
``[default0]:``, and only global rank 0's count (logging ``rank0``). The colour codes torchtitan
prints unless ``--metrics.disable-color-printing`` is given are dropped before matching;
``validate step:`` lines are not steps. The timestamp has no time zone: it is read as a wall
clock, so only its differences count (a log whose clock goes back, e.g. at a daylight-saving
change, is refused by the timeline).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

from driver.parsers._runheader import node_logs
from driver.parsers._upstream import Timeline, step_lines, steplog
from driver.parsers.base import PARSERS, ParsedLog

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# an index's minus sign is read (a negative one refused with its line), never skipped
LINE = re.compile(
    r"^\[titan\] (?P<stamp>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}) - \S+ - INFO - "
    r"step:\s*(?P<step>-?\d+)\s+loss:"
)
_EPOCH = datetime(1970, 1, 1)


def clock(stamp: str) -> float:
    """Seconds of a ``logging`` asctime (``2026-11-27 10:00:21,512``) on a naive wall clock."""
    return (datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f") - _EPOCH).total_seconds()


def _match(text: str) -> re.Match[str] | None:
    return LINE.match(ANSI.sub("", text))


@PARSERS.register("torchtitan")
class TorchtitanParser:
    name = "torchtitan"

    def parse(self, texts: Mapping[str, str]) -> ParsedLog:
        logs = node_logs(texts, self.name)
        timelines: dict[int, Timeline] = {}
        for line in step_lines(logs, _match, unprefixed_is_node=True):
            timeline = timelines.setdefault(line.rank, Timeline(line.rank))
            timeline.add(line.step, clock(line.match["stamp"]), line.log.name, line.number)
        return steplog(logs, timelines, self.name)
