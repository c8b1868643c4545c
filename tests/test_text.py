"""driver/text.py: free text refused at input, escaped in Markdown cells."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from driver.text import LIMITS, FreeText, check_free_text, markdown_cell


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ("8x H100\u202e SXM", "U+202E RIGHT-TO-LEFT OVERRIDE, a format character at position 8"),
        ("H100\u200b", "U+200B ZERO WIDTH SPACE, a format character"),
        ("line\nbreak", "U+000A"),
        ("bell\x07", "U+0007"),
        ("tab\there", "U+0009"),
        ("\u2066isolate", "U+2066 LEFT-TO-RIGHT ISOLATE"),
        ("a\u2028b", "U+2028 LINE SEPARATOR, a line separator"),
        ("a\u2029b", "U+2029 PARAGRAPH SEPARATOR, a paragraph separator"),
        ("nl\nx", "U+000A LINE FEED, a control character at position 3"),
        ("esc\x1b[2J", "U+001B ESCAPE"),
        ("bell\x07", "U+0007, a control character"),  # no name in Unicode, none given
    ],
)
def test_control_and_format_characters_are_refused_with_where(value: str, found: str) -> None:
    with pytest.raises(ValueError, match="not allowed; remove it") as error:
        check_free_text(value, "label")
    assert found in str(error.value)


def test_lengths_are_bounded_per_kind_and_text_must_be_text() -> None:
    assert check_free_text("x" * LIMITS["label"], "label") == "x" * LIMITS["label"]
    with pytest.raises(ValueError, match="is 10000 characters long; at most 200"):
        check_free_text("x" * 10_000, "label")
    assert check_free_text("y" * 2000, "note")
    with pytest.raises(ValueError, match="must be text, got int"):
        check_free_text(5, "name")


def test_unicode_that_is_not_a_control_passes() -> None:
    assert check_free_text("Ünïcødé 东京 — 8× H100", "name") == "Ünïcødé 东京 — 8× H100"


def test_free_text_as_a_model_field() -> None:
    class Published(BaseModel):
        publisher: FreeText("name")

    assert Published(publisher="DLPerf").publisher == "DLPerf"
    with pytest.raises(ValidationError, match="U\\+202E"):
        Published(publisher="evil\u202e")


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        ("a | b", "a \\| b"),
        ("<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"),
        ("R&D", "R&amp;D"),
        ("old\u202edata", "oldU+202Edata"),  # already on disk: shown, never obeyed
        ("row\nbreak", "rowU+000Abreak"),
        (3.5, "3.5"),
    ],
)
def test_a_markdown_cell_cannot_break_its_table(value: object, cell: str) -> None:
    assert markdown_cell(value) == cell


def test_free_text_in_a_note_opens_no_link_image_or_emphasis() -> None:
    from driver.text import markdown_inline

    reason = "see [the run](https://evil.example) **now** ![x](https://e/x.png) ~~no~~ a_b \\["
    shown = markdown_inline(reason)
    assert shown == (
        "see \\[the run\\](https://evil.example) \\*\\*now\\*\\* !\\[x\\](https://e/x.png) "
        "\\~\\~no\\~\\~ a\\_b \\\\\\["
    )
    assert markdown_inline("a | <b>") == "a \\| &lt;b&gt;"  # and a cell's escapes


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("https://x.org/a)](javascript:alert(1))",
         "https://x.org/a%29%5D%28javascript:alert%281%29%29"),
        ("https://x.org/a b|c<d>\"'", "https://x.org/a%20b%7Cc%3Cd%3E%22%27"),
        ("https://x.org/?q=1&r=2#f", "https://x.org/?q=1&amp;r=2#f"),
    ],
)  # fmt: skip
def test_a_link_target_cannot_end_its_link_or_cell(url: str, target: str) -> None:
    from driver.text import markdown_link

    assert markdown_link("DLPerf [v1]", url) == f"[DLPerf \\[v1\\]]({target})"


def test_a_link_that_is_not_http_is_shown_as_text() -> None:
    from driver.text import markdown_link

    assert markdown_link("x", "javascript:alert(1)") == "x (javascript:alert(1))"


@pytest.mark.parametrize(
    ("value", "cell", "span"),
    [
        ("run-1", False, "`run-1`"),
        ("a`b", False, "``a`b``"),  # one backtick more than the longest run
        ("a``b`", False, "``` a``b` ```"),  # padded: it ends with a backtick
        ("a|b", True, "`a\\|b`"),  # a table strips the backslash before it reads the span
        ("a|b", False, "`a|b`"),
        ("a\nb", False, "`aU+000Ab`"),  # no line break ends the list item or the row
    ],
)
def test_a_code_span_cannot_be_ended_by_its_own_text(value: str, cell: bool, span: str) -> None:
    from driver.text import markdown_code

    assert markdown_code(value, cell=cell) == span
