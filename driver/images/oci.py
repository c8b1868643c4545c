"""OCI bundles for Slurm's own containers (``srun --container=<bundle>``).

Slurm (21.08+) runs a step inside an OCI bundle when ``oci.conf`` beside ``slurm.conf`` on the
nodes tells slurmstepd how to call an OCI runtime (runc, crun). slurmstepd reads the bundle's
``config.json``, puts the task's argv and environment into it and runs the runtime on
``<bundle>/rootfs`` (Slurm 22.05 always takes the root at ``<bundle>/rootfs``, whatever
``root.path`` says). What the kit writes:

* **A source**, made once per image: ``docker create`` + ``docker export`` of a local image
  into ``<cache>/image-<id>/rootfs``, and ``runc spec``'s ``config.json`` with the image's
  environment; or a bundle the cluster file names (``config.json`` + its root folder).
* **A session bundle** per session and framework (or upstream source): ``config.json``
  adjusted (:func:`adjust_config`: the node's own network and hostname, read-only root, a
  private ``/tmp``, the kit's checkout read-only and the session folder read-write at their own
  paths, ``/etc/hosts`` of the node) and ``rootfs`` a hard-linked copy of the source's (a real
  folder: runc refuses a root reached through a symlink), with :data:`MARKER` at its top. The
  step's script checks the marker first, so a step that Slurm ran on the host (a node without
  ``oci.conf`` treats ``--container`` as advisory) fails at once instead of measuring the host.
  Folders a step writes in (an upstream script's own folder, where it saves checkpoints) are
  mounted read-write from copies beside the root, made afresh for every repeat
  (:func:`refresh_writable`).

Every call is an argv list; nothing here goes through a shell.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from driver.files import write_json, write_text

MARKER = ".dlperf-oci-bundle"  # at the root of a session bundle's rootfs
SOURCE_DONE = "dlperf-source.json"  # written last into a finished source folder
# Namespaces a benchmark step must share with its node: the network (ranks reach each other at
# the nodes' addresses, collectives use the nodes' NICs) and the hostname (headers, logs).
HOST_NAMESPACES = ("network", "uts")
EXPORT_TIMEOUT_S = 1800.0


class OciBundleError(RuntimeError):
    """A bundle that cannot be made or used: one line naming the path, the cause, the fix."""


@dataclass(frozen=True)
class Mount:
    """A bind mount into the container: ``source`` on the node at ``destination``."""

    source: str
    destination: str
    read_only: bool = False

    def spec(self) -> dict[str, Any]:
        options = ["rbind", "ro" if self.read_only else "rw", "nosuid", "nodev"]
        return {"destination": self.destination, "type": "bind", "source": self.source,
                "options": options}  # fmt: skip


def parse_mount(text: str) -> Mount:
    """``SRC:DST[:FLAGS]`` (the ``slurm.mounts`` form, already checked by its schema)."""
    source, destination, *flags = text.split(":")
    return Mount(source, destination, read_only="ro" in ",".join(flags).split(","))


def adjust_config(config: dict[str, Any], mounts: list[Mount]) -> dict[str, Any]:
    """A bundle's ``config.json`` as the kit runs it under Slurm (a new dict; ``config`` is
    not changed): see the module's docstring. Slurm fills ``process.args`` and appends the
    task's environment to ``process.env``."""
    out = copy.deepcopy(config)
    process = out.setdefault("process", {})
    process["terminal"] = False
    process["args"] = ["sh"]  # Slurm replaces it with the task's argv
    process.setdefault("cwd", "/")
    out["root"] = {"path": "rootfs", "readonly": True}
    linux = out.setdefault("linux", {})
    namespaces = linux.get("namespaces", [])
    linux["namespaces"] = [ns for ns in namespaces if ns.get("type") not in HOST_NAMESPACES]
    out.pop("hostname", None)  # runc refuses a hostname without a UTS namespace of its own
    ours = [
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "nodev", "mode=1777"]},
        Mount("/etc/hosts", "/etc/hosts", read_only=True).spec(),
        *(mount.spec() for mount in mounts),
    ]  # fmt: skip
    taken = {mount["destination"] for mount in ours}
    kept = [m for m in out.get("mounts", []) if m.get("destination") not in taken]
    out["mounts"] = kept + ours
    return out


def config_path_variable(config: dict[str, Any]) -> str | None:
    """The ``PATH`` a bundle's ``config.json`` sets (the image's), if any."""
    for item in config.get("process", {}).get("env", []):
        if isinstance(item, str) and item.startswith("PATH="):
            return item[len("PATH=") :]
    return None


def read_config(bundle: Path, what: str, fix: str) -> dict[str, Any]:
    """A bundle's ``config.json``, refused in one line (``what``: where the path came from)."""
    bundle = Path(bundle)
    if not bundle.is_dir():
        raise OciBundleError(f"{what}: {bundle} is not a folder; {fix}")
    path = bundle / "config.json"
    if not path.is_file():
        raise OciBundleError(
            f"{what}: {bundle} has no config.json (an OCI bundle is config.json + its root "
            f"folder; `runc spec` writes one); {fix}"
        )
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise OciBundleError(f"{what}: {path} is not readable JSON ({error}); {fix}") from None
    if not isinstance(config, dict):
        raise OciBundleError(f"{what}: {path} is not a JSON object; {fix}")
    return config


def bundle_root(bundle: Path, config: dict[str, Any], what: str, fix: str) -> Path:
    """The root folder a bundle's ``config.json`` names (relative to the bundle)."""
    named = config.get("root", {}).get("path", "rootfs") if isinstance(config, dict) else ""
    root = Path(bundle) / str(named or "rootfs")
    if not (root / "bin").exists() and not (root / "usr").is_dir():
        raise OciBundleError(
            f"{what}: {root} (root.path of {Path(bundle) / 'config.json'}) holds no root file "
            f"system (no bin/ or usr/); {fix}"
        )
    return root


def _docker(*argv: str, timeout: float = 300.0, engine: str = "docker") -> str:
    """``engine`` (docker, or podman: the same command line) with ``argv``; its output."""
    if not shutil.which(engine):
        raise OciBundleError(
            f"{engine} not found: the kit makes an OCI bundle from an image with docker or "
            "podman; install one, or name a ready bundle (slurm.oci_bundle)"
        )
    result = subprocess.run([engine, *argv], capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip()
        raise OciBundleError(f"{engine} {' '.join(argv)}: exit {result.returncode}: {message}")
    return result.stdout


def image_facts(image: str, engine: str = "docker") -> tuple[str, list[str], str]:
    """A local image's ID, environment and working folder (``docker image inspect``)."""
    out = _docker("image", "inspect", "--format", "{{json .}}", "--", image, engine=engine)
    facts = json.loads(out)
    if isinstance(facts, list):  # podman's inspect answers a list even for one image
        facts = facts[0]
    config = facts.get("Config") or {}
    return facts["Id"], list(config.get("Env") or []), config.get("WorkingDir") or "/"


def runc_spec() -> dict[str, Any]:
    """``runc spec``'s default ``config.json`` (for the host's runc)."""
    runc = shutil.which("runc") or shutil.which("runc", path="/usr/sbin:/sbin")
    if not runc:
        raise OciBundleError(
            "runc not found on this host: the kit takes a bundle's config.json from `runc spec`; "
            "apt-get install runc, or name a ready bundle (slurm.oci_bundle)"
        )
    with tempfile.TemporaryDirectory(prefix="dlperf-runc-spec-") as folder:
        subprocess.run([runc, "spec", "--bundle", folder], check=True, capture_output=True,
                       timeout=60)  # fmt: skip
        return json.loads((Path(folder) / "config.json").read_text())


def source_from_image(image: str, cache: Path, log=print, engine: str = "docker") -> Path:  # noqa: ANN001
    """The bundle of a local image of ``engine`` (docker or podman), made once per image ID
    under ``cache``: ``rootfs`` exported from a stopped container of the image, ``config.json``
    from ``runc spec`` with the image's environment and working folder."""
    image_id, env, workdir = image_facts(image, engine)
    target = Path(cache) / f"image-{image_id.split(':')[-1][:16]}"
    if (target / SOURCE_DONE).is_file():
        return target
    Path(cache).mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".dlperf-tmp-", dir=cache))
    try:
        (scratch / "rootfs").mkdir()
        container = _docker("create", "--", image_id, "true", engine=engine).strip()
        try:
            log(f"oci: exporting {image} ({image_id[:19]}) into {target}")
            with subprocess.Popen([engine, "export", container],
                                  stdout=subprocess.PIPE) as export:  # fmt: skip
                untar = subprocess.run(
                    ["tar", "-x", "-C", str(scratch / "rootfs")],
                    stdin=export.stdout, capture_output=True, timeout=EXPORT_TIMEOUT_S,
                )  # fmt: skip
                exported = export.wait(timeout=EXPORT_TIMEOUT_S)
            if exported != 0 or untar.returncode != 0:
                raise OciBundleError(
                    f"{engine} export {image_id[:19]} | tar -x: exit {exported}/{untar.returncode}:"
                    f" {untar.stderr.decode(errors='replace').strip()}"
                )
        finally:
            _docker("rm", "--force", container, engine=engine)
        config = runc_spec()
        process = config.setdefault("process", {})
        process["env"] = env or process.get("env", [])
        process["cwd"] = workdir
        write_json(scratch / "config.json", config)
        write_json(scratch / SOURCE_DONE, {"image": image, "image_id": image_id})
        if target.exists():  # an unfinished earlier attempt
            shutil.rmtree(target, ignore_errors=True)
        os.rename(scratch, target)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return target


def make_session_bundle(
    source: Path, destination: Path, mounts: list[Mount], label: str, what: str, fix: str
) -> Path:
    """``destination``: a bundle of ``source``'s root (hard links, or a copy across file
    systems) with the adjusted ``config.json`` and :data:`MARKER` (holding ``label``). Made
    again from scratch each time (a leftover of a killed run is replaced)."""
    config = read_config(source, what, fix)
    root = bundle_root(source, config, what, fix)
    destination = Path(destination)
    if destination.exists():
        shutil.rmtree(destination, ignore_errors=True)
    destination.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".dlperf-tmp-", dir=destination.parent))
    try:
        linked = subprocess.run(
            ["cp", "-a", "--link", "--", str(root), str(scratch / "rootfs")],
            capture_output=True, text=True,
        )  # fmt: skip
        if linked.returncode != 0:  # another file system: a full copy
            shutil.rmtree(scratch / "rootfs", ignore_errors=True)
            subprocess.run(["cp", "-a", "--", str(root), str(scratch / "rootfs")], check=True,
                           capture_output=True)  # fmt: skip
        write_text(scratch / "rootfs" / MARKER, label + "\n")
        write_json(scratch / "config.json", adjust_config(config, mounts))
        os.rename(scratch, destination)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return destination


WRITABLE = "writable"  # beside rootfs in a session bundle: copies of folders a step writes in


def writable_mounts(bundle: Path, folders: list[str]) -> list[Mount]:
    """Read-write bind mounts, over the read-only root, of copies of ``folders`` (absolute
    paths in the root) kept in ``bundle``/writable (made by :func:`refresh_writable`)."""
    return [Mount(str(Path(bundle) / WRITABLE / str(index)), folder)
            for index, folder in enumerate(folders)]  # fmt: skip


def refresh_writable(bundle: Path, folders: list[str]) -> None:
    """Make each copy of :func:`writable_mounts` afresh from the bundle's root: a real copy,
    never hard links (the root's files are the cached source's, which a write through a link
    would change), so that each repeat starts from the image's files."""
    for mount in writable_mounts(bundle, folders):
        copy, original = Path(mount.source), Path(bundle) / "rootfs" / mount.destination.lstrip("/")
        if not original.is_dir():
            raise OciBundleError(f"{original}: no folder {mount.destination} in the image's root")
        shutil.rmtree(copy, ignore_errors=True)
        copy.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", "--", str(original), str(copy)], check=True,
                       capture_output=True)  # fmt: skip


def slurm_oci_conf(runtime: str = "runc") -> str:
    """An ``oci.conf`` for Slurm 22.05 calling ``runtime`` (runc or crun) as root: one
    container per task, named by node, job, step and task (the runtime's state folder may be
    shared by nodes on one host, as in the kit's test cluster). For the cluster's admin: the
    kit never writes a cluster's configuration."""
    name = "%n.%j.%s.%t"
    return "\n".join([
        "# dlperf: Slurm's OCI containers (srun --container=<bundle>) through " + runtime,
        f'RunTimeQuery="{runtime} state {name}"',
        f'RunTimeKill="{runtime} kill --all {name}"',
        f'RunTimeDelete="{runtime} delete --force {name}"',
        f'RunTimeRun="{runtime} run {name} --bundle %b"',
        "",
    ])  # fmt: skip
