"""The runtime plug-in interface.

A runtime executes one repeat of one case, given as a whole typed plan
(``driver.core.repeatplan.RepeatPlan``): a command per node, started together, each node's
stdout+stderr written to its own raw log under the repeat folder, all stopped on the first
failure or on the timeout, nothing left running afterwards. Runtimes register in
``driver.registry.RUNTIMES`` and are built only through ``driver.runtimes.factory.make_runtime``.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from driver.frameworks.base import Framework
    from driver.runtimes.plan import RepeatPlan


def driver_cpu_seconds() -> float:
    """CPU seconds this driver process has used so far: all its threads, and the commands it
    ran and has reaped (``srun`` under Slurm). Its difference over a repeat is the
    kit's own cost of that repeat, which a busy host's wall clock cannot show (the cost curve
    on 2 shared cores: the nodes' processes take the CPUs the driver waits on)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


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


class Runtime(Protocol):
    name: str

    def node_addresses(self, count: int) -> list[tuple[str, str]]:
        """(node name, address for collective traffic) of the first ``count`` nodes; the first
        is the master. Raises ValueError naming the inventory when it has fewer nodes."""
        ...

    def python(self, framework: Framework) -> str:
        """The interpreter that runs ``framework``'s scripts in this runtime."""
        ...

    def environment(self, framework: Framework) -> dict[str, str]:
        """Environment this runtime adds to every node command of ``framework`` (may be {})."""
        ...

    def workdir(self) -> str:
        """The repository root as the node's processes see it (scripts are relative to it)."""
        ...

    def describe(self, plan: RepeatPlan) -> list[str]:
        """One line per node: what a repeat of this plan runs there (``--dry-run``)."""
        ...

    def run(self, plan: RepeatPlan) -> RepeatOutcome:
        """Run every node's command to completion (or failure/timeout); never raises for a
        failing command: the failure is the verdict. Must leave no process/container behind,
        also when interrupted (KeyboardInterrupt is re-raised after cleanup)."""
        ...

    def clean_leftovers(self, session_root: Path) -> list[str]:
        """End what an earlier, killed run of this session left running (processes,
        containers); one message per leftover ended. Called before a session (re)starts."""
        ...


class RuntimeConfigError(ValueError):
    """A runtime cannot be built from what the command line gave (clear, one line)."""
