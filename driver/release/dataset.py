"""A release's raw data as the release and the audit both read it: archive members -> repeats.

Both go through :func:`load_dataset`, which passes every repeat through the door
(``driver.verify``: the checks and the re-measurement ``dlperf report`` applies too), so what a
release publishes and what an audit recomputes come from the same code reading the same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from driver.model.measure import Window, parse_logs
from driver.model.results import NODE_LOG, RECORD
from driver.parsers.base import LogParseError, RankLog
from driver.release.scaling import ProbeError, parse_probe_log
from driver.telemetry.summary import node_of, summarize_samples
from driver.verify.folder import session_meta
from driver.verify.hardware import ATTESTATION
from driver.verify.repeat import (
    CASE_FILE,
    RepeatFiles,
    RepeatRefused,
    Unfinished,
    VerifiedRepeat,
    verify_repeat,
    with_machine_labels,
)

_REPEAT = re.compile(r"^repeat-\d+$")
_PROBE_LOG = re.compile(r"^([^/]+)/probes/(allreduce-[^/]+)/node0\.log$")


def session_of(repeat: VerifiedRepeat) -> str:
    """The session a repeat of a release came from (its folder is ``<session>/cases/...``)."""
    return repeat.folder.partition("/")[0]


def telemetry_files(repeat: VerifiedRepeat) -> dict[str, str]:
    """The repeat folder's telemetry files (name -> text)."""
    files = repeat.source.files if repeat.source else {}
    return {name: _text(data) for name, data in files.items() if node_of(name) is not None}


@dataclass
class Dataset:
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> session.json
    repeats: list[VerifiedRepeat] = field(default_factory=list)  # finished, through the door
    probes: list[dict[str, Any]] = field(default_factory=list)  # re-parsed from their logs
    problems: list[tuple[str, str]] = field(default_factory=list)  # (member, message)
    members: dict[str, bytes] = field(default_factory=dict)


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")  # as the runner reads logs


def load_dataset(members: Mapping[str, bytes]) -> Dataset:
    """Sessions, repeats and probes from archive members (``<session>/...`` paths)."""
    data = Dataset(members=dict(members))
    for name, content in sorted(members.items()):
        parts = PurePosixPath(name).parts
        if len(parts) == 2 and parts[1] == "session.json":
            try:
                data.sessions[parts[0]] = session_meta(content)
            except ValueError as error:
                data.problems.append((name, str(error)))
        elif len(parts) >= 4 and parts[1] == "cases" and parts[-1] == RECORD:
            if _REPEAT.match(parts[-2]):
                _load_repeat(data, name)
        else:
            match = _PROBE_LOG.match(name)
            if match:
                try:
                    probe = parse_probe_log(_text(content))
                except ProbeError as error:
                    data.problems.append((name, f"probe log: {error}"))
                    continue
                probe.update(session=match[1], log=name, topology=match[2][len("allreduce-") :])
                data.probes.append(probe)
    for folder in sorted({str(PurePosixPath(m).parent) for m in members}):
        parts = PurePosixPath(folder).parts
        if len(parts) >= 4 and parts[1] == "cases" and _REPEAT.match(parts[-1]):
            if f"{folder}/record.json" not in members:
                data.problems.append((f"{folder}/record.json", "missing (the repeat has logs)"))
    for name in sorted({PurePosixPath(m).parts[0] for m in members}):
        if name not in data.sessions and f"{name}/session.json" not in members:
            data.problems.append((f"{name}/session.json", "missing"))
    data.repeats = with_machine_labels(data.repeats)
    return data


def _load_repeat(data: Dataset, name: str) -> None:
    """The repeat whose record is member ``name``, through the door (logs win over the record:
    the release decides whether a re-measured repeat may be published, the audit checks it
    against the manifest); a refusal is a problem of the member it names."""
    folder = str(PurePosixPath(name).parent)
    case_folder = str(PurePosixPath(folder).parent)
    session, _cases, case_dir = case_folder.split("/", 2)
    prefix = folder + "/"
    files = {
        member[len(prefix) :]: content
        for member, content in data.members.items()
        if member.startswith(prefix) and "/" not in member[len(prefix) :]
    }
    repeat_files = RepeatFiles(
        folder=folder,
        case_dir=case_dir,
        case_json=data.members.get(f"{case_folder}/{CASE_FILE}"),
        files=files,
        attestation=data.members.get(f"{session}/{ATTESTATION}"),
        attestation_path=f"{session}/{ATTESTATION}",
    )
    try:
        verified = verify_repeat(repeat_files, accept_remeasured=True)
    except RepeatRefused as refusal:
        data.problems.append((refusal.path, refusal.reason))
        return
    if isinstance(verified, Unfinished):
        data.problems.append((name, f"verdict {verified.record.verdict!r}: not a finished repeat"))
        return
    data.repeats.append(verified)


def window_of(repeat: VerifiedRepeat) -> Window:
    warmup, measured, _total = repeat.case.window_for(repeat.written.batch_size)
    return Window(warmup, measured)


def _cut(ranks: list[RankLog], window: Window) -> tuple[float, float] | None:
    starts, ends = [], []
    for rank in ranks:
        by_step = {p.step: p.t for p in rank.points}
        if window.first in by_step and window.last in by_step:
            starts.append(by_step[window.first])
            ends.append(by_step[window.last])
    return (min(starts), max(ends)) if starts else None


def step_windows(repeat: VerifiedRepeat) -> dict[int, tuple[float, float]]:
    """node index -> (start, end) of the measured window on that node's clock (its ranks'
    step timestamps); nodes whose log cannot be cut are left out.

    ``node<i>.log`` is the log of node rank ``i`` (the runtimes write them in node order): when
    every rank's header names its node rank, the whole parse is split by it; otherwise each
    node's log is parsed on its own.
    """
    window = window_of(repeat)
    parsed = repeat.parsed
    nodes = {int(m[1]): name for name in repeat.logs if (m := NODE_LOG.match(name))}
    out: dict[int, tuple[float, float]] = {}
    if (
        parsed.ranks
        and all(isinstance(r.header.get("node_rank"), int) for r in parsed.ranks.values())
    ):
        for index in nodes:
            ranks = [r for r in parsed.ranks.values() if r.header["node_rank"] == index]
            cut = _cut(ranks, window)
            if cut:
                out[index] = cut
        return out
    for index, name in nodes.items():
        try:
            alone = parse_logs(repeat.written.parser, {name: repeat.logs[name]})
        except (LogParseError, KeyError, ValueError):
            continue
        cut = _cut(list(alone.ranks.values()), window)
        if cut:
            out[index] = cut
    return out


def telemetry_summary(repeat: VerifiedRepeat) -> dict[str, Any]:
    run = (repeat.written.started_at, repeat.written.finished_at)
    files = telemetry_files(repeat)
    windows = step_windows(repeat) if files else {}
    return summarize_samples(files, windows, run)
