"""The engine that builds and holds the kit's images on this host: docker or podman.

Both read the same Dockerfiles with the same build arguments (the pinned bases, ``CA_BUNDLE``),
labels and host networking, so an image's tag (the hash of its inputs) is the same whichever
built it; only its ID is the engine's own. docker is driven through its API (the classic
builder); podman through its command line, which needs no daemon and runs rootless, so a login
node without docker can still build an upstream source's image and hand it to enroot
(``enroot import podman://<tag>``) or apptainer (from a ``podman save`` archive).

``auto`` (the default, or ``$DLPERF_ENGINE``): docker where an engine answers, else podman
where it is installed; neither is a :class:`~driver.images.lock.LockError` naming the fixes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from driver.images.lock import LockError

ENGINES = ("docker", "podman")
CHOICES = ("auto", *ENGINES)
ENV = "DLPERF_ENGINE"
# What a login node without either engine can do instead; every refusal ends with it.
NO_ENGINE_FIX = (
    "install podman (no daemon, rootless works) and build with `dlperf images build --engine "
    "podman`, or start dockerd; or build the image where an engine runs, push it to a registry "
    "the nodes reach and name it in slurm.image.<source> (a squashfs path works too)"
)

Line = Callable[[str], None]


class Engine(ABC):
    """What the kit asks of an engine holding images (its IDs are ``sha256:<hex>``)."""

    name = ""
    # enroot's scheme for a local image of this engine (``enroot import <scheme>://<tag>``)
    enroot_scheme = ""

    @abstractmethod
    def image_id(self, ref: str) -> str | None: ...

    @abstractmethod
    def labels(self, ref: str) -> dict[str, str]: ...

    @abstractmethod
    def tag(self, ref: str, target: str) -> None: ...

    @abstractmethod
    def remove(self, ref: str) -> None: ...

    @abstractmethod
    def pull(self, ref: str) -> None: ...

    @abstractmethod
    def build(
        self, context: Path, tag: str, build_args: dict[str, str], labels: dict[str, str],
        log_file: IO[str], step: Line,
    ) -> list[str]:  # fmt: skip
        """Build ``context``'s Dockerfile as ``tag``; every line to ``log_file``, the steps to
        ``step``; the build's last lines on failure as a LockError (``error`` + tail)."""

    def import_argv(self, changes: list[str], message: str, tag: str) -> list[str]:
        """A rootfs tar on stdin as the image ``tag`` (the Debian base)."""
        flags = [word for change in changes for word in ("--change", change)]
        return [self.name, "import", *flags, "--message", message, "-", tag]

    def save_argv(self, tag: str, output: Path | None = None) -> list[str]:
        """The image as a docker-archive tar (to stdout when ``output`` is None)."""
        return [self.name, "save", *(["--output", str(output)] if output else []), tag]


def docker_client():  # docker.DockerClient, imported lazily
    import docker

    try:
        client = docker.from_env(timeout=900)
        client.ping()
    except Exception as error:  # noqa: BLE001 - any way of not reaching the engine
        raise LockError(f"no docker engine answers here ({error}); start dockerd") from None
    return client


def image_id(client, ref: str) -> str | None:
    """The image ID of ``ref`` (tag or ID) in the local engine, or None."""
    import docker

    try:
        return client.images.get(ref).id
    except docker.errors.ImageNotFound:
        return None


class DockerEngine(Engine):
    """docker through its API (the classic builder): no BuildKit, no buildx."""

    name = "docker"
    enroot_scheme = "dockerd"

    def __init__(self, client: Any = None) -> None:
        self.client = client or docker_client()

    def image_id(self, ref: str) -> str | None:
        return image_id(self.client, ref)

    def labels(self, ref: str) -> dict[str, str]:
        return (self.client.images.get(ref).attrs.get("Config") or {}).get("Labels") or {}

    def tag(self, ref: str, target: str) -> None:
        repository, tag = target.rsplit(":", 1)
        self.client.images.get(ref).tag(repository, tag)

    def remove(self, ref: str) -> None:
        self.client.images.remove(ref, noprune=False)

    def pull(self, ref: str) -> None:
        self.client.api.pull(ref.split("@")[0], tag=ref.split("@")[1])

    def build(
        self, context: Path, tag: str, build_args: dict[str, str], labels: dict[str, str],
        log_file: IO[str], step: Line,
    ) -> list[str]:  # fmt: skip
        stream = self.client.api.build(
            path=str(context), dockerfile="Dockerfile", tag=tag, buildargs=build_args,
            labels=labels, rm=True, forcerm=True, pull=False, network_mode="host", decode=True,
        )  # fmt: skip
        lines: list[str] = []
        stage_ends: list[str] = []  # final images of earlier stages: garbage once built
        last_id: str | None = None
        for chunk in stream:
            text = chunk.get("stream") or chunk.get("status") or ""
            if text:
                log_file.write(text)
                lines.extend(text.splitlines())
                for line in text.splitlines():
                    if line.startswith(" ---> ") and " " not in line[6:].strip():
                        last_id = line[6:].strip()
                    if line.startswith("Step "):
                        step(line)
                        if " : FROM " in line and last_id:
                            stage_ends.append(last_id)
            if "error" in chunk:
                raise LockError(f"{chunk['error'].strip()}\n" + "\n".join(lines[-25:]))
        for stage in stage_ends:
            # A build stage (e.g. the one holding the wheelhouse) is only a means to the venv;
            # as a cache it would never be hit again (same inputs skip the build altogether).
            try:
                self.remove(stage)
            except Exception:  # noqa: BLE001 - still referenced, or already gone
                pass
        return lines


class PodmanEngine(Engine):
    """podman's command line (buildah inside): no daemon, as root or rootless."""

    name = "podman"
    enroot_scheme = "podman"

    def __init__(self, binary: str | None = None) -> None:
        found = binary or shutil.which("podman")
        if found is None:
            raise LockError(f"podman is not installed here; {NO_ENGINE_FIX}")
        self.binary = found

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.binary, *args], capture_output=True, text=True, timeout=600)

    def image_id(self, ref: str) -> str | None:
        done = self._run("image", "inspect", "--format", "{{.Id}}", ref)
        found = done.stdout.strip()
        return f"sha256:{found.removeprefix('sha256:')}" if done.returncode == 0 and found else None

    def labels(self, ref: str) -> dict[str, str]:
        done = self._run("image", "inspect", "--format", "{{json .Labels}}", ref)
        return (json.loads(done.stdout) or {}) if done.returncode == 0 else {}

    def tag(self, ref: str, target: str) -> None:
        self._checked("tag", ref, target)

    def remove(self, ref: str) -> None:
        self._checked("rmi", ref)

    def pull(self, ref: str) -> None:
        self._checked("pull", ref)

    def _checked(self, *args: str) -> None:
        done = self._run(*args)
        if done.returncode != 0:
            raise LockError(f"podman {args[0]} failed: {done.stderr.strip()}")

    def build(
        self, context: Path, tag: str, build_args: dict[str, str], labels: dict[str, str],
        log_file: IO[str], step: Line,
    ) -> list[str]:  # fmt: skip
        # --layers=false: no intermediate images kept (docker's stages are removed after the
        # build for the same reason); --pull=never: every base is pinned and already here.
        argv = [self.binary, "build", "--layers=false", "--pull=never", "--network=host"]
        argv += ["--format=docker"]  # docker's config keeps SHELL, as the classic builder does
        for key, value in build_args.items():
            argv += ["--build-arg", f"{key}={value}"]
        for key, value in labels.items():
            argv += ["--label", f"{key}={value}"]
        argv += ["--tag", tag, "--file", str(context / "Dockerfile"), str(context)]
        lines: list[str] = []
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert process.stdout is not None
        with process.stdout:
            for raw in process.stdout:
                line = raw.rstrip("\n")
                log_file.write(line + "\n")
                lines.append(line)
                if "STEP " in line:
                    step(line)
        status = process.wait()
        if status != 0:
            raise LockError(f"podman build exited {status}\n" + "\n".join(lines[-25:]))
        return lines


def wanted_engine(choice: str | None = None) -> str:
    """The engine asked for: ``choice``, else ``$DLPERF_ENGINE``, else ``auto``."""
    wanted = choice or os.environ.get(ENV) or "auto"
    if wanted not in CHOICES:
        raise LockError(
            f"engine {wanted!r} (--engine or ${ENV}): choose one of {', '.join(CHOICES)}"
        )
    return wanted


def open_engine(choice: str | None = None) -> Engine:
    """The engine to build with or read images from (see the module's docstring)."""
    wanted = wanted_engine(choice)
    if wanted == "docker":
        return DockerEngine()
    if wanted == "podman":
        return PodmanEngine()
    try:
        return DockerEngine()
    except LockError as docker_error:
        if shutil.which("podman"):
            return PodmanEngine()
        raise LockError(
            f"neither a docker engine ({docker_error}) nor podman is on this host; {NO_ENGINE_FIX}"
        ) from None


def engines_holding(ref: str, choice: str | None = None) -> Iterator[tuple[Engine, str]]:
    """Each engine on this host (``choice``, or every one under ``auto``) that holds ``ref``,
    with the ID it gives it: docker's first."""
    wanted = wanted_engine(choice)
    for name in ENGINES if wanted == "auto" else (wanted,):
        try:
            engine: Engine = DockerEngine() if name == "docker" else PodmanEngine()
        except LockError:
            continue
        found = engine.image_id(ref)
        if found:
            yield engine, found


def enroot_uri(engine_name: str, tag: str) -> str:
    """enroot's reference to ``tag`` in the local store of ``engine_name``."""
    scheme = PodmanEngine.enroot_scheme if engine_name == "podman" else DockerEngine.enroot_scheme
    return f"{scheme}://{tag}"


def host_engine_name(choice: str | None = None) -> str | None:
    """The engine ``open_engine`` would open here, without failing: None when none."""
    wanted = wanted_engine(choice)  # a bad choice is refused, not taken for "none here"
    try:
        return open_engine(wanted).name
    except LockError:
        return None


def engine_for(tag: str | None) -> str:
    """The engine holding ``tag`` here, else the one that would build it (``auto``: docker where
    it answers, else podman), else docker: what a rendered import or export line names."""
    try:
        if tag:
            for engine, _found in engines_holding(tag):
                return engine.name
        return host_engine_name() or "docker"
    except LockError:  # a bad $DLPERF_ENGINE: refused where an engine is opened
        return "docker"
