"""Every file in examples/ is one the kit reads, and each quick start's command plans its run.

The README's quick starts point at these files; a schema change that a file no longer passes,
or a renamed key, fails here instead of on a newcomer's first run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.cluster.inventory import load_inventory
from driver.cluster.slurm import load_slurm_config
from driver.core.matrix import load_matrix
from driver.frameworks.base import REPO_ROOT
from driver.frontend.cli import main
from driver.schema import load_document

EXAMPLES = REPO_ROOT / "examples"
FILES = sorted(path for path in EXAMPLES.iterdir() if path.is_file())


def test_examples_exist() -> None:
    names = {path.name for path in FILES}
    assert {"laptop.yaml", "inventory-4n32g.yaml", "slurm-4n32g.yaml"} <= names


@pytest.mark.parametrize("path", FILES, ids=[path.name for path in FILES])
def test_every_example_is_a_file_the_kit_reads(path: Path) -> None:
    """Each file is read by the loader of every section it holds, as a run would read it: a
    matrix (every profile), an SSH inventory, a ``slurm:`` section. A file that is none of
    these is not an example of anything the kit takes."""
    assert path.suffix in (".yaml", ".yml"), f"{path.name}: examples/ holds configuration files"
    document = load_document(path)
    assert isinstance(document, dict), f"{path.name}: a mapping at the top"
    read = []
    if "suites" in document:
        for profile in ["dlperf", *document.get("profiles", {})]:
            assert load_matrix(path, profile).cases, f"{path.name}: profile {profile} is empty"
        read.append("matrix")
    if "nodes" in document:
        # check_files=False: the SSH key an example names is the user's, not on this machine
        inventory = load_inventory(path, check_files=False)
        assert len({node.name for node in inventory.nodes}) == len(inventory.nodes) >= 1
        read.append("inventory")
    if "slurm" in document:
        assert load_slurm_config(path).time_limit
        read.append("slurm")
    assert read, f"{path.name}: neither a matrix (suites), an inventory (nodes) nor slurm"


def dry_run(capsys: pytest.CaptureFixture, *argv: str) -> str:
    code = main(["run", *argv, "--dry-run"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Traceback" not in captured.err
    return captured.out


@pytest.mark.parametrize("profile", ["cpu-smoke", "dlperf"])
def test_the_laptop_quick_start_plans_one_device_runs(
    profile: str, capsys: pytest.CaptureFixture
) -> None:
    out = dry_run(capsys, "--matrix", str(EXAMPLES / "laptop.yaml"), "--profile", profile)
    cases = [line.split()[0] for line in out.splitlines() if line.startswith("resnet50/")]
    assert cases and all("/1n1g/" in case for case in cases)
    assert "PyTorch/benchmark/train.py --model resnet50" in out


def test_the_ssh_cluster_quick_start_plans_one_container_per_node(
    capsys: pytest.CaptureFixture,
) -> None:
    out = dry_run(
        capsys, "--runtime", "docker", "--inventory", str(EXAMPLES / "inventory-4n32g.yaml"),
        "--framework", "pytorch", "--model", "resnet50", "--nodes", "4", "--gpus", "8",
    )  # fmt: skip
    assert "resnet50/pytorch/4n32g/bs128/fp32/synthetic" in out
    nodes = [line.split(" $ ")[0].strip() for line in out.splitlines() if " $ docker " in line]
    assert nodes[:4] == [f"[gpu0{i}] bench@10.0.0.1{i}:22" for i in range(1, 5)]
    assert "--gpus all" in out and "--nproc-per-node=8" in out


def test_the_slurm_quick_start_plans_pyxis_steps_in_the_pinned_ngc_image(
    capsys: pytest.CaptureFixture,
) -> None:
    out = dry_run(
        capsys, "--runtime", "slurm", "--inventory", str(EXAMPLES / "slurm-4n32g.yaml"),
        "--framework", "pytorch", "--model", "resnet50", "--nodes", "4", "--gpus", "8",
    )  # fmt: skip
    assert "sbatch --parsable" in out and "--partition=gpu" in out and "--nodes=4" in out
    assert "--gpus-per-node=8" in out
    assert "'--container-image=nvcr.io#nvidia/pytorch:25.04-py3' " in out
    assert "--nproc-per-node=8" in out
