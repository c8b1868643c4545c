"""``dlperf run``: the cases of one or more matrices, run into a session (``run_session`` in
``driver.core.session``)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from driver.bench.contract import OptionPairs
from driver.core.matrix import (
    COMMAND_LINE,
    DLPERF_PROFILE,
    MAX_CASES,
    MAX_EXPANDED_CASES,
    MatrixError,
    check_case_count,
    overrides_from,
)
from driver.core.session import AUTO, choose_profile, run_session, select_cases
from driver.frameworks.base import FRAMEWORKS
from driver.frontend.args import (
    RESULTS,
    RUNTIME_HELP,
    bounded_int,
    check_session_name,
    csv_items,
    option_pair,
    signing_key_option,
)
from driver.model.case import Case
from driver.runtimes.base import make_runtime
from driver.schema import did_you_mean


def _batches(text: str | None) -> tuple[int | str, ...]:
    """``64,max`` -> (64, "max"); anything else is passed on for the matrix's batch check."""
    return tuple(
        int(i) if i.isascii() and i.isdigit() else i for i in csv_items(text, "--batch", "64,max")
    )


def _precisions(amp: str | None) -> tuple[str, ...]:
    if amp is None:
        return ()
    choices = {"on": ("amp",), "off": ("fp32",), "both": ("fp32", "amp")}
    key = amp.lower()
    words = {"1": "on", "true": "on", "yes": "on", "0": "off", "false": "off", "no": "off"}
    key = words.get(key, key)
    if key not in choices:
        raise MatrixError(COMMAND_LINE, "--amp", f"{amp!r} is not allowed; allowed: on, off, both")
    return choices[key]


def _topologies(nodes: int | None, gpus: int | None) -> tuple[str, ...]:
    """NODES and GPUS (devices per node) from make; either alone keeps the other at 1."""
    if nodes is None and gpus is None:
        return ()
    for flag, value in (("--nodes", nodes), ("--gpus", gpus)):
        if value is not None and value <= 0:
            raise MatrixError(COMMAND_LINE, flag, f"must be a positive count, got {value}")
    nodes = 1 if nodes is None else nodes
    gpus = 1 if gpus is None else gpus
    return (f"{nodes}n{nodes * gpus}g",)


def cmd_run(args: argparse.Namespace) -> int:
    if args.runtime is None:  # a rehearsal's hosts are reached over SSH: the process runtime
        args.runtime = "process" if args.simulated_hosts else "local"
    if args.simulated_hosts:
        from driver.testbed.rehearse import refusal

        refused = refusal(runtime=args.runtime, inventory=args.inventory, dry_run=args.dry_run)
        if refused:
            print(f"error: {refused}", file=sys.stderr)
            return 2
    for name in csv_items(args.framework, "--framework", "pytorch,oneflow"):
        if name not in FRAMEWORKS:
            raise MatrixError(
                COMMAND_LINE,
                "--framework",
                f"{name!r} is not allowed{did_you_mean(name, FRAMEWORKS.names())}; "
                f"allowed values: {', '.join(FRAMEWORKS.names())}",
            )
    matrix_files = [Path(m) for m in args.matrix] or [
        FRAMEWORKS.get(name).matrix_file
        for name in (csv_items(args.framework, "--framework", "pytorch,oneflow") or ("pytorch",))
    ]
    if args.session is not None:
        check_session_name(args.session)
    # Simulated hosts are this machine: its hardware chooses the profile, as for a local run.
    profile, why = choose_profile(args.profile, "local" if args.simulated_hosts else args.runtime)
    overrides = overrides_from(
        {
            "models": csv_items(args.model, "--model", "resnet50,bert"),
            "topologies": _topologies(args.nodes, args.gpus),
            "batch_sizes": _batches(args.batch),
            "precisions": _precisions(args.amp),
            "xla": None if args.xla in (None, "") else args.xla == "on",
            "datasets": csv_items(args.dataset, "--dataset", "synthetic,real"),
            "variants": csv_items(args.variant, "--variant", "default,dali"),
            "repeats": args.repeats,
            "warmup_steps": args.warmup_steps,
            "measured_steps": args.measured_steps,
            "data_dir": args.data_dir,
            "options": dict(args.option or []),
        }
    )
    selection = select_cases(matrix_files, profile, why, overrides)
    check_case_count(len(selection.cases), args.max_cases)
    if not selection.cases:
        print("no case matches the selection", file=sys.stderr)
        return 2
    root = Path(args.results) / (args.session or f"{time.strftime('%Y%m%d-%H%M%S')}-{profile}")
    before_matrix = None
    if args.probe:  # all-reduce bandwidth before the matrix (a diagnosis the release reads)
        from driver.diagnose.probes import probe_topologies

        before_matrix = probe_topologies
    runtime_options = {}
    if args.python is not None:
        runtime_options["python_override"] = framework_python(
            args.python, args.runtime, selection.cases
        )
    session = {
        "argv": sys.argv[1:],
        "dry_run": args.dry_run,
        "progress": args.progress,
        "signing_key": args.signing_key,
        "adopt": args.adopt or [],
    }
    if args.simulated_hosts:
        from driver.testbed.costcurve import MAX_SIMULATED_NODES
        from driver.testbed.rehearse import rehearse

        nodes = max(case.topology.nodes for case in selection.cases)
        if nodes > MAX_SIMULATED_NODES:  # a dry run too: it writes the inventory of them all
            raise MatrixError(
                COMMAND_LINE,
                "--simulated-hosts",
                f"the selection's largest case has {nodes} nodes; this machine simulates at "
                f"most {MAX_SIMULATED_NODES} hosts (one /24 of addresses): narrow --nodes",
            )
        return rehearse(selection, root, before_matrix=before_matrix, **session)
    runtime = make_runtime(args.runtime, inventory=args.inventory, **runtime_options)
    check_data_dirs = getattr(runtime, "check_data_dirs", None)  # a container sees its mounts
    if check_data_dirs:
        check_data_dirs({case.data_dir for case in selection.cases if case.data_dir})
    return run_session(selection, runtime, root, before_matrix=before_matrix, **session)


def framework_python(python: str, runtime: str, cases: list[Case]) -> str:
    """``--python``: the interpreter that runs the selected frameworks' scripts on this host,
    checked to start and to import each of them (local runtime only)."""
    from driver.runtimes.base import RuntimeConfigError
    from driver.runtimes.local import check_framework_python

    if runtime != "local":
        raise RuntimeConfigError(
            f"--python goes with --runtime local (this host); the nodes of --runtime {runtime} "
            "name their interpreter in the inventory"
        )
    frameworks = [FRAMEWORKS.get(name) for name in sorted({case.framework for case in cases})]
    return check_framework_python(python, frameworks)


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="run cases of one or more case matrices")
    run.add_argument("--framework", help="comma-separated frameworks (default pytorch)")
    run.add_argument("--matrix", action="append", default=[], help="a matrix file (repeatable)")
    run.add_argument(
        "--profile", default=AUTO, help=f"'{DLPERF_PROFILE}', a profile of the matrix, or '{AUTO}'"
    )
    run.add_argument("--model", help="comma-separated models")
    run.add_argument("--nodes", type=int)
    run.add_argument("--gpus", type=int, help="devices (processes on CPU) per node")
    run.add_argument("--batch", help="per-device batch sizes, comma-separated, or max")
    run.add_argument("--amp", help="on, off or both")
    run.add_argument("--xla", choices=("on", "off"))
    run.add_argument("--dataset", help="synthetic and/or real")
    run.add_argument("--data-dir")
    run.add_argument("--variant", help="comma-separated option variants of the matrix")
    run.add_argument("--repeats", type=int)
    run.add_argument("--warmup-steps", type=int)
    run.add_argument("--measured-steps", type=int)
    run.add_argument("--option", type=option_pair, action=OptionPairs, metavar="KEY=VALUE",
                     help="a framework option (repeatable, each key once)")  # fmt: skip
    run.add_argument(
        "--runtime", help=f"{RUNTIME_HELP}; default local, or process with --simulated-hosts"
    )
    run.add_argument(
        "--progress", choices=("auto", "plain", "rich"), default="auto",
        help="a progress bar with ETA on a terminal (auto), or one line per repeat with the "
        "ETA (plain: CI logs)",
    )  # fmt: skip
    run.add_argument("--inventory", help="cluster inventory YAML (see docs/clusters.md)")
    run.add_argument(
        "--python",
        metavar="PATH",
        help="an interpreter with the framework already installed (e.g. a GPU machine's own "
        "python3 with its CUDA build of torch); the local runtime runs the scripts with it "
        "instead of .venvs/<framework>",
    )
    run.add_argument(
        "--simulated-hosts", action="store_true",
        help="rehearse the cases on N simulated hosts of this machine (N: the largest case's "
        "nodes; each its own address, hostname and clock; root; --runtime process), removed "
        "at the end (docs/clusters.md)",
    )  # fmt: skip
    run.add_argument("--results", default=str(RESULTS))
    run.add_argument("--session", help="session name; an existing one is resumed")
    run.add_argument(
        "--adopt",
        action="append",
        metavar="PATH",
        help="resuming: vouch for this file or folder of the session although its seal does "
        "not cover it as it is (shown, and recorded in the seal as adopted, not measured); "
        "repeatable",
    )
    run.add_argument("--dry-run", action="store_true", help="print cases and commands only")
    run.add_argument(
        "--max-cases", type=bounded_int(1, MAX_EXPANDED_CASES), default=MAX_CASES, metavar="N",
        help=f"run a selection of more than {MAX_CASES} cases (default: refused as a likely "
        "typo)",
    )  # fmt: skip
    run.add_argument(
        "--probe", action="store_true",
        help="time an all-reduce per multi-device topology first (scaling bounds in releases)",
    )  # fmt: skip
    signing_key_option(run, "the session's manifest when the run ends")
    run.set_defaults(func=cmd_run)
