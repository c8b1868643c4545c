"""docker over SSH: one ``docker create`` + ``start -a`` (host network and IPC) per node and repeat.

Each node's command (the framework's own launcher, e.g. torchrun, from ``plan_repeat``) runs in
the framework's image, identified by its digest; the kit's code is mounted read-only at
``/dlperf``. Containers are named per session/case/repeat/node and labelled
``dlperf.session=<session>`` so that every node's leftovers can be found and removed. The node's
docker client is driven through the node's own SSH connection, so nodes sharing one engine
(tests on one machine) behave like separate hosts.

    dlperf run --runtime ssh --inventory inventory.yaml ...    # with `container: docker`
    dlperf run --runtime docker --inventory inventory.yaml ... # the same, spelt as before

On this host (``dlperf run --container docker``, the local runtime) each node's command is
``docker run --rm`` attached, in the framework's image for this host (cpu or gpu variant) by its
ID, with the kit's code at ``/dlperf``, the session folder and the case's data at their own
paths, host network and IPC (the nodes meet on 127.0.0.1), the host's GPUs where the case takes
them, and the session's label, by which a resume removes what a killed run left.

Another engine with docker's command line (podman) is this class with its own client.
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from driver.cluster.preflight import Engine
from driver.cluster.remote import Remote, shell
from driver.files import write_bytes, write_text
from driver.runtimes.base import Failure, Verdict
from driver.runtimes.containers import PLATFORMS
from driver.runtimes.local_platform import HostRun, LocalPlatform
from driver.runtimes.plan import NodeCommand
from driver.runtimes.ssh.platform import SshPlatform

if TYPE_CHECKING:
    from driver.cluster.inventory import Node
    from driver.runtimes.ssh.launch import Launch, Prepared

WORKDIR = "/dlperf"


def _parse_time(text: str | None) -> float | None:
    """docker's RFC 3339 times (nanoseconds, Z) as a Unix time."""
    if not text or text.startswith("0001-"):
        return None
    head, _, rest = text.rstrip("Z").partition(".")
    fraction = float(f"0.{rest[:9]}") if rest else 0.0
    return datetime.fromisoformat(head + "+00:00").timestamp() + fraction


@PLATFORMS.register("docker")
class Docker(SshPlatform, LocalPlatform):
    """A docker container per node and repeat, made by the node's own docker client (over
    SSH) or by this host's (a local run)."""

    name = "docker"
    mount_point = WORKDIR
    runs_sources = True
    sees_only_mounts = True
    image_python = "python3"  # the image's: our CPU images put /opt/venv first on PATH
    # docker's own init reaps the launcher's children and passes signals on.
    init: tuple[str, ...] = ("--init",)
    tree_on_host = False  # the container's processes are not its client's children
    # How a local run is given the host's GPUs, and how an image missing here is put there.
    gpu_flags: tuple[str, ...] = ("--gpus", "all")
    missing_fix = "build it (`dlperf images build {name}`)"

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.remotes = context.remotes  # the first node is asked for a tag the head lacks
        self.build_options = context.build_options
        self._images: dict[tuple[str, str, str], str] = {}

    def cli(self, remote: Remote, *args: str) -> list[str]:
        """argv of the node's engine client."""
        return remote.docker(*args)

    def engine(self, remote: Remote, image: str | None) -> Engine:
        return Engine(
            self.name,
            self.cli(remote, "version", "--format", "{{.Server.Version}}"),
            self.cli(remote, "image", "inspect", "--format", "{{.Id}}", image) if image else None,
            image,
            gpus=remote.node.container.gpus,
        )

    # -- images ----------------------------------------------------------------------------
    def image_for(
        self, framework: str, node: Node, source: str = "dlperf", image: str = "pinned"
    ) -> str:
        """The image ID this node runs the case in: an inventory override, the upstream
        source's image (pinned or current, as the case asks), or the framework's image for the
        node's variant."""
        override = node.container.image.get(framework) or node.container.image.get("default")
        if source != "dlperf":
            override = None
        key = (framework, source, image, override or node.container.variant)
        if key not in self._images and override:
            self._images[key] = self._resolve_override(override)
        elif key not in self._images:
            self._images[key] = self._resolved(framework, node.container.variant, source, image)
        return self._images[key]

    def _resolved(
        self, framework: str, variant: str, source: str = "dlperf", image: str = "pinned"
    ) -> str:
        """The ID of the image the kit built for the case, from the engine holding its tag."""
        from driver.images.build import resolve_image

        built = resolve_image(*self._built(framework, variant, source, image))
        assert built.id is not None
        return built.id

    def _built(
        self, framework: str, variant: str, source: str, image: str = "pinned"
    ) -> tuple[str, Any]:
        """The name of the image the kit builds for the case, and the build options."""
        from driver.images.build import BuildOptions
        from driver.images.catalog import discover, image_for
        from driver.sources.base import source_image

        options = self.build_options or BuildOptions(log=lambda _line: None)
        if source != "dlperf":
            return source_image(source, image), options
        return image_for(framework, variant, discover(options.root)), options

    def _resolve_override(self, ref: str) -> str:
        if ref.startswith("sha256:"):
            return ref
        # A tag names different images on different hosts; the run pins the head's (or the
        # first node's) digest, and pre-flight requires exactly that digest on every node.
        try:
            from driver.images.engine import docker_client, image_id

            found = image_id(docker_client(), ref)
            if found:
                return found
        except Exception:  # noqa: BLE001 - no engine on the head: ask the first node
            pass
        remote = self.remotes[0]
        result = remote.run_argv(self.cli(remote, "image", "inspect", "--format", "{{.Id}}", ref))
        if not result.ok:
            raise ValueError(f"image {ref!r} (inventory container.image) not found: {result.why()}")
        return result.stdout.strip()

    # -- node operations -------------------------------------------------------------------
    def probe_command(self, remote: Remote, code: str, image: str | None, framework: str) -> str:
        node = remote.node
        argv = self.cli(
            remote,
            "run", "--rm", "--network", "host", "--label", "dlperf.probe=1",
            *(["--gpus", node.container.gpus] if node.container.gpus else []),
            "-v", f"{code}:{WORKDIR}:ro", "-w", WORKDIR, "-e", f"PYTHONPATH={WORKDIR}",
            str(image), "python3", "-m", "driver.cluster.probe",
        )  # fmt: skip
        return shell(argv)

    def sweep(self, remote: Remote, label: str) -> str:
        listed = remote.run_argv(
            self.cli(remote, "ps", "-aq", "--filter", f"label=dlperf.session={label}"), timeout=60
        )
        ids = listed.stdout.split() if listed.ok else []
        if ids:
            # Nodes sharing an engine sweep the same containers at once: "no such container"
            # from the slower one is fine.
            remote.run(shell(self.cli(remote, "rm", "-f", *ids)) + " >/dev/null 2>&1 || true")
        runs = f"{remote.node.scratch_dir.rstrip('/')}/runs/{label}"
        remote.run_argv(["rm", "-rf", runs])
        return f"removed containers {', '.join(i[:12] for i in ids)}" if ids else ""

    def docker_args(self, launch: Launch, env: dict[str, str], code_dir: str) -> list[str]:
        node = launch.remote.node
        container = node.container
        # Our scripts run from the kit's code; an upstream source from its own folder in its image.
        workdir = launch.command.workdir or WORKDIR
        args = [
            "--network", "host", "--ipc", container.ipc, *self.init,
            "--workdir", workdir, "-v", f"{code_dir}:{WORKDIR}:ro",
        ]  # fmt: skip
        if node.data_dir:
            args += ["-v", f"{node.data_dir}:{node.data_dir}:ro"]
        for mount in container.mounts:
            args += ["-v", mount]
        if container.gpus:
            args += ["--gpus", container.gpus]
        if container.shm_size:
            args += ["--shm-size", container.shm_size]
        if container.memory:  # a hard cap: no swap beyond it, so exceeding it is an OOM kill
            args += ["--memory", container.memory, "--memory-swap", container.memory]
        for name, limit in sorted(container.ulimits.items()):
            args += ["--ulimit", f"{name}={limit}"]
        for key, value in sorted(env.items()):
            args += ["-e", f"{key}={value}"]
        return args

    def create_argv(
        self, launch: Launch, env: dict[str, str], code: str, image: str, labels: dict[str, str]
    ) -> list[str]:
        label_args = [a for key, value in labels.items() for a in ("--label", f"{key}={value}")]
        return self.cli(
            launch.remote,
            "create",
            "--name",
            launch.run_id,
            *label_args,
            *self.docker_args(launch, env, code),
            image,
            *launch.command.argv,
        )

    def command_line(
        self,
        launch: Launch,
        env: dict[str, str],
        code: str,
        framework: str,
        source: str,
        image: str = "pinned",
    ) -> str:
        image = self.planned_image(framework, launch.remote.node, source, image)
        create = self.create_argv(launch, env, code, image, {"dlperf.session": "<session>"})
        return f"{shell(create)} && {shell(self.cli(launch.remote, 'start', '-a', launch.run_id))}"

    def planned_image(self, framework: str, node: Node, source: str, image: str = "pinned") -> str:
        """The image a node would run, without an engine: the inventory's override, else the
        tag of the image with today's inputs (what ``dlperf images build`` makes); ``image``:
        an upstream source's case's choice, pinned or current."""
        override = node.container.image.get(framework) or node.container.image.get("default")
        if override and source == "dlperf":
            return override
        return self._planned_tag(framework, node.container.variant, source, image)

    def _planned_tag(
        self, framework: str, variant: str, source: str = "dlperf", image: str = "pinned"
    ) -> str:
        from driver.images.build import plan_images
        from driver.images.lock import LockError

        name, options = self._built(framework, variant, source, image)
        try:
            return plan_images([name], options)[name].tag
        except LockError:  # e.g. a base digest still unresolved: the name, and no tag yet
            return f"dlperf/{name}:<unbuilt: base not resolved in images.lock>"

    def create(
        self, launch: Launch, env: dict[str, str], prepared: Prepared, labels: dict[str, str]
    ) -> None:
        remote = launch.remote
        image = prepared.image[remote.node.name]
        argv = self.create_argv(launch, env, prepared.code_dirs[remote.node.name], image, labels)
        script = f"mkdir -p {shell([launch.run_dir])} && {shell(argv)}"
        result = remote.run(script, timeout=120)
        if not result.ok:
            raise RuntimeError(f"{self.name} create failed: {result.why()}")
        launch.facts["container_id"] = result.stdout.strip()[:64]
        launch.facts["image_id"] = image

    def start_command(self, launch: Launch) -> str:
        # The attached client is the channel's process: its exit status is the container's,
        # and the log is complete once it has exited.
        start = shell(self.cli(launch.remote, "start", "-a", launch.run_id))
        return self.collecting(launch, f"{start} > {shell([launch.log])} 2>&1 < /dev/null")

    def stop(self, launch: Launch) -> None:
        kill = shell(self.cli(launch.remote, "kill", launch.run_id))
        launch.remote.run(f"{kill} >/dev/null 2>&1 || true", timeout=60)

    def collect_script(self, launch: Launch) -> str:
        """The container's state (OOM, exit code, times), the container removed, its log."""
        remote = launch.remote
        inspect = shell(self.cli(remote, "inspect", "--format", "{{json .State}}", launch.run_id))
        remove = shell(self.cli(remote, "rm", "-f", launch.run_id))
        log = shell([launch.log])
        return (
            f'state=$({inspect} 2>/dev/null | head -n 1); printf "%s\\n" "$state"; '
            f"{remove} >/dev/null 2>&1; test -f {log} && echo log || echo none; "
            f"cat {log} 2>/dev/null"
        )

    def take_collected(self, launch: Launch, block: bytes, local: Path) -> None:
        state_line, _, rest = block.partition(b"\n")
        present, _, content = rest.partition(b"\n")
        self._record_state(launch, state_line.decode("utf-8", "replace").strip())
        if present.strip() == b"log":
            write_bytes(local, content)
        else:
            write_text(local, f"[dlperf] node {launch.remote.node.name}: no log was written\n")

    @staticmethod
    def _record_state(launch: Launch, line: str) -> None:
        if not line.startswith("{"):
            return  # never created
        state = json.loads(line)
        started, finished = (
            _parse_time(state.get("StartedAt")),
            _parse_time(state.get("FinishedAt")),
        )
        launch.facts.update(
            oom_killed=bool(state.get("OOMKilled")),
            container_exit_code=state.get("ExitCode"),
            container_started_at=started,
            container_finished_at=finished,
            container_seconds=(finished - started) if started and finished else None,
        )
        if launch.exit_code is None and state.get("Status") == "exited":
            launch.exit_code = int(state.get("ExitCode", -1))

    # -- on this host (the local runtime) ------------------------------------------------------
    def local_cli(self, *args: str) -> list[str]:
        """argv of this host's engine client (docker's reads DOCKER_HOST itself)."""
        return ["docker", *args]

    def engine_id(self, image: str) -> str:
        """An image ID as this engine names it."""
        return image

    def local_image(
        self,
        framework: str,
        variant: str,
        source: str = "dlperf",
        choice: str = "pinned",
        *,
        planned: bool = False,
    ) -> str:
        if planned:
            return self._planned_tag(framework, variant, source, choice)
        from driver.images.lock import LockError

        try:
            found = self.engine_id(self._resolved(framework, variant, source, choice))
            name = self._built(framework, variant, source, choice)[0]
        except LockError as error:  # not built, or no engine: the lock's message says the fix
            raise Failure(Verdict.FAILED, f"{self.name}: {error}") from None
        held = subprocess.run(
            self.local_cli("image", "inspect", "--format", "{{.Id}}", found),
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if held.returncode != 0:
            raise Failure(
                Verdict.FAILED,
                f"{self.name} does not hold image {found} ({name}): "
                f"{self.missing_fix.format(name=name, image=found)}",
            )
        return found

    def host_command(self, command: NodeCommand, run: HostRun) -> NodeCommand:
        # The engine's client is the node's process here; the command runs in the container
        # with only the names of its environment on the client's line (``-e NAME``: the value
        # from the client's own environment, which the runtime gives it), so no value is
        # rewritten, quoted or shown on a process list.
        argv = self.local_cli(
            "run", "--rm", "--name", run.name, "--label", f"dlperf.session={run.label}",
            "--label", f"dlperf.node={command.node}", "--network", "host", "--ipc", "host",
            *self.init, "--workdir", command.workdir or WORKDIR,
            *(word for mount in run.mounts for word in ("-v", mount)),
            *(self.gpu_flags if run.gpus else ()),
            "-e", f"PYTHONPATH={WORKDIR}", "-e", "PYTHONUNBUFFERED=1",
            *(word for name in sorted(command.env) for word in ("-e", name)),
            str(run.image), *command.argv,
        )  # fmt: skip
        return NodeCommand(node=command.node, argv=argv, env=command.env)

    def remove_runs(self, names: list[str]) -> None:
        # ``--rm`` removed each container that ended; this is for one whose client was killed
        # first (a timeout's SIGKILL), whatever still runs in it.
        subprocess.run(
            self.local_cli("rm", "-f", *names),
            capture_output=True, timeout=120, check=False,
        )  # fmt: skip

    def remove_leftovers(self, label: str) -> list[str]:
        listed = subprocess.run(
            self.local_cli(
                "ps", "-a", "--filter", f"label=dlperf.session={label}", "--format", "{{.Names}}"
            ),
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        names = listed.stdout.split() if listed.returncode == 0 else []
        if names:
            self.remove_runs(names)
        return [f"removed leftover {self.name} container {name} of this session" for name in names]
