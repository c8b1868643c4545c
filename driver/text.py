"""Free text that may reach a table or a README: refused at input, escaped at output.

A label, a publisher, a machine name, a note or a URL comes from a file a person typed (an
import file, an attestation, a changelog) or from a log header. Two rules keep such text from
rewriting what the reader sees:

- at input (:func:`check_free_text`, :data:`FreeText`): no control or format character and no
  line or paragraph separator (Unicode categories Cc, Cf, Zl and Zp: a newline or U+2028 ends a
  table row, U+202E turns the rest of a line right to left, a zero-width character makes two
  labels look alike) and a length bound per kind of field (:data:`LIMITS`);
- at output (:func:`markdown_cell`): a Markdown table cell escapes ``|`` (a column break) and
  the HTML characters ``& < >`` (a ``<script>`` or a tag that hides the rest of the page);
  free text in prose or a note (:func:`markdown_inline`) also escapes what would make it a
  link, an image or emphasis (``[ ] * _ ~ \\``), and a link (:func:`markdown_link`) gets its
  text escaped so and its target percent-encoded, so a URL holding ``)](`` stays one link.
  CSV cells go through ``driver.csvsafe.safe_cell`` (formula prefixes, control characters).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated, Any
from urllib.parse import quote

from pydantic import AfterValidator

# The longest text each kind of field may hold (characters).
LIMITS = {
    "label": 200,  # a hardware label, a variant or series label
    "name": 200,  # a publisher, a machine, a source's display name
    "url": 2048,
    "note": 2000,  # a note, a changelog entry, a reason
}
REFUSED_CATEGORIES = {
    "Cc": "control character",
    "Cf": "format character",
    "Zl": "line separator",
    "Zp": "paragraph separator",
}


# Control characters have no name in the Unicode database; these are the ones people type.
_CONTROL_NAMES = {
    "\x00": "NULL", "\t": "TAB", "\n": "LINE FEED", "\x0b": "LINE TABULATION",
    "\x0c": "FORM FEED", "\r": "CARRIAGE RETURN", "\x1b": "ESCAPE", "\x7f": "DELETE",
    "\x85": "NEXT LINE",
}  # fmt: skip


def unsafe_character(value: str) -> str | None:
    """How the first control or format character of ``value`` reads (``U+202E RIGHT-TO-LEFT
    OVERRIDE, a format character``), or None when there is none."""
    if value.isascii() and value.isprintable():
        return None  # ASCII's only refused characters are controls: skip the per-character walk
    for char in value:
        category = unicodedata.category(char)
        if category in REFUSED_CATEGORIES:
            name = unicodedata.name(char, None) or _CONTROL_NAMES.get(char)
            named = f" {name}" if name else ""
            return f"U+{ord(char):04X}{named}, a {REFUSED_CATEGORIES[category]}"
    return None


def check_free_text(value: Any, kind: str) -> str:
    """``value`` when it is a string of at most ``LIMITS[kind]`` characters without control
    or format characters; else ValueError saying what was found and what is allowed."""
    limit = LIMITS[kind]
    if not isinstance(value, str):
        raise ValueError(f"must be text, got {type(value).__name__}")
    if len(value) > limit:
        raise ValueError(f"is {len(value)} characters long; at most {limit} are allowed")
    found = unsafe_character(value)
    if found:
        raise ValueError(
            f"holds {found} at position {_position(value)}: control and format characters "
            "(line breaks, tabs, bidi overrides, zero-width characters) are not allowed; "
            "remove it"
        )
    return value


# An HTML tag's start: a README renders a title or a changelog as Markdown, where a tag is
# live HTML (a ``<script>``, an ``<img onerror=...>``, a ``<details>`` hiding what follows).
_TAG = re.compile(r"<[A-Za-z!/?]")


def check_plain_text(value: Any, kind: str) -> str:
    """:func:`check_free_text`, and no HTML tag: text a person writes into a README (a
    release's title and changelog), which renders as Markdown and would let a tag through."""
    check_free_text(value, kind)
    tag = _TAG.search(value)
    if tag:
        raise ValueError(
            f"holds an HTML tag ({tag[0]}...): plain text only, a README renders it as "
            "Markdown; write it without '<'"
        )
    return value


def _position(value: str) -> int:
    return next(i for i, c in enumerate(value, 1) if unicodedata.category(c) in REFUSED_CATEGORIES)


def FreeText(kind: str) -> Any:  # noqa: N802 - a type, used as one in pydantic models
    """A pydantic field type: text checked by :func:`check_free_text` for ``kind``."""
    LIMITS[kind]  # an unknown kind fails where the model is defined, not at first use
    return Annotated[str, AfterValidator(lambda value: check_free_text(value, kind))]


_MARKDOWN = str.maketrans({"|": "\\|", "&": "&amp;", "<": "&lt;", ">": "&gt;"})


def markdown_cell(value: Any) -> str:
    """``value`` as the text of one Markdown table cell: ``|`` and HTML escaped, and any
    character :func:`check_free_text` refuses that reached here (older data) shown as its code
    point."""
    return _code_points(str(value).translate(_MARKDOWN))


def _code_points(text: str) -> str:
    """``text`` with each character :func:`check_free_text` refuses shown as its code point."""
    if unsafe_character(text) is None:
        return text
    return "".join(
        f"U+{ord(c):04X}" if unicodedata.category(c) in REFUSED_CATEGORIES else c for c in text
    )


# Inline Markdown a person's text must not open: links and images (``[``, ``]``), emphasis and
# strike-through (``*``, ``_``, ``~``); the backslash first, so a typed ``\\[`` stays text.
_INLINE = str.maketrans({c: "\\" + c for c in "\\[]*_~"})


def markdown_inline(value: Any) -> str:
    """``value`` as literal text in a Markdown line or cell: :func:`markdown_cell`'s escapes,
    and no link, image, bold, italic or strike-through it could open."""
    return markdown_cell(str(value).translate(_INLINE))


def markdown_code(value: Any, *, cell: bool = False) -> str:
    """``value`` as one Markdown code span that its own text cannot end: fenced by one backtick
    more than the longest run of backticks it holds (a name holding a backtick would otherwise
    close the span and let what follows render live), padded with a space where it starts or
    ends with one; a control or format character shown as its code point. In a table cell
    (``cell``) a ``|`` is escaped, which a table strips before it reads the span."""
    text = _code_points(str(value))
    if cell:
        text = text.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith(("`", " ")) or text.endswith(("`", " ")) else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# What stays as it is in a link's target: the characters a URL needs; every other one (``( ) [
# ] < > | " '`` and spaces among them) percent-encoded, so it cannot end the link or the cell.
_URL_SAFE = ":/?#@!$&*+,;=%~-._"


def markdown_link(text: Any, url: Any) -> str:
    """``[text](url)`` that nothing breaks out of: the text as :func:`markdown_inline`, the
    target percent-encoded; a target that is not an http(s) URL is shown as text, not linked."""
    shown = markdown_inline(text)
    target = str(url)
    if not re.match(r"https?://", target, re.IGNORECASE):
        return f"{shown} ({markdown_inline(target)})"
    return f"[{shown}]({quote(target, safe=_URL_SAFE).replace('&', '&amp;')})"
