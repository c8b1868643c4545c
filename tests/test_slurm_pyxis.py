"""pyxis and enroot for real: the 2-node test cluster with NVIDIA's pyxis plug-in loaded by
slurmd and srun, enroot (both built by .ci/setup-system.sh from their pinned releases), and the
kit's PyTorch CPU image imported once with ``enroot import dockerd://``; the calibration workload
and a ResNet-50 case run through the kit's pyxis platform (``srun --container-image
--container-name``), each node unpacking the image into its own folder.

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
def pytorch_squashfs(
    pyxis_cluster: SlurmCluster, image_options, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The kit's PyTorch CPU image (Python, torch: enough for the calibration workload and
    ResNet-50) as the squashfs pyxis reads, made once by ``enroot import dockerd://``."""
    from driver.images.build import build_images

    tag = build_images(["pytorch-cpu"], image_options, make_base=True)["pytorch-cpu"].tag
    folder = tmp_path_factory.mktemp("enroot-import")
    target = folder / "pytorch-cpu.sqsh"
    env = {**os.environ, **pyxis_cluster.enroot_env(), "ENROOT_SQUASH_OPTIONS": SQUASH_OPTIONS}
    for key in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME"):
        env[key] = str(folder / key.lower())  # this host's own, not a node's
    started = time.monotonic()
    made = subprocess.run(
        ["enroot", "import", "--output", str(target), f"dockerd://{tag}"],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    size = target.stat().st_size / 2**20
    print(f"enroot import dockerd://{tag}: {time.monotonic() - started:.1f} s, {size:.0f} MiB")
    return target


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
def pyxis_runtime(pyxis_env: SlurmCluster, pytorch_squashfs: Path) -> Iterator[SlurmRuntime]:
    config = SlurmConfig(time_limit="15", container="pyxis",
                         image={"default": str(pytorch_squashfs)})  # fmt: skip
    runtime = SlurmRuntime(config=config, printer=print)
    yield runtime
    runtime.close()
    assert pyxis_env.drained() == [], "a job was left in the queue"


def node_containers(cluster: SlurmCluster) -> dict[str, list[str]]:
    """The containers pyxis made on each node (enroot's data folder there)."""
    found = {}
    for host in cluster.hosts:
        data = host.root / "local" / "data" / "enroot"
        found[host.name] = sorted(p.name for p in data.iterdir()) if data.is_dir() else []
    return found


def test_srun_help_offers_pyxis_and_the_runtime_picks_it(pyxis_env: SlurmCluster) -> None:
    """slurmd and srun loaded the plug-in built here: `container: auto` finds pyxis."""
    assert "pyxis: version v0.24.0" in pyxis_env.log("slurmd.n1")
    runtime = SlurmRuntime(config=SlurmConfig(time_limit="5"))
    try:
        assert runtime.container_mode() == "pyxis"
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
        assert f"--container-image={pyxis_runtime.config.image['default']}" in slurm["srun"]
        assert "--container-name=dlperf-calibration" in slurm["srun"]


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
    pyxis_env: SlurmCluster, pytorch_squashfs: Path
) -> None:
    """What enroot needs as root here, seen from inside: a user namespace of its own (root
    inside maps to root outside: no subordinate ids needed), below the host's limit."""
    limit = int(Path("/proc/sys/user/max_user_namespaces").read_text())
    assert limit > 1
    step = pyxis_env.client(
        "srun", "-N1", f"--container-image={pytorch_squashfs}", "sh", "-c",
        "cat /proc/self/uid_map; readlink /proc/self/ns/user", timeout=300,
    )  # fmt: skip
    uid_map, user_ns = step.stdout.split("\n")[:2]
    assert uid_map.split() == ["0", "0", "1"], step.stdout
    assert user_ns != os.readlink("/proc/self/ns/user")


def test_enroot_is_the_pinned_release() -> None:
    assert shutil.which("enroot")
    out = subprocess.run(["enroot", "version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "4.1.2"
