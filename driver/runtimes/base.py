"""The runtime plug-in interface.

A runtime executes one repeat of one case: a command per node, started together, each node's
stdout+stderr written to its own raw log under the repeat folder, all stopped on the first
failure or on the timeout, nothing left running afterwards. Registered in
``driver.registry.RUNTIMES``.
"""

from __future__ import annotations

import enum
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from driver.frameworks.base import Framework


class Verdict(str, enum.Enum):
    OK = "ok"
    FAILED = "failed"  # a process exited non-zero
    TIMEOUT = "timeout"  # the repeat ran past its timeout (e.g. a hung rank)
    OOM = "oom"  # a container or process was killed for memory
    NODE_LOST = "node-lost"  # SSH to a node dropped or the node died
    INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM on the head node
    PARSE_ERROR = "parse-error"  # exited 0 but its log does not hold a valid window


# The detail of an interrupted repeat, wherever the interrupt lands (runner or runtime).
INTERRUPTED_DETAIL = "Ctrl-C or SIGTERM on the head node"


@dataclass(frozen=True)
class NodeCommand:
    """What runs on one node: argv plus extra environment, and the node it is meant for."""

    node: str  # inventory name of the node ("local" for the local runtime)
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None


def command_line(command: NodeCommand) -> str:
    """``[node] ENV=... argv``: a node's command as one shell-quoted line (``--dry-run``)."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(command.env.items()))
    return f"[{command.node}] {env} {shlex.join(command.argv)}".strip()


@dataclass
class NodeOutcome:
    node: str
    exit_code: int | None
    log_path: Path
    detail: str = ""


@dataclass
class RepeatOutcome:
    verdict: Verdict
    nodes: list[NodeOutcome]
    started_at: float  # wall clock (time.time) of the launch
    finished_at: float
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # runtime facts (image digest, ...)

    @property
    def wall_s(self) -> float:
        return self.finished_at - self.started_at


class Runtime(Protocol):
    name: str

    def node_addresses(self, count: int) -> list[tuple[str, str]]:
        """(node name, address for collective traffic) of the first ``count`` nodes; the first
        is the master. Raises ValueError naming the inventory when it has fewer nodes."""
        ...

    def python(self, framework: Framework) -> str:
        """The interpreter that runs ``framework``'s scripts in this runtime."""
        ...

    def workdir(self) -> str:
        """The repository root as the node's processes see it (scripts are relative to it)."""
        ...

    def describe(self, framework: str, source: str, commands: list[NodeCommand]) -> list[str]:
        """One line per node: what a repeat of these commands runs there (``--dry-run``)."""
        ...

    def run(self, commands: list[NodeCommand], repeat_dir: Path, timeout_s: float) -> RepeatOutcome:
        """Run every node's command to completion (or failure/timeout); never raises for a
        failing command: the failure is the verdict. Must leave no process/container behind,
        also when interrupted (KeyboardInterrupt is re-raised after cleanup, with the outcome
        written first)."""
        ...
