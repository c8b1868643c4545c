"""The command-line contract shared by every framework's benchmark script (stdlib only).

The driver builds one argument list for every framework (``driver.core.command``), so each
script parses its arguments with :func:`parse_benchmark_args` instead of defining its own.
Framework- or model-specific knobs travel as ``--option key=value`` pairs; the well-known ones
are listed in :data:`SHAPE_OPTIONS` so that every framework reads the same names.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any

MODELS = ("resnet50", "inception3", "bert")
PRECISIONS = ("fp32", "amp")
DATASETS = ("synthetic", "real")

# Knobs every framework understands, with their defaults (the full-size models).
SHAPE_OPTIONS: dict[str, Any] = {
    "image_size": None,  # None: 224 for resnet50, 299 for inception3
    "num_classes": 1000,
    "seq_len": 128,
    "vocab_size": 30522,
    "bert_layers": 12,
    "bert_hidden": 768,
    "bert_heads": 12,
    "bert_intermediate": 3072,
    "max_predictions": 20,  # masked positions per sequence for the MLM head
}

DEFAULT_IMAGE_SIZE = {"resnet50": 224, "inception3": 299}


def parse_option_value(text: str) -> Any:
    """``1`` -> 1, ``0.5`` -> 0.5, ``true`` -> True, ``"x"``/``x`` -> 'x' (JSON first)."""
    lowered = text.lower()
    if lowered in ("true", "on", "yes"):
        return True
    if lowered in ("false", "off", "no"):
        return False
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def physical_cores() -> int:
    """Physical cores of this node (hyper-threads counted once), from /proc/cpuinfo."""
    cores: set[tuple[str, str]] = set()
    physical = core = ""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "physical id":
                    physical = value
                elif key == "core id":
                    core = value
                    cores.add((physical, core))
    except OSError:
        pass
    return len(cores) or os.cpu_count() or 1


def resolve_loader_workers(value: str | int) -> int:
    """The Dell guide's default: physical cores per device on this node minus 4, at least 1."""
    if str(value) != "auto":
        workers = int(value)
        if workers < 0:
            raise SystemExit(f"--loader-workers must be >= 0 or auto, got {value}")
        return workers
    local_procs = int(
        os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("DLPERF_NPROC_PER_NODE") or 1
    )
    return max(1, physical_cores() // max(1, local_procs) - 4)


def _option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--option expects KEY=VALUE, got {text!r}")
    return key.replace("-", "_"), parse_option_value(value)


def build_parser(
    description: str = "dlperf benchmark", models: Sequence[str] = MODELS
) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", choices=tuple(models), required=True)
    parser.add_argument("--batch-size", type=int, required=True, help="per device")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32")
    parser.add_argument(
        "--amp-dtype",
        choices=("auto", "bf16", "fp16"),
        default="auto",
        help="auto: bf16 on CPU; the framework's best on GPU",
    )
    parser.add_argument("--xla", choices=("on", "off"), default="off")
    parser.add_argument("--dataset", choices=DATASETS, default="synthetic")
    parser.add_argument("--data-dir", default=None, help="real data: ImageNet folder / shards")
    parser.add_argument("--warmup-steps", type=int, default=20)
    parser.add_argument("--total-steps", type=int, required=True)
    parser.add_argument(
        "--loader-workers",
        default="auto",
        help="data-loader workers per process; auto: physical cores per device minus 4 (>= 1)",
    )
    parser.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument(
        "--option",
        type=_option,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="framework/model knob, repeatable (e.g. channels_last=true, bert_layers=2)",
    )
    return parser


def parse_benchmark_args(
    argv: Sequence[str] | None = None,
    description: str = "dlperf benchmark",
    models: Sequence[str] = MODELS,
) -> argparse.Namespace:
    """Parse the shared arguments; ``args.options`` holds shape defaults merged with overrides."""
    args = build_parser(description, models).parse_args(argv)
    if args.batch_size <= 0:
        raise SystemExit(f"--batch-size must be positive, got {args.batch_size}")
    if args.total_steps <= 0:
        raise SystemExit(f"--total-steps must be positive, got {args.total_steps}")
    if args.dataset == "real" and not args.data_dir:
        raise SystemExit("--dataset real needs --data-dir")
    args.loader_workers = resolve_loader_workers(args.loader_workers)
    options = dict(SHAPE_OPTIONS)
    options.update(dict(args.option))
    options["loader_workers"] = args.loader_workers  # recorded in every header
    if options["image_size"] is None:
        options["image_size"] = DEFAULT_IMAGE_SIZE.get(args.model)
    args.options = options
    return args
