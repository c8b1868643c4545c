"""Case summaries: the typed case row, the one 1n1g baseline lookup, what summarize keeps."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from driver.core.summary import (
    PUBLISHED_FIELDS,
    RELEASE_FIELDS,
    SLOW_NODE_EXCESS,
    CaseRow,
    SlowNode,
    baseline_of,
    rank_ranges,
    slow_node_of,
    summarize,
)
from driver.model.case import Case, Topology
from driver.model.measure import RepeatMeasurement
from driver.model.results import CommandRecord, RepeatRecord

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
    # the publisher's fields are written only for a published figure (none in v0.1-cpu); the
    # release columns follow the case's own
    fields = [f for f in CaseRow.model_fields if f not in (*PUBLISHED_FIELDS, *RELEASE_FIELDS)]
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


def two_node_record(c: Case, repeat: int, node: int | None, excess: float | None) -> RepeatRecord:
    """A 2n4g repeat whose logs named ``node`` (ranks 2 per node) slowest by ``excess``."""
    base = record(c, repeat, 100.0)
    measurement = base.measurement.model_copy(
        update={
            "ranks": 4,
            "world_size": 4,
            "slowest_rank": None if node is None else 2 * node + 1,
            "slowest_rank_excess": excess,
            "slowest_node": node,
            "slowest_node_ranks": None if node is None else [2 * node, 2 * node + 1],
            "slowest_node_excess": excess,
        }
    )
    commands = [
        CommandRecord(node=name, argv=["python"], env={}) for name in ("gpu-a", "gpu-b")
    ]
    return base.model_copy(
        update={"measurement": measurement, "commands": commands,
                "logs": ["node0.log", "node1.log"]}
    )  # fmt: skip


def test_a_node_late_in_most_repeats_is_named_and_a_hiccup_is_not() -> None:
    c = case(Topology(2, 2))
    named = slow_node_of([two_node_record(c, 1, 1, 0.12), two_node_record(c, 2, 1, 0.10),
                          two_node_record(c, 3, 0, 0.001)])  # fmt: skip
    assert named == SlowNode(name="gpu-b", ranks=(2, 3), excess=0.11, flagged=2, repeats=3)
    assert named.describe() == (
        "slow node: gpu-b (ranks 2-3), windows 11.0% longer than the other nodes' in 2/3 repeats"
    )
    # late in one repeat of three: not a slow node
    once = [two_node_record(c, 1, 1, 0.12), two_node_record(c, 2, 0, 0.001),
            two_node_record(c, 3, 1, 0.015)]  # fmt: skip
    assert slow_node_of(once) is None
    # within the threshold every time (lockstep ranks end together): nobody
    assert slow_node_of([two_node_record(c, r, 1, SLOW_NODE_EXCESS) for r in (1, 2, 3)]) is None
    # records without node facts (one node, older records, rate-only logs): nobody
    assert slow_node_of([two_node_record(c, r, None, None) for r in (1, 2)]) is None
    # half the repeats is not a majority; two different nodes never add up
    assert slow_node_of([two_node_record(c, 1, 1, 0.2), two_node_record(c, 2, 0, 0.2)]) is None


def test_summarize_names_the_slow_node_of_each_case() -> None:
    slow, even = case(Topology(2, 2)), case(Topology(2, 2), batch=16)
    records = [(slow, two_node_record(slow, r, 0, 0.3)) for r in (1, 2)]
    records += [(even, two_node_record(even, r, 1, 0.0)) for r in (1, 2)]
    by_case = {s.case_id: s for s in summarize(records)}
    assert by_case[slow.id].slow_node == SlowNode("gpu-a", (0, 1), 0.3, 2, 2)
    assert by_case[even.id].slow_node is None


def test_rank_ranges_are_runs() -> None:
    assert rank_ranges([7, 0, 1, 2, 3, 5]) == "0-3, 5, 7"
    assert rank_ranges([4]) == "4"


def test_a_llama_series_with_no_1n1g_scales_against_its_smallest_topology_labelled() -> None:
    """Llama 3.1 8B does not fit one device: torchtitan's own published 1n8g and 16n128g
    figures (5,762 and 5,605 tokens/s per GPU) give 15.56x and 97.3% against 1n8g, said so in
    the cell and a note; a ResNet-50 series with no 1n1g still shows no speedup."""
    from driver.core.report import markdown_tables
    from driver.release.imported import figure_summaries

    figures = REPORTS.parent / "published" / "llama3" / "torchtitan.yaml"
    plain = [s for s in figure_summaries(figures) if s.case.variant == "8b"]
    assert sorted(s.case.topology.label for s in plain) == ["16n128g", "1n8g"]
    eight, many = sorted(summarize([], published=plain), key=lambda s: s.case.topology.world_size)
    assert eight.speedup == 1.0 and eight.baseline_topology == "1n8g"
    assert many.speedup is not None and many.efficiency is not None
    assert round(many.speedup, 2) == round(16 * 5605 / 5762, 2) == 15.56
    assert round(many.efficiency, 3) == round(5605 / 5762, 3) == 0.973
    assert many.baseline_topology == "1n8g"
    text = markdown_tables([eight, many], plain=True)
    assert "15.56 (vs 1n8g)" in text and "97.28%" in text
    assert "against the smallest topology of the series" in text
    two, four = case(Topology(1, 2)), case(Topology(2, 2))
    records = [(two, record(two, 1, 190.0)), (four, record(four, 1, 360.0))]
    for summary in summarize(records):
        assert summary.speedup is None and summary.baseline_topology is None
