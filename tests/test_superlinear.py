"""Measured scaling above 100% (core/summary.py's tolerance, core/report.py's mark, the release's
refusal without a reason): real calibration sessions whose 1n2g case was made faster by a
forger who re-hashed the logs with the kit's own functions (tests/forgery.py)."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from driver.core.summary import summarize
from driver.frontend.cli import main
from driver.release.audit import audit
from driver.release.refusals import ReleaseError
from driver.release.release import release
from driver.verify.folder import verify_sessions
from tests.forgery import speed_up_case
from tests.synth import cached_session

CASE = "calibration/calibration/1n2g/bs8/fp32/synthetic"


def quiet(_line: str) -> None:
    pass


def forged(tmp_path: Path, factor: float, name: str = "fast") -> Path:
    session = Path(shutil.copytree(cached_session(), tmp_path / "results" / name))
    speed_up_case(session, CASE, factor)
    return session


def summary_of(session: Path, case_id: str = CASE):  # noqa: ANN201 - a CaseSummary
    summaries = summarize(verify_sessions([session]).records)
    return next(s for s in summaries if s.case_id == case_id)


@pytest.mark.parametrize(("factor", "flagged"), [(1.0, False), (1.015, False), (1.05, True)])
def test_above_100_percent_is_flagged_beyond_the_noise_tolerance(
    tmp_path: Path, factor: float, flagged: bool
) -> None:
    s = summary_of(forged(tmp_path, factor))
    # calibration repeats vary far less than 1%: the tolerance is the 2% floor
    assert s.stats.cv + s.baseline_cv < 0.02 and s.superlinear_tolerance == 0.02
    assert s.efficiency == pytest.approx(factor, rel=2e-3)
    assert s.superlinear is flagged


def test_every_table_of_a_report_marks_it(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    session = forged(tmp_path, 1.3)
    speed_up_case(session, CASE.replace("1n2g", "2n2g"), 1.1)  # the summary's headline case
    # 1.3 x the calibration's own efficiency (within its jitter, a few 0.01% on a loaded host)
    s, headline = summary_of(session), summary_of(session, CASE.replace("1n2g", "2n2g"))
    assert s.efficiency == pytest.approx(1.3, rel=2e-3) and s.speedup is not None
    assert headline.speedup == pytest.approx(2.2, rel=2e-3)
    out = tmp_path / "report"
    assert main(["report", str(session), "--out", str(out)]) == 0
    markdown = (out / "report.md").read_text()
    (row,) = [line for line in markdown.splitlines() if "| 1          | 2 " in line]
    # speedup and efficiency of the long table, marked
    assert f"| {s.speedup:.2f} !    | {s.efficiency:.2%} !    |" in row
    assert f"@2n2g    | {headline.speedup:.2f} !  " in markdown.split("## Detail")[0]
    assert "- !: superlinear, a measured efficiency above 100% by more than its noise " in markdown
    by_case = {r["case_id"]: r for r in json.loads((out / "report.json").read_text())}
    assert by_case[CASE]["superlinear"] is True and by_case[CASE]["superlinear_tolerance"] == 0.02
    assert not by_case[CASE.replace("1n2g", "1n1g")]["superlinear"]
    table = csv.DictReader(io.StringIO((out / "report.csv").read_text()))
    assert {r["case_id"]: r["superlinear"] for r in table}[CASE] == "True"


def test_release_refuses_it_without_a_reason_and_records_the_reason(tmp_path: Path) -> None:
    session = forged(tmp_path, 1.3)
    s = summary_of(session)  # 1.3 x the calibration's own efficiency, within its jitter
    assert s.efficiency == pytest.approx(1.3, rel=2e-3) and s.speedup is not None
    efficiency = f"{s.efficiency:.2%}"
    reports = tmp_path / "reports"
    with pytest.raises(ReleaseError) as refused:
        release("v1.0", [session], reports_root=reports, compute_flops=False, printer=quiet)
    message = str(refused.value)
    assert (
        f"{CASE}: efficiency {efficiency} (speedup {s.speedup:.3f} on 2 devices), above 100% "
        "by more "
    ) in message
    assert "noise tolerance 2.00% (max(2%, CV " in message
    assert "--superlinear CASE REASON" in message and not reports.joinpath("v1.0").exists()

    reason = "L2 <cache> | fits once split"
    version = release("v1.0", [session], reports_root=reports, compute_flops=False,
                      printer=quiet, superlinear={CASE: reason})  # fmt: skip
    manifest = json.loads((version / "manifest.json").read_text())
    assert manifest["superlinear"] == {CASE: reason}
    cases = {c["case_id"]: c for c in json.loads((version / "results.json").read_text())["cases"]}
    assert cases[CASE]["superlinear"] is True and cases[CASE]["superlinear_reason"] == reason
    assert cases[CASE.replace("1n2g", "1n1g")]["superlinear"] is False
    assert "superlinear_reason" not in cases[CASE.replace("1n2g", "1n1g")]
    readme = (version / "README.md").read_text()
    assert f"| {efficiency} !    |" in readme
    assert (
        f"- {CASE}: efficiency {efficiency}, above 100% beyond its noise tolerance (2.00%); "
        "released with the reason: L2 &lt;cache&gt; \\| fits once split"
    ) in readme
    assert audit(version).ok

    # the reason dropped from the manifest afterwards: the audit names the case
    copy = shutil.copytree(version, tmp_path / "copy" / "v1.0")
    path = copy / "manifest.json"
    path.chmod(0o644)
    path.write_text(json.dumps({**manifest, "superlinear": {}}, indent=2, sort_keys=True) + "\n")
    found = {(f.file, f.cell): f.recomputed for f in audit(copy).findings}
    assert found[("manifest.json", f"superlinear[{CASE}]")].startswith(
        f"a reason: efficiency {efficiency} is above 100%"
    )


def test_a_reason_only_stands_beside_a_superlinear_case(tmp_path: Path) -> None:
    session = forged(tmp_path, 1.0, "genuine")
    reports = tmp_path / "reports"

    def refusal(reasons: dict[str, str]) -> str:
        with pytest.raises(ReleaseError) as refused:
            release("v1.0", [session], reports_root=reports, compute_flops=False,
                    printer=quiet, superlinear=reasons)  # fmt: skip
        return str(refused.value)

    efficiency = summary_of(session).efficiency  # the calibration's own, within its jitter
    assert efficiency == pytest.approx(1.0, rel=2e-3)
    assert refusal({CASE: "cache"}) == (
        f"--superlinear {CASE}: the case is not above 100% beyond its noise tolerance "
        f"(efficiency {efficiency:.2%}): drop the reason"
    )
    assert refusal({CASE.replace("fp32", "amp"): "x"}).startswith(
        f"--superlinear {CASE.replace('fp32', 'amp')}: no such case in the sessions"
    )
    assert "U+202E RIGHT-TO-LEFT OVERRIDE" in refusal({CASE: "cache \u202e"})
    assert refusal({CASE: "  "}) == (
        f"--superlinear {CASE}: the reason is empty; say why the case scales above 100%"
    )


def test_a_case_above_its_devices_peak_is_refused_naming_what_its_mfu_is_made_of() -> None:
    """MFU above 100% (issue #49): torchtitan's 70B counted per device instead of per
    tensor-parallel replica came out 8x too fast, about 199% of an H100's bf16 peak; a release
    refuses such a case, naming its throughput, FLOPs, devices and peak."""
    from types import SimpleNamespace

    from driver.release.vouching import VouchingError, check_mfu

    def row(case_id: str, throughput: float) -> SimpleNamespace:
        flops, devices, peak = 3.944e15, 32, 989.4
        return SimpleNamespace(
            case_id=case_id, throughput_median=throughput, flops_per_sample=flops,
            devices=devices, peak_tflops=peak, peak_device="H100 SXM", peak_precision="bf16",
            mfu=throughput * flops / (devices * peak * 1e12),
        )  # fmt: skip

    honest = row("llama/pytorch/4n32g/bs1/amp/real/70b", 2.0)
    check_mfu(SimpleNamespace(rows={"a": honest}))  # 24.9%: released
    forged = row("llama/pytorch/4n32g/bs1/amp/real/70b-x", 16.0)
    with pytest.raises(VouchingError) as refused:
        check_mfu(SimpleNamespace(rows={"a": honest, "b": forged}))
    message = str(refused.value)
    assert "llama/pytorch/4n32g/bs1/amp/real/70b-x: MFU 199.3%" in message
    assert "16 samples/s x 3.944e+15 FLOP a sample over 32 x 989.4 TFLOP/s" in message
    assert "/70b:" not in message and "tensor_parallel" in message
