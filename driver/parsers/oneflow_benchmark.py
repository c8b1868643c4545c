"""OneFlow-Benchmark's metric lines, each ending with the ``time.time()`` of the print.

Classification/cnns (``util.Metric``)::

    train: epoch 0, iter 20, loss: 6.9, top_1: 0.0, top_k: 0.0, samples/s: 1234.567 1600000000.1

``iter`` counts steps finished in the epoch. LanguageModeling/BERT (``util.Metric``)::

    step: 19, total_loss: 11.1, mlm_loss: 10.4, nsp_loss: 0.6, throughput: 1234.5 1600000000.1

``step`` is the 0-based index of the last step (the header's step_offset is 1). Only the first
node's process prints them (the other nodes' scripts join its job), so lines of another node
are a mixed log; ``validation:`` lines are not steps.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from driver.parsers._runheader import node_logs
from driver.parsers._upstream import Timeline, step_lines, steplog
from driver.parsers.base import PARSERS, ParsedLog

# an index's minus sign is read (a negative one refused with its line), never skipped
_NUMBER = r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
CNN = re.compile(
    rf"^train: epoch (?P<epoch>-?\d+), iter (?P<index>-?\d+), .*samples/s: (?P<rate>{_NUMBER})\s+"
    rf"(?P<t>{_NUMBER})\s*$"
)
BERT = re.compile(
    rf"^step: (?P<index>-?\d+), .*throughput: (?P<rate>{_NUMBER})\s+(?P<t>{_NUMBER})\s*$"
)


@PARSERS.register("oneflow-benchmark")
class OneFlowBenchmarkParser:
    name = "oneflow-benchmark"

    def parse(self, texts: Mapping[str, str]) -> ParsedLog:
        logs = node_logs(texts, self.name)
        timelines: dict[int, Timeline] = {}
        epoch: str | None = None
        for line in step_lines(logs, lambda text: CNN.match(text) or BERT.match(text)):
            found = line.match.groupdict().get("epoch")
            if found is not None:
                if epoch is not None and found != epoch:
                    raise line.error(
                        f"lines of epochs {epoch} and {found}: iterations restart each "
                        "epoch, size the epoch to the run (--num_examples)"
                    )
                epoch = found
            timeline = timelines.setdefault(line.rank, Timeline(line.rank))
            timeline.add(line.at("index"), float(line.match["t"]), line.log.name, line.number)
        return steplog(logs, timelines, self.name)
