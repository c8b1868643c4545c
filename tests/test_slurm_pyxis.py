"""pyxis and enroot for real: the 2-node test cluster with NVIDIA's pyxis plug-in loaded by
slurmd and srun, enroot (both built by .ci/setup-system.sh from their pinned releases), and the
kit's CPU images imported once each with ``enroot import dockerd://`` (``cpu-python`` for the
calibration workload, ``pytorch-cpu`` for ResNet-50: the smallest that run each); both run
through the kit's pyxis platform (``srun --container-image --container-name``), each node
unpacking the image into its own tmpfs.

Run as root inside the simulated hosts' namespaces, enroot needs nothing more: it makes a user
namespace of its own for every container (``/proc/sys/user/max_user_namespaces`` is far above
the one it needs here; see test_the_container_runs_in_a_user_namespace_of_its_own).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from driver.cluster.slurm import SlurmConfig
from driver.runtimes.slurm.runtime import SlurmRuntime

if TYPE_CHECKING:  # imported by pytest_plugins first, so pytest rewrites its asserts
    from tests.slurm_fixtures import SlurmCluster

pytest_plugins = ["tests.slurm_fixtures"]

# Stored uncompressed: mksquashfs and each node's unsquashfs then copy instead of compressing
# (enroot's own default is lzo; the size does not matter for a file made and read here).
SQUASH_OPTIONS = "-noI -noD -noF -noX -no-duplicates"


@pytest.fixture(scope="module")
def squashfs(
    pyxis_cluster: SlurmCluster, image_options, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Path]]:
    """The kit's CPU images as the squashfs files pyxis reads, each made once by ``enroot
    import dockerd://``: ``cpu-python`` (Python alone: the calibration workload) and
    ``pytorch-cpu`` (torch: ResNet-50). Removed after the module."""
    from driver.images.build import build_images

    built = build_images(["cpu-python", "pytorch-cpu"], image_options, make_base=True)
    folder = tmp_path_factory.mktemp("enroot-import")
    env = {**os.environ, **pyxis_cluster.enroot_env(), "ENROOT_SQUASH_OPTIONS": SQUASH_OPTIONS}
    for key in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME"):
        env[key] = str(folder / key.lower())  # this host's own, not a node's
    made = {}
    for name, image in built.items():
        target = folder / f"{name}.sqsh"
        started = time.monotonic()
        done = subprocess.run(
            ["enroot", "import", "--output", str(target), f"dockerd://{image.tag}"],
            env=env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        size = target.stat().st_size / 2**20
        took = time.monotonic() - started
        print(f"enroot import dockerd://{image.tag}: {took:.1f} s, {size:.0f} MiB")
        made[name] = target
    yield made
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pyxis_env(pyxis_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> SlurmCluster:
    """This process's Slurm clients point at the pyxis cluster, outside any allocation, with
    enroot's folders set through the job's environment (srun passes it on to pyxis)."""
    for key in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("SLURM_CONF", str(pyxis_cluster.conf))
    for key, value in pyxis_cluster.enroot_env().items():
        monkeypatch.setenv(key, value)
    return pyxis_cluster


@pytest.fixture
def pyxis_runtime(pyxis_env: SlurmCluster, squashfs: dict[str, Path]) -> Iterator[SlurmRuntime]:
    images = {"calibration": str(squashfs["cpu-python"]), "pytorch": str(squashfs["pytorch-cpu"])}
    config = SlurmConfig(time_limit="15", container="pyxis", image=images)
    runtime = SlurmRuntime(config=config, printer=print)
    yield runtime
    runtime.close()
    assert pyxis_env.drained() == [], "a job was left in the queue"


def node_containers(cluster: SlurmCluster) -> dict[str, list[str]]:
    """The containers pyxis made on each node (enroot's data folder in the node's own tmpfs)."""
    data = f"{cluster.node_local}/data/enroot"
    found = {}
    for host in cluster.hosts:
        listed = subprocess.run([*host.enter(), "ls", data], capture_output=True, text=True)
        found[host.name] = sorted(listed.stdout.split())
    return found


def test_srun_help_offers_pyxis_and_the_runtime_picks_it(pyxis_env: SlurmCluster) -> None:
    """slurmd and srun loaded the plug-in built here: `container: auto` finds pyxis."""
    assert "pyxis: version v0.24.0" in pyxis_env.log("slurmd.n1")
    runtime = SlurmRuntime(config=SlurmConfig(time_limit="5"))
    try:
        assert runtime.platform.name == "pyxis"
    finally:
        runtime.close()


def test_calibration_through_pyxis_measures_its_truth(
    pyxis_runtime: SlurmRuntime, pyxis_env: SlurmCluster, tmp_path: Path
) -> None:
    """The calibration workload, 2 nodes x 2 processes, each node's launcher and ranks in the
    container pyxis made from the image on that node: the kit's figure within its bound of what
    the workload delivered by its own clock (3 repeats, the median, as `dlperf selftest`)."""
    from driver.core.selftest import ERROR_BOUND, run_selftest

    lines: list[str] = []
    (result,) = run_selftest(
        step_time=0.02, topologies=("2n4g",), repeats=3, measured_steps=100,
        runtime=pyxis_runtime, results_dir=tmp_path / "session", printer=lines.append,
    )  # fmt: skip
    print("\n".join(lines), f"error {result.error:.5%}")
    assert result.error < ERROR_BOUND, lines
    made = node_containers(pyxis_env)
    assert made == {"n1": ["pyxis_dlperf-calibration"], "n2": ["pyxis_dlperf-calibration"]}
    records = sorted((tmp_path / "session" / "cases").rglob("record.json"))
    assert records
    for path in records:
        slurm = json.loads(path.read_text())["extra"]["slurm"]
        assert slurm["container"] == "pyxis" and slurm["nodes"] == ["n1", "n2"]
        assert f"--container-image={pyxis_runtime.config.image['calibration']}" in slurm["srun"]
        assert "--container-name=dlperf-calibration" in slurm["srun"]


def test_dlperf_selftest_through_pyxis_from_a_cluster_file(
    pyxis_env: SlurmCluster, squashfs: dict[str, Path], tmp_path: Path
) -> None:
    """The command a user types, `dlperf selftest --runtime slurm --inventory FILE`, with the
    cluster file naming pyxis and the image: the same steps through the front door."""
    import sys

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "slurm:\n  container: pyxis\n  time_limit: '10'\n"
        f"  image: {{calibration: {squashfs['cpu-python']}}}\n"
    )
    # A 10 s window (100 steps of 0.1 s): a clock read that the suite's other worker delays by
    # a few ms (3.3 ms seen at 0.02 s steps, 0.17% of a 2 s window) stays below the 0.05% bound.
    done = subprocess.run(
        [sys.executable, "-m", "driver.frontend.cli", "selftest", "--runtime", "slurm",
         "--inventory", str(cluster), "--topologies", "2n4g", "--repeats", "1",
         "--step-time", "0.1"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    print(done.stdout[-3000:], done.stderr[-3000:])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "selftest 2n4g: truth" in done.stdout and "(ok, bound" in done.stdout
    assert pyxis_env.drained() == []


def test_pytorch_resnet50_through_pyxis(
    pyxis_runtime: SlurmRuntime, pyxis_env: SlurmCluster, tmp_path: Path
) -> None:
    """Real ResNet-50 training steps in the image's torch (its Debian Python and /opt/venv,
    not this host's), torchrun on each node in its container, gloo across the two node
    namespaces, weights in sync at the end."""
    from driver.core.runner import run_cases
    from driver.model.case import Case, Topology
    from driver.model.results import Session
    from tests.real_frameworks import TINY_IMAGES, CaseRun

    case = Case(
        model="resnet50", framework="pytorch", topology=Topology.parse("2n4g"), batch_size=2,
        precision="fp32", dataset="synthetic", warmup_steps=1, measured_steps=2, total_steps=3,
        repeats=1, timeout_s=600, options={**TINY_IMAGES, "weights_checksum": True},
        profile="test",
    )  # fmt: skip
    assert pyxis_runtime.python("pytorch") == "python3"  # the image's, found on its PATH
    session = Session.open(tmp_path / "session")
    summary = run_cases([case], session, pyxis_runtime, printer=print)
    run = CaseRun(case, [r for _, r, _ in session.records(include_failed=True)], session.root)
    assert summary.ok, f"{summary.failed}\n{run.logs()[-4000:]}"
    (record,) = run.records
    assert record.throughput and record.runtime == "slurm"
    assert record.extra["slurm"]["container"] == "pyxis"
    assert "--container-name=dlperf-pytorch" in record.extra["slurm"]["srun"]
    run.assert_ranks_in_sync(4)
    directory = session.repeat_dir(case, 1)
    for index, node in enumerate(("n1", "n2")):
        log = (directory / f"node{index}.log").read_text()
        assert f'"hostname": "{node}"' in log
        # The image's Debian Python with its torch; this host's venv runs another Python.
        assert '"python": "3.11.2"' in log and '"torch": "2.13.0+cpu"' in log, log[:3000]
        assert platform.python_version() != "3.11.2"
    assert not Path("/opt/venv").exists()  # where the image keeps torch; not on this host
    for made in node_containers(pyxis_env).values():
        assert "pyxis_dlperf-pytorch" in made


def test_the_container_runs_in_a_user_namespace_of_its_own(
    pyxis_env: SlurmCluster, squashfs: dict[str, Path]
) -> None:
    """What enroot needs as root here, seen from inside: a user namespace of its own (root
    inside maps to root outside: no subordinate ids needed), below the host's limit."""
    limit = int(Path("/proc/sys/user/max_user_namespaces").read_text())
    assert limit > 1
    step = pyxis_env.client(
        "srun", "-N1", f"--container-image={squashfs['cpu-python']}", "sh", "-c",
        "cat /proc/self/uid_map; readlink /proc/self/ns/user", timeout=300,
    )  # fmt: skip
    uid_map, user_ns = step.stdout.split("\n")[:2]
    assert uid_map.split() == ["0", "0", "1"], step.stdout
    assert user_ns != os.readlink("/proc/self/ns/user")


def test_enroot_is_the_pinned_release() -> None:
    from tests.conftest import require_github_build
    from tests.slurm_fixtures import pyxis_missing

    why = pyxis_missing()
    if why and "is installed, the tests pin" not in why:  # another release: that is the failure
        require_github_build(why)
    assert shutil.which("enroot")
    out = subprocess.run(["enroot", "version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "4.1.2"


# -- refused before submitting: pyxis or enroot too old, a pin the registry no longer serves ----
PYXIS_HELP = """#!/bin/sh
[ "$1" = "--help" ] || { echo "$0 $*" >> "$CALLS"; exit 1; }
echo "Usage: srun [OPTIONS(0)...]"
for flag in $PYXIS_FLAGS; do echo "      --container-$flag=..."; done
exit 0
"""
ALL_FLAGS = "image name mounts workdir writable env"


@pytest.fixture
def stand_in_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """srun answering --help with the pyxis flags in $PYXIS_FLAGS, sbatch and any other srun
    call only recording that it was made; no enroot on PATH unless a test puts one there."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("srun", "sbatch"):
        (folder / name).write_text(PYXIS_HELP)
        (folder / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))
    monkeypatch.setenv("PYXIS_FLAGS", ALL_FLAGS)
    for key in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(key)
    return folder


def calibration_plan(root: Path):  # noqa: ANN201 - RepeatPlan
    from tests.test_slurm_oci import plan_for

    return plan_for(root, [["python3", "-V"], ["python3", "-V"]])


def submitted(tmp_path: Path) -> list[str]:
    calls = tmp_path / "calls"
    return calls.read_text().splitlines() if calls.exists() else []


def test_a_pyxis_without_a_flag_the_source_needs_is_refused_before_submitting(
    stand_in_cluster: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upstream source's fresh container per step is writable: pyxis before 0.11.0 has no
    --container-writable (its args.c at each tag)."""
    from tests.test_slurm_upstream import SPECS, plans

    monkeypatch.setenv("PYXIS_FLAGS", "image name mounts workdir")
    runtime = SlurmRuntime(config=SlurmConfig(container="pyxis", time_limit="5"))
    plan = plans(runtime, SPECS["ngc-pytorch"])[0]
    outcome = runtime.run(plan)
    assert outcome.detail == (
        f"{plan.case_id}: this cluster's srun has no --container-writable, which pyxis added in "
        "0.11.0: upgrade pyxis to 0.11.0 or later (built against this cluster's Slurm), or set "
        "slurm.container: none"
    )
    assert submitted(tmp_path) == []
    monkeypatch.setenv("PYXIS_FLAGS", ALL_FLAGS)
    assert SlurmRuntime(config=SlurmConfig(container="pyxis")).platform.refused(plan) == ""


@pytest.mark.parametrize(("version", "refused"), [("3.5.0", True), ("4.1.2", False), ("", False)])
def test_a_digest_reference_needs_enroot_4(
    stand_in_cluster: Path, tmp_path: Path, version: str, refused: bool
) -> None:
    """slurm.image with a digest: this host's enroot 3.x refuses it before any job; 4.x takes
    it; no enroot here: the nodes' version cannot be read, which is said, not refused."""
    if version:
        (stand_in_cluster / "enroot").write_text(f"#!/bin/sh\necho {version}\n")
        (stand_in_cluster / "enroot").chmod(0o755)
    image = "nvcr.io#nvidia/pytorch@sha256:" + "1" * 64
    said: list[str] = []
    config = SlurmConfig(container="pyxis", image={"calibration": image}, time_limit="5")
    runtime = SlurmRuntime(config=config, printer=said.append)
    plan = calibration_plan(tmp_path)
    outcome = runtime.run(plan)
    if refused:
        assert outcome.detail == (
            f"{plan.case_id}: the image {image} holds a digest, which enroot parses from 4.0.0 "
            "on; this host's enroot is 3.5.0 (3.x answers 'Invalid image reference'): give "
            "slurm.image.calibration as registry#repository:tag, or upgrade enroot to 4.0.0 or "
            "later"
        )
        assert submitted(tmp_path) == []
    else:  # past the check: the stand-in sbatch is asked (and fails)
        assert "enroot parses" not in outcome.detail
        assert submitted(tmp_path)[0].split()[0] == str(stand_in_cluster / "sbatch")
    assert bool([line for line in said if "cannot be read from here" in line]) == (not version)


from tests.test_images import registry  # noqa: E402, F401 - the fake registry on loopback


@pytest.mark.parametrize("served", ["pinned", "moved", "unreachable"])
def test_the_pinned_digest_is_checked_against_the_registry_before_submitting(
    stand_in_cluster: Path, registry: str, tmp_path: Path,  # noqa: F811 - the fixture above
    monkeypatch: pytest.MonkeyPatch, served: str,
) -> None:  # fmt: skip
    """The kit renders the pinned tag; before the job, the registry (a real HTTP server here,
    speaking the v2 API with a token challenge) is asked which digest the tag names: the pin
    goes on, a moved tag is refused with the fix, an unreachable registry is said and recorded."""
    from driver.runtimes.containers.pyxis import Pyxis
    from driver.runtimes.slurm.job import Allocation
    from tests.test_images import DIGEST_A, DIGEST_B

    host = registry if served != "unreachable" else "127.0.0.1:9"  # discard port: nobody
    ref = f"{host}/team/base:1"  # FakeRegistry serves DIGEST_B for it
    pin = DIGEST_B if served == "pinned" else DIGEST_A
    monkeypatch.setattr(Pyxis, "pinned_base", staticmethod(lambda framework: (ref, pin)))
    said: list[str] = []
    runtime = SlurmRuntime(config=SlurmConfig(container="pyxis", time_limit="5"),
                           printer=said.append)  # fmt: skip
    plan = calibration_plan(tmp_path)
    platform = runtime.platform
    assert platform.container(plan, plan.session_root).image == f"{host}#team/base:1"
    assert platform.refused(plan) == ""  # a dry run asks no registry
    refusal = platform.refused(plan, submitting=True)
    if served == "moved":
        assert refusal == (
            f"{plan.case_id}: {ref} is pinned in images.lock to {DIGEST_A}, but the registry "
            f"serves {DIGEST_B} for it: re-pin it (`dlperf images lock`) once the new image is "
            "the one to measure, or set slurm.image.calibration to the image wanted"
        )
        assert runtime.run(plan).detail == refusal and submitted(tmp_path) == []
        return
    assert refusal == ""
    allocation = Allocation("1", ["n1", "n2"], ["a", "b"], "p", 1, owned=True)
    allocation.containers.add("dlperf-calibration")  # made: nothing to run for it
    facts = platform.prepare(plan, allocation)
    assert facts is not None and facts["pinned"] == f"{ref}@{pin}"
    assert facts["image"] == f"{host}#team/base:1"
    if served == "pinned":
        assert facts["digest_check"] == "matched" and said == []
    else:
        assert facts["digest_check"].startswith(f"not checked: {ref}: {host} not reachable")
        assert said == [f"pyxis: the pinned digest of {ref} was not checked "
                        f"({facts['digest_check'].removeprefix('not checked: ')})"]  # fmt: skip
