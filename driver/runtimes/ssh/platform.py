"""What a container platform answers over SSH: the shell commands a node runs, over its own
connection, to prepare, start, stop and collect its process.

Implemented only by the platforms that run over SSH (none, apptainer, docker, podman);
``driver.runtimes.containers.platform_for`` refuses any other over this transport.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING

from driver.cluster.remote import shell
from driver.runtimes.containers import ContainerPlatform
from driver.runtimes.ssh.launch import COLLECTED, COLLECTED_END

if TYPE_CHECKING:
    from driver.cluster.inventory import Node
    from driver.cluster.preflight import Engine
    from driver.cluster.remote import Remote
    from driver.runtimes.ssh.launch import Launch, Prepared


class SshPlatform(ContainerPlatform, ABC):
    """A platform's life cycle on a node over SSH."""

    transport = "ssh"

    def engine(self, remote: Remote, image: str | None) -> Engine | None:  # noqa: ARG002
        """What pre-flight asks the node of this platform's engine (None: the node's Python)."""
        return None

    def image_for(
        self, framework: str, node: Node, source: str = "dlperf", image: str = "pinned"
    ) -> str | None:  # noqa: ARG002
        """The image ``node`` runs the case in (None: no image); ``image``: an upstream
        source's case's choice, pinned or current (``driver.sources.base.source_image``)."""
        return None

    @abstractmethod
    def probe_command(self, remote: Remote, code: str, image: str | None, framework: str) -> str:
        """The command that runs the provenance probe on the node, inside."""

    @abstractmethod
    def sweep(self, remote: Remote, label: str) -> str:
        """Remove what this session left on the node earlier; returns what was removed."""

    @abstractmethod
    def create(self, launch: Launch, env: dict[str, str], prepared: Prepared, labels: dict) -> None:
        """Make the node's process ready to start (before every node is started at once)."""

    @abstractmethod
    def start_command(self, launch: Launch) -> str:
        """What the launch's channel runs: the process, then its collection (:meth:`collecting`)."""

    @abstractmethod
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

    @abstractmethod
    def stop(self, launch: Launch) -> None:
        """End the launch's process on its node (its collection still follows)."""

    @abstractmethod
    def collect_script(self, launch: Launch) -> str:
        """Shell commands that print, on stdout, what the node's process left (container
        state, run time) and its log byte for byte (:meth:`take_collected` reads them), then
        remove its container and run folder. They run at the end of the launch's own command
        (:meth:`collecting`: no second SSH session per node per repeat) or, when that command
        was stopped before them, as a command of their own (the transport's ``collect_node``)."""

    @abstractmethod
    def take_collected(self, launch: Launch, block: bytes, local: Path) -> None:
        """Read a collection block: facts into ``launch.facts``, the log into ``local``."""

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
