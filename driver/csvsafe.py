"""CSV that a spreadsheet opens as data, never as a formula (OWASP's CSV-injection rule).

A text cell starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is run by
Excel, LibreOffice and Google Sheets as a formula (``=HYPERLINK(...)``, ``=cmd|' /C calc'!A0``):
such a cell is written with a leading single quote, which the spreadsheet shows as text.
Numbers stay numbers (a negative number is not text). Every CSV cell the kit writes goes
through :func:`safe_cell` (``report.csv`` through :func:`csv_text`, a release's ``results.csv``
through its renderer), and the audit re-renders CSVs with it byte for byte.
"""

from __future__ import annotations

import csv
import io
import json
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


# Written as their escapes: control characters (a row is one line; Python's writer leaves a lone
# CR unquoted), format characters (U+202E would show the rest of the cell right to left, a
# zero-width space makes two names look alike) and the line and paragraph separators.
ESCAPED_CATEGORIES = ("Cc", "Cf", "Zl", "Zp")


def safe_cell(value: Any) -> Any:
    """``value`` as a CSV cell: lists and mappings as sorted JSON, formula-like text quoted,
    control and format characters and line separators written as their escapes (``\\r``,
    ``\\n``, ``\\x1b``, ``\\u202e``)."""
    if isinstance(value, (dict, list)):
        value = json.dumps(value, sort_keys=True)
    if not isinstance(value, str):
        return value
    quoted = "'" + value if value.startswith(FORMULA_TRIGGERS) else value
    if any(unicodedata.category(c) in ESCAPED_CATEGORIES for c in quoted):
        quoted = "".join(
            c.encode("unicode_escape").decode()
            if unicodedata.category(c) in ESCAPED_CATEGORIES
            else c
            for c in quoted
        )
    return quoted


def csv_text(fieldnames: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(fieldnames), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: safe_cell(v) for k, v in row.items()})
    return buffer.getvalue()
