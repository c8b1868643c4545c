"""DLPerf's published tables as the kit's data (``published/dlperf-v1.0/``).

Every row of every result table of DLPerf's v1.0 report and of its per-framework READMEs is one
figure of an import file per source, in the kit's words (its source keys, the dataset and variant
DLPerf ran), cited by commit, file and line. Where a snapshot of github:Oneflow-Inc/DLPerf is
present (the project's read-only fetch tool; not in CI) the files are rebuilt from its tables
at the pinned commit and must equal the committed ones. A measured case of the kit's matrices
pairs with DLPerf's row of the same case (``dlperf factor --factor device``), and a plain
``dlperf import`` of the data writes nothing beside it.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from driver.analysis.compare import load_side, side_of_summaries
from driver.analysis.factor import factor_pairs
from driver.core.matrix import load_matrix
from driver.core.summary import CaseSummary
from driver.frontend.cli import main
from driver.model.measure import case_stats
from driver.plugins import load_all
from driver.release.imported import figure_summaries, load_import
from driver.sources.upstream import SPECS
from tests import dlperf_tables
from tests.dlperf_tables import COMMIT, OUT, REPOSITORY

load_all()

MIRROR = Path("/work/.mirror/Oneflow-Inc+DLPerf/repo")
FILES = sorted(OUT.glob("*.yaml"))
H100 = "NVIDIA H100 80GB HBM3"
URL = re.compile(rf"^{re.escape(REPOSITORY)}/blob/{COMMIT}/(?P<path>[\w./-]+\.md)#L(?P<line>\d+)$")
# (source, model, precision, batch, dataset, xla, variant) of DLPerf's rows that the kit's
# matrices also hold, at every one of their topologies (docs/upstream.md says why the others
# do not pair: DLPerf ran real data through DALI, on the CPU for NGC PyTorch, with a patched
# dali.py for NGC MXNet, at batch 224 for NGC TF1 AMP).
PAIRED = {
    ("gluon-nlp", "bert", "amp", 64, "real", False, "default"),
    ("gluon-nlp", "bert", "fp32", 32, "real", False, "default"),
    ("ngc-pytorch", "bert", "amp", 64, "real", False, "default"),
    ("ngc-pytorch", "bert", "fp32", 32, "real", False, "default"),
    ("ngc-tf1", "bert", "amp", 64, "real", False, "default"),
    ("ngc-tf1", "bert", "amp", 64, "real", True, "default"),
    ("ngc-tf1", "bert", "fp32", 32, "real", False, "default"),
    ("oneflow-benchmark", "bert", "amp", 64, "real", False, "default"),
    ("oneflow-benchmark", "bert", "fp32", 32, "real", False, "default"),
    ("oneflow-benchmark", "bert", "fp32", 96, "real", False, "default"),
    ("oneflow-benchmark", "resnet50", "fp32", 128, "real", False, "default"),
    ("paddle-models", "bert", "amp", 64, "real", False, "default"),
    ("paddle-models", "bert", "fp32", 32, "real", False, "default"),
    ("paddle-models", "resnet50", "amp", 224, "real", False, "nodali"),
    ("paddle-models", "resnet50", "fp32", 128, "real", False, "nodali"),
    ("pytorch-examples", "resnet50", "fp32", 128, "real", False, "default"),
    ("tensorflow-models", "bert", "amp", 64, "real", False, "default"),
    ("tensorflow-models", "bert", "fp32", 32, "real", False, "default"),
    ("tensorflow-models", "resnet50", "amp", 256, "real", False, "default"),
    ("tensorflow-models", "resnet50", "fp32", 128, "real", False, "default"),
}


def group(summary: CaseSummary) -> tuple:
    c = summary.case
    return (c.source, c.model, c.precision, int(c.batch_size), c.dataset, c.xla, c.variant)


def test_one_file_per_kit_source_every_figure_cited_at_the_pin() -> None:
    names = {path.stem for path in FILES}
    assert names <= {*SPECS, "dlperf"} and len(names) == 9, names
    for path in FILES:
        loaded = load_import(path)  # the import file schema, strictly
        for figure in loaded.figures:
            assert figure.source == path.stem, (path.name, figure)
            assert figure.publisher == "DLPerf v1.0"
            assert figure.hardware == "Tesla V100-SXM2-16GB"
            assert URL.match(figure.url), figure.url
            assert figure.dataset == "real" or "synthetic data" in figure.note, figure


def test_the_report_s_headline_rows_are_there_in_the_kit_s_words() -> None:
    """A few cells of the v1.0 report, read by hand: the keys the kit pairs by, not the names
    DLPerf printed ("DeepLearningExamples", "PaddleCV") nor a dataset it did not use."""
    every = {
        (*group(s), s.case.topology.label): s for path in FILES for s in figure_summaries(path)
    }
    expected = {
        ("ngc-pytorch", "resnet50", "fp32", 128, "real", False, "dali-cpu", "4n32g"): 10917.09,
        ("pytorch-examples", "resnet50", "fp32", 128, "real", False, "default", "4n32g"): 10021.29,
        ("ngc-tf1", "resnet50", "amp", 224, "real", True, "dali", "4n32g"): 29171.69,
        ("paddle-models", "resnet50", "amp", 196, "real", False, "dali", "4n32g"): 11617.57,
        ("oneflow-benchmark", "bert", "amp", 160, "real", False, "noclip", "4n32g"): 17210.63,
        ("gluon-nlp", "bert", "fp32", 64, "real", False, "default", "4n32g"): 4340.89,
        ("dlperf", "resnet50", "fp32", 128, "real", False, "default", "4n32g"): 9579.74,
    }
    assert {key: every[key].stats.median for key in expected} == expected
    assert not any("deeplearningexamples" in key[0] or "paddlecv" in key[0] for key in every)


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no snapshot of Oneflow-Inc/DLPerf here")
def test_the_files_are_dlperf_s_tables_at_the_pinned_commit() -> None:
    """Rebuilt from the snapshot: every result table of the cited files mapped or excluded with
    a reason, every report cell equal to its README's figure, the files equal to these."""
    built = dlperf_tables.files(MIRROR)
    assert sorted(built) == [path.name for path in FILES]
    for path in FILES:
        assert path.read_text() == built[path.name], f"{path}: rebuild it (tests/dlperf_tables.py)"


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no snapshot of Oneflow-Inc/DLPerf here")
def test_each_figure_is_the_row_its_url_names() -> None:
    shown: dict[str, list[str]] = {}
    for path in FILES:
        for figure in load_import(path).figures:
            match = URL.match(figure.url)
            assert match is not None
            if match["path"] not in shown:
                shown[match["path"]] = dlperf_tables.show(MIRROR, match["path"]).split("\n")
            row = shown[match["path"]][int(match["line"]) - 1]
            cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
            assert int(cells[0]) == figure.nodes, (figure.url, row)
            numbers = {float(cell) for cell in cells if re.fullmatch(r"[\d.]+", cell)}
            assert float(figure.throughput) in numbers, (figure.url, row)


def kit_summaries() -> list[CaseSummary]:
    """Every case of the kit's upstream matrices as if measured on an H100 node (the numbers are
    made up; the cases, their keys and the factor code are the kit's)."""
    out = []
    for spec in SPECS.values():
        for case in load_matrix(spec.matrix_file).cases:
            rate = 1000.0 * case.topology.world_size
            out.append(CaseSummary(
                case=case, stats=case_stats([rate]), batch_size=int(case.batch_size),
                speedup=None, efficiency=None, throughputs=[rate],
                devices=[H100] * case.topology.world_size,
            ))  # fmt: skip
    return out


def test_a_kit_run_pairs_with_dlperf_s_row_of_the_same_case(tmp_path: Path) -> None:
    mine = side_of_summaries("h100", "session", kit_summaries())
    theirs = [load_side(str(path), tmp_path, tmp_path) for path in FILES]
    pairs = factor_pairs([mine, *theirs], "device", "V100", "H100")
    assert all(a.published_by == "DLPerf v1.0" and not b.published_by for a, b, _ in pairs)
    paired = {
        (a.fields["source"], a.fields["model"], a.fields["precision"], a.fields["batch"],
         a.fields["dataset"], a.fields["xla"], a.fields["variant"], a.fields["topology"])
        for a, _b, _ratio in pairs
    }  # fmt: skip
    by_group: dict[tuple, set[str]] = {}
    for *key, topology in paired:
        by_group.setdefault(tuple(key), set()).add(topology)
    expected = {
        (s, m, p, b, d, "on" if x else "off", v) for s, m, p, b, d, x, v in PAIRED
    }  # the view's spelling of XLA
    assert set(by_group) == expected
    assert all(tops == {"1n1g", "1n8g", "2n16g", "4n32g"} for tops in by_group.values())
    oneflow = next(
        ratio for a, b, ratio in pairs
        if a.fields["source"] == "oneflow-benchmark" and a.fields["model"] == "resnet50"
        and a.fields["topology"] == "4n32g"
    )  # fmt: skip
    assert oneflow == 32000.0 / 12411.97


def test_a_plain_import_of_the_published_data_writes_nothing_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import driver.frontend.commands.import_figures as report_cli

    before = {path: hashlib.sha256(path.read_bytes()).hexdigest() for path in OUT.rglob("*")
              if path.is_file()}  # fmt: skip
    monkeypatch.setattr(report_cli, "RESULTS", tmp_path / "results")
    assert main(["import", str(OUT / "pytorch-examples.yaml")]) == 0
    after = {path: hashlib.sha256(path.read_bytes()).hexdigest() for path in OUT.rglob("*")
             if path.is_file()}  # fmt: skip
    assert after == before
    report = tmp_path / "results" / "imports" / "pytorch-examples-report" / "report.md"
    assert "published by DLPerf v1.0" in report.read_text()
    assert str(report.parent) in capsys.readouterr().err
