"""The local runtime counts this machine's GPUs and runs only the cases they can hold.

The machine here has no GPU: a one-GPU machine is stood in for by an ``nvidia-smi`` on PATH
that lists one (the kit falls back to ``nvidia-smi -L`` where NVML does not load)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from driver.core.selftest import calibration_cases
from driver.model.case import Topology
from driver.runtimes.base import RuntimeConfigError
from driver.runtimes.local import LocalRuntime, count_gpus, fit_to_gpus

REPO = Path(__file__).resolve().parents[1]
ONE_GPU = (
    '#!/bin/sh\n[ "$1" = "-L" ] && echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)" && exit 0\n'
    "exit 9\n"
)


@pytest.fixture
def one_gpu_path(tmp_path: Path) -> dict[str, str]:
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(ONE_GPU)
    fake.chmod(0o755)
    return {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}


def dlperf(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "driver", "run", "--framework", "pytorch", "--model", "resnet50",
         "--amp", "on", "--profile", "dlperf", "--dry-run", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_matrix_topologies_on_one_gpu_run_what_fits_and_say_what_not(one_gpu_path) -> None:  # noqa: ANN001
    done = dlperf(one_gpu_path)
    assert done.returncode == 0, done.stderr
    planned = [line.split()[0] for line in done.stdout.splitlines() if "  x7  " in line]
    assert planned and all("/1n1g/" in case for case in planned)
    left_out = [line for line in done.stdout.splitlines() if line.startswith("left out: ")]
    assert any("1n8g" in line and "needs 8 GPUs, this machine has 1" in line for line in left_out)
    assert len(left_out) == 9  # 1n8g, 2n16g, 4n32g at three batch sizes


def test_a_named_topology_that_needs_more_gpus_is_refused_with_the_fix(one_gpu_path) -> None:  # noqa: ANN001
    done = dlperf(one_gpu_path, "--nodes", "1", "--gpus", "8")
    assert done.returncode == 2
    error = done.stderr.strip().splitlines()[-1]
    assert "resnet50/pytorch/1n8g" in error and "needs 8 GPUs" in error
    assert "NODES=1 GPUS=1" in error


def test_gpus_are_counted_from_nvidia_smi_where_nvml_does_not_load(
    one_gpu_path, monkeypatch
) -> None:  # noqa: ANN001
    monkeypatch.setenv("PATH", one_gpu_path["PATH"])
    assert count_gpus() == 1
    monkeypatch.setenv("PATH", "/nonexistent")
    assert count_gpus() == 0


def test_cpu_devices_keep_their_meaning() -> None:
    cases = calibration_cases(0.002, 8, ["1n2g"], repeats=1, measured_steps=5)
    big = [replace(cases[0], framework="pytorch", topology=Topology(4, 8))]
    assert fit_to_gpus(big, 0, topologies_given=True) == (big, [])  # no GPU: CPU processes
    assert fit_to_gpus(cases, 1, topologies_given=True) == (cases, [])  # the calibration: CPU
    with pytest.raises(RuntimeConfigError, match="needs 32 GPUs and this machine has 1"):
        fit_to_gpus(big, 1, topologies_given=True)
    assert LocalRuntime(gpus=32).fit_cases(big, topologies_given=True) == (big, [])
