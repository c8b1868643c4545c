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

from driver.parsers._runheader import node_logs
from driver.parsers._upstream import Timeline, step_lines, steplog
from driver.parsers.base import PARSERS, ParsedLog

# an index's minus sign is read (a negative one refused with its line), never skipped
LINE = re.compile(
    r"^Epoch: \[(?P<epoch>-?\d+)\]\[\s*(?P<index>-?\d+)/\s*\d+\]\s+Time\s+(?P<val>\d+\.\d+)\s+"
    r"\(\s*(?P<avg>\d+\.\d+)\)"
)


@PARSERS.register("pytorch-examples")
class PytorchExamplesParser:
    name = "pytorch-examples"

    def parse(self, texts: Mapping[str, str]) -> ParsedLog:
        logs = node_logs(texts, self.name)
        timelines: dict[int, Timeline] = {}
        lines = step_lines(
            logs, LINE.match, first_epoch=("epoch", "epoch"), unprefixed_is_node=True
        )
        for line in lines:
            finished = line.at("index")
            timeline = timelines.setdefault(line.rank, Timeline(line.rank))
            # The printed average batch time x batches finished: the clock at that batch.
            timeline.add(finished, float(line.match["avg"]) * finished, line.log.name, line.number)
        return steplog(logs, timelines, self.name)
