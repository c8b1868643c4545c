"""driver.workloads: what the kit knows of each model, and the shapes every framework's
benchmark reads from its options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from driver.bench.contract import SHAPE_OPTIONS
from driver.workloads.base import build_registered
from driver.workloads.bert import BertShape
from driver.workloads.images import ImageShape


def test_bert_shape_reads_every_bert_option() -> None:
    options = dict(
        SHAPE_OPTIONS,
        vocab_size=500,
        bert_hidden=64,
        bert_layers=2,
        bert_heads=4,
        bert_intermediate=128,
        seq_len=32,
        max_predictions=5,
    )
    shape = BertShape.from_options(options)
    assert (shape.vocab_size, shape.hidden, shape.layers, shape.heads) == (500, 64, 2, 4)
    assert (shape.intermediate, shape.seq_len, shape.max_predictions) == (128, 32, 5)
    assert shape.head_dim == 16
    assert shape.predictions == 5


def test_bert_shape_defaults_are_bert_base() -> None:
    assert BertShape.from_options(SHAPE_OPTIONS) == BertShape()


def test_position_table_is_the_reference_512_rows_unless_the_sequence_is_longer() -> None:
    assert BertShape(seq_len=128).max_position == 512
    assert BertShape(seq_len=1024).max_position == 1024


def test_predictions_never_reach_the_cls_slot() -> None:
    assert BertShape(seq_len=8, max_predictions=20).predictions == 7


def test_hidden_that_heads_do_not_divide_is_refused() -> None:
    with pytest.raises(ValueError, match="bert_hidden 100 is not a multiple of bert_heads 12"):
        BertShape(hidden=100)


def test_image_shape_reads_classes_and_optional_flags() -> None:
    assert ImageShape.from_options({"num_classes": "10"}) == ImageShape(num_classes=10)
    shape = ImageShape.from_options(
        {"num_classes": 5, "zero_init_residual": True, "aux_logits": True}
    )
    assert shape.zero_init_residual and shape.aux_logits


def test_build_registered_calls_the_named_builder_and_names_the_known_ones() -> None:
    builders = {"a": lambda options: ("built a", options["x"]), "b": lambda options: "b"}
    assert build_registered(builders, "a", {"x": 1}) == ("built a", 1)
    with pytest.raises(ValueError, match=r"unknown model 'c' \(this framework has: a, b\)"):
        build_registered(builders, "c", {})


# --- the registry ----------------------------------------------------------------------------


def test_the_kit_s_models_are_one_workload_module_each_in_the_kit_s_order() -> None:
    from driver.bench.contract import MODELS
    from driver.workloads.base import WORKLOADS, in_order, load_workloads

    load_workloads()
    kit = [w.name for w in in_order() if w.name in WORKLOADS and not w.name.startswith("tiny")]
    assert kit == ["resnet50", "inception3", "bert", "llama", "calibration"]
    assert MODELS == ("resnet50", "inception3", "bert", "llama")  # calibration is its own script
    # The shape options every framework script reads, in the order they were always listed.
    assert list(SHAPE_OPTIONS) == [
        "image_size", "num_classes", "seq_len", "vocab_size", "bert_layers", "bert_hidden",
        "bert_heads", "bert_intermediate", "max_predictions", "llama_size",
    ]  # fmt: skip
    assert WORKLOADS.get("llama").counted is False and WORKLOADS.get("bert").counted
    assert not WORKLOADS.get("calibration").counted  # no FLOPs at all
    assert not WORKLOADS.get("calibration").has_formula


def test_each_workload_reads_its_shape_from_the_resolved_options() -> None:
    from driver.workloads.base import load_workloads
    from driver.workloads.llama import LLAMA_SIZES

    workload = load_workloads().get
    assert workload("bert").shape(SHAPE_OPTIONS) == BertShape()
    assert workload("resnet50").shape(SHAPE_OPTIONS) == ImageShape(1000)
    tiny = {**SHAPE_OPTIONS, "llama_size": "llama-tiny", "seq_len": 16}
    assert workload("llama").shape(tiny) == LLAMA_SIZES["llama-tiny"]
    assert workload("calibration").shape(SHAPE_OPTIONS) is None
    with pytest.raises(ValueError, match="2048 is longer than llama-tiny's context of 1024"):
        workload("llama").shape({**tiny, "seq_len": 2048})


def test_every_data_format_a_workload_reads_is_one_dlperf_data_makes() -> None:
    """A workload names the ``dlperf data`` formats its scripts read: each is a command."""
    import argparse

    from driver.frontend.commands.data import add_subcommands
    from driver.workloads.base import in_order

    commands = argparse.ArgumentParser().add_subparsers()
    add_subcommands(commands)
    data = commands.choices["data"]
    formats = next(a for a in data._actions if isinstance(a, argparse._SubParsersAction)).choices
    for workload in in_order():
        assert set(workload.data_formats) <= set(formats), workload.name


# --- a new model: its workload module, the framework's model file and a matrix entry ----------


def test_a_new_model_is_planned_checked_titled_and_counted_by_its_workload_alone(
    tmp_path: Path,
) -> None:
    """``tests/tiny_workload.py`` stands for a new ``driver/workloads/<model>.py``; nothing else
    of the driver knows the model, yet the matrix expands it for the framework it names, its
    script's arguments take it with its defaults, a session table titles it with tokens/s and
    MFU by its formula, the plan counts its FLOPs, parity hands its options, a release prices
    it."""
    from driver.bench.contract import parse_benchmark_args, resolve_options
    from driver.core.estimate import ASSUMED_MFU, estimate_case
    from driver.core.knowledge import load_knowledge
    from driver.core.matrix import MatrixError, load_matrix
    from driver.core.report import markdown_tables, session_mfu, tokens_per_second
    from driver.core.summary import CaseSummary
    from driver.model.measure import case_stats
    from driver.release.mfu import compute_model_costs
    from driver.studies.parity.handing import handed_options
    from tests.tiny_workload import FORMULA, NAME, PARAMETERS

    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        "framework: pytorch\ndefaults: {warmup_steps: 2, measured_steps: 4, repeats: 1}\n"
        f"suites:\n  - model: {NAME}\n    topology: [1n1g, 1n8g]\n    batch_size: [4]\n"
        "    precision: amp\n    variants: {default: {seq_len: 256}}\n"
    )
    cases = load_matrix(matrix).cases
    assert [(c.model, c.topology.world_size, c.options["seq_len"]) for c in cases] == [
        (NAME, 1, 256), (NAME, 8, 256),
    ]  # fmt: skip
    # A framework it does not name refuses it, listing the framework's own models.
    matrix.write_text(matrix.read_text().replace("pytorch", "tensorflow"))
    with pytest.raises(MatrixError, match=f"'{NAME}' is not allowed; allowed models: resnet50"):
        load_matrix(matrix)

    args = parse_benchmark_args(["--model", NAME, "--batch-size", "4", "--total-steps", "6",
                                 "--option", "seq_len=256"])  # fmt: skip
    resolved = resolve_options(args, {}, world_size=1, on_gpu=False)
    assert (resolved["optimizer"], resolved["grad_clip"], resolved["image_size"]) == (
        "adamw", 1.0, None,
    )  # fmt: skip

    on_h100 = cases[0]
    rate = 50.0
    summary = CaseSummary(
        case=on_h100, stats=case_stats([rate, rate]), batch_size=4, speedup=None,
        efficiency=None, throughputs=[rate, rate], devices=["NVIDIA H100 80GB HBM3"],
        amp_dtype="bfloat16",
    )  # fmt: skip
    text = markdown_tables([summary], plain=True)
    assert text.splitlines()[0].startswith("Tiny LM pre-training, AMP")
    assert tokens_per_second(summary) == rate * 256
    assert "tokens/s" in text.splitlines()[2]
    flops = 6.0 * PARAMETERS * 256
    assert session_mfu(summary) == pytest.approx(rate * flops / 989.4e12, rel=1e-3)

    h100 = {"name": "H100", "match": ["H100"], "peaks": {"bf16": 1000.0},
            "source": "the test's round figure", "link": "https://example.com/"}  # fmt: skip
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "peaks.yaml").write_text(
        json.dumps({"schema": 1, "unit": "TFLOP/s", "devices": [h100]})
    )
    estimate = estimate_case(cases[0], "H100", load_knowledge(tmp_path))
    assert estimate.step_s == pytest.approx(4 * flops / (1000e12 * ASSUMED_MFU))

    header = {"options": {"seq_len": 256, "image_size": None, "momentum": 0.9, "lr": 1e-4}}
    assert handed_options(header, NAME) == {"lr": 1e-4, "seq_len": 256}

    (cost,) = compute_model_costs([(NAME, {"seq_len": 256})]).values()
    assert (cost["flops_per_sample"], cost["parameters"], cost["source"]) == (
        flops, PARAMETERS, FORMULA,
    )  # fmt: skip


def test_a_new_model_s_plan_memory_search_and_scaling_are_its_workload_s_answers(
    tmp_path: Path,
) -> None:
    """What the plan, the batch search, the session's memory check, the summary's scaling and
    a release's notes ask of a model is its workload's answer: the tiny model's module gives
    each, and no file under driver/ names it."""
    from dataclasses import replace

    from driver.core.batchsearch import START, search_start
    from driver.core.estimate import estimate_case
    from driver.core.knowledge import load_knowledge, shape_key
    from driver.core.matrix import load_matrix
    from driver.core.session import leave_out_unfit
    from driver.core.summary import CaseSummary, smallest_topologies
    from driver.model.case import Topology
    from driver.model.measure import case_stats
    from driver.release.readme import _flops_notes
    from tests.tiny_workload import FLOPS_NOTE, NAME, STATE_BYTES, TOKEN_BYTES

    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        "framework: pytorch\ndefaults: {warmup_steps: 2, measured_steps: 4, repeats: 1}\n"
        f"suites:\n  - model: {NAME}\n    topology: [1n8g, 2n16g]\n    batch_size: [max]\n"
        "    precision: amp\n    variants: {default: {seq_len: 1024}}\n"
    )
    on_8, on_16 = load_matrix(matrix).cases
    assert shape_key(NAME, dict(on_8.options)) == "at 1024 tokens"
    assert (search_start(on_8, on_gpu=True), search_start(on_8, on_gpu=False)) == (4, START)

    # The plan: its batch by its memory on the device, its search of 2 probes.
    h100 = {"name": "H100", "match": ["H100"], "peaks": {"bf16": 1000.0}, "memory_gib": 80,
            "source": "the test's round figure", "link": "https://example.com/"}  # fmt: skip
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "peaks.yaml").write_text(
        json.dumps({"schema": 1, "unit": "TFLOP/s", "devices": [h100]})
    )
    fits = int((80 * 2**30 * 0.9 - STATE_BYTES) // (TOKEN_BYTES * 1024))
    estimate = estimate_case(on_8, "H100", load_knowledge(tmp_path))
    assert f"batch search of 2 probes, measured at batch {fits}" in estimate.basis
    assert f"batch {fits} by the memory estimate on 80 GiB" in estimate.basis
    # A sequence no device of the kit's peaks holds is left out on the topology given.
    longest = replace(on_8, options={**on_8.options, "seq_len": 2**20})
    kept, note = leave_out_unfit([on_8, longest])
    assert kept == [on_8] and note.startswith("1 case(s) left out") and longest.id in note

    # Its series without a 1n1g case scales against its smallest topology.
    summaries = [
        CaseSummary(
            case=case, stats=case_stats([50.0, 50.0]), batch_size=4, speedup=None,
            efficiency=None, throughputs=[50.0, 50.0], devices=["NVIDIA H100 80GB HBM3"],
        )  # fmt: skip
        for case in (on_16, on_8)
    ]
    assert [s.case.topology for s in smallest_topologies(summaries).values()] == [
        Topology(1, 8)
    ]
    # A release's README says its FLOPs note once, beside the other models'.
    assert _flops_notes([NAME, "resnet50", NAME]) == [FLOPS_NOTE]
