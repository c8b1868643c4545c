"""``dlperf import``: published figures (tests/fixtures/published, sources cited there) become
rate-only cases; their speedups, efficiencies and factor medians are checked against values
computed by hand from the published numbers."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from driver.analysis.compare import load_side
from driver.analysis.factor import factor_report
from driver.core.summary import CaseSummary
from driver.frontend.cli import main
from driver.release.imported import imported_summaries, load_import
from driver.schema import ConfigError

FIXTURES = Path(__file__).parent / "fixtures" / "published"
DLPERF = FIXTURES / "dlperf-v1.0-resnet50.yaml"  # DLPerf v1.0 ResNet-50, 4n32g V100
SHEET = FIXTURES / "dle-pytorch-resnet50-a100-v100.csv"  # DeepLearningExamples, A100 and V100


def by_key(path: Path) -> dict[tuple, CaseSummary]:
    return {
        (c.framework, c.source, c.precision, c.topology.label, s.device_model): s
        for s in imported_summaries(path)
        for c in [s.case]
    }


def test_dlperf_table_keeps_the_published_speedup_and_derives_the_efficiency() -> None:
    summaries = by_key(DLPERF)
    assert len(summaries) == 13
    oneflow = summaries[("oneflow", "oneflow-benchmark", "fp32", "4n32g", "NVIDIA V100-SXM2-16GB")]
    assert oneflow.stats.median == 12411.97 and oneflow.stats.repeats == 1
    assert oneflow.published_by == "DLPerf v1.0" and oneflow.speedup == 31.21
    assert oneflow.efficiency == 0.9753125  # 31.21 / 32
    paddle_amp = summaries[("paddle", "paddlecv", "amp", "4n32g", "NVIDIA V100-SXM2-16GB")]
    assert paddle_amp.batch_size == 224 and paddle_amp.efficiency == 0.31875  # 10.2 / 32
    assert oneflow.hardware == "8 x NVIDIA V100-SXM2-16GB"


def test_dlperf_report_median_rows_across_series(tmp_path: Path) -> None:
    out = tmp_path / "report"
    assert main(["import", str(DLPERF), "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    fp32 = text.split("### ResNet-50 v1.5, FP32, bsz=128 per device")[1].split("###")[0]
    # FP32 speedups 26.25 26.50 28.67 28.75 29.27 29.72 31.21: median 28.75, 28.75/32 = 89.84%
    assert "| median (7 series)" in fp32
    median_row = next(line for line in fp32.splitlines() if "median (7 series)" in line)
    assert [c.strip() for c in median_row.split("|")][4:8] == ["32", "", "28.75", "89.84%"]
    geomean_row = next(line for line in fp32.splitlines() if "geometric mean (7" in line)
    # (26.25 x 26.50 x 28.67 x 28.75 x 29.27 x 29.72 x 31.21) ** (1/7) = 28.5798...
    assert [c.strip() for c in geomean_row.split("|")][6:8] == ["28.58", "89.31%"]
    # every row says who published it; a published figure shows no CV
    rows = [line for line in fp32.splitlines() if line.startswith("| ") and "DLPerf v1.0" in line]
    assert len(rows) == 7 and all(line.rstrip().endswith("| -    |") for line in rows)
    summary = text.split("## Summary")[1].split("## Detail")[0]
    oneflow = next(line for line in summary.splitlines() if "OneFlow" in line)
    assert "12411.97 @4n32g" in oneflow and "31.21" in oneflow and "33141.02 @4n32g" in oneflow
    data = json.loads((out / "report.json").read_text())
    assert {row["reported_by_source"] for row in data} == {False}
    assert {row["published_by"] for row in data} == {"DLPerf v1.0"}
    assert {row["hardware"] for row in data} == {"8 x NVIDIA V100-SXM2-16GB"}
    assert "- published by DLPerf v1.0: figures as published (https://github.com/" in text


def test_a_sheet_of_two_gpu_types_derives_speedups_per_device() -> None:
    summaries = by_key(SHEET)
    a100 = "NVIDIA A100-SXM4-80GB"
    v100 = "NVIDIA V100-SXM2-16GB"
    fp32_8 = summaries[("pytorch", "deeplearningexamples", "fp32", "1n8g", a100)]
    assert fp32_8.speedup == 7248 / 938 and fp32_8.efficiency == 7248 / 938 / 8
    amp_8 = summaries[("pytorch", "deeplearningexamples", "amp", "1n8g", v100)]
    assert amp_8.speedup == 8322 / 1200 == 6.935
    assert amp_8.efficiency == 6.935 / 8
    # each device's speedup against its own 1n1g, never the other's
    amp_a100 = summaries[("pytorch", "deeplearningexamples", "amp", "1n8g", a100)]
    assert amp_a100.speedup == 16621 / 2470
    assert amp_a100.machine == "DGX A100" and amp_8.machine == "DGX-1"


def test_factor_device_medians_over_the_sheet(tmp_path: Path) -> None:
    side = load_side(str(SHEET), tmp_path, tmp_path)
    data, text = factor_report(
        [side], "device", "V100", "A100", where=["precision=amp"], by="topology"
    )
    ratios = {p["a_case"].split("/")[2]: p["ratio"] for p in data["pairs"]}
    assert ratios == {"1n1g": 2470 / 1200, "1n8g": 16621 / 8322}
    assert data["median_ratio"] == (2470 / 1200 + 16621 / 8322) / 2  # 2.0278
    assert f"{data['median_ratio']:.4f}" == "2.0278"
    assert [(g["value"], g["median_ratio"]) for g in data["groups"]] == [
        ("1n1g", 2470 / 1200),
        ("1n8g", 16621 / 8322),
    ]
    assert "| median topology=1n1g" in text and "2.0583" in text and "1.9972" in text
    # FP32 ran another batch on each GPU (256 vs 112): no pair, not a mixed ratio
    empty, _text = factor_report([side], "device", "V100", "A100", where=["precision=fp32"])
    assert empty["pairs"] == []


def test_factor_of_speedups_and_efficiencies(tmp_path: Path) -> None:
    side = load_side(str(SHEET), tmp_path, tmp_path)
    where = ["precision=amp", "topology=1n8g"]
    speedups, _ = factor_report([side], "machine", "DGX-1", "DGX A100", where, "speedup")
    (pair,) = speedups["pairs"]
    assert pair["ratio"] == (16621 / 2470) / (8322 / 1200)  # 0.97032
    assert f"{pair['ratio']:.4f}" == "0.9703"
    efficiencies, text = factor_report([side], "gpu", "V100", "A100", where, "efficiency")
    (pair,) = efficiencies["pairs"]
    assert pair["ratio"] == pytest.approx((16621 / 2470 / 8) / (8322 / 1200 / 8), rel=1e-15)
    assert "V100 efficiency" in text and "86.69%" in text  # 6.935 / 8


def test_factor_source_over_the_dlperf_table(tmp_path: Path) -> None:
    side = load_side(str(DLPERF), tmp_path, tmp_path)
    args = ("source", "pytorch-examples", "deeplearningexamples")
    where = ["framework=pytorch", "precision=fp32"]
    throughput, _ = factor_report([side], *args, where=where)
    assert [p["ratio"] for p in throughput["pairs"]] == [10917.09 / 10021.29]
    speedup, _ = factor_report([side], *args, where=where, metric="speedup")
    assert [p["ratio"] for p in speedup["pairs"]] == [29.72 / 28.75]
    # every framework with both sources at FP32: pytorch and tensorflow (tensorflow-models vs NGC)
    tf, _ = factor_report([side], "source", "tensorflow-models", "deeplearningexamples")
    assert [p["ratio"] for p in tf["pairs"]] == [9514.64 / 9418.44]
    medians = statistics.median([10917.09 / 10021.29])
    assert throughput["median_ratio"] == medians


def test_bad_import_files_name_the_file_and_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    lines = SHEET.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if ",938," in line)
    bad.write_text("\n".join([*lines[:first], lines[first].replace(",938,", ",fast,")]) + "\n")
    with pytest.raises(ConfigError) as error:
        load_import(bad)
    assert str(error.value).startswith(f"{bad}: row 1.throughput:")
    no_schema = tmp_path / "none.csv"
    no_schema.write_text("\n".join(line for line in lines if "schema" not in line) + "\n")
    with pytest.raises(ConfigError, match="no '# schema: 1' line"):
        load_import(no_schema)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(DLPERF.read_text().replace("framework: oneflow,", "framework: caffe,", 1))
    with pytest.raises(ConfigError, match=r"figures\[0\]\.framework: 'caffe' is not a framework"):
        load_import(wrong)
    uneven = tmp_path / "uneven.yaml"
    uneven.write_text(DLPERF.read_text().replace("devices: 32", "devices: 30", 1))
    with pytest.raises(ConfigError, match=r"figures\[0\].*multiple of nodes"):
        load_import(uneven)
    assert main(["import", str(wrong)]) == 2


def test_report_takes_an_import_file_beside_sessions(tmp_path: Path) -> None:
    out = tmp_path / "both"
    assert main(["report", str(SHEET), str(DLPERF), "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    table = text.split("### ResNet-50 v1.5, AMP, bsz=256 per device")[1].split("###")[0]
    # both publishers in one table, each row marked; the median row is DLPerf's 4n32g only
    assert "published by NVIDIA DeepLearningExamples" in table
    assert "median (4 series)" in table  # DLPerf's four 4n32g AMP series only
    with pytest.raises(SystemExit, match="neither a dlperf session folder"):
        main(["report", str(tmp_path / "nothing.txt")])


def test_compare_keeps_each_device_model_a_case_of_its_own(tmp_path: Path) -> None:
    from driver.analysis.compare import compare_sides

    side = load_side(str(SHEET), tmp_path, tmp_path)
    assert side.kind == "published" and len(side.cases) == 8
    amp = "resnet50/pytorch/1n8g/bs256/amp/synthetic/src-deeplearningexamples"
    suffix = " (published by NVIDIA DeepLearningExamples)"
    a100 = side.cases[f"{amp} on NVIDIA A100-SXM4-80GB{suffix}"]
    v100 = side.cases[f"{amp} on NVIDIA V100-SXM2-16GB{suffix}"]
    assert (a100.throughputs, v100.throughputs) == ([16621.0], [8322.0])
    rows, text = compare_sides(side, side)
    assert len(rows) == 8 and {r["ratio"] for r in rows} == {1.0}
    assert "published figures (one figure per case, no repeats)" in text


# --------------------------------------------------------------------------------------------
# Implausible figures: each refused naming the file, the row or figure, the field and the fix.


def edited(source: Path, tmp_path: Path, old: str, new: str, name: str) -> Path:
    """``source`` with its first ``old`` replaced (asserting it was there), as ``name``."""
    text = source.read_text()
    assert old in text
    path = tmp_path / name
    path.write_text(text.replace(old, new, 1))
    return path


def sheet_with(tmp_path: Path, old: str, new: str, name: str = "edited.csv") -> Path:
    return edited(SHEET, tmp_path, old, new, name)


def table_with(tmp_path: Path, old: str, new: str, name: str = "edited.yaml") -> Path:
    return edited(DLPERF, tmp_path, old, new, name)


def refusal(path: Path) -> str:
    with pytest.raises(ConfigError) as error:
        load_import(path)
    assert str(error.value).startswith(f"{path}: ")
    return str(error.value)


@pytest.mark.parametrize("value", ["1e308", "1e-300", "0.0009", "1000001"])
def test_a_throughput_outside_the_plausible_range_per_device_is_refused(
    tmp_path: Path, value: str
) -> None:
    # row 1 is the A100's 1n1g figure: one device, so the figure is the per-device value
    message = refusal(sheet_with(tmp_path, ",938,", f",{value},"))
    assert message.startswith(f"{tmp_path / 'edited.csv'}: row 1.throughput: ")
    assert "per device, outside the plausible 0.001 to 1e+06" in message
    assert "give the total samples/s of all devices" in message


def test_the_throughput_bounds_are_per_device(tmp_path: Path) -> None:
    from driver.model.figures import MAX_SAMPLES_PER_S_PER_DEVICE

    # 32 devices x 1e6 is plausible in total; one sample/s more is not
    total = 32 * MAX_SAMPLES_PER_S_PER_DEVICE
    good = table_with(tmp_path, "throughput: 12411.97, speedup: 31.21", f"throughput: {total:.1f}")
    assert load_import(good).figures[0].throughput == total
    bad = table_with(tmp_path, "throughput: 12411.97", f"throughput: {total + 32:.1f}", "b.yaml")
    assert "figures[0].throughput: 3.2e+07 samples/s over 32 device(s)" in refusal(bad)


def test_an_efficiency_above_100_percent_is_refused_unless_marked_superlinear(
    tmp_path: Path,
) -> None:
    # 93800 on 8 A100s against row 1's 938 on one: speedup 100, efficiency 1250%
    derived = sheet_with(tmp_path, ",7248,", ",93800,")
    message = refusal(derived)
    assert message.startswith(f"{derived}: row 2.throughput: an efficiency of 1250.00%")
    assert "against the 1-device figure of row 1 (938 samples/s)" in message
    assert "set superlinear: true with a note" in message
    # the publisher's own speedup (no 1n1g figure in the file): 400 on 32 devices
    printed = table_with(tmp_path, "speedup: 31.21", "speedup: 400")
    assert "figures[0].speedup: an efficiency of 1250.00%" in refusal(printed)
    # a little above 100% is rounding of two figures, not a typo: 7.6 / 8 x 938... 101%
    rounding = sheet_with(tmp_path, ",7248,", ",7579,", "rounding.csv")  # 7579 / 938 / 8 = 1.01
    assert load_import(rounding).figures[1].throughput == 7579
    # marked by the publisher's own figure: accepted, and a mark needs its note
    marked = table_with(
        tmp_path, "speedup: 31.21}", "speedup: 33, superlinear: true, note: as printed}", "m.yaml"
    )
    summaries = {s.case.framework: s for s in imported_summaries(marked) if s.speedup == 33}
    assert summaries["oneflow"].efficiency == 33 / 32
    unexplained = table_with(tmp_path, "speedup: 31.21}", "speedup: 33, superlinear: true}")
    assert "figures[0].note: superlinear: true needs a note" in refusal(unexplained)


def test_the_same_case_twice_for_one_publisher_is_refused(tmp_path: Path) -> None:
    lines = SHEET.read_text().splitlines()
    twice = tmp_path / "twice.csv"
    twice.write_text("\n".join([*lines, lines[-1].replace(",8322,", ",8000,")]) + "\n")
    message = refusal(twice)
    assert message.startswith(f"{twice}: row 9: the same case as row 8 (")
    assert "on NVIDIA V100-SXM2-16GB, published by NVIDIA DeepLearningExamples" in message
    # another spelling of the same framework and source is the same case
    spelled = tmp_path / "spelled.yaml"
    first = DLPERF.read_text().splitlines()[-13]
    assert "framework: oneflow" in first
    other = first.replace("framework: oneflow", "framework: OneFlow").replace(
        "OneFlow-Benchmark", "oneflow benchmark"
    )
    spelled.write_text(DLPERF.read_text() + other + "\n")
    assert "figures[13]: the same case as figures[0]" in refusal(spelled)
    # the same case published by someone else is another series: accepted
    mirrored = tmp_path / "mirrored.yaml"
    mirrored.write_text(
        DLPERF.read_text() + first.replace("}", ", publisher: a mirror of DLPerf}") + "\n"
    )
    assert len(load_import(mirrored).figures) == 14


def test_an_unknown_model_is_refused_with_the_known_list(tmp_path: Path) -> None:
    path = table_with(tmp_path, "model: resnet50", "model: gpt2")
    assert refusal(path) == (
        f"{path}: figures[0].model: 'gpt2' is not a model the kit knows; use the kit's model "
        "key: resnet50, inception3, bert, llama"
    )
    close = sheet_with(tmp_path, ",resnet50,", ",resnet5,")
    assert "row 1.model: 'resnet5' is not a model the kit knows (did you mean 'resnet50'?)" in (
        refusal(close)
    )


def test_a_figure_s_variant_is_its_case_s_variant(tmp_path: Path) -> None:
    """``variant`` names the matrix suite's variant a figure pairs with (DLPerf's DALI rows):
    it is part of the case id, so two variants of one case are two figures."""
    dali = table_with(tmp_path, "model: resnet50,", "model: resnet50, variant: dali,", "dali.yaml")
    variants = {s.case.variant for s in imported_summaries(dali)}
    assert variants == {"dali", "default"}
    (figure,) = [s for s in imported_summaries(dali) if s.case.variant == "dali"]
    assert figure.case_id.endswith("/dali/src-oneflow-benchmark")
    bad = table_with(tmp_path, "model: resnet50,", "model: resnet50, variant: 'dali cpu',")
    assert refusal(bad).startswith(f"{bad}: figures[0].variant: 'dali cpu' is not a variant name")


def test_a_duplicated_csv_column_is_refused_naming_it(tmp_path: Path) -> None:
    path = sheet_with(tmp_path, "machine,publisher", "machine,machine")
    assert refusal(path) == (
        f"{path}: header, column 13: 'machine' is also column 12: a field may be one column; "
        "remove one"
    )
    spaced = sheet_with(tmp_path, ",throughput,", ", throughput , throughput,", "spaced.csv")
    assert "header, column 12: 'throughput' is also column 11" in refusal(spaced)
    unnamed = sheet_with(tmp_path, ",machine,", ",,", "unnamed.csv")
    assert "header, column 12: has no name" in refusal(unnamed)


CONTROL_CHARACTERS = {"newline": "\n", "tab": "\t", "CR": "\r", "VT": "\x0b", "NEL": "\x85",
                      "RLO": "\u202e", "ZWSP": "\u200b", "LS": "\u2028"}  # fmt: skip


@pytest.mark.parametrize("char", CONTROL_CHARACTERS.values(), ids=CONTROL_CHARACTERS.keys())
@pytest.mark.parametrize(
    "field, old", [("source", "DeepLearningExamples"), ("hardware", "NVIDIA A100-SXM4-80GB"),
                   ("machine", "DGX A100"), ("publisher", "NVIDIA DeepLearningExamples")]
)  # fmt: skip
def test_a_control_character_in_a_csv_name_is_refused(
    tmp_path: Path, field: str, old: str, char: str
) -> None:
    # quoted, so the CSV reader keeps it inside the cell: it would reach a table
    path = sheet_with(tmp_path, f",{old},", f',"{old[:4]}{char}{old[4:]}",')
    message = refusal(path)
    assert message.startswith(f"{path}: row 1.{field}: holds ")
    assert message.endswith("; remove it")


@pytest.mark.parametrize("char", CONTROL_CHARACTERS.values(), ids=CONTROL_CHARACTERS.keys())
@pytest.mark.parametrize("field", ["source", "hardware", "machine", "publisher", "note", "url"])
def test_a_control_character_in_a_yaml_name_is_refused(
    tmp_path: Path, field: str, char: str
) -> None:
    escaped = char.encode("unicode_escape").decode()
    value = f"https://example.org/a{escaped}b" if field == "url" else f"DLPerf{escaped} v1.0"
    if field in ("source", "hardware"):  # given in each figure: the first figure's is replaced
        given = {"source": "OneFlow-Benchmark", "hardware": "NVIDIA V100-SXM2-16GB"}[field]
        path = table_with(tmp_path, f"{field}: {given}", f'{field}: "{value}"')
    else:  # a file-level default: the first figure's own value overrides it
        path = table_with(tmp_path, "speedup: 31.21}", f'speedup: 31.21, {field}: "{value}"}}')
    message = refusal(path)
    if field == "url" and char.isspace():  # a URL has no white space at all
        assert message.startswith(f"{path}: figures[0].url: must be an http(s) URL")
    else:
        assert message.startswith(f"{path}: figures[0].{field}: holds U+")
        assert message.endswith("; remove it")


@pytest.mark.parametrize(
    ("field", "limit"), [("hardware", 200), ("publisher", 200), ("note", 2000), ("url", 2048)]
)
def test_text_longer_than_its_bound_is_refused(tmp_path: Path, field: str, limit: int) -> None:
    value = "https://example.org/" + "a" * 10_000 if field == "url" else "x" * 10_000
    if field == "hardware":
        path = table_with(tmp_path, "hardware: NVIDIA V100-SXM2-16GB", f"hardware: {value}")
    else:
        path = table_with(tmp_path, "speedup: 31.21}", f"speedup: 31.21, {field}: {value}}}")
    message = refusal(path)
    assert f"figures[0].{field}: is {len(value)} characters long; at most {limit}" in message


def test_a_csv_saved_by_a_spreadsheet_with_a_byte_order_mark_reads(tmp_path: Path) -> None:
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbf" + SHEET.read_bytes().replace(b"\n", b"\r\n"))
    assert load_import(path) == load_import(SHEET)


def _figures_file(path: Path, figures: list[str]) -> Path:
    head = ["schema: 1", "publisher: P", "url: https://example.org/figures", "figures:"]
    path.write_text("\n".join(head + [f"  - {{{f}}}" for f in figures]) + "\n")
    return path


def _figure(hardware: str, devices: int = 1, batch: int = 8) -> str:
    return (
        f"framework: pytorch, model: resnet50, hardware: {hardware}, nodes: 1, "
        f"devices: {devices}, batch: {batch}, precision: fp32, throughput: {100 * devices}"
    )


def test_a_figure_on_unknown_hardware_is_warned_of_and_marked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _figures_file(
        tmp_path / "f.yaml", [_figure("Quantum TPU 9000"), _figure("Tesla V100-SXM2-16GB")]
    )
    out = tmp_path / "report"
    assert main(["import", str(path), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning:" in err and "'Quantum TPU 9000' (figures[0]" in err
    assert "'Tesla V100-SXM2-16GB' (figures" not in err  # a known device: no warning
    rows = [line for line in (out / "report.md").read_text().splitlines() if "| 100.00" in line]
    marked = [line for line in rows if "?hw" in line]
    assert marked and all("Quantum TPU 9000" in line for line in marked)
    assert any("Tesla V100-SXM2-16GB" in line for line in rows)
    assert (
        "?hw: published on hardware that names no device model" in (out / "report.md").read_text()
    )


@pytest.mark.parametrize(
    "hardware",
    [
        "NVIDIA H100 80GB HBM3",
        "Tesla V100-SXM2-16GB",
        "A100-SXM4-40GB",
        "AMD Instinct MI250X",
        "TPU v4",
        "AMD EPYC 2c avx2",
        "NVIDIA GeForce RTX 4090",
    ],
)
def test_common_device_models_are_known(hardware: str) -> None:
    from driver.release.imported import known_device

    assert known_device(hardware)


def test_a_fifo_as_import_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    import os
    import threading

    fifo = tmp_path / "figures.yaml"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def load() -> None:
        try:
            load_import(fifo)
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            outcome.append(error)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # unblock the reader so the thread ends, then fail
        with open(fifo, "w") as writer:
            writer.write("")
        pytest.fail("load_import blocked reading a FIFO")
    assert isinstance(outcome[0], ConfigError) and "FIFO" in str(outcome[0])


@pytest.mark.timing  # times a ratio of two runs: alone, after the rest
def test_import_time_grows_linearly_with_the_figures(tmp_path: Path) -> None:
    """Time of n and 5n figures (CPU time of this process, the least of two tries, so that
    other processes on a shared machine weigh little): about 5x where it is linear; 25x where it
    is quadratic, as it was (an index of baselines, not a search per figure)."""
    import gc
    import time

    def cost(n: int) -> float:
        figures = [_figure("H100", devices=2 ** (i % 4), batch=8 + i // 4) for i in range(n)]
        path = _figures_file(tmp_path / f"{n}.yaml", figures)
        tries = []
        # No cyclic GC while timed: in the whole suite this process holds a large heap, which
        # each full collection scans (beside 3 million objects: 6.6x with it, 5.4x without;
        # 10.6x in a CI run).
        gc.collect()
        gc.disable()
        try:
            for _ in range(2):
                start = time.process_time()
                assert len(imported_summaries(path)) == n
                tries.append(time.process_time() - start)
        finally:
            gc.enable()
        return min(tries)

    small, large = cost(300), cost(1500)
    assert large / small < 9, f"300 figures: {small:.2f} s, 1500: {large:.2f} s"
