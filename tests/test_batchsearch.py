"""The batch=max search on its own: it plans each probe and runs it through the function it is
given (the runner passes ``run_plan``; real probe runs are in test_runner.py). Here that
function answers from the probe's batch, so the doubling, the bisection, the probe folders and
the resume of an interrupted search are checked without starting a process."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from driver.bench.protocol import oom_record
from driver.core.batchsearch import PROBE_STEPS, BatchSearchFailed, search_max_batch
from driver.core.selftest import calibration_cases
from driver.model.results import Session
from driver.runtimes.base import RepeatOutcome, Runtime, Verdict
from driver.runtimes.local import LocalRuntime
from driver.runtimes.plan import RepeatPlan


class MemoryLimit:
    """Runs a probe plan "for real" as far as the search can tell: OK up to ``limit`` samples
    per device, OOM above, and ``other`` (e.g. FAILED) at the batches in ``broken``."""

    def __init__(self, limit: int, broken: dict[int, Verdict] | None = None) -> None:
        self.limit, self.broken = limit, broken or {}
        self.plans: list[RepeatPlan] = []

    def __call__(self, plan: RepeatPlan, runtime: Runtime) -> tuple[RepeatOutcome, Verdict]:
        self.plans.append(plan)
        verdict = self.broken.get(plan.batch_size)
        if verdict is None:
            verdict = Verdict.OK if plan.batch_size <= self.limit else Verdict.OOM
        return RepeatOutcome(
            verdict, [], 0.0, 0.0, f"{verdict.value} at {plan.batch_size}"
        ), verdict


def quiet(_line: str) -> None:
    pass


@pytest.fixture
def case():  # noqa: ANN201 - a Case
    base = calibration_cases(0.002, 8, ["1n2g"], repeats=1, measured_steps=5)[0]
    return replace(base, batch_size="max")


def test_doubles_then_bisects_to_the_granularity(case, tmp_path: Path) -> None:  # noqa: ANN001
    session = Session.open(tmp_path / "s")
    run_plan = MemoryLimit(100)
    assert search_max_batch(case, session, LocalRuntime(), run_plan, quiet) == 91  # 95% of 96
    assert [plan.batch_size for plan in run_plan.plans] == [16, 32, 64, 128, 96, 112, 104]
    found = json.loads((session.case_dir(case) / "batch-search" / "found.json").read_text())
    assert found == {"largest_fit": 96, "first_failure": 104, "measured_at": 91,
                     "margin": 0.95, "start": 16}  # fmt: skip
    plan = run_plan.plans[0]
    assert plan.probe and plan.repeat == 0 and plan.case.total_steps == PROBE_STEPS
    assert plan.repeat_dir == session.case_dir(case) / "batch-search" / "bs16"
    assert [c.node for c in plan.commands] == ["local0"] and plan.devices_per_node == 2
    assert "--batch-size" in plan.commands[0].argv


def test_a_large_max_is_bisected_to_a_sixteenth_of_what_fits(case, tmp_path: Path) -> None:  # noqa: ANN001
    run_plan = MemoryLimit(1500)  # a GPU's ResNet-50 or BERT at AMP: thousands
    found = search_max_batch(case, Session.open(tmp_path / "s"), LocalRuntime(), run_plan, quiet)
    probes = [plan.batch_size for plan in run_plan.plans]
    assert probes == [16, 32, 64, 128, 256, 512, 1024, 2048, 1536, 1280, 1408, 1472]
    assert found == math.floor(1472 * 0.95)


def test_a_resumed_search_reads_the_probes_it_already_ran(case, tmp_path: Path) -> None:  # noqa: ANN001
    session = Session.open(tmp_path / "s")
    search_max_batch(case, session, LocalRuntime(), MemoryLimit(100), quiet)
    again = MemoryLimit(0)  # would say "out of memory" everywhere if it were asked
    assert search_max_batch(case, session, LocalRuntime(), again, quiet) == 91
    assert again.plans == []


def test_below_the_start_it_halves_and_none_when_nothing_fits(case, tmp_path: Path) -> None:  # noqa: ANN001
    run_plan = MemoryLimit(5)
    assert (
        search_max_batch(case, Session.open(tmp_path / "a"), LocalRuntime(), run_plan, quiet)
        == 3  # 95% of 4
    )
    assert [plan.batch_size for plan in run_plan.plans] == [16, 8, 4]
    assert (
        search_max_batch(case, Session.open(tmp_path / "b"), LocalRuntime(), MemoryLimit(0), quiet)
        is None
    )


def test_a_probe_failing_for_another_reason_ends_the_search(case, tmp_path: Path) -> None:  # noqa: ANN001
    run_plan = MemoryLimit(100, broken={64: Verdict.TIMEOUT})
    with pytest.raises(BatchSearchFailed) as failure:
        search_max_batch(case, Session.open(tmp_path / "s"), LocalRuntime(), run_plan, quiet)
    assert failure.value.verdict == Verdict.TIMEOUT
    assert "probe at batch 64" in failure.value.detail and "bs64" in failure.value.detail


def test_without_an_out_of_memory_the_largest_fit_is_measured_as_is(case, tmp_path: Path) -> None:  # noqa: ANN001
    run_plan = MemoryLimit(10_000)  # a CPU: nothing runs out before the ceiling
    session = Session.open(tmp_path / "s")
    assert search_max_batch(case, session, LocalRuntime(), run_plan, quiet, ceiling=64) == 64


@pytest.mark.parametrize(
    ("model", "precision", "first"),
    [("resnet50", "amp", 256), ("bert", "amp", 64), ("calibration", "fp32", 16)],
)
def test_on_a_gpu_the_search_starts_at_the_fixed_batch(
    case,
    tmp_path: Path,
    model: str,
    precision: str,
    first: int,  # noqa: ANN001
) -> None:
    gpu_case = replace(case, model=model, precision=precision)
    run_plan = MemoryLimit(1000)
    runtime = LocalRuntime(gpus=1)  # the machine's GPU count, given instead of read
    search_max_batch(gpu_case, Session.open(tmp_path / "s"), runtime, run_plan, quiet)
    assert run_plan.plans[0].batch_size == first


@pytest.mark.parametrize(
    "words",
    [
        "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
        "FIND was unable to find an engine to execute this computation",
    ],
)
def test_an_allocation_failure_probe_is_out_of_memory_with_its_words(
    case,
    tmp_path: Path,
    words: str,  # noqa: ANN001
) -> None:
    """The probe's script reports the failure as the OOM record (exit 86): its words are kept."""

    def run_plan(plan: RepeatPlan, runtime: Runtime) -> tuple[RepeatOutcome, Verdict]:
        verdict = Verdict.OK if plan.batch_size <= 32 else Verdict.OOM
        if verdict == Verdict.OOM:
            record = oom_record(0, plan.batch_size, RuntimeError(words))
            (plan.repeat_dir / "node0.log").write_text(f"noise\n{record}\n")
        return RepeatOutcome(verdict, [], 0.0, 0.0, verdict.value), verdict

    session = Session.open(tmp_path / "s")
    assert search_max_batch(case, session, LocalRuntime(), run_plan, quiet) == 30  # 95% of 32
    probe = json.loads(
        (session.case_dir(case) / "batch-search" / "bs64" / "verdict.json").read_text()
    )
    assert probe["verdict"] == "oom" and probe["words"] == words
