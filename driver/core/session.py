"""A ``dlperf run`` session: the cases selected, then their whole run on one runtime.

``select_cases`` loads the matrices and applies the command line's overrides (a model, variant,
dataset or XLA setting that no matrix has is a mistake, not an empty selection). ``run_session``
opens the session folder (or resumes it), runs the cases through the runner, reads the finished
repeats back through the door and writes the report. ``dlperf run`` is a thin wrapper over both,
and so is a rehearsal on simulated hosts (``driver.testbed.rehearse``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Required, TypedDict

from driver.core.estimate import CaseEstimate
from driver.core.matrix import (
    COMMAND_LINE,
    DLPERF_PROFILE,
    KIT_SOURCE,
    MatrixError,
    Overrides,
    UnknownProfile,
    apply_overrides,
    load_matrix,
)
from driver.files import KitWriteError, write_text
from driver.frameworks.base import FRAMEWORKS
from driver.model.case import Case, Topology
from driver.runtimes.base import Runtime, RuntimeConfigError
from driver.schema import did_you_mean
from driver.signing import SigningError, key_description, usable_key

if TYPE_CHECKING:
    from driver.core.runner import RunSummary
    from driver.model.results import Session
    from driver.model.warrant import Warrant

AUTO = "auto"
CPU_PROFILE = "cpu-smoke"


def choose_profile(requested: str, runtime: str) -> tuple[str, str]:
    """``auto``: the DLPerf protocol where there are GPUs or a cluster, else the CPU smoke one."""
    if requested != AUTO:
        return requested, "as requested"
    from driver.model.hardware import gpu_names

    if runtime == "local" and not gpu_names():
        return CPU_PROFILE, "no GPU and no cluster inventory: CPU smoke profile"
    return DLPERF_PROFILE, "GPUs or a cluster present: the DLPerf protocol"


@dataclass(frozen=True)
class Selection:
    """The cases a ``dlperf run`` selected, and from where (the session records it)."""

    cases: list[Case]
    profile: str
    why: str  # why this profile
    descriptions: dict[str, str]  # matrix file -> its description
    topologies_given: bool = False  # the user named the topologies (NODES/GPUS)
    note: str = ""  # one line on cases the profile left out for this host (printed, recorded)


def leave_out_emulated_amp(
    cases: list[Case], profile: str, overrides: Overrides, native_bf16: bool | None
) -> tuple[list[Case], str]:
    """The CPU smoke profile on a CPU without native bf16 (``native_bf16`` False): its AMP cases
    left out, since emulated bf16 autocast takes hours where FP32 takes minutes; ``--amp``
    given keeps them. ``native_bf16`` None: the nodes are not this host, nothing is known.
    Returns the cases and the one line that says what was done (empty when nothing was)."""
    amp = [case for case in cases if case.precision == "amp"]
    if profile != CPU_PROFILE or native_bf16 is not False or not amp:
        return cases, ""
    if "amp" in overrides.precisions:
        return cases, (
            f"AMP: {len(amp)} case(s) kept as --amp asks, though this CPU has no native bf16 "
            "(no avx512_bf16/amx_bf16): autocast is emulated, expect hours per case"
        )
    return [case for case in cases if case.precision != "amp"], (
        f"AMP: {len(amp)} case(s) left out: this CPU has no native bf16 (no avx512_bf16/"
        "amx_bf16 in /proc/cpuinfo), so bf16 autocast would be emulated and take hours; "
        "--amp on runs them anyway"
    )


def select_cases(
    matrix_files: list[Path],
    profile: str,
    why: str,
    overrides: Overrides,
    native_bf16: bool | None = None,
) -> Selection:
    """The matrices' cases under ``profile`` with the overrides applied (possibly none);
    ``native_bf16``: whether the CPU the cases run on has bf16 kernels (None: not known),
    for :func:`leave_out_emulated_amp`."""
    cases: list[Case] = []
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
    cases, note = leave_out_emulated_amp(cases, profile, overrides, native_bf16)
    if overrides.topologies:
        cases, unfit = leave_out_unfit(cases)
        note = "; ".join(line for line in (note, unfit) if line)
    return Selection(cases, profile, why, descriptions, bool(overrides.topologies), note)


def leave_out_unfit(cases: list[Case]) -> tuple[list[Case], str]:
    """Cases that --nodes/--gpus put on a topology no device could hold them on (Llama 3.1 8B
    and 70B on one GPU), left out, not run to an out-of-memory: by their workload's memory
    estimate (``driver/workloads/``) on the largest device ``reports/peaks.yaml`` lists. Returns
    the cases kept and the one line naming those left out (empty when none was)."""
    from driver.core.estimate import largest_device_memory
    from driver.workloads.base import WorkloadOptionError, find_workload

    largest = largest_device_memory()
    if largest is None:
        return cases, ""
    kept, left = [], []
    for case in cases:
        options, topology = dict(case.options), case.topology
        ranks = (topology.world_size, topology.devices_per_node)
        workload = find_workload(case.model)
        try:
            plan = None if workload is None else workload.memory(options, *ranks)
        except WorkloadOptionError:
            plan = None  # named where the case's options are checked
        if workload is None or plan is None:
            kept.append(case)
            continue
        batch = 1 if case.batch_size == "max" else int(case.batch_size)  # max: at least one
        need = plan.state + workload.resident_samples(options, batch) * plan.per_sample
        (left if need > largest else kept).append(case)
    if not left:
        return cases, ""
    shown = ", ".join(case.id for case in left[:3]) + (" ..." if len(left) > 3 else "")
    return kept, (
        f"{len(left)} case(s) left out: on the topology given, by the memory estimate, no "
        f"device of reports/peaks.yaml (the largest {largest / 2**30:.0f} GiB) holds them "
        f"({shown}); give more nodes or GPUs"
    )


def _check_selection(cases: list[Case], overrides: Overrides) -> None:
    """A --model, --variant, --dataset or --xla that no matrix has is a mistake, not an empty
    selection."""
    xla = () if overrides.xla is None else ("on" if overrides.xla else "off",)
    datasets = {c.dataset for c in cases}
    if overrides.data_dir is not None and any(c.source == KIT_SOURCE for c in cases):
        datasets.add("real")  # the kit's own scripts read it from --data-dir (apply_overrides)
    elif "real" in overrides.datasets and "real" not in datasets:
        raise MatrixError(
            COMMAND_LINE,
            "--dataset",
            "'real' needs --data-dir (the folder `dlperf data` made) for the kit's own scripts",
        )
    for flag, asked, known in (
        ("--model", overrides.models, {c.model for c in cases}),
        ("--variant", overrides.variants, {c.variant for c in cases}),
        ("--dataset", overrides.datasets, datasets),
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


@dataclass(frozen=True)
class SessionSetting:
    """Where a session ran beyond its runtime (the simulated hosts of a rehearsal): facts for
    ``session.json`` and every run note, files the session keeps, a note printed at the start."""

    facts: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # name in the session folder -> text
    note: str = ""


# Work a session does on its runtime before the matrix (``--probe``: the all-reduce probes),
# and the folder of the session it writes (``driver.diagnose.probes.PROBE_DIR``, a floor above)
PROBES = "probes"
BeforeMatrix = Callable[[Path, Runtime, list[Topology]], object]


class SessionOptions(TypedDict, total=False):
    """:func:`run_session`'s options beyond the selection, the runtime and the folder: what a
    run's command line asks, handed on whole by those that start a session another way (the
    rehearsal on simulated hosts)."""

    argv: Required[list[str]]
    dry_run: bool
    progress: str
    setting: SessionSetting | None
    before_matrix: BeforeMatrix | None
    signing_key: str | Path | None
    adopt: list[str] | None
    estimates: list[CaseEstimate] | None


def run_session(
    selection: Selection,
    runtime: Runtime,
    root: Path,
    *,
    argv: list[str],
    dry_run: bool = False,
    progress: str = "auto",
    setting: SessionSetting | None = None,
    before_matrix: BeforeMatrix | None = None,
    signing_key: str | Path | None = None,
    adopt: list[str] | None = None,
    estimates: list[CaseEstimate] | None = None,
) -> int:
    """Run (or, with ``dry_run``, print) the selected cases on ``runtime`` into the session
    folder ``root`` (resumed when it exists, only over what its seal holds or ``adopt`` names:
    :func:`check_resume`): the session, its seal (signed with ``signing_key``, else
    ``$DLPERF_SIGNING_KEY``, where one is given), the closing table and the report;
    ``estimates`` (printed before, ``driver.core.estimate``) are recorded beside what each case
    took (``report/estimate.json``). Returns the exit status: 0 when every repeat finished, the door
    took every one and the seal was written."""
    admitted = _admit(selection, runtime, root, signing_key, adopt or [])
    if isinstance(admitted, int):
        return admitted
    cases, key, warrant = admitted
    profile = f"{selection.profile} ({selection.why})"
    print(f"profile: {profile}; {len(cases)} case(s); runtime: {runtime.name}")
    if selection.note:
        print(selection.note)
    if dry_run:
        _print_plans(cases, runtime)
        return 0
    _ensure_envs(cases, runtime)
    session = _open_session(selection, runtime, root, argv, setting, warrant)
    print(f"session: {session.root}")
    if before_matrix is not None:
        from driver.core.runner import runtime_wrote

        before_matrix(session.root, runtime, [case.topology for case in cases])
        session.wrote(session.root / PROBES)
        runtime_wrote(session, runtime)
    started = time.monotonic()
    summary = _run_matrix(cases, session, runtime, progress, key, warrant)
    if isinstance(summary, int):
        return summary
    if estimates is not None:
        record_estimate(session.root, estimates, time.monotonic() - started)
    sealed = seal(session.root, key, warrant)
    return _close(session.root, root.name, summary, sealed)


def _admit(
    selection: Selection,
    runtime: Runtime,
    root: Path,
    signing_key: str | Path | None,
    adopt: list[str],
) -> tuple[list[Case], Path | None, Warrant] | int:
    """The cases this runtime can run, the signing key and the folder's warrant, or the exit
    status (2, the reason printed) when the key cannot sign, no case fits, a case cannot be
    placed or the folder may not be resumed: each found before anything runs."""
    from driver.core.command import check_placement

    try:
        key = usable_key(signing_key)  # a key that cannot sign is found now, not after the run
    except SigningError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    # A case that needs more nodes than the inventory has, more GPUs than this machine has, or
    # that its launcher cannot run where the runtime puts its nodes, is a clear error, up front.
    try:
        cases, left_out = runtime.fit_cases(selection.cases, selection.topologies_given)
    except RuntimeConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for line in left_out:
        print(f"left out: {line}")
    if left_out and not cases:
        print("error: no selected case fits this machine's GPUs", file=sys.stderr)
        return 2
    try:
        for case in cases:
            check_placement(case, runtime.node_addresses(case.topology.nodes))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    signer = key_description(key) if key is not None else None
    warrant = check_resume(root, {case.id for case in cases}, adopt, signer)
    if warrant is None:
        return 2
    return cases, key, warrant


def _print_plans(cases: list[Case], runtime: Runtime) -> None:
    """``--dry-run``: each case's repeats and the commands its nodes would run."""
    from driver.core.plan import dry_run_plan

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


def _ensure_envs(cases: list[Case], runtime: Runtime) -> None:
    """The kit's framework environments (and PyPI-released upstream code's) the cases run
    from, made where this runtime runs them here and no ``run --python`` replaces them."""
    if not runtime.runs_here or runtime.python_override is not None:
        return
    from driver.frameworks.envs import ensure_env
    from driver.sources.pypi import ensure_case_envs

    for name in sorted({case.framework for case in cases}):
        framework = FRAMEWORKS.get(name)
        if framework.cpu_requirements.exists():
            ensure_env(framework)
    ensure_case_envs(cases)  # upstream code released on PyPI runs from .venvs/<source>


def _open_session(
    selection: Selection,
    runtime: Runtime,
    root: Path,
    argv: list[str],
    setting: SessionSetting | None,
    warrant: Warrant,
) -> Session:
    """The session folder opened (or resumed) with its facts, this run's note and the files of
    its setting written."""
    from driver.model.results import Session

    framework_python = runtime.python_override  # `run --python`
    where = setting.facts if setting is not None else {}
    session = Session.open(
        root,
        {
            "profile": selection.profile,
            "profile_reason": selection.why,
            **({"selection_note": selection.note} if selection.note else {}),
            "matrix_files": sorted(selection.descriptions),
            "runtime": runtime.name,
            "argv": argv,
            **where,
            **({"framework_python": framework_python} if framework_python else {}),
        },
        warrant=warrant,
    )
    warrant.scratch = runtime.session_scratch  # e.g. Slurm's job output
    session.note_run({"argv": argv, "profile": selection.profile, "runtime": runtime.name, **where})
    if setting is not None:
        for name, text in setting.files.items():
            write_text(session.root / name, text)
            session.wrote(session.root / name)
        print(setting.note)
    return session


def _run_matrix(
    cases: list[Case],
    session: Session,
    runtime: Runtime,
    progress: str,
    key: Path | None,
    warrant: Warrant,
) -> RunSummary | int:
    """The cases run into ``session``; on Ctrl-C what finished is sealed and 130 returned.
    The runtime's nodes are let go either way, before any seal."""
    from driver.core.runner import run_cases

    summary = None
    try:
        summary = run_cases(cases, session, runtime, progress=progress)
    except KeyboardInterrupt:
        pass
    finally:
        # The nodes are not needed to seal, verify or report: no connection idles meanwhile,
        # and what letting them go writes into the session (a Slurm job's output) is sealed.
        runtime.disconnect()
    if summary is not None:
        return summary
    seal(session.root, key, warrant)  # what finished is sealed; a resume seals it again
    print(
        f"interrupted; finished repeats are kept in {session.root}; rerun with "
        f"--session {session.root.name} to resume",
        file=sys.stderr,
    )
    return 130


def _close(folder: Path, name: str, summary: RunSummary, sealed: bool) -> int:
    """The sealed session read back through the door, its table printed and its report
    written; the exit status: 0 when every repeat finished, the door took every one and the
    seal was written."""
    from driver.core.report import markdown_tables, write_report
    from driver.core.summary import summarize
    from driver.verify.folder import verify_sessions

    verified = verify_sessions([folder])  # the table shows what the logs give
    summaries = summarize(verified.records)
    print()
    print(markdown_tables(summaries, plain=True) if summaries else "no finished repeats")
    try:
        paths = write_report(
            summaries, folder / "report", f"dlperf session {name}", refused=verified.refused
        )
    except KitWriteError as error:
        print(
            f"error: {error}; every finished repeat is kept in {folder} (write the "
            f"tables later with `dlperf report {folder}`)",
            file=sys.stderr,
        )
        return 2
    print(f"report: {paths['markdown']}")
    for problem in verified.refused:
        print(f"refused: {problem}", file=sys.stderr)
    for case_id, repeat, verdict, detail in summary.failed:
        print(f"FAILED {case_id} repeat {repeat}: {verdict} {detail}", file=sys.stderr)
    return 0 if summary.ok and not verified.refused and sealed else 1


def record_estimate(root: Path, estimates: list[CaseEstimate], wall_s: float) -> None:
    """``report/estimate.json``: each case's estimate beside the wall time its repeats took
    (their records' start to finish), and the session's; printed in one line. Beside the
    tables in the derived ``report/``: each run rewrites it, and the seal covers what was
    measured, not what was expected."""
    from driver.core.estimate import duration, record_actual, total_seconds
    from driver.model.results import RecordError, load_record

    actual: dict[str, float] = {}
    for estimate in estimates:
        folder = root / "cases" / estimate.case_id
        for path in folder.glob("repeat-*/record.json"):
            try:
                record = load_record(path)  # the door refuses a bad one; not counted here
            except RecordError:
                continue
            spent = record.finished_at - record.started_at
            actual[estimate.case_id] = actual.get(estimate.case_id, 0.0) + spent
    try:
        record_actual(root / "report" / "estimate.json", estimates, actual, wall_s)
    except KitWriteError as error:
        print(f"warning: the estimate was not recorded: {error}", file=sys.stderr)
        return
    print(
        f"estimate {duration(total_seconds(estimates))}, took {duration(wall_s)} "
        f"({root / 'report' / 'estimate.json'})"
    )


def seal(root: Path, key: Path | None, warrant: Warrant | None = None) -> bool:
    """Seal the session folder ``root`` (``driver.model.seal``, signed with ``key`` where
    given; ``warrant``: the run's, from :func:`check_resume`: what it may sign) and say how;
    False, said on stderr, where the seal could not be written or renewed (the session
    changed since its last seal, or holds files the run neither wrote nor carried)."""
    from driver.model.drift import seal_session

    try:
        sealed = seal_session(root, key) if warrant is None else warrant.seal(key)
    except (SigningError, KitWriteError) as error:
        print(f"error: sealing {root}: {error}", file=sys.stderr)
        return False
    if sealed.refused:
        print(f"error: {sealed.describe()}", file=sys.stderr)
    elif not sealed.written:
        print(f"warning: {sealed.describe()}", file=sys.stderr)
    else:
        print(sealed.describe())
    return sealed.written


def seal_finished(root: Path) -> bool:
    """:func:`seal` with the key ``$DLPERF_SIGNING_KEY`` names, if any: for the commands that
    finish a session without ``--signing-key`` (selftest, import-logs, attest-hardware)."""
    try:
        key = usable_key()
    except SigningError as error:
        print(f"error: sealing {root}: {error}", file=sys.stderr)
        return False
    return seal(root, key)


SHOWN = 20  # paths named one by one in a refusal; the rest counted


def check_resume(
    root: Path, selected: set[str], adopt: list[str], signer: str | None
) -> Warrant | None:
    """Before ``dlperf run`` runs into the session folder ``root``: the run signs only what it
    runs or verifies. Every file outside the selected cases' folders, every file its seal does
    not hold as it is (added, changed, a sealed repeat's verdict changed) and, where the run
    signs (``signer``), every file no seal of that key holds (``session.json`` too) is refused,
    named, with the fix; unless ``adopt`` (session-relative or absolute paths; never empty)
    covers it: then it is shown, for the seal to record as adopted, not measured. Returns the
    run's :class:`Warrant` (told what the run writes, asked again when it seals); None, said
    on stderr, where the run must not start."""
    from driver.core.importlogs import is_import_session
    from driver.model.warrant import AdoptError, Warrant

    if not (not root.is_dir() or root.is_symlink()) and is_import_session(root):
        print(
            f"error: {root}: a session of `dlperf import-logs`; `dlperf run` resumes only "
            "sessions it ran: run into another --session",
            file=sys.stderr,
        )
        return None
    warrant = Warrant(root, selected, signer)
    try:
        refused = warrant.adopt(adopt)
    except AdoptError as error:
        print(f"error: {error}", file=sys.stderr)
        return None
    if refused:
        print(
            f"error: {root}: resuming it would sign what this run neither ran nor verified "
            "against the session's seal:\n  "
            + "\n  ".join(refused[:SHOWN])
            + (f"\n  and {len(refused) - SHOWN} more" if len(refused) > SHOWN else "")
            + "\nNothing ran. Run into a new session (--session NEW), or, if you vouch for "
            "these files, --adopt PATH (a file or folder of the session; the seal records "
            "them as adopted, not measured)",
            file=sys.stderr,
        )
        return None
    if warrant.adopted:
        print(
            f"adopting {len(warrant.adopted)} file(s) of {root} that this kit did not measure "
            "or verify: you vouch for them, and the seal records them as adopted, not measured:"
        )
        for rel, what in warrant.adopted.items():
            print(f"  {rel}: {what}")
    return warrant
