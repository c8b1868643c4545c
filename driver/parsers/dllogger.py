"""NVIDIA DLLogger JSON lines (DeepLearningExamples): ``DLLL {"timestamp": ..., "step": ...}``.

DLLogger's JSONStreamBackend writes one ``DLLL <json>`` line per record with the wall-clock
``timestamp`` (seconds, as a string) taken when the record is logged. Training records carry
``type: LOG`` and a step that is an int (TF1 BERT: the 1-based step) or ``[epoch, iteration]``
(ConvNets, PyTorch BERT); ``PARAMETER``, epoch summaries ``[epoch]``, validation
``[epoch, iteration, val_iteration]`` and the final ``[]`` are not steps. A step logged twice in a
row (one record per verbosity level) keeps its first timestamp. The run header's
``step_offset`` turns the logged index into steps finished (0 for 1-based indices, 1 for
0-based ones). Global rank 0 writes the records; the node command prints the JSON file after
the run, so a record from another rank or node is a mixed log.

DLLogger's StdOutBackend prints the same records as plain text, the time first::

    DLL 2020-09-15 14:29:15.387051 - Epoch: 0 Iteration: 4  train.loss : 6.80420  ...

A log with no JSON records is read from those lines (training ones: ``[Epoch: E] [Training]
Iteration: I`` followed by no validation iteration), with the same step and epoch rules.

DeepLearningExamples scripts that predate DLLogger (TensorFlow 1 BERT) print a rate only::

    Step =     20 Throughput =      1234.5 MLM Loss = ... (or "Rank =  0 :: Step = ...")

the sentences per second of all ranks since the previous such line. ``Step = N`` is printed after
N - 1 steps (its run header's step_offset is -1), and an iteration whose update an AMP loss-scale
overflow skipped repeats the previous label: one iteration, counted in the window it falls in. A
log with those lines and no DLLogger step records gives the throughput the source reports, over
the measured window.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from typing import Any

from driver.parsers._runheader import NodeLog, node_logs
from driver.parsers._upstream import (
    RateInterval,
    Timeline,
    line_rank,
    logged_index,
    logging_rank,
    positive_rate,
    reported,
    steplog,
)
from driver.parsers.base import PARSERS, LogParseError, ParsedLog

MARK = "DLLL "
PLAIN = re.compile(
    r"^DLL (?P<stamp>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?) - "
    # a negative index is read (and refused by the timeline, with its line), never skipped
    r"(?:Epoch: (?P<epoch>-?\d+)\s+)?(?:Training )?Iteration: (?P<index>-?\d+)\b(?P<rest>.*)$"
)
RATE = re.compile(
    r"(?:Rank\s*=\s*(?P<rank>\d+)\s*::\s*)?Step\s*=\s*(?P<step>-?\d+)\s+"
    r"Throughput\s*=\s*(?P<rate>\d+(?:\.\d+)?)"
)


def train_step(step: Any) -> int | None:
    """The iteration index of a training record's step, None for any other record."""
    if isinstance(step, int) and not isinstance(step, bool):
        return step
    if (
        isinstance(step, list)
        and len(step) == 2
        and all(isinstance(part, int) and not isinstance(part, bool) for part in step)
    ):
        return step[1]
    return None


def _json_records(log: NodeLog) -> Iterator[tuple[int, int | None, int, int | None, float]]:
    """(line, rank, iteration, epoch, timestamp) of each DLLogger JSON training record."""
    for number, raw in log.lines:
        rank, text = line_rank(log, raw)
        at = text.find(MARK)
        if at < 0:
            continue
        try:
            record = json.loads(text[at + len(MARK) :])
        except json.JSONDecodeError as error:
            raise LogParseError(
                f"broken DLLogger record ({error.msg})", source=log.name, line=number
            ) from None
        if not isinstance(record, dict) or record.get("type") != "LOG":
            continue
        index = train_step(record.get("step"))
        if index is None:
            continue
        try:
            stamp = float(record["timestamp"])
        except (KeyError, TypeError, ValueError):
            raise LogParseError(
                "a training record without a numeric timestamp", source=log.name, line=number
            ) from None
        epoch = record["step"][0] if isinstance(record["step"], list) else None
        yield number, rank, index, epoch, stamp


def _plain_records(log: NodeLog) -> Iterator[tuple[int, int | None, int, int | None, float]]:
    """The same from StdOutBackend lines (``DLL <date> <time> - Epoch: E Iteration: I ...``)."""
    for number, raw in log.lines:
        rank, text = line_rank(log, raw)
        match = PLAIN.match(text.strip())
        if not match or "Iteration:" in match["rest"]:  # a validation iteration inside
            continue
        # The log's wall clock (local time, no zone): only differences of it are used.
        stamp = datetime.fromisoformat(match["stamp"]).replace(tzinfo=timezone.utc).timestamp()
        epoch = int(match["epoch"]) if match["epoch"] is not None else None
        yield number, rank, int(match["index"]), epoch, stamp


Records = Callable[[NodeLog], Iterator[tuple[int, int | None, int, int | None, float]]]


def _timelines(logs: list[NodeLog], records: Records) -> dict[int, Timeline]:
    header = logs[0].header
    timelines: dict[int, Timeline] = {}
    epochs: set[int] = set()
    for log in logs:
        for number, rank, index, epoch, stamp in records(log):
            if epoch is not None:
                if epoch < 0:
                    raise LogParseError(
                        f"a negative epoch ({epoch}): malformed output",
                        source=log.name,
                        line=number,
                    )
                epochs.add(epoch)
                if len(epochs) > 1:
                    raise LogParseError(
                        f"training records of epochs {sorted(epochs)}: iterations restart "
                        "each epoch, run one epoch",
                        source=log.name,
                        line=number,
                    )
            key = logging_rank(log, rank, number)
            if key is None:
                continue
            finished = index + header.step_offset
            timeline = timelines.setdefault(key, Timeline(key))
            if timeline.points and timeline.points[-1][0] == finished:
                # The same step's record at another verbosity level is written by the same
                # logging call; the same step logged again later is a restart or an edit.
                if stamp - timeline.points[-1][1] > SAME_RECORD_S:
                    raise LogParseError(
                        f"step {index} logged again {stamp - timeline.points[-1][1]:.3f} s "
                        f"later (one logging call writes its records within {SAME_RECORD_S} s)",
                        source=log.name,
                        line=number,
                    )
                continue
            timeline.add(finished, stamp, log.name, number)
    return timelines


SAME_RECORD_S = 0.05  # one dllogger.log() call writes a record per backend/verbosity level


@PARSERS.register("dllogger")
class DLLoggerParser:
    name = "dllogger"

    def parse(self, texts: Mapping[str, str]) -> ParsedLog:
        logs = node_logs(texts, self.name)
        # JSON records first: a run with both backends prints the same records twice.
        timelines = _timelines(logs, _json_records) or _timelines(logs, _plain_records)
        if timelines:
            return steplog(logs, timelines, self.name)
        intervals = _rate_intervals(logs)
        if not intervals:
            raise LogParseError(
                "no DLLogger step records (DLLL ... type LOG, or 'DLL <time> - Epoch: E "
                "Iteration: I' lines) and no 'Step = N Throughput = X' lines",
                source=logs[0].name,
            )
        return reported(logs, intervals, self.name)


def _rate_intervals(logs: list[NodeLog]) -> list[RateInterval]:
    """The rate lines as intervals of steps finished.

    TF1 BERT under AMP: an iteration whose gradients overflow skips the update and the global
    step does not advance, so its line repeats the previous label (the first iterations at loss
    scale 2^32 repeat "Step = 1"). The hook resets its count at every line, so a repeated label
    is exactly one iteration (session run), whatever --display_loss_steps is, and its rate is
    the global batch over that run's time: it did its work (forward, backward, all-reduce), so
    :func:`reported` counts it as an iteration of the window it falls in (before the window's
    first step: warm-up, left out).
    """
    intervals: list[RateInterval] = []
    previous = 0
    for log in logs:
        for number, raw in log.lines:
            rank, text = line_rank(log, raw)
            match = RATE.search(text)
            if not match:
                continue
            if match["rank"] is not None and rank is None:
                rank = int(match["rank"])
            if logging_rank(log, rank, number) is None:
                continue
            end = logged_index(match["step"], log.name, number) + log.header.step_offset
            rate = positive_rate(match["rate"], log.name, number)
            if end == previous:  # an overflow iteration (at the start: none finished yet)
                intervals.append(RateInterval(end, end, rate, log.name, number, runs=1))
                continue
            if end < previous:
                raise LogParseError(
                    f"step {end} after step {previous} (restarted or mixed output)",
                    source=log.name,
                    line=number,
                )
            intervals.append(RateInterval(previous, end, rate, log.name, number))
            previous = end
    return intervals
