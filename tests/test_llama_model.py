"""Llama 3: its sizes (driver/workloads/llama.py), the PyTorch model, its FLOPs formula and the
checks that refuse a case the model cannot take (in the script and in the matrix)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from driver.bench.contract import SHAPE_OPTIONS
from driver.core.matrix import MatrixError, load_matrix
from driver.release.mfu import compute_model_costs, cost_key
from driver.workloads.base import WorkloadOptionError, check_case_options
from driver.workloads.llama import (
    LLAMA_SIZES,
    training_flops_per_sample,
    training_flops_per_token,
)
from PyTorch.benchmark.data import synthetic_batch
from PyTorch.benchmark.models import build_model, count_parameters, training_loss
from PyTorch.benchmark.parallel import check_llama_parallel

TINY = {"llama_size": "llama-tiny", "seq_len": 32}


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def options(**extra: Any) -> dict[str, Any]:
    return {**SHAPE_OPTIONS, **TINY, **extra}


# Parameter counts of Meta's released checkpoints (model cards / safetensors index metadata).
@pytest.mark.parametrize(
    ("size", "published"),
    [("llama3-8b", 8_030_261_248), ("llama3-1b", 1_235_814_400), ("llama3-70b", 70_553_706_496)],
)
def test_published_sizes_have_the_published_parameter_counts(size: str, published: int) -> None:
    shape = LLAMA_SIZES[size]
    assert shape.parameters() == published
    with torch.device("meta"):  # the model code, counted independently of the formula
        model = build_model("llama", {**SHAPE_OPTIONS, "llama_size": size, "seq_len": 16})
    assert count_parameters(model) == published


def test_tied_embeddings_share_one_weight() -> None:
    with torch.device("meta"):
        tied = build_model("llama", {**SHAPE_OPTIONS, "llama_size": "llama3-1b", "seq_len": 16})
    assert tied.output.weight is tied.tok_embeddings.weight
    assert tied.layers[0].attention.wk.out_features == 8 * 64  # 8 KV heads of 64


def test_flops_formula_matches_the_counted_matmuls() -> None:
    """6N + 12 L H hd S per token against FlopCounterMode over one real training step: they
    differ only by the RMSNorm weights (no matmul), well under 1% at the tiny size. Attention
    runs on the math backend, whose matmuls the counter sees (it has no rule for the CPU
    flash kernel)."""
    opts = options()
    model = build_model("llama", opts)
    batch = synthetic_batch("llama", opts, 2, "cpu")
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        training_loss("llama", model, batch).backward()
    counted = counter.get_total_flops() / (2 * opts["seq_len"])
    formula = training_flops_per_token(LLAMA_SIZES["llama-tiny"], opts["seq_len"])
    assert abs(formula - counted) / counted < 0.01, (formula, counted)
    assert training_flops_per_sample(opts) == formula * opts["seq_len"]


def test_release_costs_use_the_formula_without_counting() -> None:
    opts = {"llama_size": "llama3-8b", "seq_len": 8192}
    cost = compute_model_costs([("llama", opts)])[cost_key("llama", opts)]
    per_token = training_flops_per_token(LLAMA_SIZES["llama3-8b"], 8192)
    assert cost["flops_per_sample"] == per_token * 8192
    assert cost["parameters"] == 8_030_261_248
    # torchtitan's 8B at seq 8192: 6 x (8.03e9 - 0.525e9) + 12 x 32 x 32 x 128 x 8192 ~ 5.79e10
    assert 5.7e10 < per_token < 5.9e10


def test_a_tied_output_projection_counts_as_torchtitan_counts_it_since_4ed3c536() -> None:
    """Llama 3.2 1B ties its output projection to the embeddings; the projection still runs, so
    torchtitan counts it since 4ed3c536: 1.0636e10 FLOPs a token at 8192, 8.713e4 GFLOP a
    sample (the kit's 9.06e9 before, 15% low). An untied size counts the same either way; a
    version released with the older count is recomputed by it (its manifest names it)."""
    from driver.release.mfu import formula_costs
    from driver.workloads.llama import FLOPS_FORMULA, FLOPS_FORMULA_BEFORE_4ED3C536

    one_b = {"llama_size": "llama3-1b", "seq_len": 8192}
    assert training_flops_per_token(LLAMA_SIZES["llama3-1b"], 8192) == pytest.approx(1.0636e10,
                                                                                    rel=1e-4)
    assert training_flops_per_sample(one_b) / 1e9 == pytest.approx(8.713e4, rel=1e-4)
    older = training_flops_per_token(LLAMA_SIZES["llama3-1b"], 8192, tied_output_counted=False)
    assert older == pytest.approx(9.06e9, rel=1e-3)
    eight_b = LLAMA_SIZES["llama3-8b"]
    assert training_flops_per_token(eight_b, 8192) == training_flops_per_token(eight_b, 8192,
                                                                               False)
    key = cost_key("llama", one_b)
    assert formula_costs([("llama", one_b)])[key]["source"] == FLOPS_FORMULA
    before = formula_costs([("llama", one_b)], FLOPS_FORMULA_BEFORE_4ED3C536)[key]
    assert before["flops_per_sample"] == older * 8192
    assert before["source"] == FLOPS_FORMULA_BEFORE_4ED3C536


def test_training_step_lowers_the_loss_and_is_causal() -> None:
    torch.manual_seed(0)
    opts = options()
    model = build_model("llama", opts)
    batch = synthetic_batch("llama", opts, 2, "cpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        loss = training_loss("llama", model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0]
    with torch.no_grad():  # changing the last token changes no earlier position's logits
        tokens = batch["tokens"].clone()
        before = model(tokens)
        tokens[:, -1] = (tokens[:, -1] + 1) % LLAMA_SIZES["llama-tiny"].vocab_size
        after = model(tokens)
    assert torch.equal(before[:, :-1], after[:, :-1])
    assert not torch.equal(before[:, -1], after[:, -1])


@pytest.mark.parametrize("mode", ["selective", "full"])
def test_activation_checkpointing_keeps_the_math(mode: str) -> None:
    """Recomputing activations changes memory, not the loss or the gradients."""
    grads = {}
    for checkpointing in ("none", mode):
        torch.manual_seed(0)
        opts = options(activation_checkpointing=checkpointing)
        model = build_model("llama", opts)
        torch.manual_seed(1)
        batch = synthetic_batch("llama", opts, 2, "cpu")
        loss = training_loss("llama", model, batch)
        loss.backward()
        grads[checkpointing] = (float(loss.detach()), [p.grad.clone() for p in model.parameters()])
    (loss_a, grads_a), (loss_b, grads_b) = grads.values()
    assert loss_a == loss_b
    for a, b in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(
    ("model", "opts", "ranks", "field"),
    [
        ("llama", {"llama_size": "llama3-9b"}, 1, "llama_size"),
        ("llama", {"llama_size": "llama-tiny", "seq_len": 4096}, 1, "seq_len"),
        ("llama", {"seq_len": 1}, 1, "seq_len"),
        ("llama", {"parallelism": "pipeline"}, 8, "parallelism"),
        ("llama", {"parallelism": "none"}, 8, "parallelism"),
        ("llama", {"activation_checkpointing": "some"}, 1, "activation_checkpointing"),
        ("bert", {"parallelism": "fsdp"}, 2, "parallelism"),
        ("resnet50", {"parallelism": "hsdp"}, 16, "parallelism"),
        ("resnet50", {"activation_checkpointing": "full"}, 1, "activation_checkpointing"),
    ],
)
def test_bad_case_options_name_the_field(
    model: str, opts: dict[str, Any], ranks: int, field: str
) -> None:
    with pytest.raises(WorkloadOptionError) as caught:
        check_case_options(model, opts, ranks)
    assert caught.value.field == field


def test_script_refuses_before_training_naming_the_field(capsys: pytest.CaptureFixture) -> None:
    """train.py's check (PyTorch.benchmark.parallel) runs before the model is built."""
    opts = {**options(seq_len=4096), "parallelism": "auto", "activation_checkpointing": "none"}
    with pytest.raises(SystemExit) as caught:
        check_llama_parallel("llama", opts, 2)
    assert caught.value.code == 2
    assert "seq_len" in capsys.readouterr().err
    good = {**options(), "parallelism": "auto", "activation_checkpointing": "none"}
    check_llama_parallel("llama", good, 2)
    assert good["parallelism"] == "fsdp"  # resolved as the header records it


MATRIX = """framework: pytorch
suites:
  - model: llama
    topology: [1n1g, 1n8g]
    batch_size: 2
    precision: amp
    variants: {{big: {{llama_size: llama-small, {option}}}}}
"""


@pytest.mark.parametrize(
    ("option", "field"),
    [("seq_len: 8192", "seq_len"), ("parallelism: none", "parallelism")],
)
def test_matrix_refuses_what_the_model_cannot_take(tmp_path: Path, option: str, field: str) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX.format(option=option))
    with pytest.raises(MatrixError) as caught:
        load_matrix(path)
    assert caught.value.field_path.endswith(f"variants.big.{field}"), caught.value.field_path


def test_the_kits_matrix_plans_every_llama_suite() -> None:
    root = Path(__file__).resolve().parents[1]
    matrix = load_matrix(root / "PyTorch" / "matrix.yaml")
    llama = {
        (c.topology.label, c.options["llama_size"]) for c in matrix.cases if c.model == "llama"
    }
    assert ("1n1g", "llama3-1b") in llama
    assert {("1n8g", "llama3-8b"), ("2n16g", "llama3-8b"), ("4n32g", "llama3-8b")} <= llama
    assert ("4n32g", "llama3-70b") in llama
    smoke = load_matrix(root / "PyTorch" / "matrix.yaml", profile="cpu-smoke")
    assert {c.topology.label for c in smoke.cases if c.model == "llama"} == {"1n1g", "1n2g"}


def test_selective_checkpointing_recomputes_part_of_what_full_does() -> None:
    """Backward FLOPs: none recomputes nothing, full every block's forward, selective only
    every other matmul of each block (torchtitan's op-level selection): strictly between."""
    backward = {}
    for checkpointing in ("none", "selective", "full"):
        torch.manual_seed(0)
        opts = options(activation_checkpointing=checkpointing)
        model = build_model("llama", opts)
        with sdpa_kernel(SDPBackend.MATH):  # the recomputation must take the forward's path
            loss = training_loss("llama", model, synthetic_batch("llama", opts, 2, "cpu"))
            with FlopCounterMode(display=False) as counter:
                loss.backward()
        backward[checkpointing] = counter.get_total_flops()
    assert backward["none"] < backward["selective"] < backward["full"], backward
