"""Pre-flight: every node checked in parallel before anything starts on any of them.

A container engine (docker, podman; the platform hands its :class:`Engine`): SSH reachable, the
engine answers, the image (by digest) present, the node's GPUs listed by index and UUID and the
container's (``container.gpus``) found among them, free disk in the scratch folder, the data
folder there. No engine (no container): SSH, the node's Python and the framework importable
with it, devices, disk, data. A failed check names the node, the
check and what to do. No SFTP: the kit's code goes to a node on a command's stdin and every log
comes back on a command's stdout, so an sshd without the SFTP subsystem serves it too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from driver.cluster.remote import NodeUnreachable, Remote, parallel, shell
from driver.model.hardware import GPU_QUERY

# The module that proves a framework is installed in a node's Python (process runtime).
FRAMEWORK_MODULES = {
    "pytorch": "torch",
    "tensorflow": "tensorflow",
    "paddle": "paddle",
    "mxnet": "mxnet",
    "oneflow": "oneflow",
}


@dataclass(frozen=True)
class Engine:
    """What a container platform's pre-flight asks a node: the argv that prints its version, the
    argv that prints the ID of the image (None: no image to check) and the fix when it is
    missing; ``gpus``: the container's GPU request (None: every GPU of the node)."""

    name: str
    version: list[str]
    image: list[str] | None = None
    image_id: str | None = None
    missing: str = "run `dlperf images push --inventory ...`"
    gpus: str | None = None


@dataclass(frozen=True)
class Check:
    node: str
    name: str
    ok: bool
    detail: str
    found: int | None = None  # what the check counted (devices), to judge other cases by
    gpus: tuple[str, ...] = ()  # the devices check: the container's GPUs, "index=UUID"

    def line(self) -> str:
        return f"{self.node:<12} {self.name:<8} {'ok' if self.ok else 'FAIL':<5} {self.detail}"


def occupies_devices(framework: str | None) -> bool:
    """Whether each rank of ``framework`` needs a device of its own (a GPU; a CPU on a CPU
    node). The framework plug-in says so; an unknown name is checked like a real framework."""
    if not framework:
        return True
    from driver.frameworks.base import FRAMEWORKS
    from driver.plugins import load

    load("frameworks")
    return FRAMEWORKS.get(framework).occupies_device if framework in FRAMEWORKS else True


# A GPU that nvidia-smi cannot read prints a line of another shape than GPU_QUERY's rows
# ("Unable to determine the device handle for GPU ...").
GPU_ROW = re.compile(r"^(?P<index>\d+), (?P<uuid>GPU-[0-9A-Za-z-]+)$")


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str

    def __str__(self) -> str:
        return f"{self.index}={self.uuid}"


def parse_gpus(listing: str) -> tuple[list[Gpu], list[str]]:
    """The GPUs of :data:`GPU_QUERY`'s output, and its other lines (GPUs it could not read)."""
    gpus, unreadable = [], []
    for line in filter(None, (line.strip() for line in listing.splitlines())):
        row = GPU_ROW.match(line)
        if row:
            gpus.append(Gpu(int(row["index"]), row["uuid"]))
        else:
            unreadable.append(line)
    return sorted(gpus, key=lambda gpu: gpu.index), unreadable


def container_gpus(
    listed: list[Gpu], unreadable: list[str], request: str | None
) -> tuple[list[Gpu] | None, str]:
    """The node's GPUs that a container given ``docker run --gpus <request>`` sees, in its
    order (the PCI order: its GPU 0 is the first of them), or None and why.

    ``all`` (or None: the process runtime) is every GPU; a count N is GPUs 0..N-1 (docker's
    ``countToDevices``, moby daemon/nvidia_linux.go); ``device=<ids>`` names GPUs by index or
    UUID. A GPU that nvidia-smi cannot read fails ``all`` and a count (the container's list
    would hold it at a place nobody can tell); with ``device=`` only the named GPUs matter.
    """
    listing = ", ".join(str(gpu) for gpu in listed) or "none"
    broken = f"nvidia-smi cannot read a GPU ({'; '.join(unreadable)})" if unreadable else ""
    if request is None or request == "all" or request.isdigit():
        if broken:
            return None, (
                f"{broken}; it lists {listing}: repair the node, or name its healthy GPUs in "
                "the inventory (container.gpus: device=<index or UUID>,...)"
            )
        if request is None or request == "all":
            return list(listed), ""
        wanted = [str(i) for i in range(int(request))]
    else:
        wanted = request.removeprefix("device=").split(",")
    by_id = {ident: gpu for gpu in listed for ident in (str(gpu.index), gpu.uuid)}
    unknown = [ident for ident in wanted if ident not in by_id]
    if unknown:
        return None, (
            f"container.gpus {request} names GPU(s) {', '.join(unknown)} that this node does "
            f"not list (it lists {listing}{'; ' + broken if broken else ''}): name GPUs by an "
            "index or a UUID that nvidia-smi lists"
        )
    return sorted({by_id[ident] for ident in wanted}, key=lambda gpu: gpu.index), ""


def list_devices(
    remote: Remote, variant: str, request: str | None = None
) -> tuple[int | None, str, tuple[str, ...]]:
    """The devices the node gives a case: on a GPU node the GPUs its container is given
    (``request``: the container's ``--gpus``; None for the process runtime), as "index=UUID";
    on a CPU node its CPUs. None and why when they cannot be listed."""
    if variant == "gpu":
        result = remote.run(GPU_QUERY, timeout=30)
        if not result.ok:
            return None, f"{GPU_QUERY} failed: {result.why()}", ()
        gpus, why = container_gpus(*parse_gpus(result.stdout), request)
        if gpus is None:
            return None, why, ()
        return len(gpus), "", tuple(str(gpu) for gpu in gpus)
    result = remote.run("nproc", timeout=30)
    text = result.stdout.strip()
    if not result.ok or not text.isdigit():
        return None, f"nproc failed: {result.why()}", ()
    return int(text), "", ()


def devices_check(
    node: str,
    variant: str,
    found: int | None,
    why: str,
    needed: int,
    framework: str | None,
    gpus: tuple[str, ...] = (),
) -> Check:
    """The same verdict for every topology: ``needed`` ranks per node against the node's
    ``found`` devices (``why``: what went wrong listing them; ``gpus``: the GPUs, "index=UUID",
    of which the case takes the first ``needed``). A framework whose ranks need no device (the
    calibration workload sleeps) passes with the facts; any other fails when its ranks would
    share devices, which would measure the sharing, not the framework."""
    unit = "GPUs visible to nvidia-smi" if variant == "gpu" else "CPUs (one training process each)"
    if not occupies_devices(framework):
        seen = f"{found} {unit}" if found is not None else why
        return Check(
            node, "devices", True,
            f"{seen}; the {framework} workload's {needed} rank(s) per node need no device of "
            "their own", found, gpus,
        )  # fmt: skip
    if found is None and variant == "gpu" and "container.gpus" in why:
        return Check(node, "devices", False, why)  # listed, but not the container's GPUs
    if found is None and variant == "gpu":
        return Check(
            node, "devices", False,
            f"{why}; a GPU node needs the NVIDIA driver (and the container toolkit for docker); "
            "a node without GPUs needs `container: {variant: cpu}` in the inventory",
        )  # fmt: skip
    if found is None:
        return Check(node, "devices", False, f"{why}; the node's shell must have coreutils' nproc")
    if found >= needed:
        used = f" (the case's: {', '.join(gpus[:needed])})" if gpus else ""
        return Check(node, "devices", True, f"{found} {unit}{used}; {needed} needed", found, gpus)
    shared = "GPUs" if variant == "gpu" else "CPUs"
    return Check(
        node, "devices", False,
        f"{found} {unit}; {needed} needed: {needed} ranks per node would share {found} "
        f"{shared} and measure the sharing. Run a topology with at most {found} per node "
        f"(<nodes>n<total>g, total <= nodes x {found}), or use nodes with more {shared}; to "
        "rehearse this shape on these nodes, the calibration workload needs no device per rank "
        "(`dlperf selftest --topologies ...`)", found, gpus,
    )  # fmt: skip


def check_devices(remote: Remote, needed: int, request: str | None, framework: str | None) -> Check:
    """The devices check of one node: ``needed`` ranks per node of ``framework``, on the GPUs
    of the container's ``request`` (its ``--gpus``; None: every GPU of the node)."""
    container = remote.node.container
    found, why, gpus = list_devices(remote, container.variant, request)
    return devices_check(remote.node.name, container.variant, found, why, needed, framework, gpus)


def _disk(remote: Remote) -> Check:
    node = remote.node
    script = (
        f"mkdir -p {shell([node.scratch_dir])} && "
        f"df -Pk {shell([node.scratch_dir])} | awk 'NR==2 {{print $4}}'"
    )
    result = remote.run(script, timeout=30)
    if not result.ok or not result.stdout.strip().isdigit():
        return Check(node.name, "disk", False, f"scratch {node.scratch_dir}: {result.why()}")
    free_gb = int(result.stdout.strip()) / (1 << 20)
    ok = free_gb >= node.min_free_gb
    detail = f"{free_gb:.1f} GiB free in {node.scratch_dir}; {node.min_free_gb:g} GiB needed"
    return Check(node.name, "disk", ok, detail)


def check_node(
    remote: Remote,
    *,
    engine: Engine | None,
    devices: int | None = None,
    framework: str | None = None,
) -> list[Check]:
    """Every check of one node; stops after SSH when the node cannot be reached."""
    node = remote.node
    checks: list[Check] = []
    try:
        result = remote.run("true", timeout=node.ssh.connect_timeout + 10)
        checks.append(
            Check(node.name, "ssh", result.ok, f"{node.ssh.user}@{node.address}:{node.ssh.port}")
        )
        if engine is not None:
            version = remote.run_argv(engine.version, timeout=30)
            said = f"{engine.name} {version.stdout.strip()}" if version.ok else version.why()
            checks.append(Check(node.name, engine.name, version.ok, said))
            if engine.image and engine.image_id and version.ok:
                found = remote.run_argv(engine.image, timeout=30)
                present = found.ok and found.stdout.strip() == engine.image_id
                shown = engine.image_id[:19]
                said = f"{shown} present" if present else f"{shown} missing: {engine.missing}"
                checks.append(Check(node.name, "image", present, said))
        else:
            python = node.python_for(framework or "default")
            version = remote.run_argv([python, "-c", "import sys; print(sys.version.split()[0])"])
            fix = (
                "set the node's `python: {default: ...}` (or one per framework) in the inventory "
                "to an interpreter that exists there"
            )
            said = f"{python} {version.stdout.strip()}" if version.ok else f"{version.why()}; {fix}"
            checks.append(Check(node.name, "python", version.ok, said))
            module = FRAMEWORK_MODULES.get(framework or "")
            if module and version.ok:
                find = f"import importlib.util as u, sys; sys.exit(not u.find_spec({module!r}))"
                found = remote.run_argv([python, "-c", find], timeout=60)
                said = (
                    f"{module} importable"
                    if found.ok
                    else (
                        f"{python} cannot import {module}: install the framework there (its "
                        f"requirements-cpu.txt) or point `python: {{{framework}: ...}}` at an "
                        "environment that has it"
                    )
                )
                checks.append(Check(node.name, "framework", found.ok, said))
        request = engine.gpus if engine else None
        checks.append(check_devices(remote, devices or node.devices, request, framework))
        checks.append(_disk(remote))
        if node.data_dir:
            found = remote.run_argv(["test", "-d", node.data_dir])
            checks.append(Check(node.name, "data", found.ok, node.data_dir))
    except NodeUnreachable as error:
        checks.append(
            Check(
                node.name,
                "ssh",
                False,
                f"{error.detail}; check the node's address, ssh.port, ssh.user and ssh.key in "
                f"the inventory (try `ssh -p {node.ssh.port} {node.ssh.user}@{node.address} "
                "true`)",
            )
        )
    return checks


def run_preflight(
    remotes: list[Remote],
    *,
    engine: Callable[[Remote], Engine | None],
    devices: int | None = None,
    framework: str | None = None,
) -> list[Check]:
    """``engine``: what a node's container platform asks it (None: no container)."""
    results = parallel(
        remotes,
        lambda r: check_node(r, engine=engine(r), devices=devices, framework=framework),
    )
    checks: list[Check] = []
    for remote, found, error in results:
        if error is not None:
            checks.append(Check(remote.node.name, "preflight", False, f"{error}"))
        else:
            checks.extend(found)
    return checks


def failures(checks: list[Check]) -> list[Check]:
    return [check for check in checks if not check.ok]


def report(checks: list[Check]) -> str:
    header = f"{'node':<12} {'check':<8} {'':<5} detail"
    return "\n".join([header, *(check.line() for check in checks)])
