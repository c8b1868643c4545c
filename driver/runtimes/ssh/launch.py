"""One node's part of a repeat over SSH, and what the SSH transport asks a container platform.

A node's launch is one command on one SSH channel: the platform's start command, then, in the
same shell, its collection (what the node's process left, then its log byte for byte) between
two markers on the channel's stdout, then the start command's exit status as the channel's.
A node stopped before its collection ran gets the same collection as a command of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from driver.cluster.code import CodeBundle
from driver.cluster.remote import Remote, shell
from driver.runtimes.containers import ContainerPlatform
from driver.runtimes.plan import NodeCommand

if TYPE_CHECKING:
    from driver.cluster.inventory import Node

# The lines around a node's collection block (what its process left, then its log byte for byte)
# on the launch channel's stdout, or on the separate collection command's.
COLLECTED = "dlperf-collected"
COLLECTED_END = "dlperf-collected-end"


@dataclass
class Launch:
    """One node's part of a repeat."""

    index: int
    remote: Remote
    command: NodeCommand
    run_id: str  # unique: container name / run folder name
    run_dir: str  # on the node: <scratch>/runs/<session label>/<run id>
    channel: Any = None  # paramiko Channel attached to the process
    exit_code: int | None = None
    lost: str | None = None  # why the node dropped off, when it did
    facts: dict[str, Any] = field(default_factory=dict)  # inspect results: OOM, times, IDs
    start_command: str = ""  # what the attached channel runs, when create() prepares it
    output: bytearray = field(default_factory=bytearray)  # the launch channel's stdout so far
    output_ended: bool = False  # its end (EOF) came: ``output`` is all the node will send

    @property
    def log(self) -> str:
        return f"{self.run_dir}/node.log"

    def read_channel(self) -> bool:
        """Take what the launch channel has sent so far (without waiting); True once its
        stdout has ended. Read while the node runs, so that the channel's window never fills;
        its stderr holds only the shell's own complaints (the process writes to its log)."""
        channel = self.channel
        if channel is None:
            return False
        while channel.recv_ready():
            self.output.extend(channel.recv(65536))
        while channel.recv_stderr_ready():
            channel.recv_stderr(65536)
        if (channel.eof_received or channel.closed) and not channel.recv_ready():
            self.output_ended = True
        return self.output_ended

    @property
    def ended(self) -> bool:
        """The node's command has exited and everything it wrote has arrived."""
        return self.channel is not None and self.channel.exit_status_ready() and self.output_ended

    def collected_block(self, output: bytes | bytearray | None = None) -> bytes | None:
        """The collection block from ``output`` (default: the launch channel's, once ended):
        the bytes between the start and end markers, or None when they are not both there
        (the command stopped before its collection ran, or during it)."""
        if output is None:
            if not self.output_ended:
                return None
            output = self.output
        start = f"{COLLECTED} {self.run_id}\n".encode()
        end = f"\n{COLLECTED_END} {self.run_id}\n".encode()
        begin, finish = output.find(start), output.rfind(end)
        if begin < 0 or finish < begin + len(start):
            return None
        return bytes(output[begin + len(start) : finish])


@dataclass
class Prepared:
    bundle: CodeBundle
    code_dirs: dict[str, str]  # node -> code folder on that node
    image: dict[str, str]  # node -> image ID (docker runtime)
    provenance: dict[str, dict[str, Any]]
    seconds: float
    framework: str = "calibration"
    # node -> the devices its pre-flight counted (None: could not count): a later case with
    # more ranks per node is judged by the same rule (preflight.devices_check), not skipped.
    devices: dict[str, int | None] = field(default_factory=dict)


class SshPlatform(ContainerPlatform):
    """A container platform as the SSH transport asks it: shell commands a node runs over its
    own connection, to prepare, start, stop and collect its process, and to sweep what an
    earlier run of the session left there."""

    preflight_kind: ClassVar[str]  # what pre-flight checks on a node: docker | process

    def image_for(self, framework: str, node: Node, source: str = "dlperf") -> str | None:  # noqa: ARG002
        """The image ``node`` runs the case in (None: no image)."""
        return None

    def probe_command(
        self, remote: Remote, prepared_code: str, image: str | None, framework: str
    ) -> str:
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
        self, launch: Launch, env: dict[str, str], code: str, framework: str, source: str
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
