"""A release's results files, results.json and results.csv: one row per case (``CaseRow``,
release columns filled) and one per repeat (``ReleaseRepeatRow``), every field named.

Rendering is deterministic: the audit renders the same files from its own recomputation and
compares them (structurally, then byte for byte). :class:`Results` reads them back: a results
file of an unknown schema, with an unknown field or a bad value is refused by name.

The results have a schema of their own (``schema`` in results.json, ``results_schema`` in the
manifest), apart from the README's layout: 1, cases split by device model, or, from README
layout 3 on, by machine (the versions released before results had a number of their own; the
one place their layout decides it: :func:`results_by_machine`); 2, cases split by machine (a
``fingerprint`` column; references only like with like) with the superlinear and signature
columns (``SCHEMA_2_FIELDS``, written where set). Every version's results are recomputed.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator

from driver.core.summary import CaseRow
from driver.csvsafe import safe_cell
from driver.model.measure import RepeatMeasurement
from driver.model.results import RepeatRecord
from driver.release.compute import Computed
from driver.release.dataset import session_of
from driver.schema import StrictModel, schema_version, strict_json
from driver.telemetry.summary import TELEMETRY_FIELDS
from driver.verify.repeat import VerifiedRepeat

RESULTS_SCHEMA = 2  # what a release writes
KNOWN_RESULTS_SCHEMAS = (1, 2)
ResultsSchema = schema_version(KNOWN_RESULTS_SCHEMAS)
MEASUREMENT_FIELDS = RepeatMeasurement.columns()


class ReleaseRepeatRow(StrictModel):
    """A repeat row: the record's facts, its measurement recomputed from the raw logs (every
    measurement field, empty where the logs give none) and its telemetry summary."""

    row: Literal["repeat"] = "repeat"
    case_id: str
    repeat: int
    session: str
    folder: str
    batch_per_device: int
    parser: str
    runtime: str
    logs: list[str]
    started_at: float
    finished_at: float
    verdict: str
    error: str | None
    measurement: RepeatMeasurement | None
    telemetry: dict[str, Any]
    # a file of the repeat (or its case.json) a person vouched for on resume (``--adopt``):
    # adopted, not measured by this kit; written only where true
    adopted: bool | None = None

    def dump(self) -> dict[str, Any]:
        unset = {"adopted"} if self.adopted is None else set()
        out = self.model_dump(exclude={"measurement", "telemetry", *unset})
        measured = self.measurement.model_dump() if self.measurement else {}
        out.update({name: measured.get(name) for name in MEASUREMENT_FIELDS})
        out.update({name: self.telemetry.get(name) for name in TELEMETRY_FIELDS})
        return out

    @classmethod
    def load(cls, flat: dict[str, Any]) -> ReleaseRepeatRow:
        own = {k: v for k, v in flat.items() if k in cls.model_fields}
        measured = {k: flat.get(k) for k in RepeatMeasurement.model_fields}
        unknown = set(flat) - set(own) - set(MEASUREMENT_FIELDS) - set(TELEMETRY_FIELDS)
        if unknown:
            raise ValueError(f"unknown field(s) {sorted(unknown)}")
        return cls(
            **own,
            measurement=measured if flat.get("throughput") is not None else None,
            telemetry={k: flat.get(k) for k in TELEMETRY_FIELDS},
        )


# A repeat row's fields that are its record's (case_id, repeat, verdict, parser, runtime, logs,
# started_at, finished_at), taken by name; the measurement is the logs', not the record's.
RECORD_FIELDS = (set(ReleaseRepeatRow.model_fields) & set(RepeatRecord.model_fields)) - {
    "measurement"
}


class ResultsError(ValueError):
    """A results.json the kit cannot read (names the file and the problem)."""


class Results(StrictModel):
    schema_: ResultsSchema = Field(alias="schema")
    version: str
    cases: list[CaseRow]  # every one a release's row: its table and repeats named
    repeats: list[ReleaseRepeatRow]

    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True)

    @field_validator("cases")
    @classmethod
    def _release_rows(cls, rows: list[CaseRow]) -> list[CaseRow]:
        for index, row in enumerate(rows):
            missing = [
                name
                for name in ("row", "repeat_throughputs", "table")
                if getattr(row, name) is None
            ]
            if missing:
                raise ValueError(
                    f"case {index} ({row.case_id}) is not a release's row: no {', '.join(missing)}"
                )
        return rows

    def dump(self) -> dict[str, Any]:
        return {
            "schema": self.schema_,
            "version": self.version,
            "cases": [c.dump() for c in self.cases],
            "repeats": [r.dump() for r in self.repeats],
        }

    @classmethod
    def load(cls, path: Path) -> Results:
        try:
            data = strict_json(path.read_bytes())
            if not isinstance(data, dict):
                raise ValueError("a JSON object is expected")
            return cls(
                schema=data.get("schema"),
                version=data.get("version"),
                cases=data.get("cases", []),
                repeats=[ReleaseRepeatRow.load(r) for r in data.get("repeats", [])],
            )
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])).replace('schema_', 'schema')}: {e['msg']}"
                for e in error.errors()[:5]
            )
            raise ResultsError(f"{path}: {problems}") from None
        except (OSError, ValueError, TypeError, AttributeError) as error:
            raise ResultsError(f"{path}: not a readable results file ({error})") from None


def repeat_row(
    repeat: VerifiedRepeat, telemetry: dict[str, Any], adopted: bool = False
) -> ReleaseRepeatRow:
    """A verified repeat's row: its record's fields of the same name as the row's, where it
    was read from, the measurement its logs give, its telemetry summary and, where its session
    adopted files of it, the mark."""
    return ReleaseRepeatRow(
        **repeat.written.model_dump(include=RECORD_FIELDS),
        session=session_of(repeat),
        folder=repeat.folder,
        batch_per_device=repeat.written.batch_size,
        error=None,  # the door lets no repeat through whose logs give no measurement
        measurement=repeat.measurement,
        telemetry=telemetry,
        adopted=adopted or None,
    )


def results_data(computed: Computed, version: str, schema: int = RESULTS_SCHEMA) -> Results:
    return Results(
        schema=schema,
        version=version,
        cases=[computed.rows[s.key] for s in computed.summaries],
        repeats=[
            repeat_row(r, computed.telemetry[r.folder], r.folder in computed.adopted)
            for r in computed.repeats
        ],
    )


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # never NaN in a results file (telemetry is summarised elsewhere)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def json_text(data: Results | dict[str, Any]) -> str:
    plain = data.dump() if isinstance(data, Results) else data
    return json.dumps(_finite(plain), indent=2, sort_keys=True) + "\n"


# --------------------------------------------------------------------------------------------
# CSV


def csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, int):
        return str(value)
    return safe_cell(str(value))  # text: never a spreadsheet formula (driver/csvsafe.py)


def csv_text(data: Results) -> str:
    """One row per case, then one per repeat; the columns are the union, every field named."""
    plain = data.dump()
    rows = plain["cases"] + plain["repeats"]
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([csv_cell(row.get(c)) for c in columns])
    return buffer.getvalue()


def readme_layout(manifest: dict[str, Any]) -> int:
    """The layout of the README a version was released with (absent in the first: 1)."""
    return int(manifest.get("readme_layout", 1))


def results_schema(manifest: dict[str, Any]) -> int:
    """The schema of a version's results (absent in versions released before it: 1)."""
    return int(manifest.get("results_schema", 1))


def results_by_machine(manifest: dict[str, Any]) -> bool:
    """Whether a version's results split cases by machine: schema 2 on; schema 1 from README
    layout 3 (v0.4), the by-device split before."""
    return results_schema(manifest) >= 2 or readme_layout(manifest) >= 3
