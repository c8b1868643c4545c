"""tools/gpu_check.py (``driver.diagnose.gpucheck``): the one-command GPU check, rehearsed on
the CPU.

Its stages select exactly one case of each profile (gpu-check, gpu-check-cpu) through the real
`dlperf run --dry-run`; the budget skips or cuts a stage; a cut stage is interrupted, then
killed; the archive is a release archive whose session seal `unpack` holds every member to; and
one real run of two stages on the CPU (the PyTorch environment as "the machine's python") gives
a summary and an archive whose session passes the kit's own door (`dlperf report`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from driver.diagnose.gpucheck import archive as sealed
from driver.diagnose.gpucheck import node, stages
from driver.diagnose.gpucheck import summary as reading
from driver.frameworks.base import FRAMEWORKS
from driver.model.seal import SEAL, load_seal
from driver.release import archive as release_archive
from driver.release.archive import read_archive

REPO_ROOT = Path(__file__).resolve().parents[1]


def framework_python(framework: str = "pytorch") -> str:
    from driver.frameworks.envs import ensure_env
    from driver.plugins import load_all

    load_all()
    return str(ensure_env(FRAMEWORKS.get(framework), log=lambda _line: None))


# --------------------------------------------------------------------------------------------
# The stages and the matrix profiles stay in step


@pytest.mark.parametrize("shapes", [stages.GPU, stages.CPU], ids=["gpu", "cpu"])
def test_every_run_stage_selects_exactly_its_case(
    shapes: stages.Shapes, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from driver.frontend.cli import main

    pythons = {"pytorch": framework_python(), "jax": framework_python("jax")}
    for stage in (s for s in stages.STAGES if s.kind == "run"):
        argv = stage.argv(shapes, pythons[stage.framework], tmp_path)
        assert argv[1:4] == ["-m", "driver", "run"]  # the CLI, run here in-process
        code = main([*argv[3:], "--dry-run"])
        out, err = capsys.readouterr()
        assert code == 0, err
        # a case line of the dry run: "<case id>  x<repeats>  (...)" (the estimate above it
        # names the cases too, indented)
        prefixes = tuple(f"{m}/{stage.framework}/1n1g/" for m in ("resnet50", "bert", "llama"))
        cases = [line.split()[0] for line in out.splitlines() if line.startswith(prefixes)]
        assert len(cases) == 1, (stage.name, out)
        model, _fw, _topology, batch, precision, _data, *variant = cases[0].split("/")
        fixed = shapes.batch_of(model)
        assert batch == ("bsmax" if stage.max_batch else f"bs{fixed}")
        assert variant == ([] if "default" in stage.run_args else [stage.run_args[-1]])
        assert precision == ("amp" if "on" in stage.run_args else "fp32")
        assert model == stage.run_args[1]


def test_a_stage_starts_only_when_its_estimate_fits_and_cpu_skips_gpu_only_stages() -> None:
    compile_stage = next(s for s in stages.STAGES if s.name == "resnet50-amp-compile")
    graphs = next(s for s in stages.STAGES if s.name == "resnet50-amp-cuda-graphs")
    reserve = stages.RESERVE_S
    assert stages.decide(compile_stage, reserve + compile_stage.estimate_s, True) is None
    why = stages.decide(compile_stage, reserve + compile_stage.estimate_s - 1, True)
    assert why is not None and "not enough time left" in why
    assert stages.decide(graphs, 10_000, False) == "needs a GPU (rehearsal on CPU)"
    assert stages.decide(graphs, 10_000, True) is None


def test_every_plan_fits_the_default_budget_and_all_plans_cover_every_stage() -> None:
    estimates = {stage.name: stage.estimate_s for stage in stages.STAGES}
    usable = stages.GPU_BUDGET_S - stages.RESERVE_S
    for name, members in stages.PLANS.items():
        assert sum(estimates[m] for m in members) <= usable, name
    covered = {m for members in stages.PLANS.values() for m in members}
    assert covered == set(stages.STAGE_NAMES)
    core = [stage.name for stage in stages.chosen_stages(None)]
    assert core == ["facts", "resnet50-amp", "bert-amp", "selftest", "parity-amp"]
    # the estimates are built from start-up costs: a repeat is never cheaper than its start
    assert estimates["resnet50-amp"] > stages.REPEATS * stages.PROCESS_S
    assert estimates["bert-amp-max"] > estimates["bert-amp"]
    # Llama 3.2 1B: its own call; three windows of 120 steps of 16,384 tokens at 35% MFU
    assert stages.PLANS["llama"] == ("facts", "llama-1b-amp")
    step = stages.LLAMA_1B_STEP_S
    assert 0.3 < step < 0.6 and estimates["llama-1b-amp"] == pytest.approx(
        stages.DRIVER_S + stages.REPEATS * (stages.PROCESS_S + 120 * step)
    )


def test_stages_are_chosen_by_stage_and_plan_names() -> None:
    chosen = stages.chosen_stages("bert-max,selftest")
    assert [s.name for s in chosen] == ["facts", "selftest", "bert-amp-max"]
    assert len(stages.chosen_stages("all")) == len(stages.STAGES)
    with pytest.raises(stages.UsageError, match="unknown stage or plan 'nope'"):
        stages.chosen_stages("facts,nope")


def check(tmp_path: Path, *args: str, env: dict[str, str] | None = None):  # noqa: ANN201
    """``gpu_check.py`` as a command, its temporary folders under ``tmp_path/tmp``."""
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "tools/gpu_check.py", *args], cwd=REPO_ROOT,
        env={**os.environ, "TMPDIR": str(scratch), **(env or {})},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budget-s", "nan"], "finite number of seconds"),
        (["--budget-s", "-1"], "finite number of seconds"),
        (["--budget-s", "inf"], "finite number of seconds"),
        (["--stages", "facts,bogus"], "unknown stage or plan 'bogus'"),
        (["--out", "{file}"], "a file, not a folder"),
        (["--resume", "{missing}"], "no such archive"),
    ],
    ids=["nan", "negative", "inf", "stage", "out-file", "resume-missing"],
)
def test_bad_run_options_are_refused_in_one_line_and_leave_nothing(
    tmp_path: Path, args: list[str], message: str
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("keep me")
    filled = [a.format(file=a_file, missing=tmp_path / "none.tar.gz") for a in args]
    out = ["--out", str(tmp_path / "out")] if "--out" not in args else []
    done = check(tmp_path, "run", "--cpu", *out, *filled)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert a_file.read_text() == "keep me"
    assert list((tmp_path / "tmp").iterdir()) == []  # no work folder left behind


# --------------------------------------------------------------------------------------------
# A stage cut at the budget


def test_a_stage_past_its_time_is_interrupted_and_keeps_what_it_did(tmp_path: Path) -> None:
    script = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, lambda *_: (print('kept', flush=True), sys.exit(130)))\n"
        "time.sleep(60)\n"
    )
    log = tmp_path / "stage.log"
    started = time.monotonic()
    code, detail = node.run_command([sys.executable, "-c", script], log, 1.0, dict(os.environ))
    assert code == 130 and "interrupted" in detail and time.monotonic() - started < 15
    assert "kept" in log.read_text()


def test_a_stage_that_ignores_the_interrupt_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node, "INTERRUPT_GRACE_S", 1.0)
    script = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)\n"
    code, detail = node.run_command(
        [sys.executable, "-c", script], tmp_path / "stage.log", 0.5, dict(os.environ)
    )
    assert code is None and "killed" in detail


# --------------------------------------------------------------------------------------------
# The archive: the release archive of the work folder, every member held to its seal


def make_work(tmp_path: Path) -> Path:
    work = tmp_path / "base" / sealed.SESSION
    repeat = work / "results" / sealed.SESSION / "cases" / "m" / "repeat-01"
    repeat.mkdir(parents=True)
    (repeat / "node0.log").write_text('{"dlperf": "end"}\n')
    (work / "summary.json").write_text(json.dumps({"host": "h100 box"}))
    return work


def packed(tmp_path: Path) -> Path:
    """The check's archive of a small work folder, as ``publish`` writes it."""
    archive = tmp_path / sealed.ARCHIVE
    sealed.write_sealed_archive(make_work(tmp_path), archive)
    return archive


SEAL_MEMBER = f"{sealed.SESSION}/{SEAL}"


def test_an_archive_unpacks_into_a_session_folder_of_its_own(tmp_path: Path) -> None:
    archive = packed(tmp_path)
    with tarfile.open(archive) as tar:  # the release's archive: one top folder, sealed
        names = tar.getnames()
    assert SEAL_MEMBER in names and all(n.startswith(f"{sealed.SESSION}/") for n in names)
    seal = load_seal(read_archive(archive)[SEAL_MEMBER], SEAL)
    assert set(seal.files) == {"summary.json", "results/gpu-check/cases/m/repeat-01/node0.log"}
    target = sealed.unpack(archive, tmp_path / "results")
    assert target.name.startswith("gpu-check-h100-box-")
    assert (target / "session" / "cases" / "m" / "repeat-01" / "node0.log").is_file()
    assert not (target / SEAL).exists()  # it sealed the work folder, moved since
    with pytest.raises(sealed.UnpackError, match="exists already"):
        sealed.unpack(archive, tmp_path / "results")


def rewrite(archive: Path, change) -> None:  # noqa: ANN001
    """Rebuild the archive with ``change(name, data) -> (name, data) | None`` per member."""
    members = []
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member).read()  # type: ignore[union-attr]
            changed = change(member.name, data)
            if changed is not None:
                members.append(changed)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    archive.write_bytes(buffer.getvalue())


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda a: a.write_bytes(a.read_bytes()[: len(a.read_bytes()) // 2]), "not a whole"),
        (lambda a: rewrite(a, lambda n, d: (n, d + b"x") if n.endswith(".log") else (n, d)),
         "does not match its SHA-256"),
        (lambda a: rewrite(a, lambda n, d: None if n.endswith(".log") else (n, d)),
         "differ from its seal"),
        (lambda a: rewrite(a, lambda n, d: (n, d) if n != SEAL_MEMBER else None),
         f"no {SEAL_MEMBER}"),
        (lambda a: rewrite(a, lambda n, d: ("../escape.json", d) if n.endswith("summary.json")
                           else (n, d)), "not a plain relative file"),
        (lambda a: rewrite(a, lambda n, d: (n.removeprefix("gpu-check/"), d)
                           if n.endswith("summary.json") else (n, d)), "members outside"),
    ],
    ids=["truncated", "edited", "missing", "no-seal", "escape", "outside"],
)  # fmt: skip
def test_a_damaged_archive_is_refused_and_nothing_is_written(
    tmp_path: Path,
    damage,
    message: str,  # noqa: ANN001
) -> None:
    archive = packed(tmp_path)
    damage(archive)
    results = tmp_path / "results"
    with pytest.raises(sealed.UnpackError, match=message):
        sealed.unpack(archive, results)
    assert not results.exists() or not any(results.iterdir())
    assert not (tmp_path / "escape.json").exists()


def test_an_archive_cut_anywhere_is_not_whole(tmp_path: Path) -> None:
    """Cut at any byte, the archive is refused as cut: a cut that falls on a member's header
    once ended the tar stream without an error and read as an archive without a manifest (the
    half-way cut above met it only when the compressed bytes fell so)."""
    whole = packed(tmp_path).read_bytes()
    archive, results = tmp_path / "cut.tar.gz", tmp_path / "results"
    for cut in range(1, len(whole)):
        archive.write_bytes(whole[:cut])
        with pytest.raises(sealed.UnpackError, match="not a whole"):
            sealed.unpack(archive, results)
        assert not results.exists()


def seal_of(members: list[tuple[str, bytes]]) -> bytes:
    """A session seal holding ``members`` (work-folder-relative) as they are."""
    import hashlib

    return json.dumps({
        "schema": 1, "kind": "dlperf-session", "session": sealed.SESSION, "sealed_at": "",
        "head_node": "node", "kit": {}, "previous": None, "session_json": {}, "repeats": {},
        "files": {n: {"sha256": hashlib.sha256(d).hexdigest(), "bytes": len(d)}
                  for n, d in members},
    }).encode()  # fmt: skip


def build(path: Path, members: list[tuple[str, bytes]], seal: bytes | None = None) -> Path:
    """An archive of ``members`` under the check's top folder with a seal that matches them (or
    ``seal`` as given)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in [*members, (SEAL, seal_of(members) if seal is None else seal)]:
            info = tarfile.TarInfo(f"{sealed.SESSION}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buffer.getvalue())
    return path


LOG = ("logs/a.log", b"line\n")


@pytest.mark.parametrize(
    ("members", "seal", "message"),
    [
        ([LOG], b"{oops", "session-manifest.json: not a session manifest"),
        ([LOG], b"[1, 2]", "not a session manifest .a JSON object is expected"),
        ([LOG], seal_of([LOG]).replace(b'"sha256"', b'"sha"'), r"field files\.logs/a\.log\.sha256"),
        ([LOG, ("summary.json", b"{oops")], None, "summary.json is not JSON"),
        ([LOG, ("summary.json", b"[]")], None, "not the check's summary"),
        ([LOG, ("summary.json", b'{"stages": 3}')], None, "not the check's summary"),
        ([("a", b"x"), ("a/b", b"y")], None, "clashes with another member"),
        ([("a/b", b"y"), ("a", b"x")], None, "clashes with another member"),
        ([LOG, LOG], None, "clashes with another member"),
        ([(".", b"x")], None, "not a plain relative file"),
        ([("logs/./a.log", b"x")], None, "not a plain relative file"),
        ([("logs//a.log", b"x")], None, "not a plain relative file"),
    ],
    ids=["seal-oops", "seal-list", "no-sha256", "summary-oops", "summary-list",
         "summary-stages", "file-then-folder", "folder-then-file", "twice", "dot", "dot-part",
         "empty-part"],
)  # fmt: skip
def test_a_malformed_archive_is_a_clear_error_and_nothing_is_left(
    tmp_path: Path, members: list[tuple[str, bytes]], seal: bytes | None, message: str
) -> None:
    archive = build(tmp_path / sealed.ARCHIVE, members, seal)
    results = tmp_path / "results"
    with pytest.raises(sealed.UnpackError, match=message):
        sealed.unpack(archive, results)
    assert not results.exists()


def test_an_archive_of_the_first_format_is_refused_with_what_it_is(tmp_path: Path) -> None:
    """The check's first archives (members at the top, its own MANIFEST.json; no GPU run ever
    wrote one) are named as such, not read."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in [LOG, ("MANIFEST.json", b"{}")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    archive = tmp_path / sealed.ARCHIVE
    archive.write_bytes(buffer.getvalue())
    with pytest.raises(sealed.UnpackError, match="first format .MANIFEST.json., which this kit"):
        sealed.unpack(archive, tmp_path / "results")
    assert not (tmp_path / "results").exists()


def test_members_that_are_not_regular_files_are_refused_before_extraction(tmp_path: Path) -> None:
    for kind in (tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            info = tarfile.TarInfo("gpu-check/logs/odd")
            info.type, info.linkname = kind, "/etc/passwd"
            tar.addfile(info)
        archive = tmp_path / f"{kind!r}.tar.gz"
        archive.write_bytes(buffer.getvalue())
        with pytest.raises(sealed.UnpackError, match="not a plain relative file"):
            sealed.unpack(archive, tmp_path / "results")
    assert not (tmp_path / "results").exists()


def test_the_unpacked_total_is_bounded_while_it_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member's bytes are counted against the bound before they are read: 64 MiB of zeros
    (64 KiB compressed) stops at a 1 MiB bound with one chunk in memory at most."""
    zeros = tmp_path / "zeros.tar.gz"
    with tarfile.open(zeros, mode="w:gz") as tar:
        info = tarfile.TarInfo("gpu-check/logs/zeros.log")
        info.size = 64 << 20
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    monkeypatch.setattr(release_archive, "MAX_TOTAL_BYTES", 1 << 20)
    with pytest.raises(sealed.UnpackError, match="unpacks to over 1048576 bytes"):
        sealed.unpack(zeros, tmp_path / "results")
    monkeypatch.setattr(release_archive, "MAX_TOTAL_BYTES", 4 << 30)
    monkeypatch.setattr(release_archive, "MAX_MEMBER_BYTES", 1 << 20)
    with pytest.raises(sealed.UnpackError, match="is over 1048576 B"):
        sealed.unpack(zeros, tmp_path / "results")
    assert not (tmp_path / "results").exists()


def test_unpack_refuses_results_that_is_a_file(tmp_path: Path) -> None:
    archive = packed(tmp_path)
    a_file = tmp_path / "results"
    a_file.write_text("keep me")
    done = check(tmp_path, "unpack", str(archive), "--results", str(a_file))
    assert done.returncode == 2 and "a file, not a folder" in done.stderr
    assert "Traceback" not in done.stderr and a_file.read_text() == "keep me"


# --------------------------------------------------------------------------------------------
# The whole command, rehearsed: two stages on the CPU


def test_the_rehearsal_writes_a_summary_and_an_archive_the_kit_reads(tmp_path: Path) -> None:
    python = framework_python()
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "tools/gpu_check.py", "run", "--cpu", "--out", str(out),
         "--python", python, "--stages", "facts,resnet50-amp,jax"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "cpu-rehearsal"
    assert [s["status"] for s in summary["stages"]] == ["ok", "ok", "skipped"]
    # the PyTorch interpreter has no JAX: the JAX stage names why, the check goes on
    assert summary["stages"][2]["detail"].startswith(f"no JAX with Flax and Optax under {python}")
    (case,) = summary["cases"]
    assert case["case"] == "resnet50/pytorch/1n1g/bs4/amp/synthetic"
    assert case["repeats_ok"] == 2 and case["median"] > 0
    assert case["device_clock"] == [None, None]  # a CPU has no device clock
    assert case["telemetry"][0]["note"].startswith("no GPU")  # NVML missing: a note, no failure
    assert case["flops_per_sample"] > 0 and case["mfu"] is None  # no peak for a CPU
    assert "resnet50/pytorch/1n1g/bs4/amp/synthetic" in (out / "summary.md").read_text()
    target = sealed.unpack(out / sealed.ARCHIVE, tmp_path / "results")
    assert json.loads((target / "facts" / "fingerprint.json").read_text())["hardware"]
    report = subprocess.run(
        [sys.executable, "-m", "driver", "report", str(target / "session"),
         "--out", str(tmp_path / "report")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    rows = json.loads((tmp_path / "report" / "report.json").read_text())
    assert [row["case_id"] for row in rows] == [case["case"]]
    assert rows[0]["throughput_median"] == pytest.approx(case["median"])
    # a second command resumes the same session from the archive: the finished repeats stay,
    # and a stage of another case runs into it beside them
    again = subprocess.run(
        [sys.executable, "tools/gpu_check.py", "run", "--cpu", "--out", str(tmp_path / "out2"),
         "--python", python, "--stages", "resnet50-amp,bert-amp,jax-resnet50-amp",
         "--jax-python", framework_python("jax"), "--resume", str(out / sealed.ARCHIVE)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    resumed = json.loads((tmp_path / "out2" / "summary.json").read_text())
    assert [(s["name"], s["run"], s["status"]) for s in resumed["stages"]] == [
        ("facts", 1, "ok"),
        ("resnet50-amp", 1, "ok"),
        ("jax-resnet50-amp", 1, "skipped"),
        ("resnet50-amp", 2, "ok"),
        ("bert-amp", 2, "ok"),
        ("jax-resnet50-amp", 2, "ok"),
    ]
    found = {c["case"]: c for c in resumed["cases"]}
    assert found[case["case"]]["throughputs"] == case["throughputs"]  # not measured again
    (bert,) = [c for c in found.values() if c["case"].startswith("bert/pytorch/1n1g/")]
    assert bert["repeats_ok"] == 2
    jax_case = found["resnet50/jax/1n1g/bs4/amp/synthetic"]
    assert jax_case["framework"] == "jax" and jax_case["repeats_ok"] == 2
    # JAX beside PyTorch on the same case (a CPU's figures: shown, never a goal's)
    pair = f"= {jax_case['median'] / case['median']:.3f}"
    text = (tmp_path / "out2" / "summary.md").read_text()
    assert "ResNet-50 AMP at batch 4, JAX / PyTorch: " in text and pair in text
    second = sealed.unpack(tmp_path / "out2" / sealed.ARCHIVE, tmp_path / "results2")
    assert (second / "facts" / "torch.json").is_file()  # the first command's facts carried on
    assert "already finished" in (second / "logs" / "resnet50-amp.log").read_text()


def test_a_gpu_that_torch_does_not_see_is_reported_not_rehearsed(tmp_path: Path) -> None:
    """nvidia-smi lists a GPU, and torch (here its CPU build) sees none: the facts run, every
    other stage is skipped with torch's words, exit 3; the session resumes only as a GPU one."""
    fake = tmp_path / "bin"
    fake.mkdir()
    smi = fake / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\n[ "$1" = -L ] || exit 9\n'
        'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1d2e3f40-aaaa-bbbb-cccc-000000000000)"\n'
    )
    smi.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    python, out = framework_python(), tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "tools/gpu_check.py", "run", "--out", str(out), "--python", python,
         "--stages", "facts,resnet50-amp"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr
    assert "does not see GPU 0: NVIDIA H100 80GB HBM3: no GPU found" in done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "gpu" and summary["torch"]["cuda_available"] is False
    facts, skipped = summary["stages"]
    assert facts["name"] == "facts" and facts["status"] == "ok"
    assert skipped["status"] == "skipped" and "does not see GPU 0" in skipped["detail"]
    assert not (out / "summary.md").read_text().count("/bs")  # nothing ran
    again = subprocess.run(
        [sys.executable, "tools/gpu_check.py", "run", "--cpu", "--out", str(tmp_path / "out2"),
         "--python", python, "--stages", "facts", "--resume", str(out / sealed.ARCHIVE)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert again.returncode == 2
    assert again.stderr.strip().splitlines() == [
        f"gpu-check: error: --resume {out / sealed.ARCHIVE}: that session ran as gpu and "
        "this command would run as cpu-rehearsal (--cpu); resume it on a node like the one it "
        "ran on, or leave --resume out to start a new session"
    ]
    assert not (tmp_path / "out2" / sealed.ARCHIVE).exists()


def test_a_gpu_repeat_is_read_with_its_device_clock_peak_and_nvml_samples(tmp_path: Path) -> None:
    """What only a GPU writes, made by the kit's own writers: the rank's step log with the
    ``device-window`` record (protocol.StepLogger) and NVML samples over the steps (the
    telemetry sampler, on pynvml's calls with an H100's values); the summary reads the kit
    against the device clock, the peak that MFU divides by, and the window's telemetry."""
    from driver.bench.protocol import StepLogger
    from driver.telemetry.sampler import TelemetrySampler
    from tests.test_telemetry import FakeNvml

    case_id = "resnet50/pytorch/1n1g/bs256/amp/synthetic"
    repeat = tmp_path / "work" / "results" / sealed.SESSION / "cases" / case_id / "repeat-01"
    repeat.mkdir(parents=True)
    (repeat.parent / "case.json").write_text(json.dumps({"id": case_id}))
    options = {"warmup_steps": 2, "total_steps": 6, "batch_size": 256, "precision": "amp",
               "amp_dtype": "bfloat16"}  # fmt: skip
    sampler = TelemetrySampler(repeat, {0: [os.getpid()]}, 0.01, nvml_module=FakeNvml())
    started = time.time()
    sampler.start()
    with open(repeat / "node0.log", "w") as log:
        steps = StepLogger(framework="pytorch", model="resnet50", stream=log,
                           rank_env={"rank": 0, "world_size": 1, "local_rank": 0,
                                     "node_rank": 0})  # fmt: skip
        steps.header(versions={}, devices=["NVIDIA H100 80GB HBM3"], options=options)
        steps.begin()
        stamps = [steps.step(step, 256) for step in range(1, 7) if time.sleep(0.05) is None]
        steps.end()
        window = stamps[5] - stamps[1]
        steps.device_window(window * 1.002, 4, "cuda-events")
    sampler.stop()
    header = reading.rank0_log((repeat / "node0.log").read_text()).header
    (repeat / "record.json").write_text(json.dumps({
        "verdict": "ok", "header": header, "started_at": started, "finished_at": time.time(),
        "measurement": {"samples": 4 * 256, "throughput": 4 * 256 / window},
    }))  # fmt: skip

    summary = reading.summarize(tmp_path / "work", [], True, stages.GPU, None)
    (row,) = summary["cases"]
    assert row["device"] == "NVIDIA H100 80GB HBM3" and row["peak_tflops"] == 989.4  # bf16
    assert row["kit_vs_device_clock"] == pytest.approx(0.002, rel=1e-6)
    (telemetry,) = row["telemetry"]
    assert telemetry["window"] == "steps" and telemetry["samples"] >= 5
    assert telemetry["power_w_median"] == 650.0 and telemetry["sm_clock_mhz_median"] == 1980.0
    assert telemetry["mem_used_mib_max"] == 1001.0 and telemetry["temp_c_max"] == 61.0
    assert f"| {case_id} | 256     | 1/1  |" in summary["markdown"]
    text = summary["markdown"]
    assert "| 0.200%                | -     | 650.0 | 1,980.0  | 1,001.0       | 61.0 " in text
    assert re.search(r"\| kit vs device clock, worst case +\| < 0.500% +\| 0.200% +\| met", text)


def test_goals_are_judged_from_what_ran_and_missing_ones_say_so() -> None:
    def case(
        model: str,
        variant: str,
        median: float,
        mfu: float | None,
        clock: float | None,
        batch: str = "bs256",
    ) -> dict:
        suffix = "" if variant == "default" else f"/{variant}"
        return {"model": model, "precision": "amp", "median": median, "mfu": mfu,
                "kit_vs_device_clock": clock, "variant": variant,
                "case": f"{model}/pytorch/1n1g/{batch}/amp/synthetic{suffix}"}  # fmt: skip

    summary = {
        "cases": [case("resnet50", "default", 2950.0, 0.30, 0.0007),
                  case("resnet50", "boundary-sync", 2980.0, 0.30, 0.0007),
                  case("resnet50", "default", 3120.0, 0.31, 0.006, batch="bsmax"),
                  case("bert", "default", 4100.0, 0.41, None, batch="bsmax"),
                  case("llama", "1b", 2.9, 0.385, 0.001, batch="bs2")],
        "selftest": ["selftest 1n1g: truth 1600.00 samples/s, measured 1599.99, error 0.0010% "
                     "(ok, bound 0.05%)", "selftest on the local runtime: 3.1 s"],
        "parity": None,
        "mode": "gpu",
    }  # fmt: skip
    verdicts = {row[0]: (row[2], row[3]) for row in reading.goal_rows(summary)}
    assert verdicts["ResNet-50 AMP samples/s (best variant)"] == ("3,120", "met")
    assert verdicts["BERT-base AMP MFU"] == ("41.0%", "met")
    assert verdicts["Llama 3.2 1B AMP MFU"] == ("38.5%", "MISSED")
    assert verdicts["kit vs device clock, worst case"] == ("0.600%", "MISSED")
    assert verdicts["selftest error, worst topology"] == ("0.0010%", "met")
    assert verdicts["kit / bare loop (parity)"] == ("not measured", "-")
    sync = next(v for k, v in verdicts.items() if k.startswith("per-step device sync"))
    assert sync == ("1.02%", "MISSED")  # 2980 / 2950 - 1: the same batch, max left out
    # a CPU rehearsal's figures are shown; only the kit's own accuracy is judged there
    on_cpu = {**summary, "mode": "cpu-rehearsal"}
    rehearsal = {row[0]: row[3] for row in reading.goal_rows(on_cpu)}
    assert rehearsal["ResNet-50 AMP samples/s (best variant)"] == "n/a (CPU rehearsal)"
    assert rehearsal["kit vs device clock, worst case"] == "n/a (CPU rehearsal)"
    assert rehearsal["selftest error, worst topology"] == "met"


# --------------------------------------------------------------------------------------------
# The shell command: refuses at once when the kit cannot start; nothing outlives it


def no_site_python(tmp_path: Path) -> Path:
    """An interpreter that sees none of the kit's packages (as a node's python3 without the
    wheels): this Python without its site-packages."""
    wrapper = tmp_path / "python-bare"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def test_the_command_refuses_in_seconds_when_the_kit_cannot_import(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "GPU_CHECK_PYTHON": str(no_site_python(tmp_path)),
           "TMPDIR": str(tmp_path)}  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(["bash", "tools/gpu-check.sh"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 3 and time.monotonic() - started < 5
    assert "the kit cannot start" in done.stderr or "did not install" in done.stderr
    assert {p.name for p in out.iterdir()} == {"console.log"}
    assert not list(tmp_path.glob("dlperf-*"))  # the scratch install folder is gone


def processes_with(marker: str) -> list[tuple[int, str]]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker.encode() in environ:
            found.append((int(entry.name), command))
    return found


@pytest.mark.parametrize("victim", ["shell", "check"])
def test_a_killed_check_takes_every_stage_and_benchmark_with_it(
    tmp_path: Path, victim: str
) -> None:
    """SIGKILL to the shell command (or to the check under it) in the middle of a stage, while
    the benchmark runs: within seconds no process of the check is left."""
    marker = f"gpu-check-kill-{os.getpid()}-{victim}"
    env = {**os.environ, "OUT": str(tmp_path / "out"), "GPU_CHECK_PYTHON": sys.executable,
           "TMPDIR": str(tmp_path), "DLPERF_TEST_MARKER": marker}  # fmt: skip
    shell = subprocess.Popen(
        ["bash", "tools/gpu-check.sh", "--cpu", "--stages", "resnet50-amp"], cwd=REPO_ROOT,
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            running = processes_with(marker)
            if any("PyTorch" in command or "benchmark" in command for _, command in running):
                break
            assert shell.poll() is None, "the check ended before its benchmark started"
            time.sleep(0.2)
        else:
            pytest.fail(f"no benchmark started: {processes_with(marker)}")
        if victim == "shell":
            target = shell.pid
        else:
            target = next(pid for pid, c in running if "gpu_check.py" in c and "bash" not in c)
        os.kill(target, 9)
        deadline = time.monotonic() + 30
        while processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert processes_with(marker) == []
    finally:
        for pid, _command in processes_with(marker):  # only this test's own processes
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        shell.wait(timeout=30)
    assert not list(tmp_path.glob("dlperf-*"))  # the scratch and work folders went too


@pytest.mark.parametrize(
    ("variable", "file", "expected"),
    [
        ("a" * 40, None, {"commit": "a" * 40, "dirty": False, "passed_in": "DLPERF_KIT_COMMIT"}),
        (None, "b" * 40 + "-dirty\n",
         {"commit": "b" * 40, "dirty": True, "passed_in": ".dlperf-kit-commit"}),
        ("not-a-commit", None, {"commit": None, "dirty": None}),
        (None, None, {"commit": None, "dirty": None}),
    ],
    ids=["variable", "file", "bad", "none"],
)  # fmt: skip
def test_a_copy_without_git_records_the_commit_passed_in(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    variable,
    file,
    expected,  # noqa: ANN001
) -> None:
    from driver.model.results import KIT_COMMIT_FILE, KIT_COMMIT_VAR, kit_revision

    copy = tmp_path / "kit"  # the node's copy: the working tree without .git
    copy.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.delenv(KIT_COMMIT_VAR, raising=False)
    if variable is not None:
        monkeypatch.setenv(KIT_COMMIT_VAR, variable)
    if file is not None:
        (copy / KIT_COMMIT_FILE).write_text(file)
    assert kit_revision(copy) == expected
