"""``dlperf import-logs``: re-measure logs the kit did not launch (``driver.core.importlogs``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from driver.core.importlogs import check_new_logs, check_target, import_run
from driver.core.session import seal_finished
from driver.files import sha256_bytes
from driver.frontend.args import RESULTS, check_session_name
from driver.model.seal import configured_signer
from driver.parsers._runheader import LOGGING_MODES
from driver.signing import SigningError
from driver.sources.logfacts import FACT_FLAGS, ImportLogsError, load_facts


def expand(paths: list[str]) -> list[Path]:
    """Files in the given order; a folder gives its files sorted by name (node0.log, ...)."""
    files: list[Path] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.is_file())
        elif path.is_file():
            files.append(path)
        else:
            raise ImportLogsError(f"{path}: no such log file or folder")
    if not files:
        raise ImportLogsError(f"{', '.join(paths)}: no log files")
    return files


def _sha256(path: Path) -> str:
    try:
        return sha256_bytes(path.read_bytes())
    except OSError as error:
        raise ImportLogsError(f"{path}: cannot read it ({error.strerror})") from None


def cmd_import_logs(args: argparse.Namespace) -> int:
    overrides = {field: getattr(args, flag) for flag, field in FACT_FLAGS.items()}
    session = Path(args.results) / check_session_name(args.session)
    try:
        facts = load_facts(Path(args.facts) if args.facts else None, overrides)
        runs = [expand(group) for group in args.logs]
        every = [path for logs in runs for path in logs]
        check_new_logs(every, [_sha256(path) for path in every], {})  # nothing half-imported
        check_target(session, configured_signer())  # its own kind, only what its seal holds
        for logs in runs:
            record = import_run(session, args.source, facts, logs)
            measured = record.measurement
            kind = " (reported by the source)" if measured.reported_by_source else ""
            print(
                f"{record.case_id} repeat {record.repeat}: {measured.throughput:.2f} "
                f"samples/s{kind}; {record.extra['imported']}"
            )
        sealed = seal_finished(session)
    except (ImportLogsError, SigningError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"session: {session}  (dlperf report {session})")
    return 0 if sealed else 1


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "import-logs", help="re-measure logs the kit did not launch (facts instead of a header)"
    )
    parser.add_argument("--source", required=True, help="the upstream source that wrote them")
    parser.add_argument(
        "--logs",
        nargs="+",
        action="append",
        required=True,
        metavar="FILE|DIR",
        help="one run's logs in node order (a folder: its files by name); repeat for more runs",
    )
    parser.add_argument("--facts", help="YAML mapping of the facts below")
    parser.add_argument("--model")
    parser.add_argument("--topology", help="<nodes>n<total devices>g, e.g. 2n16g")
    parser.add_argument("--batch", type=int, help="per-device batch")
    parser.add_argument("--precision", choices=("fp32", "amp"))
    parser.add_argument("--dataset", choices=("synthetic", "real"))
    parser.add_argument("--xla", action="store_const", const=True, default=None)
    parser.add_argument("--warmup-steps", type=int)
    parser.add_argument("--measured-steps", type=int)
    parser.add_argument(
        "--worker0-only",
        action="store_const",
        const=True,
        default=None,
        help="a multi-node run of which only worker 0's log was kept",
    )
    parser.add_argument("--logging", choices=LOGGING_MODES, help="default: the source's")
    parser.add_argument("--step-offset", type=int, help="default: the source's")
    parser.add_argument("--note", help="where the logs come from (kept in the record)")
    parser.add_argument(
        "--hardware",
        help="what the logs ran on, e.g. 'NVIDIA V100-SXM2-16GB' (default: unknown device)",
    )
    for degree in ("tensor", "pipeline", "context"):
        parser.add_argument(
            f"--{degree}-parallel",
            type=int,
            help=f"the run's {degree}-parallel degree (default 1); --batch is then per "
            "data-parallel replica",
        )
    parser.add_argument("--results", default=str(RESULTS))
    parser.add_argument("--session", required=True, help="session name under --results")
    parser.set_defaults(func=cmd_import_logs)
