"""A real 2-node Slurm cluster for tests: Debian's slurmctld and slurmd, each node its own host.

Debian's slurmd is not built with ``--enable-multiple-slurmd``: two slurmd on one host register
and run batch jobs, but ``srun -N2`` gives both nodes ``SLURM_NODEID=0``. So each node here is
a host of its own as far as Slurm can tell: its own network namespace (own loopback, own
``eth0`` with an address this fixture chooses, so both slurmd listen on the default port 6818),
its own UTS namespace (hostname ``n1``/``n2``) and its own mount namespace (a private
``/etc/hosts`` naming the cluster's hosts). slurmctld sits in a third namespace that also holds
the cluster's bridge; this host reaches the bridge through one veth pair, so ``sbatch``,
``srun`` and ``squeue`` run here unchanged, with ``SLURM_CONF`` pointing at the cluster.

The namespaces share this host's file system: the kit's checkout and its framework venvs are
at the same paths on every node, as on a cluster with a shared home. munged is the fixture's
own (own key and socket, named in ``AuthInfo``), never the system's.

Traffic stays on the namespaces and the veth/bridge this fixture creates (a 10.251.X.0/24
subnet not routed here yet); everything (daemons, job step processes, namespaces, links) is
removed afterwards. Needs root (network namespaces); without root or the packages the tests
skip, or fail under ``DLPERF_REQUIRE_REAL=1`` (CI). ``.ci/setup-system.sh`` installs the
packages.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import require_real

BINARIES = ("slurmctld", "slurmd", "srun", "sbatch", "squeue", "scancel", "scontrol", "munged")
NODES = ("n1", "n2")
CPUS_PER_NODE = 4  # declared (config_overrides): 2 nodes x 2 tasks fit on a 2-core machine
START_TIMEOUT_S = 60.0


def slurm_missing() -> str | None:
    """None when a test cluster can be made here, else why not."""
    missing = [name for name in BINARIES if not shutil.which(name)]
    if missing:
        return (
            f"Slurm is not installed ({', '.join(missing)} missing): apt-get install slurmctld "
            "slurmd slurm-client munge (.ci/setup-system.sh)"
        )
    for tool in ("ip", "nsenter", "unshare"):
        if not shutil.which(tool):
            return f"{tool} is missing (iproute2 / util-linux)"
    if os.geteuid() != 0:
        return "the Slurm test cluster needs root (network namespaces)"
    return None


def _run(argv: list[str], check: bool = True, **kwargs) -> subprocess.CompletedProcess:  # noqa: ANN003
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, **kwargs)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {result.returncode}: {result.stderr.strip()}")
    return result


def _free_subnet() -> str:
    """A 10.251.X prefix that no address or route of this host uses."""
    used = _run(["ip", "-4", "addr"]).stdout + _run(["ip", "-4", "route"]).stdout
    for third in range(7, 250):
        prefix = f"10.251.{third}"
        if f"{prefix}." not in used:
            return prefix
    raise RuntimeError("no free 10.251.X.0/24 subnet for the Slurm test cluster")


def _netns_inode(name: str) -> int:
    return os.stat(f"/run/netns/{name}").st_ino


def _pids_in_netns(inode: int) -> list[int]:
    """Every process whose network namespace is ``inode`` (job steps outlive their slurmd)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.stat(entry / "ns" / "net").st_ino == inode:
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


@dataclass
class SlurmCluster:
    """A running test cluster: its config, the environment that reaches it, its parts."""

    root: Path
    prefix: str  # namespace / link name prefix, unique per fixture
    subnet: str  # "10.251.X"
    nodes: tuple[str, ...] = NODES
    daemons: dict[str, subprocess.Popen] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)
    host_link: str = ""

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The variables that point Slurm's clients at this cluster (and nothing else)."""
        return {"SLURM_CONF": str(self.conf)}

    def client_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        return {**env, **self.env}

    def address(self, node: str) -> str:
        return f"{self.subnet}.{11 + self.nodes.index(node)}"

    def namespace(self, node: str) -> str:
        return f"{self.prefix}-{node}"

    def client(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """A Slurm client command (srun, sbatch, squeue, ...) against this cluster; run in the
        cluster's folder, where a job without --output writes its slurm-<id>.out."""
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, env=self.client_env(),
            cwd=self.root,
        )  # fmt: skip

    def queue(self) -> list[str]:
        """Job ids still in the queue (pending, running or completing)."""
        result = self.client("squeue", "--noheader", "--format=%i %T")
        return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]

    def drained(self, timeout: float = 30.0) -> list[str]:
        """Waits for the queue to empty (a finished job stays COMPLETING for a moment);
        returns what is still there after ``timeout``."""
        deadline = time.monotonic() + timeout
        while (jobs := self.queue()) and time.monotonic() < deadline:
            time.sleep(0.3)
        return jobs

    def node_states(self) -> dict[str, str]:
        result = self.client("sinfo", "--noheader", "--Node", "--format=%N %t")
        return dict(line.split() for line in result.stdout.splitlines() if line.strip())

    def log(self, name: str) -> str:
        path = self.root / "log" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # -- making and removing ---------------------------------------------------------------
    def start(self) -> None:
        (self.root / "state").mkdir(parents=True)
        (self.root / "log").mkdir()
        self._network()
        self._munge()
        self._write_config()
        self._start_in(self.namespaces[0], "dlpctl", ["slurmctld", "-D", "-f", str(self.conf)])
        for node in self.nodes:
            (self.root / f"spool.{node}").mkdir()
            self._start_in(
                self.namespace(node), node, ["slurmd", "-D", "-f", str(self.conf), "-N", node]
            )
        self.wait_idle()

    def wait_idle(self, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            for name, process in self.daemons.items():
                if process.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited ({process.returncode}) while starting:\n"
                        + self.log(name if name != "munged" else "munged")[-2000:]
                    )
            states = self.node_states()
            if all(states.get(node) == "idle" for node in self.nodes):
                return
            time.sleep(0.5)
        raise RuntimeError(f"Slurm nodes not idle after {timeout:.0f} s: {states}")

    def _network(self) -> None:
        ctl = f"{self.prefix}-ctl"
        self.namespaces.append(ctl)
        _run(["ip", "netns", "add", ctl])
        in_ctl = ["ip", "netns", "exec", ctl]
        _run([*in_ctl, "ip", "link", "set", "lo", "up"])
        _run([*in_ctl, "ip", "link", "add", "br0", "type", "bridge"])
        _run([*in_ctl, "ip", "addr", "add", f"{self.subnet}.2/24", "dev", "br0"])
        _run([*in_ctl, "ip", "link", "set", "br0", "up"])
        self.host_link = f"{self.prefix}h"
        _run(["ip", "link", "add", self.host_link, "type", "veth", "peer", "name", "up0",
              "netns", ctl])  # fmt: skip
        _run(["ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.host_link])
        _run(["ip", "link", "set", self.host_link, "up"])
        _run([*in_ctl, "ip", "link", "set", "up0", "master", "br0", "up"])
        for index, node in enumerate(self.nodes):
            ns = self.namespace(node)
            self.namespaces.append(ns)
            _run(["ip", "netns", "add", ns])
            in_node = ["ip", "netns", "exec", ns]
            _run([*in_node, "ip", "link", "set", "lo", "up"])
            _run(["ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name",
                  f"port{index}", "netns", ctl])  # fmt: skip
            _run([*in_node, "ip", "addr", "add", f"{self.address(node)}/24", "dev", "eth0"])
            _run([*in_node, "ip", "link", "set", "eth0", "up"])
            _run([*in_ctl, "ip", "link", "set", f"port{index}", "master", "br0", "up"])
        hosts = ["127.0.0.1 localhost", f"{self.subnet}.2 dlpctl"]
        hosts += [f"{self.address(node)} {node}" for node in self.nodes]
        (self.root / "hosts").write_text("\n".join(hosts) + "\n")

    def _munge(self) -> None:
        munge = self.root / "munge"
        munge.mkdir(mode=0o700)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o600)
        log = (self.root / "log" / "munged.log").open("ab")
        self.daemons["munged"] = subprocess.Popen(
            ["munged", "-F", "--force", f"--key-file={key}", f"--socket={munge}/munge.sock",
             f"--pid-file={munge}/munged.pid", f"--seed-file={munge}/seed",
             f"--log-file={self.root}/log/munged.log"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while not (munge / "munge.sock").exists():
            if time.monotonic() > deadline or self.daemons["munged"].poll() is not None:
                raise RuntimeError("munged did not start:\n" + self.log("munged")[-2000:])
            time.sleep(0.1)

    def _write_config(self) -> None:
        root = self.root
        lines = [
            "ClusterName=dlptest",
            f"SlurmctldHost=dlpctl({self.subnet}.2)",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={root}/munge/munge.sock",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={root}/state",
            f"SlurmdSpoolDir={root}/spool.%n",
            f"SlurmctldPidFile={root}/slurmctld.pid",
            f"SlurmdPidFile={root}/slurmd.%n.pid",
            f"SlurmctldLogFile={root}/log/slurmctld.log",
            f"SlurmdLogFile={root}/log/slurmd.%n.log",
            # No cgroups: the namespaces share this host's cgroup tree.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            # Fault tests: a node whose slurmd is gone is DOWN within seconds, not minutes.
            "SlurmdTimeout=10",
            "MessageTimeout=5",
            "KillWait=3",
            "MinJobAge=300",
            "InactiveLimit=0",
            "SchedulerType=sched/builtin",
        ]
        lines += [
            f"NodeName={node} NodeAddr={self.address(node)} NodeHostname={node} "
            f"CPUs={CPUS_PER_NODE} State=UNKNOWN"
            for node in self.nodes
        ]
        lines.append(
            f"PartitionName=debug Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE "
            "State=UP"
        )
        self.conf.write_text("\n".join(lines) + "\n")

    def _start_in(self, namespace: str, hostname: str, argv: list[str]) -> None:
        """A daemon in ``namespace`` with its own hostname and /etc/hosts. ``nsenter --net``
        rather than ``ip netns exec``: the latter remounts /sys, hiding the cgroup tree slurmd
        reads at start. nsenter, unshare and sh each exec: the Popen pid is the daemon's."""
        script = (
            f"hostname {hostname} && mount --bind {self.root}/hosts /etc/hosts && exec \"$@\""
        )
        name = argv[0] if argv[0] == "slurmctld" else f"slurmd.{argv[-1]}"
        out = (self.root / "log" / f"{name}.stdout").open("ab")
        self.daemons[name] = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{namespace}", "unshare", "--uts", "--mount",
             "sh", "-c", script, "daemon", *argv],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def kill_node(self, node: str) -> list[int]:
        """The node "loses power": every process in its namespace (slurmd and its job steps)
        is killed at once. Returns the pids killed."""
        pids = _pids_in_netns(_netns_inode(self.namespace(node)))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    def restart_node(self, node: str) -> None:
        """Power the node back on: its slurmd starts again and Slurm resumes it."""
        process = self.daemons.get(f"slurmd.{node}")
        if process is not None and process.poll() is None:
            process.kill()
        if process is not None:
            process.wait(timeout=15)
        self._start_in(
            self.namespace(node), node, ["slurmd", "-D", "-f", str(self.conf), "-N", node]
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.node_states().get(node) != "idle" and time.monotonic() < deadline:
            self.client("scontrol", "update", f"NodeName={node}", "State=RESUME")
            time.sleep(1)
        self.wait_idle()

    def stop(self) -> None:
        """Cancel every job, stop every daemon and job step, remove namespaces and links."""
        if "slurmctld" in self.daemons and self.daemons["slurmctld"].poll() is None:
            self.client("scancel", "--full", "--user=root", timeout=30)
            deadline = time.monotonic() + 15
            while self.queue() and time.monotonic() < deadline:
                time.sleep(0.5)
        for name in [n for n in self.daemons if n.startswith("slurmd")] + ["slurmctld", "munged"]:
            process = self.daemons.get(name)
            if process is None or process.poll() is not None:
                continue
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=15)
        # Job step daemons (slurmstepd) and their tasks are re-parented away from slurmd:
        # whatever still runs in one of our namespaces is ours, and goes.
        for ns in self.namespaces:
            if Path(f"/run/netns/{ns}").exists():
                for pid in _pids_in_netns(_netns_inode(ns)):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        for ns in reversed(self.namespaces):
            _run(["ip", "netns", "del", ns], check=False)
        if self.host_link:
            _run(["ip", "link", "del", self.host_link], check=False)


def leftovers(cluster: SlurmCluster) -> list[str]:
    """What of ``cluster`` still exists (the teardown test asserts none)."""
    found = []
    netns = _run(["ip", "netns", "list"], check=False).stdout
    found += [f"netns {ns}" for ns in cluster.namespaces if ns in netns]
    links = _run(["ip", "-o", "link"], check=False).stdout
    if cluster.host_link and f" {cluster.host_link}@" in links:
        found.append(f"link {cluster.host_link}")
    found += [f"{name} pid {p.pid}" for name, p in cluster.daemons.items() if p.poll() is None]
    return found


PREFIXES = ("dlps", "dlpt")  # the fixture's and the teardown test's clusters


def sweep_stale() -> list[str]:
    """Remove what a test run killed outright (SIGKILL, a crashed CI job) left: namespaces of
    ours whose creating process (its pid is in the name) is gone, their processes and links."""
    removed = []
    listing = _run(["ip", "netns", "list"], check=False).stdout.split("\n")
    for ns in (line.split()[0] for line in listing if line.strip()):
        prefix, _, rest = ns.partition("-")
        tag, digits = prefix[:4], prefix[4:]
        if tag not in PREFIXES or not digits.isdigit() or rest not in ("ctl", *NODES):
            continue
        if Path(f"/proc/{digits}").exists():
            continue  # its test run is still going
        for pid in _pids_in_netns(_netns_inode(ns)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _run(["ip", "netns", "del", ns], check=False)
        _run(["ip", "link", "del", f"{prefix}h"], check=False)
        removed.append(ns)
    return removed


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """munged, slurmctld and two slurmd (n1, n2), each node its own host; all removed after."""
    why = slurm_missing()
    if why:
        require_real(why)
    sweep_stale()
    root = Path(tempfile.mkdtemp(prefix="dlperf-slurm-"))
    root.chmod(0o755)
    cluster = SlurmCluster(root=root, prefix=f"dlps{os.getpid()}", subnet=_free_subnet())
    try:
        cluster.start()
    except Exception as error:  # noqa: BLE001 - cleanup first, then one clear failure
        logs = "\n".join(f"--- {n}\n{cluster.log(n)[-1500:]}" for n in ("slurmctld", "slurmd.n1"))
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"the Slurm test cluster did not start: {error}\n{logs}")
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
