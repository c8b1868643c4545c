"""``dlperf report`` prints what the logs give: every repeat re-measured from its raw logs."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from driver.core.report import verified_records
from driver.core.results import Session
from driver.release.synth import cached_session


def session_copy(tmp_path: Path) -> Path:
    root = tmp_path / "s"
    shutil.copytree(cached_session(), root)
    return root


def test_a_whole_session_is_verified_from_its_logs(tmp_path: Path) -> None:
    root = session_copy(tmp_path)
    verified = verified_records([root])
    assert verified.refused == []
    recorded = {(c.id, r.repeat): r for c, r, _ in Session(root).records()}
    assert len(verified.records) == len(recorded) == 9
    for case, record in verified.records:
        assert record.measurement == recorded[(case.id, record.repeat)].measurement


def test_a_schema_1_record_without_log_hashes_is_still_checked_against_its_logs(
    tmp_path: Path,
) -> None:
    root = session_copy(tmp_path)
    _case, _record, folder = next(Session(root).records())
    data = json.loads((folder / "record.json").read_text())
    data["schema"] = 1
    del data["log_sha256"]
    (folder / "record.json").write_text(json.dumps(data))
    assert verified_records([root]).refused == []
    log = folder / "node0.log"
    lines = log.read_text().split("\n")
    index = next(i for i, line in enumerate(lines) if '"step": 12,' in line)
    lines[index] = lines[index].replace('"samples": 8,', '"samples": 9,')
    log.write_text("\n".join(lines))
    (refused,) = verified_records([root]).refused
    assert refused.startswith(f"{folder / 'record.json'}: measurement.throughput is ")


def test_a_rewritten_record_with_rehashed_logs_is_still_recomputed(tmp_path: Path) -> None:
    root = session_copy(tmp_path)
    _case, _record, folder = next(Session(root).records())
    log = folder / "node0.log"
    log.write_text(log.read_text().replace('"samples": 8', '"samples": 16'))
    data = json.loads((folder / "record.json").read_text())
    data["log_sha256"]["node0.log"] = hashlib.sha256(log.read_bytes()).hexdigest()
    (folder / "record.json").write_text(json.dumps(data))
    (refused,) = verified_records([root]).refused
    assert str(folder / "record.json") in refused


def test_a_failed_repeat_is_not_a_refusal(tmp_path: Path) -> None:
    root = session_copy(tmp_path)
    _case, _record, folder = next(Session(root).records())
    data = json.loads((folder / "record.json").read_text())
    data.update(verdict="failed", measurement=None)
    (folder / "record.json").write_text(json.dumps(data))
    verified = verified_records([root])
    assert verified.refused == [] and len(verified.records) == 8
