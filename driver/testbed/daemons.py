"""The daemons of simulated hosts (driver.testbed.simhosts): each host's sshd (its own
configuration, host key and the client's key) and the Slurm cluster's ``slurm.conf``.

The hosts' namespaces and the processes holding them are :mod:`driver.testbed.namespaces`; the
tests' own sshd (``tests/cluster_fixtures.py``) is configured and awaited by the same helpers.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from driver.testbed.namespaces import SimulatedHost, run_checked

SSHD = "/usr/sbin/sshd"
SFTP_SERVER_PATHS = ("/usr/lib/openssh/sftp-server", "/usr/libexec/sftp-server")
SLURM_BINARIES = ("slurmctld", "slurmd", "srun", "sbatch", "squeue", "scancel", "scontrol",
                  "sinfo", "munged")  # fmt: skip


def wait_for_sshd(
    process: subprocess.Popen, address: str, port: int, log: Path, timeout_s: float = 20.0
) -> str | None:
    """None once the sshd started as ``process`` accepts connections at ``address:port``; else
    why not (it exited, with its log; or it stayed silent for ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return f"sshd exited: {log.read_text() if log.exists() else '(no log)'}"
        try:
            with socket.create_connection((address, port), timeout=1):
                return None
        except OSError:
            time.sleep(0.05)
    return f"sshd at {address}:{port} did not listen within {timeout_s:.0f} s"


def sshd_config_lines(*, port: int, address: str, root: Path, sftp: bool = True) -> list[str]:
    """An sshd of its own under ``root``: own host key and authorized keys, keys only, many
    sessions at once (the runtimes open several per node)."""
    sftp_server = next((p for p in SFTP_SERVER_PATHS if Path(p).exists()), SFTP_SERVER_PATHS[0])
    return [
        f"Port {port}",
        f"ListenAddress {address}",
        f"HostKey {root / 'host_ed25519'}",
        f"AuthorizedKeysFile {root / 'authorized_keys'}",
        f"PidFile {root / 'sshd.pid'}",
        "UsePAM no",
        "StrictModes no",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        "AllowTcpForwarding no",
        "X11Forwarding no",
        "PrintMotd no",
        "MaxSessions 64",
        "MaxStartups 64:30:128",
        "LogLevel ERROR",
        # bash sources ~/.bashrc for commands run by sshd only at shell level 1; this
        # machine's (pyenv init) would add ~0.3 s to every command.
        "SetEnv SHLVL=1",
        f"Subsystem sftp {sftp_server}" if sftp else "",
        "",
    ]


def make_key(path: Path) -> Path:
    """An ed25519 key pair at ``path`` (and ``path.pub``), made once."""
    if not path.exists():
        run_checked(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)])
    return path


def slurm_config_lines(root: Path, subnet: str, hosts: list[SimulatedHost], cpus: int) -> list[str]:
    """``slurm.conf`` of a cluster of ``hosts`` under ``root``: slurmctld at ``subnet``.2 in the
    bridge's namespace, munge's socket, state and logs under ``root``, no cgroups, each host
    declaring ``cpus`` CPUs."""
    lines = [
        "ClusterName=dlptest",
        f"SlurmctldHost=dlpctl({subnet}.2)",
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
        # No cgroups: the hosts share this machine's cgroup tree.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        # The declared CPUs count, not this machine's: N hosts x 8 tasks fit on 2 cores.
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        # A host whose slurmd is gone is DOWN within seconds, not minutes.
        "SlurmdTimeout=10",
        "MessageTimeout=5",
        "KillWait=3",
        "MinJobAge=300",
        "InactiveLimit=0",
        "SchedulerType=sched/builtin",
    ]
    lines += [
        f"NodeName={h.name} NodeAddr={h.address} NodeHostname={h.name} CPUs={cpus} State=UNKNOWN"
        for h in hosts
    ]
    lines.append(
        f"PartitionName=debug Nodes={','.join(h.name for h in hosts)} Default=YES MaxTime=INFINITE "
        "State=UP"
    )
    return lines
