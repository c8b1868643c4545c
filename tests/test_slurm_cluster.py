"""The test cluster itself: two slurmd that Slurm sees as two hosts (node ids 0 and 1)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported by pytest_plugins first, so pytest rewrites its asserts
    from tests.slurm_fixtures import SlurmCluster

# The fixture module registers `slurm_cluster` (tests/conftest.py is not this module's to edit).
pytest_plugins = ["tests.slurm_fixtures"]


def test_srun_spans_two_nodes_with_distinct_node_ids(slurm_cluster: SlurmCluster) -> None:
    result = slurm_cluster.client(
        "srun", "-N2", "--ntasks-per-node=2",
        "sh", "-c", 'echo "task=$SLURM_PROCID node=$SLURM_NODEID host=$(hostname)"',
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    tasks = sorted(re.findall(r"task=(\d) node=(\d) host=(\S+)", result.stdout))
    assert tasks == [("0", "0", "n1"), ("1", "0", "n1"), ("2", "1", "n2"), ("3", "1", "n2")]
    assert slurm_cluster.drained() == []


def test_batch_job_sees_both_hosts(slurm_cluster: SlurmCluster, tmp_path) -> None:  # noqa: ANN001
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/sh\n"
        'scontrol show hostnames "$SLURM_JOB_NODELIST"\n'
        "srun --ntasks-per-node=1 sh -c 'echo step $SLURM_NODEID $(hostname)'\n"
    )
    out = tmp_path / "job.out"
    result = slurm_cluster.client("sbatch", "--wait", "-N2", f"--output={out}", str(script))
    assert result.returncode == 0, result.stderr
    lines = out.read_text().split("\n")
    assert lines[:2] == ["n1", "n2"]
    assert sorted(line for line in lines if line.startswith("step")) == ["step 0 n1", "step 1 n2"]


def test_fixture_leaves_nothing_behind(tmp_path) -> None:  # noqa: ANN001
    """A cluster started and stopped here leaves no daemon, namespace or link."""
    import os

    from tests.slurm_fixtures import SlurmCluster, _free_subnet, leftovers, slurm_missing

    if slurm_missing():
        from tests.conftest import require_real

        require_real(str(slurm_missing()))
    prefix = f"dlpt{os.getpid()}"
    cluster = SlurmCluster(root=tmp_path, prefix=prefix, subnet=_free_subnet())
    try:
        cluster.start()
        job = cluster.client("sbatch", "--parsable", "-N2", "--wrap", "sleep 300")
        assert job.returncode == 0, job.stderr
    finally:
        cluster.stop()
    assert leftovers(cluster) == []
