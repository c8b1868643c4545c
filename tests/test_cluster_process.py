"""The process runtime on real sshd nodes: no containers, the node's own Python over SSH."""

from __future__ import annotations

import json
import os
import sys
import threading
import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path

from driver.core.runner import run_cases
from driver.model.results import Session
from driver.runtimes.base import Verdict, session_label
from driver.runtimes.ssh.runtime import ProcessRuntime
from driver.verify.folder import verify_sessions
from tests.cluster_fixtures import (
    SshNode,
    calibration_case,
    direct_run,
    free_port,
    log_ranks,
    processes_with_env,
    quiet,
    records_of,
    two_nodes_two_repeats,
    wait_for,
    write_inventory,
)


def process_inventory(inventory_file, **defaults) -> Path:
    return inventory_file(defaults={"python": sys.executable, **defaults})


def test_two_nodes_with_the_nodes_python(inventory_file, tmp_path: Path) -> None:
    runtime = ProcessRuntime(process_inventory(inventory_file))
    session, record = two_nodes_two_repeats(runtime, tmp_path / "s")
    assert record["runtime"] == "process"
    # Each node runs in its own copy of the kit's code, under its own scratch folder.
    workdirs = {n: record["extra"]["nodes"][n]["workdir"] for n in ("node0", "node1")}
    assert workdirs["node0"] != workdirs["node1"]
    facts = json.loads((session.root / "provenance" / "node1.json").read_text())
    assert facts["environment"]["python_executable"] == sys.executable
    assert facts["host"]["nproc"] >= 1
    assert [c["name"] for c in facts["preflight"]] == ["ssh", "python", "devices", "disk"]
    assert not processes_with_env(f"DLPERF_RUN_ID=dlperf-{session_label(session.root)}")


def test_hostile_arguments_and_environment_stay_verbatim(
    inventory_file,
    tmp_path: Path,
) -> None:
    marker = f"/tmp/dlperf-pwned-{uuid.uuid4().hex}"
    hostile = f"$(touch {marker}-a) `touch {marker}-b` '; touch {marker}-c; ' \" \\ ; | & > <"
    inventory = process_inventory(inventory_file, devices=1, env={"DLPERF_HOSTILE": hostile})
    runtime = ProcessRuntime(inventory)
    program = "import os, sys; print(repr(os.environ['DLPERF_HOSTILE'])); print(repr(sys.argv[1]))"
    argv = [sys.executable, "-c", program, hostile]
    outcome, directory = direct_run(runtime, [argv, argv], tmp_path / "s")
    assert outcome.verdict == Verdict.OK, outcome.detail
    for index in (0, 1):
        lines = (directory / f"node{index}.log").read_text().splitlines()
        assert lines[:2] == [repr(hostile), repr(hostile)]
    assert not list(Path("/tmp").glob(Path(marker).name + "*"))


def test_hung_rank_times_out_and_no_process_is_left(
    inventory_file,
    tmp_path: Path,
) -> None:
    runtime = ProcessRuntime(process_inventory(inventory_file))
    case = calibration_case("2n4g", timeout_s=5, hang_at_step=3, faulty_rank=1)
    session = Session.open(tmp_path / "s")
    summary = run_cases([case], session, runtime, printer=quiet)
    [(_, _, verdict, detail)] = summary.failed
    assert verdict == "timeout" and "timeout of 5 s" in detail
    assert log_ranks(session.repeat_dir(case, 1) / "node0.log") == {0, 1}
    assert not processes_with_env(f"DLPERF_RUN_ID=dlperf-{session_label(session.root)}")


def test_failed_rank_is_failed(inventory_file, tmp_path: Path) -> None:
    runtime = ProcessRuntime(process_inventory(inventory_file))
    case = calibration_case("2n4g", fail_at_step=2, faulty_rank=2)
    session = Session.open(tmp_path / "s")
    summary = run_cases([case], session, runtime, printer=quiet)
    assert summary.failed == [(case.id, 1, "failed", "node node1: exit 3")]
    assert not processes_with_env(f"DLPERF_RUN_ID=dlperf-{session_label(session.root)}")


def test_node_lost_leaves_a_process_group_the_next_run_ends(
    inventory_file,
    ssh_nodes,
    tmp_path: Path,
) -> None:
    inventory = process_inventory(inventory_file)
    case = calibration_case("2n4g", repeats=1, step_time=0.05, measured_steps=600)
    session = Session.open(tmp_path / "s")
    label = session_label(session.root)
    needle = f"DLPERF_RUN_ID=dlperf-{label}"

    def node1_stepping() -> bool:
        # Past the calibration's start barrier: node1's ranks no longer need node0's rank 0,
        # which the head stops once node1 is lost (before it, they would exit with it).
        logs = ssh_nodes[1].scratch.glob("runs/*/*/node.log")
        return any('"dlperf": "step"' in log.read_text(errors="replace") for log in logs)

    def drop_node1() -> None:
        wait_for(
            lambda: len(processes_with_env(needle)) >= 6 and node1_stepping(), 60,
            "every rank running, node1's stepping",
        )  # fmt: skip
        ssh_nodes[1].kill(sessions_survive=True)

    killer = threading.Thread(target=drop_node1)
    killer.start()
    summary = run_cases([case], session, ProcessRuntime(inventory), printer=quiet)
    killer.join()
    [(_, _, verdict, detail)] = summary.failed
    assert verdict == "node-lost" and "node1" in detail
    # Without SSH the head cannot stop node1's processes: they live on until a run reaches it.
    assert processes_with_env(needle)
    ssh_nodes[1].start()
    quick = replace(case, total_steps=25, measured_steps=20)
    lines: list[str] = []
    summary = run_cases(
        [quick], Session.open(tmp_path / "s"), ProcessRuntime(inventory), printer=lines.append
    )
    assert summary.ok and summary.finished == 1
    assert records_of(session, case)["repeat-01.failed-1"]["verdict"] == "node-lost"
    # The resume ends the leftovers before anything runs, and says so.
    assert any(
        line.startswith("resume: node node1: ended leftovers of this session: killed leftover")
        for line in lines
    ), lines
    assert not processes_with_env(needle)


CPUINFO = Path(__file__).parent / "fixtures" / "fingerprint"


def simulated_hosts(ssh_client_key: Path, tmp_path: Path, cpuinfos: list[Path]) -> list[SshNode]:
    """sshd nodes on their own loopback addresses, each seeing its own /proc/cpuinfo."""
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    nodes = []
    for index, cpuinfo in enumerate(cpuinfos):
        address = f"127.0.0.{20 + index}"
        root = tmp_path / f"host{index}"
        root.mkdir(parents=True)
        node = SshNode(index, address, free_port(address), root, ssh_client_key, cpuinfo=cpuinfo)
        node.scratch.mkdir()
        node.start()
        nodes.append(node)
    return nodes


def test_two_hosts_of_two_machines_are_refused_as_one_case_never_averaged(
    ssh_client_key: Path, tmp_path: Path
) -> None:
    """Two simulated hosts whose CPUs differ (AVX2 / AVX-512 with bf16, real /proc/cpuinfo files
    of the two EPYC machines bind-mounted in each sshd's own mount namespace): every rank
    fingerprints its own node, and a 2-node repeat over both is a verdict, not a figure."""
    avx2, avx512 = CPUINFO / "cpuinfo-epyc-avx2.txt", CPUINFO / "cpuinfo-epyc-avx512bf16.txt"
    mixed = simulated_hosts(ssh_client_key, tmp_path / "mixed", [avx2, avx512])
    same = simulated_hosts(ssh_client_key, tmp_path / "same", [avx512, avx512])
    try:
        case = calibration_case("2n2g", repeats=1)
        for nodes, name in ((mixed, "mixed"), (same, "same")):
            inventory = write_inventory(
                tmp_path / f"{name}.yaml", nodes, defaults={"python": sys.executable}
            )
            session = Session.open(tmp_path / name)
            run_cases([case], session, ProcessRuntime(inventory), printer=quiet)
        mixed_record = json.loads(
            (Session(tmp_path / "mixed").repeat_dir(case, 1) / "record.json").read_text()
        )
        assert mixed_record["verdict"] == Verdict.PARSE_ERROR.value
        assert "its ranks ran on 2 machines by their hardware facts" in mixed_record["detail"]
        assert "avx2" in mixed_record["detail"] and "avx512_bf16" in mixed_record["detail"]
        (same_repeat,) = verify_sessions([tmp_path / "same"]).repeats
        assert same_repeat.fingerprint.endswith("avx512_bf16")  # the simulated host's, not ours
        assert verify_sessions([tmp_path / "mixed"]).repeats == []
    finally:
        for node in mixed + same:
            node.kill()


def test_one_connection_per_node_and_few_commands_per_repeat(
    inventory_file, tmp_path: Path
) -> None:
    """The driver's own cost per repeat must not grow with what each node is asked: every
    node is connected once for the session, and a prepared repeat asks each node for one
    attached start and nothing else: its run time, CPU time, log and cleanup come back on that
    same channel, whatever the node count."""
    runtime = ProcessRuntime(process_inventory(inventory_file, devices=1))
    calls: list[tuple[str, str]] = []
    for remote in runtime.remotes:
        for method in ("run", "run_bytes", "start"):
            original = getattr(remote, method)

            def counted(*args, _original=original, _key=(remote.node.name, method), **kwargs):
                calls.append(_key)
                return _original(*args, **kwargs)

            setattr(remote, method, counted)
    per_repeat: list[Counter] = []
    open_fds: list[int] = []
    run_repeat = runtime.run

    def run(plan):
        before = len(calls)
        outcome = run_repeat(plan)
        per_repeat.append(Counter(calls[before:]))
        open_fds.append(len(os.listdir("/proc/self/fd")))
        return outcome

    runtime.run = run
    case = calibration_case("2n2g", repeats=3)
    summary = run_cases([case], Session.open(tmp_path / "s"), runtime, printer=quiet)
    assert summary.ok and summary.finished == 3
    for node in ("node0", "node1"):
        for counts in per_repeat[1:]:  # the first repeat also prepares the session
            asked = {method: n for (name, method), n in counts.items() if name == node}
            assert asked == {"start": 1}
    assert [remote.connections_opened for remote in runtime.remotes] == [1, 1]
    # The watch's selector and each launch channel's readiness pipe are closed with the repeat.
    assert open_fds[1] == open_fds[2], open_fds
    steps_s = case.total_steps * 0.01  # calibration_case's step time
    for _case, record, path in Session.open(tmp_path / "s").records():
        for node, facts in record.extra["nodes"].items():
            # The node's own clock from its start stamp to the process's exit, and the CPU
            # its processes used (the calibration sleeps: far less than its run time).
            assert steps_s <= facts["process_seconds"] < steps_s + 30, (node, facts)
            assert 0 < facts["process_cpu_seconds"] < facts["process_seconds"], (node, facts)
        # The driver's own CPU over the repeat (its SSH threads, the parse): far less than the
        # repeat's wall time, since the driver sleeps while the nodes run. It may read 0:
        # os.times() counts in clock ticks (10 ms) and a repeat may cost less than one.
        wall = record.finished_at - record.started_at
        assert 0 <= record.extra["timings"]["driver_cpu_s"] < wall / 2, record.extra["timings"]
        for log in record.logs:
            assert "dlperf-collected" not in (path / log).read_text()
    for node in runtime.inventory.nodes:  # every run folder removed by its own launch
        assert not any(Path(node.scratch_dir, "runs").glob("*/dlperf-*")), node.name
