"""The typed repeat plan: everything a runtime needs to run one repeat of one case.

The runner (and the batch=max search, and the all-reduce probe) build a :class:`RepeatPlan`
(``driver.core.plan.plan_repeat``) and hand the whole of it to ``Runtime.run``: a runtime never
re-derives the case, the framework, the device count or the session from paths, argv or the
environment.

These types are what a runtime receives, so they live with the runtimes; they import no
runtime and no planning code: the runtimes read plans without importing the planning code,
which itself needs the plug-in registries.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from driver.model.case import Case


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


@dataclass(frozen=True)
class RepeatPlan:
    case: Case
    repeat: int  # 1-based; 0 for a batch=max probe or an all-reduce probe
    batch_size: int  # the resolved per-device batch
    commands: tuple[NodeCommand, ...]  # one per node, rank environment included
    repeat_dir: Path  # node<i>.log files and record.json go here
    session_root: Path  # results/<session>
    parser: str  # the log parser plug-in of the case
    probe: bool = False  # a short probe run (batch search, all-reduce), not a measured repeat

    @property
    def framework(self) -> str:
        return self.case.framework

    @property
    def source(self) -> str:
        return self.case.source

    @property
    def timeout_s(self) -> float:
        return self.case.timeout_s

    @property
    def case_id(self) -> str:
        return self.case.id

    @property
    def devices_per_node(self) -> int:
        return self.case.topology.devices_per_node

    @property
    def label(self) -> str:
        """How messages name this repeat."""
        what = "probe" if self.probe else f"repeat {self.repeat}"
        return f"{self.case.id} {what} ({self.repeat_dir.name})"
