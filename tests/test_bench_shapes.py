"""driver.bench.shapes: the model shapes every framework's benchmark reads from its options."""

from __future__ import annotations

import pytest

from driver.bench.contract import SHAPE_OPTIONS
from driver.bench.shapes import BertShape, ImageShape, build_registered


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
