"""Upstream sources under Slurm: each source's own image under pyxis and Slurm's OCI containers.

Rendered here for 4 nodes x 8 GPUs for every source (no cluster and no GPU needed): the
``srun`` lines, the image (the source's ``image`` as ``dlperf images build`` makes it from
images.lock), the mounts, every node's ``sh -c`` wrapper passed unchanged, CUDA_VISIBLE_DEVICES
and the step's GPU request alike, the device pre-flight's GPU list check in every node command,
and for the Horovod sources the ``srun --mpi=pmix`` launch (Debian's Slurm here cannot load its
pmix plug-in: that path is rendered, and its task script run by hand). Run for real on the test
cluster: ``test_slurm_upstream_runs.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from driver.cluster.slurm import SlurmConfig
from driver.core.plan import dry_run_plan
from driver.frameworks.base import REPO_ROOT
from driver.frameworks.envs import VENVS
from driver.images.build import BuildOptions, plan_images
from driver.images.lock import load_lock
from driver.model.case import Case, Topology
from driver.model.measure import Window, measure_repeat
from driver.parsers._runheader import HEADER_MARK
from driver.parsers.base import PARSERS
from driver.plugins import load_all
from driver.runtimes.base import RuntimeConfigError, Verdict, session_label
from driver.runtimes.containers.source_image import SourceImage
from driver.runtimes.plan import RepeatPlan
from driver.runtimes.slurm import client
from driver.runtimes.slurm.job import Allocation, Failure
from driver.runtimes.slurm.render import DEVICE_RANK_ENV
from driver.runtimes.slurm.runtime import SlurmRuntime
from driver.sources.spec import SourceSpec
from driver.sources.upstream import SPECS, UpstreamSource, rank_program
from tests.test_upstream_sources import _fake_nvidia_smi, four_node_cases, gpu_uuid

load_all()

NODES = [f"@slurm-node{i}@" for i in range(4)]
GPU_QUERY = "nvidia-smi --query-gpu=index,uuid --format=csv,noheader"
MPI_HEAD = sorted(
    name
    for name, spec in SPECS.items()
    if any(launch.launch == "mpi-head" for launch in spec.launches.values())
)


@pytest.fixture(autouse=True)
def outside_any_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(key)


def specs() -> list[SourceSpec]:
    return [SPECS[name] for name in sorted(SPECS)]


def plans(runtime: SlurmRuntime, spec: SourceSpec) -> list[RepeatPlan]:
    """One 4n32g plan per model and precision of the source's matrix (what --dry-run renders)."""
    seen, out = set(), []
    for case in four_node_cases(spec):
        if (case.model, case.precision) in seen:
            continue
        seen.add((case.model, case.precision))
        out.append(dry_run_plan(case, runtime, int(case.batch_size)))
    return out


def split_step(line: str) -> tuple[list[str], dict[str, str]]:
    """A rendered step ``$ srun ... sh -c SCRIPT``: srun's arguments, and each branch of the
    step script by its key (a node id, or a node name in an OCI container)."""
    argv = shlex.split(line.removeprefix("$ "))
    assert argv[-3:-1] == ["sh", "-c"], argv[-3:]
    branches = {}
    for text in argv[-1].splitlines():
        found = re.match(r"('[^']*'|[\w@.-]+)\) (.*)", text)
        if found:
            branches[shlex.split(found[1])[0]] = found[2]
    return argv[:-3], branches


def step_line(lines: list[str]) -> str:
    (line,) = [x for x in lines if x.startswith("$ srun ") and "--label" in x]
    return line


def assert_node_commands_unchanged(plan: RepeatPlan, branches: dict[str, str], keys: list[str]):
    """Each node's branch runs the planned node command byte for byte (the source's sh -c
    wrapper, header and upstream argv), in the source's folder, into that node's log."""
    assert list(branches) == keys
    for index, key in enumerate(keys):
        command = plan.commands[index]
        branch = branches[key]
        assert branch.startswith(f"cd {shlex.quote(command.workdir)} && exec env ")
        assert f" {shlex.join(command.argv)} >> " in branch
        log = Path(plan.repeat_dir).absolute() / f"node{index}.log"
        assert branch.endswith(f" >> {shlex.quote(str(log))} 2>&1 ;;")
        assert f"PYTHONPATH={REPO_ROOT} " in branch  # the kit's checkout, as under docker


def assert_gpus_agree(plan: RepeatPlan, srun: list[str], request: str) -> None:
    """The step asks Slurm for the case's GPUs per node, exactly those the node command names
    in CUDA_VISIBLE_DEVICES, and every node command checks them against nvidia-smi's list."""
    count = plan.devices_per_node
    flag = f"--gres=gpu:{count}" if request == "gres" else f"--gpus-per-node={count}"
    assert [a for a in srun if a.startswith(("--gres", "--gpus"))] == [flag]
    ids = ",".join(map(str, range(count)))
    for command in plan.commands:
        script = command.argv[2]
        assert f"export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={ids};" in script
        assert f"listed=$({GPU_QUERY} 2>&1); want={ids};" in script


# -- pyxis ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", specs(), ids=[s.name for s in specs()])
def test_pyxis_runs_each_sources_own_image_for_four_nodes(
    spec: SourceSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLPERF_ENGINE", "docker")  # dockerd:// (podman://: test_podman_images)
    config = SlurmConfig(partition="gpu", gpus_per_node=8, container="pyxis",
                         mounts=["/data:/data:ro"])  # fmt: skip
    runtime = SlurmRuntime(config=config)
    image = SourceImage.of(spec.name)
    assert image.name == spec.image
    squashfs = runtime.platform.squashfs(image)
    assert squashfs.parent == REPO_ROOT / ".dlperf" / "enroot"
    for plan in plans(runtime, spec):
        lines = runtime.describe(plan)
        session = plan.session_root.absolute()
        mounts = f"--container-mounts={REPO_ROOT}:{REPO_ROOT}:ro,{session}:{session},/data:/data:ro"
        # A fresh container of the image per step (per repeat, as docker gives it), writable:
        # the source's scripts write where they run, and none finds an earlier run's files.
        container = [f"--container-image={squashfs}", "--container-writable", mounts,
                     f"--container-workdir={REPO_ROOT}"]  # fmt: skip
        # Once per image, the build's image as the squashfs pyxis reads; then the repeat's step.
        enroot = ["enroot", "import", "--output", str(squashfs), f"dockerd://{image.shown}"]
        at = lines.index(f"$ {shlex.join(enroot)}")
        assert f"slurm.image.{spec.name}" in lines[at - 1]
        assert lines[at + 1] == step_line(lines) and "--container-name" not in lines[at + 1]
        srun, branches = split_step(step_line(lines))
        assert srun[srun.index("--nodes=4") + 1] == f"--nodelist={','.join(NODES)}"
        assert "--ntasks-per-node=1" in srun and "--mpi=none" in srun
        assert srun[-4:] == container
        assert_node_commands_unchanged(plan, branches, ["0", "1", "2", "3"])
        assert_gpus_agree(plan, srun, "gpus-per-node")


def test_the_source_image_is_the_one_its_dockerfile_and_images_lock_give() -> None:
    """Where the source's base is resolved in images.lock (NGC PyTorch 25.04), the image is the
    tag `dlperf images build` gives it, and its squashfs is named after that tag; where it is
    not yet, the dry run says so instead of naming an image."""
    tag = plan_images(["src-ngc-pytorch"], BuildOptions(log=lambda _line: None))["src-ngc-pytorch"]
    resolved = SourceImage.of("ngc-pytorch")
    assert resolved.tag == tag.tag and resolved.shown == tag.tag
    runtime = SlurmRuntime(config=SlurmConfig(container="pyxis"))
    assert runtime.platform.squashfs(resolved).name == tag.tag.split(":")[1].join(
        ["src-ngc-pytorch-", ".sqsh"]
    )
    assert load_lock().get(SPECS["ngc-tf1"].base_image).digest == "unresolved"
    unresolved = SourceImage.of("ngc-tf1")
    assert unresolved.tag is None and "images.lock" in unresolved.why
    assert unresolved.shown == "dlperf/src-ngc-tf1:<unbuilt: base not resolved in images.lock>"
    # The cluster file names a registry copy (or a squashfs path): used as it is.
    named = SlurmRuntime(config=SlurmConfig(container="pyxis", image={"ngc-tf1": "r#src@x"}))
    assert named.platform.image_for("tensorflow", "ngc-tf1") == "r#src@x"
    assert named.platform.image_for("tensorflow") != "r#src@x"  # the kit's own scripts: not


# -- Slurm's OCI containers -------------------------------------------------------------------
@pytest.mark.parametrize("spec", specs(), ids=[s.name for s in specs()])
def test_slurm_oci_runs_each_sources_own_image_for_four_nodes(
    spec: SourceSpec, tmp_path: Path
) -> None:
    config = SlurmConfig(gpus_per_node=8, gpu_request="gres", container="oci",
                         oci_cache=str(tmp_path / "cache"))  # fmt: skip
    runtime = SlurmRuntime(config=config)
    image = SourceImage.of(spec.name)
    for plan in plans(runtime, spec):
        lines = runtime.describe(plan)
        bundle = tmp_path / "cache" / f"session-{session_label(plan.session_root)}" / spec.name
        assert (
            f"# once per session: the OCI bundle {bundle} (root from the image {image.shown} "
            f"(the source's image {spec.image}); "
        ) in "\n".join(lines)
        own = spec.launches[plan.case.model].directory  # the plan's model's folder first
        folders = [own, *sorted({m.directory for m in spec.launches.values()} - {own}), "/root"]
        said = f"# every repeat: writable copies of {', '.join(folders)} from the image ("
        assert any(line.startswith(said) for line in lines)
        srun, branches = split_step(step_line(lines))
        assert srun[-1] == f"--container={bundle}" and "--ntasks-per-node=1" in srun
        # No per-task variable reaches an OCI container in Slurm 22.05: nodes by hostname.
        script = shlex.split(step_line(lines).removeprefix("$ "))[-1]
        assert script.splitlines()[0].startswith("[ -f /.dlperf-oci-bundle ] ||")
        assert_node_commands_unchanged(plan, branches, NODES)
        assert_gpus_agree(plan, srun, "gres")
    assert not (tmp_path / "cache").exists()  # a dry run makes nothing


def test_a_source_never_falls_back_to_the_default_image(tmp_path: Path) -> None:
    """``default`` entries are the kit's own images, which hold no upstream code; a source's
    own entry is used where given."""
    config = SlurmConfig(container="oci", oci_image={"default": "dlperf/cpu-python:x"},
                         oci_bundle={"pytorch-examples": str(tmp_path / "b")})  # fmt: skip
    platform = SlurmRuntime(config=config).platform
    assert platform.source("pytorch", "pytorch-examples") == (
        "bundle", str(tmp_path / "b"), "slurm.oci_bundle.pytorch-examples"
    )
    kind, value, said = platform.source("tensorflow", "tensorflow-models")
    assert (kind, said) == ("image", "the source's image src-tensorflow-models")
    assert value.startswith("dlperf/src-tensorflow-models:")
    assert platform.source("pytorch") == ("image", "dlperf/cpu-python:x", "slurm.oci_image.default")


# -- GPUs: the step's request and the node command's list ------------------------------------
@pytest.mark.parametrize("request_kind", ["gpus-per-node", "gres"])
def test_a_smaller_case_asks_for_its_own_gpus(request_kind: str) -> None:
    """The job holds the nodes' 8 GPUs; a 2-GPU case's step asks for 2, which Slurm numbers
    0,1 in the step (ConstrainDevices), the GPUs the node command names."""
    config = SlurmConfig(gpus_per_node=8, gpu_request=request_kind, container="pyxis")
    runtime = SlurmRuntime(config=config)
    case = next(c for c in four_node_cases(SPECS["pytorch-examples"]))
    plan = dry_run_plan(dataclasses.replace(case, topology=Topology(2, 2)), runtime, 64)
    lines = runtime.describe(plan)
    sbatch = shlex.split(lines[0].removeprefix("$ ").removesuffix(" <<'EOF'"))
    assert ("--gres=gpu:8" if request_kind == "gres" else "--gpus-per-node=8") in sbatch
    srun, _ = split_step(step_line(lines))
    assert_gpus_agree(plan, srun, request_kind)


def test_a_case_needing_more_gpus_than_the_job_asks_for_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_slurm(*args: object, **kwargs: object) -> None:
        raise AssertionError("a Slurm command ran for a refused case")

    monkeypatch.setattr(client, "slurm", no_slurm)
    runtime = SlurmRuntime(config=SlurmConfig(gpus_per_node=4, container="pyxis"))
    plan = plans(runtime, SPECS["ngc-pytorch"])[0]
    with pytest.raises(RuntimeConfigError, match=r"needs 8 GPUs per node; the session's job asks"):
        runtime.describe(plan)
    outcome = runtime.run(dataclasses.replace(plan, repeat_dir=Path("/nonexistent/r")))
    assert outcome.verdict == Verdict.FAILED and "raise slurm.gpus_per_node" in outcome.detail
    assert runtime.allocation is None


# -- Horovod sources: srun --mpi=pmix starts every rank ---------------------------------------
@pytest.mark.parametrize("source", MPI_HEAD)
def test_horovod_sources_start_every_rank_through_srun_pmix(source: str) -> None:
    config = SlurmConfig(gpus_per_node=8, container="pyxis", tasks="device", mpi="pmix")
    runtime = SlurmRuntime(config=config)
    for plan in plans(runtime, SPECS[source]):
        srun, branches = split_step(step_line(runtime.describe(plan)))
        assert "--ntasks-per-node=8" in srun and "--mpi=pmix" in srun
        assert_gpus_agree(plan, srun, "gpus-per-node")
        head = plan.commands[0].argv
        program, env = rank_program(head[5:], source)
        # NCCL_DEBUG, and the source's own variables (ngc-mxnet: DLPerf's MXNET_*/HOROVOD_*)
        assert env.get("NCCL_DEBUG") == "WARN" and program[0] == "python"
        for index, branch in enumerate(branches.values()):
            assert DEVICE_RANK_ENV in branch
            argv = shlex.split(branch.split(" exec ", 1)[1].split(" >> ")[0])
            task = argv[argv.index("sh"):]
            # Every node's tasks run the program mpirun would start, no mpirun and no sshd;
            # each node's own run header; the device check of the node command.
            assert task[3:5] == ["dlperf-upstream", plan.commands[index].argv[4]]
            assert task[5:] == ["env", *(f"{k}={v}" for k, v in env.items()), *program]
            assert "mpirun" not in task and "sshd" not in task[2]
            assert f"listed=$({GPU_QUERY} 2>&1)" in task[2]
            assert 'tag="[1,${SLURM_PROCID:?}]<stdout>:"' in task[2]


def test_without_pmix_a_horovod_source_starts_as_under_docker() -> None:
    """tasks: node (the default): node 0's mpirun reaches an sshd in each other node's
    container, exactly the node commands the docker runtime runs."""
    runtime = SlurmRuntime(config=SlurmConfig(gpus_per_node=8, container="pyxis"))
    plan = plans(runtime, SPECS["ngc-mxnet"])[0]
    _srun, branches = split_step(step_line(runtime.describe(plan)))
    assert_node_commands_unchanged(plan, branches, ["0", "1", "2", "3"])
    assert "mpirun" in branches["0"] and "/usr/sbin/sshd -p 2222" in branches["1"]


def test_a_source_with_its_own_launcher_on_every_node_is_refused_one_task_per_gpu() -> None:
    runtime = SlurmRuntime(config=SlurmConfig(container="pyxis", tasks="device"))
    plan = plans(runtime, SPECS["pytorch-examples"])[0]
    with pytest.raises(RuntimeConfigError, match=r"starts its own launcher on every node.*"
                       r"set slurm.tasks: node"):  # fmt: skip
        runtime.describe(plan)
    with pytest.raises(ValueError, match="launch: per-node"):
        UpstreamSource(SPECS["pytorch-examples"]).task_command(plan.case, _rank(0, 4, 8), 128)


def test_an_unknown_mpirun_option_is_named() -> None:
    with pytest.raises(ValueError, match=r"mpirun option '--oversubscribe' is not known"):
        rank_program(["mpirun", "--oversubscribe", "python", "x.py"], "f")
    assert rank_program(["mpirun", "-mca", "a", "b", "-x", "A=1", "-x", "B", "py"], "f") == (
        ["py"], {"A": "1"}
    )
    with pytest.raises(ValueError, match="starts no program"):
        rank_program(["mpirun", "-np", "2"], "f")


def _rank(node: int, nodes: int, procs: int):  # noqa: ANN202 - NodeRank
    from driver.launchers.base import NodeRank

    addrs = tuple(f"10.0.0.{11 + i}" for i in range(nodes))
    return NodeRank(node, nodes, procs, addrs[0], 29500, addrs)


SPEED = "INFO:root:Epoch[0] Batch [{a}-{b}]\tSpeed: {rate:.2f} samples/sec\tLR: 0.100000"


def test_the_task_script_writes_one_log_per_node_that_parses_like_mpiruns(tmp_path: Path) -> None:
    """The pmix path's task script, run by hand as srun would run it: 2 nodes x 2 tasks, the
    tasks of a node appending to one log at once. Each log opens with its run header and the
    host line (written by the node's first task, the others wait), every task checks the GPUs
    and tags its lines with its rank as mpirun --tag-output does, a task keeps its program's
    exit code; the logs parse with the source's parser as mpirun's do."""
    case = dataclasses.replace(
        next(c for c in four_node_cases(SPECS["ngc-mxnet"]) if c.precision == "fp32"),
        topology=Topology(2, 2),
    )
    source = UpstreamSource(SPECS["ngc-mxnet"])
    env = _fake_nvidia_smi(tmp_path / "bin", 2)
    directory = SPECS["ngc-mxnet"].launches["resnet50"].directory
    lines = "; ".join(
        f"echo '{SPEED.format(a=a, b=a + 19, rate=300.0 + a)}' >&2" for a in range(0, 120, 20)
    )
    program = f'{lines}; [ "$SLURM_PROCID" = 3 ] && exit 3; exit 0'
    running = []
    for node in range(2):
        argv = source.task_command(case, _rank(node, 2, 2), 96)
        script = argv[2].replace(directory, str(tmp_path))
        for local in range(2):
            task = {"SLURM_PROCID": str(node * 2 + local), "SLURM_LOCALID": str(local)}
            with (tmp_path / f"node{node}.log").open("ab") as log:
                running.append(subprocess.Popen(
                    ["sh", "-c", script, *argv[3:5], "sh", "-c", program],
                    stdout=log, stderr=subprocess.STDOUT, env={**env, **task},
                ))  # fmt: skip
    codes = [process.wait(timeout=60) for process in running]
    assert codes == [0, 0, 0, 3]  # the program's own exit code, through the tag pipe
    texts = {f"node{n}.log": (tmp_path / f"node{n}.log").read_text() for n in range(2)}
    for node, text in enumerate(texts.values()):
        # The first task's device check comes before its header (as in the node command),
        # which the parser skips; then the header and the host line, before any other line.
        check, first, second, *rest = text.splitlines()
        assert check == f"dlperf: the case's GPUs: 0={gpu_uuid(0)} 1={gpu_uuid(1)}"
        assert first.startswith(HEADER_MARK)
        assert json.loads(first[len(HEADER_MARK) :])["node_rank"] == node
        assert second.startswith("DLPERF-HOST ") and "A100" in second
        assert text.count(HEADER_MARK) == 1 and text.count("DLPERF-HOST ") == 1
        tagged = [line for line in rest if line.startswith("[1,")]
        assert {line[: line.index("]") + 1] for line in tagged} == {
            f"[1,{node * 2}]", f"[1,{node * 2 + 1}]"
        }
        assert len(tagged) == 12 and all("]<stdout>:INFO:root:Epoch[0]" in t for t in tagged)
        assert rest.count(check) == 1  # the second task's
    parsed = PARSERS.get("mxnet-speed")().parse(texts)
    measured = measure_repeat(parsed, Window(20, 100))
    seconds = sum(20 / (300.0 + a) for a in range(20, 120, 20))  # rate lines of the window
    assert measured.throughput == pytest.approx(100 / seconds)


def test_the_task_script_prints_rank_0s_step_log_file(tmp_path: Path) -> None:
    """A source that writes its step log to a file (NGC TF1's DLLogger JSON): global rank 0
    prints it after its run, one line per write; other ranks never."""
    case = dataclasses.replace(
        next(c for c in four_node_cases(SPECS["ngc-tf1"]) if c.model == "resnet50"),
        topology=Topology(1, 2),
    )
    launch = SPECS["ngc-tf1"].launches["resnet50"]
    argv = UpstreamSource(SPECS["ngc-tf1"]).task_command(case, _rank(0, 1, 2), 64)
    folder = str(Path(launch.collect).parent)  # /tmp/dlperf: made by rank 0 before its run
    script = argv[2].replace(folder, str(tmp_path / "dll")).replace(launch.directory, str(tmp_path))
    writes = f'echo "DLLL {{\\"rank\\": $SLURM_PROCID}}" > {tmp_path}/dll/log.json'
    for local in range(2):
        task = {"SLURM_PROCID": str(local), "SLURM_LOCALID": str(local), "PATH": "/usr/bin:/bin"}
        with (tmp_path / "node0.log").open("ab") as log:
            done = subprocess.run(["sh", "-c", script, *argv[3:5], "sh", "-c", writes],
                                  stdout=log, stderr=subprocess.STDOUT, env=task, timeout=60)
        assert done.returncode == 0
    text = (tmp_path / "node0.log").read_text()
    assert text.splitlines()[-1] == 'DLLL {"rank": 0}' and text.count("DLLL") == 1


# -- where a source cannot run ----------------------------------------------------------------
def test_no_container_runs_no_source_image_but_runs_the_pypi_release(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def no_slurm(*args: object, **kwargs: object) -> None:
        raise AssertionError("a Slurm command ran for a refused source")

    monkeypatch.setattr(client, "slurm", no_slurm)
    none = SlurmRuntime(config=SlurmConfig(container="none"))
    plan = plans(none, SPECS["paddle-models"])[0]
    with pytest.raises(RuntimeConfigError, match=r"runs in its own image \(src-paddle-models\), "
                       r"and slurm.container: none runs no image: set slurm.container: pyxis "
                       r"or oci"):  # fmt: skip
        none.describe(plan)
    pypi = pypi_plan(none)
    assert none.refused(pypi) == ""
    lines = none.describe(pypi)
    srun, branches = split_step(step_line(lines))
    assert "--container" not in " ".join(srun)
    assert f"{VENVS}/tensorflow-models/bin/python -m official.legacy.bert" in branches["0"]
    for container in ("pyxis", "oci"):
        runtime = SlurmRuntime(config=SlurmConfig(container=container))
        with pytest.raises(RuntimeConfigError, match=r"runs from its environment .venvs/.*"
                           r"set slurm.container: none"):  # fmt: skip
            runtime.describe(pypi_plan(runtime))


def pypi_plan(runtime: SlurmRuntime) -> RepeatPlan:
    case = Case(
        model="bert", framework="tensorflow", topology=Topology(1, 1), batch_size=4,
        precision="fp32", dataset="synthetic", source="tensorflow-models-pypi",
        warmup_steps=10, measured_steps=20, total_steps=30, repeats=1, profile="cpu-smoke",
    )  # fmt: skip
    return dry_run_plan(case, runtime, 4)


# -- pyxis: the squashfs of a source image, imported once -------------------------------------
def test_pyxis_imports_a_source_image_once_with_enroot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kit's import of the built image (a stand-in enroot that records its argv and
    writes the file: enroot is not packaged in Debian), reused by later repeats; without
    enroot on the head, the repeat fails before any step with the two fixes."""
    image = SourceImage("pytorch-examples", "src-pytorch-examples",
                        "dlperf/src-pytorch-examples:0123456789abcdef")  # fmt: skip
    monkeypatch.setattr(
        SourceImage, "of", classmethod(lambda cls, source, image_choice="pinned": image)
    )
    monkeypatch.setattr(SourceImage, "built", lambda self: (self.tag, "docker"))
    runtime = SlurmRuntime(config=SlurmConfig(container="pyxis"))
    platform = runtime.platform
    target = tmp_path / "enroot" / "src-pytorch-examples-0123456789abcdef.sqsh"
    monkeypatch.setattr(type(platform), "squashfs", lambda self, image: target)
    plan = plans(runtime, SPECS["pytorch-examples"])[0]
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    with pytest.raises(Failure, match=r"enroot, which is not on this host: run `enroot import "
                       rf"--output {target} dockerd://{image.tag}` .* or set "
                       r"slurm.image.pytorch-examples"):  # fmt: skip
        platform.import_source_image(plan)
    folder = tmp_path / "bin"
    folder.mkdir()
    calls = tmp_path / "calls"
    (folder / "enroot").write_text(f'#!/bin/sh\necho "$*" >> {calls}\necho squashfs > "$3"\n')
    (folder / "enroot").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    facts = platform.import_source_image(plan)
    assert facts["squashfs"] == str(target) and facts["image"] == image.tag
    assert target.read_text() == "squashfs\n"
    assert calls.read_text().startswith(f"import --output {target.parent}/.{target.name}.")
    assert calls.read_text().endswith(f" dockerd://{image.tag}\n")
    assert platform.import_source_image(plan) == {"image": image.tag, "squashfs": str(target)}
    assert len(calls.read_text().splitlines()) == 1  # once per image
    # Named in the cluster file: nothing to import.
    named = SlurmRuntime(config=SlurmConfig(container="pyxis", image={"pytorch-examples": "x"}))
    assert named.platform.import_source_image(plan) == {}
    # No container to make once per job: each step makes its own from the squashfs.
    allocation = Allocation("1", ["n1"], ["10.0.0.1"], "p", 1, owned=False)
    assert platform.prepare(plan, allocation) == {"image": image.tag, "squashfs": str(target)}
    assert allocation.containers == set()
