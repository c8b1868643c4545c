"""Hostile inputs of issue #48, item 6: counts with spaces or past their bound, Slurm settings
the chosen container never reads, apptainer over SSH without an image, and a peak memory no
device holds. Each is one clear line naming the option, field or file; never a traceback and
never taken silently."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.cluster.slurm import load_slurm_config
from driver.frontend.cli import main
from driver.schema import ConfigError
from tests.hostile import refused
from tests.test_peak_memory import CASE_1N2G, session_with_peaks

DRY_RUN = ["run", "--dry-run", "--profile", "cpu-smoke", "--framework", "pytorch",
           "--model", "resnet50", "--variant", "default", "--amp", "off",
           "--repeats", "1"]  # fmt: skip


@pytest.mark.parametrize(
    ("flag", "value", "expect"),
    [
        ("--nodes", " 1", "plain digits"),
        ("--nodes", "1 ", "plain digits"),
        ("--nodes", "+2", "plain digits"),
        ("--nodes", "1_0", "plain digits"),
        ("--nodes", "1e9", "plain digits"),
        ("--nodes", "1000000000", "1 to 1024"),
        ("--nodes", "9" * 400, "1 to 1024"),
        ("--gpus", " 8", "plain digits"),
        ("--gpus", "1000000000", "1 to 64"),
    ],
)
def test_counts_with_spaces_or_past_their_bound_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, expect: str
) -> None:
    line = refused([*DRY_RUN, "--results", str(tmp_path), flag, value], capsys, flag, expect)
    assert len(line) < 300  # a 400-digit count is not echoed whole


@pytest.mark.parametrize("value", [" 8", "8 ", "8, 16"])
def test_batch_with_spaces_stays_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    refused([*DRY_RUN, "--results", str(tmp_path), "--batch", value], capsys, "--batch")


@pytest.mark.parametrize("container", ["oci", "none"])
def test_slurm_image_with_a_container_that_never_reads_it_is_refused(
    tmp_path: Path, container: str
) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        f"slurm:\n  container: {container}\n  image: {{pytorch: 'nvcr.io#nvidia/pytorch:24.01'}}\n"
    )
    with pytest.raises(ConfigError) as refusal:
        load_slurm_config(path)
    message = str(refusal.value)
    assert str(path) in message and "image" in message and f"container: {container}" in message
    assert "\n" not in message


@pytest.mark.parametrize("python", ["venv/bin/python", "python3", "./py", "~/venv/bin/python"])
def test_a_relative_python_under_slurm_container_none_is_refused(
    tmp_path: Path, python: str
) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(f"slurm:\n  container: none\n  python: {{pytorch: '{python}'}}\n")
    with pytest.raises(ConfigError) as refusal:
        load_slurm_config(path)
    message = str(refusal.value)
    assert str(path) in message and "python.pytorch" in message and "absolute path" in message
    # an absolute one is what the nodes run
    path.write_text("slurm:\n  container: none\n  python: {pytorch: /shared/venv/bin/python}\n")
    assert load_slurm_config(path).python == {"pytorch": "/shared/venv/bin/python"}


def test_apptainer_over_ssh_without_an_image_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        "cluster: lab\ncontainer: apptainer\ndefaults:\n  ssh: {user: bench}\n  devices: 2\n"
        "  container: {variant: cpu}\nnodes:\n  - {name: cpu01, address: 192.168.1.21}\n"
    )
    argv = [*DRY_RUN, "--runtime", "ssh", "--inventory", str(inventory),
            "--results", str(tmp_path / "r")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error: ") and "Traceback" not in "\n".join(err)
    assert str(inventory) in err[-1] and "container.image.pytorch" in err[-1]


def test_a_peak_memory_beyond_the_devices_memory_is_refused(tmp_path: Path) -> None:
    from driver.verify.folder import verify_sessions

    # 1 PiB a process: more than the host (the calibration's devices) holds
    root = session_with_peaks(tmp_path, lambda rank: {"bytes": 2**50, "source": "forged"})
    refusals = verify_sessions([root]).refused
    assert refusals and all("peak_memory.bytes" in r and "GiB is more than its device" in r
                            for r in refusals), refusals  # fmt: skip
    assert any(CASE_1N2G in r for r in refusals)


GLUON = Path(__file__).parent / "fixtures" / "upstream" / "real" / "gluon-nlp" / "bert.log"


@pytest.mark.parametrize(
    ("flag", "value", "expect"),
    [
        ("--topology", "1n1000000000g", "at most 1024 nodes and 64 devices per node"),
        ("--topology", "2000n2000g", "at most 1024 nodes"),
        ("--batch", "1000000000", "less than or equal to 1000000,"),
        ("--warmup-steps", "1000000000000", "less than or equal to 10000000,"),
        ("--step-offset", "9" * 20, "less than or equal to 10000000,"),
    ],
)
def test_imported_facts_past_their_bound_name_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, expect: str
) -> None:
    argv = ["import-logs", "--source", "gluon-nlp", "--logs", str(GLUON), "--model", "bert",
            "--batch", "4", "--dataset", "synthetic", "--warmup-steps", "9",
            "--measured-steps", "20", "--results", str(tmp_path), "--session", "s"]  # fmt: skip
    at = argv.index(flag) if flag in argv else len(argv)
    argv = [*argv[:at], *argv[at + 2 :]] if flag in argv else argv
    refused([*argv, flag, value], capsys, expect)
    assert not (tmp_path / "s").exists()


TF1_BERT = Path(__file__).parent / "fixtures" / "upstream" / "ngc-tf1" / "bert-rate.node0.log"


@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_an_imported_log_that_logs_a_step_twice_is_refused_unless_amp(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], precision: str
) -> None:
    """TF1 BERT's rate lines: a repeated 'Step = N' is an AMP loss-scale overflow iteration,
    counted; in an FP32 run it can only be an edit, which moved the figure silently."""
    lines = TF1_BERT.read_text().splitlines(keepends=True)[1:]  # without the kit's header
    at = next(i for i, line in enumerate(lines) if "Rank =  0 :: Step =      6 " in line)
    lines.insert(at + 1, lines[at])
    log = tmp_path / "bert.log"
    log.write_text("".join(lines))
    argv = ["import-logs", "--source", "ngc-tf1", "--logs", str(log), "--model", "bert",
            "--topology", "1n2g", "--batch", "16", "--warmup-steps", "4", "--measured-steps", "8",
            "--step-offset", "0", "--logging", "rank0", "--precision", precision,
            "--results", str(tmp_path), "--session", "s"]  # fmt: skip
    if precision == "fp32":
        refused(argv, capsys, str(log), "logged twice", "fp32 run")
        assert not (tmp_path / "s").exists()
    else:
        assert main(argv) == 0
