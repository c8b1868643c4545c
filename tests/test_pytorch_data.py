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
    ImageFolderDataset,
    collate_images,
    find_images,
    random_resized_crop_box,
)
from PyTorch.benchmark.make_fake_imagenet import make_fake_imagenet


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
