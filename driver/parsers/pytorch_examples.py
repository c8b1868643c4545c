"""pytorch/examples imagenet ``ProgressMeter`` lines, one per process, prefixed by torchrun::

    [default3]:Epoch: [0][ 20/5005]	Time  0.301 ( 0.412)	Data  0.001 ( 0.090)	Loss ...

``[i/N]`` is the 0-based batch index and ``Time val (avg)`` the last batch's time and the
running average since the epoch began, so ``avg * (i + 1)`` is the process's clock at the end of
batch ``i`` (resolution: 0.5 ms times the batches, from the three printed decimals). The node
command starts one process per GPU under ``torchrun --tee 3``, whose ``[defaultN]:`` (or
``[rankN]:``) prefix names each line's process; an unprefixed progress line with several
processes per node cannot be attributed and is an error. ``Test:`` lines are not steps.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from driver.parsers._upstream import Timeline, line_rank, logging_rank, node_logs, steplog
from driver.parsers.base import LogParseError, ParsedLog
from driver.registry import PARSERS

LINE = re.compile(
    r"^Epoch: \[(?P<epoch>\d+)\]\[\s*(?P<index>\d+)/\s*\d+\]\s+Time\s+(?P<val>\d+\.\d+)\s+"
    r"\(\s*(?P<avg>\d+\.\d+)\)"
)


@PARSERS.register("pytorch-examples")
class PytorchExamplesParser:
    name = "pytorch-examples"

    def parse(self, texts: Mapping[str, str]) -> ParsedLog:
        logs = node_logs(texts, self.name)
        header = logs[0].header
        timelines: dict[int, Timeline] = {}
        for log in logs:
            for number, raw in log.lines:
                rank, text = line_rank(log, raw)
                match = LINE.match(text.strip())
                if not match:
                    continue
                if match["epoch"] != "0":
                    raise LogParseError(
                        f"a line of epoch {match['epoch']}: the window is read from epoch 0 "
                        "(batch indices restart each epoch)",
                        source=log.name,
                        line=number,
                    )
                if rank is None and header.procs_per_node == 1:
                    rank = header.node_rank  # one process per node: the line is its own
                key = logging_rank(log, rank, number)
                if key is None:
                    continue
                finished = int(match["index"]) + header.step_offset
                timeline = timelines.setdefault(key, Timeline(key))
                timeline.add(finished, float(match["avg"]) * finished, log.name, number)
        return steplog(header, timelines, self.name)
