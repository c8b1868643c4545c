"""A release's results file read back (``results.json``): one row per case (``CaseRow``, release
columns filled) and one per repeat (:class:`ReleaseRepeatRow`), every field named. A results
file of an unknown schema, with an unknown field or a bad value is refused by name
(:class:`ResultsError`).

Read by the plan (the kit's released figures and start-ups), a release (the previous version)
and ``compare`` of versions; written by ``driver.release.results``, which renders the same rows
as results.csv.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator

from driver.core.summary import CaseRow
from driver.model.measure import RepeatMeasurement
from driver.schema import StrictModel, schema_version, strict_json
from driver.telemetry.summary import TELEMETRY_FIELDS

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
        fields = cls.model_fields  # a property: read once, not once per key of every row
        own = {k: v for k, v in flat.items() if k in fields}
        measured = {k: flat.get(k) for k in RepeatMeasurement.model_fields}
        unknown = set(flat) - set(own) - set(MEASUREMENT_FIELDS) - set(TELEMETRY_FIELDS)
        if unknown:
            raise ValueError(f"unknown field(s) {sorted(unknown)}")
        return cls(
            **own,
            measurement=measured if flat.get("throughput") is not None else None,
            telemetry={k: flat.get(k) for k in TELEMETRY_FIELDS},
        )


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
