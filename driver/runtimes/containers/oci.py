"""oci (Slurm only): Slurm's own OCI containers, the step in a bundle (``srun --container=``).

``oci.conf`` on the nodes calls runc or crun; the kit makes one bundle per session from
``slurm.oci_bundle`` or from the local image ``slurm.oci_image`` (exported once per image), the
checkout and the session folder mounted at their own paths (``driver/images/oci.py``); the
image's ``python3`` runs the step. An upstream source's bundle is made from its own image, with
writable copies of the folders its scripts write in.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from driver.frameworks.base import REPO_ROOT
from driver.images import oci
from driver.images.engine import engine_for
from driver.runtimes.base import RuntimeConfigError, Verdict, session_label
from driver.runtimes.containers import PLATFORMS, Context
from driver.runtimes.containers.source_image import SourceImage, image_key
from driver.runtimes.slurm import client
from driver.runtimes.slurm.job import Allocation, Failure
from driver.runtimes.slurm.platform import SlurmPlatform
from driver.sources.base import image_key as source_key

if TYPE_CHECKING:
    from driver.runtimes.plan import RepeatPlan

IMAGE_HOME = "/root"  # the upstream images run as root (as docker starts them)


# The first line of a step's script in an OCI container: a node that has no oci.conf runs the
# step on the host (Slurm 22.05 treats --container as advisory there), which would measure the
# host, not the image; the marker exists only at the top of the kit's bundle's root.
def oci_guard(marker: str) -> str:
    return (
        f'[ -f /{shlex.quote(marker)} ] || {{ echo "dlperf-slurm: node $SLURM_NODEID '
        "($(hostname)) ran the step outside the OCI bundle: Slurm there has no oci.conf beside "
        "slurm.conf (see docs/clusters.md); set slurm.container: none to run without "
        'containers" >&2; exit 3; }'
    )


@PLATFORMS.register("oci")
class SlurmOci(SlurmPlatform):
    """Slurm's own OCI containers: every task in the session's bundle (slurmstepd calls the
    runtime ``oci.conf`` names on each node)."""

    name = "oci"
    prepare_timing = "bundle_s"
    runs_sources = True
    image_python = "python3"  # the image's
    # Slurm 22.05 writes an OCI container's environment before it sets the per-task variables:
    # none of SLURM_NODEID, SLURM_PROCID or SLURMD_NODENAME reaches the step's script.
    by_hostname = True

    def __init__(self, context: Context) -> None:
        super().__init__(context)
        if self.config.tasks == "device":
            raise RuntimeConfigError(
                f"{self.where}: slurm.tasks: device with container: oci: Slurm 22.05 runs one "
                "task per node in an OCI container (slurmstepd refuses more); use tasks: node "
                "(the framework's launcher starts the node's processes inside the container)"
            )
        self._checked = False
        self._made: dict[Path, dict[str, Any]] = {}  # session bundle -> its facts
        self._paths: dict[str, str | None] = {}  # source -> the PATH its config sets

    def cache(self) -> Path:
        if self.config.oci_cache:
            return Path(self.config.oci_cache)
        return REPO_ROOT / ".dlperf" / "oci"

    def session_bundle(self, key: str, session_root: Path) -> Path:
        """The session's bundle of ``key`` (a framework, or an upstream source: ``image_key``),
        made by the first repeat that needs it."""
        return self.cache() / f"session-{session_label(session_root)}" / key

    def srun_flags(self, plan: RepeatPlan, session_root: Path) -> list[str]:
        """Every task in the session's bundle (slurmstepd calls oci.conf's runtime)."""
        return [f"--container={self.session_bundle(image_key(plan), session_root)}"]

    def source(
        self, framework: str, source: str = "dlperf", image: str = "pinned"
    ) -> tuple[str, str, str]:
        """Where a bundle comes from: (``bundle`` or ``image``, the value, the field that set
        it); a framework's own entry before ``default``, a bundle before an image. An upstream
        source: the entry of the image the case asks for (``<source>``, or
        ``<source>-current``), else that image as built here (never ``default``: the source's
        code is only in its image). A one-line RuntimeConfigError naming the fields when
        neither is set."""
        keys = (framework, "default") if source == "dlperf" else (source_key(source, image),)
        for key in keys:
            if key in self.config.oci_bundle:
                return "bundle", self.config.oci_bundle[key], f"slurm.oci_bundle.{key}"
            if key in self.config.oci_image:
                return "image", self.config.oci_image[key], f"slurm.oci_image.{key}"
        if source != "dlperf":
            built = SourceImage.of(source, image)
            return "image", built.shown, f"the source's image {built.name}"
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
        kind, value, field_name = self.source(plan.framework, plan.source, plan.case.image)
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
        kind, value, field_name = self.source(plan.framework, plan.source, plan.case.image)
        engine = engine_for(value) if kind == "image" else "docker"
        if field_name.startswith("the source's image"):
            value, engine = SourceImage.of(plan.source, plan.case.image).built()
        started = time.time()
        session, kit = str(session_root.absolute()), str(REPO_ROOT)
        mounts = [oci.Mount(kit, kit, read_only=True), oci.Mount(session, session)]
        mounts += [oci.parse_mount(mount) for mount in self.config.mounts]
        mounts += [oci.parse_mount(mount) for mount in self.data_mounts(plan)]
        what = f"{self.where}: {field_name}"
        fix = "fix the path, or name an image (slurm.oci_image)"
        try:
            source = Path(value)
            if kind == "image":
                source = oci.source_from_image(value, self.cache(), self.printer, engine)
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
        kind, value, field_name = self.source(plan.framework, plan.source, plan.case.image)
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
