"""A simulated host's namespaces (driver.testbed.simhosts): the process that holds them open,
the subnet its network takes, the names every made thing carries, and the sweep of what a
killed run left.

Every namespace, link and process made for simulated hosts carries its creating process's pid
(a name ``<tag><pid>-<host>``, a :data:`MARKER` variable in the environment), so that
:func:`sweep_stale` can tell what a run killed outright (SIGKILL, a crashed CI job) left from
what a live one holds. The daemons each host runs are :mod:`driver.testbed.daemons`.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TAG = "dlph"  # namespace/link names: <tag><creating pid>-<host>
STALE_TAGS = (TAG, "dlps", "dlpt")  # and the test fixtures' clusters
MARKER = "DLPERF_SIMHOST"  # in every process this module starts: "<creating pid>:<prefix>"
HOUR_S = 3600


class SimulatedHostsError(RuntimeError):
    """The hosts could not be made (the message names the step and what it printed)."""


def clock_offset(index: int) -> int:
    """Host ``index``'s monotonic clock offset: two hours and some seconds per host, so no two
    hosts (nor this machine) agree, by hours."""
    return (index + 1) * 2 * HOUR_S + (index + 1) * 13


def run_checked(argv: list[str], check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess:
    """``argv``'s result (output captured); with ``check``, a failure is a SimulatedHostsError
    naming the command, its exit status and what it printed."""
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, **kwargs)
    if check and result.returncode != 0:
        raise SimulatedHostsError(
            f"{' '.join(argv)}: exit {result.returncode}: {result.stderr.strip()}"
        )
    return result


# A subnet is taken once its hosts' link has an address; until then a claim file (the claimer's
# pid) keeps two runs that start hosts at once (two rehearsals, two test workers) off the same one.
SUBNET_CLAIMS = Path("/run/dlperf-subnets")


def free_subnet() -> str:
    """A 10.251.X prefix that no address or route of this machine uses and no live process has
    claimed, claimed for this one (released by :meth:`SimulatedHosts.stop`; a claim whose
    process is gone is taken over). Without root (a dry run) nothing is claimed."""
    used = run_checked(["ip", "-4", "addr"]).stdout + run_checked(["ip", "-4", "route"]).stdout
    try:
        SUBNET_CLAIMS.mkdir(parents=True, exist_ok=True)
        claims = os.access(SUBNET_CLAIMS, os.W_OK)
    except OSError:
        claims = False
    for third in range(7, 250):
        prefix = f"10.251.{third}"
        if f"{prefix}." not in used and (not claims or _claim(SUBNET_CLAIMS / prefix)):
            return prefix
    raise SimulatedHostsError("no free 10.251.X.0/24 subnet for simulated hosts")


def _claim(path: Path) -> bool:
    for _ in range(2):  # a stale claim is removed, then taken like a free one
        try:
            handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                owner = int(path.read_text() or 0)
            except (OSError, ValueError):
                owner = 0
            if owner and Path(f"/proc/{owner}").exists():
                return False
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(handle, "w") as claim:
            claim.write(str(os.getpid()))
        return True
    return False


def release_subnet(prefix: str) -> None:
    """Give back this process's claim on ``prefix`` (a claim of another process stays)."""
    path = SUBNET_CLAIMS / prefix
    try:
        if int(path.read_text()) == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def ns_inode(pid: int | str, kind: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except OSError:
        return None


def pids_in_namespace(kind: str, inode: int) -> list[int]:
    """Every process whose ``kind`` namespace (net, uts, ...) is ``inode``."""
    own = os.getpid()
    return [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and int(entry.name) != own and ns_inode(entry.name, kind) == inode
    ]


def kill_pids(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def netns_inode(name: str) -> int | None:
    try:
        return os.stat(f"/run/netns/{name}").st_ino
    except OSError:
        return None


@dataclass
class SimulatedHost:
    index: int
    name: str
    address: str
    port: int
    offset_s: int  # its monotonic (and boot-time) clock minus this machine's
    root: Path  # its folder: sshd files, scratch
    namespace: str | None  # its network namespace (None: this machine's network)
    holder_pid: int | None = None  # the process holding its namespaces open
    uts_inode: int | None = None
    launcher: subprocess.Popen | None = None

    @property
    def scratch(self) -> Path:
        return self.root / "scratch"

    def enter(self, cwd: Path | str | None = None) -> list[str]:
        """The argv prefix that runs a command inside this host (all its namespaces)."""
        if self.holder_pid is None:
            raise SimulatedHostsError(f"host {self.name} is not running")
        argv = ["nsenter", "-t", str(self.holder_pid), "--uts", "--mount", "--time"]
        if self.namespace:
            argv.append("--net")
        if cwd is not None:
            argv.append(f"--wd={cwd}")
        return [*argv, "--"]


def _marker_of(pid: str) -> str | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    prefix = f"{MARKER}=".encode()
    return next((v[len(prefix) :].decode() for v in environ if v.startswith(prefix)), None)


def sweep_stale() -> list[str]:
    """Remove what a run killed outright (SIGKILL, a crashed CI job) left: hosts, namespaces and
    links of ours whose creating process (its pid is in the name) is gone, and their processes."""
    removed = []
    init_uts = ns_inode(1, "uts")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or (marker := _marker_of(entry.name)) is None:
            continue
        creator = marker.partition(":")[0]
        if not creator.isdigit() or Path(f"/proc/{creator}").exists():
            continue
        uts = ns_inode(entry.name, "uts")
        if uts is not None and uts != init_uts:
            kill_pids(pids_in_namespace("uts", uts))
        kill_pids([int(entry.name)])
        removed.append(f"pid {entry.name} ({marker})")
    listing = run_checked(["ip", "netns", "list"], check=False).stdout.split("\n")
    for ns in (line.split()[0] for line in listing if line.strip()):
        prefix, _, _rest = ns.partition("-")
        tag, digits = prefix[:4], prefix[4:]
        if tag not in STALE_TAGS or not digits.isdigit() or Path(f"/proc/{digits}").exists():
            continue
        if (inode := netns_inode(ns)) is not None:
            kill_pids(pids_in_namespace("net", inode))
        run_checked(["ip", "netns", "del", ns], check=False)
        run_checked(["ip", "link", "del", f"{prefix}h"], check=False)
        removed.append(ns)
    return removed
