"""Edits of a real session's repeats for tests: rank headers rewritten as another machine (or an
older kit) would have written them, with the logs re-hashed into the record and rank 0's header
and the ranks' fingerprint facts in the record kept equal to the logs', so that only what the
edit means is under test."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from driver.model.measure import parse_logs
from driver.model.results import rank_fingerprints
from driver.parsers.base import LogParseError

HeaderEdit = Callable[[dict], None]  # changes one rank's header in place


def rewrite_headers(folder: Path, edit: HeaderEdit) -> None:
    """Apply ``edit`` to every rank's header line in the repeat's logs and to the record's."""
    record_path = folder / "record.json"
    record = json.loads(record_path.read_text())
    for name in record["logs"]:
        log = folder / name
        lines = []
        for line in log.read_text().split("\n"):
            if '"dlperf": "header"' in line:
                start = line.index("{")
                event = json.loads(line[start:])
                edit(event)
                line = line[:start] + json.dumps(event, sort_keys=True)
            lines.append(line)
        log.write_text("\n".join(lines))
        record["log_sha256"][name] = hashlib.sha256(log.read_bytes()).hexdigest()
    edit(record["header"])
    if record.get("fingerprints") is not None:  # as the runner takes them from the logs
        texts = {name: (folder / name).read_text() for name in record["logs"]}
        try:
            facts = rank_fingerprints(parse_logs(record["parser"], texts))
        except LogParseError:  # logs no parser reads (e.g. two hosts in one node's log):
            pass  # the record keeps what was measured, and the door refuses the logs
        else:
            record["fingerprints"] = [group.model_dump() for group in facts]
    record_path.write_text(json.dumps(record))


def rewrite_session_headers(root: Path, edit: HeaderEdit) -> Path:
    for record_path in sorted(root.glob("cases/**/repeat-*/record.json")):
        rewrite_headers(record_path.parent, edit)
    return root


def drop_fingerprint(header: dict) -> None:
    """A header as the kit wrote it before the hardware fingerprint."""
    header.pop("fingerprint", None)
    header.pop("hardware", None)
