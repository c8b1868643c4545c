"""The exact ``sbatch`` and ``srun`` command lines of the Slurm runtime (``--dry-run`` prints them).

One job per session (``sbatch`` of :data:`HOLDER_SCRIPT`, which only holds the nodes), one
``srun`` job step per repeat into it. A step's tasks run :func:`step_script`: a POSIX ``sh``
``case`` on ``SLURM_NODEID`` that execs that node's command from the plan, so every node gets
its own rank environment and argv through Slurm alone (no shared file, no Python needed before
the command itself: it works the same inside a pyxis container).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from driver.cluster.slurm import SlurmConfig
from driver.runtimes.plan import NodeCommand

# The batch script of the session's job: it holds the allocation while the kit runs one srun
# step per repeat into it from the submitting host (srun --jobid), and it ends when the kit
# cancels the job (end of session, Ctrl-C, SIGTERM) or at the job's time limit.
HOLDER_SCRIPT = """\
#!/bin/sh
# dlperf: holds this allocation for the session's job steps (one srun step per repeat).
echo "dlperf-slurm: job $SLURM_JOB_ID holds $SLURM_JOB_NODELIST"
exec sleep infinity
"""


def gpu_flags(config: SlurmConfig, count: int | None = None) -> list[str]:
    """The GPUs per node a job (``slurm.gpus_per_node``) or a step (``count``: its case's, at
    most the job's) asks for; none where the cluster file asks for none."""
    if not config.gpus_per_node:
        return []
    count = count or config.gpus_per_node
    if config.gpu_request == "gres":
        return [f"--gres=gpu:{count}"]
    return [f"--gpus-per-node={count}"]


def sbatch_argv(config: SlurmConfig, nodes: int, job_name: str, output: str) -> list[str]:
    """``sbatch`` of the session's job (the script comes on stdin: no file to share)."""
    argv = ["sbatch", "--parsable", f"--job-name={job_name}", f"--nodes={nodes}"]
    argv += ["--ntasks-per-node=1", f"--time={config.time_limit}", f"--output={output}"]
    for option in ("partition", "account", "qos", "constraint", "reservation"):
        value = getattr(config, option)
        if value:
            argv.append(f"--{option}={value}")
    argv += gpu_flags(config)
    if config.exclusive:
        argv.append("--exclusive")
    return [*argv, *config.extra_sbatch_args]


def srun_argv(
    config: SlurmConfig,
    job_id: str,
    nodes: Sequence[str],
    step_name: str,
    tasks_per_node: int,
    cpus_per_task: int | str,
    container_flags: Sequence[str] = (),
    gpus_per_node: int | None = None,
) -> list[str]:
    """One job step on the first ``len(nodes)`` nodes of the job, output labelled per task,
    asking for ``gpus_per_node`` GPUs on each (the case's; None: the job's): Slurm then gives
    the step exactly the GPUs the node command's CUDA_VISIBLE_DEVICES=0..P-1 names."""
    argv = [
        "srun", f"--jobid={job_id}", f"--job-name={step_name}",
        f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}",
        f"--ntasks-per-node={tasks_per_node}",
        "--label", "--kill-on-bad-exit=1",
    ]  # fmt: skip
    if isinstance(cpus_per_task, str) or cpus_per_task > 0:  # a str: a dry run's placeholder
        argv.append(f"--cpus-per-task={cpus_per_task}")
    argv += gpu_flags(config, gpus_per_node)
    argv.append(f"--mpi={config.mpi}" if config.tasks == "device" else "--mpi=none")
    return [*argv, *container_flags]


# Per task in device mode: the rank environment every framework script reads (as driver.spawn
# and torchrun set it), from the step's own task ids.
DEVICE_RANK_ENV = (
    'RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" WORLD_SIZE="$SLURM_NTASKS" '
    'LOCAL_WORLD_SIZE="$SLURM_NTASKS_PER_NODE"'
)


def step_script(
    commands: Sequence[NodeCommand],
    logs: Sequence[str],
    device_tasks: bool = False,
    guard: str = "",
    by_hostname: bool = False,
) -> str:
    """The ``sh`` program every task of a step runs: its node's command, by ``SLURM_NODEID``,
    appending stdout and stderr to that node's log in the session folder.

    The log is written on the node, not carried by srun's stdio: srun forwards a task's output
    in messages of at most 1 KiB, so the long JSON lines of the processes a launcher starts on
    one node would interleave mid-line (a broken record). Appending to one file keeps each
    write whole, exactly as the local runtime's shared log does. The session folder must
    therefore be on a file system the nodes share, like the kit's checkout and venvs.
    ``guard``: a first line that must pass (the OCI platform's). ``by_hostname``: each node's
    command picked by the node's short hostname (its Slurm name, ``command.node``) instead of
    ``SLURM_NODEID``: Slurm 22.05 writes an OCI container's environment before it sets the
    per-task variables, so none of SLURM_NODEID, SLURM_PROCID or SLURMD_NODENAME reaches it."""
    lines = [guard] if guard else []
    if by_hostname:
        lines.append('node="$(hostname)"; case "${node%%.*}" in')
    else:
        lines.append('case "$SLURM_NODEID" in')
    for index, (command, log) in enumerate(zip(commands, logs, strict=True)):
        key = shlex.quote(command.node) if by_hostname else str(index)
        cd = f"cd {shlex.quote(command.workdir)} && " if command.workdir else ""
        env = shlex.join(["env", *(f"{k}={v}" for k, v in sorted(command.env.items()))])
        if device_tasks:
            env = f"{env} {DEVICE_RANK_ENV}"
        redirect = f">> {shlex.quote(log)} 2>&1"
        lines.append(f"{key}) {cd}exec {env} {shlex.join(command.argv)} {redirect} ;;")
    if by_hostname:
        lines.append(
            "*) echo \"dlperf-slurm: no command for host $node (the kit picks a node's command "
            "by its hostname inside an OCI container: Slurm's NodeName must be the short "
            'hostname)" >&2; exit 2 ;;'
        )
    else:
        lines.append('*) echo "dlperf-slurm: no command for node $SLURM_NODEID" >&2; exit 2 ;;')
    lines.append("esac")
    return "\n".join(lines)


def device_argv(argv: list[str], python: str, script: str) -> list[str]:
    """A node command without its launcher: the interpreter and the script's own argv, for one
    task per device (Slurm starts the processes and gives each its rank). Anything before the
    interpreter (the page-cache drop wrapper) stays."""
    if script not in argv or python not in argv:
        return argv
    start, first = argv.index(python), argv.index(script)
    return [*argv[:start], python, *argv[first:]] if start < first else argv
