"""Runtimes are built from their registry by name, with clear errors for what cannot be built."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.frontend.cli import main
from driver.registry import UnknownPlugin
from driver.runtimes.base import RuntimeConfigError, make_runtime
from driver.runtimes.local import LocalRuntime
from driver.runtimes.ssh.runtime import DockerRuntime
from driver.runtimes.ssh.runtime import ProcessRuntime


def test_every_runtime_comes_from_the_registry_by_name(tmp_path: Path) -> None:
    assert isinstance(make_runtime("local"), LocalRuntime)
    inventory = tmp_path / "cluster.yaml"
    inventory.write_text(
        "cluster: c\nnodes:\n  - {name: n0, address: 127.0.0.2, ssh: {port: 2222}}\n"
    )
    assert isinstance(make_runtime("process", inventory=inventory), ProcessRuntime)
    assert isinstance(make_runtime("docker", inventory=inventory), DockerRuntime)


def test_unknown_runtimes_and_missing_or_misplaced_inventories_are_clear_errors(
    tmp_path: Path,
) -> None:
    with pytest.raises(UnknownPlugin, match="unknown runtime 'dockr'; known runtimes: .*docker"):
        make_runtime("dockr")
    with pytest.raises(RuntimeConfigError, match="--runtime process needs --inventory FILE"):
        make_runtime("process")
    with pytest.raises(RuntimeConfigError, match="takes no --inventory"):
        make_runtime("local", inventory=tmp_path / "cluster.yaml")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--runtime", "dockr"], "unknown runtime 'dockr'"),
        (["--runtime", "docker"], "needs --inventory FILE"),
    ],
)
def test_the_cli_says_so_with_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--framework", "pytorch", "--model", "resnet50", "--dry-run", *argv]) == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error


def test_slurm_takes_a_cluster_file_or_none(tmp_path: Path) -> None:
    from driver.runtimes.slurm.runtime import SlurmRuntime

    assert make_runtime("slurm").config.partition is None  # inside an allocation: defaults
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("slurm:\n  partition: gpu\n")
    assert isinstance(runtime := make_runtime("slurm", inventory=cluster), SlurmRuntime)
    assert runtime.config.partition == "gpu"


def test_each_runtime_is_a_transport_with_a_container_platform(tmp_path: Path) -> None:
    """The container platform answers what a node's process sees, the same questions under
    either transport: the interpreter (the image's, or None: the host's), where the kit's code
    is, whether an upstream source's own image can run."""
    import sys

    from driver.cluster.slurm import SlurmConfig
    from driver.frameworks.base import REPO_ROOT
    from driver.runtimes.containers import ContainerPlatform
    from driver.runtimes.slurm.runtime import SlurmRuntime

    inventory = tmp_path / "cluster.yaml"
    inventory.write_text(
        "cluster: c\ndefaults: {python: /opt/py/bin/python3, scratch_dir: /scratch/k}\n"
        "nodes:\n  - {name: n0, address: 127.0.0.2, ssh: {port: 2222}}\n"
    )
    docker, process = make_runtime("docker", inventory=inventory), ProcessRuntime(inventory)
    slurm = {
        mode: SlurmRuntime(config=SlurmConfig(container=mode, oci_image={"default": "x"}))
        for mode in ("none", "pyxis", "oci")
    }
    found = {
        "docker": docker.platform, "process": process.platform,
        **{f"slurm {mode}": runtime.platform for mode, runtime in slurm.items()},
    }  # fmt: skip
    assert all(isinstance(platform, ContainerPlatform) for platform in found.values())
    assert {where: platform.name for where, platform in found.items()} == {
        "docker": "docker", "process": "none",
        "slurm none": "none", "slurm pyxis": "pyxis", "slurm oci": "oci",
    }  # fmt: skip
    assert {where: platform.python("calibration") for where, platform in found.items()} == {
        "docker": "python3", "process": None,
        "slurm none": None, "slurm pyxis": "python3", "slurm oci": "python3",
    }  # fmt: skip
    # The runtime's interpreter: the platform's, else the host's as the transport knows it.
    assert docker.python("calibration") == "python3"
    assert process.python("calibration") == "/opt/py/bin/python3"
    assert slurm["none"].python("calibration") == sys.executable
    assert slurm["pyxis"].python("calibration") == slurm["oci"].python("calibration") == "python3"
    # The kit's code: mounted at /dlperf in docker, at its own path elsewhere.
    assert docker.workdir() == "/dlperf"
    assert process.workdir().startswith("/scratch/k/")
    assert {runtime.workdir() for runtime in slurm.values()} == {str(REPO_ROOT)}
    # The container platforms run an upstream source's own image (docker, pyxis, Slurm OCI);
    # without a container there is no image to run a source in.
    runs_sources = [where for where, platform in found.items() if platform.runs_sources]
    assert runs_sources == ["docker", "slurm pyxis", "slurm oci"]
    for runtime in slurm.values():
        runtime.close()
