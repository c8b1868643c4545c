"""The "Compare with DLPerf" table (docs/dlperf-compare.md): every DLPerf v1.0 figure
(published/dlperf-v1.0/), grouped by case, beside the kit's source that reproduces it, whether
that source's pinned image runs on Volta, Ampere and Hopper (from the CUDA release it is built
on), the data it reads and how to make it, and whether the kit's matrices hold the case (it
pairs with `dlperf factor --factor device`). Written by ``python -m tests.dlperf_compare``;
tests/test_dlperf_compare.py requires the file to equal what this writes."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from driver.core.matrix import load_matrix
from driver.plugins import load_all
from driver.release.imported import load_import
from driver.sources.spec import SourceSpec
from driver.sources.upstream import SPECS
from driver.text import markdown_cell

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "published" / "dlperf-v1.0"
OUT = ROOT / "docs" / "dlperf-compare.md"

# CUDA release of each pinned base image, and where that is stated. A GPU generation runs an
# image whose CUDA compiles for it: Volta (sm_70) up to CUDA 12 (CUDA 13 drops it), Ampere
# (sm_80) from CUDA 11.0, Hopper (sm_90) from CUDA 11.8.
IMAGES: dict[str, tuple[tuple[int, int], str]] = {
    "nvcr.io/nvidia/mxnet:22.03-py3": (
        (11, 6),
        "CUDA 11.6.1: https://docs.nvidia.com/deeplearning/frameworks/mxnet-release-notes/"
        "rel_22-03.html",
    ),
    "nvcr.io/nvidia/mxnet:24.05-py3": (
        (12, 4),
        "CUDA 12.4.1: https://docs.nvidia.com/deeplearning/frameworks/mxnet-release-notes/"
        "rel-24-05.html",
    ),
    "nvcr.io/nvidia/tensorflow:23.03-tf1-py3": (
        (12, 0),
        "CUDA 12 (NGC TensorFlow is on CUDA 12 from 23.01: https://docs.nvidia.com/deeplearning/"
        "frameworks/tensorflow-release-notes/rel-23-01.html)",
    ),
    "nvcr.io/nvidia/pytorch:25.04-py3": (
        (12, 0),
        "CUDA 12 (a 2025 NGC release; its notes not read here: https://docs.nvidia.com/"
        "deeplearning/frameworks/pytorch-release-notes/rel-25-04.html)",
    ),
    "nvcr.io/nvidia/pytorch:25.09-py3": (
        (12, 0),
        "CUDA 12 or later (a September 2025 NGC release, the megatron source's base; its notes "
        "not read here: https://docs.nvidia.com/deeplearning/frameworks/pytorch-release-notes/"
        "rel-25-09.html); only its Hopper support is read: the source is no DLPerf row",
    ),
    "nvcr.io/nvidia/jax:26.07-py3": (
        (12, 0),
        "CUDA 12 or later (a July 2026 NGC release, the maxtext source's base and the kit's JAX "
        "base; its notes not read here: https://docs.nvidia.com/deeplearning/frameworks/"
        "jax-release-notes/index.html); only its Hopper support is read: the source is no "
        "DLPerf row",
    ),
    "pytorch/pytorch:2.1.2-cuda12.1-cudnn8-runtime": ((12, 1), "CUDA 12.1 (the image's tag)"),
    "pytorch/pytorch:2.13.0-cuda12.8-cudnn9-runtime": ((12, 8), "CUDA 12.8 (the image's tag)"),
    "paddlepaddle/paddle:1.8.5-gpu-cuda10.2-cudnn7": ((10, 2), "CUDA 10.2 (the image's tag)"),
    "nvidia/cuda:11.0.3-cudnn8-devel-ubuntu18.04": ((11, 0), "CUDA 11.0.3 (the image's tag)"),
    "tensorflow/tensorflow:2.3.0-gpu": (
        (10, 1),
        "CUDA 10.1 (TensorFlow 2.3's tested build: https://www.tensorflow.org/install/source#gpu)",
    ),
}
# What each source reads as real data, and the command that makes it (docs/data.md).
DATA = {
    ("ngc-tf1", "resnet50"): "TFRecord + DALI index: `dlperf data tfrecord`, `dali-index`",
    ("tensorflow-models", "resnet50"): "TFRecord: `dlperf data tfrecord`",
    ("ngc-pytorch", "resnet50"): "raw JPEG folder: `dlperf data raw`",
    ("pytorch-examples", "resnet50"): "raw JPEG folder: `dlperf data raw`",
    ("ngc-mxnet", "resnet50"): "RecordIO: `dlperf data recordio`",
    ("dlperf", "resnet50"): "RecordIO: `dlperf data recordio`",
    ("paddle-models", "resnet50"): "raw folder + lists: `dlperf data paddle-lists`",
    ("oneflow-benchmark", "resnet50"): "OFRecord: `dlperf data ofrecord`",
    ("ngc-pytorch", "bert"): "hdf5 shards: `dlperf data bert-hdf5`",
    ("ngc-tf1", "bert"): "TFRecord: `dlperf data bert-tfrecord`",
    ("oneflow-benchmark", "bert"): "OFRecord: `dlperf data bert-ofrecord`",
    ("gluon-nlp", "bert"): "npz files: `dlperf data bert-gluonnlp`",
    ("paddle-models", "bert"): "gzip text: `dlperf data bert-paddle`",
}
BERT_DATA = "BERT pre-training shards of the source: not made by the kit yet"


def generations(cuda: tuple[int, int]) -> tuple[str, str, str]:
    volta = "yes" if cuda < (13, 0) else "no"
    ampere = "yes" if cuda >= (11, 0) else "no (CUDA < 11.0)"
    hopper = "yes" if cuda >= (11, 8) else "no (CUDA < 11.8)"
    return volta, ampere, hopper


def current_image(spec: SourceSpec) -> tuple[str, str | None]:
    """The row's Hopper-capable image: the pinned one, the source's current image (built from
    its Dockerfile on a later base), or why there is none (the first clause of the reason), and
    the base it names (for its CUDA release below)."""
    if generations(IMAGES[spec.base_image][0])[2] == "yes":
        return "the pinned image", None
    current = spec.current_image
    if current is None:
        return "no current image: none recorded", None
    if current.refused:
        return f"no current image: {current.refused.split(';')[0]}", None
    return f"`{current.image}` on `{current.base_image}`", current.base_image


def differences(spec: SourceSpec | None, precision: str, dataset: str) -> str:
    """What still differs from DLPerf's run when the row runs on an H100 with the kit: the
    software (the pinned image's, or the current image's changes), the AMP dtype, the data."""
    if spec is None:  # gluon-cv: the kit's own MXNet script
        found = ["software: the kit's own MXNet script, not gluon-cv"]
        if precision == "amp":
            found.append("AMP: bf16 unless `--amp-dtype fp16` (DLPerf: fp16)")
    elif generations(IMAGES[spec.base_image][0])[2] == "yes":
        found = ["software: the pinned image's versions"]
    elif spec.current_image is not None and spec.current_image.image:
        found = ["software: " + ", ".join(spec.current_image.differs)]
    else:
        return "no H100 run"
    if dataset == "real":
        found.append("data: your prepared copy (its manifest hash) vs DLPerf's")
    return "; ".join(found)


def kit_cases() -> set[tuple]:
    load_all()
    held = set()
    for spec in SPECS.values():
        for case in load_matrix(spec.matrix_file).cases:
            held.add((case.source, case.model, case.precision, str(case.batch_size),
                      case.dataset, case.xla, case.variant))  # fmt: skip
    return held


def render() -> str:
    load_all()
    groups: dict[tuple, list] = defaultdict(list)
    for path in sorted(PUBLISHED.glob("*.yaml")):
        for figure in load_import(path).figures:
            key = (figure.source, figure.model, figure.precision, figure.batch, figure.dataset,
                   figure.xla, figure.variant)  # fmt: skip
            groups[key].append(figure)
    held = kit_cases()
    lines = [
        "# Compare with DLPerf: which rows pair, and where they run",
        "",
        "Generated by `python -m tests.dlperf_compare` from `published/dlperf-v1.0/` and the",
        "kit's sources; `tests/test_dlperf_compare.py` holds this file to it. One line per",
        "DLPerf case (all its topologies); *pairs*: the kit's matrices hold the case, so",
        "`dlperf factor --factor device` sets your run beside DLPerf's figures. Volta / Ampere",
        "/ Hopper: whether the source's pinned image is built on a CUDA that compiles for that",
        "GPU (Volta up to CUDA 12, Ampere from 11.0, Hopper from 11.8). DLPerf ran every row on",
        "V100s, AMP in fp16: on an H100 the kit's own scripts run AMP in bf16 unless",
        "`--amp-dtype fp16`, and `factor` names the dtype where it differs; the upstream",
        "sources run AMP as their code does (fp16, as DLPerf ran them). *On Hopper*: the",
        "image an H100 runs the row's code in: the pinned one where it runs there, else the",
        "source's current image (`current_image` in its source.yaml: the same pinned code on",
        "a later base, `dlperf images build <image>`), or why the code runs on none. A case",
        "runs its source's current image when asked: `dlperf run --image current` (or",
        "`image: current` in the matrix); its id ends in `/current-image`, its record names the",
        "image and what differs, and a source without one is refused before anything starts",
        '(docs/upstream.md, "Current images"). *Differs on an H100*: what still differs from',
        "DLPerf's run there, which `dlperf factor` names beside the pair (DLPerf's tables give",
        "no software versions).",
        "",
        "| source | model | precision | batch | data | XLA | variant | figures | pairs | image |"
        " Volta | Ampere | Hopper | data to prepare | on Hopper | differs on an H100 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    facts = set()
    for key in sorted(groups, key=lambda k: tuple(str(v) for v in k)):
        source, model, precision, batch, dataset, xla, variant = key
        figures = groups[key]
        pairs = (source, model, precision, str(batch), dataset, xla, variant) in held
        spec = SPECS.get(source)
        if spec is None:
            # gluon-cv: no source of the kit, set beside the kit's own MXNet script
            where, volta, ampere, hopper = "no source in the kit (gluon-cv)", "-", "-", "-"
            on_hopper = "-"
        else:
            cuda, fact = IMAGES[spec.base_image]
            facts.add((spec.base_image, fact))
            where = f"`{spec.base_image}`"
            volta, ampere, hopper = generations(cuda)
            on_hopper, current_base = current_image(spec)
            if current_base is not None:
                facts.add((current_base, IMAGES[current_base][1]))
        differs = differences(spec, precision, dataset)
        data = DATA.get((source, model), BERT_DATA) if dataset == "real" else "synthetic"
        lines.append(
            f"| {source} | {model} | {precision} | {batch} | {dataset} | "
            f"{'on' if xla else 'off'} | {variant} | {len(figures)} | "
            f"{'yes' if pairs else 'no'} | {where} | {volta} | {ampere} | {hopper} | {data} | "
            f"{markdown_cell(on_hopper)} | {markdown_cell(differs)} |"
        )
    lines += ["", "Each image's CUDA release:", ""]
    lines += [f"- `{image}`: {fact}" for image, fact in sorted(facts)]
    lines += ["", "Each source whose pinned image predates Hopper, on a current image or not:", ""]
    for spec in sorted(SPECS.values(), key=lambda s: s.name):
        current = spec.current_image
        if current is None:
            continue
        cited = ", ".join(markdown_cell(at) for at in current.at)
        if current.refused:
            reason = markdown_cell(current.refused)
            lines.append(f"- {spec.name}: no current image: {reason} ({cited})")
        else:
            lines.append(
                f"- {spec.name}: `{current.image}` on `{current.base_image}`, the same pinned "
                f"code; differs: {markdown_cell(', '.join(current.differs))} ({cited})"
            )
    lines += [
        "",
        "NGC PyTorch (`nvcr.io/nvidia/pytorch:25.04-py3`), pytorch/examples",
        "(`pytorch/pytorch:2.1.2-cuda12.1`) and NGC TF1",
        "(`nvcr.io/nvidia/tensorflow:23.03-tf1-py3`) run on Hopper in their pinned images.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}")
