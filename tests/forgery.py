"""A forger who knows the kit: logs edited to measure faster and re-hashed with the kit's own
functions, so that the door (records agree with their logs) lets them through.

``speed_up`` rewrites every step timestamp of a repeat's node logs so that each rank runs
``factor`` times faster from its first step on, then re-measures the logs with the kit's own
``measure_checked`` and rewrites the record's measurement and ``log_sha256`` to match: exactly
what a release and an audit check a record against. Only a seal signed before the edit, or the
superlinear efficiency it produces, can tell.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from driver.model.case import Case
from driver.model.plausible import measure_checked
from driver.model.results import RepeatRecord

_T = re.compile(r'"t": ([0-9.e+-]+)')


def faster_log(text: str, factor: float) -> str:
    """Every step line's ``t`` moved towards its rank's first step, ``factor`` times closer."""
    first: dict[int, float] = {}
    lines = []
    for line in text.split("\n"):
        if '"dlperf": "step"' in line:
            event = json.loads(line[line.index("{") :])
            rank, t = event["rank"], event["t"]
            start = first.setdefault(rank, t)
            line = _T.sub(f'"t": {start + (t - start) / factor!r}', line, count=1)
        lines.append(line)
    return "\n".join(lines)


def rehash(folder: Path) -> RepeatRecord:
    """The repeat's record rewritten from its logs as they are now, with the kit's functions:
    the measurement ``measure_checked`` gives and every log's SHA-256."""
    case = Case.from_dict(json.loads((folder.parent / "case.json").read_text()))
    path = folder / "record.json"
    record = RepeatRecord.parse(path.read_bytes(), str(path))
    texts = {name: (folder / name).read_text() for name in record.logs}
    measurement, _parsed = measure_checked(case, record.parser, texts, record.batch_size)
    data = json.loads(path.read_text())
    data["measurement"] = measurement.model_dump()
    data["log_sha256"] = {
        name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in record.logs
    }
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return RepeatRecord.parse(path.read_bytes(), str(path))


def speed_up(folder: Path, factor: float) -> RepeatRecord:
    """Make one repeat ``factor`` times faster and re-hash it; its new record."""
    record = json.loads((folder / "record.json").read_text())
    for name in record["logs"]:
        log = folder / name
        log.write_text(faster_log(log.read_text(), factor))
    return rehash(folder)


def speed_up_case(session: Path, case_id: str, factor: float) -> list[Path]:
    """Every repeat of one case of ``session`` made ``factor`` times faster; their folders."""
    folders = sorted((session / "cases" / case_id).glob("repeat-[0-9][0-9]"))
    for folder in folders:
        speed_up(folder, factor)
    return folders
