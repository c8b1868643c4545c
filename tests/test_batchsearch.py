"""The batch=max search on its own: it plans each probe and runs it through the function it is
given (the runner passes ``run_plan``; real probe runs are in test_runner.py). Here that
function answers from the probe's batch, so the doubling, the bisection, the probe folders and
the resume of an interrupted search are checked without starting a process."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

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
    assert search_max_batch(case, session, LocalRuntime(), run_plan, quiet) == 96
    assert [plan.batch_size for plan in run_plan.plans] == [16, 32, 64, 128, 96, 112, 104]
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
    assert found == 1472 and 1500 - found <= found // 16


def test_a_resumed_search_reads_the_probes_it_already_ran(case, tmp_path: Path) -> None:  # noqa: ANN001
    session = Session.open(tmp_path / "s")
    search_max_batch(case, session, LocalRuntime(), MemoryLimit(100), quiet)
    again = MemoryLimit(0)  # would say "out of memory" everywhere if it were asked
    assert search_max_batch(case, session, LocalRuntime(), again, quiet) == 96
    assert again.plans == []


def test_below_the_start_it_halves_and_none_when_nothing_fits(case, tmp_path: Path) -> None:  # noqa: ANN001
    run_plan = MemoryLimit(5)
    assert (
        search_max_batch(case, Session.open(tmp_path / "a"), LocalRuntime(), run_plan, quiet) == 4
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
