"""PyTorch input pipelines: crops, the fake ImageNet folder, BERT shards, options and OOM."""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

# The PyTorch package lives at the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from driver.bench.contract import parse_benchmark_args, resolve_options
from PyTorch.benchmark import train
from PyTorch.benchmark.data import (
    BertShardDataset,
    ImageFolderDataset,
    collate_images,
    find_images,
    random_resized_crop_box,
    read_bert_shards,
)
from PyTorch.benchmark.make_bert_shards import (
    CLS,
    MASK,
    SEP,
    WordPiece,
    build_vocab,
    make_bert_shards,
)
from PyTorch.benchmark.make_fake_imagenet import make_fake_imagenet
from PyTorch.benchmark.models.bert import IGNORE_INDEX

CORPUS = """The quick brown fox jumps over the lazy dog.
A second sentence follows the first one here.
Benchmarks measure training throughput in samples per second.

Another document starts after a blank line.
It has sentences about convolutional networks and transformers.
Every step logs a timestamp after a device synchronisation.
Throughput comes from the timestamps of the measured window.

A third document is short.
"""


def test_random_resized_crop_box_stays_inside_the_image() -> None:
    rng = random.Random(0)
    for width, height in ((500, 375), (40, 300), (300, 40), (7, 7)):
        for _ in range(200):
            left, top, w, h = random_resized_crop_box(width, height, rng)
            assert min(left, top) >= 0 and w > 0 and h > 0
            assert left + w <= width and top + h <= height


def test_fake_imagenet_decodes_to_crops(tmp_path: Path) -> None:
    make_fake_imagenet(tmp_path, classes=3, per_class=2)
    samples, classes = find_images(tmp_path)
    assert len(samples) == 6 and classes == sorted(classes) and len(classes) == 3
    dataset = ImageFolderDataset(str(tmp_path), image_size=24, normalize=False)
    pixels, label = dataset[5]
    assert pixels.shape == (24, 24, 3) and pixels.dtype == np.uint8 and label == 2
    batch = collate_images([dataset[0], dataset[1]])
    assert batch["images"].shape == (2, 3, 24, 24)
    assert batch["images"].is_contiguous(memory_format=torch.channels_last)
    normalized, _ = ImageFolderDataset(str(tmp_path), 24, normalize=True)[0]
    assert normalized.dtype == np.float32 and abs(float(normalized.mean())) < 3


def test_wordpiece_splits_unknown_words_into_known_pieces() -> None:
    vocab = build_vocab(["the cat sat", "the cat"], size=200)
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer = WordPiece(vocab)
    ids = tokenizer.encode("The cats!")
    pieces = [vocab[i] for i in ids]
    assert pieces == ["the", "cat", "##s", "[UNK]"]  # "!" never seen: unknown


def test_bert_shards_follow_the_format(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS * 3, encoding="utf-8")
    paths = make_bert_shards(
        [corpus], tmp_path / "shards", seq_len=32, max_predictions=5, shard_size=8, dupe_factor=2
    )
    assert len(paths) >= 2 and (tmp_path / "shards" / "vocab.txt").exists()
    arrays, meta = read_bert_shards(tmp_path / "shards")
    assert meta["seq_len"] == 32 and meta["max_predictions"] == 5
    ids, mask, segments = arrays["input_ids"], arrays["input_mask"], arrays["segment_ids"]
    assert ids.shape[1] == 32 and arrays["masked_lm_positions"].shape[1] == 5
    assert set(np.unique(arrays["next_sentence_labels"])) <= {0, 1}
    for row in range(len(ids)):
        length = int(mask[row].sum())
        assert ids[row, 0] == CLS and ids[row, length - 1] == SEP
        assert not ids[row, length:].any() and not mask[row, length:].any()
        assert segments[row, 0] == 0 and segments[row, length - 1] == 1
        labels = arrays["masked_lm_ids"][row]
        real = labels != IGNORE_INDEX
        positions = arrays["masked_lm_positions"][row][real]
        assert 1 <= real.sum() <= 5 and (np.diff(positions) > 0).all()
        assert all(0 < p < length for p in positions)
        assert all(ids[row, p] not in (CLS, SEP) for p in positions)
    masked_share = np.mean(
        [ids[r, p] == MASK for r in range(len(ids)) for p in arrays["masked_lm_positions"][r][:1]]
    )
    assert masked_share > 0.5  # ~80% of the predictions are [MASK]
    options = {"seq_len": 32, "max_predictions": 5, "vocab_size": meta["vocab_size"]}
    batch = BertShardDataset(str(tmp_path / "shards"), options)[[0, 1, 2]]
    assert batch["input_ids"].dtype == torch.int64 and batch["input_ids"].shape == (3, 32)
    with pytest.raises(ValueError, match="seq_len"):
        BertShardDataset(str(tmp_path / "shards"), {**options, "seq_len": 64})


def resolved(args: argparse.Namespace, world_size: int) -> dict[str, Any]:
    """The options as run_benchmark resolves them for PyTorch on the CPU, then checks them."""
    options = resolve_options(args, train.PYTORCH_OPTIONS, world_size=world_size, on_gpu=False)
    train.check_options(args, options, torch.device("cpu"))
    return options


def test_options_get_model_defaults_and_reject_bad_combinations() -> None:
    cpu = torch.device("cpu")
    args = parse_benchmark_args(["--model", "bert", "--batch-size", "4", "--total-steps", "1"])
    options = resolved(args, world_size=1)
    assert options["optimizer"] == "adamw" and options["grad_clip"] == 1.0
    assert options["channels_last"] is False  # PyTorch's own knobs come with their defaults
    args = parse_benchmark_args(["--model", "resnet50", "--batch-size", "64", "--total-steps", "1"])
    options = resolved(args, world_size=4)
    assert options["optimizer"] == "sgd" and options["lr"] == pytest.approx(0.1)
    graphs = ["--model", "resnet50", "--batch-size", "2", "--total-steps", "1"]
    args = parse_benchmark_args([*graphs, "--option", "cuda_graphs=true"])
    with pytest.raises(SystemExit):
        resolved(args, world_size=1)
    with pytest.raises(SystemExit):
        train.resolve_amp_dtype("amp", "fp16", cpu)
    assert train.resolve_amp_dtype("amp", "auto", cpu) == torch.bfloat16
    assert train.resolve_amp_dtype("fp32", "auto", cpu) is None


def test_out_of_memory_errors_are_recognised() -> None:
    assert train.EXIT_OOM == 86
    assert train.is_out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to"))
    assert train.is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you"))
    assert train.is_out_of_memory(RuntimeError("CUDA error: out of memory"))
    assert not train.is_out_of_memory(RuntimeError("shape mismatch"))
