"""The container-platform axis: what a node's command runs inside, whichever transport runs it.

A runtime is a transport (how node commands reach the nodes: SSH, Slurm) crossed with a
container platform (what each command runs inside), the way ReFrame keeps its schedulers apart
from its container platforms. One setting picks the platform: ``container:`` at the top of the
inventory (SSH) or ``slurm.container`` (Slurm). Each platform is one module here, registered in
:data:`PLATFORMS` (the pairs: docs/clusters.md, "Container platforms").

:class:`ContainerPlatform` is the transport-neutral core every platform implements: what a
node's process sees (its interpreter, where the kit's code is), the command wrapped
(:meth:`~ContainerPlatform.wrap`), whether an upstream source's own image can run, what is
refused before any node is asked, what the session made and must remove. Each transport adds
its own interface, implemented only by the platforms that run under it: over SSH
(``driver.runtimes.ssh.platform.SshPlatform``) the shell commands a node runs to prepare,
start, stop and collect its process; under Slurm (``driver.runtimes.slurm.platform.SlurmPlatform``)
the flags a step's ``srun`` carries and what is made before it. A platform's transports are the
interfaces it implements; :func:`platform_for` refuses any other pair before anything starts.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from driver.registry import Registry, UnknownPlugin
from driver.runtimes.base import RuntimeConfigError

if TYPE_CHECKING:
    from driver.cluster.remote import Remote
    from driver.cluster.slurm import SlurmConfig


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
    # ssh, slurm: where this platform runs, the ``transport`` of each transport interface it
    # implements (set for each class from its bases).
    transports: ClassVar[tuple[str, ...]] = ()
    transport: ClassVar[str] = ""  # a transport interface's own
    # Where the kit's code is mounted inside; None: at its own path (or not mounted at all).
    mount_point: ClassVar[str | None] = None
    # An upstream source's code is only in its own image (``src-<source>``): only a platform
    # that runs that image can run it.
    runs_sources: ClassVar[bool] = False
    # The node's process sees only what is mounted (a case's data_dir must be among them).
    sees_only_mounts: ClassVar[bool] = False
    # The interpreter of the frameworks' scripts in every image; None: the host's.
    image_python: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.transports = tuple(
            dict.fromkeys(
                vars(base)["transport"] for base in cls.__mro__ if vars(base).get("transport")
            )
        )

    def __init__(self, context: Context) -> None:
        self.context = context
        self.where = context.where
        self.printer = context.printer

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


PLATFORMS: Registry[type[ContainerPlatform]] = Registry("container platform")


def _load() -> None:
    """Every platform module of this package, once (each registers itself)."""
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


Platform = TypeVar("Platform", bound=ContainerPlatform)


def platform_for(interface: type[Platform], name: str, context: Context, setting: str) -> Platform:
    """The platform ``name`` (from ``setting`` in ``context.where``) made for the transport
    whose ``interface`` it must implement; a one-line RuntimeConfigError naming the transport,
    the platform and what works otherwise, before anything starts."""
    _load()
    transport = interface.transport
    works = [each for each in PLATFORMS.names() if issubclass(PLATFORMS.get(each), interface)]
    try:
        platform = PLATFORMS.get(name)
    except UnknownPlugin:
        raise RuntimeConfigError(
            f"{context.where}: {setting}: {name!r} is not a container platform; under "
            f"{transport}: {', '.join(works)}"
        ) from None
    if not issubclass(platform, interface):
        runs = ", ".join(platform.transports) or "no transport"
        raise RuntimeConfigError(
            f"{context.where}: {setting}: the {platform.name} platform does not run over "
            f"{transport} (it runs under {runs}); over {transport} use one of {', '.join(works)}"
        )
    return platform(context)
