"""The Dell method pieces: epoch mode, interval variation, page-cache drop, loader workers."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from driver.bench.host import physical_cores, resolve_loader_workers
from driver.core.runner import run_cases
from driver.core.selftest import calibration_cases
from driver.model.measure import Window, slice_cv
from driver.model.results import Session
from driver.parsers.base import RankLog, StepPoint
from driver.runtimes.local import LocalRuntime


def test_epoch_mode_sets_the_window_from_the_epoch(tmp_path: Path) -> None:
    case = calibration_cases(0.005, 8, ["1n2g"], repeats=1, measured_steps=5)[0]
    case = replace(case, epochs=1.0, epoch_samples=320)  # 320 / (8 x 2) = 20 steps
    assert case.window_for(8) == (5, 20, 25)
    session = Session.open(tmp_path / "s")
    assert run_cases([case], session, LocalRuntime(), printer=lambda _: None).ok
    record = session.finished(case, 1)
    assert record.measurement.measured_steps == 20
    assert record.measurement.samples == 320


def test_interval_variation_flags_a_slowdown_inside_the_window() -> None:
    steady = RankLog(0, [StepPoint(i, float(i), 1 if i else 0) for i in range(21)])
    assert slice_cv(steady, Window(0, 20)) == 0.0
    times = [float(i) if i <= 10 else 10.0 + 2 * (i - 10) for i in range(21)]  # half speed later
    slowed = RankLog(0, [StepPoint(i, t, 1 if i else 0) for i, t in enumerate(times)])
    assert slice_cv(slowed, Window(0, 20)) > 0.3
    assert slice_cv(steady, Window(0, 1)) is None  # too short to slice


def test_cache_drop_is_recorded_per_node(tmp_path: Path) -> None:
    case = replace(
        calibration_cases(0.005, 8, ["2n2g"], repeats=1, measured_steps=5)[0], drop_caches=True
    )
    session = Session.open(tmp_path / "s")
    assert run_cases([case], session, LocalRuntime(), printer=lambda _: None).ok
    status = session.finished(case, 1).extra["cache_drop"]
    assert set(status) == {"node0.log", "node1.log"}
    allowed = os.geteuid() == 0 and os.access("/proc/sys/vm/drop_caches", os.W_OK)
    assert all(s.startswith("dropped" if allowed else "skipped") for s in status.values())


def test_loader_workers_default_follows_physical_cores(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert resolve_loader_workers("auto") == max(1, physical_cores() - 4)
    assert resolve_loader_workers("3") == 3
