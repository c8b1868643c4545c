"""What an audit finds: each difference between a version as published and as recomputed.

A finding names the file, the cell (a JSON path, a CSV row and column, a line under its
heading) and both values, under the table of its case where it has one. The published result
data are compared structurally (one finding per differing value), every published file byte for
byte, with a unified diff where the bytes differ.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from driver.schema import strict_json

VERSION_LEVEL = "(version)"
_CASE_IN_LABEL = re.compile(r"case_id=([^,\]]+)")
DIFF_LINES = 12  # of a unified diff shown under a finding


@dataclass
class Finding:
    file: str
    cell: str
    published: str
    recomputed: str
    table: str = VERSION_LEVEL
    diff: str = ""  # a unified diff (published -> recomputed) where bytes differ

    def __str__(self) -> str:
        text = (
            f"{self.file}: {self.cell}: published {self.published!r}, "
            f"recomputed {self.recomputed!r}"
        )
        return text + ("\n" + self.diff if self.diff else "")


@dataclass
class AuditReport:
    version_dir: Path
    version: str = ""
    findings: list[Finding] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    table_sizes: dict[str, tuple[int, int]] = field(default_factory=dict)  # cases, repeats
    notes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # checks that could fail, not run: why
    signatures: list[str] = field(default_factory=list)  # who signed the version, each session
    unsigned: list[str] = field(default_factory=list)  # the version and sessions no key signed
    trust: str = ""  # which allowed-signers file the signatures were checked against
    trust_own: bool = False  # the version's own: said in the verdict
    signatures_only: bool = False  # only its seals and signatures checked (--kit released)
    counts: dict[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        """No difference, and no check that could find one skipped: never a PASS over a file
        the audit did not hold to anything."""
        return not self.findings and not self.skipped

    def summary_line(self) -> str:
        c = self.counts
        return (
            f"{c.get('cases', 0)} cases, {c.get('repeats', 0)} repeats, "
            f"{c.get('raw_files', 0)} raw files"
        )

    def text(self) -> str:
        by_table: dict[str, list[Finding]] = defaultdict(list)
        for finding in self.findings:
            by_table[finding.table].append(finding)
        if self.signatures_only:
            return self._signatures_text()
        out = [f"audit {self.version_dir} (version {self.version or '?'}): {self.summary_line()}"]
        version_findings = by_table.pop(VERSION_LEVEL, [])
        out.append(
            f"  [{'ok' if not version_findings else 'FAIL'}] manifest, checksums, images, "
            f"provenance" + (f": {len(version_findings)} difference(s)" if version_findings else "")
        )
        out += [f"      {f}" for f in version_findings]
        for title in self.tables + sorted(set(by_table) - set(self.tables)):
            found = by_table.get(title, [])
            cases, repeats = self.table_sizes.get(title, (0, 0))
            size = f" ({cases} cases, {repeats} repeats)"
            if found:
                out.append(f'  [FAIL] table "{title}"{size}: {len(found)} difference(s)')
                out += [f"      {f}" for f in found]
            else:
                out.append(f'  [ok]   table "{title}"{size}')
        out += [f"  signatures {self.trust}"] if self.trust else []
        out += [f"  signature: {line}" for line in self.signatures]
        out += [f"  note: {n}" for n in self.notes]
        out += [f"  skipped: {s}" for s in self.skipped]
        if self.findings:
            verdict = f"FAIL ({len(self.findings)} difference(s))"
        elif self.skipped:
            verdict = f"INCOMPLETE ({len(self.skipped)} check(s) that could fail skipped, above)"
        else:
            verdict = "PASS"
        out.append(f"verdict: {verdict} in {self.elapsed_s:.2f} s{self._own()}")
        return "\n".join(out)

    def _own(self) -> str:
        own = " (signatures trusted by the version's own allowed_signers)"
        return own if self.trust_own else ""

    def _signatures_text(self) -> str:
        """The report of a check of seals and signatures only, by this kit."""
        out = [
            f"signatures of {self.version_dir} (version {self.version or '?'}), checked by this "
            f"kit: {self.trust or 'no allowed-signers file'}"
        ]
        out += [f"      {f}" for f in self.findings]
        out += [f"  signature: {line}" for line in self.signatures]
        out += [f"  note: {n}" for n in self.notes]
        verdict = f"FAIL ({len(self.findings)} difference(s))" if self.findings else "PASS"
        out.append(f"signatures verdict: {verdict}{self._own()}")
        return "\n".join(out)


class AuditState:
    """One audit under way: the version folder, the report its findings go to, and each
    case's table (a finding about a case is shown under its table)."""

    def __init__(self, version_dir: Path, report: AuditReport) -> None:
        self.dir = version_dir
        self.report = report
        self.case_titles: dict[str, str] = {}

    def add(
        self, file: str, cell: str, published: Any, recomputed: Any, case_id: str | None = None
    ) -> None:
        title = self.case_titles.get(case_id or "", VERSION_LEVEL)
        self.report.findings.append(
            Finding(file, cell, _show(published), _show(recomputed), table=title)
        )


def _show(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def read_published(state: AuditState, name: str) -> str | None:
    try:
        return (state.dir / name).read_bytes().decode("utf-8", errors="replace")
    except OSError:
        state.add(name, "presence", "missing", "present")
        return None


def _item_label(value: Any, index: int) -> str:
    if isinstance(value, dict) and "case_id" in value:
        label = f"case_id={value['case_id']}"
        if value.get("row") == "repeat":
            label += f", repeat={value.get('repeat')}"
        return label
    return str(index)


def compare_values(
    state: AuditState,
    file: str,
    path: str,
    published: Any,
    expected: Any,
    case_id: str | None = None,
) -> None:
    """Structural comparison: one finding per differing value, named by its path."""
    if published == expected:
        return
    if isinstance(published, dict) and isinstance(expected, dict):
        for key in sorted(set(published) | set(expected), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in published or key not in expected:
                state.add(
                    file,
                    sub,
                    published.get(key, "(absent)"),
                    expected.get(key, "(absent)"),
                    case_id,
                )
            else:
                compare_values(state, file, sub, published[key], expected[key], case_id)
        return
    if isinstance(published, list) and isinstance(expected, list):
        for index in range(max(len(published), len(expected))):
            a = published[index] if index < len(published) else "(no item)"
            b = expected[index] if index < len(expected) else "(no item)"
            label = _item_label(b if index < len(expected) else a, index)
            match = _CASE_IN_LABEL.search(label)
            compare_values(
                state, file, f"{path}[{label}]", a, b, match[1] if match else case_id
            )
        return
    state.add(file, path, published, expected, case_id)


# --------------------------------------------------------------------------------------------
# The published files: result data structurally, every file byte for byte


def compare_text(state: AuditState, name: str, expected: str) -> bool:
    """Byte comparison; a difference is one finding at its first differing line (the heading
    above it names the table), with the unified diff. True when the bytes are equal."""
    text = read_published(state, name)
    if text is None:
        return True
    if text == expected:
        return True
    published_lines, expected_lines = text.split("\n"), expected.split("\n")
    matcher = difflib.SequenceMatcher(None, published_lines, expected_lines, autojunk=False)
    tag, a0, a1, b0, b1 = next(op for op in matcher.get_opcodes() if op[0] != "equal")
    heading = next(
        (
            line.lstrip("#").strip()
            for line in reversed(expected_lines[: b0 + 1])
            if line.startswith("#")
        ),
        "(top)",
    )
    diff = difflib.unified_diff(
        published_lines,
        expected_lines,
        f"{name} (published)",
        f"{name} (recomputed)",
        n=1,
        lineterm="",
    )
    shown = list(diff)
    published = "\n".join(published_lines[a0:a1]) or "(no line)"
    recomputed = "\n".join(expected_lines[b0:b1]) or "(no line)"
    if a1 - a0 == b1 - b0 == 1:
        published, recomputed = _differing_cell(published, recomputed)
    if len(shown) > DIFF_LINES:
        shown = [*shown[:DIFF_LINES], f"... ({len(shown) - DIFF_LINES} more diff lines)"]
    state.report.findings.append(
        Finding(
            name,
            f'line {a0 + 1} under "{heading}"',
            published,
            recomputed,
            table=heading if heading in state.case_titles.values() else VERSION_LEVEL,
            diff="\n".join(f"        {line}" for line in shown),
        )
    )
    return False


def _differing_cell(published: str, recomputed: str) -> tuple[str, str]:
    """The part of two lines that differs, widened to its table cell (between '|') when both
    lines are table rows: the finding then shows the cell, the diff the whole line."""
    start = next(
        (i for i, (a, b) in enumerate(zip(published, recomputed, strict=False)) if a != b),
        min(len(published), len(recomputed)),
    )
    end = 0
    while end < min(len(published), len(recomputed)) - start and (
        published[len(published) - 1 - end] == recomputed[len(recomputed) - 1 - end]
    ):
        end += 1
    if not (published.startswith("|") and recomputed.startswith("|")):
        return published, recomputed
    left = published.rfind("|", 0, start) + 1
    out = []
    for line in (published, recomputed):
        right = line.find("|", len(line) - end if end else len(line) - 1)
        out.append(line[left : right if right >= 0 else len(line)].strip())
    return (out[0], out[1]) if out[0] != out[1] else (published, recomputed)


def compare_json(state: AuditState, name: str, expected: str) -> None:
    text = read_published(state, name)
    if text is None or text == expected:
        return
    # Numbers are compared as written: an edited digit shows as the published text has it.
    try:
        published = strict_json(text, numbers_as_text=True)
    except ValueError:
        compare_text(state, name, expected)  # not JSON any more: show where
        return
    before = len(state.report.findings)
    compare_values(state, name, "", published, json.loads(expected, parse_float=str))
    if len(state.report.findings) == before:  # same data, other bytes
        compare_text(state, name, expected)


def _csv_rows(text: str) -> list[dict[str, str]] | None:
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return []
    header = rows[0]
    if any(len(row) != len(header) for row in rows[1:]):
        return None
    return [dict(zip(header, row, strict=True)) for row in rows[1:]]


def compare_csv(state: AuditState, name: str, expected: str) -> None:
    text = read_published(state, name)
    if text is None or text == expected:
        return
    published_header = next(csv.reader(io.StringIO(text)), [])
    expected_header = next(csv.reader(io.StringIO(expected)), [])
    published = _csv_rows(text)
    before = len(state.report.findings)
    if published_header != expected_header:
        compare_values(state, name, "header", published_header, expected_header)
    elif published is None:
        compare_text(state, name, expected)  # a row with more or fewer cells: show where
        return
    else:
        recomputed = _csv_rows(expected) or []
        for index in range(max(len(published), len(recomputed))):
            a = published[index] if index < len(published) else {}
            b = recomputed[index] if index < len(recomputed) else {}
            key = b or a
            where = f"row {key.get('row', '?')} {key.get('case_id', '?')}"
            if key.get("row") == "repeat":
                where += f" repeat {key.get('repeat', '?')}"
            if not a or not b:
                state.add(name, where, "(no row)" if not a else "an extra row",
                          "a row" if not a else "(no row)", key.get("case_id"))  # fmt: skip
                continue
            for column in expected_header:
                if a[column] != b[column]:
                    state.add(name, f"{where}, column {column}", a[column], b[column],
                              b.get("case_id"))  # fmt: skip
    if len(state.report.findings) == before:  # same cells, other bytes (quoting, line ends)
        compare_text(state, name, expected)
