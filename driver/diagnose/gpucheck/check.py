"""The GPU check: a smoke check of a booked GPU node. Is this node healthy, and is the kit
right on it? One command runs the kit's one-GPU path in stages under a time budget.

Each stage writes what it has into ``--out`` as soon as it ends: ``summary.md``,
``summary.json`` and ``gpu-check.tar.gz`` (the work folder with every raw log, the node's
facts, the stage logs: a release archive whose manifest is a session seal, see
``driver.diagnose.gpucheck.archive``). A stage that cannot finish in the time left is not
started and says so; a stage cut short keeps its finished repeats. ``--resume`` carries an
earlier archive in, so a later command continues the same session. ``unpack`` checks an archive
and moves its session into ``results/``, from where ``dlperf release`` publishes it.

    OUT=DIR bash tools/gpu-check.sh [--stages core] [--budget-s S]    # on the node
    python3 tools/gpu_check.py run --out DIR [--python PY] [--budget-s S] [--stages LIST]
                                   [--resume ARCHIVE] [--cpu]
    python3 tools/gpu_check.py plan [--cpu]           # the stages, their estimates, the plans
    python3 tools/gpu_check.py unpack ARCHIVE [--results results]

``--stages`` takes stage names and plan names (``core``, ``bert-max``, ``resnet50-max``,
``resnet50-modes``, ``llama``, ``all``), comma-separated;
the default is ``core``: the node's facts (nvidia-smi, the processes already on the GPU, NVML,
torch's view), PyTorch ResNet-50 1n1g AMP (bf16, channels_last) at 256, BERT-base seq 128 AMP at
256, ``dlperf selftest`` and ``dlperf parity`` against a bare loop; every run stage also times
its window by CUDA events. The other plans hold the rest (TF32, CUDA graphs, boundary-only
sync, torch.compile, both ``batch: max``, Llama 3.2 1B at seq 8192). Without a GPU (``--cpu``,
or none found) the same stages run at tiny shapes (``--profile gpu-check-cpu``): a rehearsal
that leaves the GPU itself as the only unknown. A GPU that ``nvidia-smi -L`` lists and torch
does not see is no rehearsal: only the facts run, and the check exits 3 with torch's words.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from driver.diagnose.gpucheck.archive import (
    ARCHIVE,
    SESSION,
    UnpackError,
    extract_sealed,
    read_summary,
    unpack,
    write_sealed_archive,
)
from driver.diagnose.gpucheck.node import (
    REPO_ROOT,
    collect_facts,
    die_with_parent,
    framework_sees_gpu,
    gpus_listed,
    jax_unfit,
    run_command,
)
from driver.diagnose.gpucheck.stages import (
    CPU,
    CPU_BUDGET_S,
    DEFAULT_PLAN,
    GPU,
    GPU_BUDGET_S,
    MODES,
    PLANS,
    RESERVE_S,
    SCRATCH,
    SCRATCH_VAR,
    STAGES,
    Budget,
    Shapes,
    Stage,
    StageResult,
    UsageError,
    budget_seconds,
    chosen_stages,
    decide,
)
from driver.diagnose.gpucheck.summary import summarize
from driver.files import write_text


def run_check(args: argparse.Namespace) -> int:
    """The check into ``args.out``; its work folder (and every scratch file of the stages) is
    removed on any exit, after the last archive was written."""
    stages = chosen_stages(args.stages)  # a bad option is refused before anything is made
    out = Path(args.out).absolute()
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: a file, not a folder; give a folder for the results")
    resume = Path(args.resume).absolute() if args.resume else None
    if resume is not None and not resume.is_file():
        raise UsageError(f"--resume {resume}: no such archive; give an earlier {ARCHIVE}")
    out.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="dlperf-gpu-check-"))
    try:
        return _run_stages(args, stages, out, base, resume)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def stage_env(scratch: Path) -> dict[str, str]:
    """Every scratch file of a stage stays in the check's scratch folder: the selftest's
    session, torch.compile's, Triton's and XLA's caches, the CUDA driver's PTX cache,
    matplotlib's config."""
    scratch.mkdir()
    return {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "TMPDIR": str(scratch),
        "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor"),
        "TRITON_CACHE_DIR": str(scratch / "triton"),
        "JAX_COMPILATION_CACHE_DIR": str(scratch / "xla"),
        "CUDA_CACHE_PATH": str(scratch / "nv"),
        "XDG_CACHE_HOME": str(scratch / "cache"),
        "MPLCONFIGDIR": str(scratch / "mpl"),
    }


def probe_gpu(args: argparse.Namespace, env: dict[str, str]) -> tuple[bool, str]:
    """(a GPU run, why torch does not see the GPU that nvidia-smi lists: '' where it does). A
    node whose GPU torch does not see is reported, with its facts, not rehearsed on."""
    if args.cpu:
        return False, ""
    on_gpu, why = framework_sees_gpu(args.python, env)
    listed = "" if on_gpu else gpus_listed(env)
    if listed:
        return True, f"torch under {args.python} does not see {listed}: {why}"
    return on_gpu, ""


def _run_stages(
    args: argparse.Namespace, stages: list[Stage], out: Path, base: Path, resume: Path | None
) -> int:
    """The stages in ``base``: the work folder that is archived (``gpu-check/``) beside the
    stages' scratch folder, which is not."""
    env = stage_env(base / SCRATCH)
    work = base / SESSION
    results: list[StageResult] = []
    run, earlier_mode = 1, None
    if resume is not None:
        results, earlier_mode = resume_into(resume, base)
        run = max((r.run for r in results), default=0) + 1
    work.mkdir(exist_ok=True)
    (work / "logs").mkdir(exist_ok=True)
    on_gpu, unseen = probe_gpu(args, env)
    refuse_another_mode(resume, earlier_mode, MODES[on_gpu], args.cpu)
    if resume is not None:
        print(
            f"gpu-check: resumed {resume} ({len(results)} earlier stage(s)); "
            f"command {run} of the session"
        )
    shapes = GPU if on_gpu else CPU
    budget = Budget(args.budget_s or shapes.budget_s)
    print(f"gpu-check: {'GPU' if on_gpu else 'CPU rehearsal'}, profile {shapes.profile}, "
          f"budget {budget.left():.0f} s, stages {', '.join(s.name for s in stages)}",
          flush=True)  # fmt: skip
    if unseen:
        print(f"gpu-check: {unseen}; only the facts run (--cpu rehearses on the CPU)", flush=True)
    pythons = {"pytorch": args.python, "jax": args.jax_python or args.python}
    unfit: dict[str, str] = {}  # a framework's probe, made once, before its first stage
    for stage in stages:
        why = unseen if unseen and stage.kind != "facts" else decide(stage, budget.left(), on_gpu)
        if not why and stage.framework == "jax":
            if "jax" not in unfit:
                unfit["jax"] = jax_unfit(pythons["jax"], env, on_gpu)
            why = unfit["jax"]
        if why:
            results.append(StageResult(stage.name, "skipped", detail=why, run=run))
            print(f"gpu-check: {stage.name}: skipped: {why}", flush=True)
            continue
        print(f"gpu-check: {stage.name}: {stage.what} ({budget.left():.0f} s left)", flush=True)
        result = run_stage(stage, pythons[stage.framework], work, shapes, budget, env, run)
        results.append(result)
        print(f"gpu-check: {stage.name}: {result.status} in {result.seconds:.0f} s"
              f"{': ' + result.detail if result.status != 'ok' else ''}", flush=True)  # fmt: skip
        # Between stages the summary leaves MFU out: counting FLOPs starts torch, and the
        # budget is the GPU's (the archive holds what the count needs; it is made at the end).
        publish(work, out, results, on_gpu, shapes, None)
    summary = publish(work, out, results, on_gpu, shapes, args.python)
    print(summary["markdown"], flush=True)
    if unseen:
        return 3  # as tools/gpu-check.sh: the kit cannot run on this node
    # A stage cut or skipped at the budget is a planned outcome; only a failure is an error.
    return 1 if any(r.status == "failed" for r in results if r.run == run) else 0


def refuse_another_mode(
    resume: Path | None, earlier_mode: str | None, mode: str, cpu: bool
) -> None:
    """A session is resumed only in the mode it began in (GPU or rehearsal)."""
    if earlier_mode not in (None, mode):
        why = "--cpu" if cpu else "torch sees no GPU here"
        raise UsageError(
            f"--resume {resume}: that session ran as {earlier_mode} and this command would run "
            f"as {mode} ({why}); resume it on a node like the one it ran on, or leave "
            "--resume out to start a new session"
        )


def run_stage(
    stage: Stage,
    python: str,
    work: Path,
    shapes: Shapes,
    budget: Budget,
    env: dict[str, str],
    run: int,
) -> StageResult:
    """One stage of command ``run``, to its end or to what is left of ``budget``."""
    if stage.kind == "facts":
        if (work / "facts").is_dir():  # an earlier command's facts stay beside this one's
            os.replace(work / "facts", work / f"facts-run{run - 1}")
        result = collect_facts(python, work, env)
        result.run = run
        return result
    argv = stage.argv(shapes, python, work)
    started = time.monotonic()
    log = work / "logs" / f"{stage.name}.log"
    code, cut = run_command(argv, log, budget.left() - RESERVE_S, env)
    status = "cut" if cut else ("ok" if code == 0 else "failed")
    detail = cut or (_tail(log) if code != 0 else "")
    return StageResult(stage.name, status, time.monotonic() - started, code, detail, argv, run)


def resume_into(archive: Path, base: Path) -> tuple[list[StageResult], str | None]:
    """An earlier command's archive, checked as ``unpack`` checks it, its work folder extracted
    as ``base/gpu-check``; its stages as they ended (the session in ``results/`` resumes under
    ``dlperf run``) and the mode they ran in."""
    staging = base / "resumed"
    staging.mkdir()
    work = base / SESSION
    os.replace(extract_sealed(archive, staging), work)
    staging.rmdir()
    summary = read_summary(archive, work / "summary.json")
    earlier = []
    for index, entry in enumerate(summary.get("stages") or []):
        try:
            earlier.append(StageResult(**{k: entry[k] for k in StageResult.__dataclass_fields__
                                          if k in entry}))  # fmt: skip
        except (TypeError, KeyError):
            raise UnpackError(
                f"{archive}: summary.json stages[{index}] is not a stage result; use the "
                "archive the check wrote"
            ) from None
    mode = summary.get("mode")
    return earlier, mode if isinstance(mode, str) else None


def _tail(log: Path, lines: int = 3) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])[:600]


def publish(
    work: Path,
    out: Path,
    results: list[StageResult],
    on_gpu: bool,
    shapes: Shapes,
    python: str | None,
) -> dict[str, Any]:
    summary = summarize(work, results, on_gpu, shapes, python)
    text = summary.pop("markdown")
    summary_json = json.dumps(summary, indent=1, sort_keys=True, default=str) + "\n"
    for folder in (work, out):  # --out's atomically: a node that goes away leaves a whole set
        write_text(folder / "summary.json", summary_json)
        write_text(folder / "summary.md", text)
    write_sealed_archive(work, out / ARCHIVE)
    summary["markdown"] = text
    return summary


def plan_lines(shapes: Shapes, python: str) -> Iterable[str]:
    work = Path("<work>")
    for stage in STAGES:
        argv = stage.argv(shapes, python, work)
        command = (
            " ".join(argv[1:]) if argv else "(the facts: fingerprint, nvidia-smi, NVML, torch)"
        )
        yield f"{stage.name:28} ~{stage.estimate_s:>4.0f} s  {stage.what}\n    {command}"
    estimates = {stage.name: stage.estimate_s for stage in STAGES}
    yield f"\nplans (--stages NAME; budget {shapes.budget_s:.0f} s, {RESERVE_S:.0f} s kept back):"
    for name, members in PLANS.items():
        total = sum(estimates[m] for m in members)
        default = " (the default)" if name == DEFAULT_PLAN else ""
        yield f"{name:6} ~{total:>4.0f} s{default}: {', '.join(members)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the check into --out")
    run.add_argument("--out", required=True, help="the folder the results go to")
    run.add_argument("--python", default=sys.executable, help="the interpreter with torch")
    run.add_argument("--jax-python", help="the interpreter with JAX, Flax and Optax for the "
                     "JAX stage (default: --python)")  # fmt: skip
    run.add_argument("--budget-s", type=budget_seconds, default=0.0,
                     help=f"seconds of stages (0: {GPU_BUDGET_S:.0f} on a GPU, "
                     f"{CPU_BUDGET_S:.0f} on CPU)")  # fmt: skip
    run.add_argument("--stages", help=f"stage and plan names, comma-separated (default "
                     f"{DEFAULT_PLAN}; `plan` lists them)")  # fmt: skip
    run.add_argument("--resume", help="an earlier gpu-check.tar.gz: continue its session")
    run.add_argument("--cpu", action="store_true", help="the CPU rehearsal even with a GPU")
    plan = sub.add_parser("plan", help="the stages, their estimates and the plans")
    plan.add_argument("--cpu", action="store_true")
    take = sub.add_parser("unpack", help="check an archive and move its session into results/")
    take.add_argument("archive")
    take.add_argument("--results", default=str(REPO_ROOT / "results"))
    args = parser.parse_args(argv)
    if args.command == "plan":
        print("\n".join(plan_lines(CPU if args.cpu else GPU, "python3")))
        return 0
    if args.command == "unpack":
        try:
            target = unpack(Path(args.archive), Path(args.results))
        except UnpackError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        print(f"unpacked: {target} (session: {target / 'session'}); publish it with "
              f"`dlperf release VERSION {target / 'session'}`")  # fmt: skip
        return 0
    die_with_parent()
    try:
        return run_check(args)
    except (UsageError, UnpackError) as error:
        print(f"gpu-check: error: {error}", file=sys.stderr)
        return 2
    finally:
        # tools/gpu-check.sh's scratch folder (the wheels' install, this check's TMPDIR): the
        # script removes it as it ends, unless it was killed first; then this does.
        scratch = os.environ.get(SCRATCH_VAR)
        if scratch and Path(scratch).name.startswith("dlperf-gpu-check."):
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
