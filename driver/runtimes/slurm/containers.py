"""The container platforms under Slurm: none, pyxis, and Slurm's own OCI containers.

``slurm.container`` picks one (``auto``: pyxis when ``srun --help`` lists ``--container-image``,
else none):

- **none**: the nodes' own Python, the kit's framework venvs at the same paths as here (a
  shared file system);
- **pyxis**: the framework's GPU base image by its ``images.lock`` digest (or ``slurm.image``),
  one named container per node made by a first step and reused by every repeat of the job, the
  kit's checkout and the session folder mounted at their own paths, plus ``slurm.mounts``;
- **oci**: Slurm's own containers (``srun --container=<bundle>``, ``oci.conf`` on the nodes
  calling runc or crun): a bundle per session made from ``slurm.oci_bundle`` or from the local
  image ``slurm.oci_image`` (exported once per image), the checkout and the session folder
  mounted at their own paths (``driver/images/oci.py``); the image's ``python3`` runs the step.

An upstream source's code is only in its own image (``src-<source>``, built by ``dlperf images
build``), so a source's step runs that image, never the framework's: under pyxis the entry
``slurm.image.<source>`` (a registry image in enroot's form, or a squashfs file the nodes read),
else a squashfs the kit imports once per image from the local build (``enroot import
dockerd://``) into ``.dlperf/enroot`` of the checkout (the nodes see it: a shared file system);
under Slurm's OCI containers ``slurm.oci_bundle.<source>`` or ``slurm.oci_image.<source>``,
else the local build exported into a bundle like any image. Its node command (the source's
``sh -c`` wrapper) runs unchanged. ``none`` runs no image: a source is refused there, except a
PyPI source (``<source>-pypi``), whose environment is ``.venvs/<source>`` beside the kit's.

Here: the interface the Slurm transport asks (:class:`SlurmPlatform`), none, and a source's
image (:class:`SourceImage`); pyxis is ``pyxis.py``, Slurm's OCI containers ``oci.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from driver.cluster.slurm import SlurmConfig
from driver.runtimes.base import Verdict
from driver.runtimes.containers import ContainerPlatform
from driver.runtimes.slurm.job import Allocation, Failure
from driver.runtimes.slurm.render import Container, OciContainer

if TYPE_CHECKING:
    from driver.runtimes.plan import RepeatPlan


def image_key(plan: RepeatPlan) -> str:
    """What picks a step's image: the framework (the kit's own scripts) or the upstream source
    (its code is in its own image). Also the key of ``slurm.image``/``oci_*`` entries."""
    return plan.framework if plan.source == "dlperf" else plan.source


UNBUILT = "<unbuilt: base not resolved in images.lock>"


@dataclass(frozen=True)
class SourceImage:
    """The image an upstream source's code is in, as ``dlperf images build <name>`` makes it
    from today's inputs (its Dockerfile, its base's images.lock digest)."""

    source: str
    name: str  # src-<source>
    tag: str | None  # dlperf/src-<source>:<inputs hash>; None: not plannable (``why``)
    why: str = ""

    @classmethod
    def of(cls, source: str) -> SourceImage:
        from driver.images.build import BuildOptions, plan_images
        from driver.images.lock import LockError
        from driver.sources.base import SOURCES

        name = str(SOURCES.get(source)().image)
        try:
            tag = plan_images([name], BuildOptions(log=lambda _line: None))[name].tag
        except LockError as error:  # e.g. an NGC base whose digest is not resolved yet
            return cls(source, name, None, str(error))
        return cls(source, name, tag)

    @property
    def shown(self) -> str:
        """The tag, or what stands for it in a dry run."""
        return self.tag or f"dlperf/{self.name}:{UNBUILT}"

    def built(self) -> str:
        """Its tag, built on this host; a ``job.Failure`` with the fix otherwise."""
        from driver.images.build import BuildOptions, resolve_image
        from driver.images.lock import LockError

        try:
            return resolve_image(self.name, BuildOptions(log=lambda _line: None)).tag
        except (LockError, OSError) as error:
            raise Failure(
                Verdict.FAILED, f"source {self.source}: its image {self.name}: {error}"
            ) from None
        except Exception as error:  # noqa: BLE001 - the docker SDK's errors: no engine here
            raise Failure(
                Verdict.FAILED,
                f"source {self.source}: its image {self.name} cannot be read from docker here "
                f"({error}); build it where docker runs (`dlperf images build {self.name}`)",
            ) from None


class SlurmPlatform(ContainerPlatform):
    """A container platform as the Slurm transport asks it: the flags a step's ``srun`` line
    carries, what is made before the first step that needs it (once per job, or per session),
    and what the step's script must know."""

    # The step script picks each node's command by its hostname instead of SLURM_NODEID.
    by_hostname: ClassVar[bool] = False
    # The repeat's timing that measures :meth:`prepare` (when it made something).
    prepare_timing: ClassVar[str] = ""

    def __init__(self, config: SlurmConfig, where: str, printer: Callable[[str], None]) -> None:
        self.config = config
        self.where = where  # the cluster file, for messages
        self.printer = printer

    def container(self, plan: RepeatPlan, session_root: Path) -> Container | OciContainer | None:  # noqa: ARG002
        """What a step's ``srun`` line adds (None: no flag)."""
        return None

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


class NoContainer(SlurmPlatform):
    name = "none"
