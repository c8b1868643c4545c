"""The command line and the result line every framework's bare loop shares (stdlib only).

A bare loop (``<Framework>/bare_loop.py``) is the plain training loop anyone would write without
the kit: build the model, one synthetic batch, forward/backward/step, a timer around whole steps,
one host sync at the end. ``dlperf parity`` (``driver.studies.parity``) runs it beside the kit's
benchmark script to show the harness's cost. Nothing of the harness (``driver.bench``) is used
here or in the loops: they share with the kit only the model definitions.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

TAG = "dlperf-bare"  # the key of the one result line a bare loop prints
# The options a bare loop applies: the model's shape and the memory format. Anything else would
# make the kit's run differ from the bare loop's, so it is refused.
KNOWN_OPTIONS: dict[str, Any] = {
    "image_size": 224,
    "num_classes": 1000,
    "channels_last": False,
}
FLAG_WORDS = {"1": True, "true": True, "on": True, "yes": True,
              "0": False, "false": False, "off": False, "no": False}  # fmt: skip


def _value(key: str, text: str, parser: argparse.ArgumentParser) -> Any:
    default = KNOWN_OPTIONS[key]
    if isinstance(default, bool):
        if text.lower() not in FLAG_WORDS:
            parser.error(f"--option {key}={text}: expected true or false")
        return FLAG_WORDS[text.lower()]
    if not text.isdigit() or int(text) <= 0:
        parser.error(f"--option {key}={text}: expected a positive integer")
    return int(text)


def parse_args(
    framework: str, argv: list[str] | None = None, *, layouts: bool = False
) -> argparse.Namespace:
    """``--model --batch-size --precision --warmup-steps --steps --option k=v``; ``args.options``
    holds :data:`KNOWN_OPTIONS` merged with the given ones, ``args.threads`` the CPU threads
    (OMP_NUM_THREADS, as the parity command sets it for both sides; else every core).
    ``layouts``: the loop can run channels_last (else channels_last=true is refused)."""
    parser = argparse.ArgumentParser(
        prog=f"{framework}/bare_loop.py", description=f"bare {framework} training loop"
    )
    parser.add_argument("--model", choices=("resnet50",), required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--precision", choices=("fp32", "amp"), default="fp32")
    parser.add_argument("--warmup-steps", type=int, default=3)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    if args.batch_size <= 0 or args.steps <= 0 or args.warmup_steps < 0:
        parser.error("--batch-size and --steps must be positive, --warmup-steps >= 0")
    options = dict(KNOWN_OPTIONS)
    for text in args.option:
        key, sep, value = text.partition("=")
        key = key.replace("-", "_")
        if not sep or key not in KNOWN_OPTIONS:
            parser.error(
                f"--option {text!r}: a bare loop applies only {', '.join(sorted(KNOWN_OPTIONS))}"
                " (KEY=VALUE); run the kit alone for other options"
            )
        options[key] = _value(key, value, parser)
    if options["channels_last"] and not layouts:
        parser.error(f"--option channels_last=true: the {framework} benchmark has no such option")
    args.options = options
    threads = os.environ.get("OMP_NUM_THREADS", "")
    args.threads = int(threads) if threads.isdigit() and int(threads) > 0 else os.cpu_count() or 1
    return args


def print_result(
    framework: str,
    args: argparse.Namespace,
    *,
    seconds: float,
    parameters: int,
    device: str,
    loss: float,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """The one line ``dlperf parity`` reads: the measured steps' time and what ran."""
    record = {
        TAG: framework,
        "model": args.model,
        "batch_size": args.batch_size,
        "precision": args.precision,
        "options": args.options,
        "threads": args.threads,
        "device": device,
        "parameters": int(parameters),
        "warmup_steps": args.warmup_steps,
        "steps": args.steps,
        "seconds": seconds,
        "loss": loss,
        **dict(extra or {}),
    }
    sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
    sys.stdout.flush()
