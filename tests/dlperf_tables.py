"""DLPerf's published result tables, read from its repository at a commit, as import files.

DLPerf (github:Oneflow-Inc/DLPerf) published its figures as Markdown tables: the v1.0 report
(one wide table per model, precision and batch, a column per framework and source) and one
README per framework and source (a table per configuration, with its speedups). This module
maps every result table of those files to the kit's vocabulary (source key, dataset, XLA,
variant) in :data:`TABLES`, reads the tables at :data:`COMMIT` and writes one import file per
source into ``published/dlperf-v1.0/``. Where the report and a README give the same case, the
two must agree; the figure cites the README (with its speedup) and names the report's line.
A table of a cited file that is neither mapped nor excluded with a reason (:data:`EXCLUDED`)
stops the build: nothing published is left out silently.

    python -m tests.dlperf_tables /work/.mirror/Oneflow-Inc+DLPerf/repo   # rewrites the files

``tests/test_upstream_published.py`` rebuilds the files the same way where a snapshot of the
repository is present and requires them to equal the committed ones.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

COMMIT = "c89430bac64f64caabb0445ff7eb80175641454c"
REPOSITORY = "https://github.com/Oneflow-Inc/DLPerf"
OUT = Path(__file__).resolve().parents[1] / "published" / "dlperf-v1.0"
PUBLISHER = "DLPerf v1.0"
HARDWARE = "Tesla V100-SXM2-16GB"
MACHINE = "DLPerf: 4 nodes x 8 V100-SXM2-16GB, 100 Gb/s EDR InfiniBand"
REPORT = "reports/dlperf_benchmark_test_report_v1.md"


@dataclass(frozen=True)
class Cells:
    """What one table (or one column of a report table) holds, in the kit's words."""

    source: str  # the kit's source key; "dlperf" where the kit has no source of that code
    framework: str
    model: str
    precision: str
    batch: int | None  # None: the table's batch_size_per_device column
    dataset: str = "real"
    xla: bool = False
    variant: str = "default"
    note: str = ""


def _rn50(source: str, framework: str, precision: str, batch: int | None, **more: Any) -> Cells:
    return Cells(source, framework, "resnet50", precision, batch, **more)


def _bert(source: str, framework: str, precision: str, batch: int | None, **more: Any) -> Cells:
    return Cells(source, framework, "bert", precision, batch, **more)


ONEFLOW_RN50 = (
    "OneFlow/Classification/ConvNets/resnet50v1.5/reports/resnet50_oneflow_v0.2_report_1009.md"
)
ONEFLOW_BERT = "OneFlow/LanguageModeling/BERT/reports/bert_base_oneflow_v0.2_report_1009.md"
NGC_MXNET = "NVIDIADeepLearningExamples/MxNet/Classification/RN50v1.5/README.md"
NGC_TF_RN50 = "NVIDIADeepLearningExamples/TensorFlow/Classification/ConvNets/resnet50v1.5/README.md"
NGC_TF_BERT = "NVIDIADeepLearningExamples/TensorFlow/LanguageModeling/BERT/README.md"
NGC_PT_RN50 = "NVIDIADeepLearningExamples/PyTorch/resnet50v1.5/README.md"
NGC_PT_BERT = "NVIDIADeepLearningExamples/PyTorch/BERT/README.md"
PT_EXAMPLES = "PyTorch/resnet50v1.5/README.md"
GLUON_CV = "MxNet/Classification/RN50v1b/README.md"
GLUON_NLP = "MxNet/BERT/README.md"
TF2_RN50 = "TensorFlow/resnet50v1.5/README.md"
TF2_BERT = "TensorFlow/bert/README.md"
PADDLE_RN50 = "PaddlePaddle/resnet50v1.5/README.md"
PADDLE_BERT = "PaddlePaddle/bert/README.md"

OF = ("oneflow-benchmark", "oneflow")
OF_DATA = "OneFlow 0.2.0; OFRecord ImageNet, decoded on the GPU (scripts/rn50_train.sh)"
NOCLIP = "no clip_by_global_norm in Adam (DLPerf's 'W/O clip' runs)"
MX = ("ngc-mxnet", "mxnet")
MX_DALI = (
    "RecordIO ImageNet through --data-backend dali-gpu; DLPerf patched dali.py for the image's "
    "DALI 0.19 (ImageDecoder for nvJPEGDecoder, --dali-fuse-decoder 0; its README)"
)
TF1 = ("ngc-tf1", "tensorflow")
TF1_DALI = "TFRecord ImageNet through DALI (USE_DALI=1 in every DLPerf run; its README)"
PT = ("ngc-pytorch", "pytorch")
PT_DALI = "raw ImageNet JPEGs through --data-backend dali-cpu (DLPerf's scripts)"
STATIC = "static loss scale (DLPerf's second table of the same runs with dynamic loss scale)"
PEX = ("pytorch-examples", "pytorch")
GNLP = ("gluon-nlp", "mxnet")
TFM = ("tensorflow-models", "tensorflow")
TFM_RN50 = (
    "official/vision/image_classification/classifier_trainer.py with DLPerf's config files "
    "(scripts/*.yaml); TFRecords of 640512 ImageNet images"
)
PD = ("paddle-models", "paddle")

TABLES: dict[tuple[str, int], Cells | dict[int, Cells]] = {
    # OneFlow-Benchmark at OneFlow 0.2.0, the version of DLPerf's v1.0 report.
    (ONEFLOW_RN50, 54): _rn50(*OF, "amp", None, note=OF_DATA),
    (ONEFLOW_RN50, 65): _rn50(*OF, "fp32", None, note=OF_DATA),
    (ONEFLOW_BERT, 62): _bert(*OF, "amp", None),
    (ONEFLOW_BERT, 71): _bert(*OF, "amp", None),
    (ONEFLOW_BERT, 80): _bert(*OF, "amp", None),
    (ONEFLOW_BERT, 93): _bert(*OF, "amp", None, variant="noclip", note=NOCLIP),
    (ONEFLOW_BERT, 102): _bert(*OF, "amp", None, variant="noclip", note=NOCLIP),
    (ONEFLOW_BERT, 115): _bert(*OF, "fp32", None),
    (ONEFLOW_BERT, 124): _bert(*OF, "fp32", None),
    (ONEFLOW_BERT, 134): _bert(*OF, "fp32", None),
    (ONEFLOW_BERT, 147): _bert(*OF, "fp32", None, variant="noclip", note=NOCLIP),
    (ONEFLOW_BERT, 156): _bert(*OF, "fp32", None, variant="noclip", note=NOCLIP),
    # NGC MXNet 20.03: AMP is --dtype float16 without --amp (the report's column); with --amp
    # (dynamic loss scaling) is a table of its own.
    (NGC_MXNET, 294): _rn50(*MX, "fp32", 128, variant="dali", note=MX_DALI),
    (NGC_MXNET, 307): _rn50(
        *MX, "amp", 256, variant="dali-dynamic-loss-scale",
        note=MX_DALI + "; --dtype float16 with --amp (dynamic loss scaling)",
    ),  # fmt: skip
    (NGC_MXNET, 319): _rn50(
        *MX, "amp", 256, variant="dali", note=MX_DALI + "; --dtype float16 without --amp"
    ),
    # NGC TensorFlow 20.03-tf1: every run of the main tables used DALI; a later series compares
    # real data, DALI and synthetic data at 1 to 8 GPUs.
    (NGC_TF_RN50, 391): _rn50(*TF1, "fp32", 128, variant="dali", note=TF1_DALI),
    (NGC_TF_RN50, 403): _rn50(*TF1, "amp", 224, variant="dali", note=TF1_DALI),
    (NGC_TF_RN50, 413): _rn50(*TF1, "amp", 224, xla=True, variant="dali", note=TF1_DALI),
    (NGC_TF_RN50, 447): _rn50(
        *TF1, "amp", 224, xla=True, variant="nodali",
        note="TFRecord ImageNet without DALI (DLPerf's real vs synthetic data series)",
    ),  # fmt: skip
    (NGC_TF_RN50, 455): _rn50(
        *TF1, "amp", 224, xla=True, variant="dali-rerun",
        note="TFRecord ImageNet through DALI, a later run than the main table's (DLPerf's real "
        "vs synthetic data series)",
    ),  # fmt: skip
    (NGC_TF_RN50, 463): _rn50(
        *TF1, "amp", 224, dataset="synthetic", xla=True,
        note="synthetic data (DLPerf's real vs synthetic data series)",
    ),  # fmt: skip
    (NGC_TF_BERT, 375): _bert(*TF1, "fp32", 32),
    (NGC_TF_BERT, 385): _bert(*TF1, "fp32", 48),
    (NGC_TF_BERT, 399): _bert(*TF1, "amp", 64),
    (NGC_TF_BERT, 409): _bert(*TF1, "amp", 64, xla=True),
    (NGC_TF_BERT, 419): _bert(*TF1, "amp", 96, xla=True),
    # NGC PyTorch 20.03: dynamic loss scale is the report's column.
    (NGC_PT_RN50, 486): _rn50(*PT, "fp32", None, variant="dali-cpu", note=PT_DALI),
    (NGC_PT_RN50, 504): _rn50(
        *PT, "amp", None, variant="dali-cpu", note=PT_DALI + "; dynamic loss scale"
    ),
    (NGC_PT_RN50, 516): _rn50(
        *PT, "amp", None, variant="dali-cpu-static-loss-scale", note=f"{PT_DALI}; {STATIC}"
    ),
    (NGC_PT_BERT, 368): _bert(*PT, "fp32", None),
    (NGC_PT_BERT, 378): _bert(*PT, "fp32", None),
    (NGC_PT_BERT, 394): _bert(*PT, "amp", None, note="dynamic loss scale"),
    (NGC_PT_BERT, 404): _bert(*PT, "amp", None, variant="static-loss-scale", note=STATIC),
    (NGC_PT_BERT, 416): _bert(*PT, "amp", None, note="dynamic loss scale"),
    (NGC_PT_BERT, 426): _bert(*PT, "amp", None, variant="static-loss-scale", note=STATIC),
    # pytorch/examples: -j 48 (the report's column) and -j 8, DataLoader or DLPerf's DALI
    # loader (CPU) added to main.py.
    (PT_EXAMPLES, 454): _rn50(*PEX, "fp32", None, variant="workers8", note="-j 8, DataLoader"),
    (PT_EXAMPLES, 464): _rn50(*PEX, "fp32", None, note="-j 48, DataLoader"),
    (PT_EXAMPLES, 478): _rn50(
        *PEX, "fp32", None, variant="dali-cpu-workers8",
        note="-j 8, DLPerf's DALI loader (CPU) added to main.py",
    ),  # fmt: skip
    (PT_EXAMPLES, 488): _rn50(
        *PEX, "fp32", None, variant="dali-cpu",
        note="-j 48, DLPerf's DALI loader (CPU) added to main.py",
    ),  # fmt: skip
    # gluon-cv's ResNet-50 v1b (DLPerf's MXNet column): the kit has no gluon-cv source, so the
    # figures sit beside the kit's own MXNet script (source dlperf).
    (GLUON_CV, 228): _rn50(
        "dlperf", "mxnet", "fp32", 128,
        note="gluon-cv train_horovod.py, ResNet-50 v1b, RecordIO ImageNet (the kit's own MXNet "
        "script is the nearest case)",
    ),  # fmt: skip
    (GLUON_CV, 241): _rn50(
        "dlperf", "mxnet", "amp", 256,
        note="gluon-cv train_horovod.py, ResNet-50 v1b, float16, RecordIO ImageNet (the kit's "
        "own MXNet script is the nearest case)",
    ),  # fmt: skip
    (GLUON_NLP, 293): _bert(*GNLP, "fp32", 64, note="run_pretraining.py clips no gradient"),
    (GLUON_NLP, 304): _bert(*GNLP, "fp32", 48, note="run_pretraining.py clips no gradient"),
    (GLUON_NLP, 315): _bert(*GNLP, "fp32", 32, note="run_pretraining.py clips no gradient"),
    (GLUON_NLP, 330): _bert(*GNLP, "amp", 64, note="run_pretraining.py clips no gradient"),
    (GLUON_NLP, 341): _bert(*GNLP, "amp", 96, note="run_pretraining.py clips no gradient"),
    (GLUON_NLP, 352): _bert(*GNLP, "amp", 128, note="run_pretraining.py clips no gradient"),
    (TF2_RN50, 253): _rn50(*TFM, "fp32", 128, note=TFM_RN50),
    (TF2_RN50, 268): _rn50(*TFM, "amp", 128, note=TFM_RN50),
    (TF2_RN50, 279): _rn50(*TFM, "amp", 256, note=TFM_RN50),
    (TF2_RN50, 289): _rn50(*TFM, "amp", 320, note=TFM_RN50),
    (TF2_BERT, 288): _bert(*TFM, "fp32", 32),
    (TF2_BERT, 299): _bert(*TFM, "fp32", 32, xla=True),
    (TF2_BERT, 310): _bert(*TFM, "fp32", 48),
    (TF2_BERT, 321): _bert(*TFM, "fp32", 48, xla=True),
    (TF2_BERT, 332): _bert(*TFM, "fp32", 64),
    (TF2_BERT, 343): _bert(*TFM, "fp32", 64, xla=True),
    (TF2_BERT, 360): _bert(*TFM, "amp", 64),
    (TF2_BERT, 371): _bert(*TFM, "amp", 64, xla=True),
    (TF2_BERT, 382): _bert(*TFM, "amp", 96),
    (TF2_BERT, 393): _bert(*TFM, "amp", 96, xla=True),
    (TF2_BERT, 404): _bert(*TFM, "amp", 128, xla=True),
    # PaddleCV / PaddleNLP at Paddle 1.8.3: dynamic loss scaling unless the table says not.
    (PADDLE_RN50, 280): _rn50(*PD, "fp32", 128, variant="nodali"),
    (PADDLE_RN50, 295): _rn50(*PD, "amp", 224, variant="nodali", note="dynamic loss scaling"),
    (PADDLE_RN50, 307): _rn50(
        *PD, "amp", 224, variant="nodali-static-loss-scale",
        note="--use_dynamic_loss_scaling=false",
    ),  # fmt: skip
    (PADDLE_RN50, 318): _rn50(
        *PD, "amp", 196, variant="dali",
        note="DALI's Paddle plug-in (a nightly DALI); batch 224 and 256 ran out of memory with it",
    ),  # fmt: skip
    (PADDLE_BERT, 224): _bert(*PD, "fp32", 32),
    (PADDLE_BERT, 235): _bert(*PD, "fp32", 64),
    (PADDLE_BERT, 246): _bert(*PD, "fp32", 96),
    (PADDLE_BERT, 259): _bert(*PD, "amp", 64, note="dynamic loss scaling"),
    (PADDLE_BERT, 271): _bert(
        *PD, "amp", 64, variant="static-loss-scale", note="--use_dynamic_loss_scaling=false"
    ),
    (PADDLE_BERT, 281): _bert(*PD, "amp", 128, note="dynamic loss scaling"),
    (PADDLE_BERT, 292): _bert(*PD, "amp", 160, note="dynamic loss scaling"),
    # The v1.0 report: a column per framework and source; every cell is a README's figure too.
    (REPORT, 87): {
        2: _rn50(*OF, "fp32", 128), 3: _rn50(*MX, "fp32", 128, variant="dali"),
        4: _rn50(*TF1, "fp32", 128, variant="dali"),
        5: _rn50(*PT, "fp32", 128, variant="dali-cpu"), 6: _rn50("dlperf", "mxnet", "fp32", 128),
        7: _rn50(*TFM, "fp32", 128), 8: _rn50(*PEX, "fp32", 128),
        9: _rn50(*PD, "fp32", 128, variant="nodali"),
    },
    (REPORT, 102): {
        2: _rn50(*OF, "amp", 256), 3: _rn50(*MX, "amp", 256, variant="dali"),
        4: _rn50(*TF1, "amp", 224, xla=True, variant="dali"),
        5: _rn50(*TF1, "amp", 224, variant="dali"),
        6: _rn50(*PT, "amp", 256, variant="dali-cpu"), 7: _rn50("dlperf", "mxnet", "amp", 256),
        8: _rn50(*TFM, "amp", 256), 9: _rn50(*PD, "amp", 196, variant="dali"),
    },
    (REPORT, 121): {
        2: _bert(*OF, "fp32", 32), 3: _bert(*TF1, "fp32", 32), 4: _bert(*PT, "fp32", 32),
        5: _bert(*PD, "fp32", 32), 6: _bert(*OF, "fp32", 32, variant="noclip"),
        7: _bert(*GNLP, "fp32", 32),
    },
    (REPORT, 138): {
        2: _bert(*OF, "fp32", 96), 3: _bert(*TF1, "fp32", 48), 4: _bert(*PT, "fp32", 48),
        5: _bert(*PD, "fp32", 96), 6: _bert(*OF, "fp32", 96, variant="noclip"),
        7: _bert(*GNLP, "fp32", 64),
    },
    (REPORT, 155): {
        2: _bert(*OF, "amp", 64), 3: _bert(*TF1, "amp", 64),
        4: _bert(*TF1, "amp", 64, xla=True), 5: _bert(*PT, "amp", 64), 6: _bert(*PD, "amp", 64),
        7: _bert(*OF, "amp", 64, variant="noclip"), 8: _bert(*GNLP, "amp", 64),
    },
    (REPORT, 170): {
        2: _bert(*OF, "amp", 160), 3: _bert(*TF1, "amp", 64),
        4: _bert(*TF1, "amp", 96, xla=True), 5: _bert(*PT, "amp", 96), 6: _bert(*PD, "amp", 160),
        7: _bert(*OF, "amp", 160, variant="noclip"), 8: _bert(*GNLP, "amp", 128),
    },
}  # fmt: skip

EXCLUDED: dict[tuple[str, int], str] = {
    ("OneFlow/Classification/ConvNets/resnet50v1.5/README.md", 123): "an example of the "
    "extraction script's output (BERT figures, also in the BERT README), not a result table",
    ("OneFlow/Classification/ConvNets/resnet50v1.5/README.md", 134): "the example's summary",
    ("OneFlow/LanguageModeling/BERT/README.md", 123): "an example of the extraction script's "
    "output (each repeat of one case), not a result table",
    ("OneFlow/LanguageModeling/BERT/README.md", 134): "the example's summary",
}


@dataclass
class Figure:
    cells: Cells
    nodes: int
    devices: int
    batch: int
    throughput: str  # as printed
    speedup: str | None
    path: str
    line: int
    also: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple:
        c = self.cells
        return (c.source, c.framework, c.model, c.precision, self.batch, c.dataset, c.xla,
                c.variant, self.nodes, self.devices)  # fmt: skip

    def record(self) -> dict[str, Any]:
        c = self.cells
        out: dict[str, Any] = {
            "framework": c.framework, "source": c.source, "model": c.model, "hardware": HARDWARE,
            "nodes": self.nodes,
            "devices": self.devices, "batch": self.batch, "precision": c.precision,
            "dataset": c.dataset,
        }  # fmt: skip
        if c.xla:
            out["xla"] = True
        if c.variant != "default":
            out["variant"] = c.variant
        out["throughput"] = float(self.throughput)
        if self.speedup is not None:
            out["speedup"] = float(self.speedup)
        out["url"] = f"{REPOSITORY}/blob/{COMMIT}/{self.path}#L{self.line}"
        also = f"also in the v1.0 report, {REPORT} {', '.join(self.also)}" if self.also else ""
        note = "; ".join(filter(None, [c.note, also]))
        if note:
            out["note"] = note
        return out


def show(repo: Path, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "show", f"{COMMIT}:{path}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def result_tables(text: str) -> list[tuple[int, list[str], list[tuple[int, list[str]]]]]:
    """(line of the header row, header cells, [(line, cells)]) of every Markdown table whose
    first data cell is a node count: the result tables."""
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines) - 1:
        row = lines[i].strip()
        if row.startswith("|") and re.match(r"^\|\s*:?-", lines[i + 1].strip()):
            rows, j = [], i + 2
            while j < len(lines) and lines[j].strip().startswith("|"):
                rows.append((j + 1, [c.strip() for c in lines[j].strip().strip("|").split("|")]))
                j += 1
            header = [c.strip() for c in row.strip("|").split("|")]
            if rows and rows[0][1][0].isdigit():
                out.append((i + 1, header, rows))
            i = j
            continue
        i += 1
    return out


def _layout(header: list[str]) -> tuple[int, int, bool, int | None, int, int | None]:
    """Columns of (nodes, GPUs, GPUs-are-per-node, batch, throughput, speedup)."""
    names = [h.lower() for h in header]
    per_node = names[1] == "gpu_num_per_node"
    batch = names.index("batch_size_per_device") if "batch_size_per_device" in names else None
    speed = next(i for i, n in enumerate(names) if n.startswith(("samples/s", "throughput")))
    speedup = names.index("speedup") if "speedup" in names else None
    return 0, 1, per_node, batch, speed, speedup


def figures(repo: Path) -> list[Figure]:
    """Every figure of the mapped tables; the report's cells checked against the READMEs'."""
    paths = sorted({path for path, _ in TABLES} | {path for path, _ in EXCLUDED})
    by_key: dict[tuple, Figure] = {}
    seen: set[tuple[str, int]] = set()
    for path in sorted(paths, key=lambda p: p == REPORT):  # the report last
        for line, header, rows in result_tables(show(repo, path)):
            seen.add((path, line))
            if (path, line) in EXCLUDED:
                continue
            if (path, line) not in TABLES:
                raise SystemExit(f"{path}:{line}: a result table neither mapped nor excluded")
            spec = TABLES[(path, line)]
            for row_line, cells in rows:
                nodes, gpus = int(cells[0]), int(cells[1])
                if isinstance(spec, dict):  # the report: a column per source
                    for column, cell_spec in spec.items():
                        found = Figure(cell_spec, nodes, gpus, int(cell_spec.batch or 0),
                                       cells[column], None, path, row_line)  # fmt: skip
                        _merge(by_key, found)
                    continue
                _nodes, _gpus, per_node, batch_col, speed_col, speedup_col = _layout(header)
                devices = gpus * nodes if per_node else gpus
                batch = spec.batch if batch_col is None else int(cells[batch_col])
                if spec.batch is not None and batch_col is not None:
                    assert batch == spec.batch, (path, row_line)
                speedup = cells[speedup_col] if speedup_col is not None else None
                found = Figure(replace(spec, batch=batch), nodes, devices, int(batch or 0),
                               cells[speed_col], speedup, path, row_line)  # fmt: skip
                _merge(by_key, found)
    missing = (set(TABLES) | set(EXCLUDED)) - seen
    if missing:
        raise SystemExit(f"mapped tables not found at {COMMIT[:12]}: {sorted(missing)}")
    return list(by_key.values())


def _merge(by_key: dict[tuple, Figure], found: Figure) -> None:
    earlier = by_key.get(found.key)
    if earlier is None:
        if found.path == REPORT:
            raise SystemExit(f"{found.path}:{found.line}: {found.key} is in no README table")
        by_key[found.key] = found
        return
    if found.path != REPORT:
        raise SystemExit(f"{found.path}:{found.line} and {earlier.path}:{earlier.line}: one case")
    if float(found.throughput) != float(earlier.throughput):
        raise SystemExit(
            f"{found.path}:{found.line} gives {found.throughput}, {earlier.path}:{earlier.line} "
            f"{earlier.throughput} for {found.key}"
        )
    earlier.also.append(f"#L{found.line}")


HEADER = """\
# DLPerf's published figures for source {source} (the kit's source key; "dlperf": code the kit
# has no source of, set beside the kit's own script): every row of every result table of
# DLPerf's v1.0 report and READMEs for it, at {repository}
# commit {commit}; each figure's url names its file and line.
# Dataset and variant say what DLPerf ran (its scripts and READMEs at that commit) in the kit's
# words: a figure pairs with the kit's cases of the same source, dataset, variant and the rest.
# Written by tests/dlperf_tables.py; tests/test_upstream_published.py holds it to the tables.
"""


def render(source: str, found: list[Figure]) -> str:
    rows = sorted(found, key=lambda f: (f.cells.model, f.cells.precision, f.batch,
                                        f.cells.dataset, f.cells.xla, f.cells.variant,
                                        f.devices))  # fmt: skip
    body = {
        "schema": 1, "publisher": PUBLISHER, "machine": MACHINE,
        "figures": [f.record() for f in rows],
    }  # fmt: skip
    text = yaml.safe_dump(
        {k: v for k, v in body.items() if k != "figures"}, sort_keys=False, width=1000
    )
    text += "figures:\n" + "".join(
        "  - " + yaml.safe_dump(r, default_flow_style=True, sort_keys=False, width=10000)
        for r in body["figures"]
    )
    return HEADER.format(source=source, repository=REPOSITORY, commit=COMMIT) + text


def files(repo: Path) -> dict[str, str]:
    """File name -> content of every import file, one per source."""
    by_source: dict[str, list[Figure]] = {}
    for found in figures(repo):
        by_source.setdefault(found.cells.source, []).append(found)
    return {f"{source}.yaml": render(source, found) for source, found in by_source.items()}


if __name__ == "__main__":
    repo = Path(sys.argv[1])
    OUT.mkdir(parents=True, exist_ok=True)
    for name, content in files(repo).items():
        (OUT / name).write_text(content)
        print(f"wrote {OUT / name}")
