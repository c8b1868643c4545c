"""pyxis (Slurm only): the step in a container NVIDIA's pyxis plug-in makes from an image.

The kit's own scripts run in the framework's GPU base image (its ``images.lock`` tag in
enroot's ``registry#repository:tag`` form, or ``slurm.image``), one named container per node
made by a first step and reused by every repeat of the job, the kit's checkout and the session
folder mounted at their own paths, plus ``slurm.mounts``. An upstream source runs its own
image, the pinned or the current one as the case asks (``slurm.image.<source>`` or
``slurm.image.<source>-current``, else a squashfs the kit imports once per image from the local
build: ``enroot import dockerd://`` or ``podman://``, whichever engine holds it), a fresh
container per step. A login node with neither engine, no squashfs made yet and no
``slurm.image`` entry for the source is refused before the job, naming the fixes.

Why a tag and not the pinned digest: enroot parses ``registry#repository@sha256:...`` only from
v4.0.0; 3.x answers ``Invalid image reference`` (its ``docker::import`` regex takes
``[:tag]`` alone), and many clusters still run 3.x. A tag parses in both. The digest is not
lost: before the job is submitted the registry is asked which digest the tag names now (as
enroot will when each node imports it), and a tag that moved away from the pin is refused. It
is checked there because an imported image keeps nothing of it: enroot writes the image
config's Env into ``/etc/environment`` and its Labels into ``/etc/rc``, never the manifest's
digest (``docker::configure`` in src/docker.sh of 3.5.0 and 4.1.2).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from driver.frameworks.base import REPO_ROOT
from driver.images import export
from driver.images.engine import NO_ENGINE_FIX, enroot_uri, host_engine_name, wanted_engine
from driver.runtimes.base import RuntimeConfigError, Verdict
from driver.runtimes.containers import PLATFORMS
from driver.runtimes.containers.source_image import SourceImage, image_key
from driver.runtimes.slurm import client
from driver.runtimes.slurm.job import Allocation, Failure
from driver.runtimes.slurm.platform import SlurmPlatform
from driver.sources.base import image_key as source_key

if TYPE_CHECKING:
    from driver.runtimes.plan import RepeatPlan

# Each pyxis flag the kit passes, and the pyxis release that added it (NVIDIA/pyxis's args.c
# at each tag): a cluster whose `srun --help` lacks one has an older pyxis.
PYXIS_FLAG_RELEASES = {
    "--container-image": "0.1.0", "--container-name": "0.1.0", "--container-mounts": "0.1.0",
    "--container-workdir": "0.1.0", "--container-writable": "0.11.0",
}  # fmt: skip
# enroot parses a digest in an image reference from this release on (src/docker.sh,
# docker::_parse_uri, commit f29a45c); 3.x takes REGISTRY#IMAGE[:TAG] only.
ENROOT_DIGEST_RELEASE = (4, 0, 0)


def enroot_reference(ref: str) -> str:
    """``repository:tag`` as enroot names it: ``registry#path:tag`` when the first part names a
    registry (a dot, a port or localhost), else unchanged (Docker Hub). No digest: every enroot
    release parses this form (see the module's docstring)."""
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return ref


def version_tuple(text: str) -> tuple[int, ...] | None:
    parts = text.strip().split(".")
    if len(parts) < 2 or not all(part.isdigit() for part in parts):
        return None
    return tuple(int(part) for part in parts)


def check_mount_path(path: str, what: str, fix: str) -> str:
    """A folder mounted at its own path through pyxis's ``--container-mounts``: that list is
    split on ',' and each entry on ':', so either character in the path would silently add a
    mount or change one (``/r/a,/etc`` mounts /etc). Refused with ``fix``."""
    found = [char for char in ",:" if char in path]
    if found:
        shown = " and ".join(repr(char) for char in found)
        raise RuntimeConfigError(
            f"{what} {path} holds {shown}: pyxis's --container-mounts splits its list on ',' "
            f"and each mount on ':', so it cannot be mounted; {fix}"
        )
    return path


@dataclass(frozen=True)
class Container:
    """pyxis flags of a step: one named container per node, made once per job and reused; or
    (``name`` None) a container of the image made for the step and removed after it, writable
    where ``writable`` (an upstream source's: a fresh one per repeat, as docker gives it)."""

    image: str
    name: str | None
    mounts: tuple[str, ...]
    workdir: str
    writable: bool = False

    def flags(self) -> list[str]:
        flags = [f"--container-image={self.image}"]
        if self.name:
            flags.append(f"--container-name={self.name}")
        if self.writable:
            flags.append("--container-writable")
        if self.mounts:
            flags.append(f"--container-mounts={','.join(self.mounts)}")
        return [*flags, f"--container-workdir={self.workdir}"]


@PLATFORMS.register("pyxis")
class Pyxis(SlurmPlatform):
    """NVIDIA's pyxis plug-in: one named container per node, made once per job."""

    name = "pyxis"
    prepare_timing = "container_create_s"
    runs_sources = True
    image_python = "python3"  # the image's

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self._srun_help: str | None = None
        self._digest_checks: dict[str, str] = {}  # repository:tag -> what was found
        self._said: set[str] = set()

    def check(self, session_root: Path) -> None:
        self.mounted_folders(session_root)

    def refused(self, plan: RepeatPlan, *, submitting: bool = False) -> str:
        """Before any job: a pyxis without a flag the step needs, an enroot too old for a
        digest in the image reference, or (``submitting``) a pinned tag the registry now
        serves as another digest."""
        container = self.container(plan, plan.session_root)
        help_text = self.srun_help()
        if help_text:
            for flag in container.flags():
                name = flag.split("=", 1)[0]
                if name not in help_text:
                    release = PYXIS_FLAG_RELEASES.get(name, "?")
                    return (
                        f"{plan.case_id}: this cluster's srun has no {name}, which pyxis "
                        f"added in {release}: upgrade pyxis to {release} or later (built "
                        "against this cluster's Slurm), or set slurm.container: none"
                    )
        if submitting:
            refusal = self.no_engine_refusal(plan)
            if refusal:
                return refusal
        image = container.image
        if "@" in image.split("#")[-1] and not image.startswith(("/", ".")):
            refusal = self.enroot_digest_refusal(plan, image)
            if refusal:
                return refusal
        pinned = self.pinned_base(plan.framework) if submitting and self.uses_pin(plan) else None
        if pinned is not None:
            found = self.check_digest(*pinned)
            if found.startswith("moved"):
                ref, digest = pinned
                return (
                    f"{plan.case_id}: {ref} is pinned in images.lock to {digest}, but the "
                    f"registry {found.removeprefix('moved: ')}: re-pin it (`dlperf images lock`) "
                    f"once the new image is the one to measure, or set "
                    f"slurm.image.{plan.framework} to the image wanted"
                )
        return ""

    def no_engine_refusal(self, plan: RepeatPlan) -> str:
        """A source whose squashfs the kit must make here from a local build, on a host with
        neither docker nor podman to read it from (checked when submitting; a dry run says it)."""
        key = image_key(plan)
        if plan.source == "dlperf" or key in self.config.image:
            return ""
        if self.squashfs(SourceImage.of(plan.source, plan.case.image)).is_file():
            return ""
        wanted = wanted_engine()
        if host_engine_name(wanted) is not None:
            return ""
        lacks = "neither a docker engine nor podman" if wanted == "auto" else f"no {wanted}"
        return (
            f"{plan.case_id}: source {plan.source} runs its own image, which the kit imports "
            f"for pyxis from a local build, but this host has {lacks} (engine: {wanted}); "
            f"{NO_ENGINE_FIX.replace('<source>', key)}"
        )

    def srun_help(self) -> str:
        """``srun --help`` of this cluster (where pyxis lists its flags); "" if srun did not
        answer (the job's own submission then says why)."""
        if self._srun_help is None:
            try:
                self._srun_help = client.slurm("srun", "--help")
            except client.SlurmError:
                self._srun_help = ""
        return self._srun_help

    def enroot_digest_refusal(self, plan: RepeatPlan, image: str) -> str:
        """A digest in the reference needs enroot 4.0.0 on every node. The nodes' enroot is
        only known once a job runs there, so the one on this host is read, when there is one
        (login and compute nodes usually share the install); else that is said once."""
        needed = ".".join(map(str, ENROOT_DIGEST_RELEASE))
        enroot = shutil.which("enroot")
        version = None
        if enroot:
            try:
                out = subprocess.run([enroot, "version"], capture_output=True, text=True,
                                     timeout=30)  # fmt: skip
                version = version_tuple(out.stdout)
            except (OSError, subprocess.TimeoutExpired):
                version = None
        if version is None:
            if image not in self._said:
                self._said.add(image)
                self.printer(
                    f"pyxis: {image} holds a digest, which enroot parses from {needed} on; "
                    "enroot's version on the nodes cannot be read from here (no enroot on this "
                    "host): if the nodes run enroot 3.x the step fails with 'Invalid image "
                    "reference'"
                )
            return ""
        if version < ENROOT_DIGEST_RELEASE:
            shown = ".".join(map(str, version))
            return (
                f"{plan.case_id}: the image {image} holds a digest, which enroot parses from "
                f"{needed} on; this host's enroot is {shown} (3.x answers 'Invalid image "
                f"reference'): give slurm.image.{plan.framework} as registry#repository:tag, or "
                f"upgrade enroot to {needed} or later"
            )
        return ""

    def uses_pin(self, plan: RepeatPlan) -> bool:
        """The plan's image is the framework's images.lock pin (not slurm.image, no source)."""
        if plan.source != "dlperf":
            return False
        return not any(key in self.config.image for key in (plan.framework, "default"))

    def check_digest(self, ref: str, digest: str) -> str:
        """What the registry serves for the pinned tag ``ref`` now, once per session: "matched",
        "moved: serves <digest> for it", or "not checked: <why>" (said once; the nodes will
        import whatever the tag names then)."""
        if ref not in self._digest_checks:
            from driver.images.registry import ResolveError, resolve_digest

            try:
                served = resolve_digest(ref)
            except ResolveError as error:
                found = f"not checked: {error}"
                self.printer(f"pyxis: the pinned digest of {ref} was not checked ({error})")
            else:
                found = "matched" if served == digest else f"moved: serves {served} for it"
            self._digest_checks[ref] = found
        return self._digest_checks[ref]

    @staticmethod
    def mounted_folders(session_root: Path) -> tuple[str, str]:
        """The session folder and the kit's checkout, each mounted at its own path (absolute:
        mounts want absolute paths), refused if pyxis cannot mount it."""
        session = check_mount_path(
            str(Path(session_root).absolute()),
            "the session folder",
            "choose a --results folder whose path has neither",
        )
        kit = check_mount_path(
            str(REPO_ROOT), "the kit's checkout", "move the checkout to a path without them"
        )
        return session, kit

    def srun_flags(self, plan: RepeatPlan, session_root: Path) -> list[str]:
        return self.container(plan, session_root).flags()

    def container(self, plan: RepeatPlan, session_root: Path) -> Container:
        """The kit's own scripts: one named container per node and job (the kit's code is
        mounted, nothing of a run stays in it). An upstream source: a fresh, writable container
        per step, as docker gives each repeat (its scripts write checkpoints into their folder,
        and one restores what an earlier run left there: tensorflow-models BERT)."""
        session, kit = self.mounted_folders(session_root)
        mounts = [f"{kit}:{kit}:ro", f"{session}:{session}"]
        mounts += self.config.mounts
        for mount in self.data_mounts(plan):
            check_mount_path(
                mount.split(":")[0], f"{plan.case_id}: the data folder",
                "give a data_dir whose path has neither (a symlink to it will do)",
            )  # fmt: skip
            mounts.append(mount)
        source = plan.source != "dlperf"
        return Container(
            image=self.image_for(plan.framework, plan.source, plan.case.image),
            name=None if source else f"dlperf-{image_key(plan)}",
            mounts=tuple(mounts),
            workdir=str(REPO_ROOT),
            writable=source,
        )

    def squashfs(self, image: SourceImage) -> Path:
        """Where the kit keeps a source image's squashfs for pyxis (the checkout is on a file
        system the nodes share; a path without ',' or ':', which pyxis would split)."""
        tag = image.tag or f"{image.name}:<unbuilt>"
        return export.image_file(tag, REPO_ROOT / ".dlperf" / "enroot", ".sqsh")

    def image_for(self, framework: str, source: str = "dlperf", image: str = "pinned") -> str:
        """pyxis image: ``slurm.image`` (for an upstream source the entry of the image the case
        asks for: ``<source>`` or ``<source>-current``; else the framework's or ``default``),
        else the framework's GPU base by its images.lock digest in enroot's form
        (``registry#repository@sha256:...``), or for a source the squashfs of its built image
        (:meth:`squashfs`)."""
        keys = (framework, "default") if source == "dlperf" else (source_key(source, image),)
        for key in keys:
            if key in self.config.image:
                return self.config.image[key]
        if source != "dlperf":
            return str(self.squashfs(SourceImage.of(source, image)))
        ref, _digest = self.pinned_base(framework)
        return enroot_reference(ref)

    @staticmethod
    def pinned_base(framework: str) -> tuple[str, str]:
        """The framework's GPU base image as ``images.lock`` pins it: (repository:tag, digest).
        An unresolved pin is refused: the tag alone would be measured unchecked."""
        from driver.images.catalog import discover, image_for
        from driver.images.lock import LockError, load_lock

        spec = discover()[image_for(framework, "gpu", discover())]
        refs = spec.registry_refs
        if not refs:
            raise LockError(f"{spec.dockerfile}: no registry base for pyxis; set slurm.image")
        pin = load_lock().get(refs[0])
        if pin is None or not pin.resolved:
            raise LockError(
                f"images.lock: {refs[0]} has no resolved digest (`dlperf images lock`), or set "
                f"slurm.image.{framework}"
            )
        return refs[0], pin.digest

    def create_argv(self, allocation: Allocation, container: Container, count: int) -> list[str]:
        nodes = allocation.nodes[:count]
        return [
            "srun", f"--jobid={allocation.job_id}", "--job-name=dlperf-container",
            f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}", "--ntasks-per-node=1",
            *container.flags(), "true",
        ]  # fmt: skip

    def import_source_image(self, plan: RepeatPlan) -> dict[str, Any]:
        """The source's built image as the squashfs pyxis reads (:meth:`squashfs`), imported
        from this host's docker once per image; {} when ``slurm.image`` names the source's."""
        key = image_key(plan)
        if plan.source == "dlperf" or key in self.config.image:
            return {}
        image = SourceImage.of(plan.source, plan.case.image)
        target = self.squashfs(image)
        if target.is_file():  # made before: no engine needed any more
            return {"image": image.shown, "squashfs": str(target)}
        tag, engine = image.built()
        uri = enroot_uri(engine, tag)
        facts = {"image": tag, "squashfs": str(target), "engine": engine}
        enroot = shutil.which("enroot")
        if not enroot:
            raise Failure(
                Verdict.FAILED,
                f"source {plan.source}: pyxis reads its image {tag} from a squashfs the kit "
                "makes with enroot, which is not on this host: run `enroot import --output "
                f"{target} {uri}` where enroot and the image are, or set "
                f"slurm.image.{key} (a registry copy of the image, or a squashfs path)",
            )
        started = time.time()
        self.printer(f"pyxis: importing {uri} into {target} (once per image)")
        try:
            with export.enroot_environment(engine) as env:
                argv = [enroot, "import", "--output"]
                export.make_file(target, lambda to: [*argv, str(to), uri], env=env)
        except export.ExportError as error:
            raise Failure(Verdict.FAILED, f"enroot could not import {uri}: {error}") from None
        return {**facts, "import_s": round(time.time() - started, 3)}

    def prepare(self, plan: RepeatPlan, allocation: Allocation) -> dict[str, Any] | None:
        made = self.import_source_image(plan)
        container = self.container(plan, plan.session_root)
        if self.uses_pin(plan):  # what the registry said of the pin, before the job
            ref, digest = self.pinned_base(plan.framework)
            found = self._digest_checks.get(ref, "not checked: no registry was asked")
            made = {**made, "image": container.image, "pinned": f"{ref}@{digest}",
                    "digest_check": found}  # fmt: skip
        if container.name is None or container.name in allocation.containers:
            return made or None
        try:
            client.slurm(*self.create_argv(allocation, container, len(plan.commands)),
                         timeout=3600)  # fmt: skip
        except client.SlurmError as error:
            detail = f"pyxis could not make {container.name}: {error}"
            raise Failure(Verdict.FAILED, detail) from None
        allocation.containers.add(container.name)
        return made

    def describe_prepare(self, plan: RepeatPlan, allocation: Allocation) -> list[str]:
        container = self.container(plan, plan.session_root)
        lines = []
        key = image_key(plan)
        if plan.source != "dlperf" and key not in self.config.image:
            image = SourceImage.of(plan.source, plan.case.image)
            engine = image.engine_shown()
            argv = [
                "enroot",
                "import",
                "--output",
                container.image,
                enroot_uri(engine, image.shown),
            ]
            refusal = self.no_engine_refusal(plan)
            if refusal:
                lines.append(f"# refused when run: {refusal}")
            lines.append(
                f"# once per image: the source's image {image.name} as the squashfs pyxis "
                f"reads, from {engine}'s store here (or set slurm.image.{key})"
            )
            lines.append("$ " + shlex.join(argv))
        if container.name is None:  # made by each step
            return lines
        argv = self.create_argv(allocation, container, len(plan.commands))
        lines.append("# once per job: each node makes its named container")
        return [*lines, "$ " + shlex.join(argv)]
