"""PaddlePaddle models' training lines (release/1.8: PaddleCV and PaddleNLP).

PaddleCV ``image_classification`` prints every ``print_step`` batches the time of that batch::

    [Pass 0, train batch 20] 	loss 6.90111, acc1 0.00000, ..., elapse 0.3456 sec

With ``--print_step 1`` every batch's time is there and their running sum is the trainer's clock
at each step boundary (a skipped batch is an error: the clock would have a hole). Only global
trainer 0 prints (``if trainer_id == 0`` at the pinned commit): the node command collects each
node's ``workerlog.0`` and node 0's holds the run's one timeline (logging ``rank0``).

PaddleNLP BERT prints a rate only, every ``skip_steps`` steps::

    epoch: 0, progress: 1/1, step: 20, loss: 7.1, ..., speed: 2.81 steps/s, file: part-0

BERT runs one trainer per node (a ParallelExecutor over the node's GPUs) and only trainer 0
prints. Its ``speed`` is ``skip_steps x trainers / seconds`` since the previous line (train.py at
the pinned release/1.8 commit): steps of all trainers, so the throughput, reported by the source,
is speed / nodes x global batch (= speed x batch x GPUs per node).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from driver.parsers._runheader import NodeLog, node_logs
from driver.parsers._upstream import (
    RateInterval,
    Timeline,
    line_rank,
    logged_index,
    positive_rate,
    reported,
    step_lines,
    steplog,
)
from driver.parsers.base import PARSERS, LogParseError, ParsedLog

# an index's minus sign is read (a negative one refused with its line), never skipped
BATCH = re.compile(
    r"\[Pass (?P<epoch>-?\d+), train batch (?P<index>-?\d+)\].*?elapse (?P<secs>\d+(?:\.\d+)?) sec"
)
SPEED = re.compile(r"\bstep: (?P<step>-?\d+),.*?\bspeed: (?P<speed>\d+(?:\.\d+)?) steps/s")


def _batch_timelines(logs: list[NodeLog]) -> dict[int, Timeline]:
    timelines: dict[int, Timeline] = {}
    for line in step_lines(logs, BATCH.search, first_epoch=("epoch", "pass")):
        key, finished = line.rank, line.at("index")
        timeline = timelines.setdefault(key, Timeline(key))
        last = timeline.points[-1][0] if timeline.points else finished - 1
        if finished <= last:
            raise line.error(
                f"trainer {key}: batch {line.match['index']} after step "
                f"{last} (restarted or mixed output)"
            )
        elif last != finished - 1:
            raise line.error(
                f"trainer {key}: batch {line.match['index']} follows step "
                f"{last}: every batch's time is needed (--print_step 1)"
            )
        timeline.add_interval(line, finished - 1, finished)
    return timelines


def _rate_intervals(log: NodeLog) -> list[RateInterval]:
    intervals: list[RateInterval] = []
    previous = 0
    for number, raw in log.lines:
        _rank, text = line_rank(log, raw)
        match = SPEED.search(text)
        if not match or text.lstrip().startswith(("[validation_set]", "[test_set]")):
            continue  # evaluation lines (every --validation_steps) print a speed too
        end = logged_index(match["step"], log.name, number) + log.header.step_offset
        if end <= previous:
            raise LogParseError(
                f"step {end} after step {previous} (restarted or mixed output)",
                source=log.name,
                line=number,
            )
        # "speed" counts the steps of every trainer (one per node): speed / nodes is steps/s.
        per_step = log.header.batch * log.header.world_size / log.header.nodes
        rate = positive_rate(match["speed"], log.name, number) * per_step
        intervals.append(RateInterval(previous, end, rate, log.name, number))
        previous = end
    return intervals


@PARSERS.register("paddle")
class PaddleParser:
    name = "paddle"

    def parse(self, texts: Mapping[str, str]) -> ParsedLog:
        logs = node_logs(texts, self.name)
        timelines = _batch_timelines(logs)
        if timelines:
            return steplog(logs, timelines, self.name)
        intervals = _rate_intervals(logs[0])
        if not intervals:
            raise LogParseError(
                "no Paddle training lines ('[Pass P, train batch B] ... elapse' or "
                "'step: S, ... speed: X steps/s')",
                source=logs[0].name,
            )
        return reported(logs, intervals, self.name)
