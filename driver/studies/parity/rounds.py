"""The rounds: the kit and the bare loop in turn, alternating which goes first.

The order alternates (bare first in odd rounds, kit first in even ones) so that a drift of the
machine's load weighs on both sides alike. Each side's CPU share over its measured window (its
CPU time / (window x threads)) shows how much of the cores the machine's other work left it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from driver.bench.host import cpu_count, cpu_model_name
from driver.model.case import Case
from driver.studies.parity.commands import KIT_SESSION_PREFIX, commands, driver_argv
from driver.studies.parity.cpu import driver_cost
from driver.studies.parity.handing import check_bare_options, handed_options, probe_header
from driver.studies.parity.plan import plan_case, prepare
from driver.studies.parity.process import Runner, SideCommand, finished, run_process, tail
from driver.studies.parity.reading import check_same_work, kit_window, read_bare, read_kit
from driver.studies.parity.records import (
    ParityError,
    ParityPair,
    ParityRequest,
    ParityResult,
    Side,
    SideRun,
)
from driver.studies.parity.report import number_or_dash


def machine_description() -> str:
    """``<CPU name>, <n> cores, <ISA>``: the facts the ratio depends on."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    if "avx512_bf16" in flags:
        isa = "AVX-512 + bf16"
    elif "avx512f" in flags:
        isa = "AVX-512"
    elif "avx2" in flags:
        isa = "AVX2, no AVX-512"
    else:
        isa = "no AVX2"
    return f"{cpu_model_name()}, {cpu_count()} cores, {isa}"


def run_side(
    side: Side,
    command: SideCommand,
    request: ParityRequest,
    runner: Runner,
    *,
    case: Case,
    threads: int,
    session: Path | None = None,
) -> SideRun:
    """One process of one side; the kit's is read from ``session``, the folder its ``dlperf
    run`` wrote."""
    load = os.getloadavg()[0]
    result = finished(runner(command, request.timeout_s))
    if result.code != 0:
        raise ParityError(
            f"the {side} side exited with {result.code}: {' '.join(command.argv)}\n"
            + tail(result.err or result.out)
        )
    if side == "bare" or session is None:
        return read_bare(result.out, load)
    run = read_kit(session, case, request, load)
    window = kit_window(session, case, request)
    cost, benchmark_cpu_s = driver_cost(result.cpu, window)
    # Every rank's CPU (the driver's descendants) over the cores of all ranks.
    cores = threads * case.topology.world_size
    share = benchmark_cpu_s / ((window[1] - window[0]) * cores) if benchmark_cpu_s else 0.0
    return run.model_copy(update={"driver": cost, "cpu_share": max(0.0, share)})


def _run_round(
    number: int,
    request: ParityRequest,
    runner: Runner,
    sides: dict[str, SideCommand],
    case: Case,
    threads: int,
    results: Path,
) -> ParityPair:
    """Round ``number``: the bare loop and the kit one after the other (which first alternates
    by round), checked to have done the same work."""
    order: Sequence[Side] = ("bare", "kit") if number % 2 else ("kit", "bare")
    session = f"{KIT_SESSION_PREFIX}{number:02d}"
    kit = replace(sides["driver"], argv=driver_argv(request, case, results, session))
    commands_of = {"bare": sides["bare"], "kit": kit}
    runs = {
        side: run_side(
            side,
            commands_of[side],
            request,
            runner,
            case=case,
            threads=threads,
            session=results / session if side == "kit" else None,
        )  # fmt: skip
        for side in order
    }
    check_same_work(runs["bare"], runs["kit"])
    return ParityPair(round=number, bare=runs["bare"], kit=runs["kit"], first=order[0])


def _round_line(pair: ParityPair, rounds: int) -> str:
    """A round's progress line: both throughputs, their ratio, the load and the driver's cost."""
    driver = pair.kit.driver
    return (
        f"round {pair.round}/{rounds}: bare {pair.bare.throughput:.3f}, "
        f"kit {pair.kit.throughput:.3f} samples/s, ratio {pair.ratio:.3f} "
        f"(load {pair.bare.load_1min:.2f}/{pair.kit.load_1min:.2f}, CPU share "
        f"{pair.bare.cpu_share:.2f}/{pair.kit.cpu_share:.2f}, driver "
        f"{number_or_dash(driver.ms_per_s if driver else None, '.1f')} ms/s)"
    )


def run_parity(
    request: ParityRequest,
    *,
    runner: Runner = run_process,
    progress: Callable[[str], None] = lambda _line: None,
) -> ParityResult:
    request = prepare(request)
    case, profile = plan_case(request)
    header = probe_header(request, runner)
    handed = handed_options(header, request.model)
    check_bare_options(request, handed, runner)
    sides = commands(request, handed)
    threads = int(handed.get("num_threads") or request.cpu_threads)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = Path(request.results) / f"parity-{stamp}-{case.framework}-{case.precision}"
    progress(
        f"case {case.id} (profile {profile}); the bare loop gets {len(handed)} options from the "
        f"kit's header; sessions in {results}"
    )
    pairs: list[ParityPair] = []
    for number in range(1, request.rounds + 1):
        pair = _run_round(number, request, runner, sides, case, threads, results)
        pairs.append(pair)
        progress(_round_line(pair, request.rounds))
    return ParityResult(
        framework=request.framework,
        model=request.model,
        batch_size=request.batch_size,
        precision=request.precision,
        options=dict(request.options),
        threads=threads,
        warmup_steps=request.warmup_steps,
        measured_steps=request.measured_steps,
        machine=machine_description(),
        pairs=pairs,
        variant=case.variant,
        topology=case.topology.label,
        profile=profile,
        case_id=case.id,
        handed=handed,
        kit_command=driver_argv(request, case, results, f"{KIT_SESSION_PREFIX}01"),
        bare_command=sides["bare"].argv,
        python=sides["bare"].argv[0],
    )
