"""driver/csvsafe.py: no cell a spreadsheet would run as a formula."""

from __future__ import annotations

import csv
import io

import pytest

from driver.csvsafe import csv_text, safe_cell


@pytest.mark.parametrize(
    "cell",
    ['=HYPERLINK("http://x","y")', "=cmd|' /C calc'!A0", "@SUM(A1)", "+1+1", "-2+3", "\tx", "\rx"],
)
def test_formula_text_is_quoted(cell: str) -> None:
    assert safe_cell(cell).startswith("'")
    row = next(csv.DictReader(io.StringIO(csv_text(["name"], [{"name": cell}]))))
    assert not row["name"].startswith(("=", "+", "-", "@", "\t", "\r"))


def test_numbers_and_plain_text_are_unchanged() -> None:
    assert safe_cell(-1.5) == -1.5 and safe_cell(3) == 3 and safe_cell(None) is None
    assert safe_cell("PyTorch (ngc) w/XLA") == "PyTorch (ngc) w/XLA"
    assert safe_cell({"b": 1, "a": [2]}) == '{"a": [2], "b": 1}'


def test_control_characters_cannot_split_a_row() -> None:
    text = csv_text(["name", "n"], [{"name": "a\rb\nc\x1b", "n": 1}])
    assert text == "name,n\na\\rb\\nc\\x1b,1\n"
    assert len(list(csv.reader(io.StringIO(text)))) == 2


def test_format_characters_and_line_separators_are_written_as_escapes() -> None:
    """U+202E would show the rest of a cell right to left, U+200B makes two names look alike,
    U+2028 ends a line in some readers: written as their escapes, never as themselves."""
    text = csv_text(["name"], [{"name": "a\u202eb\u200bc\u2028d"}])
    assert text == "name\na\\u202eb\\u200bc\\u2028d\n"
    assert safe_cell("Ünïcødé 东京 — 8× H100") == "Ünïcødé 东京 — 8× H100"  # text stays text
