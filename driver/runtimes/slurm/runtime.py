"""The Slurm runtime: every repeat is one ``srun`` job step, in the session's own job.

    dlperf run --runtime slurm --inventory cluster.yaml ...   # cluster.yaml: a slurm: section
    salloc -N 4 ... ; dlperf run --runtime slurm ...          # inside an allocation: its nodes

The runtime is the Slurm transport with one container platform; its parts, one idea each: the
session's job (``job.py``: submitted once per session, or the enclosing allocation), one repeat's
step (``step.py``: started, watched, stopped, its verdict read from srun's messages), the container
platform ``slurm.container`` names (``driver/runtimes/containers/``: none, pyxis, Slurm's own OCI
containers, apptainer; a source's image, ``containers.py``), the exact ``sbatch``/``srun`` lines
and the step's script (``render.py``), Slurm's commands (``client.py``) and the cluster file's
``slurm:`` section (``driver/cluster/slurm.py``). This module plans a repeat's step from those
parts and runs it.

**Tasks:** one task per node (``tasks: node``, the default) runs the framework's own launcher
(torchrun, paddle, ...) with the node's rank environment: the step's ``sh`` program picks the
node's command by ``SLURM_NODEID``; the head is the first host of ``scontrol show hostnames``
of the job, at its ``NodeAddr``. ``tasks: device`` runs one task per device with
``--mpi=<mpi>`` (pmix) and the script without its launcher (RANK from ``SLURM_PROCID``).

**Upstream sources** run in their own image (pyxis or Slurm's OCI containers; ``containers.py``
says which image), their node command unchanged. A Horovod source (``launch: mpi-head``) starts
as it does under docker with ``tasks: node`` (node 0's mpirun over SSH into an sshd in each
other node's container), or with ``tasks: device`` every rank as a task of its own
(``srun --mpi=pmix``, the program mpirun would start, ``UpstreamSource.task_command``). Each
step asks for the case's GPUs per node (``--gpus-per-node``/``--gres``), the same GPUs the node
command names in CUDA_VISIBLE_DEVICES=0..P-1.

The session folder must be on a file system the nodes share (each node's command appends to
its log there). A Slurm command that fails (slurmctld unreachable, sbatch refused) is a failed
repeat with its message; Ctrl-C or SIGTERM on the head ends the step and cancels the job.
"""

from __future__ import annotations

import atexit
import re
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from driver.cluster.slurm import SlurmConfig, load_slurm_config
from driver.frameworks.base import FRAMEWORKS, REPO_ROOT
from driver.frameworks.envs import venv_environment, venv_python
from driver.launchers.base import NodeRank
from driver.plugins import load
from driver.runtimes.base import (
    INTERRUPTED_DETAIL,
    RUNTIMES,
    JobLimit,
    NodeOutcome,
    RepeatOutcome,
    Runtime,
    RuntimeConfigError,
    Verdict,
    ctrl_c_held,
    driver_cpu_seconds,
    raise_interrupted,
)
from driver.runtimes.containers import Context, platform_for
from driver.runtimes.plan import NodeCommand
from driver.runtimes.slurm import client
from driver.runtimes.slurm.job import Allocation, Failure, SessionJob, job_name
from driver.runtimes.slurm.platform import SlurmPlatform
from driver.runtimes.slurm.render import (
    HOLDER_SCRIPT,
    device_argv,
    sbatch_argv,
    srun_argv,
    step_script,
)
from driver.runtimes.slurm.step import Step
from driver.sources.base import SOURCES, source_image
from driver.sources.upstream import UpstreamSource

if TYPE_CHECKING:
    from driver.frameworks.base import Framework
    from driver.runtimes.plan import RepeatPlan

PLACEHOLDER = "@slurm-node{index}@"  # a node not known until the session's job runs
# The CPUs a task gets, not known until the job runs either: the job's CPUs per node (scontrol's
# NumCPUs / NumNodes) over the step's tasks per node.
CPUS_PLACEHOLDER = "@slurm-cpus-per-node/{tasks}@"
_PLACEHOLDER = re.compile(r"@slurm-node(\d+)@")


@RUNTIMES.register("slurm")
class SlurmRuntime(Runtime):
    name = "slurm"
    # make_runtime hands it the cluster file (its slurm: section); a file with only that
    # section is enough, also inside an allocation.
    cluster_file = "optional"  # its slurm: section; inside an allocation, defaults do
    # what its jobs write into the session folder (their output, ``slurm/job-<id>.out``) while
    # the run goes on, not through the kit: the run's warrant takes it as the run's
    session_scratch = ("slurm",)

    def __init__(
        self,
        inventory: Path | str | None = None,
        *,
        config: SlurmConfig | None = None,
        printer: Callable[[str], None] | None = None,
        python_override: str | None = None,
    ) -> None:
        self.config = config or load_slurm_config(inventory)
        self.inventory = Path(inventory) if inventory else None
        self.printer = printer or (lambda line: print(line, file=sys.stderr, flush=True))
        self.python_override = python_override
        self.job = SessionJob(lambda line: self.printer(line))
        # Each case's estimated seconds a repeat, where slurm.split_jobs lets the selection
        # take several jobs (set by the run command from the session's estimate).
        self.repeat_seconds: dict[str, float] = {}
        self._platform: SlurmPlatform | None = None
        if self.config.container != "auto":  # refused here, before anything starts
            _ = self.platform
        atexit.register(self.close)

    # -- where and what ------------------------------------------------------------------
    @property
    def allocation(self) -> Allocation | None:
        """The session's job once it runs (or the enclosing one)."""
        return self.job.allocation

    @allocation.setter
    def allocation(self, allocation: Allocation | None) -> None:
        self.job.allocation = allocation

    @property
    def platform(self) -> SlurmPlatform:
        """The container platform ``slurm.container`` names (``auto``: pyxis when this srun
        has it, else none), made once."""
        if self._platform is None:
            mode = self.config.container
            if mode == "auto":
                mode = "pyxis" if client.available() and client.has_pyxis() else "none"
            where = str(self.inventory) if self.inventory else "the slurm: section"
            context = Context(where, slurm=self.config, printer=self.printer)
            self._platform = platform_for(SlurmPlatform, mode, context, "slurm.container")
        return self._platform

    def check_reachable(self) -> None:
        """A Slurm controller answers, else a one-line RuntimeConfigError naming the fix (for a
        command that needs the cluster at once: the selftest has nothing to run without it)."""
        try:
            client.ping()
        except client.SlurmError as error:
            # The last line that says something (scontrol frames a DOWN in rows of '*').
            lines = [line.strip() for line in str(error).splitlines()]
            lines = [line for line in lines if line and not line.startswith("*")]
            raise RuntimeConfigError(
                f"--runtime slurm: no Slurm controller answers ({lines[-1] if lines else error}); "
                "start slurmctld, or run on a host of the cluster (check with `scontrol ping`)"
            ) from None

    def node_addresses(self, count: int) -> list[tuple[str, str]]:
        """The job's first ``count`` nodes once it runs; placeholders before (the session's job
        is submitted by the first repeat, and ``run`` puts the real nodes in)."""
        allocation = self.allocation
        if allocation is None and self.job.inside_allocation:
            allocation = self.allocation = self.job.enclosing()
        if allocation is not None and count <= len(allocation.nodes):
            return list(zip(allocation.nodes[:count], allocation.addresses[:count], strict=True))
        if allocation is not None and not allocation.owned:
            raise ValueError(
                f"the case needs {count} nodes; this allocation (job {allocation.job_id}) has "
                f"{len(allocation.nodes)}: run inside `salloc -N {count}`, or outside any "
                "allocation (the kit then submits its own job)"
            )
        return [(PLACEHOLDER.format(index=i), PLACEHOLDER.format(index=i)) for i in range(count)]

    def python(self, framework: Framework) -> str:
        if self.python_override:
            return self.python_override
        name = getattr(framework, "name", str(framework))
        if name in self.config.python:
            return self.config.python[name]
        image = self.platform.python(name)
        if image:
            return image
        if name == "calibration":
            return sys.executable
        return str(venv_python(framework))

    def environment(self, framework: Framework) -> dict[str, str]:
        name = getattr(framework, "name", str(framework))
        in_image = self.platform.python(name) is not None  # the image's interpreter
        if self.python_override or name == "calibration" or in_image or name in self.config.python:
            return {}
        return venv_environment(framework)

    def workdir(self) -> str:
        # none: the checkout on the shared file system; pyxis and oci: mounted at the same path.
        return self.platform.workdir(str(REPO_ROOT))

    # -- one repeat's step, rendered -------------------------------------------------------
    def _node_commands(self, plan: RepeatPlan, allocation: Allocation | None) -> list[NodeCommand]:
        """The plan's commands with real nodes for placeholders, and the kit's environment."""
        names = allocation.nodes if allocation else []
        addresses = allocation.addresses if allocation else []

        def fill(text: str, table: list[str]) -> str:
            if not table:
                return text
            return _PLACEHOLDER.sub(lambda m: table[int(m.group(1))], text)

        commands = []
        for command in plan.commands:
            argv = [fill(arg, addresses) for arg in command.argv]
            # the cluster's own settings (slurm.env) first: the rank's own never give way
            env = {**self.config.env}
            env.update({key: fill(value, addresses) for key, value in command.env.items()})
            if self.config.tasks == "device":
                argv = self._task_argv(plan, argv, env)
            argv = self.platform.step_argv(plan, argv, Path(plan.session_root))
            workdir = command.workdir or self.workdir()
            env.setdefault("PYTHONPATH", self.workdir())  # the kit's code, as under docker
            env["PYTHONUNBUFFERED"] = "1"
            for key, value in self.platform.step_environment(plan).items():
                env.setdefault(key, value)
            commands.append(
                replace(command, node=fill(command.node, names), argv=argv, env=env,
                        workdir=workdir)
            )  # fmt: skip
        return commands

    def _task_argv(self, plan: RepeatPlan, argv: list[str], env: dict[str, str]) -> list[str]:
        """A node's command as each of its tasks runs it (``tasks: device``): the kit's script
        without its launcher, or a Horovod source's rank program (``task_command``) for the
        node whose rank environment ``env`` is."""
        if plan.source == "dlperf":
            load("frameworks", "sources")
            framework = FRAMEWORKS.get(plan.framework)
            return device_argv(argv, self.python(framework), framework.script)
        source = SOURCES.get(plan.source)()
        if not isinstance(source, UpstreamSource):
            return argv  # one process (a PyPI source): the task is the node
        rank = NodeRank(
            node_rank=int(env["DLPERF_NODE_RANK"]),
            nodes=int(env["DLPERF_NNODES"]),
            procs_per_node=int(env["DLPERF_NPROC_PER_NODE"]),
            master_addr=env["MASTER_ADDR"],
            master_port=int(env["MASTER_PORT"]),
            node_addrs=tuple(filter(None, env.get("DLPERF_NODE_ADDRS", "").split(","))),
        )
        return source.task_command(plan.case, rank, plan.batch_size)

    def _tasks_per_node(self, plan: RepeatPlan) -> int:
        return plan.devices_per_node if self.config.tasks == "device" else 1

    def _srun(
        self, plan: RepeatPlan, allocation: Allocation, step_name: str, submitted: bool = True
    ) -> list[str]:
        """The step's srun line; for a job not ``submitted`` yet (a dry run), its CPUs per task
        as a placeholder."""
        nodes = allocation.nodes[: len(plan.commands)]
        tasks = self._tasks_per_node(plan)
        cpus: int | str = allocation.cpus_per_node // tasks if allocation.cpus_per_node else 0
        if not submitted:
            cpus = CPUS_PLACEHOLDER.format(tasks=tasks)
        return srun_argv(
            self.config,
            allocation.job_id,
            nodes,
            step_name,
            tasks,
            cpus,
            self.platform.srun_flags(plan, plan.session_root),
            gpus_per_node=plan.devices_per_node,
        )

    @staticmethod
    def _step_name(plan: RepeatPlan) -> str:
        what = "probe" if plan.probe else f"r{plan.repeat}"
        return f"dlperf-{re.sub(r'[^A-Za-z0-9_.-]+', '-', plan.case_id)[:80]}-{what}"

    def _step_script(self, plan: RepeatPlan, commands: list[NodeCommand]) -> str:
        repeat_dir = Path(plan.repeat_dir).absolute()
        logs = [str(repeat_dir / f"node{i}.log") for i in range(len(commands))]
        return step_script(
            commands, logs, device_tasks=self.config.tasks == "device",
            guard=self.platform.step_guard(), by_hostname=self.platform.by_hostname,
        )  # fmt: skip

    def refused(self, plan: RepeatPlan, *, submitting: bool = False) -> str:
        """Why this runtime does not run the plan ("" when it does), before any job: what
        :meth:`case_refused` says, then what the container platform refuses (pyxis or enroot
        too old for what the plan asks; ``submitting``: also what only a real run asks, such
        as the registry's digest of a pinned tag; a dry run contacts no registry)."""
        return self.case_refused(plan) or self.platform.refused(plan, submitting=submitting)

    def case_refused(self, plan: RepeatPlan) -> str:
        """A case that needs more GPUs per node than the session's job asks for, an upstream
        source where its code is not (``slurm.container: none`` runs no image; a PyPI source
        has no image, only its environment ``.venvs/<source>`` on the nodes), and a source that
        starts its own launcher on every node given one task per GPU."""
        gpus = self.config.gpus_per_node
        if gpus and plan.devices_per_node > gpus:
            return (
                f"{plan.case_id} needs {plan.devices_per_node} GPUs per node; the session's job "
                f"asks each node for {gpus} (slurm.gpus_per_node): raise slurm.gpus_per_node "
                f"or run at most {gpus} GPUs per node"
            )
        if plan.source == "dlperf":
            return ""
        source = SOURCES.get(plan.source)()
        platform = self.platform.name
        if not source.image:  # a PyPI source: its environment, no image
            if self.platform.runs_sources:
                return (
                    f"source {plan.source!r} runs from its environment .venvs/ beside the kit's "
                    f"(no image), which a {platform} container does not hold: set "
                    "slurm.container: none (the nodes' own Python, on the shared file system)"
                )
            return ""
        if not self.platform.runs_sources:
            return (
                f"upstream source {plan.source!r} runs in its own image "
                f"({source_image(plan.source, plan.case.image)}), and "
                f"slurm.container: {platform} runs no image: set slurm.container: pyxis or oci "
                "(docs/upstream.md), or run it with --runtime docker and an inventory of the nodes"
            )
        if (
            self.config.tasks == "device"
            and isinstance(source, UpstreamSource)
            and source.launch_for(plan.case).launch != "mpi-head"
        ):
            return (
                f"upstream source {plan.source!r} starts its own launcher on every node, not one "
                "process per GPU (slurm.tasks: device): set slurm.tasks: node"
            )
        return ""

    def describe(self, plan: RepeatPlan) -> list[str]:
        """The batch job (outside an allocation) and the repeat's srun line, exactly as run;
        nodes the job has not given yet appear as their placeholders."""
        refused = self.refused(plan)
        if refused:
            raise RuntimeConfigError(refused)
        lines: list[str] = []
        allocation = self.allocation
        if allocation is None and self.job.inside_allocation:
            allocation = self.job.enclosing()
        submitted = allocation is not None
        if allocation is None:
            count = len(plan.commands)
            output = str(plan.session_root / "slurm" / "job-%j.out")
            argv = sbatch_argv(self.config, count, job_name(plan.session_root), output)
            lines.append(f"$ {shlex.join(argv)} <<'EOF'")
            lines += [*HOLDER_SCRIPT.splitlines(), "EOF"]
            allocation = Allocation(
                job_id="<job id>",
                nodes=[PLACEHOLDER.format(index=i) for i in range(count)],
                addresses=[PLACEHOLDER.format(index=i) for i in range(count)],
                partition=self.config.partition or "",
                cpus_per_node=0,
                owned=True,
            )
        commands = self._node_commands(plan, allocation)
        lines += self.platform.describe_prepare(plan, allocation)
        argv = self._srun(plan, allocation, self._step_name(plan), submitted)
        script = self._step_script(plan, commands)
        lines.append("$ " + shlex.join([*argv, "sh", "-c", script]))
        return lines

    # -- the session's job -----------------------------------------------------------------
    def job_limit(self) -> JobLimit | None:
        limit = self.config.time_limit
        if limit is None:
            return None
        return JobLimit(limit, bool(self.config.gpus_per_node), bool(self.config.split_jobs))

    def disconnect(self) -> None:
        """The session's runs are over: its job is cancelled now, and waited for, before the
        seal (a later run submits a new one); a second Ctrl-C does not cut the wait short."""
        with ctrl_c_held():
            self.job.end()

    def close(self) -> None:
        """Cancel the session's job (the kit never leaves one in the queue), and remove what
        the session made for its containers."""
        self.job.close()
        if self._platform is not None:
            self._platform.close()

    def clean_leftovers(self, session_root: Path) -> list[str]:
        """Cancel jobs an earlier, killed run of this session left in the queue.

        Called before a session (re)starts, this is where the runtime first sees the session
        folder: what its container platform refuses (a folder pyxis cannot mount, a bad OCI
        bundle) is refused here, before any job is submitted."""
        self.platform.check(session_root)
        return self.job.leftovers(session_root)

    # -- one repeat ------------------------------------------------------------------------
    def run(self, plan: RepeatPlan) -> RepeatOutcome:
        started, started_cpu = time.time(), driver_cpu_seconds()
        refused = self.refused(plan, submitting=True)
        if refused:  # before any job is submitted
            return RepeatOutcome(Verdict.FAILED, [], started, time.time(), refused)
        repeat_dir = Path(plan.repeat_dir)
        repeat_dir.mkdir(parents=True, exist_ok=True)
        timings: dict[str, float] = {}
        extra: dict[str, Any] = {"slurm": {"timings": timings}}
        step: Step | None = None
        verdict, detail = Verdict.OK, ""
        interrupted = False
        allocation: Allocation | None = None
        try:
            try:
                allocation = self.job.ensure(
                    len(plan.commands),
                    Path(plan.session_root),
                    self.config,
                    None if plan.probe else self.repeat_seconds.get(plan.case_id),
                )
                timings["allocation_s"] = round(time.time() - started, 3)
                made = self.platform.prepare(plan, allocation)
                if made is not None:
                    if made:
                        extra["slurm"][self.platform.name] = made
                    timings[self.platform.prepare_timing] = round(time.time() - started, 3)
                extra["slurm"].update(self.job.facts(allocation, self.platform.name))
            except (Failure, client.SlurmError, RuntimeConfigError) as failure:
                verdict = failure.verdict if isinstance(failure, Failure) else Verdict.FAILED
                now = time.time()
                return RepeatOutcome(verdict, [], started, now, str(failure), extra)
            commands = self._node_commands(plan, allocation)
            extra["slurm"]["commands"] = [
                {"node": c.node, "argv": c.argv, "env": c.env} for c in commands
            ]
            argv = [*self._srun(plan, allocation, self._step_name(plan)), "sh", "-c",
                    self._step_script(plan, commands)]  # fmt: skip
            extra["slurm"]["srun"] = shlex.join(argv)
            step = Step.start(argv, commands, repeat_dir, self._tasks_per_node(plan),
                              self.job.inside_allocation)  # fmt: skip
            timings["step_started_at"] = round(time.time() - started, 3)
            verdict, detail = step.watch(allocation, plan.timeout_s)
        except KeyboardInterrupt:
            interrupted = True
            verdict, detail = Verdict.INTERRUPTED, INTERRUPTED_DETAIL
        with ctrl_c_held():  # no step, no job left behind
            exit_codes: dict[int, int | None] = {}
            if step is not None:
                step_ended = time.time()
                step.stop(allocation)
                exit_codes, verdict, detail = step.conclude(
                    allocation, verdict, detail, self.job.inside_allocation
                )
                timings["step_s"] = round(step_ended - started - timings["step_started_at"], 3)
                if step.first_output_at:  # the repeat's start to a node's first log line
                    timings["first_output_s"] = round(step.first_output_at - started, 3)
            if allocation is not None and verdict != Verdict.OK:
                try:  # the job as the fault left it (state, reason, nodes)
                    extra["slurm"]["job_after"] = client.show_job(allocation.job_id).raw
                except client.SlurmError as error:
                    extra["slurm"]["job_after"] = str(error)
            if interrupted and self.allocation is not None:
                self.job.cancel(self.allocation, "Ctrl-C or SIGTERM on the head")
        finished = time.time()
        if "step_s" in timings:  # srun's exit to the outcome: stop, exit codes, job facts
            timings["collect_s"] = round(finished - started - timings["step_started_at"]
                                         - timings["step_s"], 3)  # fmt: skip
        timings["wall_s"] = round(finished - started, 3)
        timings["driver_cpu_s"] = round(driver_cpu_seconds() - started_cpu, 3)
        nodes = [
            NodeOutcome(
                node=command.node,
                exit_code=exit_codes.get(index),
                log_path=repeat_dir / f"node{index}.log",
            )
            for index, command in enumerate(commands if step is not None else plan.commands)
        ]
        if interrupted:
            raise_interrupted(repeat_dir, detail, extra)
        return RepeatOutcome(verdict, nodes, started, finished, detail, extra)
