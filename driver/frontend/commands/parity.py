"""``dlperf parity``: ``dlperf run`` beside a bare loop of the same model (harness cost).

The study itself is ``driver.studies.parity``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from driver.bench.contract import parse_option_value
from driver.frontend.args import bounded_float, bounded_int

MAX_THREADS = 4096  # more than any node's cores: a typo, not a setting
MAX_TIMEOUT_S = 7 * 24 * 3600.0


def _option(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expects KEY=VALUE, got {text!r}")
    return key.replace("-", "_"), parse_option_value(value)


def _count(minimum: int, maximum: int = 10_000_000):  # noqa: ANN202
    return bounded_int(minimum, maximum)


def cmd_parity(args: argparse.Namespace) -> int:
    from driver.files import write_text
    from driver.studies.parity import ParityError, ParityRequest, format_result, run_parity

    request = ParityRequest(
        framework=args.framework,
        model=args.model,
        batch_size=args.batch,
        precision=args.precision,
        variant=args.variant,
        xla=args.xla == "on",
        topology=args.topology,
        profile=args.profile,
        options=dict(args.option or []),
        rounds=args.rounds,
        warmup_steps=args.warmup_steps,
        measured_steps=args.measured_steps,
        threads=args.threads,
        python=args.python,
        results=Path(args.results),
        timeout_s=args.timeout,
        terminal=args.kit_progress == "terminal",
    )
    try:
        result = run_parity(request, progress=lambda line: print(line, flush=True))
    except ParityError as error:
        print(f"parity: {error}", file=sys.stderr)
        return 2
    print(format_result(result))
    if args.json:
        write_text(Path(args.json), result.model_dump_json(indent=2) + "\n")
    return 0


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    parity = sub.add_parser(
        "parity",
        help="`dlperf run` of one case beside a bare loop of the same model with the same "
        "options, alternating (harness cost; on a GPU: the per-step sync's cost)",
    )
    parity.add_argument("--framework", required=True)
    parity.add_argument("--model", default="resnet50")
    parity.add_argument("--batch", type=_count(1), default=8, help="per-process batch size")
    parity.add_argument("--precision", choices=("fp32", "amp"), default="fp32")
    parity.add_argument(
        "--variant", default="default", help="the option variant of the framework's matrix"
    )
    parity.add_argument("--xla", choices=("on", "off"), default="off")
    parity.add_argument(
        "--topology",
        default="1n1g",
        help="1n1g, or 1n<k>g: k processes on this host, the kit's side as dlperf run shards "
        "it, the bare loop under torchrun (the bare Llama loop: FSDP2)",
    )
    parity.add_argument(
        "--profile", default="auto", help="the matrix profile, as for dlperf run (auto: by host)"
    )
    parity.add_argument(
        "--python",
        help="an existing framework install's interpreter for both sides (instead of "
        ".venvs/<framework>)",
    )
    parity.add_argument(
        "--results", default="results", help="the kit's sessions go to RESULTS/parity-<stamp>-..."
    )
    parity.add_argument(
        "--kit-progress",
        choices=("terminal", "plain"),
        default="terminal",
        help="the kit's driver on a pseudo-terminal, with its progress bar (as at a terminal), "
        "or with plain lines (as in CI logs)",
    )
    parity.add_argument("--rounds", type=_count(1), default=5, help="alternating pairs")
    parity.add_argument("--warmup-steps", type=_count(0), default=3)
    parity.add_argument("--measured-steps", type=_count(1), default=12)
    parity.add_argument(
        "--threads", type=_count(0, MAX_THREADS), default=0,
        help="CPU threads of both sides (OMP_NUM_THREADS; 0: the kit's default, which the bare "
        "loop is handed)",
    )  # fmt: skip
    parity.add_argument(
        "--timeout", type=bounded_float(0, MAX_TIMEOUT_S, low_open=True, unit="seconds"),
        default=1800.0, help="seconds per process",
    )  # fmt: skip
    parity.add_argument("--option", type=_option, action="append", metavar="KEY=VALUE")
    parity.add_argument("--json", help="also write the pairs as JSON to this file")
    parity.set_defaults(func=cmd_parity)
