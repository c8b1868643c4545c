"""The Slurm runtime: every repeat is one ``srun`` job step, in the session's own job.

    dlperf run --runtime slurm --inventory cluster.yaml ...   # cluster.yaml: a slurm: section
    salloc -N 4 ... ; dlperf run --runtime slurm ...          # inside an allocation: its nodes

**Inside an allocation** (``SLURM_JOB_ID`` set: ``salloc``, or a batch script running the kit)
each repeat is a job step of that job. **Outside**, the runtime submits one job per session
(``sbatch`` of a script that only holds the nodes) when the first repeat needs nodes, and runs
one step per repeat into it with ``srun --jobid``. One job per session rather than per case:
on a shared cluster every job waits in the queue, so per-case jobs would add a queue wait to
every case, and a pyxis container is kept per job, so one job lets every repeat of the session
reuse the container each node created once. A case that needs more nodes than the job holds
cancels it and submits a bigger one; smaller cases run on its first nodes. The job is cancelled
when the runtime closes (end of the run, Ctrl-C, SIGTERM: the CLI turns SIGTERM into Ctrl-C),
and ``clean_leftovers`` cancels whatever a killed earlier run of the session left (the job's
name carries the session's label). Its time limit bounds it in every other case.

**Tasks:** one task per node (``tasks: node``, the default) runs the framework's own launcher
(torchrun, paddle, ...) with the node's rank environment: the step's ``sh`` program picks the
node's command by ``SLURM_NODEID``; the head is the first host of ``scontrol show hostnames``
of the job, at its ``NodeAddr``. ``tasks: device`` runs one task per device with
``--mpi=<mpi>`` (pmix) and the script without its launcher (RANK from ``SLURM_PROCID``).

**Containers:** pyxis when ``srun --help`` lists ``--container-image`` (``container: auto``):
the framework's GPU base image by its ``images.lock`` digest (or ``slurm.image``), one named
container per node made by a first step and reused by every repeat, the kit's checkout and the
session folder mounted at their own paths, plus ``slurm.mounts``. ``none``: the nodes' own
Python, the kit's framework venvs at the same paths as here (a shared file system). ``oci``:
Slurm's own containers (``srun --container=<bundle>``, ``oci.conf`` on the nodes calling runc
or crun): a bundle per session made from ``slurm.oci_bundle`` or from the local image
``slurm.oci_image`` (exported once per image), the checkout and the session folder mounted at
their own paths (``driver/images/oci.py``); the image's ``python3`` runs the step.

Each node's command appends its output to ``node<i>.log`` in the repeat folder itself (not
through srun's stdio, which would split long lines; see ``step_script``), so the session folder
must be on a file system the nodes share; srun's own messages go to ``srun.log``. Faults are
verdicts: a task's exit (86: out of memory), a node Slurm sees down or not responding, the job
cancelled from outside or at its time limit, the repeat's timeout, Ctrl-C. A Slurm command
that fails (slurmctld unreachable, sbatch refused) is a failed repeat with its message.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from driver.bench.protocol import EXIT_OOM
from driver.frameworks.base import REPO_ROOT
from driver.registry import RUNTIMES
from driver.runtimes.base import (
    INTERRUPTED_DETAIL,
    NodeOutcome,
    RepeatOutcome,
    RuntimeConfigError,
    Verdict,
    driver_cpu_seconds,
)
from driver.runtimes.plan import NodeCommand
from driver.runtimes.slurm import client
from driver.runtimes.slurm.config import SlurmConfig, load_slurm_config
from driver.runtimes.slurm.render import (
    HOLDER_SCRIPT,
    Container,
    OciContainer,
    check_mount_path,
    device_argv,
    oci_guard,
    sbatch_argv,
    srun_argv,
    step_script,
)

if TYPE_CHECKING:
    from driver.frameworks.base import Framework
    from driver.runtimes.plan import RepeatPlan

POLL_S = 0.05
CHECK_S = 2.0  # how often the job and its nodes are asked about during a step
STOP_GRACE_S = 15.0  # srun's own step cancel (SIGTERM -> tasks killed) before scancel
PLACEHOLDER = "@slurm-node{index}@"  # a node not known until the session's job runs
_PLACEHOLDER = re.compile(r"@slurm-node(\d+)@")
_TASK_EXIT = re.compile(r"srun: error: (\S+): tasks? ([\d,\-]+): Exited with exit code (\d+)")
_TASK_SIGNAL = re.compile(r"srun: error: (\S+): tasks? ([\d,\-]+): ([A-Z][\w ]*)$")


def session_label(root: Path) -> str:
    """The job name's session part: the results folder's name plus a hash of its path."""
    digest = hashlib.sha1(str(Path(root).resolve()).encode()).hexdigest()[:8]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(root).name).strip("-.")[:40] or "session"
    return f"{name}-{digest}"


def job_name(session_root: Path) -> str:
    return f"dlperf-{session_label(session_root)}"


@dataclass
class Allocation:
    job_id: str
    nodes: list[str]  # hostnames, in Slurm's order (the first is the head)
    addresses: list[str]  # NodeAddr of each
    partition: str
    cpus_per_node: int
    owned: bool  # submitted by this runtime, which cancels it
    submitted_at: float = 0.0
    running_at: float = 0.0
    containers: set[str] = field(default_factory=set)  # pyxis containers made in this job


@dataclass
class Step:
    """One repeat's job step while it runs."""

    process: subprocess.Popen
    nodes: list[str]
    tasks_per_node: int
    logs: list[Path]
    srun_log: Path
    first_output_at: float | None = None  # when a node's log first grew


def _task_ids(text: str) -> list[int]:
    ids: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        ids += list(range(int(first), int(last or first) + 1))
    return ids


@RUNTIMES.register("slurm")
class SlurmRuntime:
    name = "slurm"
    # make_runtime hands it the cluster file (its slurm: section); a file with only that
    # section is enough, also inside an allocation.
    cluster_file = "optional"  # its slurm: section; inside an allocation, defaults do

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
        self.allocation: Allocation | None = None
        self._container_mode: str | None = None
        self._version: str | None = None
        self._oci_checked = False
        self._oci_made: dict[Path, dict[str, Any]] = {}  # session bundle -> its facts
        self._oci_paths: dict[str, str | None] = {}  # source -> the PATH its config sets
        atexit.register(self.close)

    # -- where and what ------------------------------------------------------------------
    @property
    def inside_allocation(self) -> bool:
        return bool(os.environ.get("SLURM_JOB_ID"))

    def container_mode(self) -> str:
        """pyxis or none (``auto``: pyxis when this srun has it)."""
        if self._container_mode is None:
            mode = self.config.container
            if mode == "auto":
                mode = "pyxis" if client.available() and client.has_pyxis() else "none"
            self._container_mode = mode
        return self._container_mode

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
        if allocation is None and self.inside_allocation:
            allocation = self.allocation = self._enclosing_allocation()
        if allocation is not None and count <= len(allocation.nodes):
            return list(zip(allocation.nodes[:count], allocation.addresses[:count], strict=True))
        if allocation is not None and not allocation.owned:
            raise ValueError(
                f"the case needs {count} nodes; this allocation (job {allocation.job_id}) has "
                f"{len(allocation.nodes)}: run inside `salloc -N {count}`, or outside any "
                "allocation (the kit then submits its own job)"
            )
        return [
            (PLACEHOLDER.format(index=i), PLACEHOLDER.format(index=i)) for i in range(count)
        ]

    def python(self, framework: Framework) -> str:
        if self.python_override:
            return self.python_override
        name = getattr(framework, "name", str(framework))
        if name in self.config.python:
            return self.config.python[name]
        if self.container_mode() in ("pyxis", "oci"):
            return "python3"  # the image's
        if name == "calibration":
            return sys.executable
        from driver.runtimes.envs import venv_python

        return str(venv_python(framework))

    def environment(self, framework: Framework) -> dict[str, str]:
        name = getattr(framework, "name", str(framework))
        if self.python_override or name == "calibration":
            return {}
        if self.container_mode() in ("pyxis", "oci"):
            return {}
        if name in self.config.python:
            return {}
        from driver.runtimes.envs import venv_environment

        return venv_environment(framework)

    def workdir(self) -> str:
        # none: the checkout on the shared file system; pyxis: mounted at the same path.
        return str(REPO_ROOT)

    # -- rendering ---------------------------------------------------------------------------
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
            if self.config.tasks == "device":
                from driver.plugins import load_all
                from driver.registry import FRAMEWORKS

                load_all()
                framework = FRAMEWORKS.get(plan.framework)
                argv = device_argv(argv, self.python(framework), framework.script)
            env = {key: fill(value, addresses) for key, value in command.env.items()}
            workdir = command.workdir or self.workdir()
            env.setdefault("PYTHONPATH", workdir)
            env["PYTHONUNBUFFERED"] = "1"
            if self.container_mode() == "oci":
                # Slurm appends the submitting shell's environment to the bundle's: its PATH
                # would hide the image's (python3 of the image, e.g. /opt/venv/bin).
                image_path = self._oci_path(plan.framework)
                if image_path:
                    env.setdefault("PATH", image_path)
            commands.append(
                replace(command, node=fill(command.node, names), argv=argv, env=env,
                        workdir=workdir)
            )  # fmt: skip
        return commands

    def _container(
        self, plan: RepeatPlan, session_root: Path
    ) -> Container | OciContainer | None:
        if self.container_mode() == "oci":
            return OciContainer(str(self._oci_bundle(plan.framework, session_root)))
        if self.container_mode() != "pyxis":
            return None
        session, kit = self._mounted_folders(session_root)
        mounts = [f"{kit}:{kit}:ro", f"{session}:{session}"]
        mounts += self.config.mounts
        return Container(
            image=self.image_for(plan.framework),
            name=f"dlperf-{plan.framework}",
            mounts=tuple(mounts),
            workdir=str(REPO_ROOT),
        )

    @staticmethod
    def _mounted_folders(session_root: Path) -> tuple[str, str]:
        """The session folder and the kit's checkout, each mounted at its own path (absolute:
        mounts want absolute paths), refused if pyxis cannot mount it."""
        session = check_mount_path(
            str(Path(session_root).absolute()),
            "the session folder",
            "choose a --results folder whose path has neither",
        )
        kit = check_mount_path(
            str(REPO_ROOT), "the kit's checkout", "move the checkout to a path without them"
        )
        return session, kit

    # -- Slurm's own OCI containers -----------------------------------------------------------
    def _where(self) -> str:
        return str(self.inventory) if self.inventory else "the slurm: section"

    def _oci_cache(self) -> Path:
        if self.config.oci_cache:
            return Path(self.config.oci_cache)
        return REPO_ROOT / ".dlperf" / "oci"

    def _oci_bundle(self, framework: str, session_root: Path) -> Path:
        """The session's bundle of ``framework`` (made by the first repeat that needs it)."""
        return self._oci_cache() / f"session-{session_label(session_root)}" / framework

    def oci_source(self, framework: str) -> tuple[str, str, str]:
        """Where ``framework``'s bundle comes from: (``bundle`` or ``image``, the value, the
        field that set it); a framework's own entry before ``default``, a bundle before an
        image. A one-line RuntimeConfigError naming the fields when neither is set."""
        for key in (framework, "default"):
            if key in self.config.oci_bundle:
                return "bundle", self.config.oci_bundle[key], f"slurm.oci_bundle.{key}"
            if key in self.config.oci_image:
                return "image", self.config.oci_image[key], f"slurm.oci_image.{key}"
        raise RuntimeConfigError(
            f"{self._where()}: slurm.oci_bundle: no OCI bundle for {framework!r}; set "
            f"slurm.oci_bundle.{framework} (a folder with config.json and its root folder, on a "
            f"file system the nodes share) or slurm.oci_image.{framework} (a local docker image "
            "the kit exports into one)"
        )

    def check_oci(self) -> None:
        """Once: this Slurm has ``--container``; a named bundle exists with a config.json and a
        root. One-line RuntimeConfigErrors (file, field, fix)."""
        if self._oci_checked or self.container_mode() != "oci":
            return
        if client.available() and client.has_oci_container() is False:
            raise RuntimeConfigError(
                f"{self._where()}: slurm.container: oci needs Slurm's own containers (srun "
                "--container, Slurm 21.08 or later), which this srun does not list in --help; "
                "upgrade Slurm, or set slurm.container: pyxis or none"
            )
        from driver.images.oci import OciBundleError, bundle_root, read_config

        for key, path in {**self.config.oci_bundle}.items():
            what = f"{self._where()}: slurm.oci_bundle.{key}"
            fix = "make the bundle there (config.json + rootfs/) or fix the path"
            try:
                bundle_root(Path(path), read_config(Path(path), what, fix), what, fix)
            except OciBundleError as error:
                raise RuntimeConfigError(str(error)) from None
        self._oci_checked = True

    def _oci_path(self, framework: str) -> str | None:
        """The PATH the bundle's config.json sets (the image's environment)."""
        from driver.images.oci import (
            OciBundleError,
            config_path_variable,
            image_facts,
            read_config,
        )

        kind, value, field_name = self.oci_source(framework)
        if value not in self._oci_paths:
            try:
                if kind == "bundle":
                    config = read_config(Path(value), field_name, "fix the path")
                    self._oci_paths[value] = config_path_variable(config)
                else:
                    env = image_facts(value)[1]
                    self._oci_paths[value] = config_path_variable({"process": {"env": env}})
            except OciBundleError as error:
                raise RuntimeConfigError(f"{self._where()}: {field_name}: {error}") from None
        return self._oci_paths[value]

    def _make_oci_bundle(self, plan: RepeatPlan) -> dict[str, Any]:
        """The session's bundle for the plan's framework, made once per session (the first
        repeat that needs it; a resumed session makes it again); its facts for the record."""
        from driver.images.oci import (
            MARKER,
            OciBundleError,
            make_session_bundle,
            parse_mount,
            source_from_image,
        )
        from driver.images.oci import Mount as OciMount

        session_root = Path(plan.session_root)
        destination = self._oci_bundle(plan.framework, session_root)
        if destination in self._oci_made:
            return self._oci_made[destination]
        self.check_oci()
        kind, value, field_name = self.oci_source(plan.framework)
        started = time.time()
        session, kit = str(session_root.absolute()), str(REPO_ROOT)
        mounts = [OciMount(kit, kit, read_only=True), OciMount(session, session)]
        mounts += [parse_mount(mount) for mount in self.config.mounts]
        what = f"{self._where()}: {field_name}"
        try:
            source = Path(value)
            if kind == "image":
                source = source_from_image(value, self._oci_cache(), log=self.printer)
            made = make_session_bundle(
                source, destination, mounts, session_label(session_root), what,
                "fix the path, or name an image (slurm.oci_image)",
            )  # fmt: skip
        except (OciBundleError, OSError, subprocess.SubprocessError) as error:
            raise _Failure(Verdict.FAILED, f"OCI bundle not made: {error}") from None
        facts = {
            "bundle": str(made),
            "source": str(source),
            kind: value,
            "marker": f"/{MARKER}",
            "made_s": round(time.time() - started, 3),
        }
        self._oci_made[destination] = facts
        return facts

    def image_for(self, framework: str) -> str:
        """pyxis image: ``slurm.image``, else the framework's GPU base by its images.lock digest
        in enroot's form (``registry#repository@sha256:...``)."""
        if framework in self.config.image:
            return self.config.image[framework]
        if "default" in self.config.image:
            return self.config.image["default"]
        from driver.images.catalog import discover, image_for
        from driver.images.lock import LockError, load_lock

        spec = discover()[image_for(framework, "gpu", discover())]
        refs = spec.registry_refs
        if not refs:
            raise LockError(f"{spec.dockerfile}: no registry base for pyxis; set slurm.image")
        pin = load_lock().get(refs[0])
        if pin is None or not pin.resolved:
            raise LockError(
                f"images.lock: {refs[0]} has no resolved digest (`dlperf images lock`), or set "
                f"slurm.image.{framework}"
            )
        repository = refs[0].rsplit(":", 1)[0] if ":" in refs[0].split("/")[-1] else refs[0]
        registry, _, path = repository.partition("/")
        if "." in registry or ":" in registry:
            repository = f"{registry}#{path}"
        return f"{repository}@{pin.digest}"

    def _tasks_per_node(self, plan: RepeatPlan) -> int:
        return plan.devices_per_node if self.config.tasks == "device" else 1

    def _srun(self, plan: RepeatPlan, allocation: Allocation, step_name: str) -> list[str]:
        nodes = allocation.nodes[: len(plan.commands)]
        tasks = self._tasks_per_node(plan)
        cpus = allocation.cpus_per_node // tasks if allocation.cpus_per_node else 0
        return srun_argv(
            self.config,
            allocation.job_id,
            nodes,
            step_name,
            tasks,
            cpus,
            self._container(plan, plan.session_root),
        )

    @staticmethod
    def refused_source(plan: RepeatPlan) -> str:
        """Why this runtime does not run the plan's upstream source ("" for the kit's own
        scripts): an upstream source's code is only in its own image (src-<source>), while
        steps here run the framework's base image or the nodes' own Python, where the node
        command's ``cd`` into the source's folder fails at once."""
        if plan.source == "dlperf":
            return ""
        return (
            f"upstream source {plan.source!r} runs in its own image, which the slurm runtime "
            "does not use (it runs the framework's base image or the nodes' Python): run it "
            "with --runtime docker and an inventory of the nodes"
        )

    def describe(self, plan: RepeatPlan) -> list[str]:
        """The batch job (outside an allocation) and the repeat's srun line, exactly as run;
        nodes the job has not given yet appear as their placeholders."""
        refused = self.refused_source(plan)
        if refused:
            raise RuntimeConfigError(refused)
        lines: list[str] = []
        allocation = self.allocation
        if allocation is None and self.inside_allocation:
            allocation = self._enclosing_allocation()
        if allocation is None:
            count = len(plan.commands)
            output = str(plan.session_root / "slurm" / "job-%j.out")
            argv = sbatch_argv(self.config, count, job_name(plan.session_root), output)
            lines.append(f"$ {_join(argv)} <<'EOF'")
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
        container = self._container(plan, plan.session_root)
        if isinstance(container, OciContainer):
            kind, value, field_name = self.oci_source(plan.framework)
            lines.append(
                f"# once per session: the OCI bundle {container.bundle} (root from the {kind} "
                f"{value} ({field_name}); config.json with the checkout and the session folder "
                "mounted); oci.conf on the nodes runs it"
            )
        elif container is not None:
            lines.append("# once per job: each node makes its named container")
            lines.append("$ " + _join(self._create_argv(allocation, container, len(commands))))
        argv = self._srun(plan, allocation, self._step_name(plan))
        script = self._step_script(plan, commands)
        lines.append("$ " + _join([*argv, "sh", "-c", script]))
        return lines

    def _create_argv(self, allocation: Allocation, container: Container, count: int) -> list[str]:
        nodes = allocation.nodes[:count]
        return [
            "srun", f"--jobid={allocation.job_id}", "--job-name=dlperf-container",
            f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}", "--ntasks-per-node=1",
            *container.flags(), "true",
        ]  # fmt: skip

    @staticmethod
    def _step_name(plan: RepeatPlan) -> str:
        what = "probe" if getattr(plan, "probe", False) else f"r{plan.repeat}"
        return f"dlperf-{re.sub(r'[^A-Za-z0-9_.-]+', '-', plan.case_id)[:80]}-{what}"

    # -- the session's job -----------------------------------------------------------------
    def _enclosing_allocation(self) -> Allocation:
        job_id = os.environ["SLURM_JOB_ID"]
        info = client.show_job(job_id)
        nodes = client.hostnames(info.nodes or os.environ.get("SLURM_JOB_NODELIST", ""))
        return Allocation(
            job_id=job_id,
            nodes=nodes,
            addresses=[client.node_address(n) for n in nodes],
            partition=info.partition,
            cpus_per_node=info.cpus_per_node,
            owned=False,
        )

    def _ensure_allocation(self, count: int, session_root: Path) -> Allocation:
        """The job to run ``count`` nodes' step in: the enclosing one, the session's, or a new
        one (submitted, and waited for with its queue state printed)."""
        if self.inside_allocation:
            if self.allocation is None:
                self.allocation = self._enclosing_allocation()
            if count > len(self.allocation.nodes):
                raise _Failure(
                    Verdict.FAILED,
                    f"the case needs {count} nodes; job {self.allocation.job_id} has "
                    f"{len(self.allocation.nodes)}",
                )
            return self.allocation
        held = self.allocation
        if held is not None:
            info = client.show_job(held.job_id)
            if info.state == "RUNNING" and count <= len(held.nodes):
                return held
            self._cancel(held, f"it has {len(held.nodes)} nodes, the case needs {count}"
                         if info.state == "RUNNING" else f"it is {info.state or 'gone'}")
        return self._submit(count, session_root)

    def _submit(self, count: int, session_root: Path) -> Allocation:
        name = job_name(session_root)
        out_dir = Path(session_root).absolute() / "slurm"
        out_dir.mkdir(parents=True, exist_ok=True)
        argv = sbatch_argv(self.config, count, name, str(out_dir / "job-%j.out"))
        (out_dir / "sbatch.txt").write_text(_join(argv) + "\n" + HOLDER_SCRIPT)
        submitted = time.time()
        try:
            job_id = client.slurm(*argv, stdin=HOLDER_SCRIPT).strip().split(";")[0]
        except client.SlurmError as error:
            raise _Failure(Verdict.FAILED, f"sbatch refused the session's job: {error}") from None
        allocation = Allocation(
            job_id=job_id, nodes=[], addresses=[], partition="", cpus_per_node=0, owned=True,
            submitted_at=submitted,
        )  # fmt: skip
        self.allocation = allocation
        self.printer(f"slurm: submitted job {job_id} ({name}, {count} nodes)")
        self._wait_running(allocation)
        return allocation

    def _wait_running(self, allocation: Allocation) -> None:
        deadline = time.monotonic() + self.config.queue_timeout_s
        last = ""
        while True:
            info = client.show_job(allocation.job_id)
            state = info.state
            if info.reason not in ("", "None"):
                state = f"{state} ({info.reason})"
            if state != last:
                waited = time.time() - allocation.submitted_at
                self.printer(f"slurm: job {allocation.job_id} {state or 'gone'} ({waited:.0f} s)")
                last = state
            if info.state == "RUNNING":
                break
            if info.ended:
                self.allocation = None
                raise _Failure(
                    Verdict.FAILED,
                    f"job {allocation.job_id} ended before it ran: {info.state or 'gone'} "
                    f"({info.reason})",
                )
            if time.monotonic() > deadline:
                self._cancel(allocation, "it waited past slurm.queue_timeout_s")
                raise _Failure(
                    Verdict.TIMEOUT,
                    f"job {allocation.job_id} still {state} after {self.config.queue_timeout_s:.0f}"
                    " s in the queue (slurm.queue_timeout_s); cancelled",
                )
            time.sleep(0.5)
        allocation.running_at = time.time()
        allocation.nodes = client.hostnames(info.nodes)
        allocation.addresses = [client.node_address(n) for n in allocation.nodes]
        allocation.partition = info.partition
        allocation.cpus_per_node = info.cpus_per_node

    def _cancel(self, allocation: Allocation, why: str) -> None:
        if not allocation.owned:
            return
        try:
            client.cancel(allocation.job_id)
            self.printer(f"slurm: cancelled job {allocation.job_id} ({why})")
        except client.SlurmError as error:
            self.printer(f"slurm: could not cancel job {allocation.job_id}: {error}")
        if self.allocation is allocation:
            self.allocation = None

    def close(self) -> None:
        """Cancel the session's job (the kit never leaves one in the queue)."""
        if self.allocation is not None and self.allocation.owned:
            self._cancel(self.allocation, "the session's runs are over")
        for bundle in list(self._oci_made):  # hard links of the source: cheap to make again
            shutil.rmtree(bundle, ignore_errors=True)
            if bundle.parent.is_dir() and not any(bundle.parent.iterdir()):
                bundle.parent.rmdir()
            del self._oci_made[bundle]

    def clean_leftovers(self, session_root: Path) -> list[str]:
        """Cancel jobs an earlier, killed run of this session left in the queue.

        Called before a session (re)starts, this is where the runtime first sees the session
        folder: one pyxis cannot mount is refused here, before any job is submitted."""
        if self.container_mode() == "pyxis":
            self._mounted_folders(session_root)
        self.check_oci()
        if not client.available():
            return []
        done = []
        held = self.allocation.job_id if self.allocation else None
        try:
            for job_id in client.jobs_named(job_name(session_root)):
                if job_id == held:
                    continue
                client.cancel(job_id)
                done.append(f"cancelled leftover Slurm job {job_id} ({job_name(session_root)})")
        except client.SlurmError as error:  # no controller answers: the first repeat will say
            done.append(f"could not look for leftover Slurm jobs: {error}")
        return done

    # -- one repeat ------------------------------------------------------------------------
    def run(self, plan: RepeatPlan) -> RepeatOutcome:
        started, started_cpu = time.time(), driver_cpu_seconds()
        refused = self.refused_source(plan)
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
                allocation = self._ensure_allocation(len(plan.commands), Path(plan.session_root))
                timings["allocation_s"] = round(time.time() - started, 3)
                container = self._container(plan, Path(plan.session_root))
                if isinstance(container, OciContainer):
                    extra["slurm"]["oci"] = self._make_oci_bundle(plan)
                    timings["bundle_s"] = round(time.time() - started, 3)
                elif container is not None and container.name not in allocation.containers:
                    self._create_containers(allocation, container, len(plan.commands))
                    timings["container_create_s"] = round(time.time() - started, 3)
                extra["slurm"].update(self._facts(allocation))
            except (_Failure, client.SlurmError, RuntimeConfigError) as failure:
                verdict = failure.verdict if isinstance(failure, _Failure) else Verdict.FAILED
                now = time.time()
                return RepeatOutcome(verdict, [], started, now, str(failure), extra)
            commands = self._node_commands(plan, allocation)
            extra["slurm"]["commands"] = [
                {"node": c.node, "argv": c.argv, "env": c.env} for c in commands
            ]
            argv = [*self._srun(plan, allocation, self._step_name(plan)), "sh", "-c",
                    self._step_script(plan, commands)]  # fmt: skip
            extra["slurm"]["srun"] = _join(argv)
            step = self._start(argv, commands, repeat_dir, self._tasks_per_node(plan))
            timings["step_started_at"] = round(time.time() - started, 3)
            verdict, detail = self._watch(step, allocation, plan.timeout_s)
        except KeyboardInterrupt:
            interrupted = True
            verdict, detail = Verdict.INTERRUPTED, INTERRUPTED_DETAIL
        # Cleanup must finish even if Ctrl-C is pressed again: no step, no job left behind.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if _main_thread() else None
        try:
            exit_codes: dict[int, int | None] = {}
            if step is not None:
                step_ended = time.time()
                self._stop(step, allocation)
                exit_codes, verdict, detail = self._conclude(step, allocation, verdict, detail)
                timings["step_s"] = round(step_ended - started - timings["step_started_at"], 3)
                if step.first_output_at:  # the repeat's start to a node's first log line
                    timings["first_output_s"] = round(step.first_output_at - started, 3)
            if allocation is not None and verdict != Verdict.OK:
                try:  # the job as the fault left it (state, reason, nodes)
                    extra["slurm"]["job_after"] = client.show_job(allocation.job_id).raw
                except client.SlurmError as error:
                    extra["slurm"]["job_after"] = str(error)
            if interrupted and self.allocation is not None:
                self._cancel(self.allocation, "Ctrl-C or SIGTERM on the head")
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
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
        outcome = RepeatOutcome(verdict, nodes, started, finished, detail, extra)
        if interrupted:
            (repeat_dir / "interrupted.json").write_text(
                json.dumps({"detail": detail, "extra": extra}, indent=2, default=str) + "\n"
            )
            raise KeyboardInterrupt
        return outcome

    def _facts(self, allocation: Allocation) -> dict[str, Any]:
        """Provenance of every repeat: the job, its nodes and partition, Slurm's version, and
        ``scontrol show job`` as Slurm printed it."""
        if self._version is None:
            self._version = client.version()
        info = client.show_job(allocation.job_id)
        return {
            "job_id": allocation.job_id,
            "job_owned": allocation.owned,
            "nodes": allocation.nodes,
            "node_addresses": allocation.addresses,
            "partition": allocation.partition,
            "version": self._version,
            "container": self.container_mode(),
            "queue_wait_s": round(allocation.running_at - allocation.submitted_at, 3)
            if allocation.owned
            else None,
            "scontrol_show_job": info.raw,
        }

    def _create_containers(self, allocation: Allocation, container: Container, count: int) -> None:
        argv = self._create_argv(allocation, container, count)
        try:
            client.slurm(*argv, timeout=3600)
        except client.SlurmError as error:
            detail = f"pyxis could not make {container.name}: {error}"
            raise _Failure(Verdict.FAILED, detail) from None
        allocation.containers.add(container.name)

    def _step_script(self, plan: RepeatPlan, commands: list[NodeCommand]) -> str:
        repeat_dir = Path(plan.repeat_dir).absolute()
        logs = [str(repeat_dir / f"node{i}.log") for i in range(len(commands))]
        guard = ""
        if self.container_mode() == "oci":
            from driver.images.oci import MARKER

            guard = oci_guard(MARKER)
        return step_script(
            commands, logs, device_tasks=self.config.tasks == "device", guard=guard,
            by_hostname=bool(guard),
        )  # fmt: skip

    def _start(
        self, argv: list[str], commands: list[NodeCommand], repeat_dir: Path, tasks_per_node: int
    ) -> Step:
        logs = [repeat_dir / f"node{i}.log" for i in range(len(commands))]
        for log in logs:
            log.unlink(missing_ok=True)  # the tasks append
        env = dict(os.environ)
        if not self.inside_allocation:
            # srun --jobid from outside: nothing of another job may leak into the step.
            env = {k: v for k, v in env.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
        srun_log = repeat_dir / "srun.log"
        with srun_log.open("wb") as own:  # srun's own messages (task exits, cancels)
            process = subprocess.Popen(
                argv,
                stdout=own,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # Ctrl-C reaches the kit, which stops the step itself
            )
        nodes = [c.node for c in commands]
        return Step(process, nodes, tasks_per_node, logs, srun_log)

    def _watch(self, step: Step, allocation: Allocation, timeout_s: float) -> tuple[Verdict, str]:
        deadline = time.monotonic() + timeout_s
        next_check = time.monotonic() + CHECK_S
        while step.process.poll() is None:
            if step.first_output_at is None and any(
                log.exists() and log.stat().st_size for log in step.logs
            ):
                step.first_output_at = time.time()
            if time.monotonic() > deadline:
                return Verdict.TIMEOUT, f"ran past the timeout of {timeout_s:.0f} s"
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + CHECK_S
                found = self._job_or_node_fault(allocation, step.nodes)
                if found is not None:
                    return found
            time.sleep(POLL_S)
        return Verdict.OK, ""  # the exit code is read in _conclude

    def _job_or_node_fault(
        self, allocation: Allocation, nodes: list[str]
    ) -> tuple[Verdict, str] | None:
        try:
            info = client.show_job(allocation.job_id)
            down = client.down_nodes(nodes)
        except client.SlurmError:
            return None  # slurmctld busy: the next check, or srun's own exit, tells
        if info.state == "TIMEOUT":
            return Verdict.TIMEOUT, (
                f"Slurm job {allocation.job_id} reached its time limit ({info.time_limit}; "
                "slurm.time_limit)"
            )
        if info.state == "NODE_FAIL" or down:
            where = ", ".join(f"{n} {s}" for n, s in down.items()) or info.reason
            return Verdict.NODE_LOST, f"Slurm job {allocation.job_id}: node down ({where})"
        if info.state in ("CANCELLED", "PREEMPTED", "DEADLINE"):
            return Verdict.INTERRUPTED, (
                f"Slurm job {allocation.job_id} was {info.state.lower()} from outside the kit"
            )
        if info.ended:
            return Verdict.FAILED, f"Slurm job {allocation.job_id} ended: {info.state or 'gone'}"
        return None

    def _stop(self, step: Step, allocation: Allocation | None) -> None:
        """srun's own cancel (SIGTERM: the step's tasks are killed on every node), then scancel
        of the step and SIGKILL if it does not end."""
        process = step.process
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                if allocation is not None:
                    self._scancel_steps(allocation)
                process.kill()
                process.wait(timeout=30)

    def _scancel_steps(self, allocation: Allocation) -> None:
        try:
            out = client.slurm("squeue", "--noheader", "--steps", f"--jobs={allocation.job_id}",
                               "--format=%i %j")  # fmt: skip
        except client.SlurmError:
            return
        for line in out.splitlines():
            step_id, _, name = line.strip().partition(" ")
            if name.startswith("dlperf-") and name != "dlperf-container":
                try:
                    client.slurm("scancel", "--signal=KILL", step_id)
                except client.SlurmError:
                    pass

    def _conclude(
        self, step: Step, allocation: Allocation | None, verdict: Verdict, detail: str
    ) -> tuple[dict[int, int | None], Verdict, str]:
        """Per-node exit codes from srun's messages, and the verdict they (or the job) give."""
        messages = step.srun_log.read_text(errors="replace") if step.srun_log.exists() else ""
        codes: dict[int, int | None] = {}
        failures: list[tuple[int, str, int | None]] = []  # node index, what, exit code
        for line in messages.splitlines():
            exited = _TASK_EXIT.search(line)
            if exited:
                for task in _task_ids(exited.group(2)):
                    node = task // step.tasks_per_node
                    code = int(exited.group(3))
                    failures.append((node, f"exit {code}", code))
                continue
            signalled = _TASK_SIGNAL.search(line)
            if signalled:
                for task in _task_ids(signalled.group(2)):
                    failures.append((task // step.tasks_per_node, signalled.group(3).lower(), None))
        rc = step.process.returncode
        for index in range(len(step.logs)):
            codes[index] = 0 if rc == 0 else None
        for node, _what, code in failures:
            if code is not None and codes.get(node) in (None, 0):
                codes[node] = code
        if verdict != Verdict.OK:
            return codes, verdict, detail
        if rc == 0:
            return codes, Verdict.OK, ""
        if allocation is not None:
            found = self._job_or_node_fault(allocation, step.nodes)
            if found is None and not self.inside_allocation:
                # The job's state can lag srun's exit by a moment (cancel, node failure).
                time.sleep(1.0)
                found = self._job_or_node_fault(allocation, step.nodes)
            if found is not None:
                return codes, found[0], found[1]
        first = next((f for f in failures if f[2] not in (None, 0)), None) or (
            failures[0] if failures else None
        )
        if first is None:
            return codes, Verdict.FAILED, f"srun exit {rc} (see srun.log)"
        node, what, code = first
        where = f"node {step.nodes[node] if node < len(step.nodes) else node}"
        said = [line.split("dlperf-slurm: ", 1)[1] for line in messages.splitlines()
                if "dlperf-slurm: " in line]  # fmt: skip
        if said:  # the step script's own reason (outside the OCI bundle)
            return codes, Verdict.FAILED, f"{where}: {what}: {said[0]}"
        if code == EXIT_OOM:
            return codes, Verdict.OOM, f"{where}: out of memory (exit {EXIT_OOM})"
        return codes, Verdict.FAILED, f"{where}: {what}"


class _Failure(Exception):
    def __init__(self, verdict: Verdict, detail: str) -> None:
        super().__init__(detail)
        self.verdict, self.detail = verdict, detail


def _join(argv: list[str]) -> str:
    return shlex.join(argv)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
