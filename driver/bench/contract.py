"""The contract between the driver and every benchmark script: arguments and shared knobs.

stdlib only (it runs inside framework environments). The driver builds one argument list for
every framework (``driver.core.command``), and :func:`driver.bench.loop.run_benchmark` parses it
with :func:`parse_benchmark_args`. Framework- or model-specific knobs travel as
``--option key=value`` pairs; the shape knobs every framework reads are :data:`SHAPE_OPTIONS`,
the training knobs every framework resolves the same way are :data:`TRAINING_OPTIONS`
(:func:`resolve_options`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from driver.bench.host import resolve_loader_workers
from driver.workloads.base import default_image_size, find_workload, framework_models, shape_options

PRECISIONS = ("fp32", "amp")
DATASETS = ("synthetic", "real")

# The models the scripts build and the shape knobs every framework understands, with their
# defaults (the full-size models): each workload's own (driver/workloads/).
MODELS = framework_models()
SHAPE_OPTIONS: dict[str, Any] = shape_options()

# Training knobs shared by the frameworks' scripts; None means "depends on the model".
TRAINING_OPTIONS: dict[str, Any] = {
    "optimizer": None,  # sgd (CNNs: momentum 0.9) | adamw (BERT)
    "lr": None,  # sgd: 0.1 x global batch / 256 (Goyal et al.); adamw: 1e-4
    "momentum": 0.9,
    "weight_decay": None,  # sgd: 1e-4, adamw: 0.01; never on biases and norm weights
    "grad_clip": None,  # max global gradient norm, 0 = off ("W/O clip" rows); BERT 1.0, CNNs 0
    "num_threads": 0,  # CPU threads per process; 0 = OMP_NUM_THREADS, else cores / local procs
    "dali": False,  # NVIDIA DALI input pipeline: GPU and real data only
    "weights_checksum": False,  # print sum(|w|) per rank at the end (tests: ranks in sync?)
    # When the device is synchronised for a step timestamp: "every" step (the default: every
    # step's time is the device's), or only at the "boundary" steps of the window (the end of
    # the last warm-up step and of the last step; interior steps are logged unsynced, so the
    # host may queue the next step while the device still runs the last one).
    "step_sync": "every",
}
STEP_SYNC_MODES = ("every", "boundary")


class OptionError(SystemExit):
    """A bad option or option combination: a one-line message and exit status 2 (argparse's)."""

    def __init__(self, message: str, prog: str = "train.py") -> None:
        print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
        super().__init__(2)


def warn(message: str, prog: str = "train.py") -> None:
    print(f"{prog}: warning: {message}", file=sys.stderr, flush=True)


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


def option_pair(text: str) -> tuple[str, Any]:
    """``--option KEY=VALUE`` as an argparse type: (key with '_' for '-', parsed value)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--option expects KEY=VALUE, got {text!r}")
    return key.replace("-", "_"), parse_option_value(value)


class OptionPairs(argparse.Action):
    """``--option KEY=VALUE`` (its ``type`` gives the pair), repeatable, into one dict. A key
    given twice is refused: otherwise the last value would win without a word."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        key, value = values
        options = dict(getattr(namespace, self.dest, None) or {})
        if key in options:
            parser.error(
                f"argument {option_string}: {key!r} is given twice ({key}={options[key]!r}, "
                f"then {key}={value!r}); give each option once"
            )
        options[key] = value
        setattr(namespace, self.dest, options)


def build_parser(
    description: str = "dlperf benchmark", models: Sequence[str] | None = None
) -> argparse.ArgumentParser:
    """The shared arguments; ``models``: the workloads the frameworks build, unless given."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", choices=tuple(models or framework_models()), required=True)
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
        type=option_pair,
        action=OptionPairs,
        default={},
        metavar="KEY=VALUE",
        help="framework/model knob, repeatable (e.g. channels_last=true, bert_layers=2)",
    )
    return parser


def parse_benchmark_args(
    argv: Sequence[str] | None = None,
    description: str = "dlperf benchmark",
    models: Sequence[str] | None = None,
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
        options["image_size"] = default_image_size(args.model)
    args.options = options
    return args


def resolve_options(
    args: argparse.Namespace,
    own_options: Mapping[str, Any],
    *,
    world_size: int,
    on_gpu: bool,
) -> dict[str, Any]:
    """The shape options, the shared knobs and the framework's own ones (``own_options``, their
    defaults), merged with ``--option`` and with the model's defaults filled in and checked.

    Only options neither shared nor the framework's own are warned about (they are recorded in
    the header either way).
    """
    resolved = {**TRAINING_OPTIONS, **own_options, **args.options}
    shared = {*TRAINING_OPTIONS, *SHAPE_OPTIONS, "loader_workers"}  # parse_benchmark_args' own
    unknown = sorted(set(resolved) - shared - set(own_options))
    if unknown:
        warn(f"options this script does not use (recorded anyway): {unknown}")
    workload = find_workload(args.model)
    image_model = workload is not None and workload.image_size is not None
    optimizer = resolved["optimizer"] or (workload.optimizer if workload else "adamw")
    if optimizer not in ("sgd", "adamw"):
        raise OptionError(f"optimizer must be sgd or adamw, got {optimizer!r}")
    resolved["optimizer"] = optimizer
    if resolved["lr"] is None:
        resolved["lr"] = 0.1 * args.batch_size * world_size / 256 if optimizer == "sgd" else 1e-4
    if resolved["weight_decay"] is None:
        resolved["weight_decay"] = 1e-4 if optimizer == "sgd" else 0.01
    if resolved["grad_clip"] is None:
        resolved["grad_clip"] = workload.grad_clip if workload else 1.0
    for key in ("lr", "momentum", "weight_decay", "grad_clip"):
        resolved[key] = float(resolved[key])
    if resolved["grad_clip"] < 0:
        raise OptionError(f"grad_clip must be >= 0 (0 = off), got {resolved['grad_clip']}")
    problem = workload.option_problem(resolved) if workload else ""
    if problem:
        raise OptionError(problem)
    resolved["num_threads"] = int(resolved["num_threads"])
    resolved["dali"] = bool(resolved["dali"])
    resolved["weights_checksum"] = bool(resolved["weights_checksum"])
    if resolved["step_sync"] not in STEP_SYNC_MODES:
        raise OptionError(
            f"step_sync must be one of {', '.join(STEP_SYNC_MODES)}, got {resolved['step_sync']!r}"
        )
    if resolved["dali"]:
        if not on_gpu:
            raise OptionError(
                "dali=true needs a GPU: DALI is NVIDIA's GPU input pipeline (no CPU runs)"
            )
        if args.dataset != "real" or not image_model:
            raise OptionError("dali=true applies to real image data (--dataset real)")
    return resolved
