"""Runtimes are built from their registry by name, with clear errors for what cannot be built."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.frontend.cli import main
from driver.registry import UnknownPlugin
from driver.runtimes.base import RuntimeConfigError, make_runtime
from driver.runtimes.local import LocalRuntime
from driver.runtimes.ssh.runtime import DockerRuntime, ProcessRuntime


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


def test_each_runtime_is_a_transport_with_a_container_platform(tmp_path: Path) -> None:
    """The container platform answers what a node's process sees, the same questions under
    either transport: the interpreter (the image's, or None: the host's), where the kit's code
    is, whether an upstream source's own image can run."""
    import sys

    from driver.cluster.slurm import SlurmConfig
    from driver.frameworks.base import REPO_ROOT
    from driver.runtimes.containers import ContainerPlatform
    from driver.runtimes.slurm.runtime import SlurmRuntime

    inventory = tmp_path / "cluster.yaml"
    inventory.write_text(
        "cluster: c\ndefaults: {python: /opt/py/bin/python3, scratch_dir: /scratch/k}\n"
        "nodes:\n  - {name: n0, address: 127.0.0.2, ssh: {port: 2222}}\n"
    )
    docker, process = make_runtime("docker", inventory=inventory), ProcessRuntime(inventory)
    oci = {"oci": {"default": "x"}}  # an OCI image only where the OCI platform reads it
    slurm = {
        mode: SlurmRuntime(config=SlurmConfig(container=mode, oci_image=oci.get(mode, {})))
        for mode in ("none", "pyxis", "oci")
    }
    found = {
        "docker": docker.platform, "process": process.platform,
        **{f"slurm {mode}": runtime.platform for mode, runtime in slurm.items()},
    }  # fmt: skip
    assert all(isinstance(platform, ContainerPlatform) for platform in found.values())
    assert {where: platform.name for where, platform in found.items()} == {
        "docker": "docker", "process": "none",
        "slurm none": "none", "slurm pyxis": "pyxis", "slurm oci": "oci",
    }  # fmt: skip
    assert {where: platform.python("calibration") for where, platform in found.items()} == {
        "docker": "python3", "process": None,
        "slurm none": None, "slurm pyxis": "python3", "slurm oci": "python3",
    }  # fmt: skip
    # The runtime's interpreter: the platform's, else the host's as the transport knows it.
    assert docker.python("calibration") == "python3"
    assert process.python("calibration") == "/opt/py/bin/python3"
    assert slurm["none"].python("calibration") == sys.executable
    assert slurm["pyxis"].python("calibration") == slurm["oci"].python("calibration") == "python3"
    # The kit's code: mounted at /dlperf in docker, at its own path elsewhere.
    assert docker.workdir() == "/dlperf"
    assert process.workdir().startswith("/scratch/k/")
    assert {runtime.workdir() for runtime in slurm.values()} == {str(REPO_ROOT)}
    # The container platforms run an upstream source's own image (docker, pyxis, Slurm OCI);
    # without a container there is no image to run a source in.
    runs_sources = [where for where, platform in found.items() if platform.runs_sources]
    assert runs_sources == ["docker", "slurm pyxis", "slurm oci"]
    for runtime in slurm.values():
        runtime.close()


def cluster_file(tmp_path: Path, container: str | None, **extra: str) -> Path:
    """examples/inventory-4n32g.yaml (4 nodes x 8 GPUs) with a top-level ``container:``."""
    from driver.frameworks.base import REPO_ROOT

    text = (REPO_ROOT / "examples" / "inventory-4n32g.yaml").read_text()
    head = f"container: {container}\n" if container else ""
    path = tmp_path / "cluster.yaml"
    path.write_text(head + "".join(f"{key}: {value}\n" for key, value in extra.items()) + text)
    return path


@pytest.mark.parametrize(
    ("runtime", "container", "platform"),
    [("ssh", None, "none"), ("ssh", "podman", "podman"), ("ssh", "apptainer", "apptainer"),
     ("ssh", "docker", "docker"), ("docker", None, "docker"), ("process", None, "none"),
     ("docker", "docker", "docker")],
)  # fmt: skip
def test_one_container_setting_picks_the_platform_over_ssh(
    tmp_path: Path, runtime: str, container: str | None, platform: str
) -> None:
    built = make_runtime(runtime, inventory=cluster_file(tmp_path, container))
    assert built.platform.name == platform and "ssh" in built.platform.transports


@pytest.mark.parametrize(
    ("runtime", "container", "refusal"),
    [
        ("ssh", "pyxis", "container: the pyxis platform does not run over ssh (it runs under "
                         "slurm); over ssh use one of apptainer, docker, none, podman"),
        ("ssh", "oci", "the oci platform does not run over ssh"),
        ("ssh", "dockr", "container: 'dockr' is not a container platform; under ssh: apptainer, "
                         "docker, none, podman"),
        ("process", "docker", "container: 'docker', but --runtime process runs none: use "
                              "--runtime ssh"),
        ("slurm", "docker", "slurm.container: the docker platform does not run over slurm (it "
                            "runs under ssh, local); over slurm use one of apptainer, none, oci, "
                            "pyxis"),
        ("slurm", "podman", "the podman platform does not run over slurm"),
    ],
)  # fmt: skip
def test_a_platform_the_transport_cannot_run_is_refused_before_anything_starts(
    tmp_path: Path, runtime: str, container: str, refusal: str
) -> None:
    if runtime == "slurm":
        path = tmp_path / "cluster.yaml"
        path.write_text(f"slurm:\n  container: {container}\n")
    else:
        path = cluster_file(tmp_path, container)
    with pytest.raises(RuntimeConfigError) as refused:
        make_runtime(runtime, inventory=path)
    assert str(refused.value).startswith(f"{path}: ") and refusal in str(refused.value)


def test_a_platform_implements_the_interface_of_each_transport_it_runs_under() -> None:
    """The transport-neutral core is every platform's; the SSH life cycle and the Slurm step's
    parts are the interfaces of those transports, implemented only by the platforms that run
    there (no hook of another transport inherited to raise), and they are its transports."""
    import inspect

    from driver.runtimes.containers import PLATFORMS, _load
    from driver.runtimes.local_platform import LocalPlatform
    from driver.runtimes.slurm.platform import SlurmPlatform
    from driver.runtimes.ssh.platform import SshPlatform

    _load()
    found = {name: PLATFORMS.get(name) for name in PLATFORMS.names()}
    assert {name: platform.transports for name, platform in found.items()} == {
        "apptainer": ("ssh", "slurm", "local"), "docker": ("ssh", "local"),
        "none": ("ssh", "slurm", "local"), "oci": ("slurm",), "podman": ("ssh", "local"),
        "pyxis": ("slurm",),
    }  # fmt: skip
    # What a node does over SSH is the SSH platforms' to say: abstract there, so a platform
    # that forgot one cannot be made, and the Slurm-only platforms have none of them.
    assert {"sweep", "create", "start_command", "stop"} <= SshPlatform.__abstractmethods__
    assert {"host_command", "remove_leftovers"} <= LocalPlatform.__abstractmethods__
    for name, platform in found.items():
        assert not inspect.isabstract(platform), name
        assert hasattr(platform, "sweep") == ("ssh" in platform.transports), name
        assert hasattr(platform, "srun_flags") == ("slurm" in platform.transports), name
        assert issubclass(platform, SlurmPlatform) == ("slurm" in platform.transports), name
        assert hasattr(platform, "host_command") == ("local" in platform.transports), name
        assert issubclass(platform, LocalPlatform) == ("local" in platform.transports), name


def test_apptainer_over_ssh_renders_every_node_command_for_4n32g(tmp_path: Path) -> None:
    """Each of the 4 nodes runs ``apptainer exec`` as its process group: the image from
    container.image, --nv for its GPUs, the kit's code and the data folder bound at their own
    paths, the framework's launcher inside with the node's rank; every value one shell word."""
    import shlex

    from driver.core.plan import dry_run_plan
    from driver.model.case import Case, Topology

    path = cluster_file(tmp_path, "apptainer")
    path.write_text(
        path.read_text().replace("ulimits:", "image: {default: /shared/pt.sif}, ulimits:")
    )
    runtime = make_runtime("ssh", inventory=path)
    case = Case(
        model="resnet50", framework="pytorch", topology=Topology.parse("4n32g"), batch_size=128,
        precision="amp", dataset="synthetic", warmup_steps=20, measured_steps=100,
        total_steps=120, repeats=7,
    )  # fmt: skip
    lines = runtime.describe(dry_run_plan(case, runtime, 128))
    assert len(lines) == 4
    for rank, line in enumerate(lines):
        target, _, command = line.partition(" $ ")
        assert target == f"[gpu0{rank + 1}] bench@10.0.0.1{rank + 1}:22"
        words = shlex.split(command)
        start = words.index("apptainer")
        code = words[words.index("--pwd", start) + 1]
        assert code.startswith("/scratch/dlperf/")
        assert words[start : start + 12] == [
            "apptainer", "exec", "--nv", "--bind", f"{code}:{code}:ro", "--bind",
            "/data:/data:ro", "--pwd", code, "/shared/pt.sif", "python3", "-m",
        ]  # fmt: skip
        assert f"--node-rank={rank}" in words and f"PYTHONPATH={code}" in words
        assert "--nproc-per-node=8" in words
