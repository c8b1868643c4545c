"""Llama trained for real through the driver at a tiny size, in PyTorch and in JAX: one
process, sharded (FSDP2; JAX's fsdp mesh) and data-parallel over two gloo processes, and over
two sshd nodes; tokens/s checked against a count of our own from the raw logs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from driver.core.report import tokens_per_second
from driver.core.runner import run_cases
from driver.core.summary import summarize
from driver.model.case import Case, Topology
from driver.model.results import Session
from driver.release.audit import audit
from driver.release.release import release
from driver.runtimes.ssh.runtime import ProcessRuntime
from tests.cluster_fixtures import quiet
from tests.real_frameworks import CaseRun, framework_env, run_case

TINY = {"llama_size": "llama-tiny", "seq_len": 32}
PUBLISHED = Path(__file__).resolve().parents[1] / "published" / "llama3"
SLOW = pytest.mark.skipif(
    not os.environ.get("DLPERF_SLOW_TESTS"),
    reason="about a minute on a 2-core CPU (4 ranks on 2 nodes, or one more JAX compile of a "
    "case the default suite already runs); set DLPERF_SLOW_TESTS=1",
)


@pytest.fixture(scope="module")
def python() -> str:
    return framework_env("pytorch")


@pytest.fixture(scope="module")
def jax_python() -> str:
    return framework_env("jax")


def framework_python(framework: str, request: pytest.FixtureRequest) -> str:
    """The framework's environment, made once per module by its fixture."""
    return request.getfixturevalue("python" if framework == "pytorch" else f"{framework}_python")


def step_records(run: CaseRun) -> list[dict[str, Any]]:
    records = []
    for line in run.logs().splitlines():
        start = line.find('{"')
        if start >= 0 and '"dlperf": "step"' in line:
            records.append(json.loads(line[start:]))
    return records


def independent_tokens_per_second(run: CaseRun) -> float:
    """Tokens of the timed steps of every rank over the slowest rank's window (its timestamps
    after the last warm-up step and after the last step), counted from the logs alone."""
    case = run.case
    seq_len = int(case.options["seq_len"])
    steps = step_records(run)
    ranks = sorted({r["rank"] for r in steps})
    assert len(ranks) == case.topology.world_size
    tokens, windows = 0, []
    for rank in ranks:
        mine = {r["step"]: r for r in steps if r["rank"] == rank}
        timed = range(case.warmup_steps + 1, case.total_steps + 1)
        tokens += sum(mine[s]["samples"] for s in timed) * seq_len
        windows.append(mine[case.total_steps]["t"] - mine[case.warmup_steps]["t"])
    return tokens / max(windows)


def peak_memory_by_rank(run: CaseRun) -> dict[int, dict[str, Any]]:
    """Each rank's end record's peak memory."""
    found = {}
    for line in run.logs().splitlines():
        start = line.find('{"')
        if start >= 0 and '"dlperf": "end"' in line:
            record = json.loads(line[start:])
            found[record["rank"]] = record.get("peak_memory")
    return found


def header_options(run: CaseRun) -> dict[str, Any]:
    return run.records[0].header["options"]


def check_tokens(run: CaseRun) -> None:
    measured = run.records[0].throughput
    assert measured is not None
    ours = independent_tokens_per_second(run)
    kit = measured * int(run.case.options["seq_len"])
    assert abs(kit - ours) / ours < 5e-4, (kit, ours)
    # The report's tokens/s columns (one repeat: its median is the repeat's).
    (summary,) = summarize([(run.case, run.records[0])])
    assert tokens_per_second(summary) == pytest.approx(kit, rel=1e-12)
    per_device = tokens_per_second(summary, per_device=True)
    assert per_device == pytest.approx(kit / run.case.topology.world_size, rel=1e-12)


@pytest.mark.parametrize(
    ("framework", "topology", "precision", "extra", "parallelism"),
    [
        ("pytorch", "1n1g", "amp", {"activation_checkpointing": "selective"}, "none"),
        ("pytorch", "1n2g", "amp", {}, "fsdp"),
        (
            "pytorch",
            "1n2g",
            "fp32",
            {"parallelism": "ddp", "activation_checkpointing": "full"},
            "ddp",
        ),
        # JAX: parameters sharded over a 2-device mesh, full rematerialisation of each block;
        # the same fsdp mesh runs over two sshd nodes below, in every suite.
        pytest.param(
            "jax", "1n2g", "amp", {"activation_checkpointing": "full"}, "fsdp", marks=SLOW
        ),
    ],
)
def test_llama_trains_and_its_tokens_per_second_match_the_logs(
    tmp_path: Path,
    request: pytest.FixtureRequest,
    framework: str,
    topology: str,
    precision: str,
    extra: dict[str, Any],
    parallelism: str,
) -> None:
    framework_python(framework, request)
    options = {**TINY, **extra, "weights_checksum": True}
    run = run_case(
        tmp_path, framework, "llama", topology, precision=precision, batch_size=2, options=options
    )
    header = header_options(run)
    assert header["parallelism"] == parallelism
    assert header["activation_checkpointing"] == extra.get("activation_checkpointing", "none")
    assert header["llama_size"] == "llama-tiny" and header["seq_len"] == 32
    run.assert_ranks_in_sync(run.case.topology.world_size)
    check_tokens(run)
    peaks = peak_memory_by_rank(run)
    assert sorted(peaks) == list(range(run.case.topology.world_size))
    for peak in peaks.values():  # a CPU rank's peak resident memory: torch or jaxlib > 100 MB
        assert peak["source"] == "getrusage ru_maxrss" and peak["bytes"] > 100e6
    if framework == "jax":  # the mesh the parallelism stands for: 2 devices, one fsdp axis
        assert header["mesh"] == {"data": 1, "fsdp": 2}
        assert header["distributed_backend"] == "gloo"
    if topology == "1n1g":
        check_release(run, tmp_path)


def check_release(run: CaseRun, tmp_path: Path) -> None:
    """A version of the Llama session beside torchtitan's and NeMo's figures: released and
    audited, its tables with tokens/s, its model cost the formula's (no torch needed)."""
    target = release(
        "v0.1-llama", [run.folder], reports_root=tmp_path / "reports", printer=quiet,
        imports=[PUBLISHED / "torchtitan.yaml", PUBLISHED / "nemo.yaml"],
    )  # fmt: skip
    readme = (target / "README.md").read_text()
    assert "| tokens/s " in readme and "| tokens/s/device " in readme
    assert "| peak GiB/device " in readme and "getrusage ru\\_maxrss" in readme
    assert "published by torchtitan (PyTorch)" in readme
    assert "published by NVIDIA NeMo" in readme
    counted = "6 x matmul parameters (all but the token embedding; a tied output projection counts)"
    assert counted in readme  # the cost's source, in the provenance
    assert audit(target).ok


@pytest.mark.parametrize(
    ("framework", "topology", "parallelism"),
    [
        ("pytorch", "2n2g", "fsdp"),
        ("jax", "2n2g", "fsdp"),
        pytest.param("pytorch", "2n4g", "hsdp", marks=SLOW),
        pytest.param("jax", "2n4g", "hsdp", marks=SLOW),
    ],
)
def test_llama_sharded_over_two_sshd_nodes(
    inventory_file,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    framework: str,
    topology: str,
    parallelism: str,
) -> None:
    """FSDP2 (or HSDP: shards within a node, replicas across) over two real sshd nodes (gloo
    over their network namespaces), through the process runtime, as on a cluster; in JAX, the
    processes joined by jax.distributed.initialize at the kit's coordinator address."""
    python = framework_python(framework, request)
    runtime = ProcessRuntime(inventory_file(defaults={"python": python}))
    case = Case(
        model="llama",
        framework=framework,
        topology=Topology.parse(topology),
        batch_size=2,
        precision="amp",
        dataset="synthetic",
        xla=False,
        warmup_steps=1,
        measured_steps=3,
        total_steps=4,
        repeats=1,
        timeout_s=240.0,
        options={**TINY, "parallelism": parallelism, "weights_checksum": True},
        profile="test",
    )
    session = Session.open(tmp_path / "session")
    summary = run_cases([case], session, runtime, printer=quiet)
    run = CaseRun(case, [r for _, r, _ in session.records(include_failed=True)], session.root)
    assert summary.ok, f"{summary.failed}\n{run.logs()[-4000:]}"
    assert header_options(run)["parallelism"] == parallelism
    run.assert_ranks_in_sync(case.topology.world_size)
    check_tokens(run)
