"""What a container platform answers on this host (the local runtime): the command this host
starts for a node, the image it runs in, and what a repeat or a killed run leaves to remove.

Implemented only by the platforms that run on one workstation (none, apptainer, docker,
podman); picked by ``dlperf run --container`` (``none`` unless given), and
``driver.runtimes.containers.platform_for`` refuses any other. Each node's command stays a
process group of this host that the local runtime starts, watches and stops (for an engine,
its attached client); what this interface adds is what that process is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from driver.runtimes.containers import ContainerPlatform

if TYPE_CHECKING:
    from driver.runtimes.plan import NodeCommand

# Where the setting comes from, for platform_for's messages ("command line: --container: ...").
COMMAND_LINE = "command line"
SETTING = "--container"


@dataclass(frozen=True)
class HostRun:
    """What a node command of a repeat runs with on this host."""

    name: str  # unique per session, repeat and node (a container's name)
    label: str  # the session's (``session_label``): what a resume finds its leftovers by
    image: str | None  # what ``local_image`` gave; None: no image
    mounts: tuple[str, ...]  # ``src:dst[:ro]``: the kit's code, the session, the data
    gpus: bool  # the case takes this host's GPUs


class LocalPlatform(ContainerPlatform, ABC):
    """A platform's part in a run on this host."""

    transport = "local"
    # The node's processes are the started process's own tree, which the telemetry sampler
    # follows; an engine's client is not the parent of what runs in its container.
    tree_on_host: ClassVar[bool] = True

    @abstractmethod
    def local_image(
        self,
        framework: str,
        variant: str,
        source: str = "dlperf",
        choice: str = "pinned",
        *,
        planned: bool = False,
    ) -> str | None:
        """The image this host runs a case of ``framework`` in for a ``variant`` (cpu or gpu)
        host, or an upstream ``source``'s own image (``choice``: pinned or current): its ID,
        or with ``planned`` the tag a build would make, asking no engine (a dry run); None:
        no image."""

    @abstractmethod
    def host_command(self, command: NodeCommand, run: HostRun) -> NodeCommand:
        """``command`` as this host starts it: the same, or its engine's client running it."""

    @abstractmethod
    def remove_runs(self, names: list[str]) -> None:
        """After a repeat, remove what its node commands (``HostRun.name``) may have left
        behind (a container whose client was killed before it ended)."""

    @abstractmethod
    def remove_leftovers(self, label: str) -> list[str]:
        """Remove what an earlier run of the session labelled ``label`` left (a run killed by
        SIGKILL); one message per thing removed."""
