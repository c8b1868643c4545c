"""The runtime plug-in interface, its registry, and the one way a runtime is built.

A runtime executes one repeat of one case, given as a whole typed plan
(``driver.runtimes.plan.RepeatPlan``): a command per node, started together, each node's
stdout+stderr written to its own raw log under the repeat folder, all stopped on the first
failure or on the timeout, nothing left running afterwards. Runtimes register in
:data:`RUNTIMES` and are built only through :func:`make_runtime`.

A runtime is a transport (this host, SSH, Slurm) crossed with a container platform
(``driver.runtimes.containers``).
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import os
import re
import signal
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from driver.files import write_json
from driver.model.results import INTERRUPTED
from driver.registry import Registry

if TYPE_CHECKING:
    from driver.frameworks.base import Framework
    from driver.model.case import Case
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


@dataclass(frozen=True)
class JobLimit:
    """A session's job's limit, which the session's estimate is checked against before it
    is submitted."""

    time_limit: str  # as the cluster file gives it
    gpus: bool  # a GPU job: one of which nothing can be estimated is not submitted blind
    split: bool  # the runtime starts a new job when a repeat would outlast the current one


class Runtime(ABC):
    """What the session asks of a runtime. Every runtime says how it runs a repeat; the rest
    has the defaults of a runtime with nothing to say: no cluster file, nothing of its own
    in the session folder, nodes other than this host, every case fits, no GPU it can count,
    nothing to check up front, no job limit, nothing held open."""

    name: ClassVar[str]
    # How the runtime uses a cluster file (make_runtime): "required", "optional" or "none".
    cluster_file: ClassVar[str] = "none"
    # Files the runtime writes in the session folder besides the repeats' (sealed with them).
    session_writes: ClassVar[tuple[str, ...]] = ()
    # Folders of the session its own scratch lives in (written outside the kit, not sealed).
    session_scratch: ClassVar[tuple[str, ...]] = ()
    # The node commands run on this host, with the kit's own venvs (made here before a run).
    runs_here: bool = False
    # ``run --python``: the interpreter of every framework on this host (None: not given).
    python_override: str | None = None

    @abstractmethod
    def node_addresses(self, count: int) -> list[tuple[str, str]]:
        """(node name, address for collective traffic) of the first ``count`` nodes; the first
        is the master. Raises ValueError naming the inventory when it has fewer nodes."""

    @abstractmethod
    def python(self, framework: Framework) -> str:
        """The interpreter that runs ``framework``'s scripts in this runtime."""

    @abstractmethod
    def environment(self, framework: Framework) -> dict[str, str]:
        """Environment this runtime adds to every node command of ``framework`` (may be {})."""

    @abstractmethod
    def workdir(self) -> str:
        """The repository root as the node's processes see it (scripts are relative to it)."""

    @abstractmethod
    def describe(self, plan: RepeatPlan) -> list[str]:
        """One line per node: what a repeat of this plan runs there (``--dry-run``)."""

    @abstractmethod
    def run(self, plan: RepeatPlan) -> RepeatOutcome:
        """Run every node's command to completion (or failure/timeout); never raises for a
        failing command: the failure is the verdict. Must leave no process/container behind,
        also when interrupted (KeyboardInterrupt is re-raised after cleanup)."""

    @abstractmethod
    def clean_leftovers(self, session_root: Path) -> list[str]:
        """End what an earlier, killed run of this session left running (processes,
        containers); one message per leftover ended. Called before a session (re)starts."""

    def fit_cases(self, cases: list[Case], topologies_given: bool) -> tuple[list[Case], list[str]]:  # noqa: ARG002
        """The cases this runtime's machines can hold, and one line per case left out."""
        return cases, []

    def has_gpu(self) -> bool:
        """Whether the nodes have a GPU, where the runtime can tell before a repeat runs."""
        return False

    def check_data_dirs(self, data_dirs: set[str]) -> None:
        """Refuse a case's ``data_dir`` the nodes' processes cannot see (one line, the fix)."""
        return  # nothing this runtime can tell up front

    def check_reachable(self) -> None:
        """Refuse a cluster that does not answer, in one line, before any repeat is asked."""
        return  # a repeat's own failure says why

    def job_limit(self) -> JobLimit | None:
        """The wall time the session's job may take (a batch scheduler's); None: no limit."""
        return None

    def disconnect(self) -> None:
        """Close what the runtime holds open between repeats (a later repeat opens it again)."""
        return  # nothing held open

    def close(self) -> None:
        """End what the runtime made for the session (its job)."""
        return  # nothing made


class RuntimeConfigError(ValueError):
    """A runtime cannot be built from what the command line gave (clear, one line)."""


class Failure(Exception):
    """A repeat that could not start (its nodes not prepared, its job or step not made): its
    verdict and why."""

    def __init__(self, verdict: Verdict, detail: str) -> None:
        super().__init__(detail)
        self.verdict, self.detail = verdict, detail


RUNTIMES: Registry[type[Runtime]] = Registry("runtime")


def make_runtime(name: str, *, inventory: Path | str | None = None, **options: Any) -> Runtime:
    """The runtime registered as ``name``, built with its options.

    A runtime class says how it uses a cluster file in ``cluster_file``: ``"required"`` (the
    SSH runtimes: the file lists the nodes), ``"optional"`` (Slurm: its ``slurm:`` section, or
    every default inside an allocation) or ``"none"`` (local: a file given is refused rather
    than silently ignored).
    """
    from driver.plugins import load  # imports every runtime module, which import this one

    load("runtimes")
    runtime_class = RUNTIMES.get(name)
    use = runtime_class.cluster_file
    if use == "required" and not inventory:
        raise RuntimeConfigError(
            f"--runtime {name} needs --inventory FILE (the cluster file; see docs/clusters.md)"
        )
    if use == "none":
        if inventory:
            raise RuntimeConfigError(
                f"--runtime {name} runs on this host and takes no --inventory; "
                "use --runtime docker, process or slurm for a cluster file"
            )
        return runtime_class(**options)
    return runtime_class(inventory, **options)


# -- what the cluster runtimes share -----------------------------------------------------------
def name_slug(text: str, length: int) -> str:
    """``text`` as a name part a container, folder or Slurm job accepts."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")[:length] or "x"


def session_label(root: Path | str) -> str:
    """Names a session on every node and in the queue (container labels, run folders, the
    Slurm job): the results folder's name plus a hash of its path, unique per folder."""
    root = Path(root)
    digest = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:8]
    return f"{name_slug(root.name, 40)}-{digest}"


@contextlib.contextmanager
def ctrl_c_held(*also: signal.Signals) -> Iterator[None]:
    """Ctrl-C (and the signals ``also`` names, e.g. SIGTERM) is ignored inside (on the main
    thread): a repeat's cleanup must finish even if it is pressed again, so that no process,
    container or job outlives the kit."""
    main = threading.current_thread() is threading.main_thread()
    held = (signal.SIGINT, *also) if main else ()
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in held}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def raise_interrupted(repeat_dir: Path, detail: str, extra: dict[str, Any]) -> None:
    """After an interrupted repeat's cleanup: what it found (exit codes, unreachable nodes) is
    kept beside the logs, and the interrupt goes on (the runner records the repeat as
    interrupted from the exception alone)."""
    write_json(repeat_dir / INTERRUPTED, {"detail": detail, "extra": extra})
    raise KeyboardInterrupt
