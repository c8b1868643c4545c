"""The Slurm runtime's command lines and its ``slurm:`` section (no cluster needed).

pyxis is not packaged in Debian: its path is covered here by the exact lines a 4 nodes x 8 GPUs
run sends, and on the test cluster by a real srun with the container flags (a stand-in srun).
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from driver.cluster.slurm import (
    SlurmConfig,
    SlurmConfigError,
    load_slurm_config,
    time_limit_seconds,
)
from driver.runtimes.containers.oci import oci_guard
from driver.runtimes.containers.pyxis import Container
from driver.runtimes.plan import NodeCommand
from driver.runtimes.slurm.render import (
    HOLDER_SCRIPT,
    device_argv,
    sbatch_argv,
    srun_argv,
    step_script,
)
from driver.runtimes.slurm.runtime import SlurmRuntime

DIGEST = "sha256:" + "ab" * 32
GPU_CLUSTER = SlurmConfig(
    partition="gpu",
    account="perf",
    qos="high",
    time_limit="02:00:00",
    constraint="h100",
    reservation="bench",
    gpus_per_node=8,
    container="pyxis",
    image={"pytorch": f"nvcr.io#nvidia/pytorch@{DIGEST}"},
    mounts=["/data:/data:ro", "/scratch/me:/scratch"],
    extra_sbatch_args=["--comment=dlperf"],
)


def test_sbatch_line_for_four_gpu_nodes() -> None:
    argv = sbatch_argv(GPU_CLUSTER, 4, "dlperf-s-0a1b2c3d", "/r/s/slurm/job-%j.out")
    assert argv == [
        "sbatch", "--parsable", "--job-name=dlperf-s-0a1b2c3d", "--nodes=4",
        "--ntasks-per-node=1", "--time=02:00:00", "--output=/r/s/slurm/job-%j.out",
        "--partition=gpu", "--account=perf", "--qos=high", "--constraint=h100",
        "--reservation=bench", "--gpus-per-node=8", "--exclusive", "--comment=dlperf",
    ]  # fmt: skip
    gres = GPU_CLUSTER.model_copy(update={"gpu_request": "gres", "exclusive": False})
    assert sbatch_argv(gres, 1, "j", "o")[-2:] == ["--gres=gpu:8", "--comment=dlperf"]


def test_srun_line_with_pyxis_for_four_nodes() -> None:
    container = Container(
        image=f"nvcr.io#nvidia/pytorch@{DIGEST}",
        name="dlperf-pytorch",
        mounts=("/kit:/kit:ro", "/r/s:/r/s", "/data:/data:ro"),
        workdir="/kit",
    )
    nodes = ["g01", "g02", "g03", "g04"]
    argv = srun_argv(GPU_CLUSTER, "4242", nodes, "dlperf-case-r1", 1, 96, container.flags())
    assert shlex.join(argv) == (
        "srun --jobid=4242 --job-name=dlperf-case-r1 --nodes=4 --nodelist=g01,g02,g03,g04 "
        "--ntasks-per-node=1 --label --kill-on-bad-exit=1 --cpus-per-task=96 "
        "--gpus-per-node=8 --mpi=none "
        f"'--container-image=nvcr.io#nvidia/pytorch@{DIGEST}' --container-name=dlperf-pytorch "
        "--container-mounts=/kit:/kit:ro,/r/s:/r/s,/data:/data:ro --container-workdir=/kit"
    )
    device = GPU_CLUSTER.model_copy(update={"tasks": "device"})
    argv = srun_argv(device, "4242", nodes, "s", 8, 12)
    assert "--ntasks-per-node=8" in argv and "--cpus-per-task=12" in argv
    assert "--mpi=pmix" in argv


def test_step_script_picks_the_nodes_command_and_quotes_everything(tmp_path: Path) -> None:
    commands = [
        NodeCommand("a", ["python", "-c", "print('node', 0)"], {"X": "it's"}, "/kit dir"),
        NodeCommand("b", ["python", "-c", "print('node', 1)"], {"X": "$HOME;rm"}, "/kit dir"),
    ]
    script = step_script(commands, ["/r/node0.log", "/r s/node1.log"])
    assert script.splitlines()[1] == (
        "0) cd '/kit dir' && exec env 'X=it'\"'\"'s' python -c 'print('\"'\"'node'\"'\"', 0)' "
        ">> /r/node0.log 2>&1 ;;"
    )
    assert script.splitlines()[2].endswith(" >> '/r s/node1.log' 2>&1 ;;")
    # Run it as each node would: its own command, values verbatim, output in its own log.
    probe = ["sh", "-c", 'printf "%s|%s\\n" "$X" "$(pwd)"']
    logs = [str(tmp_path / "node0.log"), str(tmp_path / "node 1.log")]
    (tmp_path / "kit dir").mkdir()
    script = step_script(
        [NodeCommand("a", probe, {"X": "it's"}, str(tmp_path / "kit dir")),
         NodeCommand("b", probe, {"X": "$HOME;rm"}, str(tmp_path))], logs,
    )  # fmt: skip
    for node in ("0", "1"):
        result = subprocess.run(
            ["sh", "-c", script], env={"SLURM_NODEID": node, "PATH": "/usr/bin:/bin"},
            capture_output=True, text=True,
        )  # fmt: skip
        assert result.returncode == 0 and result.stdout == "", result.stderr
    assert Path(logs[0]).read_text() == f"it's|{tmp_path / 'kit dir'}\n"
    assert Path(logs[1]).read_text() == f"$HOME;rm|{tmp_path}\n"
    missing = subprocess.run(
        ["sh", "-c", script], env={"SLURM_NODEID": "7"}, capture_output=True, text=True
    )
    assert missing.returncode == 2 and "no command for node 7" in missing.stderr


def test_srun_line_with_slurms_own_oci_container() -> None:
    config = SlurmConfig(container="oci", oci_bundle={"default": "/shared/b"})
    runtime = SlurmRuntime(config=config)
    flags = runtime.platform.srun_flags(four_by_eight_plan(runtime), Path("/r/s s"))
    argv = srun_argv(config, "7", ["n1", "n2"], "dlperf-x", 1, 0, flags)
    bundle = runtime.platform.session_bundle("pytorch", Path("/r/s s"))
    assert argv[-1] == f"--container={bundle}"  # one argv item: no shell splits it
    runtime.close()
    assert not any(arg.startswith("--container-") for arg in argv)  # no pyxis flag


def test_step_script_in_an_oci_container_picks_by_hostname(tmp_path: Path) -> None:
    """Inside a Slurm 22.05 OCI container no per-task SLURM_* variable exists: the node's
    command is picked by its short hostname (Slurm's node name), values still quoted."""
    probe = ["sh", "-c", 'printf "%s\\n" "$X"']
    logs = [str(tmp_path / "node0.log"), str(tmp_path / "node1.log")]
    commands = [NodeCommand("n1", probe, {"X": "one"}, str(tmp_path)),
                NodeCommand("n2", probe, {"X": "$two'"}, str(tmp_path))]  # fmt: skip
    script = step_script(commands, logs, by_hostname=True)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "hostname").write_text('#!/bin/sh\necho "$FAKE_HOST"\n')
    (fake / "hostname").chmod(0o755)
    for host in ("n1.cluster.example", "n2"):
        result = subprocess.run(
            ["sh", "-c", script], env={"FAKE_HOST": host, "PATH": f"{fake}:/usr/bin:/bin"},
            capture_output=True, text=True,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
    assert Path(logs[0]).read_text() == "one\n" and Path(logs[1]).read_text() == "$two'\n"
    other = subprocess.run(
        ["sh", "-c", script], env={"FAKE_HOST": "n3", "PATH": f"{fake}:/usr/bin:/bin"},
        capture_output=True, text=True,
    )  # fmt: skip
    assert other.returncode == 2 and "no command for host n3" in other.stderr
    # The guard: a step Slurm ran on the host (no oci.conf there) stops before any command.
    guarded = step_script(commands, logs, guard=oci_guard("dlperf-no-such-marker"),
                          by_hostname=True)  # fmt: skip
    host = subprocess.run(
        ["sh", "-c", guarded], env={"FAKE_HOST": "n1", "SLURM_NODEID": "0",
                                    "PATH": f"{fake}:/usr/bin:/bin"},
        capture_output=True, text=True,
    )  # fmt: skip
    assert host.returncode == 3 and "ran the step outside the OCI bundle" in host.stderr
    assert Path(logs[0]).read_text() == "one\n"  # nothing ran


def test_device_tasks_drop_the_launcher_keep_the_cache_drop() -> None:
    argv = ["sh", "-c", "drop", "dlperf-drop-caches", "/v/python", "-m", "torch.distributed.run",
            "--nnodes=4", "PyTorch/benchmark/train.py", "--model", "resnet50"]  # fmt: skip
    assert device_argv(argv, "/v/python", "PyTorch/benchmark/train.py") == [
        "sh", "-c", "drop", "dlperf-drop-caches", "/v/python", "PyTorch/benchmark/train.py",
        "--model", "resnet50",
    ]  # fmt: skip
    script = step_script([NodeCommand("a", ["python", "t.py"])], ["/l"], device_tasks=True)
    assert 'RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID"' in script


def test_holder_script_only_holds() -> None:
    assert HOLDER_SCRIPT.startswith("#!/bin/sh\n") and "exec sleep infinity" in HOLDER_SCRIPT


def test_pyxis_image_comes_from_images_lock_by_its_tag() -> None:
    """The pinned tag in enroot's form, no digest (enroot 3.x refuses one; the digest is
    checked against the registry before submitting: tests/test_enroot_references.py)."""
    from driver.images.lock import load_lock

    runtime = SlurmRuntime(config=SlurmConfig(container="pyxis"))
    image = runtime.platform.image_for("pytorch")
    assert load_lock().get("nvcr.io/nvidia/pytorch:25.04-py3").resolved
    assert image == "nvcr.io#nvidia/pytorch:25.04-py3"
    override = SlurmRuntime(config=GPU_CLUSTER).platform.image_for("pytorch")
    assert override == f"nvcr.io#nvidia/pytorch@{DIGEST}"


# -- the slurm: section ------------------------------------------------------------------------
def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return path


def test_section_loads_and_defaults(tmp_path: Path) -> None:
    config = load_slurm_config(
        write(tmp_path, "nodes: []\nslurm:\n  partition: gpu\n  gpus_per_node: 8\n")
    )
    assert config.partition == "gpu" and config.gpus_per_node == 8
    assert config.container == "auto" and config.tasks == "node" and config.exclusive
    assert load_slurm_config(write(tmp_path, "nodes: []\n")) == SlurmConfig()
    assert load_slurm_config(None) == SlurmConfig()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("  partiton: gpu\n", "slurm.partiton: unknown key (did you mean 'partition'?)"),
        ("  time_limit: soon\n", "slurm.time_limit: must be a Slurm time limit"),
        ('  time_limit: "04:00:00\\n"\n', "slurm.time_limit: must be a Slurm time limit"),
        ("  partition: gpu a\n", "slurm.partition: must be one word"),
        ("  mounts: [data]\n", "slurm.mounts[0]: must be SRC:DST[:FLAGS]"),
        ("  container: Docker\n", "slurm.container: must be auto or a container platform's"),
        ("  extra_sbatch_args: [exclusive]\n", "must be an option: write each as --name=value"),
        ("  extra_sbatch_args: [--nodes=1]\n", "slurm.extra_sbatch_args: '--nodes=1' sets --nodes"),
        ("  time_limit: '0'\n", "slurm.time_limit: '0' means no time limit to Slurm"),
        ("  gpus_per_node: -1\n", "slurm.gpus_per_node: must be a GPU count 0-1024"),
        ("  gpus_per_node: .nan\n", "slurm.gpus_per_node"),
        ("  exclusive: true\n  exclusive: false\n", "key 'exclusive' is given twice"),
    ],
)
def test_bad_section_names_file_field_and_fix(tmp_path: Path, body: str, message: str) -> None:
    path = write(tmp_path, "slurm:\n" + body)
    with pytest.raises(SlurmConfigError) as error:
        load_slurm_config(path)
    assert str(error.value).startswith(f"{path}: ")  # a field path, or the line of a key
    assert message in str(error.value)


def test_time_limit_formats() -> None:
    for good in ("90", "30:00", "04:00:00", "1-00:00:00", "2-12", "0:30", "0-0:1"):
        assert SlurmConfig(time_limit=good).time_limit == good
    for bad in ("1h", "04:00:00:00", ""):
        with pytest.raises(ValueError, match="must be a Slurm time limit"):
            SlurmConfig(time_limit=bad)
    # Slurm reads 0 (in any form), -1 and UNLIMITED as no limit: the session's job, which only
    # holds its nodes, would hold them forever if the kit could not cancel it.
    for unlimited in ("0", "00:00", "0:0:0", "0-0", "0-00:00:00", "UNLIMITED", "infinite", "-1"):
        with pytest.raises(ValueError, match=r"means no time limit.*finite.*\"04:00:00\""):
            SlurmConfig(time_limit=unlimited)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 5400), ("30:15", 1815), ("04:00:00", 14400), ("48:00:00", 172800),
     ("1-00:00:00", 86400), ("2-12", 216000), ("1-12:30", 131400), ("0-0:1", 60),
     ("0:30", 30), ("525600", 365 * 86400)],
)  # fmt: skip
def test_time_limit_reads_as_slurm_reads_it(text: str, seconds: int) -> None:
    assert time_limit_seconds(text) == seconds
    assert SlurmConfig(time_limit=text).time_limit == text


@pytest.mark.parametrize(
    ("text", "why"),
    [("99:99:99", "minutes above 59"), ("4:00:60", "seconds above 59"),
     ("10:75", "seconds above 59"), ("1-24", "24 hours after a day count"),
     ("1-12:60", "minutes above 59"), ("366-00", "over 365 days"),
     ("9000:00:00", "over 365 days"), ("525601", "over 365 days")],
)  # fmt: skip
def test_a_time_limit_slurm_would_carry_over_is_refused(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        SlurmConfig(time_limit=text)


def test_framework_keys_mount_flags_and_the_oci_cache_are_checked() -> None:
    config = SlurmConfig(
        image={"pytorch": "nvcr.io#nvidia/pytorch:24.01-py3", "default": "x"},
        oci_image={"calibration": "dlperf/cpu"}, oci_bundle={"default": "/shared/b"},
        python={"pytorch": "/shared/venv/bin/python"}, oci_cache="/shared/dlperf-oci",
        mounts=["/data:/data:ro+nosuid", "/scratch:/scratch"],
    )  # fmt: skip
    assert config.mounts == ["/data:/data:ro+nosuid", "/scratch:/scratch"]
    for field, value, why in (
        ("image", {"pytorhc": "x"}, "'pytorhc' is not allowed \\(did you mean 'pytorch'\\?\\)"),
        ("oci_bundle", {"bundle": "/b"}, "'bundle' is not allowed"),
        ("python", {"default": "/x"}, "'default' is not allowed"),  # python is per framework
        ("mounts", ["/a:/b:ro,nosuid"], "flags joined by '\\+'"),
        ("mounts", ["/a:/b:ro+rw"], "ro or rw, not both"),
        ("mounts", ["/a:/b:rx"], "mount flag 'rx' is not one pyxis passes on"),
        ("oci_cache", "/", "a system folder"),
        ("oci_cache", "/etc/oci", "inside /etc"),
        ("oci_cache", "//usr", "inside /usr"),
        ("oci_cache", "/shared/../etc", "a '..' in the path"),
    ):
        with pytest.raises(ValueError, match=why):
            SlurmConfig(**{field: value})


def test_extra_sbatch_args_cannot_override_an_option_the_kit_sets() -> None:
    # Every option sbatch_argv writes, in every configuration, is refused as an extra argument
    # (sbatch takes the last one: --job-name would hide the job from leftover cleanup, --nodes=1
    # would run a 2-node case on one node), in each spelling sbatch accepts.
    gres = GPU_CLUSTER.model_copy(update={"gpu_request": "gres"})
    written = {
        argument.split("=")[0]
        for config in (GPU_CLUSTER, gres)
        for argument in sbatch_argv(config, 2, "job", "out")[1:]
        if argument not in GPU_CLUSTER.extra_sbatch_args
    }
    assert {"--job-name", "--nodes", "--time", "--output", "--gres"} <= written
    for option in sorted(written):
        for extra in ([f"{option}=x"], [option, "x"], [f"{option[:-1]}=x"]):
            with pytest.raises(ValueError, match=f"sets {option}"):
                SlurmConfig(extra_sbatch_args=extra)
    for short, option in (
        ("-J", "--job-name"),
        ("-N", "--nodes"),
        ("-t", "--time"),
        ("-o", "--output"),
        ("-n", "--ntasks"),
        ("-p", "--partition"),
    ):
        for extra in ([f"{short}2"], [short, "2"], [f"-v{short[1]}2"]):
            with pytest.raises(ValueError, match=f"sets {option} \\({short}\\)"):
                SlurmConfig(extra_sbatch_args=extra)
    # Nor where the job runs, where its errors go, or the environment its steps get.
    for moved, option in ((["--chdir=/tmp"], "--chdir \\(-D\\)"), (["-D", "/x"], "--chdir"),
                          (["-e/tmp/e"], "--error \\(-e\\)"), (["--export=NONE"], "--export,"),
                          (["--get-user-env"], "--get-user-env")):  # fmt: skip
        with pytest.raises(ValueError, match=f"sets {option}"):
            SlurmConfig(extra_sbatch_args=moved)
    for other in (["--wrap=sleep"], ["--array=1-2"], ["--"]):
        with pytest.raises(ValueError, match="slurm.extra_sbatch_args|sets|ends sbatch"):
            SlurmConfig(extra_sbatch_args=other)
    # What the kit does not set stays the user's, as written.
    own = ["--comment=dlperf", "--time-min=30", "--cpus-per-task=32", "-c32", "--mem=0",
           "--exclude=n3", "--nodelist=n1", "--gres-flags=enforce-binding", "--requeue",
           "--mail-type=END", "-v"]  # fmt: skip
    assert SlurmConfig(extra_sbatch_args=own).extra_sbatch_args == own
    assert sbatch_argv(SlurmConfig(extra_sbatch_args=own), 1, "j", "o")[-len(own) :] == own


@pytest.mark.parametrize("folder", ["a,b", "a:b", "x,/etc"])
def test_a_session_folder_pyxis_cannot_mount_is_refused_before_any_job(
    tmp_path: Path, folder: str
) -> None:
    from driver.runtimes.base import RuntimeConfigError

    session = tmp_path / folder / "session"
    pyxis = SlurmRuntime(config=SlurmConfig(container="pyxis"))
    with pytest.raises(RuntimeConfigError) as refused:
        pyxis.clean_leftovers(session)  # where a session starts, before its first job
    assert str(session) in str(refused.value) and "--results" in str(refused.value)
    assert "\n" not in str(refused.value)
    # The mounts themselves are never rendered from such a path either.
    plan = four_by_eight_plan(pyxis)
    with pytest.raises(RuntimeConfigError):
        pyxis.platform.srun_flags(plan, session)
    assert pyxis.platform.srun_flags(plan, tmp_path / "fine" / "session")


# -- describe (--dry-run) of a planned case ---------------------------------------------------
def four_by_eight_plan(runtime: SlurmRuntime):  # noqa: ANN201 - RepeatPlan
    from driver.core.plan import dry_run_plan
    from driver.model.case import Case, Topology

    case = Case(  # 4 nodes x 8 GPUs
        model="resnet50", framework="pytorch", topology=Topology.parse("4n32g"), batch_size=128,
        precision="amp", dataset="synthetic", warmup_steps=20, measured_steps=100,
        total_steps=120, repeats=7,
    )  # fmt: skip
    return dry_run_plan(case, runtime, 128)


def test_describe_four_nodes_eight_gpus_with_pyxis(monkeypatch: pytest.MonkeyPatch) -> None:
    from driver.frameworks.base import REPO_ROOT
    from driver.runtimes.slurm.runtime import Allocation

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    runtime = SlurmRuntime(config=GPU_CLUSTER)
    plan = four_by_eight_plan(runtime)
    lines = runtime.describe(plan)
    session = Path("results/<session>").absolute()
    assert lines[0] == (
        "$ sbatch --parsable --job-name=dlperf-session-"
        + lines[0].split("session-")[1][:8]
        + " --nodes=4 --ntasks-per-node=1 --time=02:00:00 '--output=results/<session>/slurm/"
        "job-%j.out' --partition=gpu --account=perf --qos=high --constraint=h100 "
        "--reservation=bench --gpus-per-node=8 --exclusive --comment=dlperf <<'EOF'"
    )
    assert lines[1:6] == [*HOLDER_SCRIPT.splitlines(), "EOF"]
    image = f"'--container-image=nvcr.io#nvidia/pytorch@{DIGEST}'"
    mounts = (
        f"'--container-mounts={REPO_ROOT}:{REPO_ROOT}:ro,{session}:{session},/data:/data:ro,"
        "/scratch/me:/scratch'"
    )
    nodes = "--nodelist=@slurm-node0@,@slurm-node1@,@slurm-node2@,@slurm-node3@"
    container = f"{image} --container-name=dlperf-pytorch {mounts} --container-workdir={REPO_ROOT}"
    assert lines[7] == (
        f"$ srun '--jobid=<job id>' --job-name=dlperf-container --nodes=4 {nodes} "
        f"--ntasks-per-node=1 {container} true"
    )
    step = lines[8]
    assert step.startswith(
        "$ srun '--jobid=<job id>' --job-name=dlperf-resnet50-pytorch-4n32g-bs128-amp-synthetic-r1"
        f" --nodes=4 {nodes} --ntasks-per-node=1 --label --kill-on-bad-exit=1 "
        # the CPUs a task gets, known once the job runs: a placeholder as the nodes are
        f"--cpus-per-task=@slurm-cpus-per-node/1@ --gpus-per-node=8 --mpi=none {container} sh -c "
    )
    for rank in range(4):
        assert (
            f"\n{rank}) cd {REPO_ROOT} && exec env DLPERF_NNODES=4 "
            "DLPERF_NODE_ADDRS=@slurm-node0@,@slurm-node1@,@slurm-node2@,@slurm-node3@ "
            f"DLPERF_NODE_RANK={rank} DLPERF_NPROC_PER_NODE=8 MASTER_ADDR=@slurm-node0@ "
            f"MASTER_PORT=29500 PYTHONPATH={REPO_ROOT} PYTHONUNBUFFERED=1 python3 -m "
            f"torch.distributed.run --nnodes=4 --node-rank={rank} --nproc-per-node=8 "
            "--master-addr=@slurm-node0@ --master-port=29500 PyTorch/benchmark/train.py "
        ) in step
    # Once the job runs, its nodes replace the placeholders (the head at its NodeAddr).
    runtime.allocation = Allocation(
        job_id="4242", nodes=["g01", "g02", "g03", "g04"],
        addresses=["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"], partition="gpu",
        cpus_per_node=96, owned=False,  # not submitted here: nothing to cancel at exit
    )  # fmt: skip
    lines = runtime.describe(plan)
    assert lines[0].startswith("# once per job") and len(lines) == 3
    assert "--jobid=4242" in lines[2] and "--nodelist=g01,g02,g03,g04" in lines[2]
    assert "--cpus-per-task=96" in lines[2]
    assert "--master-addr=10.0.0.1" in lines[2] and "@slurm-" not in lines[2]


def test_describe_four_nodes_eight_gpus_with_apptainer(monkeypatch: pytest.MonkeyPatch) -> None:
    """apptainer under Slurm: no srun flag; each node's command wrapped in ``apptainer exec``
    with the kit, the session folder and slurm.mounts bound, --nv for the GPUs, the image from
    slurm.image (else the local build made into a .sif once, shown as its own line)."""
    from driver.frameworks.base import REPO_ROOT

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("DLPERF_ENGINE", "docker")  # docker-daemon:// (podman's: its archive)
    config = GPU_CLUSTER.model_copy(
        update={"container": "apptainer", "image": {"pytorch": "/shared/pt.sif"}}
    )
    runtime = SlurmRuntime(config=config)
    plan = four_by_eight_plan(runtime)
    session = Path("results/<session>").absolute()
    commands = runtime._node_commands(plan, None)
    binds = [f"{REPO_ROOT}:{REPO_ROOT}:ro", f"{session}:{session}", "/data:/data:ro",
             "/scratch/me:/scratch"]  # fmt: skip
    wrapper = ["apptainer", "exec", "--nv", *(w for b in binds for w in ("--bind", b)),
               "--pwd", str(REPO_ROOT), "/shared/pt.sif"]  # fmt: skip
    for rank, command in enumerate(commands):  # GPU_CLUSTER's slurm.image.pytorch
        assert command.argv[: len(wrapper)] == wrapper
        assert command.argv[len(wrapper) :][:5] == [
            "python3", "-m", "torch.distributed.run", "--nnodes=4", f"--node-rank={rank}",
        ]  # fmt: skip
    script = runtime._step_script(plan, commands)
    assert script.count(shlex.join(wrapper)) == 4
    lines = runtime.describe(plan)
    step = next(line for line in lines if "--job-name=dlperf-resnet50" in line)
    assert "--container" not in step and "--gpus-per-node=8" in step
    assert not any(line.startswith("# once per") for line in lines)  # the image is given
    # Without slurm.image: the local image made into a .sif once, before the first step.
    built = SlurmRuntime(config=config.model_copy(update={"image": {}}))
    lines = built.describe(four_by_eight_plan(built))
    made = [line for line in lines if line.startswith("$ apptainer build")]
    assert len(made) == 1 and "docker-daemon://dlperf/pytorch-gpu" in made[0]
    sif = made[0].split()[4]
    assert sif.endswith(".sif") and sif in built._node_commands(plan, None)[0].argv


def test_cli_names_a_bad_slurm_section_and_exits_2(tmp_path: Path) -> None:
    import sys

    path = write(tmp_path, "slurm:\n  time_limit: soon\n")
    result = subprocess.run(
        [sys.executable, "-m", "driver.frontend.cli", "selftest", "--runtime", "slurm",
         "--inventory", str(path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert f"error: {path}: slurm.time_limit: must be a Slurm time limit" in result.stderr
    assert "Traceback" not in result.stderr


def test_selftest_without_a_slurm_controller_is_one_line_and_exit_2(tmp_path: Path) -> None:
    import os
    import shutil
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    argv = [sys.executable, "-m", "driver.frontend.cli", "selftest", "--runtime", "slurm"]
    no_client = {**env, "PATH": str(tmp_path)}  # no scontrol on the PATH
    results = [subprocess.run(argv, capture_output=True, text=True, timeout=120, env=no_client)]
    if shutil.which("scontrol"):  # a controller that does not answer (nothing on port 9)
        conf = tmp_path / "slurm.conf"
        conf.write_text("ClusterName=none\nSlurmctldHost=nowhere(127.0.0.1)\nSlurmctldPort=9\n")
        down = {**env, "SLURM_CONF": str(conf)}
        results.append(subprocess.run(argv, capture_output=True, text=True, timeout=120, env=down))
    for result in results:
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
        assert result.stderr.startswith("error: --runtime slurm: no Slurm controller answers (")
        assert "start slurmctld" in result.stderr and "`scontrol ping`" in result.stderr
    assert "scontrol not found" in results[0].stderr


def slurm_dry_run(path: Path, *, gpus: int, batch: int) -> subprocess.CompletedProcess:
    """`dlperf run --runtime slurm --dry-run` of PyTorch ResNet-50 on 2 nodes, in a fresh
    process with no SLURM_ variable of this machine's."""
    import os
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return subprocess.run(
        [sys.executable, "-m", "driver.frontend.cli", "run", "--framework", "pytorch",
         "--model", "resnet50", "--nodes", "2", "--gpus", str(gpus), "--batch", str(batch),
         "--amp", "off", "--runtime", "slurm", "--inventory", str(path), "--dry-run"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip


def test_cli_dry_run_prints_the_job_and_the_steps(tmp_path: Path) -> None:

    path = write(tmp_path, "slurm:\n  partition: gpu\n  gpus_per_node: 8\n  container: none\n")
    result = slurm_dry_run(path, gpus=8, batch=64)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "$ sbatch --parsable --job-name=dlperf-" in out and "--partition=gpu" in out
    assert "exec sleep infinity" in out
    assert "$ srun '--jobid=<job id>'" in out and "--gpus-per-node=8" in out
    assert "--nodelist=@slurm-node0@,@slurm-node1@" in out
    assert "--container-image" not in out  # container: none


def test_cli_dry_run_with_slurms_oci_containers(tmp_path: Path) -> None:
    import json

    bundle = tmp_path / "bundle"
    (bundle / "rootfs" / "usr").mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps({"process": {"env": ["PATH=/img/bin"]}}))
    path = write(tmp_path, f"slurm:\n  container: oci\n  oci_bundle: {{default: {bundle}}}\n"
                           f"  oci_cache: {tmp_path / 'cache'}\n")  # fmt: skip
    result = slurm_dry_run(path, gpus=2, batch=8)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"# once per session: the OCI bundle {tmp_path / 'cache'}/session-" in out
    assert f"(root from the bundle {bundle} (slurm.oci_bundle.default)" in out
    assert f"--container={tmp_path / 'cache'}/session-" in out
    assert "PATH=/img/bin" in out and "--container-image" not in out
    assert not (tmp_path / "cache").exists()  # a dry run makes nothing


def test_python_per_framework_for_nodes_without_containers() -> None:
    from driver.frameworks.base import FRAMEWORKS
    from driver.plugins import load_all

    load_all()
    pytorch = FRAMEWORKS.get("pytorch")
    runtime = SlurmRuntime(
        config=SlurmConfig(container="none", python={"pytorch": "/shared/pt/bin/python"})
    )
    assert runtime.python(pytorch) == "/shared/pt/bin/python"
    assert runtime.environment(pytorch) == {}
    pyxis = SlurmRuntime(config=SlurmConfig(container="pyxis"))
    assert pyxis.python(pytorch) == "python3" and pyxis.environment(pytorch) == {}


def test_clean_leftovers_without_a_controller_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    if not shutil.which("squeue"):
        from tests.conftest import require_real

        require_real("no Slurm client (apt-get install slurm-client; .ci/setup-system.sh)")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=none\nSlurmctldHost=nowhere(127.0.0.1)\nSlurmctldPort=9\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    done = SlurmRuntime(config=SlurmConfig()).clean_leftovers(tmp_path / "session")
    assert len(done) == 1 and done[0].startswith("could not look for leftover Slurm jobs: squeue")


@pytest.mark.parametrize(
    ("data_dir", "mounted"),
    [
        ("/shared/data/imagenet/raw", "/shared/data/imagenet/raw:/shared/data/imagenet/raw:ro"),
        ("/data/imagenet", None),  # slurm.mounts' /data already holds it
        (None, None),
    ],
)
def test_a_cases_data_folder_is_mounted_into_its_pyxis_container(
    tmp_path: Path, data_dir: str | None, mounted: str | None
) -> None:
    """The README's compare recipe passes /shared/data/imagenet/raw to containers that mounted
    /data only: the script found no data. The case's data folder is mounted read-only at its own
    path (apptainer and OCI under Slurm too), unless a slurm.mounts entry holds it; a path pyxis
    would split is refused, naming the case."""
    from dataclasses import replace

    from driver.runtimes.base import RuntimeConfigError

    runtime = SlurmRuntime(config=GPU_CLUSTER)
    plan = four_by_eight_plan(runtime)
    plan = replace(plan, case=replace(plan.case, dataset="real", data_dir=data_dir))
    flags = runtime.platform.srun_flags(plan, tmp_path / "session")
    mounts = next(f for f in flags if f.startswith("--container-mounts=")).split("=", 1)[1]
    entries = mounts.split(",")
    assert "/data:/data:ro" in entries
    if mounted:
        assert entries[-1] == mounted
    else:
        assert not any(e.startswith((data_dir or "@", "/shared")) for e in entries)
    bad = replace(plan, case=replace(plan.case, data_dir="/shared/a,b"))
    with pytest.raises(RuntimeConfigError, match=r"the data folder /shared/a,b holds ','"):
        runtime.platform.srun_flags(bad, tmp_path / "session")


def test_the_clusters_rank_settings_reach_every_rank_and_never_the_kits_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """slurm.env (NCCL, UCX, IB settings) is passed to every rank of every step (and so kept in
    each record's commands); a variable the kit sets for a rank is refused, naming it."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    env = {"NCCL_IB_HCA": "mlx5_0,mlx5_1", "UCX_TLS": "rc,sm", "NCCL_DEBUG": 1}
    runtime = SlurmRuntime(config=GPU_CLUSTER.model_copy(update={"env": {**env,
                                                                         "NCCL_DEBUG": "1"}}))
    plan = four_by_eight_plan(runtime)
    commands = runtime._node_commands(plan, None)
    assert len(commands) == 4
    for command in commands:
        assert {k: command.env[k] for k in env} == {**env, "NCCL_DEBUG": "1"}
        assert command.env["DLPERF_NNODES"] == "4"  # the rank's own, untouched
    step = runtime.describe(plan)[8]
    assert "NCCL_IB_HCA=mlx5_0,mlx5_1" in step and "UCX_TLS=rc,sm" in step
    for name in ("MASTER_PORT", "DLPERF_NODE_RANK", "PYTHONPATH"):
        with pytest.raises(ValueError, match=f"{name}: set by the kit for every rank"):
            SlurmConfig(env={name: "x"})
