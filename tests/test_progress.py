"""Progress and ETA: estimated from the repeats measured so far, per case where it can be."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from driver.core.progress import Progress, ProgressTracker, duration_text
from driver.core.runner import run_cases
from driver.core.selftest import calibration_cases
from driver.model.results import Session
from driver.runtimes.local import LocalRuntime


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_estimate_uses_each_case_s_own_repeats_then_scales_by_steps() -> None:
    short, long = calibration_cases(0.01, 8, ["1n1g", "1n2g"], repeats=3, measured_steps=10)
    long = replace(long, total_steps=45)  # 3x the steps of `short` (15)
    clock = FakeClock()
    tracker = ProgressTracker([short, long], clock=clock)
    assert tracker.remaining_s() is None  # nothing measured: no guess
    assert "no estimate yet" in tracker.summary()
    tracker.finished(short, 10.0)
    tracker.finished(short, 12.0)
    clock.now += 22
    # short: 1 left at its own median 11 s; long: 3 left at 11/15 s per step x 45 steps = 33 s.
    assert tracker.remaining_s() == 11.0 + 3 * 33.0
    assert tracker.summary() == (
        "2/6 repeats, 0/2 cases done; elapsed 22s, about 1m50s left"
    )
    tracker.stopped(long)  # a failed repeat ends the case for this run
    assert tracker.remaining_s() == 11.0 and tracker.cases_left == 1


def test_durations_read_like_a_person_writes_them() -> None:
    assert [duration_text(s) for s in (0, 59.4, 61, 3600 * 2 + 125)] == [
        "0s",
        "59s",
        "1m01s",
        "2h02m",
    ]


def test_plain_progress_puts_the_eta_on_every_repeat_line(tmp_path: Path) -> None:
    cases = calibration_cases(0.002, 8, ["1n1g", "1n2g"], repeats=2, measured_steps=5)
    lines: list[str] = []
    summary = run_cases(
        cases, Session.open(tmp_path / "s"), LocalRuntime(), printer=lines.append, progress="plain"
    )
    assert summary.ok
    repeat_lines = [line for line in lines if "samples/s" in line]
    assert len(repeat_lines) == 4
    assert "[1/4 repeats, 0/2 cases done;" in repeat_lines[0]
    assert "about" in repeat_lines[0] and "left]" in repeat_lines[0]
    assert "[4/4 repeats, 2/2 cases done;" in repeat_lines[-1]
    assert repeat_lines[-1].endswith("about 0s left]")


def test_rich_progress_draws_a_bar_and_keeps_the_lines(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    cases = calibration_cases(0.002, 8, ["1n1g"], repeats=1, measured_steps=5)
    with Progress(cases, mode="rich") as report:
        report.tracker.finished(cases[0], 1.0)
        report.line("a repeat line")
    out = capsys.readouterr().out
    assert "a repeat line" in out and "1/1 repeats" in out


def test_the_rich_bar_is_drawn_when_a_repeat_ends_not_in_a_thread(capsys) -> None:  # noqa: ANN001
    """No refresh thread wakes 10 times a second beside the benchmark (it took ~10 ms of CPU
    per second); the lines keep their brackets (not read as markup)."""
    import threading

    cases = calibration_cases(0.002, 8, ["1n1g"], repeats=2, measured_steps=5)
    before = set(threading.enumerate())
    with Progress(cases, mode="rich") as report:
        assert set(threading.enumerate()) == before
        report.tracker.finished(cases[0], 1.0)
        report.line("[case 1/1 resnet50] repeat 1/2: 9.50 samples/s")
    out = capsys.readouterr().out
    assert "[case 1/1 resnet50] repeat 1/2" in out and "1/2 repeats" in out
