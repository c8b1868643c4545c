"""One node's part of a repeat over SSH (what the SSH transport asks its container platform about).

A node's launch is one command on one SSH channel: the platform's start command, then, in the
same shell, its collection (what the node's process left, then its log byte for byte) between
two markers on the channel's stdout, then the start command's exit status as the channel's.
A node stopped before its collection ran gets the same collection as a command of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from driver.cluster.code import CodeBundle
from driver.cluster.remote import Remote
from driver.runtimes.plan import NodeCommand

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
    source: str = "dlperf"
    # node -> the devices its pre-flight counted (None: could not count): a later case with
    # more ranks per node is judged by the same rule (preflight.devices_check), not skipped.
    devices: dict[str, int | None] = field(default_factory=dict)
