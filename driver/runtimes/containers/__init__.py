"""The container-platform axis: what a node's command runs inside, whichever transport runs it.

A runtime is a transport (how node commands reach the nodes: SSH, Slurm) crossed with a
container platform (what each command runs inside), the way ReFrame keeps its schedulers apart
from its container platforms. One setting picks the platform: ``container:`` at the top of the
inventory (SSH) or ``slurm.container`` (Slurm). Each platform is one module here, registered in
:data:`PLATFORMS`, and says which transports it runs under (``transports``; the pairs:
docs/clusters.md, "Container platforms").

:class:`ContainerPlatform` is the one interface. What every transport asks: what a node's
process sees (its interpreter, where the kit's code is), the command wrapped (:meth:`wrap`),
whether an upstream source's own image can run, what is refused before any node is asked, what
the session made and must remove. Then each transport's own questions: over SSH, shell commands
a node runs to prepare, start, stop and collect its process; under Slurm, the flags a step's
``srun`` carries and what is made before it. A platform answers those of the transports it
lists; :func:`platform_for` refuses any other pair before anything starts.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from driver.cluster.remote import shell
from driver.registry import Registry, UnknownPlugin
from driver.runtimes.base import RuntimeConfigError
from driver.runtimes.ssh.launch import COLLECTED, COLLECTED_END

if TYPE_CHECKING:
    from driver.cluster.inventory import Node
    from driver.cluster.preflight import Engine
    from driver.cluster.remote import Remote
    from driver.cluster.slurm import SlurmConfig
    from driver.runtimes.plan import RepeatPlan
    from driver.runtimes.slurm.job import Allocation
    from driver.runtimes.ssh.launch import Launch, Prepared  # noqa: TC004 - beside the constants


@dataclass
class Context:
    """What a transport hands the platform it makes: where the setting came from (for
    messages), and its own parts (SSH: the nodes' connections; Slurm: the ``slurm:`` section)."""

    where: str
    remotes: list[Remote] = field(default_factory=list)
    slurm: SlurmConfig | None = None
    printer: Callable[[str], None] = print
    build_options: Any = None  # driver.images.build.BuildOptions; None: defaults


class ContainerPlatform:
    """What a node's process runs inside; the defaults are those of no container at all."""

    name: ClassVar[str] = "none"  # in every record's facts
    transports: ClassVar[tuple[str, ...]] = ()  # ssh, slurm: where this platform runs
    # Where the kit's code is mounted inside; None: at its own path (or not mounted at all).
    mount_point: ClassVar[str | None] = None
    # An upstream source's code is only in its own image (``src-<source>``): only a platform
    # that runs that image can run it.
    runs_sources: ClassVar[bool] = False
    # The node's process sees only what is mounted (a case's data_dir must be among them).
    sees_only_mounts: ClassVar[bool] = False
    # The interpreter of the frameworks' scripts in every image; None: the host's.
    image_python: ClassVar[str | None] = None

    def __init__(self, context: Context) -> None:
        self.context = context
        self.where = context.where
        self.printer = context.printer

    @property
    def config(self) -> SlurmConfig:
        """The ``slurm:`` section (a platform under Slurm)."""
        assert self.context.slurm is not None
        return self.context.slurm

    def data_mounts(self, plan: RepeatPlan) -> list[str]:
        """The case's data folder, for a Slurm container that sees only what is mounted: at its
        own path, read-only, unless a ``slurm.mounts`` entry already holds it (the script
        reads ``--data-dir`` inside the container; unmounted, it found no data)."""
        data = plan.case.data_dir
        if not data:
            return []
        from driver.cluster.inventory import inside_folder

        targets = [mount.split(":")[1] for mount in self.config.mounts if ":" in mount]
        if any(inside_folder(data, target) for target in targets):
            return []
        return [f"{data}:{data}:ro"]

    # -- every transport -------------------------------------------------------------------
    def python(self, framework: str) -> str | None:  # noqa: ARG002 - the same in every image
        """The interpreter of ``framework``'s scripts inside, or None: the host's (the
        transport knows where: the inventory's ``python``, the kit's venvs)."""
        return self.image_python

    def workdir(self, code: str) -> str:
        """The kit's code folder (``code`` where it lies) as the node's process sees it."""
        return self.mount_point or code

    def wrap(
        self, argv: list[str], image: str | None, mounts: Sequence[str], workdir: str, gpus: bool
    ) -> list[str]:  # noqa: ARG002 - a platform that wraps the command reads them
        """``argv`` as the node runs it inside ``image`` with ``mounts`` (``src:dst[:ro]``), in
        ``workdir``, given the node's GPUs or not; the environment passes through. Unchanged
        for a platform that holds its process some other way (none, an engine, srun's flags)."""
        return argv

    def check(self, session_root: Path) -> None:
        """Refuse what this platform cannot run for the session at ``session_root`` (a one-line
        ``RuntimeConfigError`` naming the file, field and fix), before any node is asked."""

    def close(self) -> None:
        """Remove what the session made for this platform (nothing, unless it made files)."""

    # -- over SSH: shell commands a node runs over its own connection ----------------------
    def engine(self, remote: Remote, image: str | None) -> Engine | None:  # noqa: ARG002
        """What pre-flight asks the node of this platform's engine (None: the node's Python)."""
        return None

    def image_for(
        self, framework: str, node: Node, source: str = "dlperf", image: str = "pinned"
    ) -> str | None:  # noqa: ARG002
        """The image ``node`` runs the case in (None: no image); ``image``: an upstream
        source's case's choice, pinned or current (``driver.sources.base.source_image``)."""
        return None

    def probe_command(self, remote: Remote, code: str, image: str | None, framework: str) -> str:
        """The command that runs the provenance probe on the node, inside."""
        raise NotImplementedError

    def sweep(self, remote: Remote, label: str) -> str:
        """Remove what this session left on the node earlier; returns what was removed."""
        raise NotImplementedError

    def create(self, launch: Launch, env: dict[str, str], prepared: Prepared, labels: dict) -> None:
        """Make the node's process ready to start (before every node is started at once)."""
        raise NotImplementedError

    def start_command(self, launch: Launch) -> str:
        """What the launch's channel runs: the process, then its collection (:meth:`collecting`)."""
        raise NotImplementedError

    def command_line(
        self,
        launch: Launch,
        env: dict[str, str],
        code: str,
        framework: str,
        source: str,
        image: str = "pinned",
    ) -> str:
        """The shell command a launch runs on its node, as ``--dry-run`` shows it."""
        raise NotImplementedError

    def stop(self, launch: Launch) -> None:
        raise NotImplementedError

    def collect_script(self, launch: Launch) -> str:
        """Shell commands that print, on stdout, what the node's process left (container
        state, run time) and its log byte for byte (:meth:`take_collected` reads them), then
        remove its container and run folder. They run at the end of the launch's own command
        (:meth:`collecting`: no second SSH session per node per repeat) or, when that command
        was stopped before them, as a command of their own (the transport's ``collect_node``)."""
        raise NotImplementedError

    def take_collected(self, launch: Launch, block: bytes, local: Path) -> None:
        """Read a collection block: facts into ``launch.facts``, the log into ``local``."""
        raise NotImplementedError

    def collecting(self, launch: Launch, command: str, after_exit: str = "") -> str:
        """``command``, then in the same shell its collection block between two markers
        (the end marker is printed once the log has been sent whole) and ``command``'s exit
        status as the channel's. ``after_exit``: shell commands run first, e.g. a stamp."""
        return f"{command}; rc=$?; {after_exit}{self.collection(launch)}; {self.exit_as(launch)}"

    def exit_as(self, launch: Launch) -> str:  # noqa: ARG002 - the process groups' differs
        """How the launch's shell ends after its collection: with the command's status."""
        return "exit $rc"

    def collection(self, launch: Launch) -> str:
        """The collection block between its markers, then the run folder removed."""
        start, end = f"{COLLECTED} {launch.run_id}", f"{COLLECTED_END} {launch.run_id}"
        return (
            f"printf '%s\\n' {shell([start])}; {self.collect_script(launch)}; "
            f"printf '\\n%s\\n' {shell([end])}; rm -rf {shell([launch.run_dir])}"
        )

    # -- under Slurm: what a step's srun line and its job carry ----------------------------
    # The step script picks each node's command by its hostname instead of SLURM_NODEID.
    by_hostname: ClassVar[bool] = False
    # The repeat's timing that measures :meth:`prepare` (when it made something).
    prepare_timing: ClassVar[str] = ""

    def srun_flags(self, plan: RepeatPlan, session_root: Path) -> list[str]:  # noqa: ARG002
        """What a step's ``srun`` line adds."""
        return []

    def step_argv(self, plan: RepeatPlan, argv: list[str], session_root: Path) -> list[str]:  # noqa: ARG002
        """A node's command as the step's script runs it (:meth:`wrap`, for a platform that
        wraps it)."""
        return argv

    def refused(self, plan: RepeatPlan, *, submitting: bool = False) -> str:  # noqa: ARG002
        """Why this platform on this cluster cannot run the plan ("" when it can), asked
        before any job is submitted (a plug-in too old for what the plan asks of it);
        ``submitting``: for a real run, not a dry run (which asks nothing of the network)."""
        return ""

    def prepare(self, plan: RepeatPlan, allocation: Allocation) -> dict[str, Any] | None:  # noqa: ARG002
        """Make what the plan's step needs before it runs; the facts to record ({}: none), or
        None when nothing was to be made. Raises ``job.Failure``."""
        return None

    def describe_prepare(self, plan: RepeatPlan, allocation: Allocation) -> list[str]:  # noqa: ARG002
        """What :meth:`prepare` would do, as ``--dry-run`` lines."""
        return []

    def step_guard(self) -> str:
        """A first line of the step's script that must pass ("" for none)."""
        return ""

    def step_environment(self, plan: RepeatPlan) -> dict[str, str]:  # noqa: ARG002
        """Environment every node command gets unless it sets its own."""
        return {}


PLATFORMS: Registry[type[ContainerPlatform]] = Registry("container platform")


def _load() -> None:
    """Every platform module of this package, once (each registers itself)."""
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


def platform_for(transport: str, name: str, context: Context, setting: str) -> ContainerPlatform:
    """The platform ``name`` (from ``setting`` in ``context.where``) made for ``transport``; a
    one-line RuntimeConfigError naming the transport, the platform and what works otherwise,
    before anything starts."""
    _load()
    works = [each for each in PLATFORMS.names() if transport in PLATFORMS.get(each).transports]
    try:
        platform = PLATFORMS.get(name)
    except UnknownPlugin:
        raise RuntimeConfigError(
            f"{context.where}: {setting}: {name!r} is not a container platform; under "
            f"{transport}: {', '.join(works)}"
        ) from None
    if transport not in platform.transports:
        runs = ", ".join(platform.transports) or "no transport"
        raise RuntimeConfigError(
            f"{context.where}: {setting}: the {platform.name} platform does not run over "
            f"{transport} (it runs under {runs}); over {transport} use one of {', '.join(works)}"
        )
    return platform(context)
