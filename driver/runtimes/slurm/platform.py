"""What a container platform answers under Slurm: the flags a step's ``srun`` line carries,
the node command as the step's script runs it, and what is made before the step.

Implemented only by the platforms that run under Slurm (none, apptainer, pyxis, oci);
``driver.runtimes.containers.platform_for`` refuses any other under this transport.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from driver.runtimes.containers import ContainerPlatform, Context

if TYPE_CHECKING:
    from driver.cluster.slurm import SlurmConfig
    from driver.runtimes.plan import RepeatPlan
    from driver.runtimes.slurm.job import Allocation


class SlurmPlatform(ContainerPlatform):
    """A platform's part in a Slurm step; the defaults are those of srun's own tasks."""

    transport = "slurm"
    # The step script picks each node's command by its hostname instead of SLURM_NODEID.
    by_hostname: ClassVar[bool] = False
    # The repeat's timing that measures :meth:`prepare` (when it made something).
    prepare_timing: ClassVar[str] = ""

    def __init__(self, context: Context) -> None:
        super().__init__(context)
        # The ``slurm:`` section: the Slurm runtime makes its platform with it.
        self.config: SlurmConfig = context.slurm  # type: ignore[assignment]

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
