"""What every upstream-source log parser shares: the run header, rank prefixes, ParsedLog building.

Every node command of an upstream source (``driver/sources/upstream.py``) prints one header line
before the upstream launcher starts::

    DLPERF-UPSTREAM {"source": "ngc-pytorch", "model": "resnet50", "node_rank": 0, "nodes": 4, ...}

so a parser knows, from the log alone, which node wrote it, the world size, the per-device batch,
who logs steps (``logging``) and the case's window. Upstream code is never changed: its own lines
follow the header and each format module reads them. A log without a header, with two headers,
or a set of logs whose headers disagree or miss a node is a :class:`LogParseError`.

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

Logs the kit did not launch (``dlperf import-logs``) get the same header from the facts the user
gives, stored with them; its optional ``"worker0_only": true`` says only node 0's log was kept
(DLPerf's practice for multi-node runs): the other nodes' logs are not required and node 0's
logging ranks stand for the whole job (samples scaled by world size / ranks logged).

Over 500 lines because it is the one reading of the header, the rank prefixes and the logging
modes that nine format parsers share; each format module stays a regex and a loop.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from driver.parsers.base import LogParseError, ParsedLog, RankLog, StepPoint, Window

HEADER_MARK = "DLPERF-UPSTREAM "
# The node's own facts, printed by the node right after the header (driver.sources.base
# HOST_PROBE): the head renders the header, only the node knows its hostname, devices, hardware.
HOST_MARK = "DLPERF-HOST "
LOGGING_MODES = ("rank0", "per-node", "per-process", "last-rank")
# Model-parallel degrees a run header may state (each 1 where absent): the devices one
# data-parallel replica spans are their product, and samples are counted per replica, never
# per device (torchtitan's llama3_70b trains tensor-parallel 8: 4n32g holds 4 replicas).
PARALLEL_FIELDS = ("tensor_parallel", "pipeline_parallel", "context_parallel")
_HEADER_FIELDS: dict[str, type] = {
    "source": str,
    "model": str,
    "node_rank": int,
    "nodes": int,
    "procs_per_node": int,
    "batch": int,
    "logging": str,
    "step_offset": int,
    "warmup_steps": int,
    "measured_steps": int,
}
# mpirun --tag-output: "[1,3]<stdout>:"; torchrun --tee: "[default3]:" (local rank) or
# "[rank3]:" (global rank, newer torch).
_MPI_TAG = re.compile(r"^\[\d+,(\d+)\]<std(?:out|err)>:")
_TORCHRUN_LOCAL = re.compile(r"^\[default(\d+)\]:")
_TORCHRUN_GLOBAL = re.compile(r"^\[rank(\d+)\]:")


@dataclass(frozen=True)
class RunHeader:
    source: str
    model: str
    node_rank: int
    nodes: int
    procs_per_node: int
    batch: int  # per device
    logging: str
    step_offset: int  # a logged step index + step_offset = steps finished at that line
    warmup_steps: int
    measured_steps: int
    worker0_only: bool = False  # imported logs: only node 0's was kept (optional header field)
    # imported logs: the hardware they ran on, as the user states it (optional header field;
    # the machine's label, and its device model where the node printed no host line)
    hardware: str = ""
    tensor_parallel: int = 1  # PARALLEL_FIELDS, optional header fields
    pipeline_parallel: int = 1
    context_parallel: int = 1

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    @property
    def model_parallel(self) -> int:
        """The devices one data-parallel replica spans."""
        return self.tensor_parallel * self.pipeline_parallel * self.context_parallel

    @property
    def window(self) -> tuple[int, int]:
        return self.warmup_steps, self.warmup_steps + self.measured_steps

    def job_key(self) -> tuple:
        """Everything every node of one run agrees on (all but the node rank)."""
        return (
            self.source, self.model, self.nodes, self.procs_per_node, self.batch, self.logging,
            self.step_offset, self.warmup_steps, self.measured_steps, self.worker0_only,
            self.tensor_parallel, self.pipeline_parallel, self.context_parallel,
        )  # fmt: skip

    def to_dict(self) -> dict:
        data = {name: getattr(self, name) for name in _HEADER_FIELDS}
        if self.worker0_only:
            data["worker0_only"] = True
        if self.hardware:
            data.update(hardware=self.hardware, devices=[self.hardware])
        for name in PARALLEL_FIELDS:  # written only where not 1: older headers read as before
            if getattr(self, name) != 1:
                data[name] = getattr(self, name)
        return data


def header_line(header: RunHeader) -> str:
    return HEADER_MARK + json.dumps(header.to_dict(), sort_keys=True, separators=(",", ":"))


@dataclass
class NodeLog:
    name: str  # the log's file name (node0.log)
    header: RunHeader
    lines: list[tuple[int, str]] = field(default_factory=list)  # (line number, text) after it
    host: dict[str, Any] = field(default_factory=dict)  # hostname, devices, fingerprint, if printed


def _decode_header(text: str, source: str, number: int) -> RunHeader:
    try:
        data = json.loads(text[text.index(HEADER_MARK) + len(HEADER_MARK) :])
    except json.JSONDecodeError as error:
        raise LogParseError(
            f"broken run header ({error.msg})", source=source, line=number
        ) from None
    if not isinstance(data, dict):
        raise LogParseError("the run header is not a JSON object", source=source, line=number)
    values = {}
    for name, kind in _HEADER_FIELDS.items():
        value = data.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise LogParseError(
                f"run header field {name!r} must be {kind.__name__}, got {value!r}",
                source=source,
                line=number,
            )
        values[name] = value
    worker0_only = data.get("worker0_only", False)
    if not isinstance(worker0_only, bool):
        raise LogParseError(
            f"run header field 'worker0_only' must be true or false, got {worker0_only!r}",
            source=source,
            line=number,
        )
    hardware = data.get("hardware", "")
    if not isinstance(hardware, str) or any(ord(c) < 32 for c in hardware):
        raise LogParseError(
            f"run header field 'hardware' must be one line of text, got {hardware!r}",
            source=source,
            line=number,
        )
    parallel = {}
    for name in PARALLEL_FIELDS:
        degree = data.get(name, 1)
        if not isinstance(degree, int) or isinstance(degree, bool) or degree < 1:
            raise LogParseError(
                f"run header field {name!r} must be an integer >= 1, got {degree!r}",
                source=source,
                line=number,
            )
        parallel[name] = degree
    header = RunHeader(**values, worker0_only=worker0_only, hardware=hardware, **parallel)
    if header.logging not in LOGGING_MODES:
        raise LogParseError(
            f"run header logging {header.logging!r} is not one of {', '.join(LOGGING_MODES)}",
            source=source,
            line=number,
        )
    if min(header.nodes, header.procs_per_node, header.batch) <= 0 or not (
        0 <= header.node_rank < header.nodes
    ):
        raise LogParseError(f"run header is inconsistent: {data}", source=source, line=number)
    problem = parallel_problem(header.world_size, parallel)
    if problem:
        raise LogParseError(f"run header: {problem}", source=source, line=number)
    return header


def parallel_problem(world_size: int, degrees: Mapping[str, int]) -> str | None:
    """Why model-parallel ``degrees`` (PARALLEL_FIELDS -> degree) cannot lay out ``world_size``
    devices, or None: their product must divide it (every replica spans the same devices)."""
    product = 1
    for name in PARALLEL_FIELDS:
        product *= degrees.get(name, 1)
    if world_size % product == 0:
        return None
    shown = " x ".join(f"{name} {degrees.get(name, 1)}" for name in PARALLEL_FIELDS)
    return (
        f"{shown} = {product} devices per data-parallel replica do not divide the world size "
        f"{world_size}; give degrees whose product divides it"
    )


def _decode_host(text: str, source: str, number: int) -> dict[str, Any]:
    try:
        data = json.loads(text[text.index(HOST_MARK) + len(HOST_MARK) :])
    except json.JSONDecodeError as error:
        raise LogParseError(f"broken host line ({error.msg})", source=source, line=number) from None
    if not isinstance(data, dict):
        data = {}
    hostname, devices = data.get("hostname"), data.get("devices")
    if not isinstance(hostname, str) or not (
        isinstance(devices, list) and all(isinstance(d, str) for d in devices)
    ):
        raise LogParseError(
            "the host line must be a JSON object with a hostname (text) and devices (a list of "
            "text)",
            source=source,
            line=number,
        )
    host: dict[str, Any] = {"hostname": hostname, "devices": devices}
    # The node's fingerprint (driver.bench.fingerprint), on lines of nodes that print it; logs
    # from before it, and imported logs, have none and are read as before.
    facts, label = data.get("fingerprint"), data.get("hardware")
    if facts is not None or label is not None:
        if not isinstance(facts, dict) or not isinstance(label, str) or not label.strip():
            raise LogParseError(
                "the host line's fingerprint must come with its label: 'fingerprint' a JSON "
                f"object and 'hardware' a non-empty text, got {type(facts).__name__} and "
                f"{label!r} (a node of another kit version? re-run it with this kit)",
                source=source,
                line=number,
            )
        host.update(fingerprint=facts, hardware=label)
    return host


def rank_host(logs: Sequence[NodeLog], rank: int) -> dict[str, Any]:
    """The hostname, devices and (where printed) hardware fingerprint the node of logging rank
    ``rank`` printed ({} where it printed none: imported logs, or logs from before nodes printed
    them)."""
    header = logs[0].header
    if header.logging == "rank0":
        node = 0
    elif header.logging == "last-rank":
        node = header.nodes - 1
    elif header.logging == "per-node":
        node = rank
    else:
        node = rank // header.procs_per_node
    return next((dict(log.host) for log in logs if log.header.node_rank == node), {})


def node_logs(texts: Mapping[str, str], parser: str) -> list[NodeLog]:
    """One :class:`NodeLog` per text, ordered by node rank; every node of the run present once."""
    logs: list[NodeLog] = []
    for name, text in texts.items():
        current: NodeLog | None = None
        for number, raw in enumerate(text.replace("\x00", "").splitlines(), start=1):
            if HEADER_MARK in raw:
                if current is not None:
                    raise LogParseError(
                        "a second run header: two runs (or two nodes) were written into one log",
                        source=name,
                        line=number,
                    )
                current = NodeLog(name=name, header=_decode_header(raw, name, number))
            elif current is not None and not current.lines and HOST_MARK in raw:
                current.host = _decode_host(raw, name, number)
            elif current is not None:
                current.lines.append((number, raw))
        if current is None:
            raise LogParseError(
                f"no {HEADER_MARK.strip()} run header: not a log of a dlperf upstream run "
                f"(parser {parser})",
                source=name,
            )
        logs.append(current)
    if not logs:
        raise LogParseError(f"no logs to parse (parser {parser})")
    first = logs[0].header
    for log in logs[1:]:
        if log.header.job_key() != first.job_key():
            raise LogParseError(
                f"{log.name} belongs to another run than {logs[0].name}: "
                f"{log.header.to_dict()} vs {first.to_dict()}"
            )
    by_rank: dict[int, NodeLog] = {}
    for log in logs:
        if log.header.node_rank in by_rank:
            raise LogParseError(
                f"node rank {log.header.node_rank} appears in both "
                f"{by_rank[log.header.node_rank].name} and {log.name}"
            )
        by_rank[log.header.node_rank] = log
    if first.worker0_only:
        if set(by_rank) != {0}:
            raise LogParseError(
                f"worker0_only: exactly node 0's log is expected, got the logs of node(s) "
                f"{sorted(by_rank)}"
            )
        return [by_rank[0]]
    missing = sorted(set(range(first.nodes)) - set(by_rank))
    if missing:
        raise LogParseError(
            f"the run has {first.nodes} nodes but no log of node(s) {missing} (lost node?)"
        )
    return [by_rank[rank] for rank in sorted(by_rank)]


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
    if header.logging == "last-rank":
        return _last_rank(log, rank, line)
    if rank is None and header.logging == "per-process":
        raise LogParseError(
            "a step line without a rank prefix: with several processes per node their lines "
            "cannot be told apart (start the source with its rank-tagging launcher)",
            source=log.name,
            line=line,
        )
    if rank is not None and rank // header.procs_per_node != header.node_rank:
        raise LogParseError(
            f"a step line of rank {rank} in the log of node {header.node_rank} (mixed logs)",
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
    if rank // header.procs_per_node != header.node_rank:
        raise LogParseError(
            f"a step line of rank {rank} in the log of node {header.node_rank} (mixed logs)",
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
