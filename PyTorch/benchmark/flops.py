"""Training FLOPs per sample, counted from the model definitions (no typed-in constants).

The model is built on the ``meta`` device (shapes only: no memory, no arithmetic) and one
training step (forward, loss, backward) of a small batch runs under
``torch.utils.flop_counter.FlopCounterMode``, which adds up the FLOPs of every matmul,
convolution and attention op from their shapes (2 FLOPs per multiply-add). Element-wise work
(BatchNorm, activations, softmax, optimizer update) is not counted, as in the usual convention
(ResNet-50: 2 x 4.1 GMACs forward, x3 with the backward pass).

Usage: ``python -m PyTorch.benchmark.flops resnet50 --option image_size=224``
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from driver.bench.contract import SHAPE_OPTIONS, OptionPairs, option_pair
from driver.workloads.base import default_image_size, in_order
from PyTorch.benchmark.data import synthetic_batch
from PyTorch.benchmark.models import build_model, training_loss

# Two samples, not one: BatchNorm in training mode refuses a single value per channel.
_COUNT_BATCH = 2


def resolved_options(model_name: str, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The shape defaults merged with ``options`` (as ``driver.bench.contract`` resolves them)."""
    merged = {**SHAPE_OPTIONS, **dict(options or {})}
    if merged.get("image_size") is None:
        merged["image_size"] = default_image_size(model_name)
    return merged


def count_training_flops(
    model_name: str, options: Mapping[str, Any] | None = None, batch_size: int = _COUNT_BATCH
) -> dict[str, int]:
    """FLOPs of one training step of ``batch_size`` samples: forward, backward and total."""
    merged = resolved_options(model_name, options)
    with torch.device("meta"):
        model = build_model(model_name, merged)
    model.train()
    batch = synthetic_batch(model_name, merged, batch_size, "meta")
    forward_counter = FlopCounterMode(display=False)
    with forward_counter:
        loss = training_loss(model_name, model, batch)
    backward_counter = FlopCounterMode(display=False)
    with backward_counter:
        loss.backward()
    forward = forward_counter.get_total_flops()
    backward = backward_counter.get_total_flops()
    return {"forward": forward, "backward": backward, "total": forward + backward}


def training_flops_per_sample(model_name: str, options: Mapping[str, Any] | None = None) -> float:
    """Forward + backward FLOPs of one training sample at the shapes in ``options``."""
    return count_training_flops(model_name, options)["total"] / _COUNT_BATCH


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    counted = [workload.name for workload in in_order() if workload.counted]  # no formula
    parser.add_argument("model", choices=counted)
    parser.add_argument(
        "--option", type=option_pair, action=OptionPairs, default={}, metavar="KEY=VALUE"
    )
    args = parser.parse_args(argv)
    options = dict(args.option)
    counts = count_training_flops(args.model, options)
    per_sample = {name: value / _COUNT_BATCH for name, value in counts.items()}
    print(
        json.dumps(
            {
                "model": args.model,
                "options": resolved_options(args.model, options),
                "flops_per_sample": per_sample,
            },
            sort_keys=True,
        )
    )


if __name__ == "__main__":
    main()
