"""Parser for our own per-step JSON lines (``driver.bench.protocol``).

Lines that are not protocol records (warnings, launcher chatter, tracebacks) are ignored; a
protocol line that does not decode, a step out of order, or a rank seen in two logs is an error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

from driver.bench.protocol import TAG
from driver.parsers.base import PARSERS, LogParseError, ParsedLog, RankLog, StepPoint

_MARK = f'"{TAG}":'  # launchers may prefix lines (e.g. "[default0]:"), so search for it


@PARSERS.register("dlperf-jsonl")
class DlperfJsonlParser:
    name = "dlperf-jsonl"

    def parse(self, texts: Mapping[str, str]) -> ParsedLog:
        ranks: dict[int, RankLog] = {}
        owner: dict[int, str] = {}
        world_sizes: set[int] = set()
        for source, text in texts.items():
            for number, line in enumerate(text.splitlines(), start=1):
                record = _decode(line, source, number)
                if record is None:
                    continue
                rank = record.get("rank")
                if not isinstance(rank, int):
                    raise LogParseError(
                        "record without an integer rank", source=source, line=number
                    )
                if owner.setdefault(rank, source) != source:
                    raise LogParseError(
                        f"rank {rank} appears in both {owner[rank]} and {source}", source=source
                    )
                log = ranks.setdefault(rank, RankLog(rank=rank))
                try:
                    _apply(log, record, source, number, world_sizes)
                except LogParseError as error:
                    if error.line is not None:
                        raise
                    raise LogParseError(str(error), source=source, line=number) from None
                except (KeyError, TypeError, ValueError, OverflowError) as error:
                    raise LogParseError(  # a field missing or mistyped: named with its line
                        f"malformed {record[TAG]!r} record ({type(error).__name__}: {error})",
                        source=source,
                        line=number,
                    ) from None
        if not ranks:
            raise LogParseError("no dlperf step records found", source=",".join(texts))
        if len(world_sizes) > 1:
            raise LogParseError(f"ranks disagree on the world size: {sorted(world_sizes)}")
        _one_host_per_log(ranks, owner)
        world_size = world_sizes.pop() if world_sizes else len(ranks)
        return ParsedLog(ranks=ranks, world_size=world_size)


def _decode(line: str, source: str, number: int) -> dict | None:
    start = line.find("{")
    if start < 0 or _MARK not in line:
        return None
    try:
        record = json.loads(line[start:])
    except json.JSONDecodeError as error:
        raise LogParseError(f"broken record ({error.msg})", source=source, line=number) from None
    return record if isinstance(record, dict) and TAG in record else None


def _apply(log: RankLog, record: dict, source: str, number: int, world_sizes: set[int]) -> None:
    kind = record[TAG]
    if kind == "header":
        log.header = record
        if isinstance(record.get("world_size"), int):
            world_sizes.add(record["world_size"])
    elif kind == "begin":
        if log.points:
            raise LogParseError(f"rank {log.rank} begins twice", source=source, line=number)
        log.points.append(StepPoint(step=0, t=float(record["t"]), samples=0))
    elif kind == "step":
        if not log.points:
            raise LogParseError(
                f"rank {log.rank} logs a step before begin", source=source, line=number
            )
        step, previous = int(record["step"]), log.points[-1]
        if step != previous.step + 1 or float(record["t"]) < previous.t:
            raise LogParseError(
                f"rank {log.rank}: step {step} (t={record['t']}) does not follow step "
                f"{previous.step} (t={previous.t})",
                source=source,
                line=number,
            )
        log.points.append(
            StepPoint(
                step=step,
                t=float(record["t"]),
                samples=int(record["samples"]),
                synced=record.get("synced", True) is not False,
            )
        )
    elif kind == "end":
        log.finished = True
        if "peak_memory" in record:
            log.peak_memory = _peak_memory(record["peak_memory"], log.rank)
    elif kind == "device-window":
        seconds = record["seconds"]
        if type(seconds) not in (int, float) or not math.isfinite(seconds) or seconds <= 0:
            raise LogParseError(f"rank {log.rank}: device-window seconds is {seconds!r}, not > 0")
        log.device_window_s = float(seconds)


def _peak_memory(value: object, rank: int) -> dict[str, int | str]:
    """An end record's ``peak_memory``: whole non-negative ``bytes`` (and ``nvml_bytes``, where
    given) and a named ``source``; anything else is a malformed log."""
    if not isinstance(value, dict):
        raise LogParseError(
            f"rank {rank}: peak_memory is {value!r}, not an object of bytes and source"
        )

    def count(name: str) -> int:
        number = value.get(name)
        if type(number) is not int or number < 0:
            raise LogParseError(
                f"rank {rank}: peak_memory.{name} is {number!r}, not a whole number of bytes >= 0"
            )
        return number

    source = value.get("source")
    if not isinstance(source, str) or not source.strip():
        raise LogParseError(f"rank {rank}: peak_memory.source is {source!r}, not a name")
    found: dict[str, int | str] = {"bytes": count("bytes"), "source": source}
    if "nvml_bytes" in value:
        found["nvml_bytes"] = count("nvml_bytes")
    return found


def _one_host_per_log(ranks: Mapping[int, RankLog], owner: Mapping[int, str]) -> None:
    """A node's log holds the ranks of one node: ranks naming two hostnames in one log are
    a log edited or pasted together from two machines."""
    hosts: dict[str, dict[str, int]] = {}
    for rank, log in sorted(ranks.items()):
        hostname = (log.header or {}).get("hostname")
        if isinstance(hostname, str):
            hosts.setdefault(owner[rank], {}).setdefault(hostname, rank)
    for source, named in hosts.items():
        if len(named) > 1:
            shown = ", ".join(f"rank {rank} on {host!r}" for host, rank in named.items())
            raise LogParseError(
                f"one node's log names {len(named)} hosts ({shown}): a node's ranks run on one "
                "host; the log was edited or joined from two machines",
                source=source,
            )
