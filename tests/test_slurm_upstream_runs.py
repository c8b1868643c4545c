"""Upstream sources run for real under Slurm, on the 2-node test cluster (Debian's slurmctld and
slurmd 22.05 in namespaces, runc under slurmstepd for Slurm's OCI containers), with the sources
that run on CPU, each through the whole kit: case -> the source's node command (its ``sh -c``
wrapper, unchanged) -> the slurm runtime -> the source's parser -> the record.

* ``pytorch-examples`` (2 nodes x 1 process, torchrun on each node) and ``paddle-models``
  (ResNet-50, ``paddle.distributed.launch``, 1 trainer) in Slurm's OCI containers, from a CPU
  stand-in of the source's image: the source's pinned files (from the repository snapshot) at
  the folder its image holds them in (``dir`` of source.yaml), over the kit's CPU images
  instead of the GPU base (pytorch-examples: the PyTorch CPU image and torchvision 0.28.0;
  paddle-models: Python 3.7 and paddlepaddle 1.8.5, the release of the GPU image). Their
  argv is the template's with the CPU changes ``capture_real.py`` beside their fixtures
  describes (no ``--gpu``, gloo, ``--use_gpu False``); everything else is the kit's path.
* ``tensorflow-models-pypi`` (its release from PyPI, BERT) with ``container: none``: its
  environment ``.venvs/tensorflow-models``, which the nodes see on the shared file system.
* A Horovod source's ranks as Slurm tasks (``tasks: device``, the ``srun --mpi=pmix`` path with
  ``mpi: none``: Debian's Slurm here has no libpmix), through the stand-in pyxis srun, with a
  stand-in for the program mpirun would start.

Under pyxis the sources' lines are rendered in ``test_slurm_upstream.py``; the real pyxis and
enroot (built by .ci/setup-system.sh) run the kit's own scripts in ``test_slurm_pyxis.py``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from driver.cluster.slurm import SlurmConfig
from driver.core.runner import run_cases
from driver.images.oci import slurm_oci_conf
from driver.model.case import Case, Topology
from driver.model.results import Session
from driver.plugins import load_all
from driver.runtimes.containers.source_image import SourceImage
from driver.runtimes.slurm.runtime import SlurmRuntime
from driver.sources.base import SOURCES
from driver.sources.spec import FlagBlock
from driver.sources.upstream import SPECS, UpstreamSource
from tests.conftest import require_real

if TYPE_CHECKING:  # imported by pytest_plugins first, so pytest rewrites its asserts
    from tests.slurm_fixtures import SlurmCluster

pytest_plugins = ["tests.slurm_fixtures"]

load_all()
MIRRORS = Path("/work/.mirror")  # read-only snapshots of the upstream repositories
FIXTURES = Path(__file__).parent / "fixtures" / "upstream"
PYTHON37 = Path("/root/.pyenv/versions/3.7.16")  # paddlepaddle 1.8.5 wheels: Python <= 3.8


@pytest.fixture
def cluster_env(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> SlurmCluster:
    """This process's Slurm clients point at the test cluster, outside any allocation; its
    oci.conf calls runc (slurmstepd reads it at every step)."""
    for key in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    (slurm_cluster.root / "oci.conf").write_text(slurm_oci_conf("runc"))
    yield slurm_cluster
    (slurm_cluster.root / "oci.conf").unlink(missing_ok=True)
    assert slurm_cluster.drained() == [], "a job was left in the queue"


@pytest.fixture(scope="module")
def oci_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("oci-cache")


def snapshot(repository: str) -> Path:
    path = MIRRORS / repository / "repo"
    if not path.is_dir():
        pytest.skip(f"no snapshot of {repository} at {path}: the pinned files come from it")
    return path


def git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", f"--git-dir={repo}", *args], capture_output=True,
                          check=True).stdout  # fmt: skip


def capture_module(source: str):  # noqa: ANN201 - the fixture's capture_real module
    """The data makers of ``fixtures/upstream/<source>/capture_real.py`` (how the real CPU
    logs were made), loaded from its file."""
    path = FIXTURES / source / "capture_real.py"
    spec = importlib.util.spec_from_file_location(f"capture_real_{source.replace('-', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def stand_in_image(name: str, base: str, dockerfile: str, inputs: list[str], context: Path) -> str:
    """A CPU stand-in of a source's image, built from ``context`` (host networking, as the
    kit's builds) once per inputs: its tag names the hash of the Dockerfile, the base image
    and ``inputs`` (what identifies the files put in the context)."""
    key = hashlib.sha256("\n".join([dockerfile, base, *inputs]).encode()).hexdigest()[:16]
    tag = f"dlperf-test/{name}:{key}"
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0:
        return tag
    (context / "Dockerfile").write_text(dockerfile)
    built = subprocess.run(
        ["docker", "build", "--network", "host", "--build-arg", f"BASE={base}",
         "--label", "dlperf.test=slurm-upstream", "-t", tag, str(context)],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    if built.returncode != 0:  # e.g. no PyPI or Debian mirror reachable from the build
        require_real(f"the stand-in image {tag} was not built: {built.stderr[-2000:]}")
    return tag


def on_cpu(
    monkeypatch: pytest.MonkeyPatch, source: str, model: str, argv: list[str], flags: list[str]
) -> None:
    """The source with ``model``'s argv template swapped for its CPU form (flags: one block
    always passed); every other fact of source.yaml kept (folder, logging, step offset...)."""
    spec = SPECS[source]
    launch = spec.launches[model].model_copy(
        update={"argv": argv, "flags": [FlagBlock(args=flags)]}
    )
    cpu = spec.model_copy(update={"launches": {**spec.launches, model: launch}})
    monkeypatch.setitem(SOURCES._entries, source, functools.partial(UpstreamSource, cpu))


def run_one(case: Case, runtime: SlurmRuntime, root: Path):  # noqa: ANN201 - (record, folder)
    session = Session.open(root / "session")
    summary = run_cases([case], session, runtime, printer=print)
    ((_case, record, folder),) = list(session.records(include_failed=True))
    logs = {p.name: p.read_text(errors="replace")[-3000:] for p in sorted(folder.glob("*.log"))}
    assert summary.ok and record.ok, f"{record.detail}\n{logs}"
    return record, folder


def assert_ran_on_the_nodes(record, folder: Path, nodes: list[str]) -> None:  # noqa: ANN001
    """Each node's log opens with its run header and its own host line (the node's hostname
    inside the container, which shares the node's)."""
    assert record.runtime == "slurm" and record.extra["slurm"]["nodes"][: len(nodes)] == nodes
    for index, node in enumerate(nodes):
        lines = (folder / f"node{index}.log").read_text().splitlines()
        header = next(i for i, line in enumerate(lines) if line.startswith("DLPERF-UPSTREAM "))
        assert (
            lines[header + 1].startswith("DLPERF-HOST ")
            and f'"hostname": "{node}"' in (lines[header + 1])
        )


# -- pytorch/examples in Slurm's OCI containers -----------------------------------------------
@pytest.fixture(scope="module")
def pytorch_examples_image(pytorch_cpu_image: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    repo = snapshot("pytorch+examples")
    launch = SPECS["pytorch-examples"].launches["resnet50"]
    context = tmp_path_factory.mktemp("pe-context")
    (context / "main.py").write_bytes(git(repo, "show", f"{launch.commit}:imagenet/main.py"))
    # The PyPI torchvision wheel is built for CUDA torch: its two op schemas declared first
    # (the shim capture_real.py uses), from a .pth file (Debian's sitecustomize comes first).
    shutil.copy(FIXTURES / "pytorch-examples" / "torchvision_shim" / "sitecustomize.py",
                context / "dlperf_torchvision_shim.py")  # fmt: skip
    wheel = "torchvision-0.28.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    got = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
         "torchvision==0.28.0", "-d", str(context)], capture_output=True, text=True,
    )  # fmt: skip
    if got.returncode != 0 or not (context / wheel).is_file():
        require_real(f"torchvision 0.28.0 cannot be downloaded here: {got.stderr[-500:]}")
    site = "/opt/venv/lib/python3.11/site-packages"
    dockerfile = f"""\
ARG BASE
FROM ${{BASE}}
COPY {wheel} /tmp/
RUN /opt/venv/bin/pip install --no-index --no-deps /tmp/{wheel} && rm /tmp/{wheel}
COPY dlperf_torchvision_shim.py {site}/
RUN echo "import dlperf_torchvision_shim" > {site}/dlperf_torchvision_shim.pth
COPY main.py {launch.directory}/main.py
WORKDIR /workspace/src
"""
    blob = git(repo, "rev-parse", f"{launch.commit}:imagenet/main.py").decode().strip()
    shim = hashlib.sha256((context / "dlperf_torchvision_shim.py").read_bytes()).hexdigest()
    return stand_in_image("src-pytorch-examples-cpu", pytorch_cpu_image, dockerfile,
                          [blob, wheel, shim], context)  # fmt: skip


def test_pytorch_examples_two_nodes_in_slurm_oci_containers(
    cluster_env: SlurmCluster, pytorch_examples_image: str, oci_cache: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """imagenet/main.py at the pin, unchanged, 2 nodes x 1 process: torchrun on each node in
    its runc container (the rendezvous at n1's address over gloo), the source's image named by
    ``slurm.oci_image.pytorch-examples``; its folder writable for the repeat (main.py saves
    checkpoint.pth.tar there after the epoch), the cached image root untouched."""
    on_cpu(
        monkeypatch, "pytorch-examples", "resnet50",
        ["torchrun", "--nnodes", "{nodes}", "--node_rank", "{node_rank}", "--nproc_per_node",
         "{procs}", "--master_addr", "{master_addr}", "--master_port", "{master_port}",
         "--tee", "3", "--no-python", "sh", "-c", 'exec python main.py "$@"', "main.py",
         "-a", "resnet50", "--epochs", "1", "-p", "1", "-j", "{options[workers]}",
         "--dist-url", "env://", "--dist-backend", "gloo"],
        ["-b", "{batch}", "{data_dir}"],  # on CPU main.py does not divide -b by GPUs
    )  # fmt: skip
    world, batch, warmup, measured = 2, 2, 2, 4
    data = tmp_path / "data"
    make = capture_module("pytorch-examples").make_image_folder
    make(data / "train", world * batch * (warmup + measured + 1))  # step i + 1 ends batch i
    make(data / "val", world * batch)
    case = Case(
        model="resnet50", framework="pytorch", topology=Topology(2, 1), batch_size=batch,
        precision="fp32", dataset="real", data_dir=str(data), source="pytorch-examples",
        options={"workers": 0}, warmup_steps=warmup, measured_steps=measured,
        total_steps=warmup + measured, repeats=1, timeout_s=600, profile="test",
    )  # fmt: skip
    config = SlurmConfig(
        time_limit="15", container="oci", oci_cache=str(oci_cache),
        oci_image={"pytorch-examples": pytorch_examples_image}, mounts=[f"{data}:{data}:ro"],
    )  # fmt: skip
    runtime = SlurmRuntime(config=config, printer=print)
    try:
        record, folder = run_one(case, runtime, tmp_path)
        facts = record.extra["slurm"]
        bundle = Path(facts["oci"]["bundle"])
        launch = SPECS["pytorch-examples"].launches["resnet50"]
        written = bundle / "writable" / "0" / "checkpoint.pth.tar"
        assert facts["oci"]["writable"] == [launch.directory, "/root"] and written.is_file()
        source_root = Path(facts["oci"]["source"]) / "rootfs" / launch.directory.lstrip("/")
        assert not (source_root / "checkpoint.pth.tar").exists()
    finally:
        runtime.close()
    assert facts["container"] == "oci" and facts["oci"]["image"] == pytorch_examples_image
    assert record.parser == "pytorch-examples"
    assert record.measurement.samples == world * batch * measured and record.throughput > 0
    assert_ran_on_the_nodes(record, folder, ["n1", "n2"])
    assert "[default0]:" in (folder / "node1.log").read_text()  # torchrun --tee on node 2
    assert not list(oci_cache.glob("session-*")), "a session's bundle was left behind"


# -- PaddlePaddle/models in Slurm's OCI containers --------------------------------------------
@pytest.fixture(scope="module")
def paddle_models_image(cpu_python_image: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    repo = snapshot("PaddlePaddle+models")
    if not (PYTHON37 / "bin" / "python3.7").is_file():
        require_real(f"no Python 3.7 at {PYTHON37} (paddlepaddle 1.8.5 has no newer wheel)")
    spec = SPECS["paddle-models"]
    tree = "PaddleCV/image_classification"
    context = tmp_path_factory.mktemp("pm-context")
    (context / "code").mkdir()
    archive = git(repo, "archive", f"{spec.commit}:{tree}")
    subprocess.run(["tar", "-x", "-C", str(context / "code")], input=archive, check=True)
    # The interpreter alone (its site-packages stays here); the image's venv gets the packages.
    (context / "python3.7").mkdir()
    subprocess.run(
        ["sh", "-c", "tar --exclude='./lib/python3.7/site-packages/*' -cf - . | tar -xf - -C "
         '"$0"', str(context / "python3.7")], check=True, cwd=PYTHON37,
    )  # fmt: skip
    ca = Path(os.environ.get("DLPERF_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt"))
    shutil.copy(ca, context / "ca.crt")
    launch = spec.launches["resnet50"]
    # paddlepaddle 1.8.5 as PaddleCV's CPU run used it (protobuf 3.20.3: 4.x refuses its
    # generated code), OpenCV headless (no X libraries in the image) and glib for it.
    dockerfile = f"""\
ARG BASE
FROM ${{BASE}}
COPY python3.7/ {PYTHON37}/
COPY ca.crt /tmp/ca.crt
RUN set -eu; export PIP_CERT=/tmp/ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1; \\
    {PYTHON37}/bin/python3.7 -m venv /opt/py37; \\
    /opt/py37/bin/pip install --no-cache-dir paddlepaddle==1.8.5 protobuf==3.20.3; \\
    /opt/py37/bin/pip uninstall -y opencv-python; \\
    /opt/py37/bin/pip install --no-cache-dir opencv-python-headless==4.2.0.34; \\
    rm /tmp/ca.crt
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends libglib2.0-0 \\
 && rm -rf /var/lib/apt/lists/*
ENV PATH=/opt/py37/bin:/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
COPY code/ {launch.directory}/
WORKDIR /workspace/src
"""
    tree_id = git(repo, "rev-parse", f"{spec.commit}:{tree}").decode().strip()
    return stand_in_image("src-paddle-models-cpu", cpu_python_image, dockerfile,
                          [tree_id, str(PYTHON37)], context)  # fmt: skip


def test_paddle_models_in_slurm_oci_containers_from_the_sources_image(
    cluster_env: SlurmCluster, paddle_models_image: str, oci_cache: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """PaddleCV's train.py at the pin, unchanged, under its own launcher in a runc container on
    n1. No slurm.oci_* entry names an image: the runtime takes the source's own image, as
    `dlperf images build src-paddle-models` makes it (here the CPU stand-in stands for that
    build: its base, the NGC-era Paddle GPU image, has no digest resolved here), exports it
    into a bundle, and the image's Python 3.7 (its PATH) runs the node command."""
    stand_in = SourceImage("paddle-models", "src-paddle-models", paddle_models_image)
    monkeypatch.setattr(
        SourceImage, "of", classmethod(lambda cls, source, choice="pinned": stand_in)
    )
    on_cpu(
        monkeypatch, "paddle-models", "resnet50",
        ["env", "CPU_NUM=1", "python", "-m", "paddle.distributed.launch",
         "--cluster_node_ips", "{hosts}", "--node_ip", "{node_addr}", "--started_port",
         "{master_port}", "--selected_gpus", "{gpus}", "--log_dir", "/tmp/dlperf/paddle-log",
         "train.py", "--use_gpu", "False", "--model", "ResNet50", "--batch_size", "{batch}",
         "--data_dir", "{data_dir}", "--num_epochs", "1", "--max_iter", "{steps}",
         "--print_step", "1", "--lr_strategy", "cosine_decay", "--validate", "False"],
        [],  # the reader divides --batch_size by CPU_NUM (1) on CPU: the trainer's batch
    )  # fmt: skip
    batch, warmup, measured = 2, 4, 8
    data = tmp_path / "data"
    capture_module("paddle-models").make_image_list(data, batch * (warmup + measured + 1))
    case = Case(
        model="resnet50", framework="paddle", topology=Topology(1, 1), batch_size=batch,
        precision="fp32", dataset="real", data_dir=str(data), source="paddle-models",
        options={"dali": False}, warmup_steps=warmup, measured_steps=measured,
        total_steps=warmup + measured, repeats=1, timeout_s=600, profile="test",
    )  # fmt: skip
    config = SlurmConfig(time_limit="15", container="oci", oci_cache=str(oci_cache),
                         mounts=[f"{data}:{data}:ro"])  # fmt: skip
    runtime = SlurmRuntime(config=config, printer=print)
    try:
        record, folder = run_one(case, runtime, tmp_path)
    finally:
        runtime.close()
    facts = record.extra["slurm"]
    assert facts["container"] == "oci" and facts["oci"]["image"] == paddle_models_image
    # Its own folder and root's home writable (import paddle makes ~/.cache); the stand-in
    # holds ResNet-50's folder only, the build both models'.
    directory = SPECS["paddle-models"].launches["resnet50"].directory
    assert facts["oci"]["writable"] == [directory, "/root"]
    assert record.parser == "paddle" and record.measurement.samples == batch * measured
    text = (folder / "node0.log").read_text()
    assert "[Pass 0, train batch 11]" in text  # workerlog.0, printed after the run
    assert "start trainer proc:['/opt/py37/bin/python'" in text  # the image's interpreter
    assert_ran_on_the_nodes(record, folder, ["n1"])


# -- tensorflow/models from PyPI without a container ------------------------------------------
def test_tensorflow_models_pypi_on_a_node_without_a_container(
    cluster_env: SlurmCluster, tmp_path: Path
) -> None:
    """The release's BERT pre-training (tiny) on n1, from .venvs/tensorflow-models on the
    shared file system: the one source that has no image runs with ``container: none``."""
    from driver.sources.pypi import ensure_source_env

    load_all()
    source = SOURCES.get("tensorflow-models-pypi")()
    try:
        environment = ensure_source_env(source, log=lambda _line: None)
    except Exception as error:  # noqa: BLE001 - any install failure: "no release here"
        require_real(f"cannot create .venvs/tensorflow-models from PyPI: {error}")
        raise
    batch, warmup, measured = 4, 10, 20
    case = Case(
        model="bert", framework="tensorflow", topology=Topology(1, 1), batch_size=batch,
        precision="fp32", dataset="synthetic", source="tensorflow-models-pypi",
        warmup_steps=warmup, measured_steps=measured, total_steps=warmup + measured,
        repeats=1, timeout_s=600, profile="cpu-smoke",
    )  # fmt: skip
    runtime = SlurmRuntime(config=SlurmConfig(time_limit="15", container="none"), printer=print)
    try:
        record, folder = run_one(case, runtime, tmp_path)
    finally:
        runtime.close()
    assert record.extra["slurm"]["container"] == "none"
    assert str(environment) in record.commands[0].argv[2]
    assert record.parser == "tf-timehistory" and record.measurement.samples == batch * measured
    assert "Train Step: 30/30" in (folder / "node0.log").read_text()
    assert_ran_on_the_nodes(record, folder, ["n1"])


# -- a Horovod source's ranks as Slurm tasks (the pmix path, but for PMIx) ------------------------
def test_horovod_ranks_start_as_slurm_tasks_through_the_pyxis_path(
    cluster_env: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ngc-mxnet with ``tasks: device``, 2 nodes x 2 tasks, everything real but PMIx and the
    image: Debian's Slurm here has no libpmix (its mpi_pmix plug-in cannot start), so the step
    runs with ``mpi: none``, and pyxis is the stand-in srun of test_slurm_runtime (it records
    the container flags and runs the step on the node). The program mpirun would start is a
    stand-in printing the source's rate lines; the task scripts, Slurm's task ids, the tags,
    one log per node and the source's parser are the kit's."""
    from tests.test_slurm_runtime import PYXIS_STAND_IN

    stand_in = tmp_path / "bin" / "srun"
    stand_in.parent.mkdir()
    stand_in.write_text(PYXIS_STAND_IN)
    stand_in.chmod(0o755)
    monkeypatch.setenv("REAL_SRUN", str(shutil.which("srun")))
    monkeypatch.setenv("PYXIS_LOG", str(tmp_path / "pyxis.log"))
    monkeypatch.setenv("PATH", f"{stand_in.parent}:{os.environ['PATH']}")
    spec = SPECS["ngc-mxnet"]
    folder = tmp_path / "src" / "model"  # the image's folders, on the node here
    folder.mkdir(parents=True)
    lines = (
        'for a in 0 20 40 60 80 100; do printf "INFO:root:Epoch[0] Batch [%d-%d]\\t'
        'Speed: %d.00 samples/sec\\tLR: 0.1\\n" $a $((a+19)) $((300+a)) >&2; done'
    )
    launch = spec.launches["resnet50"].model_copy(update={
        "directory": str(folder), "flags": [],
        "argv": ["mpirun", "--allow-run-as-root", "--tag-output", "-np", "{world}", "-H",
                 "{hosts_slots}", "-x", "NCCL_DEBUG=WARN", "sh", "-c", lines],
    })  # fmt: skip
    cpu = spec.model_copy(
        update={"workdir": str(tmp_path / "src"), "launches": {"resnet50": launch}}
    )
    monkeypatch.setitem(SOURCES._entries, "ngc-mxnet", functools.partial(UpstreamSource, cpu))
    case = Case(
        model="resnet50", framework="mxnet", topology=Topology(2, 2), batch_size=32,
        precision="fp32", dataset="synthetic", source="ngc-mxnet", warmup_steps=20,
        measured_steps=100, total_steps=120, repeats=1, timeout_s=120, profile="test",
    )  # fmt: skip
    image = "registry.example#src-ngc-mxnet@sha256:" + "0" * 64
    config = SlurmConfig(time_limit="10", container="pyxis", tasks="device", mpi="none",
                         image={"ngc-mxnet": image})  # fmt: skip
    runtime = SlurmRuntime(config=config, printer=print)
    try:
        record, folder_of_repeat = run_one(case, runtime, tmp_path)
    finally:
        runtime.close()
    srun = record.extra["slurm"]["srun"]
    assert "--ntasks-per-node=2" in srun and "--mpi=none" in srun and "mpirun" not in srun
    (call,) = (tmp_path / "pyxis.log").read_text().splitlines()  # no container made per job
    assert call.startswith(f" --container-image={image} --container-writable --container-mounts=")
    seconds = sum(20 / (300.0 + a) for a in range(20, 120, 20))  # the window's rate lines
    assert record.parser == "mxnet-speed"
    assert record.throughput == pytest.approx(100 / seconds)
    assert_ran_on_the_nodes(record, folder_of_repeat, ["n1", "n2"])
    for node in range(2):
        text = (folder_of_repeat / f"node{node}.log").read_text()
        tags = {line[: line.index("]") + 1] for line in text.splitlines() if line.startswith("[1,")}
        assert tags == {f"[1,{2 * node}]", f"[1,{2 * node + 1}]"}  # Slurm's task ids
        assert text.count("DLPERF-UPSTREAM ") == 1
