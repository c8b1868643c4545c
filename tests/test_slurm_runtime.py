"""The Slurm runtime against the real 2-node test cluster: repeats, the session's job, faults.

Every test ends with the queue empty: the kit never leaves a job behind.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from driver.cluster.slurm import SlurmConfig
from driver.core.selftest import calibration_cases
from driver.runtimes.base import Verdict
from driver.runtimes.plan import NodeCommand, RepeatPlan
from driver.runtimes.slurm.runtime import PLACEHOLDER, SlurmRuntime, job_name

if TYPE_CHECKING:  # imported by pytest_plugins first, so pytest rewrites its asserts
    from tests.slurm_fixtures import SlurmCluster

pytest_plugins = ["tests.slurm_fixtures"]

PLAN_CASE = calibration_cases(0.02, 8, ["2n4g"], 1, 20)[0]


@pytest.fixture
def cluster_env(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> SlurmCluster:
    """This process's Slurm clients point at the test cluster, outside any allocation."""
    for key in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    return slurm_cluster


@pytest.fixture
def runtime(cluster_env: SlurmCluster) -> Iterator[SlurmRuntime]:
    made = SlurmRuntime(config=SlurmConfig(time_limit="10", container="none"), printer=print)
    yield made
    made.close()
    assert cluster_env.drained() == [], "a job was left in the queue"


def plan_for(
    root: Path, argvs: list[list[str]], timeout_s: float = 60, repeat: int = 1
) -> RepeatPlan:
    """A plan whose node i runs ``argvs[i]`` (nodes still unknown: placeholders)."""
    case = dataclasses.replace(PLAN_CASE, timeout_s=timeout_s)
    commands = tuple(
        NodeCommand(node=PLACEHOLDER.format(index=i), argv=argv, env={"DLPERF_TEST": str(i)})
        for i, argv in enumerate(argvs)
    )
    session = root / "session"
    return RepeatPlan(
        case=case,
        repeat=repeat,
        batch_size=8,
        commands=commands,
        repeat_dir=session / "cases" / "t" / f"repeat-{repeat:02d}",
        session_root=session,
        parser="dlperf-jsonl",
    )


def python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


REPORT = python(
    """
    import os, socket
    print("node", os.environ["SLURM_NODEID"], socket.gethostname(), os.environ["DLPERF_TEST"])
    """
)


def test_two_repeats_share_the_sessions_job(runtime: SlurmRuntime, tmp_path: Path) -> None:
    first = runtime.run(plan_for(tmp_path, [REPORT, REPORT]))
    assert first.verdict == Verdict.OK, first.detail
    plan = plan_for(tmp_path, [REPORT, REPORT], repeat=2)
    second = runtime.run(plan)
    assert second.verdict == Verdict.OK, second.detail
    assert (plan.repeat_dir / "node0.log").read_text() == "node 0 n1 0\n"
    assert (plan.repeat_dir / "node1.log").read_text() == "node 1 n2 1\n"
    facts = first.extra["slurm"], second.extra["slurm"]
    assert facts[0]["job_id"] == facts[1]["job_id"]  # one job per session
    assert facts[0]["nodes"] == ["n1", "n2"] and facts[0]["partition"] == "debug"
    assert facts[0]["version"].startswith("slurm")
    assert f"JobId={facts[0]['job_id']}" in facts[0]["scontrol_show_job"]
    assert [n.node for n in second.nodes] == ["n1", "n2"]
    assert [n.exit_code for n in second.nodes] == [0, 0]
    # The driver's CPU over a repeat counts the srun it reaped: more than nothing, less than
    # the repeat's wall time.
    timings = second.extra["slurm"]["timings"]
    assert 0 < timings["driver_cpu_s"] < timings["wall_s"], timings
    # The job is the session's, named after it, and still held until the runtime closes.
    assert runtime.allocation is not None
    info = subprocess.run(
        ["squeue", "--noheader", "--format=%j", f"--jobs={facts[0]['job_id']}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert info == job_name(plan.session_root)


def test_rank_out_of_memory_is_an_oom_verdict(runtime: SlurmRuntime, tmp_path: Path) -> None:
    sleeper, oom = python("import time; time.sleep(30)"), python("raise SystemExit(86)")
    plan = plan_for(tmp_path, [sleeper, oom])
    started = time.monotonic()
    outcome = runtime.run(plan)
    assert outcome.verdict == Verdict.OOM, outcome.detail
    assert "n2" in outcome.detail and "86" in outcome.detail
    assert outcome.nodes[1].exit_code == 86
    assert time.monotonic() - started < 20  # the other node was stopped, not waited for


def test_timeout_stops_the_step_and_keeps_the_job(runtime: SlurmRuntime, tmp_path: Path) -> None:
    hang = python("import time; print('started', flush=True); time.sleep(300)")
    outcome = runtime.run(plan_for(tmp_path, [hang, hang], timeout_s=3))
    assert outcome.verdict == Verdict.TIMEOUT, outcome.detail
    job = outcome.extra["slurm"]["job_id"]
    steps = subprocess.run(
        ["squeue", "--noheader", "--steps", f"--jobs={job}", "--format=%j"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert [s for s in steps if s != "batch"] == []
    # The next repeat runs in the same job.
    again = runtime.run(plan_for(tmp_path, [REPORT, REPORT], repeat=2))
    assert again.verdict == Verdict.OK and again.extra["slurm"]["job_id"] == job


def test_job_cancelled_from_outside(
    runtime: SlurmRuntime, cluster_env: SlurmCluster, tmp_path: Path
) -> None:
    hang = python("import time; print('started', flush=True); time.sleep(300)")
    plan = plan_for(tmp_path, [hang, hang], timeout_s=120)
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(outcome=runtime.run(plan)))
    thread.start()
    log = plan.repeat_dir / "node1.log"
    deadline = time.monotonic() + 30
    while not (log.exists() and "started" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert runtime.allocation is not None
    cluster_env.client("scancel", runtime.allocation.job_id)
    thread.join(timeout=60)
    outcome = result["outcome"]
    assert outcome.verdict == Verdict.INTERRUPTED, outcome.detail
    assert "cancelled from outside" in outcome.detail


def test_split_jobs_start_a_new_job_when_the_next_repeat_would_outlast_the_current(
    cluster_env: SlurmCluster, tmp_path: Path
) -> None:
    """slurm.split_jobs: a repeat estimated at 119 s fits a fresh 2-minute job, and no longer
    the same job once a repeat of 2 s has run in it: the second repeat gets a job of its own,
    and the first job is cancelled (never left to run into its limit)."""
    lines: list[str] = []
    config = SlurmConfig(time_limit="2", container="none", split_jobs=True)
    runtime = SlurmRuntime(config=config, printer=lines.append)
    runtime.repeat_seconds = {PLAN_CASE.id: 119.0}
    slow = python("import time; time.sleep(2)")
    try:
        first = runtime.run(plan_for(tmp_path, [slow, slow]))
        second = runtime.run(plan_for(tmp_path, [REPORT, REPORT], repeat=2))
    finally:
        runtime.close()
    assert first.verdict == second.verdict == Verdict.OK, (first.detail, second.detail)
    jobs = first.extra["slurm"]["job_id"], second.extra["slurm"]["job_id"]
    assert jobs[0] != jobs[1], lines
    assert any(
        f"cancelled job {jobs[0]}" in line and "(split_jobs): a new job" in line for line in lines
    ), lines
    assert cluster_env.drained() == []


def test_split_jobs_keep_one_job_while_the_next_repeat_fits(
    cluster_env: SlurmCluster, tmp_path: Path
) -> None:
    config = SlurmConfig(time_limit="2", container="none", split_jobs=True)
    runtime = SlurmRuntime(config=config, printer=print)
    runtime.repeat_seconds = {PLAN_CASE.id: 30.0}
    try:
        first = runtime.run(plan_for(tmp_path, [REPORT, REPORT]))
        second = runtime.run(plan_for(tmp_path, [REPORT, REPORT], repeat=2))
    finally:
        runtime.close()
    assert first.extra["slurm"]["job_id"] == second.extra["slurm"]["job_id"]


def test_job_time_limit(cluster_env: SlurmCluster, tmp_path: Path) -> None:
    runtime = SlurmRuntime(config=SlurmConfig(time_limit="1", container="none"), printer=print)
    try:
        hang = python("import time; time.sleep(600)")
        outcome = runtime.run(plan_for(tmp_path, [hang, hang], timeout_s=240))
    finally:
        runtime.close()
    assert outcome.verdict == Verdict.TIMEOUT, outcome.detail
    assert "time limit" in outcome.detail
    assert cluster_env.drained() == []


def test_node_killed_mid_repeat(cluster_env: SlurmCluster, tmp_path: Path) -> None:
    runtime = SlurmRuntime(config=SlurmConfig(time_limit="10", container="none"), printer=print)
    hang = python("import time; print('started', flush=True); time.sleep(300)")
    first = plan_for(tmp_path, [REPORT, REPORT])
    plan = plan_for(tmp_path, [hang, hang], timeout_s=120, repeat=2)
    result: dict = {}
    try:
        assert runtime.run(first).verdict == Verdict.OK
        thread = threading.Thread(target=lambda: result.update(outcome=runtime.run(plan)))
        thread.start()
        log = plan.repeat_dir / "node1.log"
        deadline = time.monotonic() + 30
        while not (log.exists() and "started" in log.read_text()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert cluster_env.kill_node("n2")
        thread.join(timeout=120)
    finally:
        runtime.close()
        cluster_env.restart_node("n2")
    outcome = result["outcome"]
    assert outcome.verdict == Verdict.NODE_LOST, outcome.detail
    assert "n2" in outcome.detail
    # The finished repeat's logs are kept.
    assert (first.repeat_dir / "node1.log").read_text() == "node 1 n2 1\n"
    assert cluster_env.drained() == []


CTRL_C_SCRIPT = """
import sys, time
from pathlib import Path
from driver.runtimes.slurm.runtime import SlurmRuntime
from driver.cluster.slurm import SlurmConfig
from tests.test_slurm_runtime import plan_for, python

runtime = SlurmRuntime(config=SlurmConfig(time_limit="10", container="none"))
hang = python("import time; print('started', flush=True); time.sleep(300)")
runtime.run(plan_for(Path(sys.argv[1]), [hang, hang], timeout_s=200))
"""


def test_ctrl_c_on_the_head(cluster_env: SlurmCluster, tmp_path: Path) -> None:
    head = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_SCRIPT, str(tmp_path)],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    log = tmp_path / "session" / "cases" / "t" / "repeat-01" / "node1.log"
    deadline = time.monotonic() + 60
    while not (log.exists() and "started" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cluster_env.queue(), "the session's job should be running"
    head.send_signal(signal.SIGINT)
    output, _ = head.communicate(timeout=60)
    assert head.returncode != 0 and "KeyboardInterrupt" in output, output
    interrupted = json.loads((log.parent / "interrupted.json").read_text())
    assert interrupted["detail"].startswith("Ctrl-C")
    assert cluster_env.drained() == []


def test_selftest_through_slurm_two_nodes_two_processes(
    cluster_env: SlurmCluster, tmp_path: Path
) -> None:
    """The calibration workload through planner, spawn launcher, Slurm, parser and statistics:
    2 nodes x 2 processes within 0.05% of what it delivered by its own clock (the selftest's
    truth; a rank the busy host wakes late, up to ~10 ms here, is the host's lateness, printed
    apart). 2 s windows, 3 repeats (the kit's figure is their median). The session's job is
    cancelled before the seal, so the line Slurm writes into its output as it cancels is
    sealed, and the seal still holds once the job is gone."""
    from driver.core.selftest import run_selftest

    runtime = SlurmRuntime(config=SlurmConfig(time_limit="10", container="none"))
    lines: list[str] = []
    folder = tmp_path / "session"
    try:
        results = run_selftest(
            step_time=0.02, topologies=("2n4g",), repeats=3, measured_steps=100,
            runtime=runtime, printer=lines.append, results_dir=folder,
        )  # fmt: skip
    finally:
        runtime.close()
    (result,) = results
    assert result.topology == "2n4g"
    assert result.error < 0.0005, lines
    print("\n".join(lines))
    assert cluster_env.drained() == []
    assert_the_seal_holds_with_the_job_output(folder)


def assert_the_seal_holds_with_the_job_output(folder: Path) -> None:
    """The session's seal holds every file as it is now, the job's output among them."""
    from driver.files import sha256_file
    from driver.model.seal import load_seal

    sealed = load_seal((folder / "session-manifest.json").read_bytes(), "seal").files
    assert any(path.startswith("slurm/job-") for path in sealed)
    changed = [p for p, f in sealed.items() if sha256_file(folder / p) != f.sha256]
    assert changed == []


def test_a_run_sessions_seal_holds_after_its_job_is_cancelled(
    cluster_env: SlurmCluster, tmp_path: Path
) -> None:
    """``dlperf run``'s session under Slurm (outside an allocation): its job is cancelled
    before the seal, not at exit after it, so what Slurm writes into the job's output as it
    cancels is sealed (a release of the session would otherwise refuse it)."""
    from driver.core.selftest import calibration_cases
    from driver.core.session import Selection, run_session

    cases = calibration_cases(0.02, 32, ["2n2g"], 1, 20)
    runtime = SlurmRuntime(config=SlurmConfig(time_limit="10", container="none"))
    root = tmp_path / "results" / "session"
    try:
        code = run_session(
            Selection(cases, "selftest", "test", {}), runtime, root, argv=["run"],
            progress="plain",
        )  # fmt: skip
    finally:
        runtime.close()
    assert code == 0
    assert cluster_env.drained() == []
    assert_the_seal_holds_with_the_job_output(root)


# The real pyxis runs on a cluster of its own (test_slurm_pyxis.py). This stand-in srun answers
# `--help` with pyxis's flags (so `container: auto` picks pyxis), records each call's container
# flags and the call's last argument, and hands the rest to the real srun: the runtime's pyxis
# path runs for real, with the nodes' own python3 standing in for the image's.
PYXIS_STAND_IN = """#!/bin/sh
if [ "$1" = "--help" ]; then
  "$REAL_SRUN" --help
  echo "      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH"
  for flag in name mounts workdir writable; do echo "      --container-$flag"; done
  exit 0
fi
n=$#; i=0; flags=""; last=""
while [ $i -lt $n ]; do
  a=$1; shift; i=$((i+1)); last=$a
  case "$a" in --container-*) flags="$flags $a" ;; *) set -- "$@" "$a" ;; esac
done
[ -n "$flags" ] && echo "$flags | $(echo "$last" | head -n 1)" >> "$PYXIS_LOG"
exec "$REAL_SRUN" "$@"
"""


def test_pyxis_path_makes_one_container_per_session(
    cluster_env: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from driver.core.selftest import run_selftest
    from driver.frameworks.base import REPO_ROOT

    stand_in = tmp_path / "bin" / "srun"
    stand_in.parent.mkdir()
    stand_in.write_text(PYXIS_STAND_IN)
    stand_in.chmod(0o755)
    log = tmp_path / "pyxis.log"
    monkeypatch.setenv("REAL_SRUN", str(shutil.which("srun")))
    monkeypatch.setenv("PYXIS_LOG", str(log))
    monkeypatch.setenv("PATH", f"{stand_in.parent}:{os.environ['PATH']}")
    image = "registry.example#calibration@sha256:" + "0" * 64
    config = SlurmConfig(time_limit="10", image={"calibration": image}, mounts=["/tmp:/tmp"])
    runtime = SlurmRuntime(config=config)
    assert runtime.platform.name == "pyxis"
    assert runtime.python("calibration") == "python3"
    results_dir = tmp_path / "session"
    try:
        (result,) = run_selftest(
            step_time=0.01, topologies=("2n4g",), repeats=2, measured_steps=20,
            runtime=runtime, results_dir=results_dir, printer=lambda _line: None,
        )  # fmt: skip
    finally:
        runtime.close()
    assert result.measured > 0
    calls = log.read_text().splitlines()
    mounts = f"--container-mounts={REPO_ROOT}:{REPO_ROOT}:ro,{results_dir}:{results_dir},/tmp:/tmp"
    flags = (
        f" --container-image={image} --container-name=dlperf-calibration {mounts} "
        f"--container-workdir={REPO_ROOT}"
    )
    # One container per node made once for the session, then every repeat's step reuses it.
    assert calls[0] == f"{flags} | true"
    assert [call.split(" | ")[0] for call in calls[1:]] == [flags, flags]
    assert all(call.split(" | ")[1].startswith("case ") for call in calls[1:])
    assert cluster_env.drained() == []


def run_on_the_cluster(
    case: Any, tmp_path: Path, config: SlurmConfig | None = None
) -> tuple[Any, Any]:
    """``case`` on the test cluster's nodes through the Slurm runtime (no container unless
    ``config`` says): its finished run (``CaseRun``, every repeat ok) and the session."""
    from driver.core.runner import run_cases
    from driver.model.results import Session
    from tests.real_frameworks import CaseRun

    runtime = SlurmRuntime(config=config or SlurmConfig(time_limit="10", container="none"))
    session = Session.open(tmp_path / "session")
    try:
        summary = run_cases([case], session, runtime, printer=lambda _line: None)
    finally:
        runtime.close()
    run = CaseRun(case, [r for _, r, _ in session.records(include_failed=True)], session.root)
    assert summary.ok, f"{summary.failed}\n{run.logs()[-4000:]}"
    return run, session


def test_pytorch_resnet50_two_nodes_two_processes(
    cluster_env: SlurmCluster, tmp_path: Path
) -> None:
    """Real training steps: torchrun on each node (gloo across the two node namespaces), the
    head at n1's NodeAddr, ranks 0-1 on n1 and 2-3 on n2, weights in sync at the end."""
    from driver.model.case import Case, Topology
    from tests.real_frameworks import TINY_IMAGES, framework_env

    framework_env("pytorch")
    case = Case(
        model="resnet50", framework="pytorch", topology=Topology.parse("2n4g"), batch_size=2,
        precision="fp32", dataset="synthetic", warmup_steps=1, measured_steps=2, total_steps=3,
        repeats=1, timeout_s=300, options={**TINY_IMAGES, "weights_checksum": True},
        profile="test",
    )  # fmt: skip
    run, session = run_on_the_cluster(case, tmp_path)
    (record,) = run.records
    assert record.throughput and record.runtime == "slurm"
    assert record.extra["slurm"]["nodes"] == ["n1", "n2"]
    run.assert_ranks_in_sync(4)
    directory = session.repeat_dir(case, 1)
    assert '"hostname": "n1"' in (directory / "node0.log").read_text()
    assert '"hostname": "n2"' in (directory / "node1.log").read_text()
    assert cluster_env.drained() == []


@pytest.mark.skipif(
    not os.environ.get("DLPERF_SLOW_TESTS"),
    reason="about 75 s a case on a 2-core CPU, over the JAX tests' share of the suite's time "
    "(JAX's two-node runs go through sshd in every suite); set DLPERF_SLOW_TESTS=1",
)
@pytest.mark.parametrize(
    ("topology", "tasks", "coordinator"),
    [
        # One process per node task: JAX's own Slurm detection (the step's first node, n1).
        ("2n2g", "node", "slurm"),
        # Two processes per node task: the kit's coordinator, Slurm's task ids kept out.
        ("2n4g", "node", "kit"),
        # One Slurm task per device (srun starts every process): JAX's detection again.
        ("2n4g", "device", "slurm"),
    ],
)
def test_jax_llama_sharded_over_two_slurm_nodes(
    cluster_env: SlurmCluster, tmp_path: Path, topology: str, tasks: str, coordinator: str
) -> None:
    """JAX under Slurm: each node's processes join the others with jax.distributed.initialize,
    through JAX's own Slurm detection where each is a task of the step, else at the coordinator
    the runtime exports (MASTER_ADDR:MASTER_PORT, n1's NodeAddr); Llama's parameters sharded over
    the mesh, gloo between the node namespaces."""
    from driver.model.case import Case, Topology
    from tests.real_frameworks import framework_env

    framework_env("jax")
    case = Case(
        model="llama", framework="jax", topology=Topology.parse(topology), batch_size=2,
        precision="amp", dataset="synthetic", warmup_steps=1, measured_steps=2, total_steps=3,
        repeats=1, timeout_s=300,
        options={"llama_size": "llama-tiny", "seq_len": 32, "weights_checksum": True},
        profile="test",
    )  # fmt: skip
    config = SlurmConfig(time_limit="10", container="none", tasks=tasks, mpi="none")
    run, _session = run_on_the_cluster(case, tmp_path, config)
    (record,) = run.records
    assert record.runtime == "slurm" and record.extra["slurm"]["nodes"] == ["n1", "n2"]
    world = case.topology.world_size
    assert record.header["options"]["mesh"] == {"data": 1, "fsdp": world}
    run.assert_ranks_in_sync(world)
    headers = [x[x.index("{") :] for x in run.logs().splitlines() if '"dlperf": "header"' in x]
    met = [json.loads(header)["options"]["coordinator"] for header in headers]
    assert met == [coordinator] * world, met
    assert cluster_env.drained() == []


def test_inside_an_allocation_steps_go_into_it(cluster_env: SlurmCluster, tmp_path: Path) -> None:
    """The kit started by a batch job (SLURM_JOB_ID set): every repeat is a step of that job,
    no job of its own is submitted. `dlperf selftest --runtime slurm` from the job's script."""
    from driver.frameworks.base import REPO_ROOT

    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text("slurm:\n  time_limit: '10'\n  container: none\n")
    command = shlex.join([
        sys.executable, "-m", "driver.frontend.cli", "selftest", "--runtime", "slurm",
        "--inventory", str(cluster_file), "--repeats", "1", "--step-time", "0.01",
    ])  # fmt: skip
    out = tmp_path / "job.out"
    submitted = cluster_env.client(
        "sbatch", "--parsable", "-N2", "--exclusive", f"--output={out}",
        f"--chdir={REPO_ROOT}", f"--export=ALL,PYTHONPATH={REPO_ROOT}", "--wrap", command,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip()
    assert cluster_env.drained(timeout=180) == [], out.read_text() if out.exists() else ""
    text = out.read_text()
    assert "submitted job" not in text, text
    for topology in ("1n1g", "1n2g", "2n2g"):
        assert re.search(rf"selftest {topology}: .* \(ok, bound", text), text
    steps = cluster_env.client("scontrol", "show", "job", job).stdout
    assert "JobState=COMPLETED" in steps, steps


def test_clean_leftovers_cancels_the_sessions_old_job(
    cluster_env: SlurmCluster, tmp_path: Path
) -> None:
    """A run killed with no chance to cancel (SIGKILL) leaves its job; the next run of the same
    session cancels it, and nothing of another session."""
    session = tmp_path / "session"
    other = cluster_env.client("sbatch", "--parsable", "-N1", "--job-name=someone-else",
                               "--wrap", "sleep 300")  # fmt: skip
    left = cluster_env.client("sbatch", "--parsable", "-N1", f"--job-name={job_name(session)}",
                              "--wrap", "sleep 300")  # fmt: skip
    runtime = SlurmRuntime(config=SlurmConfig(container="none"))
    try:
        done = runtime.clean_leftovers(session)
        assert done == [f"cancelled leftover Slurm job {left.stdout.strip()} ({job_name(session)})"]
        assert other.stdout.strip() in cluster_env.queue()
    finally:
        cluster_env.client("scancel", other.stdout.strip())
    assert cluster_env.drained() == []


def test_allreduce_probe_is_a_step_of_the_sessions_job(
    cluster_env: SlurmCluster, tmp_path: Path
) -> None:
    from driver.diagnose.probes import run_allreduce_probe
    from tests.real_frameworks import framework_env

    framework_env("pytorch")
    runtime = SlurmRuntime(config=SlurmConfig(time_limit="10", container="none"))
    try:
        result = run_allreduce_probe(
            tmp_path / "session", runtime, "2n4g", sizes_mb="1", iters=3, warmup=1
        )
    finally:
        runtime.close()
    assert result["world_size"] == 4 and result["nodes"] == 2 and result["runtime"] == "slurm"
    assert result["busbw_gbps"] > 0
    assert cluster_env.drained() == []


def test_one_task_per_device(cluster_env: SlurmCluster, tmp_path: Path) -> None:
    """`tasks: device`: Slurm starts every process (2 tasks per node), the script without its
    launcher, ranks from SLURM_PROCID. `mpi: none` here: Debian's pmix plug-in does not load
    on this machine, and the calibration workload needs no MPI."""
    import json as json_

    from driver.core.selftest import ERROR_BOUND, run_selftest

    runtime = SlurmRuntime(config=SlurmConfig(time_limit="10", container="none", tasks="device",
                                              mpi="none"))  # fmt: skip
    try:
        (result,) = run_selftest(
            step_time=0.02, topologies=("2n4g",), repeats=1, measured_steps=50,
            runtime=runtime, results_dir=tmp_path / "s", printer=lambda _line: None,
        )  # fmt: skip
    finally:
        runtime.close()
    assert result.error < ERROR_BOUND
    (record,) = (tmp_path / "s").rglob("record.json")
    srun = json_.loads(record.read_text())["extra"]["slurm"]["srun"]
    assert "--ntasks-per-node=2" in srun and "--mpi=none" in srun and "driver.spawn" not in srun
    for log, ranks in (("node0.log", {0, 1}), ("node1.log", {2, 3})):
        lines = (record.parent / log).read_text().splitlines()
        assert {json_.loads(line)["rank"] for line in lines if line.startswith("{")} == ranks
    assert cluster_env.drained() == []


def test_queue_wait_is_visible_and_bounded(cluster_env: SlurmCluster, tmp_path: Path) -> None:
    """While another job holds the nodes the session's job waits, its state printed as it
    changes; past slurm.queue_timeout_s it is cancelled (a timeout verdict); once the nodes
    free up, the next repeat's job runs."""
    blocker = cluster_env.client("sbatch", "--parsable", "-N2", "--exclusive",
                                 "--job-name=someone-else", "--wrap", "sleep 300")  # fmt: skip
    assert blocker.returncode == 0, blocker.stderr
    lines: list[str] = []
    config = SlurmConfig(time_limit="10", container="none", queue_timeout_s=4)
    runtime = SlurmRuntime(config=config, printer=lines.append)
    try:
        waited = runtime.run(plan_for(tmp_path, [REPORT, REPORT]))
        assert waited.verdict == Verdict.TIMEOUT, waited.detail
        assert "in the queue (slurm.queue_timeout_s); cancelled" in waited.detail
        assert any(re.search(r"slurm: job \d+ PENDING \((Resources|Priority)\)", x) for x in lines)
        assert cluster_env.queue() == [blocker.stdout.strip()]
        cluster_env.client("scancel", blocker.stdout.strip())
        runtime.config = config.model_copy(update={"queue_timeout_s": 60})
        again = runtime.run(plan_for(tmp_path, [REPORT, REPORT], repeat=2))
        assert again.verdict == Verdict.OK, again.detail
    finally:
        cluster_env.client("scancel", blocker.stdout.strip())
        runtime.close()
    assert cluster_env.drained() == []


def test_upstream_sources_are_refused_before_any_job_without_a_container(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An upstream source's code is only in its own image; with ``container: none`` Slurm steps
    run the nodes' own Python, where its node command would fail at once at ``cd``. Refused
    with the fix (pyxis or oci run the source's image: tests/test_slurm_upstream.py), in
    --dry-run and at run time, before anything is submitted (no cluster needed)."""
    from driver.core.plan import dry_run_plan
    from driver.frontend.cli import main
    from driver.runtimes.base import RuntimeConfigError
    from driver.runtimes.slurm import client
    from tests.test_upstream_sources import case_for

    for key in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(key)

    def no_slurm(*args: object, **kwargs: object) -> None:
        raise AssertionError("a Slurm command ran for a refused source")

    real_slurm = client.slurm
    monkeypatch.setattr(client, "slurm", no_slurm)
    runtime = SlurmRuntime(config=SlurmConfig(container="none"), printer=print)
    case = case_for("ngc-pytorch", "resnet50")
    plan = dataclasses.replace(
        dry_run_plan(case, runtime, 64), repeat_dir=tmp_path / "r", session_root=tmp_path
    )
    with pytest.raises(RuntimeConfigError, match="--runtime docker"):
        runtime.describe(plan)
    outcome = runtime.run(plan)
    assert outcome.verdict == Verdict.FAILED and outcome.nodes == []
    assert "upstream source 'ngc-pytorch' runs in its own image" in outcome.detail
    assert runtime.allocation is None
    # The kit's own scripts are not refused.
    assert runtime.refused(dataclasses.replace(plan, case=PLAN_CASE)) == ""
    assert "set slurm.container: pyxis or oci" in outcome.detail
    # The CLI's dry run says so and exits 2 (its runtime asks srun whether pyxis is there).
    monkeypatch.setattr(client, "slurm", real_slurm)
    code = main([
        "run", "--runtime", "slurm", "--matrix",
        str(Path(__file__).parents[1] / "NVIDIADeepLearningExamples/PyTorch/matrix.yaml"),
        "--profile", "dlperf", "--nodes", "1", "--gpus", "1", "--dry-run",
    ])  # fmt: skip
    assert code == 2 and "--runtime docker" in capsys.readouterr().err
    runtime.close()
