"""A real Slurm cluster, and N simulated hosts, for tests: ``driver.testbed.simhosts`` does both.

Debian's slurmd is not built with ``--enable-multiple-slurmd``: two slurmd on one host register
and run batch jobs, but ``srun -N2`` gives both nodes ``SLURM_NODEID=0``. So each node here is
a host of its own as far as Slurm can tell (``SimulatedHosts``): its own network namespace (own
loopback, own ``eth0`` in a bridge, so every slurmd listens on the default port 6818), UTS
namespace (hostname ``n1``, ``n2``, ...), mount namespace (a private ``/etc/hosts``) and time
namespace (its monotonic clock hours apart from every other's). slurmctld sits in the bridge's
namespace; this host reaches the bridge through one veth pair, so ``sbatch``, ``srun`` and
``squeue`` run here unchanged, with ``SLURM_CONF`` pointing at the cluster. munged is the
fixture's own (own key and socket, named in ``AuthInfo``), never the system's.

Traffic stays on the namespaces and links made here (a 10.251.X.0/24 subnet not routed here
yet); everything is removed afterwards. Needs root; without root or the packages the tests
skip, or fail under ``DLPERF_REQUIRE_REAL=1`` (CI). ``.ci/setup-system.sh`` installs the
packages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from driver.files import write_text
from driver.testbed.namespaces import free_subnet
from driver.testbed.namespaces import sweep_stale as _sweep_stale
from driver.testbed.simhosts import SimulatedHosts, missing_requirements
from tests.conftest import require_github_build, require_real

NODES = ("n1", "n2")
# What .ci/setup-system.sh builds (.ci/build-enroot-pyxis.sh): the pinned enroot and pyxis.
PYXIS_PLUGIN = Path("/usr/local/lib/slurm/spank_pyxis.so")
ENROOT_VERSION = "4.1.2"
ENROOT_SOURCES = Path("/usr/local/share/dlperf")  # enroot-<version>/src of 3.5.0 and 4.1.2
CPUS_PER_NODE = 8  # declared (config_overrides): 4 nodes x 8 tasks fit on a 2-core machine
REHEARSAL_HOSTS = 4
_free_subnet = free_subnet


def slurm_missing() -> str | None:
    """None when a test cluster can be made here, else why not."""
    return missing_requirements(slurm=True, sshd=False)


def pyxis_missing() -> str | None:
    """None when the test cluster can load pyxis and run enroot, else why not."""
    built_where = "built by .ci/build-enroot-pyxis.sh where their GitHub tarballs can be had"
    if not PYXIS_PLUGIN.is_file():
        return f"pyxis is not installed ({PYXIS_PLUGIN}; {built_where})"
    enroot = shutil.which("enroot")
    if not enroot:
        return f"enroot is not installed ({built_where})"
    version = subprocess.run([enroot, "version"], capture_output=True, text=True).stdout.strip()
    if version != ENROOT_VERSION:
        return f"enroot {version or '?'} is installed, the tests pin {ENROOT_VERSION}: run " \
            ".ci/setup-system.sh"  # fmt: skip
    return None


class SlurmCluster(SimulatedHosts):
    """A running test cluster: simulated hosts with slurmd, slurmctld and munged (and sshd on
    each host when ``sshd=True``, for the SSH runtimes on the same hosts).

    ``pyxis=True``: slurmd and srun load pyxis (a ``plugstack.conf`` beside ``slurm.conf``, read
    where Slurm's clients and daemons start), and every node has a tmpfs of its own at
    ``<root>/local`` (``node_local``) where pyxis keeps its runtime files and enroot, through
    :meth:`enroot_env`, its data, cache and runtime folders: a container is unpacked per node, as
    on node-local disks (one shared folder would have both nodes unpack into one directory)."""

    def __init__(
        self,
        root: Path,
        prefix: str,
        subnet: str = "",
        nodes: tuple[str, ...] = NODES,
        *,
        sshd: bool = False,
        pyxis: bool = False,
        **options: Any,
    ) -> None:
        self.pyxis = pyxis
        if pyxis:
            options["node_local"] = Path(root) / "local"
        super().__init__(
            root=Path(root), names=tuple(nodes), prefix=prefix, subnet=subnet, slurm=True,
            sshd=sshd, cpus=CPUS_PER_NODE, **options,
        )  # fmt: skip

    def _write_slurm_config(self) -> None:
        super()._write_slurm_config()
        if self.pyxis:
            # slurmd loads the plug-in as it starts: runtime_path must exist on each node then.
            write_text(
                self.root / "plugstack.conf",
                f"required {PYXIS_PLUGIN} runtime_path={self.node_local}/pyxis\n",
            )

    def enroot_env(self) -> dict[str, str]:
        """What points enroot at the node-local folders, passed through the job's environment
        (pyxis hands enroot the job's variables but refuses ENROOT_*_PATH from it; enroot's
        defaults for those paths are XDG_* folders): ENROOT_DATA_PATH is <local>/data/enroot
        and so on. ENROOT_LOGIN_SHELL=no: Debian's /etc/profile, which a login shell reads,
        sets root's PATH anew, dropping the kit's CPU image's /opt/venv/bin."""
        local = self.node_local
        return {  # the folders under it are made by enroot and pyxis as needed
            "XDG_DATA_HOME": f"{local}/data", "XDG_CACHE_HOME": f"{local}/cache",
            "XDG_RUNTIME_DIR": f"{local}/run", "XDG_CONFIG_HOME": f"{local}/config",
            "ENROOT_LOGIN_SHELL": "no",
        }  # fmt: skip

    def kill_node(self, node: str) -> list[int]:
        """The node "loses power": every process in it (slurmd and its job steps) is killed at
        once. Returns the pids killed."""
        return self.kill_host(node)

    def restart_node(self, node: str) -> None:
        """Power the node back on: its slurmd starts again and Slurm resumes it."""
        process = self.daemons.get(f"slurmd.{node}")
        if process is not None and process.poll() is None:
            process.kill()
        if process is not None:
            process.wait(timeout=15)
        self.start_slurmd(node)
        deadline = time.monotonic() + 60
        while self.node_states().get(node) != "idle" and time.monotonic() < deadline:
            self.client("scontrol", "update", f"NodeName={node}", "State=RESUME")
            time.sleep(1)
        self.wait_idle()


def leftovers(cluster: SimulatedHosts) -> list[str]:
    """What of ``cluster`` still exists (the teardown test asserts none)."""
    return cluster.leftovers()


def sweep_stale() -> list[str]:
    """Remove what a test run killed outright (SIGKILL, a crashed CI job) left."""
    return _sweep_stale()


def _started(hosts: SimulatedHosts) -> Iterator[SimulatedHosts]:
    try:
        hosts.start()
    except Exception as error:  # noqa: BLE001 - start() cleaned up; one clear failure
        logs = "\n".join(
            f"--- {n}\n{hosts.log(n)[-1500:]}" for n in ("slurmctld", f"slurmd.{hosts.names[0]}")
        )
        shutil.rmtree(hosts.root, ignore_errors=True)
        pytest.fail(f"the simulated hosts did not start: {error}\n{logs}")
    try:
        yield hosts
    finally:
        hosts.stop()
        shutil.rmtree(hosts.root, ignore_errors=True)


def _root(kind: str) -> Path:
    root = Path(tempfile.mkdtemp(prefix=f"dlperf-{kind}-"))
    root.chmod(0o755)
    return root


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """munged, slurmctld and two slurmd (n1, n2), each node its own host; all removed after."""
    why = slurm_missing()
    if why:
        require_real(why)
    sweep_stale()
    cluster = SlurmCluster(_root("slurm"), prefix=f"dlps{os.getpid()}")
    yield from _started(cluster)  # type: ignore[misc]


@pytest.fixture(scope="module")
def pyxis_cluster() -> Iterator[SlurmCluster]:
    """The two-node cluster with pyxis loaded by slurmd and srun, enroot's folders per node."""
    why = slurm_missing()
    if why:
        require_real(why)
    why = pyxis_missing()
    if why:
        require_github_build(why)
    sweep_stale()
    cluster = SlurmCluster(_root("pyxis"), prefix=f"dlps{os.getpid()}", pyxis=True)
    yield from _started(cluster)  # type: ignore[misc]


@pytest.fixture(scope="module")
def slurm_hosts() -> Iterator[SlurmCluster]:
    """Four hosts (n1..n4) with skewed clocks, each running slurmd and sshd: one cluster for
    the slurm, process runtimes alike."""
    why = missing_requirements(slurm=True, sshd=True)
    if why:
        require_real(why)
    sweep_stale()
    nodes = tuple(f"n{i + 1}" for i in range(REHEARSAL_HOSTS))
    cluster = SlurmCluster(_root("slurmhosts"), prefix=f"dlph{os.getpid()}", nodes=nodes, sshd=True)
    yield from _started(cluster)  # type: ignore[misc]


@pytest.fixture(scope="module")
def simulated_hosts() -> Iterator[SimulatedHosts]:
    """Four sshd hosts (n1..n4), each with its own network, hostname, /etc/hosts and clock."""
    why = missing_requirements(sshd=True)
    if why:
        require_real(why)
    sweep_stale()
    yield from _started(SimulatedHosts(_root("simhosts"), REHEARSAL_HOSTS))  # type: ignore[misc]


@pytest.fixture(scope="module")
def loopback_hosts() -> Iterator[SimulatedHosts]:
    """Four sshd hosts for the docker runtime: loopback addresses 127.0.0.40.. (containers use
    the engine's network anyway), each its own hostname, /etc/hosts and clock."""
    why = missing_requirements(sshd=True)
    if why:
        require_real(why)
    sweep_stale()
    hosts = SimulatedHosts(_root("loophosts"), REHEARSAL_HOSTS, network=False)
    yield from _started(hosts)  # type: ignore[misc]
