"""apptainer (Singularity), on this host, over SSH and under Slurm: ``apptainer exec <image>``
around the node's command.

The command runs in the image's root with the kit's code and the session folder (Slurm), the
node's ``data_dir`` and the inventory's ``container.mounts`` (SSH) or ``slurm.mounts`` bound
at their paths, the environment passed through and, given GPUs, ``--nv``. Nothing is held by
an engine: over SSH the kit holds ``apptainer exec`` as the node's process group (as with no
container), under Slurm it is the task srun starts.

The image: over SSH the inventory's ``container.image`` (per framework or ``default``: a
``.sif`` file on every node, or any source apptainer reads, e.g. ``docker://...``); under Slurm
``slurm.image`` the same way, else the framework's local image built here into
``.dlperf/apptainer/<tag>.sif`` in the checkout (a shared file system; on this host, the local
runtime's ``--container apptainer``, always that file, of this host's variant), once per image
(``driver/images/export.py``): from docker's store (``docker-daemon://``), or, where podman
holds it, from the docker archive ``podman save`` writes beside it (``docker-archive://``,
removed after). An upstream source's image is not run (use docker, podman,
pyxis or oci).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from driver.cluster.preflight import Engine
from driver.frameworks.base import REPO_ROOT
from driver.images import export
from driver.images.engine import engine_for
from driver.runtimes.base import Failure, RuntimeConfigError, Verdict
from driver.runtimes.containers import PLATFORMS
from driver.runtimes.containers.none import HeldProcessGroup
from driver.runtimes.local_platform import HostRun, LocalPlatform
from driver.runtimes.plan import NodeCommand

if TYPE_CHECKING:
    from driver.cluster.inventory import Node
    from driver.cluster.remote import Remote
    from driver.runtimes.plan import RepeatPlan
    from driver.runtimes.slurm.job import Allocation

CACHE = REPO_ROOT / ".dlperf" / "apptainer"


def build_argv(tag: str, target: Path, archive: Path | None = None) -> list[str]:
    """apptainer's build of ``target`` from docker's store, or from ``archive`` (a docker
    archive of the image, which is how podman's images reach apptainer)."""
    origin = f"docker-archive://{archive}" if archive else f"docker-daemon://{tag}"
    return ["apptainer", "build", "--force", str(target), origin]


def archive_for(target: Path) -> Path:
    """Where podman's archive of the image is written on the way to ``target``."""
    return target.with_name(f".{target.name}.tar")


def podman_save_argv(tag: str, archive: Path) -> list[str]:
    return ["podman", "save", "--format", "docker-archive", "--output", str(archive), tag]


def kit_image_file(framework: str, variant: str) -> tuple[str, str]:
    """The ``.sif`` the kit makes of ``framework``'s image for a ``variant`` (cpu, gpu) host,
    and the local tag it is made from."""
    from driver.images.build import BuildOptions, plan_images
    from driver.images.catalog import discover, image_for
    from driver.images.lock import LockError

    name = image_for(framework, variant, discover())
    try:
        tag = plan_images([name], BuildOptions(log=lambda _line: None))[name].tag
    except LockError:  # a base digest still unresolved: the name, and no tag yet
        tag = f"dlperf/{name}:unbuilt"
    return str(export.image_file(tag, CACHE, ".sif")), tag


def make_image_file(image: str, tag: str, fix: str = "or set slurm.image") -> dict[str, Any]:
    """The ``.sif`` at ``image`` built from the local image ``tag`` (docker's store, or
    podman's through an archive), and what that took; a Failure naming ``fix`` otherwise."""
    started = time.time()
    engine = engine_for(tag)
    archive = archive_for(Path(image)) if engine == "podman" else None
    try:
        if archive is not None:
            archive.unlink(missing_ok=True)  # a killed earlier run's
            export.make_file(archive, lambda to: podman_save_argv(tag, to))
        export.make_file(Path(image), lambda to: build_argv(tag, to, archive))
    except export.ExportError as error:
        detail = f"apptainer could not build {tag}: {error} ({fix})"
        raise Failure(Verdict.FAILED, detail) from None
    finally:
        if archive is not None:
            archive.unlink(missing_ok=True)
    built_s = round(time.time() - started, 3)
    return {"sif": image, "image": tag, "engine": engine, "built_s": built_s}


@PLATFORMS.register("apptainer")
class Apptainer(HeldProcessGroup, LocalPlatform):
    name = "apptainer"
    sees_only_mounts = True
    prepare_timing = "sif_s"
    image_python = "python3"  # the image's

    def wrap(
        self, argv: list[str], image: str | None, mounts: Sequence[str], workdir: str, gpus: bool
    ) -> list[str]:
        binds = [word for mount in mounts for word in ("--bind", mount)]
        return [
            "apptainer", "exec", *(["--nv"] if gpus else []), *binds, "--pwd", workdir,
            str(image), *argv,
        ]  # fmt: skip

    # -- over SSH ----------------------------------------------------------------------------
    def image_for(  # noqa: ARG002 - no upstream source runs here (runs_sources)
        self, framework: str, node: Node, source: str = "dlperf", image: str = "pinned"
    ) -> str:
        image = node.container.image.get(framework) or node.container.image.get("default")
        if not image:  # one line for the CLI (it was a traceback), a ValueError still
            raise RuntimeConfigError(
                f"{self.where}: container.image.{framework}: apptainer over SSH runs an image "
                "file on every node; set container.image (a .sif path there, e.g. made by "
                "`apptainer build pytorch.sif docker-daemon://<image>`)"
            )
        return image

    def engine(self, remote: Remote, image: str | None) -> Engine:  # noqa: ARG002
        present = ["ls", "-d", image] if image and image.startswith("/") else None
        fix = "copy the .sif to that path on the node (or fix container.image)"
        return Engine(self.name, ["apptainer", "version"], present, image, fix)

    # -- under Slurm -------------------------------------------------------------------------
    def slurm_image(self, framework: str) -> tuple[str, str | None]:
        """The image a step runs and, when the kit makes it here, the local tag it is from."""
        for key in (framework, "default"):
            if key in self.config.image:
                return self.config.image[key], None
        return kit_image_file(framework, "gpu" if self.config.gpus_per_node else "cpu")

    def step_argv(self, plan: RepeatPlan, argv: list[str], session_root: Path) -> list[str]:
        session, kit = str(Path(session_root).absolute()), str(REPO_ROOT)
        mounts = [f"{kit}:{kit}:ro", f"{session}:{session}", *self.config.mounts]
        mounts += self.data_mounts(plan)
        image, _ = self.slurm_image(plan.framework)
        return self.wrap(argv, image, mounts, kit, bool(self.config.gpus_per_node))

    def prepare(self, plan: RepeatPlan, allocation: Allocation) -> dict[str, Any] | None:  # noqa: ARG002
        image, tag = self.slurm_image(plan.framework)
        if tag is None or Path(image).is_file():
            return None
        return make_image_file(image, tag)

    def describe_prepare(self, plan: RepeatPlan, allocation: Allocation) -> list[str]:  # noqa: ARG002
        image, tag = self.slurm_image(plan.framework)
        if tag is None:
            return []
        lines = [
            f"# once per image: the local image {tag} as the .sif apptainer runs (or set "
            f"slurm.image.{plan.framework})",
        ]
        if engine_for(tag) == "podman":  # apptainer reads podman's images from an archive
            archive = archive_for(Path(image))
            lines.append("$ " + shlex.join(podman_save_argv(tag, archive)))
            return [*lines, "$ " + shlex.join(build_argv(tag, Path(image), archive))]
        return [*lines, "$ " + shlex.join(build_argv(tag, Path(image)))]

    # -- on this host (the local runtime) ----------------------------------------------------
    def local_image(
        self,
        framework: str,
        variant: str,
        source: str = "dlperf",
        choice: str = "pinned",  # noqa: ARG002 - no upstream source runs here (runs_sources)
        *,
        planned: bool = False,
    ) -> str:
        """The framework's ``.sif`` for this host's variant, made from the local image the
        first time a case needs it (a dry run only names it)."""
        assert source == "dlperf", "the local runtime refuses upstream sources first"
        image, tag = kit_image_file(framework, variant)
        if not planned and not Path(image).is_file():
            make_image_file(image, tag, f"`dlperf images build` makes {tag}; apptainer converts it")
        return image

    def host_command(self, command: NodeCommand, run: HostRun) -> NodeCommand:
        # apptainer exec is the node's process group itself (no engine holds it): the runtime
        # stops it as it stops a process, and the environment passes through unchanged.
        workdir = command.workdir or str(REPO_ROOT)
        argv = self.wrap(command.argv, run.image, run.mounts, workdir, run.gpus)
        return NodeCommand(node=command.node, argv=argv, env=command.env, workdir=command.workdir)

    def remove_runs(self, names: list[str]) -> None:
        """Nothing: what a repeat ran ended with its process group."""

    def remove_leftovers(self, label: str) -> list[str]:  # noqa: ARG002 - nothing is labelled
        """Nothing beyond the processes the local runtime ends itself."""
        return []
