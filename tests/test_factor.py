"""``dlperf factor`` across devices: a pair is a device ratio only where nothing else differs;
every other difference (AMP dtype, software, data) is named beside the pair, and where nothing
pairs the closest cases are shown with the factors that keep them apart."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from driver.analysis.compare import attention_of, load_side, side_of_summaries
from driver.analysis.factor import factor_report
from driver.core.command import script_argv
from driver.core.matrix import Overrides, apply_overrides
from driver.core.summary import CaseSummary
from driver.frameworks.base import FRAMEWORKS
from driver.model.case import Case, Topology
from driver.model.measure import case_stats
from driver.plugins import load_all
from driver.release.imported import figure_summaries

load_all()
DLPERF = Path(__file__).parents[1] / "published" / "dlperf-v1.0" / "ngc-pytorch.yaml"
H100 = "NVIDIA H100 80GB HBM3"


def measured(
    case: Case, rate: float, amp_dtype: str | None, versions: dict, data: str = ""
) -> CaseSummary:
    return CaseSummary(
        case=case, stats=case_stats([rate]), batch_size=int(case.batch_size), speedup=None,
        efficiency=None, throughputs=[rate], devices=[H100] * case.topology.world_size,
        versions=versions, amp_dtype=amp_dtype, dataset_sha256=data,
    )  # fmt: skip


def dlperf_amp_case() -> Case:
    figure = next(s for s in figure_summaries(DLPERF) if s.case.precision == "amp")
    return figure.case


def test_a_bf16_h100_beside_dlperf_s_fp16_v100_names_the_dtype_and_the_software(
    tmp_path: Path,
) -> None:
    case = dlperf_amp_case()
    mine = side_of_summaries(
        "h100", "session", [measured(case, 5000.0, "bfloat16", {"torch": "2.5.1"})]
    )
    theirs = load_side(str(DLPERF), tmp_path, tmp_path)
    data, text = factor_report([mine, theirs], "device", "V100", "H100")
    pair = next(p for p in data["pairs"] if p["a_case"] == case.id)
    assert "amp_dtype: float16 vs bfloat16" in pair["also_differs"]
    assert "software: as published vs torch 2.5.1" in pair["also_differs"]
    assert any(d.startswith("data: as published vs no manifest") for d in pair["also_differs"])
    assert "differ in more than device: amp_dtype, data, software" in text
    assert "--amp-dtype fp16" in text


def test_equal_runs_on_two_devices_pair_with_nothing_else_named() -> None:
    case = Case("resnet50", "pytorch", Topology(1, 1), 128, "amp", "real")
    versions = {"torch": "2.5.1", "python": "3.11.7"}
    v100 = replace(measured(case, 1000.0, "float16", versions, "ab" * 32), devices=["V100-SXM2"])
    h100 = measured(case, 3000.0, "float16", versions, "ab" * 32)
    data, text = factor_report(
        [side_of_summaries("a", "session", [v100]), side_of_summaries("b", "session", [h100])],
        "device", "V100", "H100",
    )  # fmt: skip
    assert [p["also_differs"] for p in data["pairs"]] == [[]] and data["median_ratio"] == 3.0
    assert "also differs" not in text
    other = replace(h100, dataset_sha256="cd" * 32)
    data, text = factor_report(
        [side_of_summaries("a", "session", [v100]), side_of_summaries("b", "session", [other])],
        "device", "V100", "H100",
    )  # fmt: skip
    assert data["pairs"][0]["also_differs"] == [f"data: {'ab' * 32} vs {'cd' * 32}"]


def test_where_nothing_pairs_the_closest_cases_and_their_differences_are_named() -> None:
    case = Case("resnet50", "pytorch", Topology(1, 1), 128, "amp", "real")
    v100 = replace(measured(case, 1000.0, "float16", {}), devices=["V100-SXM2"])
    h100 = measured(replace(case, dataset="synthetic", batch_size=256), 3000.0, "bfloat16", {})
    data, text = factor_report(
        [side_of_summaries("a", "session", [v100]), side_of_summaries("b", "session", [h100])],
        "device", "V100", "H100",
    )  # fmt: skip
    assert data["pairs"] == []
    assert "differ in dataset real vs synthetic, batch 128 vs 256" in text


def test_amp_dtype_reaches_the_kit_s_script_and_stays_out_of_the_id() -> None:
    case = Case("resnet50", "pytorch", Topology(1, 1), 128, "amp", "synthetic")
    (fp16,) = apply_overrides([case], Overrides(amp_dtype="fp16"))
    argv = script_argv(fp16, FRAMEWORKS.get("pytorch"), 128)
    assert argv[argv.index("--amp-dtype") + 1] == "fp16" and fp16.id == case.id
    assert "--amp-dtype" not in script_argv(case, FRAMEWORKS.get("pytorch"), 128)
    assert "amp_dtype" not in case.to_dict() and fp16.to_dict()["amp_dtype"] == "fp16"
    assert Case.from_dict(fp16.to_dict()) == fp16


def test_amp_dtype_on_an_upstream_source_is_refused_naming_it() -> None:
    import pytest

    from driver.core.matrix import MatrixError

    case = Case("resnet50", "pytorch", Topology(1, 1), 128, "amp", "real", source="ngc-pytorch")
    with pytest.raises(MatrixError, match="--amp-dtype.*ngc-pytorch.*run their own AMP"):
        apply_overrides([case], Overrides(amp_dtype="fp16"))


def test_pytorch_and_jax_pair_on_the_same_case_without_their_libraries_named() -> None:
    """The framework factor: PyTorch's and JAX's runs of one case (the same model, batch,
    precision, topology and variant of their matrices) pair; each brings its own libraries, so
    those are not a difference worth naming, but an AMP dtype that differs still is."""
    torch_case = Case("resnet50", "pytorch", Topology(1, 8), 256, "amp", "synthetic")
    jax_case = replace(torch_case, framework="jax")
    data = "ab" * 32  # the same data set on both sides
    torch_run = measured(torch_case, 2000.0, "bfloat16", {"torch": "2.13.0"}, data)
    jax_run = measured(jax_case, 1800.0, "bfloat16", {"jax": "0.10.2"}, data)
    sides = [
        side_of_summaries("pytorch", "session", [torch_run]),
        side_of_summaries("jax", "session", [jax_run]),
    ]
    report, text = factor_report(sides, "framework", "pytorch", "jax")
    [pair] = report["pairs"]
    assert pair["a_case"] == torch_case.id and pair["b_case"] == jax_case.id
    assert report["median_ratio"] == 0.9 and pair["also_differs"] == []
    assert "also differs" not in text
    fp16 = replace(jax_run, amp_dtype="float16")
    report, _ = factor_report(
        [sides[0], side_of_summaries("jax", "session", [fp16])], "framework", "pytorch", "jax"
    )
    assert report["pairs"][0]["also_differs"] == ["amp_dtype: bfloat16 vs float16"]


def test_torchtitan_s_flex_attention_beside_its_published_sdpa_figure_is_named(
    tmp_path: Path,
) -> None:
    """torchtitan 0.3.0 trains with FlexAttention; its published figures ran SDPA: a pair of
    the two says so, and the kit's own Llama (SDPA) beside the same figure does not."""
    from driver.core.matrix import load_matrix

    published = Path(__file__).parents[1] / "published" / "llama3" / "torchtitan.yaml"
    matrix = Path(__file__).parents[1] / "PyTorch" / "upstream" / "torchtitan" / "matrix.yaml"
    wanted = "llama/pytorch/1n8g/bs2/amp/real/8b/src-torchtitan"
    case = next(c for c in load_matrix(matrix).cases if c.id == wanted)
    mine = side_of_summaries("h100", "session", [measured(case, 6.0, "bfloat16", {})])
    theirs = load_side(str(published), tmp_path, tmp_path)
    data, _text = factor_report([mine, theirs], "device", "NVIDIA H100 96GB HBM2e", H100)
    pair = next(p for p in data["pairs"] if p["a_case"] == case.id)
    assert "attention: sdpa vs flex" in pair["also_differs"]
    kit_own = replace(case, source="dlperf", options={"llama_size": "llama3-8b", "seq_len": 8192})
    assert attention_of(measured(kit_own, 6.0, "bfloat16", {}).row()) == "sdpa"
    resnet = Case("resnet50", "pytorch", Topology(1, 8), 128, "amp", "real")
    assert attention_of(measured(resnet, 6.0, "bfloat16", {}).row()) == "-"
