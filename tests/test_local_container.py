"""The local runtime on the container-platform axis (``dlperf run --container``), on real parts:
this host's docker engine and podman, the kit's own CPU images (built from the debootstrap
base, no registry), the calibration workload and a one-layer PyTorch BERT.

Each node's command runs inside the framework's image with the kit's code, the session and the
data mounted, the "nodes" meeting over 127.0.0.1 (host network); the record names the platform
and the image by its ID; a run killed by SIGKILL leaves containers that the resume removes. No
GPU here: ``--gpus all`` / CDI is checked as the command line says it, not run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from driver.core.runner import run_cases
from driver.model.results import Session
from driver.runtimes.base import RuntimeConfigError, Verdict, session_label
from driver.runtimes.local import LocalRuntime, session_processes
from driver.runtimes.plan import NodeCommand
from tests.cluster_fixtures import (
    build_image,
    calibration_case,
    direct_run,
    quiet,
    wait_for,
)
from tests.test_cluster_podman import podman_image  # noqa: F401 - the fixture, shared

REPO_ROOT = Path(__file__).resolve().parents[1]
ENGINES = ["docker", "podman"]


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, docker_engine: None, cpu_python_image: str) -> str:  # noqa: ARG001
    """Each engine, with the CPU image in its store (podman's loaded from docker's)."""
    if request.param == "podman":
        request.getfixturevalue("podman_image")
    return request.param


def containers(engine: str, label: str, *, running: bool = False) -> list[str]:
    """Names of the engine's containers labelled with the session ``label``."""
    argv = [engine, "ps", "--filter", f"label=dlperf.session={label}", "--format", "{{.Names}}"]
    listed = subprocess.run(argv + ([] if running else ["-a"]), capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    return listed.stdout.split()


def image_id(engine: str, cpu_python_image: str) -> str:
    return cpu_python_image.removeprefix("sha256:") if engine == "podman" else cpu_python_image


# What each "node" reports from inside: the container's marker file (which a host that is
# itself a container has too: hence also its folder and code at /dlperf, absent on the host),
# its interpreter, a hostile value of its environment, the session folder writable.
INSIDE = """
import json, os, sys
import driver.bench.protocol
marker = "/.dockerenv" if os.path.exists("/.dockerenv") else "/run/.containerenv"
with open(os.path.join(sys.argv[1], "from-" + os.environ["DLPERF_NODE_RANK"]), "w") as out:
    out.write("written inside")
print(json.dumps({"inside": os.path.exists(marker), "cwd": os.getcwd(),
                  "python": sys.executable, "hostile": os.environ["DLPERF_HOSTILE"],
                  "code": driver.bench.protocol.__file__}))
"""


def test_each_node_runs_inside_the_image_with_the_code_session_and_environment(
    engine: str, cpu_python_image: str, image_options, tmp_path: Path
) -> None:
    runtime = LocalRuntime(container=engine, build_options=image_options)
    session = tmp_path / "s"
    hostile = "$(touch /tmp/dlperf-pwned) `id` '; \" \\ * ~"
    argv = ["python3", "-c", INSIDE, str(session.resolve())]
    outcome, directory = direct_run(runtime, [argv, argv], session, env={"DLPERF_HOSTILE": hostile})
    logs = [(directory / f"node{i}.log").read_text() for i in (0, 1)]
    assert outcome.verdict == Verdict.OK, (outcome.detail, logs)
    for log in logs:
        seen = json.loads(log.strip().splitlines()[-1])
        python = seen.pop("python")
        assert seen == {
            "inside": True,
            "cwd": "/dlperf",  # no such folder on this host: the kit's code mounted there
            "hostile": hostile,
            "code": "/dlperf/driver/bench/protocol.py",
        }
        assert python.startswith("/opt/venv/")  # the image's interpreter, not a kit venv
    assert [(session / f"from-{rank}").read_text() for rank in (0, 1)] == ["written inside"] * 2
    assert outcome.extra["container"] == engine
    assert outcome.extra["images"] == {
        n: image_id(engine, cpu_python_image) for n in ("local0", "local1")
    }
    assert not Path("/tmp/dlperf-pwned").exists()
    assert containers(engine, session_label(session)) == []


def test_calibration_meets_over_loopback_in_containers_and_records_the_platform(
    engine: str, cpu_python_image: str, image_options, tmp_path: Path
) -> None:
    runtime = LocalRuntime(container=engine, build_options=image_options)
    session = Session.open(tmp_path / "s")
    case = calibration_case("2n4g", measured_steps=10)
    summary = run_cases([case], session, runtime, printer=quiet, progress="off")
    assert summary.ok
    [(_case, record, directory)] = list(session.records())
    assert record.ok and record.measurement.ranks == 4
    assert record.extra["container"] == engine
    assert set(record.extra["images"].values()) == {image_id(engine, cpu_python_image)}
    assert "telemetry" not in record.extra  # the client's tree is not the container's
    assert (directory / "node1.log").read_text().count('"dlperf": "header"') == 2
    assert containers(engine, session_label(session.root)) == []


# The head of a run killed by SIGKILL: a calibration case long enough to be killed mid-repeat.
HEAD = """
import sys
from pathlib import Path
from driver.core.runner import run_cases
from driver.core.selftest import calibration_cases
from driver.images.build import BuildOptions
from driver.model.results import Session
from driver.runtimes.local import LocalRuntime

[case] = calibration_cases(step_time=0.5, batch=4, topologies=["2n4g"], repeats=1,
                           measured_steps=400)
options = BuildOptions(lock_path=Path(sys.argv[3]), log=lambda _line: None)
runtime = LocalRuntime(container=sys.argv[2], build_options=options)
run_cases([case], Session.open(Path(sys.argv[1])), runtime, printer=lambda _l: None,
          progress="off")
"""


def test_a_run_killed_by_sigkill_leaves_containers_the_resume_removes(
    engine: str, image_options, tmp_path: Path
) -> None:
    root = tmp_path / "s"
    label = session_label(root)
    head = subprocess.Popen(
        [sys.executable, "-c", HEAD, str(root), engine, str(image_options.lock_path)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:

        def ranks_run() -> bool:
            logs = "".join(p.read_text() for p in root.rglob("node*.log"))
            return logs.count('"step": 1,') == 4

        wait_for(ranks_run, 90, "every rank's first step")
        assert len(containers(engine, label, running=True)) == 2
        # Killed outright, the head and the engine's clients at once (an OOM kill of the whole
        # job, a crashed CI runner): the clients are stopped first, so that the head's death
        # (their parent-death SIGTERM) cannot reach them and end their containers.
        clients = session_processes(root)
        assert len(clients) == 2
        for pid in clients:
            os.kill(pid, signal.SIGSTOP)
        head.send_signal(signal.SIGKILL)
        head.wait()
        for pid in clients:
            os.kill(pid, signal.SIGKILL)
        left = containers(engine, label, running=True)
        assert len(left) == 2  # still running: no process of the kit is there to end them
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()
    # The resume: the session's next run removes them before it runs anything.
    lines: list[str] = []
    runtime = LocalRuntime(container=engine, build_options=image_options)
    resumed = run_cases(
        [calibration_case("1n1g", measured_steps=5)],
        Session.open(root),
        runtime,
        printer=lines.append,
        progress="off",
    )
    assert resumed.ok
    removed = [line for line in lines if f"removed leftover {engine} container" in line]
    assert sorted(name for line in removed for name in left if name in line) == sorted(left)
    assert containers(engine, label) == []


def test_a_pytorch_case_in_its_image_through_the_cli(
    docker_engine: None,  # noqa: ARG001
    image_options,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """`dlperf run --container docker`: the framework's image found from the lock, as the SSH
    nodes find it. A one-layer BERT on one "node" (~10 s of the repeat is torch's start; the
    rendezvous of several is the calibration test's)."""
    from driver.frontend.cli import main

    image = build_image(image_options, "pytorch-cpu")
    monkeypatch.setenv("DLPERF_IMAGES_LOCK", str(image_options.lock_path))
    tiny = ["bert_layers=1", "bert_hidden=32", "bert_heads=2", "bert_intermediate=64",
            "seq_len=16", "vocab_size=128", "max_predictions=2"]  # fmt: skip
    code = main(
        [
            "run", "--framework", "pytorch", "--model", "bert", "--profile", "cpu-smoke",
            "--variant", "default", "--amp", "off", "--nodes", "1", "--gpus", "1",
            "--batch", "2", *(word for option in tiny for word in ("--option", option)),
            "--repeats", "1", "--warmup-steps", "1", "--measured-steps", "2",
            "--container", "docker", "--results", str(tmp_path / "results"), "--session", "e2e",
        ]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, out + err
    session = Session(tmp_path / "results" / "e2e")
    [(case, record, directory)] = list(session.records())
    assert case.topology.label == "1n1g" and record.ok and record.throughput > 0
    assert record.extra["container"] == "docker" and record.extra["images"] == {"local0": image}
    assert record.header["framework"] == "pytorch" and record.header["model"] == "bert"
    # The image's interpreter ran the script: the header's Python is the image's.
    version = "import platform; print(platform.python_version())"
    # No network: the probe needs none, so not docker's bridge either (the kit's runs use the
    # host's network).
    inside = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", image, "python3", "-c", version],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert inside.returncode == 0, inside.stderr
    assert record.header["versions"]["python"] == inside.stdout.strip()
    assert containers("docker", session_label(session.root)) == []


@pytest.mark.parametrize(
    ("container", "refusal"),
    [
        ("pyxis", "command line: --container: the pyxis platform does not run over local (it "
                  "runs under slurm); over local use one of apptainer, docker, none, podman"),
        ("dockr", "command line: --container: 'dockr' is not a container platform; under "
                  "local: apptainer, docker, none, podman"),
    ],
)  # fmt: skip
def test_a_platform_that_does_not_run_here_is_refused_in_one_line(
    container: str, refusal: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from driver.frontend.cli import main

    with pytest.raises(
        RuntimeConfigError, match="^" + refusal.replace("(", r"\(").replace(")", r"\)") + "$"
    ):
        LocalRuntime(container=container)
    code = main(
        ["run", "--framework", "pytorch", "--model", "resnet50", "--profile", "cpu-smoke",
         "--container", container, "--results", str(tmp_path), "--dry-run"]
    )  # fmt: skip
    assert code == 2
    assert capsys.readouterr().err.strip() == f"error: {refusal}"
    assert not list(tmp_path.iterdir())  # nothing ran, no session made


def test_container_goes_with_the_local_runtime_and_not_with_python(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from driver.frontend.cli import main

    code = main(["run", "--runtime", "slurm", "--container", "docker", "--results", str(tmp_path)])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "error: --container goes with --runtime local (this host); the nodes of --runtime "
        "slurm take theirs from the cluster file (container:, or slurm.container under Slurm; "
        "docs/clusters.md)"
    )
    with pytest.raises(RuntimeConfigError, match="give one of the two"):
        LocalRuntime(python_override=sys.executable, container="docker")


def test_no_container_keeps_the_local_run_as_it_was() -> None:
    runtime = LocalRuntime()
    assert runtime.platform.name == "none" and runtime.runs_here
    assert runtime.workdir() == str(REPO_ROOT)
    command = NodeCommand(node="local0", argv=["python3", "-c", "pass"], env={"A": "1"})
    from driver.runtimes.local_platform import HostRun

    run = HostRun("n", "l", None, (), gpus=False)
    assert runtime.platform.host_command(command, run) is command


def test_gpus_reach_the_container_the_way_each_engine_takes_them(image_options) -> None:
    """No GPU here: the flags only (docker's --gpus, podman's CDI device)."""
    from driver.runtimes.local_platform import HostRun

    command = NodeCommand(node="local0", argv=["python3"], env={"RANK": "0"}, workdir=None)
    for engine, flags in (
        ("docker", ["--gpus", "all"]),
        ("podman", ["--device", "nvidia.com/gpu=all"]),
    ):
        platform = LocalRuntime(container=engine, build_options=image_options).platform
        with_gpus = platform.host_command(command, HostRun("n", "l", "img", (), gpus=True)).argv
        without = platform.host_command(command, HostRun("n", "l", "img", (), gpus=False)).argv
        assert with_gpus[0] == engine and without[0] == engine
        start = with_gpus.index(flags[0])
        assert with_gpus[start : start + 2] == flags and flags[0] not in without
        assert with_gpus[-2:] == ["img", "python3"] and ["-e", "RANK"] == with_gpus[-4:-2]


def test_make_passes_container_on() -> None:
    # `make -n` prints the command the target would run, without running it.
    def command(*variables: str) -> str:
        result = subprocess.run(
            ["make", "-n", "resnet50-pytorch", "VENV=.venv-none", *variables],
            cwd=REPO_ROOT, capture_output=True, text=True, check=False,
        )  # fmt: skip
        return next(x for x in result.stdout.splitlines() if "dlperf run" in x)

    assert command("CONTAINER=podman").split()[-2:] == ["--container", "podman"]
    assert "--container" not in command()


def test_a_source_without_an_image_is_refused_in_a_container(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A PyPI source runs from .venvs/<source>, which no image holds: refused before the run
    (the sources with an image run in it, as over SSH)."""
    from driver.frontend.cli import main

    matrix = REPO_ROOT / "TensorFlow" / "upstream" / "pypi" / "matrix.yaml"
    code = main(
        ["run", "--matrix", str(matrix), "--profile", "cpu-smoke", "--container", "podman",
         "--results", str(tmp_path), "--dry-run"]
    )  # fmt: skip
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "error: source 'tensorflow-models-pypi' runs from its environment "
        ".venvs/tensorflow-models-pypi beside the kit's (no image), which a podman container "
        "does not hold: run it without --container"
    )


def test_apptainer_on_this_host_renders_its_exec_and_says_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Apptainer is not packaged here (render-tested, as over SSH and Slurm): the dry run
    shows each node's ``apptainer exec`` of the framework's .sif with the kit and the session
    bound at their paths, GPUs add ``--nv``; a real repeat without apptainer fails in one line
    naming the image and the fix; an upstream source is refused before anything runs."""
    from driver.frontend.cli import main
    from driver.runtimes.containers.apptainer import kit_image_file
    from driver.runtimes.local_platform import HostRun

    sif, tag = kit_image_file("pytorch", "cpu")
    code = main(
        ["run", "--framework", "pytorch", "--model", "resnet50", "--profile", "cpu-smoke",
         "--container", "apptainer", "--results", str(tmp_path), "--dry-run"]
    )  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert f"apptainer exec --bind {REPO_ROOT}:{REPO_ROOT}:ro --bind " in out
    assert f"--pwd {REPO_ROOT} {sif} python3 PyTorch/benchmark/train.py" in out
    runtime = LocalRuntime(container="apptainer")
    assert not runtime.runs_here  # the image's interpreter: no venv made
    command = NodeCommand(node="local0", argv=["python3"], env={"RANK": "0"})
    run = HostRun("n", "l", sif, (f"{REPO_ROOT}:{REPO_ROOT}:ro",), gpus=True)
    wrapped = runtime.platform.host_command(command, run)
    assert wrapped.argv[:3] == ["apptainer", "exec", "--nv"] and wrapped.env == {"RANK": "0"}
    if shutil.which("apptainer") is None:
        from driver.runtimes.base import Failure

        missing = f"apptainer could not build {tag}: .*dlperf images build"
        with pytest.raises(Failure, match=missing):
            runtime.platform.local_image("pytorch", "cpu")
    refused = "source 'pytorch-examples' runs in its own image, which the apptainer platform"
    with pytest.raises(RuntimeConfigError, match=refused):
        from tests.test_upstream_sources import case_for

        runtime.fit_cases([case_for("pytorch-examples", "resnet50")], False)
