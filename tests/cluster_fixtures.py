"""Real cluster parts for tests: sshd "nodes" on loopback addresses, the docker engine, images.

Each node is its own ``sshd -D`` (own config, generated host key, our generated client key)
listening on 127.0.0.<2+i>; Fabric reaches it exactly as it would a remote host. All nodes share
this machine's docker engine and file system, which the runtimes handle like any cluster: every
docker command goes over the node's own SSH connection, and each node gets its own scratch dir.

Tests that need sshd or docker skip with a reason where they are missing; with
``DLPERF_REQUIRE_REAL=1`` (CI) the skip is a failure. Registered by ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from driver.core.selftest import calibration_cases
from driver.launchers.base import NodeRank
from driver.model.case import Case
from driver.model.results import Session
from driver.runtimes.base import RepeatOutcome
from driver.runtimes.plan import NodeCommand, RepeatPlan
from driver.testbed.daemons import sshd_config_lines, wait_for_sshd

SSHD = "/usr/sbin/sshd"
NODE_COUNT = 2


def require_real(reason: str) -> None:
    """Skip, or fail under CI (DLPERF_REQUIRE_REAL=1) where the real part must be there."""
    if os.environ.get("DLPERF_REQUIRE_REAL") == "1":
        pytest.fail(f"required in CI but unavailable: {reason}")
    pytest.skip(reason)


def docker_available() -> str | None:
    """None when a docker engine answers, else why not."""
    if not shutil.which("docker"):
        return "no docker client (apt-get install docker.io; .ci/setup-system.sh)"
    try:
        probe = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"docker info failed: {error}"
    if probe.returncode != 0:
        return (
            f"no docker engine answers (start dockerd; .ci/setup-system.sh): {probe.stderr[-200:]}"
        )
    return None


def free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (sshd forks one process per connection, then the shell)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@dataclass
class SshNode:
    """One sshd on a loopback address: a cluster node as far as Fabric can tell."""

    index: int
    address: str
    port: int
    root: Path
    key: Path  # the client's private key
    process: subprocess.Popen | None = None
    sftp: bool = True  # False: an sshd without the SFTP subsystem (Fabric's put/get fail)
    # A simulated host with another CPU: sshd (and every process it starts) runs in its own
    # mount namespace where this file is bind-mounted over /proc/cpuinfo.
    cpuinfo: Path | None = None
    # The head's trusted host keys: this node's is written there at start, and its inventory
    # entry names the file (the strict path: unknown hosts are refused). Default: beside it.
    known_hosts: Path | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.root / "sshd.log"
        if self.known_hosts is None:
            self.known_hosts = self.root.parent / f"{self.root.name}-known_hosts"

    @property
    def scratch(self) -> Path:
        return self.root / "scratch"

    def write_config(self) -> Path:
        host_key = self.root / "host_ed25519"
        if not host_key.exists():
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True
            )
        config = self.root / "sshd_config"
        config.write_text(
            "\n".join(
                sshd_config_lines(
                    port=self.port, address=self.address, root=self.root, sftp=self.sftp
                )
            )
        )
        (self.root / "authorized_keys").write_text(Path(f"{self.key}.pub").read_text())
        return config

    def host_key_line(self) -> str:
        """This node's known_hosts line (``[address]:port type key``), as OpenSSH writes it."""
        kind, key = (self.root / "host_ed25519.pub").read_text().split()[:2]
        return f"[{self.address}]:{self.port} {kind} {key}\n"

    def trust_host_key(self) -> None:
        """Write this node's host key into the known_hosts file the inventories name: the
        tests take the default, strict path (unknown hosts refused)."""
        lines = self.known_hosts.read_text().splitlines(True) if self.known_hosts.exists() else []
        prefix = f"[{self.address}]:{self.port} "
        lines = [line for line in lines if not line.startswith(prefix)] + [self.host_key_line()]
        self.known_hosts.write_text("".join(lines))

    def start(self) -> None:
        if self.running:
            return
        config = self.write_config()
        self.trust_host_key()
        argv = [SSHD, "-D", "-f", str(config), "-E", str(self.log)]
        if self.cpuinfo is not None:
            argv = [
                "unshare", "--mount", "--propagation", "private", "--",
                "sh", "-c", 'mount --bind "$1" /proc/cpuinfo && shift && exec "$@"',
                "sh", str(self.cpuinfo), *argv,
            ]  # fmt: skip
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        why = wait_for_sshd(self.process, self.address, self.port, self.log, timeout_s=15)
        if why:
            raise RuntimeError(f"node {self.address}: {why}")

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self, *, sessions_survive: bool = False) -> None:
        """The node drops off: sshd and every session it serves die at once (SIGKILL).

        ``sessions_survive``: only the sshd processes die (the network or sshd fails, the host
        lives on), so what the sessions started keeps running, as it would on a real host.
        """
        if self.process is None:
            return
        pids = [self.process.pid, *_children(self.process.pid)]
        if sessions_survive:
            pids = [pid for pid in pids if _comm(pid) == "sshd"]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait(timeout=10)
        self.process = None

    def pause(self) -> None:
        """The node hangs: its sshd processes stop being scheduled (SIGSTOP), sockets stay open."""
        self._signal_sshd(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_sshd(signal.SIGCONT)

    def _signal_sshd(self, signum: int) -> None:
        if self.process is None:
            return
        for pid in [self.process.pid, *_children(self.process.pid)]:
            if _comm(pid) == "sshd":
                try:
                    os.kill(pid, signum)
                except ProcessLookupError:
                    pass

    def inventory_entry(self, **overrides: Any) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": f"node{self.index}",
            "address": self.address,
            "ssh": {
                "port": self.port,
                "key": str(self.key),
                "connect_timeout": 5,
                "known_hosts": str(self.known_hosts),
            },
            "scratch_dir": str(self.scratch),
            "interface": "lo",
            "min_free_gb": 1,
        }
        entry.update(overrides)
        return entry


@pytest.fixture(scope="session")
def ssh_client_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not Path(SSHD).exists() or not shutil.which("ssh-keygen"):
        require_real(f"no {SSHD} / ssh-keygen (apt-get install openssh-server)")
    key = tmp_path_factory.mktemp("ssh-client") / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key


@pytest.fixture(scope="session")
def _ssh_node_pool(
    ssh_client_key: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[SshNode]]:
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege-separation dir
    known_hosts = tmp_path_factory.mktemp("ssh-head") / "known_hosts"
    nodes = []
    for index in range(NODE_COUNT):
        address = f"127.0.0.{2 + index}"
        root = tmp_path_factory.mktemp(f"node{index}")
        node = SshNode(
            index, address, free_port(address), root, ssh_client_key, known_hosts=known_hosts
        )
        node.scratch.mkdir()
        nodes.append(node)
    try:
        for node in nodes:
            node.start()
        yield nodes
    finally:
        for node in nodes:
            node.kill()


@pytest.fixture
def ssh_nodes(_ssh_node_pool: list[SshNode]) -> list[SshNode]:
    """The nodes, all up at the start of each test (a fault test may have killed one)."""
    for node in _ssh_node_pool:
        node.start()
    return _ssh_node_pool


@pytest.fixture(scope="session")
def docker_engine() -> None:
    why = docker_available()
    if why:
        require_real(why)


def write_inventory(
    path: Path,
    nodes: list[SshNode],
    *,
    defaults: dict[str, Any] | None = None,
    per_node: dict[int, dict[str, Any]] | None = None,
) -> Path:
    data = {
        "cluster": "loopback",
        "defaults": defaults or {},
        "nodes": [node.inventory_entry(**(per_node or {}).get(node.index, {})) for node in nodes],
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def inventory_file(tmp_path: Path, ssh_nodes: list[SshNode]):
    """A function writing an inventory of the loopback nodes (CPU containers by default)."""

    def make(
        *,
        defaults: dict[str, Any] | None = None,
        per_node: dict[int, dict[str, Any]] | None = None,
        name: str = "inventory.yaml",
    ) -> Path:
        base = {"devices": 2, "container": {"variant": "cpu"}}
        merged = {**base, **(defaults or {})}
        return write_inventory(tmp_path / name, ssh_nodes, defaults=merged, per_node=per_node)

    return make


def session_containers(label_value: str | None = None) -> list[str]:
    """Names of containers carrying the dlperf.session label (any value, or this one)."""
    label = "dlperf.session" + (f"={label_value}" if label_value else "")
    result = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [line for line in result.stdout.splitlines() if line]


@pytest.fixture(scope="session")
def image_options(docker_engine: None, tmp_path_factory: pytest.TempPathFactory):
    """Build options over a copy of images.lock, with the Debian base made or found.

    A copy, so that pinning a freshly made base on a new machine (CI) never rewrites the
    repository's lock during a test run. Builds behind a TLS-intercepting proxy need
    DLPERF_CA_BUNDLE (CI sets it to the machine's bundle); built images are reused across runs
    (content-hash tags), so only the first run on a machine pays for them.
    """
    from driver.images.base import ensure_base
    from driver.images.build import BuildOptions
    from driver.images.lock import REPO_LOCK, load_lock

    lock = tmp_path_factory.mktemp("lock") / "images.lock"
    shutil.copy(REPO_LOCK, lock)
    ca = os.environ.get("DLPERF_CA_BUNDLE")
    options = BuildOptions(
        lock_path=lock,
        ca_bundle=Path(ca) if ca else None,
        log=lambda line: print(line, flush=True),
    )
    started = time.monotonic()
    ensure_base(load_lock(lock), log=options.log)
    print(f"debian base ready in {time.monotonic() - started:.1f} s", flush=True)
    return options


def build_image(options, name: str) -> str:
    """``name`` built (or found, same inputs) over the session's lock copy; its image ID."""
    from driver.images.build import build_images

    started = time.monotonic()
    built = build_images([name], options, make_base=True)[name]
    print(f"{name} ready in {time.monotonic() - started:.1f} s ({built.tag})", flush=True)
    assert built.id
    return built.id


@pytest.fixture(scope="session")
def cpu_python_image(image_options) -> str:
    """The shared CPU layer: Python only, enough for the calibration workload."""
    return build_image(image_options, "cpu-python")


@pytest.fixture(scope="session")
def pytorch_cpu_image(image_options) -> str:
    """The PyTorch CPU image (torch from the wheelhouse)."""
    return build_image(image_options, "pytorch-cpu")


# -- helpers for the cluster tests ------------------------------------------------------------
def quiet(_line: str) -> None:
    pass


def calibration_case(
    topology: str = "2n4g",
    *,
    repeats: int = 1,
    measured_steps: int = 20,
    step_time: float = 0.01,
    timeout_s: float = 120.0,
    **options: Any,
) -> Case:
    case = calibration_cases(step_time, 8, [topology], repeats, measured_steps)[0]
    return replace(case, timeout_s=timeout_s, options={**case.options, **options})


def direct_run(
    runtime: Any,
    argvs: list[list[str]],
    session_root: Path,
    *,
    timeout_s: float = 60.0,
    env: dict[str, str] | None = None,
) -> tuple[RepeatOutcome, Path]:
    """One repeat of arbitrary per-node commands, in a real session folder."""
    session = Session.open(session_root)
    directory = session.root / "cases" / "direct" / "repeat-01"
    directory.mkdir(parents=True)
    nodes = runtime.node_addresses(len(argvs))
    commands = []
    for index, ((name, _), argv) in enumerate(zip(nodes, argvs, strict=True)):
        rank = NodeRank(index, len(argvs), 1, nodes[0][1], 29500 + index)
        commands.append(
            NodeCommand(node=name, argv=argv, env={**rank.environment(), **(env or {})})
        )
    case = replace(
        calibration_case(f"{len(argvs)}n{len(argvs)}g"), model="direct", timeout_s=timeout_s
    )
    plan = RepeatPlan(
        case=case,
        repeat=1,
        batch_size=8,
        commands=tuple(commands),
        repeat_dir=directory,
        session_root=session.root,
        parser="dlperf-jsonl",
    )
    return runtime.run(plan), directory


def records_of(session: Session, case: Case) -> dict[str, dict]:
    """repeat folder name -> record, failed attempts included."""
    out = {}
    for path in sorted(session.case_dir(case).glob("repeat-*/record.json")):
        out[path.parent.name] = json.loads(path.read_text())
    return out


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def running_containers(label: str) -> list[str]:
    result = subprocess.run(
        [
            "docker",
            "ps",
            "--filter",
            f"label=dlperf.session={label}",
            "--filter",
            "status=running",
            "--format",
            "{{.Names}}",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.split()


def processes_with_env(fragment: str) -> list[int]:
    """pids whose environment holds ``fragment`` (process runtime leftovers)."""
    found = []
    needle = fragment.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def log_ranks(path: Path) -> set[int]:
    ranks = set()
    for line in path.read_text().splitlines():
        start = line.find("{")
        if start >= 0 and '"dlperf":' in line:
            try:
                ranks.add(int(json.loads(line[start:])["rank"]))
            except (ValueError, KeyError):
                continue
    return ranks


def two_nodes_two_repeats(runtime: Any, root: Path) -> tuple[Session, dict]:
    """The 2-node scenario every SSH runtime passes, whatever its container platform: a 2n4g
    case of two repeats, each node's log holding its own ranks, the record naming the runtime.
    The session and the last repeat's record, for the runtime's own checks."""
    from driver.core.runner import run_cases

    case = calibration_case("2n4g", repeats=2)
    session = Session.open(root)
    summary = run_cases([case], session, runtime, printer=quiet)
    assert summary.ok and summary.finished == 2
    directory = session.repeat_dir(case, 2)
    assert log_ranks(directory / "node0.log") == {0, 1}
    assert log_ranks(directory / "node1.log") == {2, 3}
    record = json.loads((directory / "record.json").read_text())
    assert record["runtime"] == runtime.name
    return session, record
