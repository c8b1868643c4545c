"""The cluster inventory: every node listed once, validated like the case matrix.

File shape (see ``examples/inventory.yaml`` and ``docs/clusters.md``)::

    cluster: lab-a                     # a name, recorded in the run's provenance
    defaults:                          # merged under every node (mappings merge key by key)
      ssh: {user: bench, port: 22, key: ~/.ssh/id_ed25519}
      devices: 8                       # GPUs per node (CPU: training processes per node)
      interface: ib0                   # NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME
      data_dir: /data                  # mounted at the same path in containers
      scratch_dir: /scratch/dlperf     # code, per-repeat logs, pid files on the node
      container: {variant: gpu, gpus: all, shm_size: 16g, ulimits: {memlock: -1}}
    nodes:
      - {name: gpu01, address: 10.0.0.11}
      - {name: gpu02, address: 10.0.0.12, interface: ib1}

Any problem is one :class:`InventoryError` naming the file, the field and what is allowed. It
derives from :class:`~driver.core.matrix.MatrixError` so the CLI reports both the same way.
"""

from __future__ import annotations

import getpass
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from driver.core.matrix import MatrixError


class InventoryError(MatrixError):
    """A bad inventory: ``<file>: <field>: <what is wrong and what is allowed>``."""

    def __init__(self, path: Path | str, field_path: str, message: str) -> None:
        super().__init__(path, field_path, message)
        self.message = message


VARIANTS = ("cpu", "gpu")
ULIMITS = (
    "core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice", "nofile", "nproc",
    "rss", "rtprio", "rttime", "sigpending", "stack",
)  # fmt: skip
TOP_KEYS = {"cluster", "defaults", "nodes"}
NODE_KEYS = {
    "name", "address", "collective_address", "ssh", "devices", "interface", "data_dir",
    "scratch_dir", "min_free_gb", "python", "docker_host", "env", "container",
}  # fmt: skip
DEFAULT_KEYS = NODE_KEYS - {"name", "address", "collective_address"}
SSH_KEYS = {"user", "port", "key", "connect_timeout", "known_hosts"}
CONTAINER_KEYS = {"variant", "image", "gpus", "ipc", "shm_size", "memory", "ulimits", "mounts"}
IPC_MODES = ("host", "private", "shareable")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")  # also a docker-name-safe fragment
_HOST = re.compile(r"^[A-Za-z0-9_.:%\[\]-]+$")  # DNS name, IPv4, IPv6 (bracketed or not)
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\$?$")
_IFNAME = re.compile(r"^[\^=]?[A-Za-z0-9_.:@-]+(,[A-Za-z0-9_.:@-]+)*$")
_SIZE = re.compile(r"^[0-9]+(\.[0-9]+)?[bkmgBKMG]?$")
_GPUS = re.compile(r"^(all|[1-9][0-9]*|device=[A-Za-z0-9,-]+)$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DOCKER_HOST = re.compile(r"^(unix|tcp|ssh|fd|npipe)://\S+$")


@dataclass(frozen=True)
class SshSettings:
    user: str
    port: int = 22
    key: str | None = None  # a private key file on the head node; None: agent / ~/.ssh keys
    connect_timeout: float = 10.0
    known_hosts: str | None = None  # set: host keys are checked against it (RejectPolicy)


@dataclass(frozen=True)
class ContainerSettings:
    variant: str = "gpu"  # which image of a framework: <framework>-cpu or <framework>-gpu
    image: dict[str, str] = field(default_factory=dict)  # framework -> image ref, overrides
    gpus: str | None = None  # docker run --gpus value; gpu variant default "all"
    ipc: str = "host"  # the processes of a node share memory (NCCL, data loaders)
    shm_size: str | None = None  # only with a private ipc namespace: host ipc has host /dev/shm
    memory: str | None = None  # docker run --memory (a cap; exceeding it is an OOM verdict)
    ulimits: dict[str, str] = field(default_factory=dict)  # name -> "soft[:hard]"
    mounts: tuple[str, ...] = ()  # "source:target[:ro|rw]"


@dataclass(frozen=True)
class Node:
    index: int
    name: str
    address: str  # SSH address
    collective_address: str  # where other nodes reach this one (MASTER_ADDR for node 0)
    ssh: SshSettings
    devices: int = 1
    interface: str | None = None
    data_dir: str | None = None
    scratch_dir: str = "/var/tmp/dlperf"
    min_free_gb: float = 5.0
    python: dict[str, str] = field(default_factory=lambda: {"default": "python3"})
    docker_host: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    container: ContainerSettings = field(default_factory=ContainerSettings)

    def python_for(self, framework: str) -> str:
        return self.python.get(framework) or self.python.get("default") or "python3"

    def collective_env(self) -> dict[str, str]:
        """The interface collectives bind to, for every library that reads one."""
        if not self.interface:
            return {}
        return {"NCCL_SOCKET_IFNAME": self.interface, "GLOO_SOCKET_IFNAME": self.interface}

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "address": self.address,
            "collective_address": self.collective_address,
            "user": self.ssh.user,
            "port": self.ssh.port,
            "devices": self.devices,
            "interface": self.interface,
            "variant": self.container.variant,
        }


@dataclass(frozen=True)
class Inventory:
    path: Path
    name: str
    nodes: tuple[Node, ...]

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)


def _fail(path: Path, where: str, message: str) -> InventoryError:
    return InventoryError(path, where, message)


def _check_keys(path: Path, where: str, data: dict, allowed: set[str]) -> None:
    for key in data:
        if key not in allowed:
            raise _fail(
                path,
                f"{where}.{key}" if where else str(key),
                f"unknown key; allowed keys: {', '.join(sorted(allowed))}",
            )


def _mapping(path: Path, where: str, value: Any) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(path, where, f"must be a mapping, got {type(value).__name__}")
    return value


def _string(path: Path, where: str, value: Any, pattern: re.Pattern | None, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise _fail(path, where, f"must be {what}, got {value!r}")
    text = str(value)
    if not text or (pattern is not None and not pattern.match(text)):
        raise _fail(path, where, f"must be {what}, got {value!r}")
    return text


def _number(path: Path, where: str, value: Any, minimum: float, integer: bool) -> Any:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value < minimum:
        kind = "an integer" if integer else "a number"
        raise _fail(path, where, f"must be {kind} >= {minimum:g}, got {value!r}")
    return value


def _absolute(path: Path, where: str, value: Any) -> str:
    if not isinstance(value, str) or not value.startswith("/") or "\x00" in value:
        raise _fail(path, where, f"must be an absolute path on the node, got {value!r}")
    return value


def _local_file(path: Path, where: str, value: Any, check_files: bool) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(path, where, f"must be a file path on the head node, got {value!r}")
    expanded = Path(value).expanduser()
    if not expanded.is_absolute():
        expanded = (path.parent / expanded).resolve()
    if check_files and not expanded.is_file():
        raise _fail(path, where, f"{str(expanded)!r} does not exist")
    return str(expanded)


def _merge(defaults: dict, node: dict) -> dict:
    """Node values over the defaults; ssh, container and env merge key by key."""
    merged = dict(defaults)
    for key, value in node.items():
        if key in ("ssh", "container", "env") and isinstance(value, dict):
            base = merged.get(key)
            merged[key] = {**(base if isinstance(base, dict) else {}), **value}
        else:
            merged[key] = value
    return merged


def _ssh(path: Path, where: str, data: Any, check_files: bool) -> SshSettings:
    data = _mapping(path, where, data)
    _check_keys(path, where, data, SSH_KEYS)
    user = data.get("user") or getpass.getuser()
    return SshSettings(
        user=_string(path, f"{where}.user", user, _USER, "a user name"),
        port=_port(path, f"{where}.port", data.get("port", 22)),
        key=(
            _local_file(path, f"{where}.key", data["key"], check_files)
            if data.get("key") is not None
            else None
        ),
        connect_timeout=float(
            _number(path, f"{where}.connect_timeout", data.get("connect_timeout", 10), 1, False)
        ),
        known_hosts=(
            _local_file(path, f"{where}.known_hosts", data["known_hosts"], check_files)
            if data.get("known_hosts") is not None
            else None
        ),
    )


def _port(path: Path, where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise _fail(path, where, f"must be a port number 1-65535, got {value!r}")
    return value


def _by_framework(path: Path, where: str, value: Any, what: str) -> dict[str, str]:
    """A single value for every framework, or a mapping framework -> value (+ "default")."""
    from driver.plugins import load_all
    from driver.registry import FRAMEWORKS

    if isinstance(value, str) and value:
        return {"default": value}
    mapping = _mapping(path, where, value)
    load_all()
    allowed = ["default", *FRAMEWORKS.names()]
    out = {}
    for key, item in mapping.items():
        if key not in allowed:
            raise _fail(
                path, f"{where}.{key}", f"unknown framework; allowed keys: {', '.join(allowed)}"
            )
        if not isinstance(item, str) or not item:
            raise _fail(path, f"{where}.{key}", f"must be {what}, got {item!r}")
        out[str(key)] = item
    return out


def _container(path: Path, where: str, data: Any) -> ContainerSettings:
    data = _mapping(path, where, data)
    _check_keys(path, where, data, CONTAINER_KEYS)
    variant = data.get("variant", "gpu")
    if variant not in VARIANTS:
        raise _fail(
            path, f"{where}.variant", f"{variant!r} is not allowed; allowed values: cpu, gpu"
        )
    gpus = data.get("gpus", "all" if variant == "gpu" else None)
    if gpus is not None:
        gpus = _string(path, f"{where}.gpus", gpus, _GPUS, "all, a count or device=<ids>")
    if variant == "cpu" and gpus is not None:
        raise _fail(path, f"{where}.gpus", "a cpu variant container gets no GPUs; remove gpus")
    ipc = data.get("ipc", "host")
    if ipc not in IPC_MODES:
        raise _fail(
            path, f"{where}.ipc", f"{ipc!r} is not allowed; allowed values: {', '.join(IPC_MODES)}"
        )
    if ipc == "host" and data.get("shm_size") is not None:
        raise _fail(
            path,
            f"{where}.shm_size",
            "has no effect with ipc: host (the host's /dev/shm is used); set ipc: private",
        )
    ulimits = {}
    for name, limit in _mapping(path, f"{where}.ulimits", data.get("ulimits")).items():
        if name not in ULIMITS:
            raise _fail(
                path,
                f"{where}.ulimits.{name}",
                f"unknown ulimit; allowed names: {', '.join(ULIMITS)}",
            )
        ulimits[name] = _ulimit(path, f"{where}.ulimits.{name}", limit)
    mounts = data.get("mounts") or []
    if not isinstance(mounts, list):
        raise _fail(path, f"{where}.mounts", "must be a list of 'source:target[:ro|rw]'")
    return ContainerSettings(
        variant=variant,
        image=(
            _by_framework(path, f"{where}.image", data["image"], "an image reference")
            if data.get("image") is not None
            else {}
        ),
        gpus=gpus,
        ipc=ipc,
        shm_size=_size(path, f"{where}.shm_size", data.get("shm_size")),
        memory=_size(path, f"{where}.memory", data.get("memory")),
        ulimits=ulimits,
        mounts=tuple(_mount(path, f"{where}.mounts[{i}]", m) for i, m in enumerate(mounts)),
    )


def _size(path: Path, where: str, value: Any) -> str | None:
    if value is None:
        return None
    return _string(path, where, value, _SIZE, "a size such as 512m or 16g")


def _ulimit(path: Path, where: str, value: Any) -> str:
    parts = str(value).split(":") if isinstance(value, str) else [value]
    if len(parts) > 2:
        raise _fail(path, where, f"must be a limit or 'soft:hard', got {value!r}")
    for part in parts:
        text = str(part)
        if isinstance(part, bool) or not re.match(r"^-?[0-9]+$", text) or int(text) < -1:
            raise _fail(path, where, f"must be an integer >= -1 (-1: unlimited), got {value!r}")
    return ":".join(str(p) for p in parts)


def _mount(path: Path, where: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _fail(path, where, f"must be 'source:target[:ro|rw]', got {value!r}")
    parts = value.split(":")
    if len(parts) not in (2, 3) or not all(p.startswith("/") for p in parts[:2]):
        raise _fail(path, where, f"must be 'source:target[:ro|rw]' with absolute paths: {value!r}")
    if len(parts) == 3 and parts[2] not in ("ro", "rw"):
        raise _fail(path, where, f"mode {parts[2]!r} is not allowed; allowed values: ro, rw")
    return value


def _env(path: Path, where: str, data: Any) -> dict[str, str]:
    out = {}
    for key, value in _mapping(path, where, data).items():
        if not isinstance(key, str) or not _ENV.match(key):
            raise _fail(path, f"{where}.{key}", "is not a valid environment variable name")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise _fail(path, f"{where}.{key}", f"must be a string or number, got {value!r}")
        out[key] = str(value)
    return out


def _node(path: Path, index: int, data: dict, check_files: bool) -> Node:
    where = f"nodes[{index}]"
    name = _string(path, f"{where}.name", data.get("name", f"node{index}"), _NAME, "a node name")
    if "address" not in data:
        raise _fail(path, f"{where}.address", "missing; give the node's SSH host name or IP")
    address = _string(path, f"{where}.address", data["address"], _HOST, "a host name or IP")
    collective = data.get("collective_address", address)
    return Node(
        index=index,
        name=name,
        address=address,
        collective_address=_string(
            path, f"{where}.collective_address", collective, _HOST, "a host name or IP"
        ),
        ssh=_ssh(path, f"{where}.ssh", data.get("ssh"), check_files),
        devices=_number(path, f"{where}.devices", data.get("devices", 1), 1, True),
        interface=(
            _string(path, f"{where}.interface", data["interface"], _IFNAME, "an interface name")
            if data.get("interface") is not None
            else None
        ),
        data_dir=(
            _absolute(path, f"{where}.data_dir", data["data_dir"])
            if data.get("data_dir") is not None
            else None
        ),
        scratch_dir=_absolute(
            path, f"{where}.scratch_dir", data.get("scratch_dir", "/var/tmp/dlperf")
        ),
        min_free_gb=float(
            _number(path, f"{where}.min_free_gb", data.get("min_free_gb", 5), 0, False)
        ),
        python=_by_framework(
            path, f"{where}.python", data.get("python", "python3"), "an interpreter path"
        ),
        docker_host=(
            _string(path, f"{where}.docker_host", data["docker_host"], _DOCKER_HOST, "a URL")
            if data.get("docker_host") is not None
            else None
        ),
        env=_env(path, f"{where}.env", data.get("env")),
        container=_container(path, f"{where}.container", data.get("container")),
    )


def parse_inventory(data: Any, path: Path | str, *, check_files: bool = True) -> Inventory:
    path = Path(path)
    if not isinstance(data, dict):
        raise _fail(path, "(file)", "must be a mapping with keys: nodes (and cluster, defaults)")
    _check_keys(path, "", data, TOP_KEYS)
    defaults = _mapping(path, "defaults", data.get("defaults"))
    _check_keys(path, "defaults", defaults, DEFAULT_KEYS)
    nodes_data = data.get("nodes")
    if not isinstance(nodes_data, list) or not nodes_data:
        raise _fail(path, "nodes", "must be a non-empty list of nodes")
    nodes: list[Node] = []
    for index, entry in enumerate(nodes_data):
        if not isinstance(entry, dict):
            raise _fail(path, f"nodes[{index}]", "each node must be a mapping")
        _check_keys(path, f"nodes[{index}]", entry, NODE_KEYS)
        try:
            nodes.append(_node(path, index, _merge(defaults, entry), check_files))
        except InventoryError as error:
            # A bad value that came from `defaults` is reported where it was written.
            key = error.field_path.split(".")[1] if "." in error.field_path else ""
            if key and key not in entry and key in defaults:
                field_path = "defaults." + error.field_path.split(".", 1)[1]
                raise _fail(path, field_path, error.message) from None
            raise
    seen: dict[str, int] = {}
    endpoints: dict[tuple, int] = {}
    for node in nodes:
        if node.name in seen:
            raise _fail(
                path, f"nodes[{node.index}].name", f"{node.name!r} is also nodes[{seen[node.name]}]"
            )
        seen[node.name] = node.index
        endpoint = (node.address, node.ssh.port, node.docker_host)
        if endpoint in endpoints:
            raise _fail(
                path,
                f"nodes[{node.index}].address",
                f"{node.address}:{node.ssh.port} is already nodes[{endpoints[endpoint]}]; "
                "list every node once",
            )
        endpoints[endpoint] = node.index
    name = data.get("cluster", path.stem)
    return Inventory(
        path=path,
        name=_string(path, "cluster", name, _NAME, "a cluster name"),
        nodes=tuple(nodes),
    )


def load_inventory(path: Path | str, *, check_files: bool = True) -> Inventory:
    """Read and validate an inventory file; ``check_files``: SSH key files must exist."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise _fail(path, "(file)", "does not exist") from None
    except yaml.YAMLError as error:
        raise _fail(path, "(file)", f"is not valid YAML: {error}") from None
    return parse_inventory(data, path, check_files=check_files)
