"""The run header every node of an upstream source prints, and the node logs it opens.

Every node command of an upstream source (``driver/sources/upstream.py``) prints one header line
before the upstream launcher starts::

    DLPERF-UPSTREAM {"source": "ngc-pytorch", "model": "resnet50", "node_rank": 0, "nodes": 4, ...}

so a parser knows, from the log alone, which node wrote it, the world size, the per-device batch,
who logs steps (``logging``, the modes of :mod:`driver.parsers._upstream`) and the case's window.
Upstream code is never changed: its own lines follow the header and each format module reads
them. A log without a header, with two headers, or a set of logs whose headers disagree or miss
a node is a :class:`LogParseError`. Right after the header the node prints its own facts (its
hostname, devices and fingerprint: the host line), which only it knows.

Logs the kit did not launch (``dlperf import-logs``) get the same header from the facts the user
gives, stored with them; its optional ``"worker0_only": true`` says only node 0's log was kept
(DLPerf's practice for multi-node runs): the other nodes' logs are not required and node 0's
logging ranks stand for the whole job (samples scaled by world size / ranks logged).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from driver.parsers.base import LogParseError

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

    def bad(name: str, what: str, value: Any) -> LogParseError:
        return LogParseError(
            f"run header field {name!r} must be {what}, got {value!r}", source=source, line=number
        )

    values = {}
    for name, kind in _HEADER_FIELDS.items():
        value = data.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise bad(name, kind.__name__, value)
        values[name] = value
    worker0_only = data.get("worker0_only", False)
    if not isinstance(worker0_only, bool):
        raise bad("worker0_only", "true or false", worker0_only)
    hardware = data.get("hardware", "")
    if not isinstance(hardware, str) or any(ord(c) < 32 for c in hardware):
        raise bad("hardware", "one line of text", hardware)
    parallel = {}
    for name in PARALLEL_FIELDS:
        degree = data.get(name, 1)
        if not isinstance(degree, int) or isinstance(degree, bool) or degree < 1:
            raise bad(name, "an integer >= 1", degree)
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
