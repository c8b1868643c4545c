"""``dlperf run``: the cases of one or more matrices, run into a session (``run_session`` in
``driver.core.session``)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from driver.bench.contract import OptionPairs
from driver.core.estimate import CaseEstimate
from driver.core.matrix import (
    COMMAND_LINE,
    DLPERF_PROFILE,
    MAX_CASES,
    MAX_EXPANDED_CASES,
    MatrixError,
    check_case_count,
    overrides_from,
)
from driver.core.session import AUTO, Selection, choose_profile, run_session, select_cases
from driver.frameworks.base import FRAMEWORKS
from driver.frontend.args import (
    RESULTS,
    RUNTIME_HELP,
    Once,
    bounded_int,
    check_session_name,
    csv_items,
    free_text,
    option_pair,
    signing_key_option,
)
from driver.model.case import MAX_DEVICES_PER_NODE, MAX_NODES, Case
from driver.model.hardware import cpu_native_bf16
from driver.runtimes.base import Runtime, make_runtime
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


def _count(flag: str, text: str | None, high: int) -> int | None:
    """A count given as ``--nodes``/``--gpus``: plain digits (no sign, space, underscore or
    exponent: `` 1``, ``+1``, ``1e9`` are typos or forged), 1 to ``high``."""
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()):
        raise MatrixError(
            COMMAND_LINE, flag, f"{text!r}: give a count of plain digits (e.g. 2), no spaces"
        )
    value = int(text[:12]) if len(text) <= 12 else high + 1
    if not 1 <= value <= high:
        shown = text if len(text) <= 12 else f"{text[:12]}... ({len(text)} digits)"
        raise MatrixError(COMMAND_LINE, flag, f"is {shown}: give 1 to {high}")
    return value


def _topologies(nodes_text: str | None, gpus_text: str | None) -> tuple[str, ...]:
    """NODES and GPUS (devices per node) from make; either alone keeps the other at 1."""
    if nodes_text is None and gpus_text is None:
        return ()
    nodes = _count("--nodes", nodes_text, MAX_NODES)
    gpus = _count("--gpus", gpus_text, MAX_DEVICES_PER_NODE)
    nodes = 1 if nodes is None else nodes
    gpus = 1 if gpus is None else gpus
    return (f"{nodes}n{nodes * gpus}g",)


def select(args: argparse.Namespace, dry_run: bool) -> tuple[Selection, bool] | int:
    """The cases ``run`` and ``plan`` select from their shared arguments, and whether this host
    runs them (a local run or simulated hosts); an exit code where nothing can be selected."""
    if args.runtime is None:  # a rehearsal's hosts are reached over SSH: the process runtime
        args.runtime = "process" if args.simulated_hosts else "local"
    if args.simulated_hosts:
        from driver.testbed.rehearse import refusal

        refused = refusal(runtime=args.runtime, inventory=args.inventory, dry_run=dry_run)
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
            "amp_dtype": args.amp_dtype,
            "image": args.image,
            "options": dict(args.option or []),
        }
    )
    # The CPU that runs the cases is this one for a local run or simulated hosts.
    here = args.runtime == "local" or args.simulated_hosts
    selection = select_cases(
        matrix_files, profile, why, overrides, cpu_native_bf16() if here else None
    )
    check_case_count(len(selection.cases), args.max_cases)
    if not selection.cases:
        print("no case matches the selection", file=sys.stderr)
        return 2
    return selection, here


def check_simulated_hosts(selection: Selection) -> None:
    """A rehearsal's hosts are this machine's addresses: at most one /24 of them."""
    from driver.testbed.costcurve import MAX_SIMULATED_NODES

    nodes = max(case.topology.nodes for case in selection.cases)
    if nodes > MAX_SIMULATED_NODES:  # a dry run too: it writes the inventory of them all
        raise MatrixError(
            COMMAND_LINE,
            "--simulated-hosts",
            f"the selection's largest case has {nodes} nodes; this machine simulates at "
            f"most {MAX_SIMULATED_NODES} hosts (one /24 of addresses): narrow --nodes",
        )


def refused_by_time_limit(
    runtime: Runtime,
    args: argparse.Namespace,
    estimates: SessionEstimate,
    selection: Selection,
    submitting: bool,
) -> bool:
    """Under Slurm, whether the selection cannot fit its job (said on stderr)."""
    repeats = {case.id: case.repeats for case in selection.cases}
    refused = time_limit_refusal(runtime, args.inventory, estimates, submitting, repeats)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
    return bool(refused)


def cmd_run(args: argparse.Namespace) -> int:
    chosen = select(args, args.dry_run)
    if isinstance(chosen, int):
        return chosen
    selection, here = chosen
    stamp = time.strftime("%Y%m%d-%H%M%S")
    root = Path(args.results) / (args.session or f"{stamp}-{selection.profile}")
    before_matrix = None
    if args.probe:  # all-reduce bandwidth before the matrix (a diagnosis the release reads)
        from driver.diagnose.probes import probe_topologies

        before_matrix = probe_topologies
    runtime_options = local_container(args)
    if args.python is not None:
        runtime_options["python_override"] = framework_python(
            args.python, args.runtime, selection.cases
        )
    estimates = session_estimate(args, selection.cases, here)
    session = {
        "argv": sys.argv[1:],
        "dry_run": args.dry_run,
        "progress": args.progress,
        "signing_key": args.signing_key,
        "adopt": args.adopt or [],
    }
    if args.simulated_hosts:
        from driver.testbed.rehearse import rehearse

        check_simulated_hosts(selection)
        return rehearse(selection, root, before_matrix=before_matrix, **session)
    runtime = make_runtime(args.runtime, inventory=args.inventory, **runtime_options)
    if refused_by_time_limit(runtime, args, estimates, selection, not args.dry_run):
        return 2
    # A container sees only its mounts: a case's data folder must be among them.
    runtime.check_data_dirs({case.data_dir for case in selection.cases if case.data_dir})
    return run_session(
        selection, runtime, root, before_matrix=before_matrix, estimates=estimates, **session
    )


SessionEstimate = list[CaseEstimate]


def session_estimate(args: argparse.Namespace, cases: list[Case], here: bool) -> SessionEstimate:
    """The expected wall time of ``cases``, printed now (``dlperf plan`` prints nothing else)."""
    from driver.core.estimate import (
        estimate_cases,
        image_import_estimates,
        load_knowledge,
        plan_lines,
    )

    hardware = named_hardware(args) or (host_hardware() if here else "")
    knowledge = load_knowledge(results=Path(args.results))
    estimates = estimate_cases(cases, hardware, knowledge)
    if estimates and pyxis_may_import(args):
        held = max(case.topology.world_size for case in cases)
        estimates += image_import_estimates(cases, held)
    print(f"estimate on {hardware or 'unnamed hardware'} (before the run):")
    for line in plan_lines(estimates, knowledge.startup_basis):
        print(f"  {line}")
    return estimates


def pyxis_may_import(args: argparse.Namespace) -> bool:
    """Whether the session's job may make pyxis containers of framework images: Slurm with
    ``container: pyxis``, or ``auto`` (pyxis wherever the cluster's srun has it)."""
    if getattr(args, "runtime", None) != "slurm" or not getattr(args, "inventory", None):
        return False
    from driver.cluster.slurm import load_slurm_config

    return load_slurm_config(args.inventory).container in ("auto", "pyxis")


HARDWARE_VARIABLE = "DLPERF_HARDWARE"  # make's HARDWARE=, exported without a shell's quoting


def named_hardware(args: argparse.Namespace) -> str:
    """The nodes' device as the user named it: --hardware, else $DLPERF_HARDWARE (make's
    HARDWARE=), else the Slurm section's ``hardware``; "" where none names it."""
    if args.hardware is not None:
        return args.hardware
    from driver.text import check_free_text

    variable = os.environ.get(HARDWARE_VARIABLE, "").strip()
    if variable:
        try:
            return check_free_text(variable, "label")
        except ValueError as error:
            raise MatrixError(COMMAND_LINE, f"${HARDWARE_VARIABLE}", str(error)) from None
    if getattr(args, "runtime", None) == "slurm" and getattr(args, "inventory", None):
        from driver.cluster.slurm import load_slurm_config

        return load_slurm_config(args.inventory).hardware or ""
    return ""


def host_hardware() -> str:
    """This host's devices as figures name them: its GPUs, else its CPU model."""
    from driver.bench.fingerprint import cpu_model_name
    from driver.model.hardware import gpu_names

    return " ".join(sorted(set(gpu_names()))) or cpu_model_name()


def time_limit_refusal(
    runtime: Runtime,
    where: str | None,
    estimates: SessionEstimate,
    submitting: bool = True,
    repeats: dict[str, int] | None = None,
) -> str:
    """Under Slurm, why the session's job cannot fit its ``time_limit`` (empty: it fits); a GPU
    job of which nothing can be estimated is refused where it would be submitted, and said
    as a warning where not (a dry run, a plan)."""
    from driver.core.estimate import repeat_seconds, split_job_count, time_limit_problem

    repeats = repeats or {}

    job = runtime.job_limit()
    if job is None:
        return ""
    from driver.cluster.slurm import time_limit_seconds

    limit = job.time_limit
    if (
        job.gpus and estimates and all(e.seconds is None for e in estimates)
    ):  # a GPU job of unknown length: the guard cannot apply, so nothing is submitted blind
        unknown = (
            f"nothing of the selection can be estimated, so its fit in slurm.time_limit "
            f"{limit} ({where or 'slurm:'}) is unknown: name the nodes' device with --hardware, "
            "slurm.hardware in the cluster file, or HARDWARE= with make (e.g. H100)"
        )
        if submitting:
            return unknown
        print(f"warning: {unknown}", file=sys.stderr)

    split = job.split
    problem = time_limit_problem(
        estimates, time_limit_seconds(limit), where or "slurm:", split, repeats
    )
    if split and not problem:  # the runtime starts a new job when a repeat would outlast one
        jobs = split_job_count(estimates, time_limit_seconds(limit), repeats)
        print(
            f"slurm: split_jobs: the selection takes about {jobs} job(s) of time_limit {limit}",
            file=sys.stderr,
        )
        runtime.repeat_seconds = {  # type: ignore[attr-defined]
            e.case_id: seconds
            for e in estimates
            if e.kind == "case"
            and (seconds := repeat_seconds(e, repeats.get(e.case_id, 1))) is not None
        }
    return problem or ""


def local_container(args: argparse.Namespace) -> dict[str, str]:
    """``--container``: the local runtime's option, its platform checked (one line naming the
    flag and the platforms that run here) before anything else; {} where not given."""
    from driver.runtimes.base import RuntimeConfigError
    from driver.runtimes.local import local_platform

    if args.container is None:
        return {}
    if args.runtime != "local" or args.simulated_hosts:
        raise RuntimeConfigError(
            f"--container goes with --runtime local (this host); the nodes of --runtime "
            f"{args.runtime} take theirs from the cluster file (container:, or slurm.container "
            "under Slurm; docs/clusters.md)"
        )
    local_platform(args.container)
    return {"container": args.container}


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
    _selection_arguments(run)
    run.set_defaults(func=cmd_run)
    plan = sub.add_parser(
        "plan",
        help="the expected wall time of a run, per case and in total, before anything is "
        "booked (the same arguments as run; under Slurm, checked against time_limit)",
    )
    _selection_arguments(plan)
    plan.set_defaults(func=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
    """``dlperf plan``: the selection's estimate alone, checked against a Slurm job's
    time_limit as ``run`` checks it, before anything is booked."""
    chosen = select(args, dry_run=True)
    if isinstance(chosen, int):
        return chosen
    selection, here = chosen
    estimates = session_estimate(args, selection.cases, here)
    if args.simulated_hosts:
        check_simulated_hosts(selection)
        return 0
    runtime = make_runtime(args.runtime, inventory=args.inventory, **local_container(args))
    return 2 if refused_by_time_limit(runtime, args, estimates, selection, False) else 0


def _selection_arguments(run: argparse.ArgumentParser) -> None:
    """The arguments ``run`` and ``plan`` share."""
    run.add_argument(
        "--framework", help="comma-separated frameworks (default pytorch)", action=Once
    )
    run.add_argument("--matrix", action="append", default=[], help="a matrix file (repeatable)")
    run.add_argument(
        "--profile", default=AUTO, help=f"'{DLPERF_PROFILE}', a profile of the matrix, or '{AUTO}'"
    )
    run.add_argument("--model", help="comma-separated models", action=Once)
    run.add_argument("--nodes", action=Once, help=f"nodes, 1 to {MAX_NODES}")
    run.add_argument(
        "--gpus", action=Once,
        help=f"devices (processes on CPU) per node, 1 to {MAX_DEVICES_PER_NODE}",
    )  # fmt: skip
    run.add_argument("--batch", help="per-device batch sizes, comma-separated, or max", action=Once)
    run.add_argument("--amp", help="on, off or both", action=Once)
    run.add_argument("--xla", choices=("on", "off"))
    run.add_argument("--dataset", help="synthetic and/or real", action=Once)
    run.add_argument("--data-dir")
    run.add_argument(
        "--amp-dtype",
        help="AMP's autocast dtype on the kit's own scripts: auto (bf16 where the GPU has it), "
        "fp16 (as DLPerf's V100 runs; with a loss scaler) or bf16",
    )
    run.add_argument(
        "--image",
        help="an upstream source's image: pinned (default) or current (its source.yaml "
        "current_image: the same pinned code on a later base; a case of its own)",
    )
    run.add_argument("--variant", help="comma-separated option variants of the matrix", action=Once)
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
        "--container",
        metavar="PLATFORM",
        help="what each node's command runs in on this host (local runtime): none (default: "
        "the kit's venvs), docker or podman (the framework's image, `make images`); over SSH "
        "or Slurm the cluster file's container setting picks it (docs/clusters.md)",
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
    run.add_argument(
        "--hardware",
        type=free_text("label"),  # printed with the estimate: held to every label's rules
        help="the nodes' device as the estimate looks it up (e.g. H100, A100, 'AMD EPYC'); "
        "default: this host's GPUs or CPU for the local runtime, else none",
    )
    signing_key_option(run, "the session's manifest when the run ends")
