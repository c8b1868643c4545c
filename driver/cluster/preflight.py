"""Pre-flight: every node checked in parallel before anything starts on any of them.

docker runtime: SSH reachable, its SFTP subsystem (Fabric copies the code and fetches every log
with it), docker answers, the image (by digest) present, devices visible, free disk in the
scratch folder, the data folder there. process runtime: SSH, SFTP, the node's Python and the
framework importable with it, devices, disk, data. A failed check names the node, the check
and what to do.
"""

from __future__ import annotations

from dataclasses import dataclass

from driver.cluster.remote import NodeUnreachable, Remote, parallel, shell

# The module that proves a framework is installed in a node's Python (process runtime).
FRAMEWORK_MODULES = {
    "pytorch": "torch",
    "tensorflow": "tensorflow",
    "paddle": "paddle",
    "mxnet": "mxnet",
    "oneflow": "oneflow",
}


@dataclass(frozen=True)
class Check:
    node: str
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{self.node:<12} {self.name:<8} {'ok' if self.ok else 'FAIL':<5} {self.detail}"


def _sftp(remote: Remote) -> Check:
    """Fabric's put/get (code bundle, every log) need the sshd's SFTP subsystem; without it a
    run would fail later with a misleading 'Channel closed'."""
    name = remote.node.name
    try:
        client = remote.connection().sftp()
        client.stat(".")
    except NodeUnreachable:
        raise
    except Exception as error:  # noqa: BLE001 - any SFTP failure is this check's verdict
        return Check(
            name,
            "sftp",
            False,
            f"the SFTP subsystem does not answer ({type(error).__name__}: {error}); the kit "
            "copies its code and fetches logs over SFTP: add `Subsystem sftp internal-sftp` "
            "(or the sftp-server path) to the node's sshd_config and reload sshd",
        )
    return Check(name, "sftp", True, "SFTP subsystem answers")


def _devices(remote: Remote, needed: int, variant: str) -> Check:
    name = remote.node.name
    if variant == "gpu":
        result = remote.run("nvidia-smi -L", timeout=30)
        if not result.ok:
            return Check(
                name,
                "devices",
                False,
                f"nvidia-smi -L failed: {result.why()}; a GPU node needs the NVIDIA driver "
                "(and the container toolkit for docker); a node without GPUs needs "
                "`container: {variant: cpu}` in the inventory",
            )
        count = sum(1 for line in result.stdout.splitlines() if line.startswith("GPU "))
        what = "GPUs visible to nvidia-smi"
    else:
        result = remote.run("nproc", timeout=30)
        count = int(result.stdout.strip() or 0) if result.ok else 0
        what = "CPUs (one training process each)"
    ok = count >= needed
    return Check(name, "devices", ok, f"{count} {what}; {needed} needed")


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
    kind: str,
    devices: int | None = None,
    image_id: str | None = None,
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
        checks.append(_sftp(remote))
        if kind == "docker":
            version = remote.run_argv(
                remote.docker("version", "--format", "{{.Server.Version}}"), timeout=30
            )
            checks.append(
                Check(
                    node.name,
                    "docker",
                    version.ok,
                    f"engine {version.stdout.strip()}" if version.ok else version.why(),
                )
            )
            if image_id and version.ok:
                found = remote.run_argv(
                    remote.docker("image", "inspect", "--format", "{{.Id}}", image_id), timeout=30
                )
                present = found.ok and found.stdout.strip() == image_id
                checks.append(
                    Check(
                        node.name,
                        "image",
                        present,
                        f"{image_id[:19]} present"
                        if present
                        else f"{image_id[:19]} missing: run `dlperf images push --inventory ...`",
                    )
                )
        else:
            python = node.python_for(framework or "default")
            version = remote.run_argv(
                [python, "-c", "import sys; print(sys.version.split()[0])"], timeout=30
            )
            checks.append(
                Check(
                    node.name,
                    "python",
                    version.ok,
                    f"{python} {version.stdout.strip()}"
                    if version.ok
                    else f"{version.why()}; set the node's `python: {{default: ...}}` (or one per "
                    "framework) in the inventory to an interpreter that exists there",
                )
            )
            module = FRAMEWORK_MODULES.get(framework or "")
            if module and version.ok:
                code = (
                    "import importlib.util, sys; "
                    f"sys.exit(0 if importlib.util.find_spec({module!r}) else 1)"
                )
                found = remote.run_argv([python, "-c", code], timeout=60)
                checks.append(
                    Check(
                        node.name,
                        "framework",
                        found.ok,
                        f"{module} importable"
                        if found.ok
                        else f"{python} cannot import {module}: install the framework there "
                        f"(its requirements-cpu.txt) or point `python: {{{framework}: ...}}` "
                        "at an environment that has it",
                    )
                )
        checks.append(_devices(remote, devices or node.devices, node.container.variant))
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
    kind: str,
    devices: int | None = None,
    image_id: str | None = None,
    framework: str | None = None,
) -> list[Check]:
    results = parallel(
        remotes,
        lambda r: check_node(r, kind=kind, devices=devices, image_id=image_id, framework=framework),
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
