"""One version holds a measured case and a published figure of the same case id on other
hardware (the user's H100 run beside DLPerf's V100 figure): released, audited, and paired by
``dlperf factor --factor device``. A CPU session of the kit's PyTorch ResNet-50 stands in for
the H100 one; the figure on its own device model is still refused (a reader could not tell the
rows apart)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from driver.analysis.compare import load_side
from driver.analysis.factor import factor_report
from driver.release.audit import audit
from driver.release.refusals import ReleaseError
from driver.release.release import release
from tests.real_frameworks import framework_env, run_case


@pytest.fixture(scope="module")
def cpu_session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    framework_env("pytorch")
    run = run_case(tmp_path_factory.mktemp("h100"), "pytorch", "resnet50", "1n1g")
    record = run.records[0]
    device = record.header["devices"][0]
    return run.folder, run.case.id, device


def figure_file(path: Path, hardware: str) -> Path:
    path.write_text(
        "schema: 1\npublisher: DLPerf v1.0\nurl: https://github.com/Oneflow-Inc/DLPerf\n"
        "figures:\n"
        f"  - {{framework: pytorch, source: dlperf, model: resnet50, hardware: {hardware},"
        " nodes: 1, devices: 1, batch: 4, precision: fp32, dataset: synthetic,"
        " throughput: 384.0}\n"
    )
    return path


def quiet(_line: str) -> None:
    pass


def test_a_published_figure_beside_the_measured_case_on_other_hardware(
    cpu_session: tuple[Path, str, str], tmp_path: Path
) -> None:
    session, case_id, _device = cpu_session
    figures = figure_file(tmp_path / "dlperf.yaml", "Tesla V100-SXM2-16GB")
    target = release(
        "v1.0", [session], reports_root=tmp_path / "reports", imports=[figures], printer=quiet,
        compute_flops=False,
    )  # fmt: skip
    cases = json.loads((target / "results.json").read_text())["cases"]
    same = [c for c in cases if c["case_id"] == case_id]
    assert len(same) == 2 and sum(1 for c in same if c.get("published_by")) == 1
    assert audit(target, recompute_flops=False).ok
    side = load_side(str(target), tmp_path, tmp_path)
    data, _text = factor_report([side], "device", "V100", "")  # "" matches the CPU's name
    (pair,) = [p for p in data["pairs"] if p["a_case"] == case_id]
    assert pair["published_by"] == "DLPerf v1.0" and pair["a_median"] == 384.0


def test_a_published_figure_on_the_measured_device_model_is_refused(
    cpu_session: tuple[Path, str, str], tmp_path: Path
) -> None:
    session, case_id, device = cpu_session
    figures = figure_file(tmp_path / "same.yaml", f"'{device}'")
    with pytest.raises(
        ReleaseError, match=f"(?s)published on the measured device model.*{case_id}"
    ):
        release(
            "v1.0", [session], reports_root=tmp_path / "reports", imports=[figures],
            printer=quiet, compute_flops=False,
        )  # fmt: skip
