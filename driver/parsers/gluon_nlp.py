"""gluon-nlp ``scripts/bert`` pre-training progress lines (Python logging, stderr)::

    [1,0]<stderr>:INFO:root:[step 20]<TAB>mlm_loss=7.20000<TAB>...<TAB>throughput=40.3K tks/s
        <TAB>lr=0.0000100 time=3.25, latency=162.5 ms/step

(one line, folded here; fields are tab-separated)

``[step N]`` is steps finished; ``time`` is the seconds since the previous progress line (two
decimals), so the running sum of ``time`` is the logging rank's clock at each logged step (the
first line's interval starts at step 0). ``throughput`` counts tokens, not sequences, and is not
used. The node command starts horovod ranks with ``mpirun --tag-output``: the ``[1,R]`` prefix
names the rank; rank 0's lines are read, other ranks' copies are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from driver.parsers._upstream import Timeline, node_logs, step_lines, steplog
from driver.parsers.base import ParsedLog
from driver.registry import PARSERS

LINE = re.compile(r"\[step (?P<step>\d+)\].*?\btime=(?P<secs>\d+(?:\.\d+)?)")


@PARSERS.register("gluon-nlp")
class GluonNlpParser:
    name = "gluon-nlp"

    def parse(self, texts: Mapping[str, str]) -> ParsedLog:
        logs = node_logs(texts, self.name)
        timelines: dict[int, Timeline] = {}
        clocks: dict[int, float] = {}
        for line in step_lines(logs, LINE.search):
            key = line.rank
            timeline = timelines.setdefault(key, Timeline(key))
            if not timeline.points:
                clocks[key] = 0.0
                timeline.add(0, 0.0, line.log.name, line.number)
            clocks[key] += float(line.match["secs"])
            timeline.add(line.step, clocks[key], line.log.name, line.number)
        return steplog(logs, timelines, self.name)
