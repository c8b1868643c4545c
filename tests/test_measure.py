"""The measurement method on hand-made logs whose answer is known."""

from __future__ import annotations

import io
import json
import sys
from dataclasses import replace

import pytest

from driver.bench.protocol import TAG, StepLogger, print_weights_checksum
from driver.model.case import Case, Topology
from driver.model.measure import (
    STRAGGLER_FIELDS,
    RepeatMeasurement,
    Window,
    case_stats,
    device_clock_duration,
    measure_logs,
    measure_repeat,
    parse_logs,
    slice_cv,
    speedup,
)
from driver.parsers.base import LogParseError, ParsedLog, RankLog, StepPoint
from driver.parsers.dlperf_jsonl import DlperfJsonlParser

RANK_KEYS = ("rank", "world_size", "local_rank", "node_rank")


def fake_log(rank: int, world: int, times: list[float], batch: int = 4, node_rank: int = 0) -> str:
    stream = io.StringIO()
    clock = iter(times)
    logger = StepLogger(
        framework="x",
        model="m",
        stream=stream,
        clock=lambda: next(clock),
        rank_env={"rank": rank, "world_size": world, "local_rank": rank, "node_rank": node_rank},
    )
    logger.header(versions={}, devices=[], options={})
    logger.begin()
    for step in range(1, len(times)):
        logger.step(step, batch, loss=1.0)
    logger.end()
    return "launcher noise\n" + stream.getvalue()


def test_window_throughput_uses_boundaries_not_step_rates() -> None:
    # Steps of very different lengths: a mean of per-step rates would be far off.
    times = [0.0, 1.0, 2.0, 2.5, 3.0, 7.0]
    parsed = DlperfJsonlParser().parse({"node0.log": fake_log(0, 1, times)})
    result = measure_repeat(parsed, Window(warmup_steps=2, measured_steps=3))
    assert result.samples == 12 and result.duration_s == pytest.approx(5.0)
    assert result.throughput == pytest.approx(12 / 5.0)


def test_global_throughput_takes_slowest_rank() -> None:
    logs = {
        "node0.log": fake_log(0, 2, [10.0, 11.0, 12.0, 13.0]),
        "node1.log": fake_log(1, 2, [500.0, 501.0, 502.5, 504.0]),  # other clock, slower
    }
    result = measure_repeat(DlperfJsonlParser().parse(logs), Window(1, 2))
    assert result.samples == 16 and result.duration_s == pytest.approx(3.0)


def test_cut_log_and_missing_rank_are_errors() -> None:
    parser = DlperfJsonlParser()
    short = parser.parse({"node0.log": fake_log(0, 1, [0.0, 1.0, 2.0])})
    with pytest.raises(LogParseError, match="cut short"):
        measure_repeat(short, Window(1, 5))
    lonely = parser.parse({"node0.log": fake_log(0, 2, [0.0, 1.0, 2.0])})
    with pytest.raises(LogParseError, match="rank is missing"):
        measure_repeat(lonely, Window(0, 2))


def test_parser_rejects_broken_and_disordered_records() -> None:
    parser = DlperfJsonlParser()
    good = fake_log(0, 1, [0.0, 1.0, 2.0])
    lines = good.splitlines()
    cut = lines[:-2] + [lines[-2][: len(lines[-2]) // 2]]  # a step line cut in the middle
    with pytest.raises(LogParseError, match="broken record"):
        parser.parse({"n.log": "\n".join(cut)})
    step_lines = [i for i, line in enumerate(lines) if '"dlperf": "step"' in line]
    lines[step_lines[0]], lines[step_lines[1]] = lines[step_lines[1]], lines[step_lines[0]]
    with pytest.raises(LogParseError, match="does not follow"):
        parser.parse({"n.log": "\n".join(lines)})
    with pytest.raises(LogParseError, match="no dlperf step records"):
        parser.parse({"n.log": "Traceback: boom\n"})
    with pytest.raises(LogParseError, match="appears in both"):
        parser.parse({"a.log": good, "b.log": good})


def test_case_stats_and_speedup() -> None:
    stats = case_stats([100.0, 102.0, 98.0, 150.0, 101.0])
    assert stats.median == 101.0 and stats.minimum == 98.0 and stats.maximum == 150.0
    assert stats.unstable and stats.repeats == 5
    assert not case_stats([100.0, 100.5, 99.8]).unstable
    assert speedup(720.0, 100.0, 8) == (7.2, 0.9)
    assert speedup(720.0, None, 8) == (None, None)


def test_records_are_single_json_lines() -> None:
    for line in fake_log(0, 1, [0.0, 1.0]).splitlines()[1:]:
        assert json.loads(line)["dlperf"] in {"header", "begin", "step", "end"}


class WriteRecorder(io.StringIO):
    """A stream that keeps each write apart, as an unbuffered pipe shared by ranks does."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


def test_every_line_a_rank_prints_is_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two ranks share one pipe under PYTHONUNBUFFERED: a line written in two pieces can take a
    # peer's line between them (seen in CI: rank 0's checksum line glued to rank 1's).
    recorder = WriteRecorder()
    monkeypatch.setattr(sys, "stdout", recorder)
    print_weights_checksum(0, 1.5)
    logger = StepLogger(framework="x", model="m", rank_env=dict.fromkeys(RANK_KEYS, 0))
    logger.begin()
    assert recorder.writes == ["dlperf-weights-checksum rank=0 sum=1.500000\n", recorder.writes[1]]
    assert recorder.writes[1].endswith("}\n") and recorder.writes[1].count("\n") == 1


def sparse_log(every: int, last: int, slow_from: int | None = None) -> RankLog:
    """A rank that logs every ``every`` steps (as upstream sources do), 0.1 s a step, 0.2 s
    from ``slow_from`` on."""
    points, t = [StepPoint(0, 0.0, 0)], 0.0
    for step in range(every, last + 1, every):
        for s in range(step - every + 1, step + 1):
            t += 0.2 if slow_from is not None and s > slow_from else 0.1
        points.append(StepPoint(step, t, 8 * every))
    return RankLog(rank=0, points=points)


def test_interval_cv_adapts_to_the_log_interval() -> None:
    window = Window(warmup_steps=100, measured_steps=1000)
    steady = sparse_log(100, 1100)  # 10 intervals of 100 steps in the window
    assert slice_cv(steady, window) == pytest.approx(0.0, abs=1e-9)
    # half the window at half speed: rates 80 and 40 samples/s -> CV 1/3
    uneven = sparse_log(100, 1100, slow_from=600)
    assert slice_cv(uneven, window) == pytest.approx(1 / 3)
    # fewer logged intervals than slices: as many slices as the log has
    coarse = sparse_log(250, 1100 + 150)  # points at 0, 250, 500, ... (window bounds absent)
    assert slice_cv(coarse, window) is None
    four = sparse_log(250, 1000)
    assert slice_cv(four, Window(0, 1000)) == pytest.approx(0.0, abs=1e-9)
    assert slice_cv(sparse_log(500, 1000), Window(500, 500)) is None  # one interval: no CV
    # every step logged: the ten equal slices of before
    dense = sparse_log(1, 110, slow_from=60)
    assert slice_cv(dense, Window(10, 100)) == pytest.approx(1 / 3)


def test_nan_and_negative_log_numbers_are_refused() -> None:
    with pytest.raises(LogParseError, match="not a finite number"):
        StepPoint(3, float("nan"), 8)
    with pytest.raises(LogParseError, match="negative"):
        StepPoint(3, 1.0, -8)
    nan_log = fake_log(0, 1, [0.0, 1.0, 2.0, 3.0]).replace('"t": 2.0', '"t": NaN')
    with pytest.raises(LogParseError, match="not a finite number"):
        parse_logs("dlperf-jsonl", {"node0.log": nan_log})
    mistyped = fake_log(0, 1, [0.0, 1.0, 2.0]).replace('"samples": 4', '"samples": "four"', 1)
    with pytest.raises(LogParseError, match="node0.log:4: malformed 'step' record"):
        parse_logs("dlperf-jsonl", {"node0.log": mistyped})
    timeless = fake_log(0, 1, [0.0, 1.0, 2.0]).replace('"t": 1.0, ', "", 1)
    with pytest.raises(LogParseError, match="node0.log:4: malformed 'step' record .KeyError"):
        parse_logs("dlperf-jsonl", {"node0.log": timeless})
    with pytest.raises(LogParseError, match="unknown log parser"):
        parse_logs("nope", {"node0.log": mistyped})


def test_measurement_fields_are_validated_and_written_with_their_flag() -> None:
    parsed = DlperfJsonlParser().parse({"node0.log": fake_log(0, 1, [0.0, 1.0, 2.0, 3.0])})
    result = measure_repeat(parsed, Window(1, 2))
    written = result.model_dump()
    assert written["interval_unstable"] is False and list(written)[-1] == "interval_unstable"
    assert RepeatMeasurement.model_validate(written) == result  # read back as written
    for bad in ({"throughput": -800.0}, {"throughput": float("nan")}, {"samples": -1}):
        with pytest.raises(ValueError):
            RepeatMeasurement.model_validate({**written, **bad})
    zero = fake_log(0, 1, [0.0, 1.0, 2.0, 3.0]).replace('"samples": 4', '"samples": 0')
    with pytest.raises(LogParseError, match="no samples"):
        measure_repeat(DlperfJsonlParser().parse({"node0.log": zero}), Window(1, 2))


def test_measure_logs_checks_the_world_size_against_the_case() -> None:
    case = Case(model="m", framework="x", topology=Topology(1, 2), batch_size=4,
                precision="fp32", dataset="synthetic", warmup_steps=1, measured_steps=2,
                total_steps=3)  # fmt: skip
    logs = {"node0.log": fake_log(0, 1, [0.0, 1.0, 2.0, 3.0])}
    with pytest.raises(LogParseError, match="world size 1, the case has 2 devices"):
        measure_logs(case, "dlperf-jsonl", logs, 4)
    single = replace(case, topology=Topology(1, 1))
    measurement, parsed = measure_logs(single, "dlperf-jsonl", logs, 4)
    assert measurement.samples == 8 and parsed.world_size == 1


def steady(start: float, window: float, steps: int = 3) -> list[float]:
    """begin, then ``steps`` steps; step 1 ends at start + 1, the window (steps 1..steps) lasts
    ``window`` seconds."""
    return [start, start + 1.0] + [start + 1.0 + window * i / (steps - 1) for i in range(1, steps)]


def two_nodes(windows: dict[int, float], per_node: int = 2) -> dict[str, str]:
    """One log per node, ``per_node`` ranks each (rank r on node r // per_node), every rank on
    its own clock (node 1's hours ahead) with the given window length."""
    world = len(windows)
    texts: dict[str, str] = {}
    for rank, window in sorted(windows.items()):
        node = rank // per_node
        log = fake_log(rank, world, steady(7200.0 * node + rank, window), node_rank=node)
        texts[f"node{node}.log"] = texts.get(f"node{node}.log", "") + log
    return texts


def test_the_slowest_rank_and_node_are_named_from_the_logs() -> None:
    # node 1's ranks (2, 3) run 10% and 15% longer than node 0's
    parsed = DlperfJsonlParser().parse(two_nodes({0: 2.0, 1: 2.0, 2: 2.2, 3: 2.3}))
    result = measure_repeat(parsed, Window(1, 2))
    assert result.duration_s == pytest.approx(2.3)  # the job's duration: the slowest rank's
    assert result.slowest_rank == 3
    assert result.slowest_rank_excess == pytest.approx(2.3 / 2.1 - 1)  # median rank: 2.1
    assert result.slowest_node == 1 and result.slowest_node_ranks == [2, 3]
    assert result.slowest_node_excess == pytest.approx(2.25 / 2.0 - 1)  # node medians
    # written and read back, the record's facts are the same
    again = RepeatMeasurement.model_validate_json(result.model_dump_json())
    assert again == result and set(STRAGGLER_FIELDS) <= again.model_fields_set


def test_one_slow_rank_names_its_node_by_its_ranks_median() -> None:
    # 3 nodes of 2: one rank of node 0 is slow, both of node 2 a little slow
    windows = {0: 2.0, 1: 2.4, 2: 2.0, 3: 2.0, 4: 2.1, 5: 2.1}
    result = measure_repeat(DlperfJsonlParser().parse(two_nodes(windows)), Window(1, 2))
    assert result.slowest_rank == 1
    assert result.slowest_node == 0  # median(2.0, 2.4) = 2.2 > 2.1
    assert result.slowest_node_excess == pytest.approx(2.2 / 2.05 - 1)  # others: 2.0..2.1


def test_equal_windows_name_the_lowest_and_say_zero() -> None:
    result = measure_repeat(
        DlperfJsonlParser().parse(two_nodes({0: 2.0, 1: 2.0, 2: 2.0, 3: 2.0})), Window(1, 2)
    )
    assert result.slowest_rank == 0 and result.slowest_node == 0
    assert result.slowest_rank_excess == 0.0 and result.slowest_node_excess == 0.0


def test_no_straggler_facts_without_ranks_or_nodes_to_compare() -> None:
    parser = DlperfJsonlParser()
    alone = measure_repeat(
        parser.parse({"node0.log": fake_log(0, 1, steady(0, 2.0))}), Window(1, 2)
    )
    assert all(getattr(alone, name) is None for name in STRAGGLER_FIELDS)
    # two ranks on one node: a slowest rank, no node to name
    one_node = {0: 2.0, 1: 2.2}
    result = measure_repeat(parser.parse(two_nodes(one_node, per_node=2)), Window(1, 2))
    assert result.slowest_rank == 1 and result.slowest_rank_excess == pytest.approx(2.2 / 2.1 - 1)
    assert result.slowest_node is None and result.slowest_node_excess is None
    # a header that states no node_rank (upstream logs): no node named
    parsed = parser.parse(two_nodes({0: 2.0, 1: 2.0, 2: 2.5, 3: 2.5}))
    for log in parsed.ranks.values():
        log.header.pop("node_rank")
    result = measure_repeat(parsed, Window(1, 2))
    assert result.slowest_rank == 2 and result.slowest_node is None
    # a source that prints only a rate
    rate = ParsedLog(ranks={}, world_size=8, reported_throughput=100.0)
    reported = measure_repeat(rate, Window(1, 2))
    assert all(getattr(reported, name) is None for name in STRAGGLER_FIELDS)


def test_a_record_written_before_the_straggler_facts_takes_them_from_its_logs() -> None:
    derived = measure_repeat(
        DlperfJsonlParser().parse(two_nodes({0: 2.0, 1: 2.0, 2: 2.2, 3: 2.2})), Window(1, 2)
    )
    old = {k: v for k, v in derived.model_dump().items() if k not in STRAGGLER_FIELDS}
    written = RepeatMeasurement.model_validate(old)
    assert written.slowest_node is None and written != derived
    assert written.filled_from(derived) == derived
    # a record that holds the fields keeps what it says: a wrong one still disagrees
    lying = RepeatMeasurement.model_validate({**derived.model_dump(), "slowest_node": 0})
    assert lying.filled_from(derived) != derived
    # the release columns are the fields the released versions were written with
    assert not set(STRAGGLER_FIELDS) & set(RepeatMeasurement.columns())
    assert "interval_unstable" in RepeatMeasurement.columns()


def _rank_lines(rank: int, window_s: object | None) -> str:
    lines = [{TAG: "header", "rank": rank, "world_size": 2}, {TAG: "begin", "rank": rank, "t": 1.0},
             {TAG: "step", "rank": rank, "step": 1, "t": 2.0, "samples": 4},
             {TAG: "end", "rank": rank, "steps": 1}]  # fmt: skip
    if window_s is not None:
        lines.append({TAG: "device-window", "rank": rank, "seconds": window_s, "steps": 1,
                      "source": "calibration-wake"})  # fmt: skip
    return "\n".join(json.dumps(line) for line in lines) + "\n"


def test_the_device_clocks_window_is_the_longest_ranks_and_needs_every_rank() -> None:
    both = DlperfJsonlParser().parse({"node0.log": _rank_lines(0, 0.98),
                                      "node1.log": _rank_lines(1, 1.01)})  # fmt: skip
    assert device_clock_duration(both) == 1.01
    one = DlperfJsonlParser().parse({"node0.log": _rank_lines(0, 0.98),
                                     "node1.log": _rank_lines(1, None)})  # fmt: skip
    assert device_clock_duration(one) is None


@pytest.mark.parametrize("seconds", [0, -1.0, "1.0", True, None, float("inf")])
def test_a_malformed_device_window_is_a_malformed_log_naming_its_line(seconds: object) -> None:
    text = _rank_lines(0, 1.0).replace('"seconds": 1.0', f'"seconds": {json.dumps(seconds)}')
    with pytest.raises(LogParseError) as caught:
        DlperfJsonlParser().parse({"node0.log": text})
    assert str(caught.value).startswith("node0.log:5: rank 0: device-window seconds is")
