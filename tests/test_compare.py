"""``dlperf compare`` and ``dlperf factor`` on real calibration sessions, and their statistics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from driver.analysis.compare import (
    compare_sides,
    load_side,
    mann_whitney,
    min_p_value,
    verdict,
)
from driver.analysis.factor import factor_report
from driver.frontend.cli import main
from driver.release.release import release
from tests.synth import cached_session, multiply

# The calibration workload's truth: batch x devices / step_time samples/s. Session B runs 25%
# slower steps and two batch sizes, so the effects are known in advance.
BASE_STEP, SLOW_STEP = 0.01, 0.0125


def quiet(_line: str) -> None:
    pass


@pytest.fixture(scope="module")
def base() -> Path:
    return cached_session()


@pytest.fixture(scope="module")
def slow() -> Path:
    return cached_session(
        "slow", topologies=("1n1g", "1n2g"), batches=(4, 8), step_time=SLOW_STEP, repeats=2
    )


def test_mann_whitney_matches_the_exact_distribution() -> None:
    assert mann_whitney([1, 2, 3], [4, 5, 6]) == (0.0, 0.1)
    _u, p = mann_whitney(list(range(7)), list(range(10, 17)))
    assert p == pytest.approx(2 / 3432)  # DLPerf's 7 repeats: fully separated
    assert mann_whitney([1, 2, 3, 4, 5], [1.5, 2.5, 3.5, 4.5, 5.5])[1] == pytest.approx(
        0.690476, abs=1e-6
    )
    u, p = mann_whitney([1.0, 2.0, 2.0, 3.0], [2.0, 3.0, 4.0, 5.0])  # ties: normal approx.
    assert u == 2.5 and p == pytest.approx(0.1366, abs=1e-3)  # tie-corrected, continuity
    assert min_p_value(3, 3) == 0.1 and min_p_value(7, 7) < 0.001


def test_verdict_takes_the_spread_into_account() -> None:
    a = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8]
    assert verdict(a, [x * 0.95 for x in a]).label == "slower"
    assert verdict(a, [x * 1.05 for x in a]).label == "faster"
    noisy = [90.0, 110.0, 100.0, 95.0, 105.0, 98.0, 102.0]
    shifted = [x * 1.03 for x in noisy]
    assert verdict(noisy, shifted).label == "within noise"  # inside the noise
    small = verdict(a, [x + 0.3 for x in a])  # overlapping ranges
    assert small.label == "within noise" and small.tested
    few = verdict([100.0, 101.0, 100.5], [90.0, 91.0, 90.5])
    assert few.label == "slower" and not few.tested and few.p_value == 0.1
    assert verdict([100.0], [50.0]).label.startswith("inconclusive")


def test_compare_real_sessions(base: Path, slow: Path, tmp_path: Path) -> None:
    root = tmp_path
    a = load_side(str(base), root, root)
    b = load_side(str(slow), root, root)
    rows, text = compare_sides(a, b)
    by_case = {r["case_id"]: r for r in rows}
    assert set(by_case) == {
        "calibration/calibration/1n1g/bs8/fp32/synthetic",
        "calibration/calibration/1n2g/bs8/fp32/synthetic",
    }
    for row in rows:
        case_a, case_b = a.cases[row["case_id"]], b.cases[row["case_id"]]
        assert row["ratio"] == case_b.stats.median / case_a.stats.median
        # the truth is 0.8; the calibration workload is within a few % even on a busy machine
        assert row["ratio"] == pytest.approx(BASE_STEP / SLOW_STEP, rel=0.1)
        assert row["verdict"] == "slower"
    assert "Only in" in text and "2n2g" in text  # base has a 2n2g case, slow does not
    same_rows, _ = compare_sides(a, load_side(str(base), root, root))
    assert {r["verdict"] for r in same_rows} == {"within noise"}
    assert all(r["ratio"] == 1.0 for r in same_rows)


def test_compare_a_version_with_a_session(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    reports = tmp_path / "reports"
    release("v0.1", [base], reports_root=reports, printer=quiet)
    code = main(["compare", "v0.1", str(base), "--reports", str(reports), "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert code == 0 and len(rows) == 3
    assert all(r["ratio"] == 1.0 and r["verdict"] == "within noise" for r in rows)


def test_factor_batch_on_a_real_session(slow: Path, tmp_path: Path) -> None:
    side = load_side(str(slow), tmp_path, tmp_path)
    data, text = factor_report([side], "batch", "4", "8")
    assert len(data["pairs"]) == 2  # 1n1g and 1n2g
    for pair in data["pairs"]:
        a, b = side.cases[pair["a_case"]], side.cases[pair["b_case"]]
        assert a.fields["topology"] == b.fields["topology"]
        assert pair["ratio"] == b.stats.median / a.stats.median
    ratios = sorted(p["ratio"] for p in data["pairs"])
    assert data["median_ratio"] == (ratios[0] + ratios[1]) / 2
    assert data["median_ratio"] == pytest.approx(2.0, rel=0.1)  # throughput ~ batch
    assert "median 8/4" in text and "topology" in text


def test_factor_over_versions_and_sessions(
    base: Path, slow: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    big = multiply(base, tmp_path / "results" / "labels", repeats=24)
    reports = tmp_path / "reports"
    release("v0.1", [big], reports_root=reports, printer=quiet)
    code = main(
        ["factor", "v0.1", "--factor", "precision", "--a", "fp32", "--b", "amp",
         "--reports", str(reports), "--json"]
    )  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    # multiply() copies the same real logs under both labels: the ratio is exactly 1
    assert code == 0 and len(data["pairs"]) == 6 and data["median_ratio"] == 1.0
    code = main(["factor", str(base), "--factor", "xla", "--a", "off", "--b", "on"])
    assert code == 1 and "No pair of cases" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["factor", str(base), "--factor", "colour", "--a", "x", "--b", "y"])
