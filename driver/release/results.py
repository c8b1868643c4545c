"""A release's results files, results.json and results.csv: one row per case (``CaseRow``,
release columns filled) and one per repeat (``ReleaseRepeatRow``), every field named.

Rendering is deterministic: the audit renders the same files from its own recomputation and
compares them (structurally, then byte for byte). ``driver.core.released.Results`` reads them
back: a results file of an unknown schema, with an unknown field or a bad value is refused by
name.

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
from typing import Any

from driver.core.released import ReleaseRepeatRow, Results
from driver.csvsafe import safe_cell
from driver.model.results import RepeatRecord
from driver.release.compute import Computed
from driver.release.dataset import session_of
from driver.verify.repeat import VerifiedRepeat

RESULTS_SCHEMA = 2  # what a release writes


# A repeat row's fields that are its record's (case_id, repeat, verdict, parser, runtime, logs,
# started_at, finished_at), taken by name; the measurement is the logs', not the record's.
RECORD_FIELDS = (set(ReleaseRepeatRow.model_fields) & set(RepeatRecord.model_fields)) - {
    "measurement"
}


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
