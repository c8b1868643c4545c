"""The measurement method on hand-made logs whose answer is known."""

from __future__ import annotations

import io
import json

import pytest

from driver.bench.protocol import StepLogger
from driver.core.measure import Window, case_stats, measure_repeat, speedup
from driver.parsers.base import LogParseError
from driver.parsers.dlperf_jsonl import DlperfJsonlParser


def fake_log(rank: int, world: int, times: list[float], batch: int = 4) -> str:
    stream = io.StringIO()
    clock = iter(times)
    logger = StepLogger(
        framework="x",
        model="m",
        stream=stream,
        clock=lambda: next(clock),
        rank_env={"rank": rank, "world_size": world, "local_rank": rank, "node_rank": 0},
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
