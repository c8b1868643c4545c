"""What the two SSH runtimes (``docker`` and ``process``) share: one repeat over N nodes.

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

Subclasses say how a node's process is created, started, stopped and inspected.
"""

from __future__ import annotations

import hashlib
import json
import re
import selectors
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from driver.bench.protocol import EXIT_OOM
from driver.cluster import provenance
from driver.cluster.code import CodeBundle, CodeSyncError, code_dir, make_bundle, sync_code
from driver.cluster.inventory import Inventory, Node, load_inventory
from driver.cluster.preflight import Check, devices_check, failures, run_preflight
from driver.cluster.remote import NodeUnreachable, Remote, parallel, shell
from driver.launchers.base import NodeRank
from driver.runtimes.base import (
    INTERRUPTED_DETAIL,
    NodeOutcome,
    RepeatOutcome,
    Verdict,
    driver_cpu_seconds,
)
from driver.runtimes.plan import NodeCommand

if TYPE_CHECKING:
    from driver.runtimes.plan import RepeatPlan

POLL_S = 0.05
# The watch sleeps until a launch channel has news (output, its end), or this long at most:
# how often a lost connection or a silent node is looked for.
WAKE_S = 0.5
SETTLE_S = 5.0  # after a stop, how long attached channels get to flush the last log lines
HEARTBEAT_S = 2.0  # how often each node's sshd is asked for an answer during a repeat
RANK_KEYS = set(NodeRank(0, 1, 1, "", 0).environment())
# The lines around a node's collection block (what its process left, then its log byte for byte)
# on the launch channel's stdout, or on the separate collection command's.
COLLECTED = "dlperf-collected"
COLLECTED_END = "dlperf-collected-end"


@dataclass
class Launch:
    """One node's part of a repeat."""

    index: int
    remote: Remote
    command: NodeCommand
    run_id: str  # unique: container name / run folder name
    run_dir: str  # on the node: <scratch>/runs/<session label>/<run id>
    channel: Any = None  # paramiko Channel attached to the process
    exit_code: int | None = None
    lost: str | None = None  # why the node dropped off, when it did
    facts: dict[str, Any] = field(default_factory=dict)  # inspect results: OOM, times, IDs
    start_command: str = ""  # what the attached channel runs, when create() prepares it
    output: bytearray = field(default_factory=bytearray)  # the launch channel's stdout so far
    output_ended: bool = False  # its end (EOF) came: ``output`` is all the node will send

    @property
    def log(self) -> str:
        return f"{self.run_dir}/node.log"

    def read_channel(self) -> bool:
        """Take what the launch channel has sent so far (without waiting); True once its
        stdout has ended. Read while the node runs, so that the channel's window never fills;
        its stderr holds only the shell's own complaints (the process writes to its log)."""
        channel = self.channel
        if channel is None:
            return False
        while channel.recv_ready():
            self.output.extend(channel.recv(65536))
        while channel.recv_stderr_ready():
            channel.recv_stderr(65536)
        if (channel.eof_received or channel.closed) and not channel.recv_ready():
            self.output_ended = True
        return self.output_ended

    @property
    def ended(self) -> bool:
        """The node's command has exited and everything it wrote has arrived."""
        return self.channel is not None and self.channel.exit_status_ready() and self.output_ended

    def collected_block(self, output: bytes | bytearray | None = None) -> bytes | None:
        """The collection block from ``output`` (default: the launch channel's, once ended):
        the bytes between the start and end markers, or None when they are not both there
        (the command stopped before its collection ran, or during it)."""
        if output is None:
            if not self.output_ended:
                return None
            output = self.output
        start = f"{COLLECTED} {self.run_id}\n".encode()
        end = f"\n{COLLECTED_END} {self.run_id}\n".encode()
        begin, finish = output.find(start), output.rfind(end)
        if begin < 0 or finish < begin + len(start):
            return None
        return bytes(output[begin + len(start) : finish])


@dataclass
class Prepared:
    bundle: CodeBundle
    code_dirs: dict[str, str]  # node -> code folder on that node
    image: dict[str, str]  # node -> image ID (docker runtime)
    provenance: dict[str, dict[str, Any]]
    seconds: float
    framework: str = "calibration"
    # node -> the devices its pre-flight counted (None: could not count): a later case with
    # more ranks per node is judged by the same rule (preflight.devices_check), not skipped.
    devices: dict[str, int | None] = field(default_factory=dict)


class PrepareFailed(Exception):
    def __init__(self, verdict: Verdict, detail: str) -> None:
        super().__init__(detail)
        self.verdict, self.detail = verdict, detail


def slug(text: str, length: int) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")[:length] or "x"


def session_label(root: Path) -> str:
    """Names this session on every node (labels, run folders); unique per results folder."""
    digest = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:8]
    return f"{slug(root.name, 40)}-{digest}"


RUN_NAME = "<run>"  # what --dry-run shows for the per-repeat run name


class SshRuntime:
    """Base of the runtimes that reach nodes over SSH; see the module docstring."""

    name = "ssh"
    cluster_file = "required"  # the inventory lists the nodes (make_runtime)
    kind = "ssh"  # preflight flavour: docker | process
    runs_sources = False  # upstream sources bring their code in their image: docker only

    # A node whose sshd has not answered for this long is lost (hung, or its network gone).
    silence_limit_s = 30.0

    def __init__(self, inventory: Inventory | str | Path) -> None:
        self.inventory = (
            inventory if isinstance(inventory, Inventory) else load_inventory(inventory)
        )
        self.remotes = [Remote(node) for node in self.inventory.nodes]
        self._prepared: dict[tuple[str, str, str], Prepared] = {}
        self._dirty: set[str] = set()  # nodes that may hold leftovers (lost in a repeat)
        self._bundle: CodeBundle | None = None
        # (session label, node) swept by clean_leftovers: prepare need not sweep it again
        # unless the node was lost since (then it is in _dirty).
        self._swept: set[tuple[str, str]] = set()

    def bundle(self) -> CodeBundle:
        """The kit's code as shipped to the nodes, made once per runtime (a tar of every
        file: planning asks for its folder on every repeat)."""
        if self._bundle is None:
            self._bundle = make_bundle()
        return self._bundle

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
        raise NotImplementedError

    def python(self, framework: Any) -> str:
        raise NotImplementedError

    # -- --dry-run ---------------------------------------------------------------------------
    def describe(self, plan: RepeatPlan) -> list[str]:
        """Per node, the SSH target and the command it would run there, exactly as a run
        sends it (the run name is made per repeat; the image as its planned tag)."""
        bundle = self.bundle()
        lines = []
        framework, source = plan.framework, plan.source
        for index, (command, remote) in enumerate(
            zip(plan.commands, self.remotes_for(plan.commands), strict=True)
        ):
            node = remote.node
            code = code_dir(node.scratch_dir, bundle)
            env = self.node_environment(command, node, self.workdir_on(code))
            launch = Launch(index, remote, command, RUN_NAME, f"{node.scratch_dir}/runs/{RUN_NAME}")
            there = self.node_command_line(launch, env, code, framework, source)
            # The exact string the node's shell gets over SSH (Fabric sends it as it is).
            lines.append(f"[{node.name}] {node.ssh.user}@{node.address}:{node.ssh.port} $ {there}")
        return lines

    def node_command_line(
        self, launch: Launch, env: dict[str, str], code: str, framework: str, source: str
    ) -> str:
        """The shell command a launch runs on its node (``describe``)."""
        raise NotImplementedError

    # -- subclass hooks --------------------------------------------------------------------
    def image_for(self, framework: str, node: Node, source: str = "dlperf") -> str | None:
        return None

    def probe_command(
        self, remote: Remote, prepared_code: str, image: str | None, framework: str
    ) -> str:
        raise NotImplementedError

    def sweep(self, remote: Remote, label: str) -> str:
        """Remove what this session left on the node earlier; returns what was removed."""
        raise NotImplementedError

    def create(self, launch: Launch, env: dict[str, str], prepared: Prepared, labels: dict) -> None:
        raise NotImplementedError

    def attach_command(self, launch: Launch) -> str:
        raise NotImplementedError

    def stop(self, launch: Launch) -> None:
        raise NotImplementedError

    def collect_script(self, launch: Launch) -> str:
        """Shell commands that print, on stdout, what the node's process left (container
        state, run time) and its log byte for byte (:meth:`take_collected` reads them), then
        remove its container and run folder. They run at the end of the launch's own command
        (:meth:`collecting`: no second SSH session per node per repeat) or, when that command
        was stopped before them, as a command of their own (:meth:`collect_node`)."""
        raise NotImplementedError

    def take_collected(self, launch: Launch, block: bytes, local: Path) -> None:
        """Read a collection block: facts into ``launch.facts``, the log into ``local``."""
        raise NotImplementedError

    def collecting(self, launch: Launch, command: str, after_exit: str = "") -> str:
        """``command``, then in the same shell its collection block between two markers
        (the end marker is printed once the log has been sent whole) and ``command``'s exit
        status as the channel's. ``after_exit``: shell commands run first, e.g. a stamp."""
        return (
            f"{command}; rc=$?; {after_exit}{self._collection(launch)}; {self.exit_as(launch)}"
        )

    def exit_as(self, launch: Launch) -> str:  # noqa: ARG002 - the process runtime's differs
        """How the launch's shell ends after its collection: with the command's status."""
        return "exit $rc"

    def _collection(self, launch: Launch) -> str:
        start, end = f"{COLLECTED} {launch.run_id}", f"{COLLECTED_END} {launch.run_id}"
        return (
            f"printf '%s\\n' {shell([start])}; {self.collect_script(launch)}; "
            f"printf '\\n%s\\n' {shell([end])}; rm -rf {shell([launch.run_dir])}"
        )

    def collect_node(self, launch: Launch, local: Path) -> None:
        """The collection as a command of its own: for a node whose launch command was
        stopped (or lost its channel) before it collected."""
        code, output, _ = launch.remote.run_bytes(self._collection(launch), timeout=300)
        if code == 124:  # the caller notes the log as not fetched, the node as unclean
            raise RuntimeError("fetching the log and cleaning up timed out")
        block = launch.collected_block(output)
        if block is None:
            raise RuntimeError(f"the collection command ended early (exit {code})")
        self.take_collected(launch, block, local)

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
    ) -> tuple[list[Check], dict[str, str]]:
        """Checks of every node, with the image each node must have (docker)."""
        images: dict[str, str] = {}
        checks: list[Check] = []
        for remote in remotes:
            image = self.image_for(framework, remote.node, source)
            if image:
                images[remote.node.name] = image
        by_image: dict[str | None, list[Remote]] = {}
        for remote in remotes:
            by_image.setdefault(images.get(remote.node.name), []).append(remote)
        for image, group in by_image.items():
            checks += run_preflight(
                group, kind=self.kind, devices=devices, image_id=image, framework=framework
            )
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
    ) -> Prepared:
        key = (str(root), framework, source)
        names = {remote.node.name for remote in remotes}
        cached = self._prepared.get(key)
        if cached and names <= set(cached.code_dirs) and not (names & self._dirty):
            self._check_devices(cached, remotes, devices)
            return cached
        started = time.monotonic()
        if source != "dlperf" and not self.runs_sources:
            raise PrepareFailed(
                Verdict.FAILED,
                f"upstream source {source!r} runs in its own image: use --runtime docker",
            )
        try:
            checks, images = self.preflight(remotes, framework, devices, source)
        except Exception as error:  # noqa: BLE001 - e.g. no image built: one clear verdict
            raise PrepareFailed(Verdict.FAILED, f"pre-flight: {error}") from None
        bad = failures(checks)
        if bad:
            lost = any(check.name == "ssh" for check in bad)
            detail = "; ".join(f"node {c.node}: {c.name}: {c.detail}" for c in bad)
            raise PrepareFailed(
                Verdict.NODE_LOST if lost else Verdict.FAILED, f"pre-flight: {detail}"
            )
        bundle = self.bundle()
        label = session_label(root)

        def node_setup(remote: Remote) -> tuple[str, str, dict[str, Any]]:
            code = sync_code(remote, bundle)
            name = remote.node.name
            fresh = (label, name) in self._swept and name not in self._dirty
            removed = "" if fresh else self.sweep(remote, label)
            image = images.get(remote.node.name)
            facts = provenance.collect(
                remote,
                image=image,
                probe_command=self.probe_command(remote, code, image, framework),
            )
            facts["code"] = {"digest": bundle.digest, "path": code, "files": bundle.files}
            return code, removed, facts

        code_dirs: dict[str, str] = {}
        facts_by_node: dict[str, dict[str, Any]] = {}
        for remote, result, error in parallel(remotes, node_setup):
            if isinstance(error, NodeUnreachable):
                raise PrepareFailed(Verdict.NODE_LOST, str(error))
            if isinstance(error, CodeSyncError):
                raise PrepareFailed(Verdict.FAILED, str(error))
            if error is not None:
                raise PrepareFailed(Verdict.FAILED, f"node {remote.node.name}: {error}")
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
            devices={c.node: c.found for c in checks if c.name == "devices"},
        )
        self._prepared[key] = prepared
        return prepared

    def _check_devices(self, prepared: Prepared, remotes: list[Remote], devices: int) -> None:
        """This case's ranks per node against the devices each node showed at its pre-flight."""
        bad = []
        for remote in remotes:
            check = devices_check(
                remote.node.name, remote.node.container.variant,
                prepared.devices.get(remote.node.name), "not counted at pre-flight", devices,
                prepared.framework,
            )  # fmt: skip
            if not check.ok:
                bad.append(check)
        if bad:
            detail = "; ".join(f"node {c.node}: {c.name}: {c.detail}" for c in bad)
            raise PrepareFailed(Verdict.FAILED, f"pre-flight: {detail}")

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
        for remote, removed, error in parallel(self.remotes, lambda r: self.sweep(r, label)):
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
                prepared = self.prepare(remotes, framework, root, devices, source)
            except PrepareFailed as failure:
                return RepeatOutcome(
                    failure.verdict, [], started, time.time(), failure.detail, extra
                )
            timings["prepare_s"] = round(time.monotonic() - t0, 3)  # ~0 once prepared
            extra.update(self._run_facts(prepared, remotes))
            base_id = f"{slug(label, 30)}-{hashlib.sha1(case_id.encode()).hexdigest()[:8]}"
            suffix = uuid.uuid4().hex[:4]
            for index, (command, remote) in enumerate(zip(commands, remotes, strict=True)):
                run_id = f"dlperf-{base_id}-{slug(repeat_name, 12)}-n{index}-{suffix}"
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
        # Cleanup must finish even if Ctrl-C is pressed again: containers must not outlive us.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if _main_thread() else None
        try:
            t0 = time.monotonic()
            verdict, detail, notes = self._finish(launches, repeat_dir, verdict, detail)
            timings["finish_s"] = round(time.monotonic() - t0, 3)
            timings["driver_cpu_s"] = round(driver_cpu_seconds() - started_cpu, 3)
            if notes:
                extra["cleanup"] = notes
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        extra["nodes"] = {
            launch.remote.node.name: {
                "run_id": launch.run_id,
                "exit_code": launch.exit_code,
                "lost": launch.lost,
                **launch.facts,
            }
            for launch in launches
        }
        outcome = RepeatOutcome(
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
        if interrupted:
            # The runner records the repeat as interrupted from the exception alone; what the
            # cleanup found (exit codes, unreachable nodes) is kept beside the logs.
            (repeat_dir / "interrupted.json").write_text(
                json.dumps({"detail": detail, "extra": extra}, indent=2, default=str) + "\n"
            )
            raise KeyboardInterrupt
        return outcome

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
                launch.command, launch.remote.node, self.workdir_on(workdir)
            )
            self.create(launch, env, prepared, {**labels, "dlperf.node": launch.remote.node.name})

        for launch, _, error in parallel(launches, create):
            if isinstance(error, NodeUnreachable):
                launch.lost = error.detail
                self._dirty.add(launch.remote.node.name)
                return Verdict.NODE_LOST, str(error)
            if error is not None:
                return Verdict.FAILED, f"node {launch.remote.node.name}: {error}"

        def start(launch: Launch) -> None:
            launch.channel = launch.remote.start(self.attach_command(launch))

        # Every node's channel opened at once: one after another, each waited for its sshd to
        # start the session (a round trip and a fork), which grew the launch with the nodes.
        for launch, _, error in parallel(launches, start):
            if isinstance(error, NodeUnreachable):
                launch.lost = error.detail
                self._dirty.add(launch.remote.node.name)
                return Verdict.NODE_LOST, str(error)
            if error is not None:
                return Verdict.FAILED, f"node {launch.remote.node.name}: {error}"
        return Verdict.OK, ""

    def _watch(self, launches: list[Launch], timeout_s: float) -> tuple[Verdict, str]:
        with selectors.DefaultSelector() as news:
            return self._watch_with(launches, timeout_s, news)

    def _watch_with(
        self, launches: list[Launch], timeout_s: float, news: selectors.BaseSelector
    ) -> tuple[Verdict, str]:
        deadline = time.monotonic() + timeout_s
        next_beat = 0.0
        for launch in launches:
            launch.remote.reset_silence()
        while True:
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + HEARTBEAT_S
                for launch in launches:
                    if launch.exit_code is None:
                        launch.remote.heartbeat()
            for launch in launches:
                if not launch.lost:
                    launch.read_channel()
                if launch.exit_code is not None or launch.lost:
                    continue
                channel = launch.channel
                if channel.exit_status_ready():
                    status = channel.recv_exit_status()
                    # -1: no exit status came. With the connection up that is a process
                    # killed by a signal (sshd sends exit-signal, which paramiko ignores).
                    if status == -1 and not launch.remote.alive():
                        launch.lost = "the SSH connection dropped during the repeat"
                    else:
                        launch.exit_code = status
                elif not launch.remote.alive():
                    launch.lost = "the SSH connection dropped during the repeat"
                elif launch.remote.silent_for() > self.silence_limit_s:
                    launch.lost = (
                        f"sshd did not answer for {self.silence_limit_s:.0f} s (node hung or "
                        "unreachable)"
                    )
                    launch.remote.close()
                if launch.lost:
                    self._dirty.add(launch.remote.node.name)
                    return Verdict.NODE_LOST, f"node {launch.remote.node.name}: {launch.lost}"
                if launch.exit_code not in (None, 0):
                    return self._exit_verdict(launch)
            # Done when every node's command has exited 0 and its collection has arrived whole.
            if all(launch.exit_code == 0 and launch.ended for launch in launches):
                return Verdict.OK, ""
            if time.monotonic() > deadline:
                running = [x.remote.node.name for x in launches if x.exit_code is None]
                return (
                    Verdict.TIMEOUT,
                    f"ran past the timeout of {timeout_s:.0f} s (still running on "
                    f"{', '.join(running)})",
                )
            wake_by = min(next_beat, deadline, time.monotonic() + WAKE_S)
            self._wait_for_news(launches, news, wake_by)

    @staticmethod
    def _wait_for_news(
        launches: list[Launch], news: selectors.BaseSelector, wake_by: float
    ) -> None:
        """Sleep until a launch channel has something to read or has ended (its paramiko pipe
        turns readable), or until ``wake_by``. Polling every node every 50 ms instead cost the
        driver CPU in proportion to nodes x seconds (32 nodes: 0.15 s of CPU per 5 s repeat).
        A channel whose output has ended stays readable, so it leaves the selector; while such
        a node's exit status is still on its way, and for a launch without a channel, the
        watch polls."""
        poll = False
        for launch in launches:
            channel = launch.channel
            if channel is None:
                poll = True
                continue
            fd = channel.fileno()
            watched = fd in news.get_map()
            if launch.output_ended:
                if watched:
                    news.unregister(fd)
                poll = poll or not launch.ended
            elif not watched:
                news.register(fd, selectors.EVENT_READ)
        timeout = max(0.0, wake_by - time.monotonic())
        if poll:
            timeout = min(timeout, POLL_S)
        if news.get_map():
            news.select(timeout)
        else:
            time.sleep(timeout)

    @staticmethod
    def _exit_verdict(launch: Launch) -> tuple[Verdict, str]:
        code = launch.exit_code
        where = f"node {launch.remote.node.name}"
        if code == EXIT_OOM:
            return Verdict.OOM, f"{where}: out of memory (exit {EXIT_OOM})"
        if code == -1:
            return Verdict.FAILED, f"{where}: killed by a signal"
        return Verdict.FAILED, f"{where}: exit {code}"

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
            for launch, _, error in parallel(running, self.stop):
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
                self.take_collected(launch, block, local)
                return
            if launch.index in unreachable:
                raise NodeUnreachable(launch.remote.node.name, "unreachable while stopping")
            self.collect_node(launch, local)

        for launch, _, error in parallel(launches, collect):
            if error is not None:
                self._dirty.add(launch.remote.node.name)
                local = repeat_dir / f"node{launch.index}.log"
                if not local.exists():
                    local.write_text(
                        f"[dlperf] node {launch.remote.node.name}: log not fetched: {error}\n"
                    )
                notes.append(f"node {launch.remote.node.name}: cleanup incomplete: {error}")
        oom = [x for x in launches if x.facts.get("oom_killed")]
        if oom and verdict in (Verdict.FAILED, Verdict.OK):
            verdict = Verdict.OOM
            detail = f"node {oom[0].remote.node.name}: killed for memory (OOMKilled)"
        return verdict, detail, notes

    def workdir_on(self, code_dir: str) -> str:
        """The code folder as the node's process sees it."""
        return code_dir


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
