"""The release's typed rows: the committed versions' files read and render back byte for byte,
and a results file of an unknown schema or with a bad value is refused by name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from driver.core.released import MEASUREMENT_FIELDS, Results, ResultsError
from driver.model.measure import LOG_FACT_FIELDS, STRAGGLER_FIELDS, RepeatMeasurement
from driver.release.results import (
    csv_text,
    json_text,
    results_by_machine,
    results_schema,
)

REPORTS = Path(__file__).resolve().parents[1] / "reports"
VERSIONS = sorted(p.name for p in REPORTS.glob("v*") if (p / "results.json").exists())


@pytest.mark.parametrize("version", VERSIONS)
def test_a_committed_version_reads_and_renders_back_byte_for_byte(version: str) -> None:
    folder = REPORTS / version
    results = Results.load(folder / "results.json")
    assert results.cases and results.repeats
    assert json_text(results) == (folder / "results.json").read_text()
    assert csv_text(results) == (folder / "results.csv").read_text()
    # rows without a matching reference have no reference_source key, as written
    unmatched = [c for c in results.cases if c.reference_id is None]
    assert all("reference_source" not in c.dump() for c in unmatched)
    assert all(r.measurement is not None for r in results.repeats)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_committed_versions_schema_says_how_its_cases_are_split(version: str) -> None:
    """The versions released before results had a schema of their own hold schema 1, and
    their README layout says whether they split cases by machine (v0.4-cpu, layout 3 on)."""
    manifest = json.loads((REPORTS / version / "manifest.json").read_text())
    results = Results.load(REPORTS / version / "results.json")
    assert results.schema_ == results_schema(manifest) == 1
    split = [("fingerprint" in row.dump()) for row in results.cases]
    assert split == [results_by_machine(manifest)] * len(split)
    assert results_by_machine(manifest) == (version >= "v0.4")
    assert results_by_machine({**manifest, "results_schema": 2})  # a version of schema 2: always


def test_the_measurement_columns_come_from_the_model() -> None:
    # Every field but the straggler and peak memory facts, which records and `dlperf report`
    # carry and the released results files (written before them) do not.
    fields = [name for name in RepeatMeasurement.model_fields if name not in LOG_FACT_FIELDS]
    assert MEASUREMENT_FIELDS == (*fields, "interval_unstable")
    assert set(STRAGGLER_FIELDS) <= set(RepeatMeasurement.model_fields)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(schema=9), "schema version 9 is not one this kit reads"),
        (lambda d: d["cases"][0].update(throughput_median="fast"), "throughput_median"),
        (lambda d: d["cases"][0].pop("model"), "model"),
        (lambda d: d["repeats"][0].update(surprise=1), "unknown field"),
        (lambda d: d["repeats"][0].update(throughput=-1.0), "throughput"),
    ],
)
def test_a_bad_results_file_is_refused_by_name(tmp_path: Path, edit, message: str) -> None:
    path = tmp_path / "results.json"
    data = json.loads((REPORTS / VERSIONS[0] / "results.json").read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ResultsError, match=str(path)) as raised:
        Results.load(path)
    assert message in str(raised.value)


def test_nan_in_a_results_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    shutil.copyfile(REPORTS / VERSIONS[0] / "results.json", path)
    path.write_text(path.read_text().replace('"cv": 0', '"cv": NaN', 1))
    with pytest.raises(ResultsError, match="NaN is not a number"):
        Results.load(path)
