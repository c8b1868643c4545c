"""Simulated hosts: N "machines" on this one, to rehearse a matrix before booking a cluster.

Each host is a set of namespaces held open by one small process (``sleep infinity``):

- its own **network** namespace (own loopback, an ``eth0`` veth into a bridge this module makes
  in a namespace of its own, an address in a free ``10.251.X.0/24``; this machine reaches the
  bridge through one veth pair, so sshd, slurmd and the ranks' own sockets talk over it);
- its own **UTS** namespace (its hostname) and **mount** namespace (a private ``/etc/hosts``
  naming every host);
- its own **time** namespace (``unshare --time --monotonic=<offset> --boottime=<offset>``): its
  monotonic clock runs hours apart from this machine's and from every other host's, as on a
  real cluster whose hosts booted at different times.

Every host runs sshd (its own host key; our client key; a ``known_hosts`` file for the
inventory) for the ``process``/``docker`` runtimes, and optionally slurmd, with munged and
slurmctld (in the bridge's namespace) for the ``slurm`` runtime. The hosts share this machine's
file system: the kit's checkout and its Python are at the same paths on every host, as on a
cluster with a shared home.

The ``docker`` runtime cannot use a host's network namespace: containers are made by the one
docker engine of this machine, with its network and clock. For docker, ``network=False`` makes
hosts on loopback addresses ``127.0.0.x`` (own UTS, mount and time namespaces, this machine's
network); the containers still run on the engine's clock.

Needs root, iproute2, util-linux and openssh-server (Slurm's packages and munge for the Slurm
engine). ``stop()`` removes everything made (daemons, job steps, namespaces, links); names carry
the creating process's pid, so ``sweep_stale()`` removes what a killed run left.

This module is the hosts' life cycle (made, checked, faulted and removed together); what it
stands on is in two modules beside it: :mod:`driver.testbed.namespaces` (the process holding a
host's namespaces, the subnet claims, and the pid-tagged names with the sweep that reads them,
in one place) and :mod:`driver.testbed.daemons` (sshd's configuration, its wait and the keys;
Slurm's ``slurm.conf``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from driver.files import write_text
from driver.testbed.daemons import (
    SLURM_BINARIES,
    SSHD,
    make_key,
    slurm_config_lines,
    sshd_config_lines,
    wait_for_sshd,
)
from driver.testbed.namespaces import (
    MARKER,
    TAG,
    SimulatedHost,
    SimulatedHostsError,
    clock_offset,
    free_subnet,
    kill_pids,
    netns_inode,
    ns_inode,
    pids_in_namespace,
    release_subnet,
    run_checked,
)

START_TIMEOUT_S = 60.0


def missing_requirements(*, slurm: bool = False, sshd: bool = True) -> str | None:
    """None when simulated hosts can be made here, else one line naming what to install or do."""
    if os.geteuid() != 0:
        return "simulated hosts need root (network, mount and time namespaces): run as root"
    tools = {"ip": "iproute2", "nsenter": "util-linux", "unshare": "util-linux"}
    missing = sorted({package for tool, package in tools.items() if not shutil.which(tool)})
    if sshd and not (Path(SSHD).exists() and shutil.which("ssh-keygen")):
        missing.append("openssh-server")
    if slurm and not all(shutil.which(name) for name in SLURM_BINARIES):
        missing += ["slurmctld", "slurmd", "slurm-client", "munge"]
    if missing:
        return f"simulated hosts need {', '.join(missing)}: apt-get install {' '.join(missing)}"
    return None


@dataclass
class SimulatedHosts:
    """N simulated hosts; ``start()`` makes them, ``stop()`` removes all of it."""

    root: Path
    count: int = 2
    names: tuple[str, ...] = ()  # default n1..nN
    network: bool = True  # own network namespaces; False: loopback addresses (docker)
    sshd: bool = True
    slurm: bool = False
    cpus: int = 8  # CPUs each slurmd declares (config_overrides): 4 hosts x 8 tasks fit
    client_key: Path | None = None  # default: one made under root
    prefix: str = ""  # default: <tag><our pid>
    subnet: str = ""  # default: a free 10.251.X
    offsets: tuple[int, ...] = ()  # default: clock_offset(i)
    loopback_base: int = 40  # network=False: host i at 127.0.0.<base+i>
    # A folder every host sees as its own (a tmpfs mounted over it in the host's mount
    # namespace, gone with the host), as a cluster's node-local disk: enroot unpacks a container
    # there on each node. A tmpfs, not a folder on this disk: removing the tens of thousands of
    # files of an unpacked image took 2 minutes per two containers on the test machine's disk.
    node_local: Path | None = None
    hosts: list[SimulatedHost] = field(default_factory=list)
    daemons: dict[str, subprocess.Popen] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)
    host_link: str = ""

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        if not self.names:
            self.names = tuple(f"n{i + 1}" for i in range(self.count))
        self.count = len(self.names)
        self.prefix = self.prefix or f"{TAG}{os.getpid()}"
        if self.slurm and not self.network:
            raise SimulatedHostsError("Slurm hosts need their own network (network=True)")
        if self.network and not self.subnet:
            self.subnet = free_subnet()
        if not self.offsets:
            self.offsets = tuple(clock_offset(i) for i in range(self.count))
        if not self.hosts:
            self.hosts = [self._host(i, name) for i, name in enumerate(self.names)]

    def _host(self, index: int, name: str) -> SimulatedHost:
        if self.network:
            address, port, namespace = f"{self.subnet}.{11 + index}", 22, f"{self.prefix}-{name}"
        else:
            address, namespace = f"127.0.0.{self.loopback_base + index}", None
            with socket.socket() as probe:
                probe.bind((address, 0))
                port = int(probe.getsockname()[1])
        return SimulatedHost(
            index, name, address, port, self.offsets[index], self.root / name, namespace
        )

    # -- what users and tests call ----------------------------------------------------------
    @property
    def nodes(self) -> tuple[str, ...]:
        return self.names

    def host(self, name: str) -> SimulatedHost:
        return next(h for h in self.hosts if h.name == name)

    def address(self, name: str) -> str:
        return self.host(name).address

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The variables that point Slurm's clients at these hosts' cluster (and nothing else)."""
        return {"SLURM_CONF": str(self.conf)}

    def run_in(
        self, name: str, argv: list[str], *, timeout: float = 60, **kwargs: Any
    ) -> subprocess.CompletedProcess:
        """``argv`` run inside host ``name`` (its network, hostname, files and clock)."""
        return subprocess.run(
            [*self.host(name).enter(kwargs.pop("cwd", None)), *argv],
            capture_output=True, text=True, timeout=timeout, **kwargs,
        )  # fmt: skip

    def measured_offset(self, name: str) -> tuple[float, float]:
        """(host's monotonic clock - this machine's, uncertainty), read by a process started
        inside the host: what its ranks see."""
        before = time.monotonic()
        result = self.run_in(name, [sys.executable, "-c", "import time; print(time.monotonic())"])
        after = time.monotonic()
        if result.returncode != 0:
            raise SimulatedHostsError(f"host {name}: no clock reading: {result.stderr.strip()}")
        return float(result.stdout) - (before + after) / 2, (after - before) / 2

    def check_clocks(self) -> None:
        """Every host's processes see its offset clock (/proc/<pid>/timens_offsets and a
        monotonic reading inside against one here), else SimulatedHostsError."""
        for host in self.hosts:
            offsets = Path(f"/proc/{host.holder_pid}/timens_offsets").read_text().split()
            declared = dict(zip(offsets[0::3], (int(s) for s in offsets[1::3]), strict=True))
            if declared.get("monotonic") != host.offset_s:
                raise SimulatedHostsError(f"host {host.name}: timens_offsets {declared}")
            seen, within = self.measured_offset(host.name)
            if abs(seen - host.offset_s) > within + 0.05:
                raise SimulatedHostsError(
                    f"host {host.name}: monotonic clock {seen:+.3f} s off, {host.offset_s} wanted"
                )

    def write_inventory(
        self,
        path: Path,
        *,
        devices: int = 1,
        cluster: str = "simulated",
        python: str | dict[str, str] | None = sys.executable,
        **defaults: Any,
    ) -> Path:
        """An inventory of these hosts for the process/docker runtimes: ``devices`` per host,
        this interpreter on every host (the file system is shared; one per framework as a
        mapping, as an inventory's ``python`` takes; ``python=None``: the inventory's default,
        for docker), ``defaults`` merged into its defaults."""
        ssh = {
            "key": str(self.client_key),
            "known_hosts": str(self.known_hosts),
            "connect_timeout": 10,
            **defaults.pop("ssh", {}),
        }
        data = {
            "cluster": cluster,
            "defaults": {
                "devices": devices,
                "interface": "eth0" if self.network else "lo",
                "min_free_gb": 1,
                **({"python": python} if python else {}),
                **defaults,
            },
            "nodes": [
                {
                    "name": host.name,
                    "address": host.address,
                    "ssh": {**ssh, "port": host.port},
                    "scratch_dir": str(host.scratch),
                }
                for host in self.hosts
            ],
        }
        write_text(Path(path), yaml.safe_dump(data, sort_keys=False))
        return Path(path)

    # -- Slurm clients ----------------------------------------------------------------------
    def client(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """A Slurm client command (srun, sbatch, squeue, ...) against these hosts' cluster; run
        in its folder, where a job without --output writes its slurm-<id>.out."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, env={**env, **self.env},
            cwd=self.root,
        )  # fmt: skip

    def queue(self) -> list[str]:
        """Job ids still in the queue (pending, running or completing)."""
        result = self.client("squeue", "--noheader", "--format=%i %T")
        return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]

    def drained(self, timeout: float = 30.0) -> list[str]:
        """Waits for the queue to empty; returns what is still there after ``timeout``."""
        deadline = time.monotonic() + timeout
        while (jobs := self.queue()) and time.monotonic() < deadline:
            time.sleep(0.3)
        return jobs

    def node_states(self) -> dict[str, str]:
        result = self.client("sinfo", "--noheader", "--Node", "--format=%N %t")
        return dict(line.split()[:2] for line in result.stdout.splitlines() if line.strip())

    def log(self, name: str) -> str:
        path = self.root / "log" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # -- making -------------------------------------------------------------------------------
    def start(self) -> None:
        """Make every host and start its daemons; on failure, remove what was made and raise."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        (self.root / "log").mkdir(exist_ok=True)
        for host in self.hosts:
            host.scratch.mkdir(parents=True, exist_ok=True)
        if self.network:
            self._network()
        self._hosts_file()
        for host in self.hosts:
            self._hold(host)
        self.check_clocks()
        if self.slurm:
            (self.root / "state").mkdir(exist_ok=True)
            self._munge()
            self._write_slurm_config()
            self._start_daemon("slurmctld", ["nsenter", f"--net=/run/netns/{self.prefix}-ctl",
                               "unshare", "--uts", "--mount", "sh", "-c",
                               'hostname dlpctl && mount --bind "$1" /etc/hosts && shift && '
                               'exec "$@"', "ctl", str(self.root / "hosts"),
                               "slurmctld", "-D", "-f", str(self.conf)])  # fmt: skip
            for host in self.hosts:
                self.start_slurmd(host.name)
        if self.sshd:
            if self.client_key is None:
                (self.root / "client").mkdir(exist_ok=True)
                self.client_key = self.root / "client" / "id_ed25519"
            make_key(self.client_key)
            Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege separation
            lines = []
            for host in self.hosts:
                lines.append(self._start_sshd(host))
            write_text(self.known_hosts, "".join(lines))
            for host in self.hosts:
                self._wait_listening(host)
        if self.slurm:
            self.wait_idle()

    def _network(self) -> None:
        ctl = f"{self.prefix}-ctl"
        self.namespaces.append(ctl)
        run_checked(["ip", "netns", "add", ctl])
        in_ctl = ["ip", "netns", "exec", ctl]
        run_checked([*in_ctl, "ip", "link", "set", "lo", "up"])
        run_checked([*in_ctl, "ip", "link", "add", "br0", "type", "bridge"])
        run_checked([*in_ctl, "ip", "addr", "add", f"{self.subnet}.2/24", "dev", "br0"])
        run_checked([*in_ctl, "ip", "link", "set", "br0", "up"])
        self.host_link = f"{self.prefix}h"
        run_checked(["ip", "link", "add", self.host_link, "type", "veth", "peer", "name", "up0",
                     "netns", ctl])  # fmt: skip
        run_checked(["ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.host_link])
        run_checked(["ip", "link", "set", self.host_link, "up"])
        run_checked([*in_ctl, "ip", "link", "set", "up0", "master", "br0", "up"])
        for host in self.hosts:
            assert host.namespace is not None
            self.namespaces.append(host.namespace)
            run_checked(["ip", "netns", "add", host.namespace])
            in_host = ["ip", "netns", "exec", host.namespace]
            run_checked([*in_host, "ip", "link", "set", "lo", "up"])
            run_checked(["ip", "link", "add", "eth0", "netns", host.namespace, "type", "veth",
                         "peer", "name", f"port{host.index}", "netns", ctl])  # fmt: skip
            run_checked([*in_host, "ip", "addr", "add", f"{host.address}/24", "dev", "eth0"])
            run_checked([*in_host, "ip", "link", "set", "eth0", "up"])
            run_checked([*in_ctl, "ip", "link", "set", f"port{host.index}", "master", "br0", "up"])

    def _hosts_file(self) -> None:
        lines = ["127.0.0.1 localhost"]
        if self.network:
            lines.append(f"{self.subnet}.2 dlpctl")
        lines += [f"{host.address} {host.name}" for host in self.hosts]
        write_text(self.root / "hosts", "\n".join(lines) + "\n")

    def _marked_env(self) -> dict[str, str]:
        return {**os.environ, MARKER: f"{os.getpid()}:{self.prefix}"}

    def _hold(self, host: SimulatedHost) -> None:
        """The process that holds the host's namespaces: its own hostname, /etc/hosts and
        clock (unshare forks into the new time namespace; the shell writes its own pid)."""
        pid_file = host.root / "holder.pid"
        pid_file.unlink(missing_ok=True)
        if self.node_local is not None:
            Path(self.node_local).mkdir(parents=True, exist_ok=True)
        argv = [f"--net=/run/netns/{host.namespace}"] if host.namespace else []
        argv = (["nsenter", *argv] if argv else []) + [
            "unshare", "--uts", "--mount", "--propagation", "private", "--time",
            f"--monotonic={host.offset_s}", f"--boottime={host.offset_s}", "--",
            "sh", "-c",
            'echo $$ > "$1.tmp" && mv "$1.tmp" "$1" && hostname "$2" && '
            'mount --bind "$3" /etc/hosts && '
            '{ [ -z "$4" ] || { mount -t tmpfs -o mode=755 dlperf-local "$4" && '
            'echo "$2" > "$4/.host"; }; } && exec sleep infinity',
            "simhost", str(pid_file), host.name, str(self.root / "hosts"),
            str(self.node_local or ""),
        ]  # fmt: skip
        host.launcher = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=(self.root / "log" / f"holder.{host.name}.log").open("ab"),
            env=self._marked_env(), start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while not pid_file.exists():
            if host.launcher.poll() is not None or time.monotonic() > deadline:
                raise SimulatedHostsError(
                    f"host {host.name} did not start: " + self.log(f"holder.{host.name}")[-1000:]
                )
            time.sleep(0.02)
        host.holder_pid = int(pid_file.read_text())
        # The hostname and mount are set right after the pid is written: wait for the name.
        while (
            name := run_checked([*host.enter(), "hostname"], check=False).stdout.strip()
        ) != host.name:
            if time.monotonic() > deadline:
                raise SimulatedHostsError(f"host {host.name}: hostname is {name!r}")
            time.sleep(0.02)
        # The node-local tmpfs is mounted last: wait for it too (the host's name in it).
        if self.node_local is not None:
            marker = str(Path(self.node_local) / ".host")
            while (
                run_checked([*host.enter(), "cat", marker], check=False).stdout.strip() != host.name
            ):
                if time.monotonic() > deadline:
                    raise SimulatedHostsError(f"host {host.name}: {self.node_local} not bound")
                time.sleep(0.02)
        host.uts_inode = ns_inode(host.holder_pid, "uts")

    def _start_daemon(self, name: str, argv: list[str]) -> None:
        out = (self.root / "log" / f"{name}.stdout").open("ab")
        self.daemons[name] = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=self._marked_env(), start_new_session=True,
        )  # fmt: skip

    def _start_sshd(self, host: SimulatedHost) -> str:
        """sshd in the host; returns its known_hosts line."""
        make_key(host.root / "host_ed25519")
        config = host.root / "sshd_config"
        write_text(
            config,
            "\n".join(sshd_config_lines(port=host.port, address=host.address, root=host.root)),
        )
        assert self.client_key is not None
        write_text(host.root / "authorized_keys", Path(f"{self.client_key}.pub").read_text())
        self._start_daemon(
            f"sshd.{host.name}",
            [*host.enter(), SSHD, "-D", "-f", str(config), "-E", str(host.root / "sshd.log")],
        )
        kind, key = (host.root / "host_ed25519.pub").read_text().split()[:2]
        where = host.address if host.port == 22 else f"[{host.address}]:{host.port}"
        return f"{where} {kind} {key}\n"

    def _wait_listening(self, host: SimulatedHost) -> None:
        why = wait_for_sshd(
            self.daemons[f"sshd.{host.name}"], host.address, host.port, host.root / "sshd.log"
        )
        if why:
            raise SimulatedHostsError(f"sshd of {host.name}: {why}")

    def start_sshd(self, name: str) -> None:
        """(Re)start host ``name``'s sshd."""
        host = self.host(name)
        self._start_sshd(host)
        self._wait_listening(host)

    def _munge(self) -> None:
        munge = self.root / "munge"
        munge.mkdir(mode=0o700, exist_ok=True)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o600)
        self._start_daemon(
            "munged",
            ["munged", "-F", "--force", f"--key-file={key}", f"--socket={munge}/munge.sock",
             f"--pid-file={munge}/munged.pid", f"--seed-file={munge}/seed",
             f"--log-file={self.root}/log/munged.log"],
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while not (munge / "munge.sock").exists():
            if time.monotonic() > deadline or self.daemons["munged"].poll() is not None:
                raise SimulatedHostsError("munged did not start:\n" + self.log("munged")[-2000:])
            time.sleep(0.1)

    def _write_slurm_config(self) -> None:
        lines = slurm_config_lines(self.root, self.subnet, self.hosts, self.cpus)
        write_text(self.conf, "\n".join(lines) + "\n")

    def start_slurmd(self, name: str) -> None:
        host = self.host(name)
        (self.root / f"spool.{name}").mkdir(exist_ok=True)
        self._start_daemon(
            f"slurmd.{name}", [*host.enter(), "slurmd", "-D", "-f", str(self.conf), "-N", name]
        )

    def wait_idle(self, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            for name, process in self.daemons.items():
                if process.poll() is not None:
                    raise SimulatedHostsError(
                        f"{name} exited ({process.returncode}) while starting:\n"
                        + self.log(name)[-2000:]
                    )
            states = self.node_states()
            if all(states.get(node) == "idle" for node in self.names):
                return
            time.sleep(0.5)
        raise SimulatedHostsError(f"Slurm nodes not idle after {timeout:.0f} s: {states}")

    # -- faults -------------------------------------------------------------------------------
    def processes(self, name: str) -> list[int]:
        """Every process running in host ``name`` (its daemons, their sessions and job steps),
        the process holding its namespaces aside."""
        host = self.host(name)
        found: set[int] = set()
        if host.uts_inode is not None:
            found.update(pids_in_namespace("uts", host.uts_inode))
        if host.namespace and (inode := netns_inode(host.namespace)) is not None:
            found.update(pids_in_namespace("net", inode))
        return sorted(found - {host.holder_pid})

    def kill_host(self, name: str) -> list[int]:
        """Host ``name`` "loses power": every process in it dies at once (SIGKILL); its
        namespaces stay, so its daemons can start again. Returns the pids killed."""
        pids = self.processes(name)
        kill_pids(pids)
        return pids

    def throttle(self, name: str, rate: str) -> None:
        """Host ``name``'s ``eth0`` sends at most ``rate`` (tc's units: ``50mbit``): a slow NIC or
        cable, for real, on what it sends (a token bucket, tc's ``tbf``). The qdisc is the
        host's own (its network namespace), so it goes with the host; ``rate=""`` removes it."""
        host = self.host(name)
        if not host.namespace:
            raise SimulatedHostsError(f"host {name} has no network of its own to throttle")
        in_host = ["ip", "netns", "exec", host.namespace, "tc", "qdisc"]
        if not rate:
            run_checked([*in_host, "del", "dev", "eth0", "root"], check=False)
            return
        run_checked([*in_host, "replace", "dev", "eth0", "root", "tbf", "rate", rate,
                     "burst", "32kb", "latency", "100ms"])  # fmt: skip

    # -- removing ----------------------------------------------------------------------------
    def stop(self) -> None:
        """Cancel every job, stop every daemon and job step, remove namespaces and links."""
        try:
            self._stop()
        finally:
            if self.subnet:
                release_subnet(self.subnet)

    def _stop(self) -> None:
        if (ctld := self.daemons.get("slurmctld")) is not None and ctld.poll() is None:
            self.client("scancel", "--full", "--user=root", timeout=30)
            deadline = time.monotonic() + 15
            while self.queue() and time.monotonic() < deadline:
                time.sleep(0.5)
        order = sorted(self.daemons, key=lambda n: (n in ("slurmctld", "munged"), n == "munged"))
        for name in order:
            process = self.daemons[name]
            if process.poll() is not None:
                continue
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=15)
        # Sessions and job steps (slurmstepd and its tasks) are re-parented away from their
        # daemon: whatever still runs in one of the hosts is ours, and goes; then the holders.
        for host in self.hosts:
            if host.holder_pid is not None:
                kill_pids(self.processes(host.name))
                kill_pids([host.holder_pid])
            if host.launcher is not None:
                host.launcher.kill()
                host.launcher.wait(timeout=15)
            host.holder_pid = None
        for ns in self.namespaces:
            if (inode := netns_inode(ns)) is not None:
                kill_pids(pids_in_namespace("net", inode))
        for ns in reversed(self.namespaces):
            run_checked(["ip", "netns", "del", ns], check=False)
        if self.host_link:
            run_checked(["ip", "link", "del", self.host_link], check=False)

    def leftovers(self) -> list[str]:
        """What of these hosts still exists (empty after ``stop()``)."""
        found = []
        netns = run_checked(["ip", "netns", "list"], check=False).stdout.split()
        found += [f"netns {ns}" for ns in self.namespaces if ns in netns]
        links = run_checked(["ip", "-o", "link"], check=False).stdout
        if self.host_link and f" {self.host_link}@" in links:
            found.append(f"link {self.host_link}")
        found += [f"{name} pid {p.pid}" for name, p in self.daemons.items() if p.poll() is None]
        for host in self.hosts:
            if host.uts_inode is not None and (pids := pids_in_namespace("uts", host.uts_inode)):
                found.append(f"host {host.name} processes {pids}")
        return found

    def __enter__(self) -> SimulatedHosts:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()
