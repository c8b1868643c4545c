"""Helpers for the tests that train real framework models at tiny shapes through the driver.

Each framework's test module makes its environment once (``framework_env``), then runs small
cases with :func:`run_case`: the local runtime, the framework's own launcher, the dlperf-jsonl
parser and the window measurement, exactly as ``dlperf run`` does.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from driver.core.runner import run_cases
from driver.frameworks.base import FRAMEWORKS, REPO_ROOT
from driver.model.case import Case, Topology
from driver.model.results import RepeatRecord, Session
from driver.plugins import load_all
from driver.runtimes.local import LocalRuntime, process_environment
from tests.conftest import require_real

TINY_IMAGES: dict[str, Any] = {"image_size": 64, "num_classes": 10}
TINY_BERT: dict[str, Any] = {
    "bert_layers": 2,
    "bert_hidden": 64,
    "bert_heads": 2,
    "bert_intermediate": 128,
    "vocab_size": 500,
    "seq_len": 32,
    "max_predictions": 5,
}


def framework_env(name: str) -> str:
    """The framework's venv python, created from its requirements-cpu.txt on first use.

    Skips (fails under DLPERF_REQUIRE_REAL=1) when the environment cannot be made, e.g. with
    no network to the package index.
    """
    load_all()
    from driver.frameworks.envs import ensure_env

    try:
        return str(ensure_env(FRAMEWORKS.get(name), log=lambda _line: None))
    except Exception as error:  # noqa: BLE001 - any install failure means "no framework here"
        require_real(f"cannot create the {name} environment: {error}")
        raise  # unreachable: require_real skips or fails


@dataclass
class CaseRun:
    case: Case
    records: list[RepeatRecord]
    folder: Path

    def logs(self) -> str:
        return "\n".join(path.read_text() for path in sorted(self.folder.rglob("node*.log")))

    def weights_checksums(self) -> dict[int, float]:
        """rank -> sum(|w|) at the end (the ``weights_checksum`` option's lines)."""
        found = re.findall(r"dlperf-weights-checksum rank=(\d+) sum=([-\d.e+]+)", self.logs())
        return {int(rank): float(total) for rank, total in found}

    def assert_ranks_in_sync(self, ranks: int) -> None:
        sums = self.weights_checksums()
        assert sorted(sums) == list(range(ranks)), sums
        assert max(sums.values()) - min(sums.values()) <= 1e-4 * max(sums.values()), sums


def run_case(
    tmp_path: Path,
    framework: str,
    model: str,
    topology: str,
    *,
    precision: str = "fp32",
    xla: bool = False,
    batch_size: int = 4,
    options: dict[str, Any] | None = None,
    measured_steps: int = 3,
    timeout_s: float = 240.0,
) -> CaseRun:
    """One repeat of a tiny case through the driver; asserts it finished with a measurement."""
    shapes = TINY_BERT if model == "bert" else TINY_IMAGES
    case = Case(
        model=model,
        framework=framework,
        topology=Topology.parse(topology),
        batch_size=batch_size,
        precision=precision,
        dataset="synthetic",
        xla=xla,
        warmup_steps=1,
        measured_steps=measured_steps,
        total_steps=1 + measured_steps,
        repeats=1,
        timeout_s=timeout_s,
        options={**shapes, **(options or {})},
        profile="test",
    )
    session = Session.open(tmp_path / "session")
    summary = run_cases([case], session, LocalRuntime(), printer=lambda _line: None)
    run = CaseRun(case, [r for _, r, _ in session.records(include_failed=True)], session.root)
    assert summary.ok, f"{summary.failed}\n{run.logs()[-4000:]}"
    assert len(run.records) == 1 and run.records[0].throughput
    return run


def run_script(python: str, script: str, args: list[str]) -> subprocess.CompletedProcess:
    """The benchmark script alone, as a launcher would start one process of it."""
    return subprocess.run(
        [python, script, *args],
        cwd=REPO_ROOT,
        env=process_environment({}),
        capture_output=True,
        text=True,
        timeout=240,
    )


def run_python(python: str, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python, "-c", code],
        cwd=REPO_ROOT,
        env=process_environment({}),
        capture_output=True,
        text=True,
        timeout=240,
    )
