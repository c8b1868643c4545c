"""An upstream source's image as the Slurm platforms run it (pyxis, Slurm's OCI containers).

An upstream source's code is only in its own image (``src-<source>``, built by ``dlperf images
build``; a case with ``image: current`` runs the source's current image instead, whose
settings' key is ``<source>-current``), so a source's step runs that image, never the
framework's: under pyxis the entry ``slurm.image.<source>`` (a registry image in enroot's
form, or a squashfs file the nodes read), else a squashfs the kit imports once per image from
the local build (``enroot import dockerd://`` from docker's store, ``podman://`` from
podman's: the engine holding it) into ``.dlperf/enroot`` of the checkout (the nodes see it: a
shared file system); under Slurm's OCI containers ``slurm.oci_bundle.<source>``
or ``slurm.oci_image.<source>``, else the local build exported into a bundle like any image. Its
node command (the source's ``sh -c`` wrapper) runs unchanged. ``none`` runs no image: a source
is refused there, except a PyPI source (``<source>-pypi``), whose environment is
``.venvs/<source>`` beside the kit's. The platforms that read it are ``pyxis.py`` and
``oci.py`` beside this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from driver.runtimes.base import Failure, Verdict

if TYPE_CHECKING:
    from driver.runtimes.plan import RepeatPlan


def image_key(plan: RepeatPlan) -> str:
    """What picks a step's image: the framework (the kit's own scripts) or the upstream source's
    image the case asks for (its code is in its own image: ``<source>`` pinned,
    ``<source>-current`` current). Also the key of ``slurm.image``/``oci_*`` entries."""
    from driver.sources.base import image_key as source_key

    return plan.framework if plan.source == "dlperf" else source_key(plan.source, plan.case.image)


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
    def of(cls, source: str, image: str = "pinned") -> SourceImage:
        """``image``: the case's choice, pinned or current (``sources.base.source_image``)."""
        from driver.images.build import BuildOptions, plan_images
        from driver.images.lock import LockError
        from driver.sources.base import source_image

        name = source_image(source, image)
        try:
            tag = plan_images([name], BuildOptions(log=lambda _line: None))[name].tag
        except LockError as error:  # e.g. an NGC base whose digest is not resolved yet
            return cls(source, name, None, str(error))
        return cls(source, name, tag)

    @property
    def shown(self) -> str:
        """The tag, or what stands for it in a dry run."""
        return self.tag or f"dlperf/{self.name}:{UNBUILT}"

    def built(self) -> tuple[str, str]:
        """Its tag, built on this host, and the engine holding it (docker's, else podman's); a
        ``job.Failure`` with the fix otherwise."""
        from driver.images.engine import engines_holding, open_engine
        from driver.images.lock import LockError

        if self.tag is None:
            raise Failure(
                Verdict.FAILED, f"source {self.source}: its image {self.name}: {self.why}"
            )
        try:
            for engine, _found in engines_holding(self.tag):
                return self.tag, engine.name
            open_engine()  # neither engine here: its error names the fixes
        except (LockError, OSError) as error:
            raise Failure(
                Verdict.FAILED, f"source {self.source}: its image {self.name}: {error}"
            ) from None
        except Exception as error:  # noqa: BLE001 - the docker SDK's or podman's own failures
            raise Failure(
                Verdict.FAILED,
                f"source {self.source}: its image {self.name} cannot be read from docker or "
                f"podman here ({error}); build it with one of them (`dlperf images build "
                f"{self.name}`)",
            ) from None
        raise Failure(
            Verdict.FAILED,
            f"source {self.source}: its image {self.tag} ({self.name} with the current inputs) "
            f"is built in neither docker nor podman here; run `dlperf images build {self.name}` "
            "(--engine podman where there is no docker)",
        )

    def engine_shown(self) -> str:
        """For a dry run: the engine holding the image here, else the one that would build it."""
        from driver.images.engine import engine_for

        return engine_for(self.tag)
