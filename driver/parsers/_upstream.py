"""What every upstream-source log parser shares: rank prefixes, logging modes, ParsedLog building.

A node's log opens with the run header (:mod:`driver.parsers._runheader`, which reads the logs
into one :class:`NodeLog` per node); this module walks their step lines and builds the ParsedLog.

Logging modes (who writes step lines, and what one line's samples are):

* ``rank0``: only global rank 0 logs (DeepLearningExamples, OneFlow-Benchmark, gluon-nlp,
  PaddlePaddle/models); its samples are one device's, times the world size.
* ``per-node``: one timeline per node (tensorflow/models workers); samples are the node's
  devices', times the nodes.
* ``per-process``: every process logs with a launcher prefix naming its rank (torchrun ``--tee``,
  ``mpirun --tag-output``); samples are one device's.
* ``last-rank``: only the last global rank logs (Megatron's ``print_rank_last``: the last
  pipeline stage holds the loss); like ``rank0``, its samples stand for the world size. Its
  lines carry the launcher's rank prefix, since the last rank shares its node with others.

A log whose header says ``worker0_only`` (imported logs: only node 0's kept) has node 0's logging
ranks stand for the whole job. It is the one reading of the rank prefixes and the logging modes
that the format parsers share; each format module stays a regex and a loop.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from driver.parsers._runheader import NodeLog, RunHeader, rank_host
from driver.parsers.base import LogParseError, ParsedLog, RankLog, StepPoint, Window

# mpirun --tag-output: "[1,3]<stdout>:"; torchrun --tee: "[default3]:" (local rank) or
# "[rank3]:" (global rank, newer torch).
_MPI_TAG = re.compile(r"^\[\d+,(\d+)\]<std(?:out|err)>:")
_TORCHRUN_LOCAL = re.compile(r"^\[default(\d+)\]:")
_TORCHRUN_GLOBAL = re.compile(r"^\[rank(\d+)\]:")


def line_rank(log: NodeLog, text: str) -> tuple[int | None, str]:
    """The global rank a line belongs to (None: the line carries no rank prefix) and its text."""
    for pattern in (_MPI_TAG, _TORCHRUN_GLOBAL, _TORCHRUN_LOCAL):
        match = pattern.match(text)
        if match:
            rank = int(match[1])
            if pattern is _TORCHRUN_LOCAL:  # a local rank: its node's first rank added
                rank += log.header.node_rank * log.header.procs_per_node
            return rank, text[match.end() :]
    return None, text


def logging_rank(log: NodeLog, rank: int | None, line: int) -> int | None:
    """The rank key a step line of ``log`` counts for in the run's logging mode.

    None: the line names (by its launcher prefix) a rank that does not log for the run, e.g.
    rank 3's copy of a line in a rank-0 source; it is skipped. A line that cannot be attributed
    where that matters is an error.
    """
    header = log.header
    if header.logging == "rank0":
        if rank is not None and rank != 0:
            return None
        if header.node_rank != 0:
            raise LogParseError(
                f"a step line from rank {rank if rank is not None else '?'} on node "
                f"{header.node_rank}, but this source logs from rank 0 only (mixed ranks)",
                source=log.name,
                line=line,
            )
        return 0
    if rank is not None and rank // header.procs_per_node != header.node_rank:
        raise LogParseError(
            f"a step line of rank {rank} in the log of node {header.node_rank} (mixed logs)",
            source=log.name,
            line=line,
        )
    if header.logging == "last-rank":
        return _last_rank(log, rank, line)
    if rank is None and header.logging == "per-process":
        raise LogParseError(
            "a step line without a rank prefix: with several processes per node their lines "
            "cannot be told apart (start the source with its rank-tagging launcher)",
            source=log.name,
            line=line,
        )
    return header.node_rank if header.logging == "per-node" else rank


def _last_rank(log: NodeLog, rank: int | None, line: int) -> int | None:
    """:func:`logging_rank` of a ``last-rank`` source: the last global rank's lines count, other
    ranks' copies are skipped, and an unprefixed line counts only where one process runs."""
    header = log.header
    last = header.world_size - 1
    if rank is None:
        if header.world_size == 1:
            return 0
        raise LogParseError(
            "a step line without a rank prefix: this source logs from the last rank, which "
            "cannot be told from the others without one (start it under torchrun --tee 3)",
            source=log.name,
            line=line,
        )
    return rank if rank == last else None


Matcher = Callable[[str], "re.Match[str] | None"]


@dataclass(frozen=True)
class StepLine:
    """A line of a node's log that a parser's pattern matched, with the rank it counts for."""

    log: NodeLog
    number: int  # line number in the log
    rank: int  # the logging rank (see :func:`logging_rank`)
    match: re.Match[str]

    def error(self, message: str) -> LogParseError:
        return LogParseError(message, source=self.log.name, line=self.number)

    @property
    def step(self) -> int:
        """The match's ``group`` as a step number of the run (the log's step offset added)."""
        return self.at("step")

    def at(self, group: str) -> int:
        index = logged_index(self.match[group], self.log.name, self.number)
        return index + self.log.header.step_offset


def logged_index(value: str, source: str, line: int) -> int:
    """A step or iteration index as a source printed it: no source counts below 0, so a
    negative one is an edited or mixed log, refused with its line (never skipped)."""
    index = int(value)
    if index < 0:
        raise LogParseError(
            f"a negative step/iteration index {index}: no source counts below 0; the log was "
            "edited or mixed with another",
            source=source,
            line=line,
        )
    return index


def step_lines(
    logs: list[NodeLog],
    matcher: Matcher,
    *,
    first_epoch: tuple[str, str] | None = None,
    unprefixed_is_node: bool = False,
) -> Iterator[StepLine]:
    """Every line of ``logs`` that ``matcher`` recognises, from a rank that logs for the run,
    in log order: the one loop every upstream parser walks.

    ``first_epoch``: (group, unit): a line whose ``group`` is not 0 is refused, since the
    source restarts its step numbers each ``unit`` and the window is read from the first.
    ``unprefixed_is_node``: with one process per node, a line without a rank prefix is that
    node's process's own.
    """
    for log in logs:
        for number, raw in log.lines:
            rank, text = line_rank(log, raw.strip())
            match = matcher(text)
            if not match:
                continue
            epoch = match.groupdict().get("epoch")
            if epoch is not None and epoch.startswith("-"):
                raise LogParseError(
                    f"a negative epoch ({epoch}): malformed output", source=log.name, line=number
                )
            if first_epoch is not None:
                group, unit = first_epoch
                if match[group] not in (None, "0"):
                    raise LogParseError(
                        f"a line of {unit} {match[group]}: step numbers restart each {unit}, "
                        f"the window is read from {unit} 0",
                        source=log.name,
                        line=number,
                    )
            if rank is None and unprefixed_is_node and log.header.procs_per_node == 1:
                rank = log.header.node_rank
            key = logging_rank(log, rank, number)
            if key is not None:
                yield StepLine(log, number, key, match)


def expected_ranks(header: RunHeader) -> list[int]:
    if header.logging == "rank0":
        return [0]
    if header.logging == "last-rank":
        return [header.world_size - 1]
    nodes = 1 if header.worker0_only else header.nodes
    if header.logging == "per-node":
        return list(range(nodes))
    return list(range(nodes * header.procs_per_node))


def rank_batch(header: RunHeader) -> tuple[int, int]:
    """(samples of one device per step, devices each logging rank stands for).

    ``driver.model.measure`` multiplies a logging rank's samples by the second number and expects
    world size / that number logging ranks.
    """
    if header.logging in ("rank0", "last-rank"):
        return header.batch, header.world_size
    if header.worker0_only:  # node 0's logging ranks stand for every node's
        return header.batch, header.world_size // len(expected_ranks(header))
    if header.logging == "per-node":
        return header.batch, header.procs_per_node
    return header.batch, 1


@dataclass
class Timeline:
    """Step boundaries of one logging rank: (steps finished, seconds) in log order."""

    rank: int
    points: list[tuple[int, float, str, int]] = field(default_factory=list)  # +source, line

    def add(self, step: int, t: float, source: str, line: int) -> None:
        if step < 0:  # an iteration index below the source's first, or one edited
            raise LogParseError(
                f"rank {self.rank}: a negative iteration ({step} steps finished): no source "
                "counts below its first step; the log was edited or mixed with another",
                source=source,
                line=line,
            )
        if self.points:
            last_step, last_t, _, _ = self.points[-1]
            if step <= last_step:
                raise LogParseError(
                    f"rank {self.rank}: step {step} after step {last_step} (restarted or "
                    "mixed output)",
                    source=source,
                    line=line,
                )
            if t < last_t:
                raise LogParseError(
                    f"rank {self.rank}: time goes back at step {step} ({t} < {last_t})",
                    source=source,
                    line=line,
                )
        self.points.append((step, t, source, line))

    def add_interval(self, line: StepLine, start: int, end: int) -> None:
        """Steps ``start``..``end`` timed by ``line``'s ``secs`` (seconds): the running sum of the
        intervals is the rank's clock, the first one starting at 0 s."""
        where = line.log.name, line.number
        if not self.points:
            self.add(start, 0.0, *where)
        self.add(end, self.points[-1][1] + float(line.match["secs"]), *where)


def steplog(logs: Sequence[NodeLog], timelines: Mapping[int, Timeline], fmt: str) -> ParsedLog:
    """A ParsedLog of step boundaries, after checking every logging rank holds the window; each
    rank's header is the run header plus its node's hostname, devices and fingerprint."""
    header = logs[0].header
    per_rank, scale = rank_batch(header)
    ranks: dict[int, RankLog] = {}
    window = Window(header.warmup_steps, header.measured_steps)
    for rank in expected_ranks(header):
        timeline = timelines.get(rank)
        if timeline is None or not timeline.points:
            raise LogParseError(
                f"rank {rank} logged no steps ({fmt}; logging mode {header.logging}, "
                f"{header.nodes} node(s) x {header.procs_per_node})"
            )
        window.check(rank, (p[0] for p in timeline.points))
        points, previous = [], None
        for step, t, _source, _line in timeline.points:
            samples = 0 if previous is None else (step - previous) * per_rank
            points.append(StepPoint(step=step, t=t, samples=samples))
            previous = step
        ranks[rank] = RankLog(
            rank=rank,
            points=points,
            header={**header.to_dict(), **rank_host(logs, rank)},
            finished=True,
        )
    extra = sorted(set(timelines) - set(ranks))
    if extra:
        raise LogParseError(f"steps logged by unexpected rank(s) {extra} ({header.logging})")
    return ParsedLog(
        ranks=ranks,
        world_size=header.world_size,
        samples_scale=scale,
        model_parallel=header.model_parallel,
        meta=_meta(header, fmt),
    )


def _meta(header: RunHeader, fmt: str) -> dict:
    meta = {"format": fmt, "source": header.source, "logging": header.logging}
    if header.worker0_only:
        meta["worker0_only"] = True
    return meta


@dataclass(frozen=True)
class RateInterval:
    start: int  # steps finished when the interval began
    end: int  # steps finished when it ended
    samples_per_s: float  # global samples per second over the interval
    source: str
    line: int
    # Iterations the line covers where they differ from its steps: 1 for a line that repeats
    # the previous label (an AMP loss-scale overflow: the iteration ran, the step counter kept).
    runs: int | None = None

    @property
    def iterations(self) -> int:
        return self.end - self.start if self.runs is None else self.runs

    @property
    def repeated(self) -> bool:
        return self.start == self.end

    def within(self, first: int, last: int) -> bool:
        """Inside the window first..last: a repeated label's iteration ran after step ``start``
        finished, so it belongs to the window from its first step to before its last."""
        if self.repeated:
            return first <= self.start < last
        return self.start >= first and self.end <= last


def reported(logs: Sequence[NodeLog], intervals: list[RateInterval], fmt: str) -> ParsedLog:
    """A rate-only log: the time-weighted mean of the rate lines that tile the measured window.

    The intervals inside the window must cover it exactly (contiguous, from the end of the
    warm-up to its last step); over equal-size intervals the time-weighted mean equals global
    samples / window duration, the same quantity our timestamps give.
    """
    header = logs[0].header
    first, last = header.window
    if not intervals:
        raise LogParseError(f"no rate lines ({fmt})")
    ordered = sorted(intervals, key=lambda i: i.start)
    for before, after in zip(ordered, ordered[1:], strict=False):
        if after.start < before.end:
            raise LogParseError(
                f"rate lines overlap: steps {before.start}..{before.end} and "
                f"{after.start}..{after.end} (mixed ranks or restarted run)",
                source=after.source,
                line=after.line,
            )
    if ordered[-1].end < last:
        raise LogParseError(
            f"the log's rate lines end at step {ordered[-1].end} but the window ends at step "
            f"{last} (cut short: the run ended early)"
        )
    inside = [i for i in ordered if i.within(first, last)]
    covered = first
    for interval in inside:
        if interval.start != covered:
            break
        covered = interval.end
    if not inside or inside[0].start != first or covered != last:
        spans = ", ".join(f"{i.start}..{i.end}" for i in ordered[:6])
        raise LogParseError(
            f"the rate lines ({spans}{', ...' if len(ordered) > 6 else ''}) do not tile the "
            f"window {first}..{last}: choose warm-up and measured steps that are multiples of "
            "the log interval"
        )
    per_iteration = header.batch * header.world_size
    seconds = sum(i.iterations * per_iteration / i.samples_per_s for i in inside)
    iterations = sum(i.iterations for i in inside)
    rate = iterations * per_iteration / seconds
    overflows = sum(i.iterations for i in inside if i.repeated)
    counted = (
        f"; {overflows} AMP loss-scale overflow iteration(s) (a repeated step label) counted"
        if overflows
        else ""
    )
    host = rank_host(logs, 0)  # no ranks: node 0's facts stand for the run's
    return ParsedLog(
        ranks={},
        world_size=header.world_size,
        reported_throughput=rate,
        reported_note=(
            f"time-weighted mean of {len(inside)} rate line(s) over steps {first}..{last}, "
            f"as printed by the source ({fmt}){counted}"
        ),
        meta={
            **_meta(header, fmt),
            **({"overflow_iterations": overflows} if overflows else {}),
            **({"host": host} if host else {}),
        },
    )


def positive_rate(value: str, source: str, line: int) -> float:
    rate = float(value)
    if not rate > 0:
        raise LogParseError(f"a rate line with rate {value}", source=source, line=line)
    return rate
