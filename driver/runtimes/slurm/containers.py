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
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from driver.frameworks.base import REPO_ROOT
from driver.images import oci
from driver.runtimes.base import RuntimeConfigError, Verdict, session_label
from driver.runtimes.containers import ContainerPlatform
from driver.runtimes.slurm import client
from driver.runtimes.slurm.config import SlurmConfig
from driver.runtimes.slurm.job import Allocation, Failure
from driver.runtimes.slurm.render import Container, OciContainer, check_mount_path, oci_guard

if TYPE_CHECKING:
    from driver.runtimes.plan import RepeatPlan


def image_key(plan: RepeatPlan) -> str:
    """What picks a step's image: the framework (the kit's own scripts) or the upstream source
    (its code is in its own image). Also the key of ``slurm.image``/``oci_*`` entries."""
    return plan.framework if plan.source == "dlperf" else plan.source


UNBUILT = "<unbuilt: base not resolved in images.lock>"
IMAGE_HOME = "/root"  # the upstream images run as root (as docker starts them)


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


class Pyxis(SlurmPlatform):
    """NVIDIA's pyxis plug-in: one named container per node, made once per job."""

    name = "pyxis"
    prepare_timing = "container_create_s"
    runs_sources = True

    def python(self, framework: str) -> str:  # noqa: ARG002 - the same in every image
        return "python3"  # the image's

    def check(self, session_root: Path) -> None:
        self.mounted_folders(session_root)

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

    def container(self, plan: RepeatPlan, session_root: Path) -> Container:
        """The kit's own scripts: one named container per node and job (the kit's code is
        mounted, nothing of a run stays in it). An upstream source: a fresh, writable container
        per step, as docker gives each repeat (its scripts write checkpoints into their folder,
        and one restores what an earlier run left there: tensorflow-models BERT)."""
        session, kit = self.mounted_folders(session_root)
        mounts = [f"{kit}:{kit}:ro", f"{session}:{session}"]
        mounts += self.config.mounts
        source = plan.source != "dlperf"
        return Container(
            image=self.image_for(plan.framework, plan.source),
            name=None if source else f"dlperf-{image_key(plan)}",
            mounts=tuple(mounts),
            workdir=str(REPO_ROOT),
            writable=source,
        )

    def squashfs(self, image: SourceImage) -> Path:
        """Where the kit keeps a source image's squashfs for pyxis (the checkout is on a file
        system the nodes share; a path without ',' or ':', which pyxis would split)."""
        tag = image.tag or f"{image.name}:<unbuilt>"
        return REPO_ROOT / ".dlperf" / "enroot" / f"{tag.rsplit('/', 1)[-1].replace(':', '-')}.sqsh"

    def image_for(self, framework: str, source: str = "dlperf") -> str:
        """pyxis image: ``slurm.image`` (the source's entry for an upstream source, else the
        framework's or ``default``), else the framework's GPU base by its images.lock digest
        in enroot's form (``registry#repository@sha256:...``), or for a source the squashfs
        of its built image (:meth:`squashfs`)."""
        if source != "dlperf":
            if source in self.config.image:
                return self.config.image[source]
            return str(self.squashfs(SourceImage.of(source)))
        if framework in self.config.image:
            return self.config.image[framework]
        if "default" in self.config.image:
            return self.config.image["default"]
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
        repository = refs[0].rsplit(":", 1)[0] if ":" in refs[0].split("/")[-1] else refs[0]
        registry, _, path = repository.partition("/")
        if "." in registry or ":" in registry:
            repository = f"{registry}#{path}"
        return f"{repository}@{pin.digest}"

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
        if plan.source == "dlperf" or plan.source in self.config.image:
            return {}
        image = SourceImage.of(plan.source)
        tag = image.built()
        target = self.squashfs(image)
        facts = {"image": tag, "squashfs": str(target)}
        if target.is_file():
            return facts
        enroot = shutil.which("enroot")
        if not enroot:
            raise Failure(
                Verdict.FAILED,
                f"source {plan.source}: pyxis reads its image {tag} from a squashfs the kit "
                "makes with enroot, which is not on this host: run `enroot import --output "
                f"{target} dockerd://{tag}` where enroot and the image are, or set "
                f"slurm.image.{plan.source} (a registry copy of the image, or a squashfs path)",
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        partial.unlink(missing_ok=True)
        started = time.time()
        self.printer(f"pyxis: importing {tag} into {target} (once per image)")
        argv = [enroot, "import", "--output", str(partial), f"dockerd://{tag}"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
            if done.returncode != 0:
                said = (done.stderr or done.stdout).strip().splitlines()
                raise OSError(f"exit {done.returncode}: {said[-1] if said else 'no message'}")
            os.replace(partial, target)
        except (OSError, subprocess.SubprocessError) as error:
            partial.unlink(missing_ok=True)
            raise Failure(Verdict.FAILED, f"enroot could not import {tag}: {error}") from None
        return {**facts, "import_s": round(time.time() - started, 3)}

    def prepare(self, plan: RepeatPlan, allocation: Allocation) -> dict[str, Any] | None:
        made = self.import_source_image(plan)
        container = self.container(plan, plan.session_root)
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
        if plan.source != "dlperf" and plan.source not in self.config.image:
            image = SourceImage.of(plan.source)
            argv = ["enroot", "import", "--output", container.image, f"dockerd://{image.shown}"]
            lines += [
                f"# once per image: the source's image {image.name} as the squashfs pyxis "
                f"reads (or set slurm.image.{plan.source})",
                "$ " + shlex.join(argv),
            ]
        if container.name is None:  # made by each step
            return lines
        argv = self.create_argv(allocation, container, len(plan.commands))
        lines.append("# once per job: each node makes its named container")
        return [*lines, "$ " + shlex.join(argv)]


class SlurmOci(SlurmPlatform):
    """Slurm's own OCI containers: every task in the session's bundle (slurmstepd calls the
    runtime ``oci.conf`` names on each node)."""

    name = "oci"
    prepare_timing = "bundle_s"
    runs_sources = True
    # Slurm 22.05 writes an OCI container's environment before it sets the per-task variables:
    # none of SLURM_NODEID, SLURM_PROCID or SLURMD_NODENAME reaches the step's script.
    by_hostname = True

    def __init__(self, config: SlurmConfig, where: str, printer: Callable[[str], None]) -> None:
        super().__init__(config, where, printer)
        self._checked = False
        self._made: dict[Path, dict[str, Any]] = {}  # session bundle -> its facts
        self._paths: dict[str, str | None] = {}  # source -> the PATH its config sets

    def python(self, framework: str) -> str:  # noqa: ARG002 - the same in every image
        return "python3"  # the image's

    def cache(self) -> Path:
        if self.config.oci_cache:
            return Path(self.config.oci_cache)
        return REPO_ROOT / ".dlperf" / "oci"

    def session_bundle(self, key: str, session_root: Path) -> Path:
        """The session's bundle of ``key`` (a framework, or an upstream source: ``image_key``),
        made by the first repeat that needs it."""
        return self.cache() / f"session-{session_label(session_root)}" / key

    def container(self, plan: RepeatPlan, session_root: Path) -> OciContainer:
        return OciContainer(str(self.session_bundle(image_key(plan), session_root)))

    def source(self, framework: str, source: str = "dlperf") -> tuple[str, str, str]:
        """Where a bundle comes from: (``bundle`` or ``image``, the value, the field that set
        it); a framework's own entry before ``default``, a bundle before an image. An upstream
        source: its own entry, else its image as built here (never ``default``: the source's
        code is only in its image). A one-line RuntimeConfigError naming the fields when
        neither is set."""
        if source != "dlperf":
            if source in self.config.oci_bundle:
                return "bundle", self.config.oci_bundle[source], f"slurm.oci_bundle.{source}"
            if source in self.config.oci_image:
                return "image", self.config.oci_image[source], f"slurm.oci_image.{source}"
            image = SourceImage.of(source)
            return "image", image.shown, f"the source's image {image.name}"
        for key in (framework, "default"):
            if key in self.config.oci_bundle:
                return "bundle", self.config.oci_bundle[key], f"slurm.oci_bundle.{key}"
            if key in self.config.oci_image:
                return "image", self.config.oci_image[key], f"slurm.oci_image.{key}"
        raise RuntimeConfigError(
            f"{self.where}: slurm.oci_bundle: no OCI bundle for {framework!r}; set "
            f"slurm.oci_bundle.{framework} (a folder with config.json and its root folder, on a "
            f"file system the nodes share) or slurm.oci_image.{framework} (a local docker image "
            "the kit exports into one)"
        )

    def check(self, session_root: Path) -> None:  # noqa: ARG002 - the same for every session
        """Once: this Slurm has ``--container``; a named bundle exists with a config.json and a
        root. One-line RuntimeConfigErrors (file, field, fix)."""
        if self._checked:
            return
        if client.available() and client.has_oci_container() is False:
            raise RuntimeConfigError(
                f"{self.where}: slurm.container: oci needs Slurm's own containers (srun "
                "--container, Slurm 21.08 or later), which this srun does not list in --help; "
                "upgrade Slurm, or set slurm.container: pyxis or none"
            )
        for key, path in {**self.config.oci_bundle}.items():
            what = f"{self.where}: slurm.oci_bundle.{key}"
            fix = "make the bundle there (config.json + rootfs/) or fix the path"
            try:
                oci.bundle_root(Path(path), oci.read_config(Path(path), what, fix), what, fix)
            except oci.OciBundleError as error:
                raise RuntimeConfigError(str(error)) from None
        self._checked = True

    def step_environment(self, plan: RepeatPlan) -> dict[str, str]:
        """The PATH the bundle's config.json sets (the image's environment): Slurm appends the
        submitting shell's environment to the bundle's, and its PATH would hide the image's
        (python3 of the image, e.g. /opt/venv/bin). A source's own image not built here yet
        adds none (the repeat fails when it makes the bundle, with the fix)."""
        kind, value, field_name = self.source(plan.framework, plan.source)
        if field_name.startswith("the source's image") and value not in self._paths:
            try:
                env = oci.image_facts(value)[1]
            except oci.OciBundleError:
                return {}
            self._paths[value] = oci.config_path_variable({"process": {"env": env}})
        if value not in self._paths:
            try:
                if kind == "bundle":
                    config = oci.read_config(Path(value), field_name, "fix the path")
                    self._paths[value] = oci.config_path_variable(config)
                else:
                    env = oci.image_facts(value)[1]
                    self._paths[value] = oci.config_path_variable({"process": {"env": env}})
            except oci.OciBundleError as error:
                raise RuntimeConfigError(f"{self.where}: {field_name}: {error}") from None
        path = self._paths[value]
        return {"PATH": path} if path else {}

    def step_guard(self) -> str:
        return oci_guard(oci.MARKER)

    @staticmethod
    def writable_folders(plan: RepeatPlan) -> list[str]:
        """Folders of the image a step writes in: an upstream source's model folders (its
        scripts save checkpoints and logs where they run), the plan's model's first, and the
        home of the images' user, root (``import paddle`` makes ~/.cache; gluon-nlp keeps its
        vocabulary in ~/.mxnet; the Horovod images' SSH keys are there); none for the kit's
        own scripts."""
        if plan.source == "dlperf":
            return []
        from driver.sources.base import SOURCES

        spec = getattr(SOURCES.get(plan.source)(), "spec", None)
        if spec is None:
            return []
        own = spec.launches[plan.case.model].directory
        others = sorted({launch.directory for launch in spec.launches.values()} - {own})
        return [own, *others, IMAGE_HOME]

    def _writable(self, plan: RepeatPlan, root: Path, what: str) -> list[str]:
        """The source's model folders the image's ``root`` holds (a bundle need not hold every
        model's); the plan's own must be there."""
        folders = self.writable_folders(plan)
        if folders and not (root / folders[0].lstrip("/")).is_dir():
            raise oci.OciBundleError(
                f"{what}: the image has no folder {folders[0]} (where source {plan.source} "
                f"runs {plan.case.model}); build the source's image, or fix the bundle"
            )
        return [folder for folder in folders if (root / folder.lstrip("/")).is_dir()]

    def prepare(self, plan: RepeatPlan, allocation: Allocation) -> dict[str, Any]:  # noqa: ARG002
        """The session's bundle for the plan's framework (or source), made once per session
        (the first repeat that needs it; a resumed session makes it again), and its writable
        folders made afresh for every repeat; its facts for the record."""
        session_root = Path(plan.session_root)
        destination = self.session_bundle(image_key(plan), session_root)
        if destination in self._made:
            facts = self._made[destination]
            try:
                what = f"{self.where}: {facts['bundle']}"
                folders = self._writable(plan, destination / "rootfs", what)
                oci.refresh_writable(destination, facts.get("writable", []))
            except (oci.OciBundleError, OSError, subprocess.SubprocessError) as error:
                raise Failure(Verdict.FAILED, f"OCI bundle's folders not made: {error}") from None
            if folders and folders[0] not in facts.get("writable", []):
                raise Failure(
                    Verdict.FAILED,
                    f"OCI bundle {destination} was made without {folders[0]} writable; "
                    "run this case in a session of its own",
                )
            return facts
        self.check(session_root)
        kind, value, field_name = self.source(plan.framework, plan.source)
        if field_name.startswith("the source's image"):
            value = SourceImage.of(plan.source).built()
        started = time.time()
        session, kit = str(session_root.absolute()), str(REPO_ROOT)
        mounts = [oci.Mount(kit, kit, read_only=True), oci.Mount(session, session)]
        mounts += [oci.parse_mount(mount) for mount in self.config.mounts]
        what = f"{self.where}: {field_name}"
        fix = "fix the path, or name an image (slurm.oci_image)"
        try:
            source = Path(value)
            if kind == "image":
                source = oci.source_from_image(value, self.cache(), log=self.printer)
            root = oci.bundle_root(source, oci.read_config(source, what, fix), what, fix)
            folders = self._writable(plan, root, what)
            mounts += oci.writable_mounts(destination, folders)
            made = oci.make_session_bundle(
                source, destination, mounts, session_label(session_root), what, fix
            )
            oci.refresh_writable(made, folders)
        except (oci.OciBundleError, OSError, subprocess.SubprocessError) as error:
            raise Failure(Verdict.FAILED, f"OCI bundle not made: {error}") from None
        facts = {
            "bundle": str(made),
            "source": str(source),
            kind: value,
            "marker": f"/{oci.MARKER}",
            "made_s": round(time.time() - started, 3),
        }
        if folders:
            facts["writable"] = folders
        self._made[destination] = facts
        return facts

    def describe_prepare(self, plan: RepeatPlan, allocation: Allocation) -> list[str]:  # noqa: ARG002
        bundle = self.session_bundle(image_key(plan), plan.session_root)
        kind, value, field_name = self.source(plan.framework, plan.source)
        lines = [
            f"# once per session: the OCI bundle {bundle} (root from the {kind} {value} "
            f"({field_name}); config.json with the checkout and the session folder mounted); "
            "oci.conf on the nodes runs it"
        ]
        folders = self.writable_folders(plan)
        if folders:
            lines.append(
                f"# every repeat: writable copies of {', '.join(folders)} from the image (the "
                "source's scripts write there; the root stays read-only)"
            )
        return lines

    def close(self) -> None:
        for bundle in list(self._made):  # hard links of the source: cheap to make again
            shutil.rmtree(bundle, ignore_errors=True)
            if bundle.parent.is_dir() and not any(bundle.parent.iterdir()):
                bundle.parent.rmdir()
            del self._made[bundle]


PLATFORMS: dict[str, type[SlurmPlatform]] = {
    platform.name: platform for platform in (NoContainer, Pyxis, SlurmOci)
}
