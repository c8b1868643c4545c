"""The ``dlperf`` command line: a thin front end over ``driver.core``."""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from driver.bench.contract import OptionPairs, parse_option_value
from driver.core.matrix import (
    COMMAND_LINE,
    DLPERF_PROFILE,
    MAX_REPEATS,
    MatrixError,
    Overrides,
    UnknownProfile,
    apply_overrides,
    load_matrix,
    overrides_from,
)
from driver.files import KitWriteError, write_text
from driver.frameworks.base import REPO_ROOT
from driver.frontend.args import (
    bounded_float,
    bounded_int,
    check_session_name,
    count_list,
    topology_list,
)
from driver.model.case import Case
from driver.plugins import load_all
from driver.registry import FRAMEWORKS, LAUNCHERS, PARSERS, RUNTIMES, SOURCES, UnknownPlugin
from driver.runtimes.base import RuntimeConfigError
from driver.runtimes.factory import make_runtime
from driver.schema import ConfigError, did_you_mean

if TYPE_CHECKING:
    from driver.cluster.rehearse import Rehearsal
    from driver.runtimes.base import Runtime

AUTO = "auto"
CPU_PROFILE = "cpu-smoke"
DEFAULT_RESULTS = REPO_ROOT / "results"
REHEARSAL_INVENTORY = "simulated-hosts.yaml"  # in the session folder: the hosts a rehearsal made


def _csv(text: str | None) -> tuple[str, ...]:
    return tuple(item.strip() for item in (text or "").split(",") if item.strip())


def _batches(text: str | None) -> tuple[int | str, ...]:
    """``64,max`` -> (64, "max"); anything else is passed on for the matrix's batch check."""
    out: list[int | str] = []
    for item in _csv(text):
        out.append(int(item) if item.isascii() and item.isdigit() else item)
    return tuple(out)


def _precisions(amp: str | None) -> tuple[str, ...]:
    choices = {"on": ("amp",), "off": ("fp32",), "both": ("fp32", "amp"), "": ()}
    key = (amp or "").lower()
    if key in ("1", "true", "yes"):
        key = "on"
    if key in ("0", "false", "no"):
        key = "off"
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


def _check_selection(cases: list, overrides: Overrides) -> None:
    """A --model, --variant, --dataset or --xla that no matrix has is a mistake, not an empty
    selection."""
    xla = () if overrides.xla is None else ("on" if overrides.xla else "off",)
    for flag, asked, known in (
        ("--model", overrides.models, {c.model for c in cases}),
        ("--variant", overrides.variants, {c.variant for c in cases}),
        ("--dataset", overrides.datasets, {c.dataset for c in cases}),
        ("--xla", xla, {"on" if c.xla else "off" for c in cases}),
    ):
        for name in asked:
            if name not in known:
                raise MatrixError(
                    COMMAND_LINE,
                    flag,
                    f"{name!r} is in no selected matrix{did_you_mean(name, known)}; "
                    f"allowed values: {', '.join(sorted(known))}",
                )


def choose_profile(requested: str, runtime: str) -> tuple[str, str]:
    """``auto``: the DLPerf protocol where there are GPUs or a cluster, else the CPU smoke one."""
    if requested != AUTO:
        return requested, "as requested"
    from driver.model.hardware import gpu_names

    if runtime == "local" and not gpu_names():
        return CPU_PROFILE, "no GPU and no cluster inventory: CPU smoke profile"
    return DLPERF_PROFILE, "GPUs or a cluster present: the DLPerf protocol"


def cmd_run(args: argparse.Namespace) -> int:
    if args.runtime is None:  # a rehearsal's hosts are reached over SSH: the process runtime
        args.runtime = "process" if args.simulated_hosts else "local"
    if args.simulated_hosts:
        from driver.cluster.rehearse import refusal

        refused = refusal(runtime=args.runtime, inventory=args.inventory, dry_run=args.dry_run)
        if refused:
            print(f"error: {refused}", file=sys.stderr)
            return 2
    for name in _csv(args.framework):
        if name not in FRAMEWORKS:
            raise MatrixError(
                COMMAND_LINE,
                "--framework",
                f"{name!r} is not allowed{did_you_mean(name, FRAMEWORKS.names())}; "
                f"allowed values: {', '.join(FRAMEWORKS.names())}",
            )
    matrix_files = [Path(m) for m in args.matrix] or [
        FRAMEWORKS.get(name).matrix_file for name in (_csv(args.framework) or ("pytorch",))
    ]
    if args.session is not None:
        check_session_name(args.session)
    # Simulated hosts are this machine: its hardware chooses the profile, as for a local run.
    profile, why = choose_profile(args.profile, "local" if args.simulated_hosts else args.runtime)
    overrides = overrides_from(
        {
            "models": _csv(args.model),
            "topologies": _topologies(args.nodes, args.gpus),
            "batch_sizes": _batches(args.batch),
            "precisions": _precisions(args.amp),
            "xla": None if args.xla in (None, "") else args.xla == "on",
            "datasets": _csv(args.dataset),
            "variants": _csv(args.variant),
            "repeats": args.repeats,
            "warmup_steps": args.warmup_steps,
            "measured_steps": args.measured_steps,
            "data_dir": args.data_dir,
            "options": dict(args.option or []),
        }
    )
    cases = []
    descriptions = {}
    loaded = []
    for path in matrix_files:
        try:
            matrix = load_matrix(path, profile)
        except UnknownProfile as error:
            raise MatrixError(COMMAND_LINE, "--profile", f"{error.path}: {error.message}") from None
        descriptions[str(path)] = matrix.description
        loaded += matrix.cases
        cases += apply_overrides(matrix.cases, overrides)
    _check_selection(loaded, overrides)
    if not cases:
        print("no case matches the selection", file=sys.stderr)
        return 2
    selection = Selection(cases, profile, why, descriptions)
    if args.simulated_hosts:
        return rehearse_selection(args, selection)
    return run_selection(args, selection, make_runtime(args.runtime, inventory=args.inventory))


@dataclass(frozen=True)
class Selection:
    """The cases a ``dlperf run`` selected, and from where (the session records it)."""

    cases: list[Case]
    profile: str
    why: str  # why this profile
    descriptions: dict[str, str]  # matrix file -> its description


def rehearse_selection(args: argparse.Namespace, selection: Selection) -> int:
    """``--simulated-hosts``: the selection on as many simulated hosts as its largest case has
    nodes, through the process runtime; the hosts go at the end, however the run ends."""
    from driver.cluster.inventory import load_inventory
    from driver.cluster.rehearse import simulated_hosts
    from driver.cluster.simhosts import SimulatedHostsError
    from driver.core.envs import ensure_env
    from driver.model.hardware import gpu_names
    from driver.runtimes.process import ProcessRuntime

    frameworks = [FRAMEWORKS.get(name) for name in sorted({c.framework for c in selection.cases})]
    if not args.dry_run:  # the hosts run the local runtime's venvs: made before the hosts
        for framework in frameworks:
            if framework.cpu_requirements.exists():
                ensure_env(framework)
    nodes = max(case.topology.nodes for case in selection.cases)
    devices = max(case.topology.devices_per_node for case in selection.cases)
    try:
        with simulated_hosts(
            nodes, devices, frameworks, start=not args.dry_run, gpus=bool(gpu_names())
        ) as rehearsal:
            # A dry run makes no host: its inventory names a client key that is never made.
            inventory = load_inventory(rehearsal.inventory, check_files=rehearsal.started)
            return run_selection(args, selection, ProcessRuntime(inventory), rehearsal=rehearsal)
    except SimulatedHostsError as error:  # a host that would not start: what it printed
        print(f"error: --simulated-hosts: {' '.join(str(error).split())[:2000]}", file=sys.stderr)
        return 1


def run_selection(
    args: argparse.Namespace,
    selection: Selection,
    runtime: Runtime,
    *,
    rehearsal: Rehearsal | None = None,
) -> int:
    """Run (or, with --dry-run, print) the selected cases on ``runtime``: the session, the
    closing table and the report."""
    from driver.core.envs import ensure_env
    from driver.core.plan import dry_run_plan
    from driver.core.report import markdown_tables
    from driver.core.runner import run_cases
    from driver.core.summary import summarize
    from driver.model.results import Session

    cases, profile, why = selection.cases, selection.profile, selection.why
    # A case that needs more nodes than the inventory has, or that its launcher cannot run
    # where the runtime puts its nodes, is a clear error, up front.
    from driver.core.command import check_placement

    try:
        for case in cases:
            check_placement(case, runtime.node_addresses(case.topology.nodes))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"profile: {profile} ({why}); {len(cases)} case(s); runtime: {runtime.name}")
    if args.dry_run:
        for case in cases:
            searched = case.batch_size == "max"
            batch = 1 if searched else int(case.batch_size)
            note = ", batch searched at run time; shown with 1" if searched else ""
            print(
                f"{case.id}  x{case.repeats}  (warm-up {case.warmup_steps}, "
                f"measured {case.measured_steps}{note})"
            )
            for line in runtime.describe(dry_run_plan(case, runtime, int(batch))):
                print(f"    {line}")
        return 0
    if args.runtime == "local":
        for name in sorted({case.framework for case in cases}):
            framework = FRAMEWORKS.get(name)
            if framework.cpu_requirements.exists():
                ensure_env(framework)
        from driver.sources.pypi import ensure_case_envs

        ensure_case_envs(cases)  # upstream code released on PyPI runs from .venvs/<source>
    session_name = args.session or f"{time.strftime('%Y%m%d-%H%M%S')}-{profile}"
    root = Path(args.results) / session_name
    where: dict[str, object] = {}
    if rehearsal is not None:  # every record names the simulated cluster; the session says more
        where = {"simulated_hosts": rehearsal.facts(root / REHEARSAL_INVENTORY)}
    session = Session.open(
        root,
        {
            "profile": profile,
            "profile_reason": why,
            "matrix_files": sorted(selection.descriptions),
            "runtime": runtime.name,
            "argv": sys.argv[1:],
            **where,
        },
    )
    session.note_run({"argv": sys.argv[1:], "profile": profile, "runtime": runtime.name, **where})
    if rehearsal is not None:
        write_text(session.root / REHEARSAL_INVENTORY, rehearsal.inventory.read_text())
        print(rehearsal.facts(session.root / REHEARSAL_INVENTORY)["note"])
    print(f"session: {session.root}")
    if getattr(args, "probe", False):  # all-reduce bandwidth before the matrix (driver/probes)
        from driver.probes import probe_topologies

        probe_topologies(session.root, runtime, [case.topology for case in cases])
    try:
        summary = run_cases(cases, session, runtime, progress=args.progress)
    except KeyboardInterrupt:
        print(
            f"interrupted; finished repeats are kept in {session.root}; rerun with "
            f"--session {session_name} to resume",
            file=sys.stderr,
        )
        return 130
    from driver.core.report import write_report
    from driver.verify.folder import verify_sessions

    verified = verify_sessions([session.root])  # the table shows what the logs give
    summaries = summarize(verified.records)
    print()
    print(markdown_tables(summaries) if summaries else "no finished repeats")
    try:
        paths = write_report(
            summaries,
            session.root / "report",
            f"dlperf session {session_name}",
            refused=verified.refused,
        )
    except KitWriteError as error:
        print(
            f"error: {error}; every finished repeat is kept in {session.root} (write the "
            f"tables later with `dlperf report {session.root}`)",
            file=sys.stderr,
        )
        return 2
    print(f"report: {paths['markdown']}")
    for problem in verified.refused:
        print(f"refused: {problem}", file=sys.stderr)
    for case_id, repeat, verdict, detail in summary.failed:
        print(f"FAILED {case_id} repeat {repeat}: {verdict} {detail}", file=sys.stderr)
    return 0 if summary.ok and not verified.refused else 1


def cmd_report(args: argparse.Namespace) -> int:
    """Tables from the sessions' raw logs; a repeat whose record disagrees with its logs, or
    whose record or logs cannot be read, is refused: named, left out, and the exit status is 1."""
    from driver.core.report import write_report
    from driver.core.summary import summarize
    from driver.release.imported import figure_summaries, is_import_file
    from driver.schema import ConfigError
    from driver.verify.folder import verify_sessions

    sessions, published = [], []
    for root in args.sessions:
        if is_import_file(Path(root)):
            try:  # published figures, beside the measured cases (marked in every table)
                published += figure_summaries(Path(root))
            except ConfigError as error:
                raise SystemExit(f"error: {error}") from None
        elif (Path(root) / "session.json").exists():
            sessions.append(Path(root))
        else:
            raise SystemExit(
                f"{root}: neither a dlperf session folder (no session.json) nor an import file "
                "of published figures (.csv, .yaml)"
            )
    verified = verify_sessions(sessions)
    summaries = summarize(verified.records, published=published)
    first = Path(args.sessions[0])
    out = (
        Path(args.out)
        if args.out
        else (
            first / "report"
            if sessions and first == sessions[0]
            else first.with_name(f"{first.stem}-report")
        )
    )
    paths = write_report(summaries, out, args.title or "dlperf report", refused=verified.refused)
    print(paths["markdown"].read_text())
    print(f"written: {', '.join(str(p) for p in paths.values())}")
    for problem in verified.refused:
        print(f"refused: {problem}", file=sys.stderr)
    return 1 if verified.refused else 0


def cmd_selftest(args: argparse.Namespace) -> int:
    from driver.core.selftest import DEFAULT_TOPOLOGIES, SelftestError, run_selftest

    if args.nodes:
        return selftest_curve(args)
    if args.devices is not None:
        print("error: selftest: --devices goes with --nodes (devices per simulated host); "
              "without --nodes, give the shape with --topologies", file=sys.stderr)  # fmt: skip
        return 2
    runtime = make_runtime(args.runtime, inventory=args.inventory)
    # A runtime that can tell up front that its cluster does not answer (Slurm: no
    # controller) says so in one line, rather than every calibration repeat failing.
    check_reachable = getattr(runtime, "check_reachable", None)
    if check_reachable is not None:
        check_reachable()
    try:
        results = run_selftest(
            step_time=args.step_time,
            repeats=args.repeats,
            runtime=runtime,
            topologies=args.topologies or DEFAULT_TOPOLOGIES,
        )
    except SelftestError as error:
        print(f"error: selftest: {error}", file=sys.stderr)
        return 1
    return 0 if all(r.passed for r in results) else 1


def selftest_curve(args: argparse.Namespace) -> int:
    """``selftest --nodes 2,4,...``: the calibration case on that many simulated hosts each."""
    from driver.core.costcurve import CostCurveError, refusal, run_cost_curve
    from driver.core.selftest import SelftestError

    clash = [flag for flag, given in (("--inventory", args.inventory),
                                      ("--topologies", args.topologies)) if given]  # fmt: skip
    if clash:
        print(f"error: selftest: --nodes makes its own simulated hosts and runs <N>n<N x devices>g "
              f"on them; drop {' and '.join(clash)}", file=sys.stderr)  # fmt: skip
        return 2
    why = refusal(args.runtime)
    if why:
        print(f"error: selftest --nodes: {why}", file=sys.stderr)
        return 2
    try:
        points = run_cost_curve(
            list(args.nodes), args.runtime, devices=args.devices or 1,
            step_time=args.step_time, repeats=args.repeats,
        )  # fmt: skip
    except (CostCurveError, SelftestError, RuntimeError) as error:
        print(f"error: selftest --nodes: {' '.join(str(error).split())[:2000]}", file=sys.stderr)
        return 1
    return 0 if all(p.result.passed for p in points) else 1


def cmd_list(_args: argparse.Namespace) -> int:
    for title, registry in (
        ("frameworks", FRAMEWORKS),
        ("launchers", LAUNCHERS),
        ("runtimes", RUNTIMES),
        ("log parsers", PARSERS),
        ("sources", SOURCES),
    ):
        print(f"{title}: {', '.join(registry.names()) or '(none)'}")
    return 0


def local_environments() -> dict[str, object]:
    """Every environment the local runtime runs from, by name: each framework with CPU
    requirements (``.venvs/<framework>``) and each upstream source released on PyPI
    (``.venvs/<source>``)."""
    from driver.sources.pypi import PypiSource

    load_all()
    found: dict[str, object] = {}
    for name in FRAMEWORKS.names():
        framework = FRAMEWORKS.get(name)
        if framework.cpu_requirements.exists():
            found[name] = framework
    for name in SOURCES.names():
        source = SOURCES.get(name)()
        if isinstance(source, PypiSource):
            found[source.env.name] = source.env
    return found


def cmd_envs(args: argparse.Namespace) -> int:
    """Create (once) the environments the local runtime needs, so that a run or the test suite
    later finds them made: installation, timed apart from the runs (CI calls it first)."""
    from driver.core.envs import ensure_env

    known = local_environments()
    if args.names is None:
        wanted = list(known)
    else:  # '' or 'a,,b' is a mistake, never "every environment" (gigabytes of installs)
        wanted = [name.strip() for name in args.names.split(",")]
        if not all(wanted):
            raise MatrixError(
                COMMAND_LINE,
                "envs",
                f"{args.names!r} holds an empty environment name; give names (e.g. "
                f"pytorch,tensorflow), or none at all for every one: {', '.join(known)}",
            )
    for name in wanted:
        if name not in known:
            raise MatrixError(
                COMMAND_LINE,
                "envs",
                f"{name!r} is not an environment{did_you_mean(name, known)}; "
                f"known: {', '.join(known)}",
            )
    for name in wanted:
        started = time.monotonic()
        python = ensure_env(known[name], log=print)  # type: ignore[arg-type]
        print(f"{name}: {python} ({time.monotonic() - started:.0f} s)", flush=True)
    return 0


def _option(text: str) -> tuple[str, object]:
    """KEY=VALUE; the name and the value's type are checked against the framework later."""
    key, sep, value = text.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", key):
        raise argparse.ArgumentTypeError(
            f"expects KEY=VALUE with KEY an option name (letters, digits, _), got {text!r}"
        )
    return key, parse_option_value(value)


RUNTIME_HELP = "local, docker, process or slurm (see docs/clusters.md)"
# The selftest's step time: at least 1 ms (32 samples per step stay well within the door's
# plausible throughput per device), at most a minute (its 105 steps per repeat: under 2 hours).
SELFTEST_MIN_STEP_S, SELFTEST_MAX_STEP_S = 0.001, 60.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dlperf", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

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
    run.add_argument(
        "--option",
        type=_option,
        action=OptionPairs,
        metavar="KEY=VALUE",
        help="a framework option (repeatable, each key once)",
    )
    run.add_argument(
        "--runtime", help=f"{RUNTIME_HELP}; default local, or process with --simulated-hosts"
    )
    run.add_argument(
        "--progress",
        choices=("auto", "plain", "rich"),
        default="auto",
        help="a progress bar with ETA on a terminal (auto), or one line per repeat with the "
        "ETA (plain: CI logs)",
    )
    run.add_argument("--inventory", help="cluster inventory YAML (docker/process runtimes)")
    run.add_argument(
        "--simulated-hosts",
        action="store_true",
        help="rehearse the cases on N simulated hosts of this machine (N: the largest case's "
        "nodes; each its own address, hostname and clock; root; --runtime process), removed "
        "at the end (docs/clusters.md)",
    )
    run.add_argument("--results", default=str(DEFAULT_RESULTS))
    run.add_argument("--session", help="session name; an existing one is resumed")
    run.add_argument("--dry-run", action="store_true", help="print cases and commands only")
    run.add_argument(
        "--probe",
        action="store_true",
        help="time an all-reduce per multi-device topology first (scaling bounds in releases)",
    )
    run.set_defaults(func=cmd_run)

    report = sub.add_parser("report", help="tables (Markdown, CSV, JSON) from sessions")
    report.add_argument("sessions", nargs="+", help="session folders, and import files")
    report.add_argument("--out")
    report.add_argument("--title")
    report.set_defaults(func=cmd_report)

    from driver.core.costcurve import MAX_SIMULATED_NODES
    from driver.core.selftest import DEFAULT_TOPOLOGIES

    selftest = sub.add_parser("selftest", help="measure the kit's own error on a known workload")
    selftest.add_argument(
        "--step-time",
        type=bounded_float(SELFTEST_MIN_STEP_S, SELFTEST_MAX_STEP_S, unit="seconds"),
        default=0.02,
        help="the workload's step time in seconds",
    )
    selftest.add_argument("--repeats", type=bounded_int(1, MAX_REPEATS), default=3)
    selftest.add_argument(
        "--topologies", type=topology_list, default=None, metavar="LIST",
        help=f"comma-separated <nodes>n<total devices>g (default: {','.join(DEFAULT_TOPOLOGIES)};"
        " the cluster's shape, e.g. 1n1g,1n8g,2n16g,4n32g)",
    )  # fmt: skip
    selftest.add_argument("--runtime", default="local", help=RUNTIME_HELP)
    selftest.add_argument("--inventory", help="cluster inventory YAML (docker/process runtimes)")
    selftest.add_argument(
        "--nodes",
        type=count_list(1, MAX_SIMULATED_NODES),
        metavar="LIST",
        help="the cost curve: for each count N (e.g. 2,4,8,16,32) make N simulated hosts (root; "
        "docs/clusters.md) and run <N>n<N x devices>g through --runtime process or slurm",
    )
    selftest.add_argument(
        "--devices", type=bounded_int(1, 64), metavar="N",
        help="with --nodes: ranks per simulated host (default 1)",
    )  # fmt: skip
    selftest.set_defaults(func=cmd_selftest)

    envs = sub.add_parser(
        "envs", help="create the local runtime's environments (.venvs/<name>) ahead of runs"
    )
    envs.add_argument(
        "names", nargs="?", help="comma-separated frameworks or PyPI sources (default: all)"
    )
    envs.set_defaults(func=cmd_envs)

    listing = sub.add_parser("list", help="registered plug-ins")
    listing.set_defaults(func=cmd_list)

    for module in (
        "driver.frontend.cluster_cli",
        "driver.frontend.report_cli",
        "driver.frontend.import_cli",
        "driver.frontend.parity_cli",
    ):
        try:
            importlib.import_module(module).add_subcommands(sub)
        except ModuleNotFoundError as error:
            if error.name != module:
                raise
    return parser


def _terminate_as_interrupt(signum: int, _frame: object) -> None:
    # SIGTERM (a job scheduler, `kill`, a CI timeout) takes the same path as Ctrl-C: the repeat
    # in flight is recorded as interrupted and every process/container it started is removed.
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    import signal

    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # A shell starts background jobs (`dlperf run ... &`, CI wrappers) with SIGINT ignored,
        # and children inherit that: `kill -INT` would be lost while containers keep running on
        # every node. A stop request always takes the recorded, cleaned-up interrupt path.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    load_all()
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ConfigError, UnknownPlugin, RuntimeConfigError, KitWriteError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader of our output went away (`dlperf report ... | head`): not an error of
        # ours. Point stdout at /dev/null so the interpreter's final flush stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as error:  # an ordinary file-system fault outside the kit's own writes
        where = f"{error.filename}: " if error.filename else ""
        print(f"error: {where}{error.strerror or error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
