"""The SSH transport: one repeat over N nodes, each reached over its own SSH connection.

A repeat on a cluster:

1. prepare (once per session and framework): pre-flight on every node in parallel, the kit's
   code shipped where missing, leftovers of this session removed (a node lost earlier may
   still run a container), each node's provenance captured;
2. launch: the node's process (a container, or a process group) is created on every node,
   then all are started together, each attached to its own SSH channel whose exit status is
   the process's; the node writes its log to its scratch folder;
3. watch: the first non-zero exit, a dropped connection, a node whose sshd stops answering
   keepalive requests (hung, or its network gone: ``silence_limit_s``), the timeout or Ctrl-C
   ends the repeat for every node;
4. finish: what is still running is stopped on every node. A node's collection (the
   container's state or the process's run time and CPU time, the log byte for byte, the
   container and run folder removed) runs at the end of its launch command and arrives on the
   launch's own channel, between two markers: no second SSH session per node per repeat. A
   node stopped before that gets the same collection as a command of its own, all such nodes
   at once. Logs land in the repeat folder as ``node<i>.log``; OOM (docker's
   ``State.OOMKilled``, or the scripts' exit 86) is told apart.

One SSH connection per node serves the whole session (prepare, launch, watch, finish), and
every per-node step runs for all nodes at once: the driver's own time per repeat stays nearly
flat as nodes are added.

How a node's process is created, started, stopped and collected is its container platform's
(``driver/runtimes/containers/``), picked by the inventory's ``container:`` (``none`` unless
set); ``--runtime docker`` and ``--runtime process`` are this transport with docker and with no
container. The watch's verdict is ``watch.py``'s.

This file runs a little over 500 lines because it is the whole of stages 1, 2 and 4 in the
order they happen, around state they share (what is prepared, which nodes may hold leftovers);
cut in two, each half would read the other's state.
"""

from __future__ import annotations

import functools
import hashlib
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from driver.cluster import provenance
from driver.cluster.code import CodeBundle, CodeSyncError, code_dir, make_bundle, sync_code
from driver.cluster.inventory import Inventory, Node, check_container_data_dir, load_inventory
from driver.cluster.preflight import Check, devices_check, failures, run_preflight
from driver.cluster.remote import NodeUnreachable, Remote, parallel
from driver.files import write_text
from driver.launchers.base import NodeRank
from driver.runtimes.base import (
    INTERRUPTED_DETAIL,
    RUNTIMES,
    Failure,
    NodeOutcome,
    RepeatOutcome,
    Runtime,
    RuntimeConfigError,
    Verdict,
    ctrl_c_held,
    driver_cpu_seconds,
    name_slug,
    raise_interrupted,
    session_label,
)
from driver.runtimes.containers import Context, platform_for
from driver.runtimes.plan import NodeCommand
from driver.runtimes.ssh import watch
from driver.runtimes.ssh.launch import Launch, Prepared
from driver.runtimes.ssh.platform import SshPlatform

if TYPE_CHECKING:
    from driver.runtimes.plan import RepeatPlan

POLL_S = watch.POLL_S
SETTLE_S = 5.0  # after a stop, how long attached channels get to flush the last log lines
RANK_KEYS = set(NodeRank(0, 1, 1, "", 0).environment())


def refuse_failed(checks: list[Check]) -> None:
    """Failure naming every check that failed (a node SSH did not reach: lost), if any."""
    bad = failures(checks)
    if bad:
        lost = any(check.name == "ssh" for check in bad)
        detail = "; ".join(f"node {c.node}: {c.name}: {c.detail}" for c in bad)
        raise Failure(Verdict.NODE_LOST if lost else Verdict.FAILED, f"pre-flight: {detail}")


RUN_NAME = "<run>"  # what --dry-run shows for the per-repeat run name


@RUNTIMES.register("ssh")
class SshRuntime(Runtime):
    """The SSH transport with one container platform; see the module docstring."""

    name = "ssh"
    cluster_file = "required"  # the inventory lists the nodes (make_runtime)
    platform_name: str | None = None  # a spelling's own platform (docker, process)
    # what it writes into the session folder itself while a repeat runs (each node's
    # provenance facts, ``provenance/<node>.json``): the runner tells the run's warrant
    session_writes = ("provenance",)

    # A node whose sshd has not answered for this long is lost (hung, or its network gone).
    silence_limit_s = 30.0

    def __init__(self, inventory: Inventory | str | Path, *, build_options: Any = None) -> None:
        """``build_options``: how a platform that runs the kit's images resolves them."""
        self.inventory = (
            inventory if isinstance(inventory, Inventory) else load_inventory(inventory)
        )
        self.remotes = [Remote(node) for node in self.inventory.nodes]
        where, chosen = str(self.inventory.path), self.inventory.container
        if self.platform_name and chosen and chosen != self.platform_name:
            raise RuntimeConfigError(
                f"{where}: container: {chosen!r}, but --runtime {self.name} runs "
                f"{self.platform_name}: use --runtime ssh (the inventory's container), or "
                "remove container: from the inventory"
            )
        context = Context(where, remotes=self.remotes, build_options=build_options)
        name = self.platform_name or chosen or "none"
        self.platform = platform_for(SshPlatform, name, context, "container")
        self._prepared: dict[tuple[str, str, str, str], Prepared] = {}
        self._dirty: set[str] = set()  # nodes that may hold leftovers (lost in a repeat)
        # (session label, node) swept by clean_leftovers: prepare need not sweep it again
        # unless the node was lost since (then it is in _dirty).
        self._swept: set[tuple[str, str]] = set()

    def check_data_dirs(self, data_dirs: set[str]) -> None:
        """Cases' ``data_dir`` seen inside every node's container (InventoryError if not)."""
        if self.platform.sees_only_mounts:
            for data_dir in sorted(data_dirs):
                check_container_data_dir(self.inventory, data_dir)

    @functools.cached_property
    def bundle(self) -> CodeBundle:
        """The kit's code as shipped to the nodes, made once per runtime (a tar of every
        file: planning asks for its folder on every repeat)."""
        return make_bundle()

    def disconnect(self) -> None:
        """Close every node's SSH connection (a later command connects again): each open
        connection keeps a paramiko thread polling its socket every 0.1 s on the head node."""
        for remote in self.remotes:
            remote.close()

    # -- Runtime protocol ------------------------------------------------------------------
    def node_addresses(self, count: int) -> list[tuple[str, str]]:
        nodes = self.inventory.nodes
        if count > len(nodes):
            raise ValueError(
                f"{self.inventory.path}: the case needs {count} nodes, the inventory lists "
                f"{len(nodes)} ({', '.join(n.name for n in nodes)})"
            )
        return [(node.name, node.collective_address) for node in nodes[:count]]

    def environment(self, framework: Any) -> dict[str, str]:  # noqa: ARG002 - protocol
        return {}

    def workdir(self) -> str:
        # Every node's own copy is substituted at launch; this is the first node's, for records.
        mounted = self.platform.mount_point
        return mounted or code_dir(self.inventory.nodes[0].scratch_dir, self.bundle)

    def python(self, framework: Any) -> str:
        name = getattr(framework, "name", str(framework))
        # The image's, or the node's own (plan_repeat knows one: the first node's).
        return self.platform.python(name) or self.inventory.nodes[0].python_for(name)

    # -- --dry-run ---------------------------------------------------------------------------
    def describe(self, plan: RepeatPlan) -> list[str]:
        """Per node, the SSH target and the command it would run there, exactly as a run
        sends it (the run name is made per repeat; the image as its planned tag)."""
        bundle = self.bundle
        lines = []
        framework, source = plan.framework, plan.source
        for index, (command, remote) in enumerate(
            zip(plan.commands, self.remotes_for(plan.commands), strict=True)
        ):
            node = remote.node
            code = code_dir(node.scratch_dir, bundle)
            env = self.node_environment(command, node, self.platform.workdir(code))
            launch = Launch(index, remote, command, RUN_NAME, f"{node.scratch_dir}/runs/{RUN_NAME}")
            there = self.platform.command_line(
                launch, env, code, framework, source, plan.case.image
            )
            # The exact string the node's shell gets over SSH (Fabric sends it as it is).
            lines.append(f"[{node.name}] {node.ssh.user}@{node.address}:{node.ssh.port} $ {there}")
        return lines

    def collect_node(self, launch: Launch, local: Path) -> None:
        """The collection as a command of its own: for a node whose launch command was
        stopped (or lost its channel) before it collected."""
        code, output, _ = launch.remote.run_bytes(self.platform.collection(launch), timeout=300)
        if code == 124:  # the caller notes the log as not fetched, the node as unclean
            raise RuntimeError("fetching the log and cleaning up timed out")
        block = launch.collected_block(output)
        if block is None:
            raise RuntimeError(f"the collection command ended early (exit {code})")
        self.platform.take_collected(launch, block, local)

    # -- preparing -------------------------------------------------------------------------
    def remotes_for(self, commands: tuple[NodeCommand, ...]) -> list[Remote]:
        by_name = {remote.node.name: remote for remote in self.remotes}
        missing = [c.node for c in commands if c.node not in by_name]
        if missing:
            raise ValueError(f"nodes {missing} are not in {self.inventory.path}")
        return [by_name[c.node] for c in commands]

    def preflight(
        self,
        remotes: list[Remote],
        framework: str,
        devices: int | None = None,
        source: str = "dlperf",
        choice: str = "pinned",
    ) -> tuple[list[Check], dict[str, str]]:
        """Checks of every node, with the image each node must have (a container engine);
        ``choice``: an upstream source's case's image, pinned or current."""
        images: dict[str, str] = {}
        checks: list[Check] = []
        by_image: dict[str | None, list[Remote]] = {}
        for remote in remotes:
            image = self.platform.image_for(framework, remote.node, source, choice)
            if image:
                images[remote.node.name] = image
            by_image.setdefault(image or None, []).append(remote)
        for image, group in by_image.items():
            checks += run_preflight(
                group, engine=lambda remote, image=image: self.platform.engine(remote, image),
                devices=devices, framework=framework,
            )  # fmt: skip
        order = {remote.node.name: i for i, remote in enumerate(remotes)}
        checks.sort(key=lambda c: order.get(c.node, 0))
        return checks, images

    def prepare(
        self,
        remotes: list[Remote],
        framework: str,
        root: Path,
        devices: int,
        source: str = "dlperf",
        choice: str = "pinned",
    ) -> Prepared:
        key = (str(root), framework, source, choice)
        names = {remote.node.name for remote in remotes}
        cached = self._prepared.get(key)
        if cached and names <= set(cached.code_dirs) and not (names & self._dirty):
            self._check_devices(cached, remotes, devices)
            return cached
        started = time.monotonic()
        if source != "dlperf" and not self.platform.runs_sources:
            raise Failure(
                Verdict.FAILED,
                f"upstream source {source!r} runs in its own image, which container: "
                f"{self.platform.name} does not run: set container: docker or podman",
            )
        try:
            checks, images = self.preflight(remotes, framework, devices, source, choice)
        except Exception as error:  # noqa: BLE001 - e.g. no image built: one clear verdict
            raise Failure(Verdict.FAILED, f"pre-flight: {error}") from None
        refuse_failed(checks)
        bundle = self.bundle
        label = session_label(root)

        def node_setup(remote: Remote) -> tuple[str, str, dict[str, Any]]:
            code = sync_code(remote, bundle)
            name = remote.node.name
            fresh = (label, name) in self._swept and name not in self._dirty
            removed = "" if fresh else self.platform.sweep(remote, label)
            image = images.get(remote.node.name)
            facts = provenance.collect(
                remote,
                engine=self.platform.engine(remote, image),
                probe_command=self.platform.probe_command(remote, code, image, framework),
            )
            facts["code"] = {"digest": bundle.digest, "path": code, "files": bundle.files}
            return code, removed, facts

        code_dirs: dict[str, str] = {}
        facts_by_node: dict[str, dict[str, Any]] = {}
        for remote, result, error in parallel(remotes, node_setup):
            if isinstance(error, NodeUnreachable):
                raise Failure(Verdict.NODE_LOST, str(error))
            if isinstance(error, CodeSyncError):
                raise Failure(Verdict.FAILED, str(error))
            if error is not None:
                raise Failure(Verdict.FAILED, f"node {remote.node.name}: {error}")
            code, removed, facts = result
            code_dirs[remote.node.name] = code
            facts["swept"] = removed
            facts["preflight"] = [c.__dict__ for c in checks if c.node == remote.node.name]
            facts_by_node[remote.node.name] = facts
            provenance.write(root, remote.node.name, facts)
            self._dirty.discard(remote.node.name)
        prepared = Prepared(
            bundle=bundle,
            code_dirs=code_dirs,
            image=images,
            provenance=facts_by_node,
            seconds=time.monotonic() - started,
            framework=framework,
            source=source,
            devices={c.node: c.found for c in checks if c.name == "devices"},
        )
        self._prepared[key] = prepared
        return prepared

    def _check_devices(self, prepared: Prepared, remotes: list[Remote], devices: int) -> None:
        """This case's ranks per node against the devices each node showed at its pre-flight."""
        refuse_failed([
            devices_check(
                remote.node.name, remote.node.container.variant,
                prepared.devices.get(remote.node.name), "not counted at pre-flight", devices,
                prepared.framework,
            )
            for remote in remotes
        ])  # fmt: skip

    # -- one repeat ------------------------------------------------------------------------
    def node_environment(self, command: NodeCommand, node: Node, workdir: str) -> dict[str, str]:
        """The node's process environment: the command's, the inventory's, the interface."""
        env = {
            **command.env,
            **node.collective_env(),
            **node.env,
            "PYTHONPATH": workdir,
            "PYTHONUNBUFFERED": "1",
            "DLPERF_NODE_NAME": node.name,
        }
        for key in RANK_KEYS & set(command.env):
            env[key] = command.env[key]  # the rank environment is the driver's, never overridden
        return env

    def clean_leftovers(self, session_root: Path) -> list[str]:
        """Before a session (re)starts: remove what an earlier, killed run of it left on any
        node (containers or process groups labelled with this session), saying what."""
        label = session_label(session_root)
        messages = []
        sweeps = parallel(self.remotes, lambda remote: self.platform.sweep(remote, label))
        for remote, removed, error in sweeps:
            if error is not None:
                self._dirty.add(remote.node.name)  # swept again when the node is prepared
                continue
            self._swept.add((label, remote.node.name))
            if removed.strip():
                messages.append(
                    f"node {remote.node.name}: ended leftovers of this session: {removed.strip()}"
                )
        return messages

    def run(self, plan: RepeatPlan) -> RepeatOutcome:
        started, started_cpu = time.time(), driver_cpu_seconds()
        root, repeat_dir, timeout_s = plan.session_root, plan.repeat_dir, plan.timeout_s
        label = session_label(root)
        case_id, repeat_name = plan.case_id, repeat_dir.name
        framework, source = plan.framework, plan.source
        commands = plan.commands
        remotes = self.remotes_for(commands)
        devices = plan.devices_per_node
        timings: dict[str, float] = {}
        extra: dict[str, Any] = {"session_label": label, "timings": timings}
        launches: list[Launch] = []
        verdict, detail = Verdict.OK, ""
        interrupted = False
        try:
            t0 = time.monotonic()
            try:
                prepared = self.prepare(remotes, framework, root, devices, source, plan.case.image)
            except Failure as failure:
                return RepeatOutcome(
                    failure.verdict, [], started, time.time(), failure.detail, extra
                )
            timings["prepare_s"] = round(time.monotonic() - t0, 3)  # ~0 once prepared
            extra.update(self._run_facts(prepared, remotes))
            base_id = f"{name_slug(label, 30)}-{hashlib.sha1(case_id.encode()).hexdigest()[:8]}"
            suffix = uuid.uuid4().hex[:4]
            for index, (command, remote) in enumerate(zip(commands, remotes, strict=True)):
                run_id = f"dlperf-{base_id}-{name_slug(repeat_name, 12)}-n{index}-{suffix}"
                run_dir = f"{remote.node.scratch_dir.rstrip('/')}/runs/{label}/{run_id}"
                launches.append(Launch(index, remote, command, run_id, run_dir))
            labels = {
                "dlperf.session": label,
                "dlperf.case": case_id,
                "dlperf.repeat": repeat_name,
            }
            t0 = time.monotonic()
            verdict, detail = self._launch(launches, prepared, labels)
            timings["launch_s"] = round(time.monotonic() - t0, 3)
            if verdict == Verdict.OK:
                t0 = time.monotonic()
                verdict, detail = self._watch(launches, timeout_s)
                timings["watch_s"] = round(time.monotonic() - t0, 3)
        except KeyboardInterrupt:
            interrupted = True
            verdict, detail = Verdict.INTERRUPTED, INTERRUPTED_DETAIL
        with ctrl_c_held():  # containers must not outlive us
            t0 = time.monotonic()
            verdict, detail, notes = self._finish(launches, repeat_dir, verdict, detail)
            timings["finish_s"] = round(time.monotonic() - t0, 3)
            timings["driver_cpu_s"] = round(driver_cpu_seconds() - started_cpu, 3)
            if notes:
                extra["cleanup"] = notes
        extra["nodes"] = {
            launch.remote.node.name: {
                "run_id": launch.run_id,
                "exit_code": launch.exit_code,
                "lost": launch.lost,
                **launch.facts,
            }
            for launch in launches
        }
        if interrupted:
            raise_interrupted(repeat_dir, detail, extra)
        return RepeatOutcome(
            verdict=verdict,
            nodes=[
                NodeOutcome(
                    node=launch.command.node,
                    exit_code=launch.exit_code,
                    log_path=repeat_dir / f"node{launch.index}.log",
                    detail=launch.lost or "",
                )
                for launch in launches
            ],
            started_at=started,
            finished_at=time.time(),
            detail=detail,
            extra=extra,
        )

    def _run_facts(self, prepared: Prepared, remotes: list[Remote]) -> dict[str, Any]:
        return {
            "inventory": str(self.inventory.path),
            "cluster": self.inventory.name,
            "code_digest": prepared.bundle.digest,
            "images": {n: prepared.image[n] for n in prepared.image},
            "provenance": {
                remote.node.name: provenance.summary(prepared.provenance.get(remote.node.name, {}))
                for remote in remotes
            },
        }

    def _launch(
        self, launches: list[Launch], prepared: Prepared, labels: dict[str, str]
    ) -> tuple[Verdict, str]:
        """Create every node's process, then start them all (one channel each)."""

        def create(launch: Launch) -> None:
            workdir = prepared.code_dirs[launch.remote.node.name]
            env = self.node_environment(
                launch.command, launch.remote.node, self.platform.workdir(workdir)
            )
            labelled = {**labels, "dlperf.node": launch.remote.node.name}
            self.platform.create(launch, env, prepared, labelled)

        def start(launch: Launch) -> None:
            launch.channel = launch.remote.start(self.platform.start_command(launch))

        # Every node's channel opened at once: one after another, each waited for its sshd to
        # start the session (a round trip and a fork), which grew the launch with the nodes.
        for step in (create, start):
            verdict, detail = self._on_every_node(launches, step)
            if verdict != Verdict.OK:
                return verdict, detail
        return Verdict.OK, ""

    def _on_every_node(
        self, launches: list[Launch], step: Callable[[Launch], None]
    ) -> tuple[Verdict, str]:
        """``step`` on every node at once; the first node that failed it names the verdict (a
        node out of reach: lost, and swept before its next use)."""
        for launch, _, error in parallel(launches, step):
            if isinstance(error, NodeUnreachable):
                launch.lost = error.detail
                self._dirty.add(launch.remote.node.name)
                return Verdict.NODE_LOST, str(error)
            if error is not None:
                return Verdict.FAILED, f"node {launch.remote.node.name}: {error}"
        return Verdict.OK, ""

    def _watch(self, launches: list[Launch], timeout_s: float) -> tuple[Verdict, str]:
        verdict, detail = watch.watch(launches, timeout_s, self.silence_limit_s)
        # A node lost mid-repeat may still run its process: swept before its next use.
        self._dirty.update(launch.remote.node.name for launch in launches if launch.lost)
        return verdict, detail

    def _finish(
        self, launches: list[Launch], repeat_dir: Path, verdict: Verdict, detail: str
    ) -> tuple[Verdict, str, list[str]]:
        """Stop what runs, fetch every log, remove containers / run folders, refine the verdict."""
        notes: list[str] = []
        if not launches:
            return verdict, detail, notes
        unreachable: set[int] = set()
        if verdict != Verdict.OK:
            running = [launch for launch in launches if not launch.ended]
            for launch, _, error in parallel(running, self.platform.stop):
                if error is not None:
                    self._dirty.add(launch.remote.node.name)
                    notes.append(
                        f"node {launch.remote.node.name}: could not stop {launch.run_id} ({error});"
                        " the next run of this session removes it"
                    )
                    if isinstance(error, NodeUnreachable):
                        unreachable.add(launch.index)  # no second wait for its connect timeout
        settle = time.monotonic() + SETTLE_S
        for launch in launches:
            channel = launch.channel
            if channel is None or launch.lost:
                continue
            # Read to the channel's end: a command that exited may still be sending its log.
            while not (launch.read_channel() and channel.exit_status_ready()):
                if time.monotonic() >= settle:
                    break
                time.sleep(POLL_S)
            if launch.exit_code is None and channel.exit_status_ready():
                status = channel.recv_exit_status()
                launch.exit_code = status if status != -1 else None
            channel.close()

        def collect(launch: Launch) -> None:
            local = repeat_dir / f"node{launch.index}.log"
            block = launch.collected_block()
            if block is not None:  # it came on the launch's own channel
                self.platform.take_collected(launch, block, local)
                return
            if launch.index in unreachable:
                raise NodeUnreachable(launch.remote.node.name, "unreachable while stopping")
            self.collect_node(launch, local)

        for launch, _, error in parallel(launches, collect):
            if error is not None:
                self._dirty.add(launch.remote.node.name)
                local = repeat_dir / f"node{launch.index}.log"
                if not local.exists():
                    why = f"[dlperf] node {launch.remote.node.name}: log not fetched: {error}\n"
                    write_text(local, why)
                notes.append(f"node {launch.remote.node.name}: cleanup incomplete: {error}")
        oom = [x for x in launches if x.facts.get("oom_killed")]
        if oom and verdict in (Verdict.FAILED, Verdict.OK):
            verdict = Verdict.OOM
            detail = f"node {oom[0].remote.node.name}: killed for memory (OOMKilled)"
        return verdict, detail, notes


@RUNTIMES.register("docker")
class DockerRuntime(SshRuntime):
    """``--runtime docker``: a spelling of the SSH transport with the docker platform."""

    name = "docker"
    platform_name = "docker"


@RUNTIMES.register("process")
class ProcessRuntime(SshRuntime):
    """``--runtime process``: a spelling of the SSH transport with no container."""

    name = "process"
    platform_name = "none"
