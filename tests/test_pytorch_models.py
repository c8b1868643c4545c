"""The PyTorch models: structure, parameter counts, outputs, losses and counted FLOPs."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

# The PyTorch package lives at the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from PyTorch.benchmark.data import synthetic_batch
from PyTorch.benchmark.flops import (
    count_training_flops,
    resolved_options,
    training_flops_per_sample,
)
from PyTorch.benchmark.models import build_model, count_parameters, training_loss
from PyTorch.benchmark.models.bert import IGNORE_INDEX
from PyTorch.benchmark.models.resnet import Bottleneck


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """Tiny shapes gain nothing from threads, and OpenMP barriers stall on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


TINY_BERT = {
    "bert_layers": 2,
    "bert_hidden": 64,
    "bert_heads": 2,
    "bert_intermediate": 128,
    "seq_len": 16,
    "vocab_size": 100,
    "max_predictions": 4,
}


def meta_model(name: str, **options: object) -> torch.nn.Module:
    """Shapes only, no memory or init cost: enough for structure and parameter counts."""
    with torch.device("meta"):
        return build_model(name, resolved_options(name, options))


def test_resnet50_v15_strides_on_the_3x3_conv() -> None:
    model = meta_model("resnet50")
    for layer, stride in (
        (model.layer1, 1),
        (model.layer2, 2),
        (model.layer3, 2),
        (model.layer4, 2),
    ):
        first = layer[0]
        assert isinstance(first, Bottleneck)
        assert first.conv1.stride == (1, 1), "v1.5 keeps the 1x1 at stride 1"
        assert first.conv2.stride == (stride, stride)
        assert first.downsample is not None and first.downsample[0].stride == (stride, stride)
        assert all(block.conv2.stride == (1, 1) for block in list(layer)[1:])
    assert [len(layer) for layer in (model.layer1, model.layer2, model.layer3, model.layer4)] == [
        3,
        4,
        6,
        3,
    ]


def test_resnet50_parameter_count() -> None:
    assert count_parameters(meta_model("resnet50")) == 25_557_032


def test_resnet50_zero_init_residual() -> None:
    model = build_model("resnet50", resolved_options("resnet50", {"zero_init_residual": True}))
    assert not model.layer1[0].bn3.weight.any()
    assert bool(model.bn1.weight.eq(1).all())


def test_resnet50_trains_at_32px() -> None:
    options = resolved_options("resnet50", {"image_size": 32, "num_classes": 10})
    model = build_model("resnet50", options)
    loss = training_loss("resnet50", model, synthetic_batch("resnet50", options, 2, "cpu"))
    loss.backward()
    assert math.isfinite(loss.item())
    assert model.conv1.weight.grad is not None


def test_inception3_output_shape_at_299() -> None:
    model = build_model("inception3", resolved_options("inception3")).eval()
    with torch.no_grad():
        logits = model(torch.randn(1, 3, 299, 299))
    assert logits.shape == (1, 1000)


def test_inception3_parameter_counts_and_aux_head() -> None:
    assert count_parameters(meta_model("inception3")) == 23_834_568
    with_aux = meta_model("inception3", aux_logits=True)
    assert count_parameters(with_aux) == 27_161_264  # the reference count, aux head included
    logits, aux = with_aux.train()(torch.empty(2, 3, 299, 299, device="meta"))
    assert logits.shape == aux.shape == (2, 1000)
    assert with_aux.eval()(torch.empty(2, 3, 299, 299, device="meta")).shape == (2, 1000)


def test_inception3_trains_at_its_minimum_size() -> None:
    options = resolved_options("inception3", {"image_size": 75, "num_classes": 10})
    model = build_model("inception3", options)
    loss = training_loss("inception3", model, synthetic_batch("inception3", options, 2, "cpu"))
    loss.backward()
    assert math.isfinite(loss.item())


def test_bert_base_parameter_count_with_tied_decoder() -> None:
    model = meta_model("bert")
    assert count_parameters(model) == 110_106_428  # BertForPreTraining, bert-base-uncased


def test_bert_mlm_nsp_loss_uses_sdpa(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    original = torch.nn.functional.scaled_dot_product_attention

    def spy(*args: object, **kwargs: object) -> torch.Tensor:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    options = resolved_options("bert", TINY_BERT)
    model = build_model("bert", options)
    batch = synthetic_batch("bert", options, 3, "cpu")
    batch["masked_lm_ids"][:, -1] = IGNORE_INDEX  # padded prediction slots are ignored
    loss = training_loss("bert", model, batch)
    loss.backward()
    assert math.isfinite(loss.item()) and loss.item() > 0
    assert len(calls) == TINY_BERT["bert_layers"]
    # Weight tying: the decoder is the word embedding, so MLM gradients reach it.
    assert model.embeddings.word.weight.grad is not None
    mlm_logits, nsp_logits = model(
        batch["input_ids"], batch["segment_ids"], batch["input_mask"], batch["masked_lm_positions"]
    )
    assert mlm_logits.shape == (3, TINY_BERT["max_predictions"], TINY_BERT["vocab_size"])
    assert nsp_logits.shape == (3, 2)


def test_bert_padding_is_masked_out_of_attention() -> None:
    options = resolved_options("bert", TINY_BERT)
    model = build_model("bert", options).eval()
    batch = synthetic_batch("bert", options, 2, "cpu")
    batch["input_mask"][:, 10:] = 0
    batch["masked_lm_positions"] = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    args = ("input_ids", "segment_ids", "input_mask", "masked_lm_positions")
    with torch.no_grad():
        mlm_before, nsp_before = model(*(batch[name] for name in args))
        batch["input_ids"][:, 10:] = (batch["input_ids"][:, 10:] + 1) % TINY_BERT["vocab_size"]
        mlm_after, nsp_after = model(*(batch[name] for name in args))
    torch.testing.assert_close(mlm_before, mlm_after)
    torch.testing.assert_close(nsp_before, nsp_after)


def test_resnet50_training_flops_are_counted_near_3x_8_2_gflop() -> None:
    flops = training_flops_per_sample("resnet50", {"image_size": 224})
    assert flops == pytest.approx(3 * 8.2e9, rel=0.10)
    # Counted from the definition, so it follows the shapes: four times the pixels.
    quadruple = training_flops_per_sample("resnet50", {"image_size": 448})
    assert quadruple == pytest.approx(4 * flops, rel=0.01)


def test_flop_counter_splits_forward_and_backward() -> None:
    counts = count_training_flops("bert", TINY_BERT)
    assert counts["total"] == counts["forward"] + counts["backward"]
    assert 1.5 < counts["backward"] / counts["forward"] <= 2.0
