"""The command line and the result line every framework's bare loop shares (stdlib only).

A bare loop (``<Framework>/bare_loop.py``) is the plain training loop anyone would write without
the kit: build the model, one synthetic batch, forward/backward/step, a timer around whole steps,
one host sync at the end. ``dlperf parity`` (``driver.studies.parity``) runs it beside the kit's
``dlperf run`` to show the harness's cost. Nothing of the harness (``driver.bench``) is used
here or in the loops: they share with the kit only the model definitions.

Every option that changes the computation reaches a loop as ``--option key=value`` (a JSON value
or a bare word): ``dlperf parity`` hands over each one the kit's header records. A loop declares
the options it mirrors with its own defaults (what it does when run by hand) and refuses, with a
one-line reason, any other option or a value it cannot apply. Its result line says what it
applied, read back from the framework where the framework tells (the device a parameter is on,
the dtype autocast produced, the optimizer's fused flag, ...), so that parity compares what ran
on both sides and not what was asked.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

TAG = "dlperf-bare"  # the key of the one result line a bare loop prints
BARE_MODELS = ("resnet50", "llama")  # the models a bare loop trains (Llama: PyTorch only)
# The options every loop mirrors, and their defaults when it is run by hand (the kit's).
COMMON_OPTIONS: dict[str, Any] = {
    "image_size": 224,
    "num_classes": 1000,
    "optimizer": "sgd",  # sgd (momentum) | adamw
    "lr": None,  # None: sgd 0.1 x batch / 256, adamw 1e-4
    "momentum": 0.9,
    "weight_decay": None,  # None: sgd 1e-4, adamw 0.01; never on biases and norm weights
    "grad_clip": 0.0,  # max global gradient norm; 0: off
    "zero_init_residual": False,
    "num_threads": 0,  # 0: OMP_NUM_THREADS, else every core
    "seed": 1234,
    "xla": False,
}
# A reason a value cannot be mirrored, or None when it can.
Refusal = Callable[[Any], "str | None"]
OPTIONS_TAG = "dlperf-bare-options"  # --check-options: the line with the options it would apply


def positive(value: Any) -> str | None:
    return None if value > 0 else "expected a positive integer"


COMMON_REFUSALS: dict[str, Refusal] = {"image_size": positive, "num_classes": positive}


def option_value(text: str) -> Any:
    """``--option`` values as the kit writes them: JSON (``true``, ``0.1``, ``null``), else the
    word itself (``fused``, ``default``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _type_error(key: str, value: Any, default: Any) -> str | None:
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "expected true or false"
    if isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return None
        return "expected a positive integer" if default else "expected a whole number >= 0"
    if isinstance(default, float) or key in ("lr", "weight_decay"):
        ok = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))
        return None if ok and (value is None or value >= 0) else "expected a number >= 0"
    if isinstance(default, str):
        return None if isinstance(value, str) else "expected a word"
    return None


def _given_options(
    parser: argparse.ArgumentParser,
    framework: str,
    given: list[str],
    options: Mapping[str, Any],
    refusals: Mapping[str, Refusal] | None,
) -> dict[str, Any]:
    """The ``--option KEY=VALUE`` values given, each one the loop mirrors, of its default's
    type and not refused; else the parser's error (exit 2)."""
    values: dict[str, Any] = {}
    for text in given:
        key, sep, raw = text.partition("=")
        key = key.replace("-", "_")
        if not sep or not key:
            parser.error(f"--option {text!r}: expected KEY=VALUE")
        if key not in options:
            parser.error(
                f"--option {key}: the bare {framework} loop does not mirror {key!r} (it mirrors "
                f"{', '.join(sorted(options))}); run the kit alone for it"
            )
        value = option_value(raw)
        problem = _type_error(key, value, options[key])
        refusal = {**COMMON_REFUSALS, **(refusals or {})}.get(key)
        if problem is None and refusal is not None:
            problem = refusal(value)
        if problem:
            parser.error(f"--option {key}={raw}: {problem}")
        values[key] = value
    return values


def _resolve_optimizer(
    parser: argparse.ArgumentParser, merged: dict[str, Any], batch_size: int
) -> None:
    """The optimizer's learning rate and weight decay where left to it, as numbers."""
    if merged.get("optimizer") not in ("sgd", "adamw"):
        parser.error(f"--option optimizer={merged.get('optimizer')}: expected sgd or adamw")
    sgd = merged["optimizer"] == "sgd"
    if merged.get("lr") is None:
        merged["lr"] = 0.1 * batch_size / 256 if sgd else 1e-4
    if merged.get("weight_decay") is None:
        merged["weight_decay"] = 1e-4 if sgd else 0.01
    for key in ("lr", "momentum", "weight_decay", "grad_clip"):
        if key in merged:
            merged[key] = float(merged[key])


def parse_args(
    framework: str,
    argv: list[str] | None = None,
    *,
    options: Mapping[str, Any],
    refusals: Mapping[str, Refusal] | None = None,
) -> argparse.Namespace:
    """``--model --batch-size --precision --warmup-steps --steps --option k=v``.

    ``options``: what the loop mirrors, with its defaults (:data:`COMMON_OPTIONS` and its own);
    ``refusals``: per option, the reason a value cannot be applied (None: it can). Any other
    option, or a value of the wrong type, ends the loop with a one-line reason (exit 2).
    ``args.options`` holds the defaults merged with the given options (``lr`` and
    ``weight_decay`` resolved), ``args.threads`` the CPU threads (the ``num_threads`` option,
    else OMP_NUM_THREADS, else every core).
    """
    parser = argparse.ArgumentParser(
        prog=f"{framework}/bare_loop.py", description=f"bare {framework} training loop"
    )
    parser.add_argument("--model", choices=BARE_MODELS, required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--precision", choices=("fp32", "amp"), default="fp32")
    parser.add_argument("--warmup-steps", type=int, default=3)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--check-options",
        action="store_true",
        help="print the options this loop would apply (or refuse) and exit, before loading the "
        "framework",
    )
    args = parser.parse_args(argv)
    if args.batch_size <= 0 or args.steps <= 0 or args.warmup_steps < 0:
        parser.error("--batch-size and --steps must be positive, --warmup-steps >= 0")
    merged = {**options, **_given_options(parser, framework, args.option, options, refusals)}
    _resolve_optimizer(parser, merged, args.batch_size)
    args.options = merged
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if int(merged.get("num_threads") or 0) > 0:
        args.threads = int(merged["num_threads"])
    else:
        args.threads = int(threads) if threads.isdigit() and int(threads) > 0 else os.cpu_count()
    if args.check_options:
        print(json.dumps({OPTIONS_TAG: framework, "options": merged}, sort_keys=True))
        sys.exit(0)
    return args


def only(allowed: Any, reason: str) -> Refusal:
    """A refusal for options a loop mirrors at one value only (``cuda_graphs``: false)."""
    return lambda value: None if value == allowed else reason


def print_result(
    framework: str,
    args: argparse.Namespace,
    *,
    seconds: float,
    cpu_seconds: float | None = None,
    parameters: int,
    device: str,
    loss: float,
    applied: Mapping[str, Any],
    world_size: int = 1,
) -> None:
    """The one line ``dlperf parity`` reads: the measured steps' time (and the process's CPU
    time over them), what ran, and the options as applied. Several ranks: the slowest rank's
    time, every rank's CPU time, ``world_size`` ranks of ``batch_size`` each."""
    record = {
        TAG: framework,
        "model": args.model,
        "batch_size": args.batch_size,
        "precision": args.precision,
        "threads": args.threads,
        "device": device,
        "parameters": int(parameters),
        "warmup_steps": args.warmup_steps,
        "steps": args.steps,
        "world_size": world_size,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "loss": loss,
        "applied": dict(applied),
    }
    sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
    sys.stdout.flush()
