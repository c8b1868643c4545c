"""Runtimes are built from their registry by name, with clear errors for what cannot be built."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.frontend.cli import main
from driver.registry import UnknownPlugin
from driver.runtimes.base import RuntimeConfigError, make_runtime
from driver.runtimes.local import LocalRuntime
from driver.runtimes.ssh.docker import DockerRuntime
from driver.runtimes.ssh.process import ProcessRuntime


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
