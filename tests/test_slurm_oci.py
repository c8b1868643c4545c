"""Slurm's own OCI containers (``srun --container=<bundle>``): the bundles the kit makes
(driver/images/oci.py) and the slurm runtime's ``container: oci``, for real on the 2-node test
cluster with runc started by slurmstepd on each node, from the kit's ``cpu-python`` image.

The cluster's ``oci.conf`` is written beside its ``slurm.conf`` after it started: slurmstepd
reads it at every step's launch (Slurm 22.05's ``setup_container``), so no restart is needed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from driver.cluster.slurm import SlurmConfig
from driver.core.selftest import calibration_cases
from driver.images.oci import (
    MARKER,
    Mount,
    OciBundleError,
    adjust_config,
    make_session_bundle,
    read_config,
    slurm_oci_conf,
)
from driver.runtimes.base import RuntimeConfigError, Verdict
from driver.runtimes.plan import NodeCommand, RepeatPlan
from driver.runtimes.slurm.runtime import PLACEHOLDER, SlurmRuntime
from tests.conftest import require_real

if TYPE_CHECKING:  # imported by pytest_plugins first, so pytest rewrites its asserts
    from tests.slurm_fixtures import SlurmCluster

pytest_plugins = ["tests.slurm_fixtures"]

PLAN_CASE = calibration_cases(0.02, 8, ["2n4g"], 1, 20)[0]
SPEC = {  # the parts of `runc spec`'s config.json that the kit changes
    "ociVersion": "1.0.2-dev",
    "process": {"terminal": True, "args": ["sh"], "cwd": "/", "env": ["PATH=/opt/venv/bin:/bin"]},
    "root": {"path": "rootfs", "readonly": True},
    "hostname": "runc",
    "mounts": [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/tmp", "type": "bind", "source": "/somewhere", "options": ["rbind"]},
    ],
    "linux": {"namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")]},
}


def fake_bundle(folder: Path, config: dict[str, Any] | None = None) -> Path:
    """A small bundle: config.json and a root with bin/sh and etc/os-release."""
    (folder / "rootfs" / "bin").mkdir(parents=True)
    (folder / "rootfs" / "bin" / "sh").write_text("#!\n")
    (folder / "rootfs" / "etc").mkdir()
    (folder / "rootfs" / "etc" / "os-release").write_text("ID=fake\n")
    (folder / "config.json").write_text(json.dumps(config or SPEC))
    return folder


def plan_for(root: Path, argvs: list[list[str]], framework: str = "calibration") -> RepeatPlan:
    case = dataclasses.replace(PLAN_CASE, timeout_s=120, framework=framework)
    commands = tuple(
        NodeCommand(node=PLACEHOLDER.format(index=i), argv=argv, env={"DLPERF_TEST": str(i)})
        for i, argv in enumerate(argvs)
    )
    session = root / "session"
    return RepeatPlan(
        case=case, repeat=1, batch_size=8, commands=commands,
        repeat_dir=session / "cases" / "t" / "repeat-01", session_root=session,
        parser="dlperf-jsonl",
    )  # fmt: skip


SRUN_HELP = """#!/bin/sh
echo "Usage: srun [OPTIONS(0)...]"
echo "      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH"
[ -n "$WITH_CONTAINER" ] && echo "      --container             Path to OCI container bundle"
exit 0
"""


@pytest.fixture
def stand_in_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """srun and sbatch stand-ins first on PATH: `srun --help` lists Slurm's --container only
    when WITH_CONTAINER is set (a Slurm older than 21.08 does not)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("srun", "sbatch"):
        (folder / name).write_text(SRUN_HELP)
        (folder / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    return folder


# -- the bundle the kit writes -------------------------------------------------------------
def test_adjusted_config_shares_the_nodes_network_and_mounts_the_kits_folders() -> None:
    mounts = [Mount("/kit", "/kit", read_only=True), Mount("/results/s", "/results/s")]
    config = adjust_config(SPEC, mounts)
    assert SPEC["hostname"] == "runc" and len(SPEC["mounts"]) == 2  # the input is not changed
    assert [ns["type"] for ns in config["linux"]["namespaces"]] == ["pid", "ipc", "mount"]
    assert "hostname" not in config  # runc refuses one without a UTS namespace
    assert config["root"] == {"path": "rootfs", "readonly": True}
    assert config["process"]["terminal"] is False
    assert config["process"]["env"] == ["PATH=/opt/venv/bin:/bin"]  # the image's, kept
    by_destination = {m["destination"]: m for m in config["mounts"]}
    assert by_destination["/tmp"]["type"] == "tmpfs"  # the bundle's own /tmp bind replaced
    assert by_destination["/kit"]["options"][:2] == ["rbind", "ro"]
    assert by_destination["/results/s"]["options"][:2] == ["rbind", "rw"]
    assert by_destination["/etc/hosts"]["source"] == "/etc/hosts"
    assert "/proc" in by_destination


def test_session_bundle_links_the_source_root_and_marks_it(tmp_path: Path) -> None:
    source = fake_bundle(tmp_path / "source")
    made = make_session_bundle(
        source, tmp_path / "cache" / "s1" / "calibration", [Mount("/k", "/k", True)], "s1",
        "slurm.oci_bundle.default", "fix it",
    )  # fmt: skip
    linked, original = (folder / "rootfs" / "etc" / "os-release" for folder in (made, source))
    assert linked.stat().st_ino == original.stat().st_ino  # hard links, not a copy
    assert (made / "rootfs" / MARKER).read_text() == "s1\n"
    assert not (source / "rootfs" / MARKER).exists()
    config = json.loads((made / "config.json").read_text())
    assert any(m["destination"] == "/k" for m in config["mounts"])
    assert [p.name for p in made.parent.iterdir()] == ["calibration"]  # no temporary left
    again = make_session_bundle(source, made, [], "s2", "f", "fix")  # a leftover is replaced
    assert (again / "rootfs" / MARKER).read_text() == "s2\n"


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("missing", "is not a folder"),
        ("no-config", "has no config.json"),
        ("bad-json", "is not readable JSON"),
        ("no-root", "holds no root file system"),
    ],
)
def test_a_bad_bundle_is_refused_in_one_line_with_field_and_fix(
    tmp_path: Path, stand_in_slurm: Path, monkeypatch: pytest.MonkeyPatch, setup: str,
    expected: str,
) -> None:  # fmt: skip
    monkeypatch.setenv("WITH_CONTAINER", "1")
    bundle = tmp_path / "bundle"
    if setup != "missing":
        fake_bundle(bundle)
    if setup == "no-config":
        (bundle / "config.json").unlink()
    if setup == "bad-json":
        (bundle / "config.json").write_text("{")
    if setup == "no-root":
        shutil.rmtree(bundle / "rootfs")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(f"slurm:\n  container: oci\n  oci_bundle: {{default: {bundle}}}\n")
    runtime = SlurmRuntime(cluster)
    with pytest.raises(RuntimeConfigError) as refused:
        runtime.clean_leftovers(tmp_path / "session")
    message = str(refused.value)
    assert message.startswith(f"{cluster}: slurm.oci_bundle.default: ")
    assert expected in message and "\n" not in message
    assert "fix the path" in message


def test_a_slurm_without_its_container_flag_is_refused(
    tmp_path: Path, stand_in_slurm: Path
) -> None:
    runtime = SlurmRuntime(config=SlurmConfig(container="oci", oci_image={"default": "x"}))
    with pytest.raises(RuntimeConfigError, match=r"slurm.container: oci needs Slurm's own"):
        runtime.clean_leftovers(tmp_path / "session")


def test_no_bundle_for_the_framework_is_refused(tmp_path: Path, stand_in_slurm: Path) -> None:
    runtime = SlurmRuntime(config=SlurmConfig(container="oci", oci_image={"pytorch": "x"}))
    plan = plan_for(tmp_path, [["true"], ["true"]])
    with pytest.raises(RuntimeConfigError, match=r"no OCI bundle for 'calibration'; set "
                       r"slurm.oci_bundle.calibration"):  # fmt: skip
        runtime.describe(plan)


def test_one_task_per_device_is_refused_with_oci(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("slurm:\n  container: oci\n  tasks: device\n")
    with pytest.raises(RuntimeConfigError, match="slurm.tasks: device with container: oci: Slurm"):
        SlurmRuntime(cluster)  # before anything starts


def test_dry_run_names_the_bundle_and_the_container_flag(
    tmp_path: Path, stand_in_slurm: Path
) -> None:
    bundle = fake_bundle(tmp_path / "bundle")
    config = SlurmConfig(container="oci", oci_bundle={"calibration": str(bundle)},
                         oci_cache=str(tmp_path / "cache"))  # fmt: skip
    runtime = SlurmRuntime(config=config)
    plan = plan_for(tmp_path, [["python3", "-V"], ["python3", "-V"]])
    lines = runtime.describe(plan)
    text = "\n".join(lines)
    session_bundle = runtime.platform.session_bundle("calibration", plan.session_root)
    assert session_bundle.parent.parent == tmp_path / "cache"
    said = f"# once per session: the OCI bundle {session_bundle} (root from the bundle {bundle}"
    assert said in text
    srun = lines[-1]
    assert f" --container={session_bundle} " in srun and "--container-image" not in srun
    assert f"[ -f /{MARKER} ] ||" in srun  # the step refuses to run outside the bundle
    assert "PATH=/opt/venv/bin:/bin" in srun  # the image's PATH before the host's
    assert runtime.python("calibration") == "python3"
    assert not session_bundle.exists()  # a dry run makes nothing


# -- for real: runc under slurmstepd on both nodes ---------------------------------------------
@pytest.fixture
def oci_cluster(
    slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SlurmCluster]:
    """The test cluster with an oci.conf calling runc (read by slurmstepd at each step)."""
    if not shutil.which("runc") and not Path("/usr/sbin/runc").exists():
        require_real("runc is not installed (apt-get install runc; docker.io depends on it)")
    for key in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    (slurm_cluster.root / "oci.conf").write_text(slurm_oci_conf("runc"))
    try:
        yield slurm_cluster
    finally:
        (slurm_cluster.root / "oci.conf").unlink(missing_ok=True)


@pytest.fixture(scope="module")
def oci_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the module: the image is exported once, each session links its root."""
    return tmp_path_factory.mktemp("oci-cache")


@pytest.fixture
def oci_runtime(
    oci_cluster: SlurmCluster, cpu_python_image: str, oci_cache: Path
) -> Iterator[SlurmRuntime]:
    cache = oci_cache
    config = SlurmConfig(time_limit="10", container="oci", oci_image={"default": cpu_python_image},
                         oci_cache=str(cache))  # fmt: skip
    runtime = SlurmRuntime(config=config, printer=print)
    yield runtime
    runtime.close()
    assert not list(cache.glob("session-*")), "a session's bundle was left behind"
    assert oci_cluster.drained() == [], "a job was left in the queue"


INSIDE = [
    "python3", "-c", textwrap.dedent(
        """
        import json, os, socket, sys, time
        print(json.dumps({"pid": os.getpid(), "python": sys.executable,
                          "host": socket.gethostname(), "node": os.environ["DLPERF_TEST"],
                          "marker": os.path.exists("/.dlperf-oci-bundle"),
                          "root_ro": not os.access("/", os.W_OK)}), flush=True)
        time.sleep(4)
        """
    ),
]  # fmt: skip


def step_files(root: Path) -> dict[str, str]:
    """srun.log and the node logs of the repeat (for a failure's message)."""
    folder = root / "session" / "cases" / "t" / "repeat-01"
    return {p.name: p.read_text(errors="replace")[-2000:] for p in sorted(folder.glob("*.log"))}


def runc_containers(cluster: SlurmCluster, seen: set[str], stop: threading.Event) -> None:
    """Container ids runc lists as running on each node, while the step runs. runc is asked
    inside the node (its namespaces, its clock): it tells a running container by its init
    process's start time, which each simulated host's time namespace offsets, so asked from
    outside it would call every container stopped."""
    while not stop.is_set():
        for node in cluster.nodes:
            out = subprocess.run(
                [*cluster.host(node).enter(), "runc", "list", "--format", "json"],
                capture_output=True, text=True,
            )  # fmt: skip
            for item in json.loads(out.stdout or "null") or []:
                if item.get("status") == "running":
                    seen.add(item["id"])
        time.sleep(0.2)


def test_steps_run_in_runc_containers_on_both_nodes(
    oci_runtime: SlurmRuntime, oci_cluster: SlurmCluster, tmp_path: Path
) -> None:
    seen: set[str] = set()
    stop = threading.Event()
    watcher = threading.Thread(
        target=runc_containers, args=(oci_cluster, seen, stop), daemon=True
    )
    watcher.start()
    try:
        outcome = oci_runtime.run(plan_for(tmp_path, [INSIDE, INSIDE]))
    finally:
        stop.set()
        watcher.join(timeout=10)
    assert outcome.verdict == Verdict.OK, (outcome.detail, step_files(tmp_path))
    facts = outcome.extra["slurm"]
    job = facts["job_id"]
    for index, node in enumerate(("n1", "n2")):
        log = tmp_path / "session" / "cases" / "t" / "repeat-01" / f"node{index}.log"
        inside = json.loads(log.read_text())
        # pid 1 of a pid namespace of its own, the image's Python (no /opt/venv on this host),
        # the node's hostname and network, a read-only root carrying the kit's marker.
        assert inside == {"pid": 1, "python": "/opt/venv/bin/python3", "host": node,
                          "node": str(index), "marker": True, "root_ro": True}  # fmt: skip
        assert any(c.startswith(f"{node}.{job}.") for c in seen), seen  # runc ran it there
    assert not Path("/opt/venv/bin/python3").exists()
    assert facts["container"] == "oci"
    assert facts["oci"]["image"] == oci_runtime.config.oci_image["default"]
    assert f"--container={facts['oci']['bundle']} " in facts["srun"]


def test_calibration_in_oci_containers_measures_its_truth(oci_runtime: SlurmRuntime) -> None:
    """The calibration workload, 2 nodes x 2 processes, each node's launcher and ranks in a
    runc container: the kit's figure within its bound (0.05%) of what the workload delivered
    by its own clock. A runc container cannot raise its ranks' priority, so the host wakes
    them later than on the host (the lateness printed apart, not the kit's): 3 repeats, the
    median, as `dlperf selftest` takes it."""
    from driver.core.selftest import ERROR_BOUND, run_selftest

    lines: list[str] = []
    (result,) = run_selftest(
        step_time=0.02, topologies=("2n4g",), repeats=3, measured_steps=100,
        runtime=oci_runtime, printer=lines.append,
    )  # fmt: skip
    print("\n".join(lines), f"error {result.error:.5%}")
    assert result.error < ERROR_BOUND, lines


def test_a_node_without_oci_conf_fails_the_step_with_the_reason(
    oci_runtime: SlurmRuntime, oci_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """Slurm runs a --container step on the host when oci.conf is missing; the step's first
    line sees no marker and stops it: a host is never measured as the image."""
    (oci_cluster.root / "oci.conf").unlink()
    outcome = oci_runtime.run(plan_for(tmp_path, [INSIDE, INSIDE]))
    assert outcome.verdict == Verdict.FAILED
    assert "ran the step outside the OCI bundle" in outcome.detail, outcome.detail
    assert "exit 3" in outcome.detail


def test_bundle_errors_read_config(tmp_path: Path) -> None:
    with pytest.raises(OciBundleError, match=r"^f: .* is not a folder; fix$"):
        read_config(tmp_path / "none", "f", "fix")
