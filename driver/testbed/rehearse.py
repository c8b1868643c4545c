"""``dlperf run --simulated-hosts``: rehearse a real matrix on N simulated hosts of this machine.

Before booking a cluster, the matrix's own cases (real frameworks, their launchers, the
``process`` runtime over SSH, every node its own address, hostname and clock) run on N simulated
hosts (:mod:`driver.testbed.simhosts`), N being the largest node count of the selected cases.
Each host runs a framework's case with the interpreter the local runtime would use
(``.venvs/<framework>/bin/python``; the file system is shared) and the venv's extra library
folders. The hosts are removed at the end, also on Ctrl-C, SIGTERM or a failure.

What it shows is that the shape runs (rendezvous, collectives across addresses, log collection,
records), not what N machines would measure: every host's ranks share this machine's CPUs,
memory and GPUs. The inventory's cluster name (in every record) and ``session.json`` say so.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Unpack

from driver.core.session import Selection, SessionOptions, SessionSetting, run_session
from driver.frameworks.base import FRAMEWORKS, Framework
from driver.frameworks.envs import venv_environment, venv_python
from driver.runtimes.base import ctrl_c_held
from driver.testbed.namespaces import SimulatedHostsError, sweep_stale
from driver.testbed.simhosts import SimulatedHosts, missing_requirements

REHEARSAL_RUNTIME = "process"
INVENTORY_COPY = "simulated-hosts.yaml"  # in the session folder: the hosts a rehearsal made
# A rehearsal's scratch folder: its creator's pid in the name, so that the next rehearsal can
# tell the folder of a process killed outright (SIGKILL: no cleanup ran) from a live one's.
SCRATCH_PREFIX = "dlperf-rehearse-"
_SCRATCH = re.compile(rf"{SCRATCH_PREFIX}(\d+)-")


def sweep_stale_scratch(folder: Path | None = None) -> list[str]:
    """Remove the scratch folders of rehearsals whose process is gone (killed with SIGKILL,
    a crashed CI job): their hosts' keys, inventory and files; a live rehearsal's are kept."""
    removed = []
    root = Path(folder or tempfile.gettempdir())
    for entry in sorted(root.glob(f"{SCRATCH_PREFIX}*")):
        match = _SCRATCH.match(entry.name)
        if not match or not entry.is_dir() or entry.is_symlink():
            continue
        if int(match[1]) == os.getpid() or Path(f"/proc/{match[1]}").exists():
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(str(entry))
    return removed


def refusal(*, runtime: str, inventory: str | None, dry_run: bool = False) -> str | None:
    """None when a rehearsal can run here as asked, else one line saying why and the fix."""
    if inventory:
        return (
            f"--simulated-hosts makes its own hosts and their inventory; drop --inventory "
            f"{inventory} (or drop --simulated-hosts to run on the cluster it lists)"
        )
    if runtime != REHEARSAL_RUNTIME:
        return (
            f"--simulated-hosts runs the cases through the {REHEARSAL_RUNTIME} runtime (each "
            f"host's sshd starts its ranks), not {runtime}; drop --runtime {runtime} (with make, "
            "REHEARSE=on without RUNTIME)"
        )
    if dry_run:  # a dry run makes no host: it only prints the commands they would run
        return None
    why = missing_requirements(sshd=True)
    return f"--simulated-hosts: {why}" if why else None


def cluster_name(machine: str | None = None) -> str:
    """The inventory's cluster name, in every record: simulated, and on which machine."""
    host = re.sub(r"[^A-Za-z0-9_.-]+", "-", machine or platform.node()).strip("-.") or "this"
    return f"simulated-hosts-on-{host}"[:63]


def interpreters(frameworks: Iterable[Framework]) -> dict[str, str]:
    """The inventory's ``python``: per framework the local runtime's venv interpreter; the kit's
    own (the calibration workload, the pre-flight's probe) for everything else."""
    found = {"default": sys.executable}
    for framework in frameworks:
        if framework.name != "calibration" and framework.cpu_requirements.exists():
            found[framework.name] = str(venv_python(framework))
    return found


def library_environment(frameworks: Iterable[Framework]) -> dict[str, str]:
    """The venvs' extra library folders (OneFlow's cuDNN/cuBLAS wheels), as the local runtime
    exports them. An inventory's ``env`` is per host, not per framework: the folders of every
    selected framework are joined (each wheel opens its own libraries by name)."""
    folders: list[str] = []
    for framework in frameworks:
        for folder in venv_environment(framework).get("LD_LIBRARY_PATH", "").split(":"):
            if folder and folder not in folders:
                folders.append(folder)
    return {"LD_LIBRARY_PATH": ":".join(folders)} if folders else {}


@dataclass(frozen=True)
class Rehearsal:
    """The simulated hosts a run goes to: their inventory and what the session records."""

    hosts: SimulatedHosts
    inventory: Path
    started: bool

    def facts(self, inventory_copy: Path) -> dict[str, Any]:
        """``session.json``'s ``simulated_hosts``: which hosts, where their inventory is kept,
        and that they are one machine."""
        return {
            "hosts": {host.name: host.address for host in self.hosts.hosts},
            "machine": platform.node(),
            "cluster": cluster_name(),
            "inventory": str(inventory_copy),
            "note": (
                f"{len(self.hosts.hosts)} simulated hosts on one machine ({platform.node()}): "
                "own network address, hostname and clock each, but every host's ranks share "
                "this machine's CPUs, memory and GPUs; a rehearsal of the shape, not a "
                "measurement of that many machines"
            ),
        }

    def setting(self, session_root: Path) -> SessionSetting:
        """What the session records of these hosts: their facts (in ``session.json`` and every
        record's run note) and a copy of their inventory."""
        facts = self.facts(session_root / INVENTORY_COPY)
        return SessionSetting(
            facts={"simulated_hosts": facts},
            files={INVENTORY_COPY: self.inventory.read_text()},
            note=facts["note"],
        )


@contextmanager
def simulated_hosts(
    nodes: int,
    devices: int,
    frameworks: Iterable[Framework],
    *,
    start: bool = True,
    gpus: bool = False,
    printer: Any = print,
) -> Iterator[Rehearsal]:
    """``nodes`` simulated hosts with sshd and their inventory (``devices`` ranks per host), in
    a temporary folder; removed on leaving, however that happens. ``start=False`` (a dry run)
    writes the inventory of hosts that are never made."""
    frameworks = list(frameworks)
    for leftover in sweep_stale_scratch():
        printer(f"removed the scratch folder of an earlier rehearsal that was killed: {leftover}")
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-") as scratch:
        root = Path(scratch)
        # Our client key at a fixed path, so the inventory can name it before the hosts start.
        (root / "client").mkdir()
        hosts = SimulatedHosts(
            root / "hosts", nodes, sshd=True, client_key=root / "client" / "id_ed25519"
        )
        inventory = hosts.write_inventory(
            root / "simulated-hosts.yaml",
            devices=devices,
            cluster=cluster_name(),
            python=interpreters(frameworks),  # one per framework
            env=library_environment(frameworks),
            container={"variant": "gpu" if gpus else "cpu"},
        )
        if not start:
            yield Rehearsal(hosts, inventory, started=False)
            return
        for leftover in sweep_stale():  # what a killed rehearsal (SIGKILL) left
            printer(f"removed a leftover of an earlier run's simulated hosts: {leftover}")
        printer(
            f"making {nodes} simulated hosts ({', '.join(h.address for h in hosts.hosts)}) on "
            f"this machine: each its own address, hostname and clock, all on its hardware"
        )
        hosts.start()  # removes what it made if it fails
        try:
            yield Rehearsal(hosts, inventory, started=True)
        finally:
            printer(f"removing the {nodes} simulated hosts")
            # a second Ctrl-C (or SIGTERM) while they go would leave namespaces and daemons
            with ctrl_c_held(signal.SIGTERM):
                hosts.stop()


def rehearse(selection: Selection, root: Path, **options: Unpack[SessionOptions]) -> int:
    """``dlperf run --simulated-hosts``: the selection on as many simulated hosts as its largest
    case has nodes, through the process runtime, into the session folder ``root`` (``options``:
    :func:`run_session`'s, handed on with the rehearsal's setting); the hosts go at the end,
    however the run ends."""
    from driver.cluster.inventory import load_inventory
    from driver.frameworks.envs import ensure_env
    from driver.model.hardware import gpu_names
    from driver.runtimes.ssh.runtime import ProcessRuntime

    dry_run = bool(options.get("dry_run"))
    frameworks = [FRAMEWORKS.get(name) for name in sorted({c.framework for c in selection.cases})]
    if not dry_run:  # the hosts run the local runtime's venvs: made before the hosts
        for framework in frameworks:
            if framework.cpu_requirements.exists():
                ensure_env(framework)
    nodes = max(case.topology.nodes for case in selection.cases)
    devices = max(case.topology.devices_per_node for case in selection.cases)
    try:
        with simulated_hosts(
            nodes, devices, frameworks, start=not dry_run, gpus=bool(gpu_names())
        ) as rehearsal:
            # A dry run makes no host: its inventory names a client key that is never made.
            inventory = load_inventory(rehearsal.inventory, check_files=rehearsal.started)
            options["setting"] = rehearsal.setting(root)
            return run_session(selection, ProcessRuntime(inventory), root, **options)
    except SimulatedHostsError as error:  # a host that would not start: what it printed
        print(f"error: --simulated-hosts: {' '.join(str(error).split())[:2000]}", file=sys.stderr)
        return 1
