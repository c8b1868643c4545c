"""The record type: every read checks the schema version; NaN, infinity and bad fields are
refused by file; the committed versions' records (schema 1) still read."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from driver.model.results import (
    KNOWN_SCHEMAS,
    SCHEMA_VERSION,
    RecordError,
    RepeatRecord,
    Session,
    load_record,
)
from driver.release.archive import read_archive
from tests.synth import cached_session

REPORTS = Path(__file__).resolve().parents[1] / "reports"


def committed_records() -> dict[str, bytes]:
    out = {}
    for archive in sorted(REPORTS.glob("v*/raw/*.tar.gz")):
        for name, data in read_archive(archive).items():
            if name.endswith("/record.json"):
                out[f"{archive}:{name}"] = data
    return out


def test_the_committed_versions_records_read_with_their_field_names() -> None:
    records = committed_records()
    assert len(records) >= 86
    schemas = set()
    for name, data in records.items():
        record = RepeatRecord.parse(data, name)
        assert record.ok and record.throughput
        written, stored = record.to_dict(), json.loads(data)
        schemas.add(record.schema_)
        # the fields added since (schema 1: v0.1-cpu, v0.2-cpu and what later versions carry
        # over); the rest read back field for field
        added = {1: {"log_sha256", "fingerprints"}, 2: {"fingerprints"}}[record.schema_]
        assert set(written) - set(stored) == added, name
        assert {k: v for k, v in written.items() if k not in added} == stored, name
    assert 1 in schemas


def test_a_new_record_holds_its_schema_and_the_sha256_of_its_logs() -> None:
    session = Session(cached_session())
    _case, record, folder = next(session.records())
    assert record.schema_ == SCHEMA_VERSION == max(KNOWN_SCHEMAS)
    assert record.log_sha256 == {
        name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in record.logs
    }
    assert json.loads((folder / "record.json").read_text())["schema"] == SCHEMA_VERSION
    # every rank's fingerprint facts, as the runner parsed them (one machine: one group)
    (group,) = record.fingerprints
    assert group.ranks == [0] and group.facts == record.header["fingerprint"]


@pytest.fixture
def record_file(tmp_path: Path) -> Path:
    _case, _record, folder = next(Session(cached_session()).records())
    path = tmp_path / "record.json"
    shutil.copyfile(folder / "record.json", path)
    return path


@pytest.mark.parametrize("schema", [0, 4, 99, "1", None, 2.5])
def test_an_unknown_schema_version_is_refused_naming_file_and_version(
    record_file: Path, schema: object
) -> None:
    data = json.loads(record_file.read_text())
    data["schema"] = schema
    record_file.write_text(json.dumps(data))
    with pytest.raises(RecordError, match=f"{record_file}: field schema: .*schema version"):
        load_record(record_file)


@pytest.mark.parametrize(
    ("where", "literal"),
    [
        ("measurement.throughput", "NaN"),
        ("measurement.interval_cv", "Infinity"),
        ("started_at", "-Infinity"),
        ("extra.telemetry.interval_s", "NaN"),  # inside a free-form part too
        ("header.options.step_time", "1e999"),  # overflows to infinity
    ],
)
def test_nan_and_infinity_anywhere_are_refused(
    record_file: Path, where: str, literal: str
) -> None:
    data = json.loads(record_file.read_text())
    node = data
    *parents, last = where.split(".")
    for part in parents:
        node = node[part]
    node[last] = "@@"
    record_file.write_text(json.dumps(data).replace('"@@"', literal))
    with pytest.raises(RecordError, match=f"{record_file}: not a valid record"):
        load_record(record_file)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"measurement": {"throughput": -800.0}}, "measurement.throughput"),
        ({"batch_size": 0}, "field batch_size"),
        ({"surprise": 1}, "field surprise: Extra inputs are not permitted"),
        ({"logs": "node0.log"}, "field logs"),
    ],
)
def test_fields_out_of_range_or_unknown_are_refused(
    record_file: Path, change: dict, message: str
) -> None:
    data = json.loads(record_file.read_text())
    for key, value in change.items():
        if isinstance(value, dict):
            data[key].update(value)
        else:
            data[key] = value
    record_file.write_text(json.dumps(data))
    with pytest.raises(RecordError, match=message):
        load_record(record_file)


def test_missing_schema_or_garbage_is_refused(record_file: Path) -> None:
    data = json.loads(record_file.read_text())
    del data["schema"]
    record_file.write_text(json.dumps(data))
    with pytest.raises(RecordError, match="no schema version"):
        load_record(record_file)
    record_file.write_bytes(b"\x00garbage")
    with pytest.raises(RecordError, match="not a valid record"):
        load_record(record_file)
    with pytest.raises(RecordError, match="cannot be read"):
        load_record(record_file.with_name("absent.json"))


def test_a_resumed_session_reruns_a_repeat_whose_record_cannot_be_trusted(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    root = tmp_path / "s"
    shutil.copytree(cached_session(), root)
    session = Session(root)
    case, record, folder = next(session.records())
    assert session.finished(case, record.repeat) == record
    (folder / "record.json").write_text('{"schema": 99}')
    assert session.finished(case, record.repeat) is None
    assert f"warning: {folder / 'record.json'}: " in capsys.readouterr().err
    fresh = session.fresh_repeat_dir(case, record.repeat)
    assert not any(fresh.iterdir())
    assert (folder.parent / f"{folder.name}.failed-1" / "record.json").exists()  # kept aside
