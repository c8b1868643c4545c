"""Peak memory per device: from the end records of every rank, through the door (re-derived from
the logs, a misstated record refused), into `dlperf report`'s tables and files."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from driver.core.report import NVML_MEMORY_HEADER, PEAK_MEMORY_HEADER, markdown_tables, to_json
from driver.core.summary import summarize
from driver.model.measure import PEAK_MEMORY_FIELDS, Window, measure_repeat
from driver.parsers.base import LogParseError
from driver.parsers.dlperf_jsonl import DlperfJsonlParser
from driver.verify.folder import verify_sessions
from tests.synth import cached_session

CASE_1N2G = "calibration/calibration/1n2g/bs8/fp32/synthetic"
GIB = 2**30


def with_peaks(folder: Path, peak_of: Callable[[int], dict | None]) -> None:
    """Give every rank's end record in the repeat's logs ``peak_of(rank)`` (None: none), and
    re-hash the logs into the record (as the script would have written them)."""
    record_path = folder / "record.json"
    record = json.loads(record_path.read_text())
    for name in record["logs"]:
        log = folder / name
        lines = log.read_text().split("\n")
        for index, line in enumerate(lines):
            if '"dlperf": "end"' in line:
                start = line.index("{")
                event = json.loads(line[start:])
                event.pop("peak_memory", None)
                peak = peak_of(event["rank"])
                if peak is not None:
                    event["peak_memory"] = peak
                lines[index] = line[:start] + json.dumps(event)
        log.write_text("\n".join(lines))
        record["log_sha256"][name] = hashlib.sha256(log.read_bytes()).hexdigest()
    record_path.write_text(json.dumps(record))


def session_with_peaks(tmp_path: Path, peak_of: Callable[[int], dict | None]) -> Path:
    root = tmp_path / "s"
    shutil.copytree(cached_session(), root)
    for folder in sorted((root / "cases" / CASE_1N2G).glob("repeat-*")):
        with_peaks(folder, peak_of)
    return root


def cpu_peak(rank: int) -> dict:
    return {"bytes": (1 + rank) * GIB, "source": "getrusage ru_maxrss"}


def test_the_door_derives_the_peak_from_the_logs_and_refuses_a_record_that_misstates_it(
    tmp_path: Path,
) -> None:
    root = session_with_peaks(tmp_path, cpu_peak)
    # the records were written before their logs held a peak: they claim none, so they still
    # agree with their logs, and every reader gets the peak from the logs
    verified = verify_sessions([root])
    assert verified.refused == []
    ours = [r for c, r, _m in verified.records if c.id == CASE_1N2G]
    assert ours and all(r.measurement.peak_memory_bytes == 2 * GIB for r in ours)
    assert all(r.measurement.peak_memory_source == "getrusage ru_maxrss" for r in ours)
    assert all(r.measurement.peak_memory_nvml_bytes is None for r in ours)
    # a record that states another peak than its logs is refused, naming the field
    path = root / "cases" / CASE_1N2G / "repeat-01" / "record.json"
    data = json.loads(path.read_text())
    data["measurement"].update(peak_memory_bytes=GIB, peak_memory_source="getrusage ru_maxrss")
    path.write_text(json.dumps(data))
    (refused,) = verify_sessions([root]).refused
    assert f"measurement.peak_memory_bytes is {GIB} in the record but {2 * GIB} from" in refused


def test_the_report_shows_the_peak_per_device_where_recorded(tmp_path: Path) -> None:
    nvml = {"bytes": 3 * GIB, "source": "torch.cuda.max_memory_allocated", "nvml_bytes": 4 * GIB}
    root = session_with_peaks(tmp_path, lambda rank: nvml if rank == 0 else {**nvml, "bytes": GIB})
    verified = verify_sessions([root])
    summaries = summarize(verified.records)
    text = markdown_tables(summaries)
    lines = text.splitlines()
    header = next(line for line in lines if PEAK_MEMORY_HEADER in line)
    assert NVML_MEMORY_HEADER in header
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    rows = [line for line in lines[lines.index(header) + 2 :] if line.startswith("|")]
    cells = {
        (row[columns.index("node num")], row[columns.index("device num")]): row
        for row in ([cell.strip() for cell in line.strip("|").split("|")] for line in rows)
        if len(row) == len(columns)
    }
    ours = cells[("1", "2")]
    assert ours[columns.index(PEAK_MEMORY_HEADER)] == "3.00"  # the rank that needed most
    assert ours[columns.index(NVML_MEMORY_HEADER)] == "4.00"
    assert cells[("1", "1")][columns.index(PEAK_MEMORY_HEADER)] == "-"  # its logs state none
    # cases whose logs state no peak show "-"; the note names the count, escaped
    others = [s for s in summaries if s.case.id != CASE_1N2G]
    assert others and all(s.peak_memory_bytes is None for s in others)
    assert "torch.cuda.max\\_memory\\_allocated" in text and "NVML's count" in text
    row_json = next(r for r in json.loads(to_json(summaries)) if r["case_id"] == CASE_1N2G)
    assert row_json["peak_memory_bytes"] == 3 * GIB
    assert row_json["peak_memory_nvml_bytes"] == 4 * GIB


def test_the_terminal_gets_the_tables_as_text_and_the_file_as_markdown(tmp_path: Path) -> None:
    """The closing table a run prints is for a terminal: aligned columns, headings and notes
    without Markdown's escapes (a series [channels_last] showed as \\[channels\\_last\\]);
    report.md keeps the Markdown, its escapes included."""
    root = session_with_peaks(tmp_path, lambda rank: None)
    summaries = summarize(verify_sessions([root]).records)
    markdown, plain = markdown_tables(summaries), markdown_tables(summaries, plain=True)
    assert "| series" in markdown and "\\_" in markdown
    assert "|" not in plain and "\\" not in plain and "###" not in plain
    assert "samples/s" in plain and '- [default] options: {"step_time": 0.01}' in plain


def test_a_peak_of_some_ranks_only_is_no_peak() -> None:
    folder = cached_session() / "cases" / CASE_1N2G / "repeat-01"
    record = json.loads((folder / "record.json").read_text())
    case = json.loads((folder.parent / "case.json").read_text())
    parsed = DlperfJsonlParser().parse({n: (folder / n).read_text() for n in record["logs"]})
    assert len(parsed.ranks) == 2
    for log in parsed.ranks.values():
        log.peak_memory = cpu_peak(log.rank)
    window = Window(case["warmup_steps"], case["measured_steps"])
    assert measure_repeat(parsed, window).peak_memory_bytes == 2 * GIB
    parsed.ranks[1].peak_memory = None  # one rank's peak alone would understate the device's
    facts = measure_repeat(parsed, window)
    assert all(getattr(facts, name) is None for name in PEAK_MEMORY_FIELDS)


@pytest.mark.parametrize(
    ("peak", "words"),
    [
        ({"bytes": -1, "source": "x"}, "peak_memory.bytes is -1"),
        ({"bytes": 1.5, "source": "x"}, "peak_memory.bytes is 1.5"),
        ({"bytes": True, "source": "x"}, "peak_memory.bytes is True"),
        ({"bytes": 10, "source": ""}, "peak_memory.source is ''"),
        ({"bytes": 10}, "peak_memory.source is None"),
        ({"bytes": 10, "source": "x", "nvml_bytes": "9"}, "peak_memory.nvml_bytes is '9'"),
        ("10 GB", "peak_memory is '10 GB', not an object"),
    ],
)
def test_a_malformed_peak_is_a_malformed_log_naming_its_line(peak: object, words: str) -> None:
    end = json.dumps({"dlperf": "end", "rank": 0, "steps": 0, "peak_memory": peak})
    with pytest.raises(LogParseError) as caught:
        DlperfJsonlParser().parse({"node0.log": "noise\n" + end + "\n"})
    assert words in str(caught.value) and "node0.log" in str(caught.value)
