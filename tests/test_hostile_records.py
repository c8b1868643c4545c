"""Hostile corpus: edited records, corrupt logs, tampered released versions.

Every case breaks one thing in a copy of a real calibration session (``dlperf report``) or of a
version released from it (``dlperf audit``, ``dlperf compare``), and must end in a clear error or
flag that names the broken file: never a traceback, never silent acceptance, never a message
that misses the file (the shared harness ``tests/hostile.py`` classifies each case); the counts
are printed as ``hostile records corpus: N cases, T tracebacks, S silent``.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import tarfile
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from driver.files import sha256_bytes, sha256_file
from driver.frontend.cli import main
from driver.release.archive import read_archive, write_archive
from driver.release.audit import audit
from driver.release.release import release
from driver.text import markdown_inline
from tests.hostile import SILENT, TRACEBACK, HostileCase, run_corpus
from tests.synth import cached_session

CASE_1N2G = "calibration/calibration/1n2g/bs8/fp32/synthetic"


@dataclass(frozen=True)
class Hostile:
    name: str
    target: str  # what breaks: "record" | "log" | "version" | "compare"
    apply: Callable[[Path], str]  # breaks a copy; returns the text the message must name


def run_cli(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as stop:  # a clear refusal of the whole command
            code = stop.code if isinstance(stop.code, int) else 2
            err.write(str(stop.code))
    return code, err.getvalue() + out.getvalue()


class Refused(Exception):
    """The command refused or flagged the input (exit status not 0); the message is its output."""


def refusing(run: Callable[[], tuple[int, str]]) -> Callable[[], str]:
    """An action for the shared harness: a non-zero exit raises Refused with the output (the
    harness then checks it names the file); exit 0 returns the output (silent acceptance)."""

    def action() -> str:
        code, text = run()
        if code != 0:
            raise Refused(text)
        return text

    return action


# --------------------------------------------------------------------------------------------
# Sessions: records and logs


def repeat_dir(root: Path, case: str = CASE_1N2G, repeat: int = 1) -> Path:
    return root / "cases" / case / f"repeat-{repeat:02d}"


def edit_record(change: Callable[[dict[str, Any]], Any], raw: bool = False) -> Callable:
    def apply(root: Path) -> str:
        path = repeat_dir(root) / "record.json"
        data = json.loads(path.read_text())
        result = change(data)
        path.write_text(result if raw else json.dumps(data))
        return str(path)

    return apply


def set_field(dotted: str, value: Any) -> Callable:
    def change(data: dict[str, Any]) -> None:
        *parents, last = dotted.split(".")
        for part in parents:
            data = data[part]
        data[last] = value

    return change


def drop_field(dotted: str) -> Callable:
    def change(data: dict[str, Any]) -> None:
        *parents, last = dotted.split(".")
        for part in parents:
            data = data[part]
        del data[last]

    return change


def raw_record(text: str) -> Callable:
    def apply(root: Path) -> str:
        path = repeat_dir(root) / "record.json"
        path.write_text(text)
        return str(path)

    return apply


def json_with(dotted: str, literal: str) -> Callable:
    """The record with one value replaced by a literal JSON text (NaN, Infinity, 1e999)."""

    def apply(root: Path) -> str:
        path = repeat_dir(root) / "record.json"
        data = json.loads(path.read_text())
        set_field(dotted, "@@VALUE@@")(data)
        path.write_text(json.dumps(data).replace('"@@VALUE@@"', literal))
        return str(path)

    return apply


def edit_log(change: Callable[[list[str]], list[str]], rehash: bool = True) -> Callable:
    """Edit node0.log's lines; with ``rehash`` the record's sha256 is updated to match (a
    record rewritten with the log), so only re-parsing the log can catch it."""

    def apply(root: Path) -> str:
        folder = repeat_dir(root)
        log = folder / "node0.log"
        log.write_text("\n".join(change(log.read_text().split("\n"))))
        if rehash:
            path = folder / "record.json"
            data = json.loads(path.read_text())
            data["log_sha256"]["node0.log"] = hashlib.sha256(log.read_bytes()).hexdigest()
            path.write_text(json.dumps(data))
        return str(folder)

    return apply


def step_line(lines: list[str], rank: int, step: int) -> int:
    mark = f'"rank": {rank}, "samples": 8, "step": {step}, '
    return next(i for i, line in enumerate(lines) if mark in line)


def retime(rank: int, step: int, literal: str) -> Callable:
    def change(lines: list[str]) -> list[str]:
        i = step_line(lines, rank, step)
        lines[i] = re.sub(r'"t": [^,}]+', f'"t": {literal}', lines[i])
        return lines

    return change


def replace_in_step(rank: int, step: int, old: str, new: str) -> Callable:
    def change(lines: list[str]) -> list[str]:
        i = step_line(lines, rank, step)
        assert old in lines[i]
        lines[i] = lines[i].replace(old, new)
        return lines

    return change


def truncate(fraction: float) -> Callable:
    def change(lines: list[str]) -> list[str]:
        text = "\n".join(lines)
        return text[: int(len(text) * fraction)].split("\n")

    return change


def drop_rank(rank: int) -> Callable:
    return lambda lines: [line for line in lines if f'"rank": {rank},' not in line]


def duplicate_step(rank: int, step: int) -> Callable:
    def change(lines: list[str]) -> list[str]:
        i = step_line(lines, rank, step)
        return lines[: i + 1] + [lines[i]] + lines[i + 1 :]

    return change


def drop_step(rank: int, step: int) -> Callable:
    def change(lines: list[str]) -> list[str]:
        i = step_line(lines, rank, step)
        return lines[:i] + lines[i + 1 :]

    return change


def swap_times(rank: int, a: int, b: int) -> Callable:
    def change(lines: list[str]) -> list[str]:
        i, j = step_line(lines, rank, a), step_line(lines, rank, b)
        ti = re.search(r'"t": [^,}]+', lines[i])[0]  # type: ignore[index]
        tj = re.search(r'"t": [^,}]+', lines[j])[0]  # type: ignore[index]
        lines[i], lines[j] = lines[i].replace(ti, tj), lines[j].replace(tj, ti)
        return lines

    return change


def delete(name: str) -> Callable:
    def apply(root: Path) -> str:
        path = repeat_dir(root) / name
        path.unlink()
        return str(path if name == "record.json" else path.parent)

    return apply


def replace_log(content: bytes, rehash: bool = True) -> Callable:
    def apply(root: Path) -> str:
        folder = repeat_dir(root)
        (folder / "node0.log").write_bytes(content)
        if rehash:
            path = folder / "record.json"
            data = json.loads(path.read_text())
            data["log_sha256"]["node0.log"] = hashlib.sha256(content).hexdigest()
            path.write_text(json.dumps(data))
        return str(folder)

    return apply


def swap_logs_between_repeats(root: Path) -> str:
    a, b = repeat_dir(root, repeat=1), repeat_dir(root, repeat=2)
    log_a, log_b = (a / "node0.log").read_bytes(), (b / "node0.log").read_bytes()
    (a / "node0.log").write_bytes(log_b)
    (b / "node0.log").write_bytes(log_a)
    return str(a / "node0.log")


def garbage_case_json(root: Path) -> str:
    path = root / "cases" / CASE_1N2G / "case.json"
    path.write_text("{not json")
    return str(path)


RECORD_CASES: list[Hostile] = []


def record_case(name: str, apply: Callable) -> None:
    RECORD_CASES.append(Hostile(name, "record", apply))


for value in (9999.0, 800.5, 1e308, -800.0, 0.0, 1e-300, "800", None, True, [800]):
    record_case(f"throughput={value!r}", edit_record(set_field("measurement.throughput", value)))
for literal in ("NaN", "Infinity", "-Infinity", "1e999"):
    record_case(f"throughput={literal}", json_with("measurement.throughput", literal))
    record_case(f"started_at={literal}", json_with("started_at", literal))
    record_case(f"header.nan={literal}", json_with("header.options.step_time", literal))
for field, value in (
    ("measurement.samples", 1),
    ("measurement.samples", -480),
    ("measurement.samples", 480.5),
    ("measurement.duration_s", 0.0),
    ("measurement.duration_s", -1.0),
    ("measurement.ranks", 3),
    ("measurement.world_size", 0),
    ("measurement.world_size", 4),
    ("measurement.interval_cv", -0.5),
    ("measurement.interval_cv", 0.5),
    ("measurement.measured_steps", 31),
    ("measurement.reported_by_source", True),
    ("measurement.unknown", 1),
    # the straggler facts (1n2g: two ranks on one node) are re-derived from the logs too
    ("measurement.slowest_rank", 7),
    ("measurement.slowest_rank_excess", -0.5),
    ("measurement.slowest_rank_excess", 0.5),
    ("measurement.slowest_node", 0),
    ("measurement.slowest_node_ranks", [0, 1]),
    ("measurement.slowest_node_excess", 0.3),
    ("batch_size", 4),
    ("batch_size", 0),
    ("case_id", "calibration/calibration/1n1g/bs8/fp32/synthetic"),
    ("parser", "no-such-parser"),
    ("parser", "ngc-pytorch"),
    ("logs", ["node7.log"]),
    ("logs", "node0.log"),
    ("repeat", "one"),
    ("commands", {}),
    ("exit_codes", []),
    ("header.world_size", 8),
    ("header.versions", {"calibration": "2"}),
    ("log_sha256", {"node0.log": "0" * 64}),
    ("fingerprints", []),  # the facts the seal takes from the record, not the logs'
    ("fingerprints", "every rank"),
    ("surprise", "an unknown field"),
):
    record_case(f"{field}={value!r}", edit_record(set_field(field, value)))
for schema in (0, 4, 99, "1", None, 1.5):
    record_case(f"schema={schema!r}", edit_record(set_field("schema", schema)))
for field in (
    "schema", "case_id", "repeat", "verdict", "batch_size", "started_at", "finished_at",
    "commands", "exit_codes", "logs", "parser", "measurement.throughput", "measurement.samples",
):  # fmt: skip
    record_case(f"missing {field}", edit_record(drop_field(field)))
for name, text in (
    ("empty record", ""),
    ("broken JSON", "{"),
    ("a list", "[]"),
    ("null", "null"),
    ("binary", "\x00\x01\x02garbage"),
):
    record_case(name, raw_record(text))
record_case("truncated record", edit_record(lambda d: json.dumps(d)[:200], raw=True))
record_case("deleted record", delete("record.json"))
record_case("garbage case.json", garbage_case_json)

LOG_CASES: list[Hostile] = []


def log_case(name: str, apply: Callable) -> None:
    LOG_CASES.append(Hostile(name, "log", apply))


for fraction in (0.0, 0.1, 0.5, 0.9, 0.97):
    log_case(f"truncated to {fraction:.0%}", edit_log(truncate(fraction)))
for literal in ("NaN", "Infinity", "-Infinity", "1e999", '"abc"', "null", "[]"):
    log_case(f"t={literal} in the window", edit_log(retime(0, 12, literal)))
log_case("t=NaN at the window start", edit_log(retime(0, 5, "NaN")))
log_case("t=NaN at the window end", edit_log(retime(1, 35, "NaN")))
log_case("non-monotonic time", edit_log(swap_times(0, 10, 20)))
log_case("time going back at the end", edit_log(retime(0, 35, "0.5")))
log_case("duplicate step", edit_log(duplicate_step(0, 12)))
log_case("step skipped", edit_log(drop_step(1, 20)))
log_case("window end missing", edit_log(drop_step(0, 35)))
log_case("rank 1 missing", edit_log(drop_rank(1)))
log_case("rank 0 missing", edit_log(drop_rank(0)))
log_case("samples negative", edit_log(replace_in_step(0, 12, '"samples": 8', '"samples": -8')))
log_case("samples a string", edit_log(replace_in_step(0, 12, '"samples": 8', '"samples": "8x"')))
log_case("samples missing", edit_log(replace_in_step(0, 12, '"samples": 8, ', "")))
log_case("samples doubled", edit_log(replace_in_step(1, 12, '"samples": 8', '"samples": 16')))
log_case("step a string", edit_log(replace_in_step(0, 12, '"step": 12', '"step": "x"')))
log_case("rank a string", edit_log(replace_in_step(0, 12, '"rank": 0', '"rank": "0"')))
BROKEN = '{"dlperf": "step", '
log_case("broken protocol line", edit_log(lambda lines: [*lines[:8], BROKEN, *lines[8:]]))
log_case("all garbage", replace_log(b"\x00\xff garbage\nmore garbage\n"))
log_case("empty log", replace_log(b""))
log_case(
    "log edited, record not",
    edit_log(replace_in_step(0, 12, '"samples": 8', '"samples": 9'), rehash=False),
)
log_case("logs swapped between repeats", swap_logs_between_repeats)
log_case("log deleted", delete("node0.log"))
END = '"dlperf": "end"'
log_case("end records missing", edit_log(lambda lines: [ln for ln in lines if END not in ln]))
log_case(
    "end record of rank 1 missing",
    edit_log(lambda lines: [ln for ln in lines if f'{END}, "rank": 1,' not in ln]),
)

# The same session faults through `dlperf release`, with and without --accept-remeasured
# (the logs win over a record, never over a failed check): the door refuses what report does.
RELEASE_CASES = [
    Hostile(f"release{flag}: {case.name}", f"release{flag}", case.apply)
    for case in RECORD_CASES + LOG_CASES
    for flag in ("", "+accept")
]


def remeasured_in_manifest(version: Path, named: str) -> Callable[[object], bool]:
    """Under --accept-remeasured a record that only disagrees with its logs is published with
    the logs' figures: legitimate when the manifest lists that repeat as re-measured."""

    def check(_output: object) -> bool:
        path = version / "manifest.json"
        if not path.exists():
            return False
        listed = json.loads(path.read_text())["remeasured"]
        return any(named.startswith(str(version.parent.parent / "s" / e["folder"].split("/", 1)[1]))
                   for e in listed)  # fmt: skip

    return check


def symlinked_repeat(root: Path) -> str:
    folder = repeat_dir(root, repeat=3)
    outside = root.parent / "outside-repeat"
    folder.rename(outside)
    folder.symlink_to(outside, target_is_directory=True)
    return str(folder)


def symlinked_log(root: Path) -> str:
    link = repeat_dir(root) / "telemetry-secret.jsonl"
    secret = root.parent / "secret"
    secret.write_text("a file of the head node\n")
    link.symlink_to(secret)
    return str(link)


def stray_log(root: Path) -> str:
    stray = repeat_dir(root) / "node1.log"
    shutil.copyfile(repeat_dir(root) / "node0.log", stray)
    return str(stray)


def escaping_variant(root: Path) -> str:
    path = root / "cases" / CASE_1N2G / "case.json"
    data = json.loads(path.read_text())
    data["variant"] = "../../../x"
    path.write_text(json.dumps(data))
    return str(path)


SESSION_CASES = [
    Hostile(f"{target}: {name}", target, apply)
    for name, apply in (
        ("symlinked repeat folder", symlinked_repeat),
        ("symlinked file in a repeat", symlinked_log),
        ("stray node log", stray_log),
        ("case variant leaving its folder", escaping_variant),
        ("1e6 samples in a step, rehashed", edit_log(replace_in_step(0, 12, '"samples": 8',
                                                                     '"samples": 1000000'))),
        ("1e308 samples in a step, rehashed", edit_log(replace_in_step(0, 12, '"samples": 8',
                                                                       '"samples": 1e308'))),
        ("t=1e308 at the window end, rehashed", edit_log(retime(0, 35, "1e308"))),
        ("t=9e10 at the window end, rehashed", edit_log(retime(1, 35, "9e10"))),
    )
    for target in ("log", "release", "release+accept")
]  # fmt: skip

# --------------------------------------------------------------------------------------------
# Released versions


def archive_member(copy: Path, edit: Callable[[dict[str, bytes]], str], rehash: bool) -> str:
    (archive,) = (copy / "raw").glob("*.tar.gz")
    members = read_archive(archive)
    member = edit(members)
    staging = copy.parent / f"staging-{copy.name}"
    session = next(iter(members)).split("/", 1)[0]
    files = {}
    for name, data in members.items():
        path = staging / name.split("/", 1)[1]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        files[name.split("/", 1)[1]] = path
    write_archive(session, files, archive)
    if rehash:
        manifest = json.loads((copy / "manifest.json").read_text())
        if member in members:
            manifest["raw_files"][member]["sha256"] = sha256_bytes(members[member])
            manifest["raw_files"][member]["bytes"] = len(members[member])
        archive_name = f"raw/{archive.name}"
        manifest["archives"][archive_name]["sha256"] = sha256_file(archive)
        (copy / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return member.rsplit("/", 1)[0]  # the repeat: its record, log or folder is named


def special_member(copy: Path) -> str:
    """A FIFO member named as a session's seal signature added to the archive, the manifest
    rehashed: named by the audit, never skipped (a FIFO member would read as no signature)."""
    (archive,) = (copy / "raw").glob("*.tar.gz")
    with tarfile.open(archive, mode="r:gz") as tar:
        members = [(info, tar.extractfile(info).read()) for info in tar]  # type: ignore[union-attr]
    session = members[0][0].name.split("/", 1)[0]
    fifo = tarfile.TarInfo(f"{session}/session-manifest.json.sig.x")
    fifo.type = tarfile.FIFOTYPE
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data))
        tar.addfile(fifo)
    archive.write_bytes(buffer.getvalue())
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["archives"][f"raw/{archive.name}"]["sha256"] = sha256_file(archive)
    (copy / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return f"member {fifo.name} is a FIFO"


def edit_text(name: str, old: str | re.Pattern, new: str) -> Callable:
    def apply(copy: Path) -> str:
        path = copy / name
        text = path.read_text()
        edited = old.sub(new, text, count=1) if isinstance(old, re.Pattern) else text.replace(
            old, new, 1
        )
        assert edited != text, (name, old)
        path.write_text(edited)
        return name

    return apply


def edit_csv_cell(column: str, row_kind: str, value: str) -> Callable:
    def apply(copy: Path) -> str:
        import csv

        path = copy / "results.csv"
        rows = list(csv.reader(io.StringIO(path.read_text())))
        index = rows[0].index(column)
        target = next(r for r in rows[1:] if r[0] == row_kind and r[index] != value)
        target[index] = value
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(rows)
        path.write_text(out.getvalue())
        return "results.csv"

    return apply


def edit_results_json(change: Callable[[dict[str, Any]], None]) -> Callable:
    def apply(copy: Path) -> str:
        path = copy / "results.json"
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        return "results.json"

    return apply


def remove(name: str) -> Callable:
    def apply(copy: Path) -> str:
        target = next(copy.glob(name))
        target.unlink()
        return target.relative_to(copy).as_posix()

    return apply


def member_edit(pattern: str, change: Callable[[bytes], bytes], rehash: bool = True) -> Callable:
    def apply(copy: Path) -> str:
        def edit(members: dict[str, bytes]) -> str:
            member = next(m for m in sorted(members) if re.search(pattern, m))
            members[member] = change(members[member])
            return member

        return archive_member(copy, edit, rehash)

    return apply


def member_delete(pattern: str) -> Callable:
    def apply(copy: Path) -> str:
        def edit(members: dict[str, bytes]) -> str:
            member = next(m for m in sorted(members) if re.search(pattern, m))
            del members[member]
            return member

        return archive_member(copy, edit, rehash=True)

    return apply


def swap_raw_logs(copy: Path) -> str:
    def edit(members: dict[str, bytes]) -> str:
        a = next(m for m in sorted(members) if m.endswith(f"{CASE_1N2G}/repeat-01/node0.log"))
        b = a.replace("repeat-01", "repeat-02")
        members[a], members[b] = members[b], members[a]
        return a

    return archive_member(copy, edit, rehash=True)


def json_record_edit(change: Callable[[dict[str, Any]], None]) -> Callable[[bytes], bytes]:
    def apply(data: bytes) -> bytes:
        record = json.loads(data)
        change(record)
        return json.dumps(record).encode()

    return apply


VERSION_CASES: list[Hostile] = []


def version_case(name: str, apply: Callable) -> None:
    VERSION_CASES.append(Hostile(name, "version", apply))


for column in ("throughput_median", "cv", "speedup", "throughput"):
    kind = "repeat" if column == "throughput" else "case"
    version_case(f"CSV cell {column}", edit_csv_cell(column, kind, "1.5"))
version_case("CSV header renamed", edit_text("results.csv", "throughput_median", "throughput_mean"))
version_case("CSV row dropped", edit_text("results.csv", re.compile(r"\nrepeat,[^\n]*"), ""))
version_case("README table cell", edit_text("README.md", re.compile(r"\| (\d+\.\d\d) "), "| 9.99 "))
version_case("README heading", edit_text("README.md", "## Throughput", "## Speed"))
version_case("README note", edit_text("README.md", "Notes:", "Remarks:"))
version_case("README trailing space", edit_text("README.md", "\n\n", " \n\n"))
version_case(
    "results.json throughput",
    edit_results_json(lambda d: d["repeats"][0].update(throughput=9999.0)),
)
version_case("results.json case removed", edit_results_json(lambda d: d["cases"].pop()))
version_case("results.json schema 9", edit_results_json(lambda d: d.update(schema=9)))
version_case("results.json extra key", edit_results_json(lambda d: d["cases"][0].update(x=1)))
CV = re.compile(r'"cv": [0-9.e-]+')
version_case("results.json NaN", edit_text("results.json", CV, '"cv": NaN'))
version_case("results.json not JSON", edit_text("results.json", "{", "{{"))
for name in (
    "README.md", "results.csv", "results.json", "plots/*.png", "raw/*.tar.gz", "config/**/*.yaml"
):  # fmt: skip
    version_case(f"removed {name}", remove(name))
version_case("swapped raw logs", swap_raw_logs)
version_case(
    "raw record throughput 9999 (rehashed)",
    member_edit(
        r"1n2g/.*/repeat-01/record\.json$",
        json_record_edit(set_field("measurement.throughput", 9999.0)),
    ),
)
version_case(
    "raw record schema 9 (rehashed)",
    member_edit(r"1n2g/.*/repeat-01/record\.json$", json_record_edit(set_field("schema", 9))),
)
version_case(
    "raw record NaN (rehashed)",
    member_edit(
        r"1n2g/.*/repeat-01/record\.json$",
        lambda data: re.sub(rb'"throughput": [0-9.e]+', b'"throughput": NaN', data),
    ),
)
version_case(
    "raw log truncated (rehashed)",
    member_edit(r"1n2g/.*/repeat-01/node0\.log$", lambda data: data[: len(data) // 2]),
)
version_case(
    "raw log edited (hashes kept)",
    member_edit(
        r"1n2g/.*/repeat-01/node0\.log$",
        lambda data: data.replace(b'"samples": 8, "step": 12', b'"samples": 9, "step": 12'),
        rehash=False,
    ),
)
version_case("raw archive holding a FIFO member (rehashed)", special_member)
version_case("raw record deleted", member_delete(r"1n2g/.*/repeat-02/record\.json$"))
version_case("raw log deleted", member_delete(r"1n2g/.*/repeat-02/node0\.log$"))


THROUGHPUT = re.compile(r'"throughput": [0-9.e-]+')
COMPARE_CASES = [
    Hostile("compare: schema 9", "compare", edit_results_json(lambda d: d.update(schema=9))),
    Hostile("compare: NaN", "compare", edit_text("results.json", THROUGHPUT, '"throughput": NaN')),
    Hostile(
        "compare: negative throughput",
        "compare",
        edit_results_json(lambda d: d["repeats"][0].update(throughput=-800.0)),
    ),
    Hostile(
        "compare: missing field",
        "compare",
        edit_results_json(lambda d: d["cases"][0].pop("model")),
    ),
    Hostile("compare: garbage", "compare", edit_text("results.json", "{", "[[")),
    Hostile(
        "compare: session record 9999",
        "compare-session",
        edit_record(set_field("measurement.throughput", 9999.0)),
    ),
    Hostile("compare: session record deleted", "compare-session", delete("record.json")),
    Hostile("compare: session log truncated", "compare-session", edit_log(truncate(0.5))),
]

ALL_CASES = (
    RECORD_CASES + LOG_CASES + RELEASE_CASES + SESSION_CASES + VERSION_CASES + COMPARE_CASES
)


@pytest.fixture(scope="module")
def session() -> Path:
    return cached_session()


@pytest.fixture(scope="module")
def version(session: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    reports = tmp_path_factory.mktemp("reports")
    return release("v0.1", [session], reports_root=reports, printer=lambda _line: None)


def editable_copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    for path in target.rglob("*"):
        if path.is_file():
            path.chmod(0o644)
    return target


def hostile_case(case: Hostile, session: Path, version: Path, scratch: Path) -> HostileCase:
    """Break a fresh copy now; the returned case runs the command on it."""
    if case.target in ("record", "log", "compare-session", "release", "release+accept"):
        copy = editable_copy(session, scratch / "s")
        named = case.apply(copy)
        argv = ["report", str(copy), "--out", str(scratch / "out")]
        if case.target == "compare-session":
            argv = ["compare", str(version), str(copy)]
        if case.target.startswith("release"):
            argv = ["release", "v0.9", str(copy), "--reports", str(scratch / "r"), "--no-flops"]
            if case.target.endswith("+accept"):
                argv.append("--accept-remeasured")
                return HostileCase(
                    case.name,
                    refusing(lambda: run_cli(argv)),
                    (named,),
                    (Refused,),
                    accepted=remeasured_in_manifest(scratch / "r" / "v0.9", named),
                )
        return HostileCase(case.name, refusing(lambda: run_cli(argv)), (named,), (Refused,))
    copy = editable_copy(version, scratch / version.name)
    named = case.apply(copy)
    if case.target == "compare":
        argv = ["compare", str(copy), str(session)]
        expect = (str(copy / "results.json"),)
        return HostileCase(case.name, refusing(lambda: run_cli(argv)), expect, (Refused,))

    def run_audit() -> tuple[int, str]:
        report = audit(copy, reports_root=scratch)
        return (0 if report.ok else 1), report.text()

    return HostileCase(case.name, refusing(run_audit), (named,), (Refused,))


@pytest.mark.slow  # 105 s on the 2-core AVX2 EPYC, in make test
def test_the_corpus_is_refused_clearly_by_name(
    session: Path, version: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert len(ALL_CASES) >= 100
    counts = run_corpus(
        hostile_case(case, session, version, tmp_path / f"c{index}")
        for index, case in enumerate(ALL_CASES)
    )
    with capsys.disabled():
        print("\n" + counts.summary("records"))
    failures = [f"{v.case.name}: {v.kind}: {v.detail[-600:]}" for v in counts.failures()]
    assert not failures, failures  # names each traceback or silent case, with its detail
    assert counts.by_kind[TRACEBACK] == 0 and counts.by_kind[SILENT] == 0


def test_the_untouched_session_and_version_pass(
    session: Path, version: Path, tmp_path: Path
) -> None:
    """The corpus's baseline: without an edit, report exits 0 and audit passes."""
    code, text = run_cli(["report", str(session), "--out", str(tmp_path / "out")])
    assert code == 0 and "refused" not in text, text
    assert audit(version, reports_root=tmp_path).ok


def test_report_refuses_an_edited_record_of_a_real_repeat(session: Path, tmp_path: Path) -> None:
    copy = editable_copy(session, tmp_path / "s")
    record = repeat_dir(copy) / "record.json"
    data = json.loads(record.read_text())
    measured = data["measurement"]["throughput"]
    data["measurement"]["throughput"] = 9999.0
    record.write_text(json.dumps(data))
    code, text = run_cli(["report", str(copy), "--out", str(tmp_path / "out")])
    assert code == 1
    assert f"refused: {record}: measurement.throughput is 9999.0 in the record but" in text
    rows = {r["case_id"]: r for r in json.loads((tmp_path / "out" / "report.json").read_text())}
    assert all(r["throughput_max"] < 9999.0 for r in rows.values())
    # the case keeps its two other repeats, as their logs give them
    others = [
        json.loads((repeat_dir(copy, repeat=n) / "record.json").read_text())["measurement"]
        for n in (2, 3)
    ]
    assert rows[CASE_1N2G]["repeats"] == 2
    assert rows[CASE_1N2G]["throughput_median"] == pytest.approx(
        (others[0]["throughput"] + others[1]["throughput"]) / 2
    )
    assert measured != rows[CASE_1N2G]["throughput_median"]
    # named in report.md as literal text (a path's _ escaped, so it opens no emphasis)
    assert markdown_inline(record) in (tmp_path / "out" / "report.md").read_text()
