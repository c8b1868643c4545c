"""Upstream sources: one class, one YAML file of data per source (the "Source" column of DLPerf).

Each upstream source lives in its framework's folder as ``source.yaml`` beside the Dockerfile that
clones it at its pinned commit and the case matrix of its suites:

* ``NVIDIADeepLearningExamples/<Framework>/source.yaml`` (NGC PyTorch, TF1, MXNet)
* ``<Framework>/upstream/source.yaml`` (each framework's official benchmark repository)

The file (read and checked by ``driver/sources/spec.py``) pins the code, names its image and
log parser, and gives per model the upstream launcher and flags as an argv template plus flag
blocks chosen by the case; :class:`UpstreamSource` fills them in for each node of a case. Ranks
and hosts come from the driver's :class:`NodeRank`, so nobody edits a per-node flag.

Every node command is ``sh -c <wrapper> dlperf-upstream <header> <upstream argv...>``: the
wrapper prints the run header (``driver.parsers._runheader``), enters the model's folder, runs the
upstream command unchanged and, where the source writes its step log to a file (DLLogger JSON),
prints that file after the run. With ``launch: mpi-head`` (Horovod sources) node 0 runs
``mpirun`` for every rank over SSH into the other nodes' containers; those nodes run an sshd and
wait for the job's ``orted`` to come and go.
"""

from __future__ import annotations

import functools
import math
import shlex
from pathlib import Path
from typing import Any

from driver.launchers.base import NodeRank
from driver.model.case import Case
from driver.model.hardware import GPU_QUERY
from driver.parsers._runheader import HEADER_MARK, RunHeader, header_line
from driver.sources.base import (
    HOST_PROBE,
    SOURCES,
    data_and_precision_problems,
    model_launch,
    parallel_degree_problems,
    parallel_degrees,
    refuse_unsupported,
    run_header,
)
from driver.sources.spec import ModelLaunch, SourceSpec, load_specs

WORKER_SCRIPT = (
    'printf "%s\\n" "$1"; ' + HOST_PROBE + '; /usr/sbin/sshd -p {port} || exit 1; n=0; '
    "until pgrep -x orted >/dev/null || pgrep -x prted >/dev/null; do n=$((n+1)); "
    'if [ "$n" -ge 900 ]; then echo "dlperf: no MPI job reached this node" >&2; exit 1; fi; '
    "sleep 1; done; while pgrep -x orted >/dev/null || pgrep -x prted >/dev/null; do sleep 1; "
    "done"
)


# Reads GPU_QUERY's rows ("index, UUID"), prints "index=UUID" of each GPU the case names (the
# awk variable want: "0,1,..."), or "missing ..." and exits 1 where the node lists one of them not
# (absent, or a line nvidia-smi printed instead of its row: a GPU it cannot read).
_PICK_GPUS = (
    "awk -F', ' -v want=\"$want\" '$1 ~ /^[0-9]+$/ && $2 ~ /^GPU-/ {uuid[$1] = $2} "
    'END {n = split(want, w, ","); for (i = 1; i <= n; i++) '
    'if (w[i] in uuid) used = used " " w[i] "=" uuid[w[i]]; else missing = missing " " w[i]; '
    'if (missing != "") {print "missing" missing; exit 1} print substr(used, 2)}\''
)


def launch_facts(case: Case, nodes: int, procs: int, launch: ModelLaunch) -> dict[str, Any]:
    """What a flag block's or a refusal's ``when`` is matched against (CONDITION_KEYS and the
    options): one place, for the choice of a launch and for its argv."""
    return {
        "precision": case.precision,
        "dataset": case.dataset,
        "xla": case.xla,
        "distributed": nodes * procs > 1,
        "multinode": nodes > 1,
        "procs": procs,
        **launch.options,
        **case.options,
    }


def device_script(procs: int) -> str:
    """The node's devices narrowed to the case's, then the pre-flight check that it has them.

    Upstream scripts count the GPUs they see (PaddleCV's reader divides --batch_size by them,
    Paddle BERT and MirroredStrategy use them all, TensorFlow maps memory on each): a 1n1g case
    in a container given all 8 GPUs of its node must see one. CUDA_VISIBLE_DEVICES lists GPUs
    0..procs-1 (in nvidia-smi's PCI order, so the host line names the same ones). The check
    compares lists, not counts: each of the case's GPU indices must be a row of nvidia-smi's
    index/UUID list (a count took the line nvidia-smi prints for a GPU it cannot read for a
    GPU); a node that lacks one stops here, before the upstream command, naming the missing and
    the listed ones and the fix, and a node that has them names their UUIDs on stderr (the
    node's log). Without nvidia-smi (a CPU node) nothing is checked.
    """
    ids = ",".join(str(i) for i in range(procs))
    need = (
        f'printf "dlperf: pre-flight: the case needs GPU(s) {ids} (CUDA_VISIBLE_DEVICES={ids}); '
        "this node lists: %s (%s): give the container those GPUs (inventory container.gpus; "
        'under Slurm: slurm.gpus_per_node) or repair the node\\n" '
        '"$(printf "%s" "$listed" | tr "\\n" ";")" "$used" >&2; exit 2'
    )
    return (
        f"export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={ids}; "
        "if command -v nvidia-smi >/dev/null 2>&1; then "
        f"listed=$({GPU_QUERY} 2>&1); want={ids}; "
        f'if ! used=$(printf "%s\\n" "$listed" | {_PICK_GPUS}); then {need}; fi; '
        'echo "dlperf: the case\'s GPUs: $used" >&2; fi'
    )


def wrapper_script(directory: str, collect: str | None, procs: int | None = None) -> str:
    """The node's shell program: the devices (where ``procs`` is given), header, cd, the upstream
    command, then its step-log file."""
    parts = [device_script(procs)] if procs else []
    parts += ['printf "%s\\n" "$1"', HOST_PROBE, "shift", f"cd {shlex.quote(directory)} || exit 1"]
    if collect:
        quoted = shlex.quote(collect)
        parts.append(f"rm -f {quoted} && mkdir -p {shlex.quote(str(Path(collect).parent))}")
    parts += ['"$@"', "rc=$?"]
    if collect:
        parts.append(f"if [ -f {quoted} ]; then cat {quoted}; fi")
    parts.append("exit $rc")
    return "; ".join(parts)


# mpirun's options in the mpi-head templates, by how many values follow each: what a rank's own
# argv leaves out when the scheduler starts every rank itself (``srun --mpi=pmix``).
MPIRUN_OPTIONS = {
    "--allow-run-as-root": 0, "--tag-output": 0, "-np": 1, "-n": 1, "-H": 1, "--host": 1,
    "-bind-to": 1, "--bind-to": 1, "-map-by": 1, "--map-by": 1, "-x": 1, "-mca": 2, "--mca": 2,
}  # fmt: skip


def rank_program(argv: list[str], where: str) -> tuple[list[str], dict[str, str]]:
    """An ``mpirun ... program`` argv split into the program every rank runs and the variables
    ``-x NAME=VALUE`` sets for them (``-x NAME`` passes the launcher's own: a task has it
    already). An option not in :data:`MPIRUN_OPTIONS` is a ValueError naming ``where``."""
    if not argv or Path(argv[0]).name != "mpirun":
        raise ValueError(f"{where}: the command does not start with mpirun: {shlex.join(argv)}")
    env: dict[str, str] = {}
    index = 1
    while index < len(argv) and argv[index].startswith("-"):
        option = argv[index]
        if option not in MPIRUN_OPTIONS:
            raise ValueError(
                f"{where}: mpirun option {option!r} is not known to the kit (MPIRUN_OPTIONS in "
                "driver/sources/upstream.py): add it with the number of values it takes"
            )
        values = argv[index + 1 : index + 1 + MPIRUN_OPTIONS[option]]
        if option == "-x" and values and "=" in values[0]:
            name, _, value = values[0].partition("=")
            env[name] = value
        index += 1 + MPIRUN_OPTIONS[option]
    if index >= len(argv):
        raise ValueError(f"{where}: mpirun starts no program: {shlex.join(argv)}")
    return argv[index:], env


# A task's lines carry its global rank as mpirun --tag-output would write them ("[1,R]<stdout>:"),
# so the parsers read a scheduler-started run's logs as they read mpirun's.
_TASK_TAG = 'tag="[1,${SLURM_PROCID:?}]<stdout>:"'
# The run's output through the tag, one write per line (sed -u: the node's tasks append to one
# log), keeping the program's exit code (POSIX sh has no pipefail).
_TAGGED_RUN = (
    '{ rc=$( { { "$@"; echo $? >&3; } 2>&1 | sed -u "s/^/$tag/" >&4; } 3>&1 ); } 4>&1'
)
# Tasks other than the node's first wait (up to 60 s) until it has written the run header and
# the host line (one printf), which must open the node's log, their stdout (a file: the step
# script appends every task's output to the node's log).
_WAIT_FOR_HEADER = (
    'if [ "${SLURM_LOCALID:?}" != 0 ] && [ -f /proc/self/fd/1 ]; then n=0; '
    f'until grep -q "^{HEADER_MARK}" /proc/self/fd/1 || [ "$n" -ge 600 ]; '
    "do n=$((n+1)); sleep 0.1; done; fi"
)


def task_script(directory: str, collect: str | None, procs: int) -> str:
    """The shell program of one task when the scheduler starts every rank (``srun --mpi=pmix``,
    one task per GPU): :func:`wrapper_script`'s steps for a node's tasks sharing one log. The
    node's first task (``SLURM_LOCALID`` 0) prints the run header and the host line, the others
    wait for them; every task narrows and checks the GPUs; each task's output is tagged with its
    rank (``SLURM_PROCID``); global rank 0 prints the step-log file after its run."""
    parts = [_WAIT_FOR_HEADER, device_script(procs), _TASK_TAG]
    parts.append(
        'if [ "$SLURM_LOCALID" = 0 ]; then host=$(' + HOST_PROBE + '); '
        'if [ -n "$host" ]; then printf "%s\\n%s\\n" "$1" "$host"; '
        'else printf "%s\\n" "$1"; fi; fi'
    )
    parts += ["shift", f"cd {shlex.quote(directory)} || exit 1"]
    first = '[ "$SLURM_PROCID" = 0 ]'
    if collect:
        quoted = shlex.quote(collect)
        folder = shlex.quote(str(Path(collect).parent))
        parts.append(f"if {first}; then rm -f {quoted} && mkdir -p {folder}; fi")
    parts.append(_TAGGED_RUN)
    if collect:
        parts.append(f'if {first} && [ -f {quoted} ]; then sed -u "" {quoted}; fi')
    parts.append("exit $rc")
    return "; ".join(parts)


class UpstreamSource:
    """A pinned upstream source; ``SOURCES.get(name)()`` builds one from its spec."""

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.framework = spec.framework
        self.models = tuple(spec.launches)
        self.repository = spec.repository
        self.commit = spec.commit
        self.release = spec.release  # the PyPI wheel, where pinned to a release instead
        self.image = spec.image
        self.parser = spec.parser
        self.workdir = spec.workdir

    def launch_for(self, case: Case) -> ModelLaunch:
        launch = model_launch(self.spec.launches, case, self.name, self.models)
        problems = data_and_precision_problems(case, launch.datasets, launch.precisions)
        if case.xla and not launch.xla:
            problems.append("XLA")
        if case.dataset == "real" and not case.data_dir:
            problems.append("dataset real without data_dir")
        unknown = sorted(set(case.options) - set(launch.options))
        if unknown:
            problems.append(
                f"option(s) {', '.join(unknown)} (options: {', '.join(launch.options) or 'none'})"
            )
        for name, allowed in launch.choices.items():
            value = case.options.get(name, launch.options[name])
            if value not in allowed:
                problems.append(
                    f"option {name} {value!r} (the pinned code knows "
                    f"{', '.join(map(str, allowed))}: models.{case.model}.choices in "
                    f"{self.spec.path})"
                )
        problems += parallel_degree_problems(case)
        refuse_unsupported(case, self.name, problems)
        facts = launch_facts(case, case.topology.nodes, case.topology.devices_per_node, launch)
        for refusal in launch.refused:
            if refusal.matches(facts):
                raise ValueError(
                    f"{case.id}: source {self.name} {case.model} refuses this variant: "
                    f"{refusal.because}"
                )
        return launch

    def header(self, case: Case, rank: NodeRank, batch_size: int) -> RunHeader:
        launch = self.launch_for(case)
        return run_header(self.name, case, rank, batch_size, launch.logging, launch.step_offset)

    def context(self, case: Case, rank: NodeRank, batch_size: int) -> dict[str, Any]:
        launch = self.launch_for(case)
        warmup, measured, total = case.window_for(batch_size)
        for label, steps in (("warm-up", warmup), ("measured", measured)):
            if steps % launch.log_every:
                raise ValueError(
                    f"{case.id}: {label} steps {steps} are not a multiple of the log interval "
                    f"{launch.log_every} of {self.name} {case.model}"
                )
        addrs = list(rank.node_addrs) or [rank.master_addr]
        procs = rank.procs_per_node
        # A step's samples are the batch of every data-parallel replica (launch_for checked
        # that the model-parallel degrees divide the world size).
        replicas = rank.world_size // math.prod(parallel_degrees(case).values())
        return {
            "batch": batch_size,
            "node_batch": batch_size * procs,
            "global_batch": batch_size * replicas,
            "steps": total + launch.extra_steps,
            "run_samples": (total + launch.extra_steps) * batch_size * replicas,
            "warmup": warmup,
            "measured": measured,
            "log_every": launch.log_every,
            "nodes": rank.nodes,
            "node_rank": rank.node_rank,
            "procs": procs,
            "world": rank.world_size,
            "master_addr": rank.master_addr,
            "master_port": rank.master_port,
            "node_addr": addrs[rank.node_rank] if rank.node_rank < len(addrs) else addrs[0],
            "hosts": ",".join(addrs),
            "hosts_slots": ",".join(f"{a}:{procs}" for a in addrs),
            "worker_hosts": ",".join(f"{a}:{rank.master_port}" for a in addrs),
            "gpus": ",".join(str(i) for i in range(procs)),
            "data_dir": case.data_dir or "",
            "ssh_port": self.spec.ssh_port,
            "options": {**launch.options, **case.options},
        }

    def launch_argv(self, case: Case, rank: NodeRank, batch_size: int) -> list[str]:
        """The upstream launcher's argv for this node (what a user would type, filled in)."""
        launch = self.launch_for(case)
        context = self.context(case, rank, batch_size)
        facts = launch_facts(case, rank.nodes, rank.procs_per_node, launch)
        items = list(launch.argv)
        env: list[str] = []
        for block in launch.flags:
            if block.matches(facts):
                items += block.args
                env += [f"{name}={value}" for name, value in block.env.items()]
        if env:  # variables the script reads, for its launcher and every process it starts
            items = ["env", *env, *items]
        return [item.format_map(context) for item in items]

    def command(self, case: Case, rank: NodeRank, batch_size: int) -> list[str]:
        launch = self.launch_for(case)
        header = header_line(self.header(case, rank, batch_size))
        if launch.launch == "mpi-head" and rank.node_rank > 0:
            # The ranks mpirun starts here get node 0's CUDA_VISIBLE_DEVICES (mpirun -x).
            script = device_script(rank.procs_per_node) + "; " + WORKER_SCRIPT.replace(
                "{port}", str(self.spec.ssh_port)
            )
            return ["sh", "-c", script, "dlperf-upstream", header]
        script = wrapper_script(launch.directory, launch.collect, rank.procs_per_node)
        return [
            "sh", "-c", script, "dlperf-upstream", header,
            *self.launch_argv(case, rank, batch_size),
        ]  # fmt: skip


    def task_command(self, case: Case, rank: NodeRank, batch_size: int) -> list[str]:
        """What each task of node ``rank`` runs when the scheduler starts every rank itself
        (``srun --mpi=pmix``, one task per GPU) instead of node 0's mpirun over SSH: the
        program mpirun would start, with the variables its ``-x NAME=VALUE`` sets, in
        :func:`task_script`. Only for ``launch: mpi-head`` models (a ValueError otherwise: a
        per-node source starts its own launcher on every node)."""
        launch = self.launch_for(case)
        if launch.launch != "mpi-head":
            raise ValueError(
                f"{case.id}: source {self.name} {case.model} starts its own launcher on every "
                "node (launch: per-node), not one process per GPU"
            )
        where = f"{self.spec.path}: models.{case.model}.argv"
        program, env = rank_program(self.launch_argv(case, rank, batch_size), where)
        if env:
            program = ["env", *(f"{key}={value}" for key, value in env.items()), *program]
        header = header_line(self.header(case, rank, batch_size))
        script = task_script(launch.directory, launch.collect, rank.procs_per_node)
        return ["sh", "-c", script, "dlperf-upstream", header, *program]


SPECS: dict[str, SourceSpec] = {}
for _spec in load_specs():
    SPECS[_spec.name] = _spec
    SOURCES.add(_spec.name, functools.partial(UpstreamSource, _spec))
