"""Case summaries: the typed case row, the one 1n1g baseline lookup, what summarize keeps."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from driver.core.case import Case, Topology
from driver.core.measure import RepeatMeasurement
from driver.core.results import RepeatRecord
from driver.core.summary import PUBLISHED_FIELDS, CaseRow, baseline_of, summarize

REPORTS = Path(__file__).resolve().parents[1] / "reports"


def case(topology: Topology, batch: int = 8, precision: str = "fp32") -> Case:
    return Case(model="resnet50", framework="pytorch", topology=topology, batch_size=batch,
                precision=precision, dataset="synthetic", warmup_steps=2, measured_steps=10,
                total_steps=12)  # fmt: skip


def record(c: Case, repeat: int, throughput: float, verdict: str = "ok") -> RepeatRecord:
    return RepeatRecord(
        case_id=c.id,
        repeat=repeat,
        verdict=verdict,
        batch_size=int(c.batch_size),
        started_at=0.0,
        finished_at=1.0,
        commands=[],
        exit_codes={},
        logs=["node0.log"],
        parser="dlperf-jsonl",
        measurement=RepeatMeasurement(
            throughput=throughput, samples=80, duration_s=1.0, ranks=1, world_size=1,
            warmup_steps=2, measured_steps=10,
        ),  # fmt: skip
        header={"versions": {"torch": "2.13.0"}, "devices": ["cpu"]},
    )


def test_the_case_row_is_the_csv_header_of_the_reports() -> None:
    header = next(csv.reader(io.StringIO((REPORTS / "v0.1-cpu" / "results.csv").read_text())))
    # the publisher's fields are written only for a published figure (none in v0.1-cpu)
    fields = [f for f in CaseRow.model_fields if f not in PUBLISHED_FIELDS]
    assert header[1 : 1 + len(fields)] == fields  # after "row", in the declared order


def test_speedup_and_efficiency_use_the_1n1g_case_at_the_same_batch() -> None:
    one, two, four = case(Topology(1, 1)), case(Topology(1, 2)), case(Topology(2, 2))
    other_batch = case(Topology(1, 2), batch=16)
    records = [(one, record(one, r, t)) for r, t in ((1, 100.0), (2, 102.0), (3, 98.0))]
    records += [(two, record(two, 1, 190.0)), (four, record(four, 1, 360.0))]
    records += [(other_batch, record(other_batch, 1, 210.0))]
    summaries = {s.case_id: s for s in summarize(records)}
    assert summaries[two.id].speedup == 1.9 and summaries[two.id].efficiency == 0.95
    assert summaries[four.id].speedup == 3.6 and summaries[four.id].efficiency == 0.9
    assert summaries[other_batch.id].speedup is None  # no 1n1g case at batch 16
    assert baseline_of(summaries[four.id], summaries.values()) is summaries[one.id]
    assert baseline_of(summaries[other_batch.id], summaries.values()) is None


def test_summarize_keeps_finished_repeats_and_types_the_row() -> None:
    one = case(Topology(1, 1))
    records = [(one, record(one, 1, 100.0)), (one, record(one, 2, 300.0, verdict="failed"))]
    (summary,) = summarize(records)
    assert summary.throughputs == [100.0] and summary.stats.repeats == 1
    row = summary.row()
    assert isinstance(row, CaseRow) and row.throughput_median == 100.0
    assert row.versions == {"torch": "2.13.0"} and row.device_names == ["cpu"]
    assert row.model_dump()["batch_setting"] == 8
