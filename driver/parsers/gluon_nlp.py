"""gluon-nlp ``scripts/bert`` pre-training progress lines (Python logging, stderr)::

    [1,0]<stderr>:INFO:root:[step 20]<TAB>mlm_loss=7.20000<TAB>...<TAB>throughput=40.3K tks/s
        <TAB>lr=0.0000100 time=3.25, latency=162.5 ms/step

(one line, folded here; fields are tab-separated)

``[step N]`` is steps finished; ``time`` is the seconds since the previous progress line (two
decimals), so the running sum of ``time`` is the logging rank's clock at each logged step (the
first line's interval starts at step 0). ``throughput`` counts tokens, not sequences, and is not
used. The node command starts horovod ranks with ``mpirun --tag-output``: the ``[1,R]`` prefix
names the rank; rank 0's lines are read, other ranks' copies are skipped.

After training, each rank logs ``Train cost=...`` and, when ``--data_eval`` names files,
evaluates them with the same ``log`` function: ``Running evaluation ...`` then ``[step 1]``,
``[step 2]``, ... in the training format (``pretraining_utils.py`` ``evaluate`` at the pin;
see ``MxNet/upstream/trace.yaml``). A rank's step lines after either of those two lines are
evaluation lines, not training steps, and are left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from driver.parsers._runheader import node_logs
from driver.parsers._upstream import Timeline, step_lines, steplog
from driver.parsers.base import PARSERS, ParsedLog

# an index's minus sign is read (a negative one refused with its line), never skipped
LINE = re.compile(r"\[step (?P<step>-?\d+)\].*?\btime=(?P<secs>\d+(?:\.\d+)?)")
# The end of a rank's training: run_pretraining.py's "Train cost=" line, or evaluate()'s first
# line (logged after training; inside the loop only at --eval_interval checkpoints).
TRAINING_ENDS = re.compile(r"(?:^|:)(?:Train cost=\d|Running evaluation \.\.\.)")


def _match(text: str) -> re.Match[str] | None:
    return TRAINING_ENDS.search(text) or LINE.search(text)


@PARSERS.register("gluon-nlp")
class GluonNlpParser:
    name = "gluon-nlp"

    def parse(self, texts: Mapping[str, str]) -> ParsedLog:
        logs = node_logs(texts, self.name)
        timelines: dict[int, Timeline] = {}
        ended: set[int] = set()
        for line in step_lines(logs, _match):
            key = line.rank
            if line.match.re is TRAINING_ENDS:
                ended.add(key)
                continue
            if key in ended:  # evaluation after training, in the training line's format
                continue
            timeline = timelines.setdefault(key, Timeline(key))
            timeline.add_interval(line, 0, line.step)
        return steplog(logs, timelines, self.name)
