"""The cluster inventory: every node listed once, validated like the case matrix.

File shape (see ``examples/inventory.yaml`` and ``docs/clusters.md``)::

    cluster: lab-a                     # a name, recorded in the run's provenance
    container: docker                  # what every node command runs in (--runtime ssh):
                                       # none, docker, podman or apptainer
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
is a :class:`~driver.schema.ConfigError`, so the CLI reports it like every bad config file.
"""

from __future__ import annotations

import getpass
import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

from driver.cluster.slurm import SlurmConfig
from driver.schema import ConfigError, StrictModel, load_document, number, one_of, text, validate


class InventoryError(ConfigError):
    """A bad inventory: ``<file>: <field>: <what is wrong and what is allowed>``."""


VARIANTS = ("cpu", "gpu")
ULIMITS = (
    "core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice", "nofile", "nproc",
    "rss", "rtprio", "rttime", "sigpending", "stack",
)  # fmt: skip
IPC_MODES = ("host", "private", "shareable")
MAX_NODE_DEVICES = 4096  # processes a node may list (a case runs at most 64 per node)
HOST_KEY_POLICIES = ("reject", "accept-new")
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"

# Full-match patterns (re.fullmatch): "$" would also accept a value ending in a newline.
_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}"  # also a docker-name-safe fragment
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME = rf"{_LABEL}(?:\.{_LABEL})*\.?"
_USER = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\$?"
_IFNAME = r"[A-Za-z0-9_.:@][A-Za-z0-9_.:@-]{0,30}"
_IFNAMES = rf"[\^=]?{_IFNAME}(?:,{_IFNAME})*"
_SIZE = r"[0-9]{1,12}(?:\.[0-9]{1,6})?[bkmgBKMG]?"
_GPUS = r"all|[1-9][0-9]{0,2}|device=[A-Za-z0-9-]{1,64}(?:,[A-Za-z0-9-]{1,64})*"
_ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
_DOCKER_HOST = r"(?:unix|tcp|ssh|fd|npipe)://[^\s\x00-\x1f\x7f]{1,1024}"
_ABSOLUTE = r"/[^\x00-\x1f\x7f]{0,4095}"  # no newline, NUL or other control character
_FILE = r"[^\x00-\x1f\x7f-][^\x00-\x1f\x7f]{0,4095}"
_COMMAND = r"[^\x00-\x1f\x7f\s-][^\x00-\x1f\x7f]{0,4095}"  # an interpreter; never "-..."
_IMAGE = r"/?[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}"
_VALUE = r"[^\x00-\x08\x0a-\x1f\x7f]{0,65536}"  # an env value: any text on one line


def _host(value: Any) -> str:
    """An IPv4/IPv6 address or a DNS host name; never an option ("-oProxyCommand=...")."""
    what = "a host name or IP (IPv4, IPv6, or a DNS name; not starting with '-')"
    if not isinstance(value, str) or not value or len(value) > 253:
        raise ValueError(f"must be {what}, got {value!r}")
    bare = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    try:
        ipaddress.ip_address(bare)
        return value
    except ValueError:
        pass
    if re.fullmatch(r"[0-9.]+", value) or ":" in value:  # looks like an address, is not one
        raise ValueError(f"must be {what}; {value!r} is not a valid IP address")
    if re.fullmatch(_HOSTNAME, value) is None:
        raise ValueError(f"must be {what}, got {value!r}")
    return value


Host = Annotated[Any, AfterValidator(_host)]
NodeName = text(_NAME, "a node name (letters, digits, _ . -; at most 63)")
LocalFile = text(_FILE, "a file path on the head node")
AbsolutePath = text(_ABSOLUTE, "an absolute path on the node (one line)")
Size = text(_SIZE, "a size such as 512m or 16g", numbers=True)


def _ulimit(value: Any) -> str:
    parts = value.split(":") if isinstance(value, str) else [value]
    ok = len(parts) <= 2 and all(
        (type(p) is int and p >= -1) or (isinstance(p, str) and re.fullmatch(r"-1|[0-9]{1,19}", p))
        for p in parts
    )
    if not ok:
        raise ValueError(f"must be an integer >= -1 (-1: unlimited) or 'soft:hard', got {value!r}")
    return ":".join(str(p) for p in parts)


def _mount(value: Any) -> str:
    parts = value.split(":") if isinstance(value, str) else []
    if len(parts) not in (2, 3) or not all(re.fullmatch(_ABSOLUTE, p) for p in parts[:2]):
        raise ValueError(f"must be 'source:target[:ro|rw]' with absolute paths, got {value!r}")
    if len(parts) == 3 and parts[2] not in ("ro", "rw"):
        raise ValueError(f"mode {parts[2]!r} is not allowed; allowed values: ro, rw")
    return value


def _env_value(value: Any) -> str:
    if type(value) in (int, float):
        return str(value)
    if not isinstance(value, str) or re.fullmatch(_VALUE, value) is None:
        raise ValueError(f"must be a string (one line) or a number, got {value!r}")
    return value


def _framework_key(key: Any) -> str:
    from driver.frameworks.base import FRAMEWORKS
    from driver.plugins import load

    load("frameworks")
    return one_of("default", *FRAMEWORKS.names()).func(key)


def _by_framework(what: str, pattern: str) -> Any:
    """One value for every framework, or a mapping framework (or "default") -> value."""
    return Annotated[
        dict[Annotated[Any, AfterValidator(_framework_key)], text(pattern, what)],
        BeforeValidator(lambda value: {"default": value} if isinstance(value, str) else value),
    ]


class SshSpec(StrictModel):
    user: text(_USER, "a user name") | None = None
    port: number(1, 65535, "a port number 1-65535") = 22
    key: LocalFile | None = None
    connect_timeout: number(1, 3600, "a number of seconds 1-3600", integer=False) = 10
    known_hosts: LocalFile | None = None
    host_key_policy: Annotated[str, one_of(*HOST_KEY_POLICIES)] = "reject"


class ContainerSpec(StrictModel):
    variant: Annotated[Any, one_of(*VARIANTS)] = "gpu"
    image: _by_framework("an image reference", _IMAGE) | None = None
    gpus: text(_GPUS, "all, a count or device=<ids>", numbers=True) | None = None
    ipc: Annotated[Any, one_of(*IPC_MODES)] = "host"
    shm_size: Size | None = None
    memory: Size | None = None
    ulimits: dict[Annotated[Any, one_of(*ULIMITS)], Annotated[Any, AfterValidator(_ulimit)]] = {}
    mounts: list[Annotated[Any, AfterValidator(_mount)]] = []


class NodeDefaults(StrictModel):
    """What ``defaults:`` may set: everything of a node but its name and addresses."""

    ssh: SshSpec | None = None
    devices: number(1, MAX_NODE_DEVICES, f"an integer >= 1, at most {MAX_NODE_DEVICES}") = 1
    interface: text(_IFNAMES, "an interface name (e.g. eth0, ib0, ^docker,lo)") | None = None
    data_dir: AbsolutePath | None = None
    scratch_dir: AbsolutePath = "/var/tmp/dlperf"
    min_free_gb: number(0, 1e6, "a number >= 0 (GB)", integer=False) = 5
    python: _by_framework("an interpreter path", _COMMAND) = {"default": "python3"}
    docker_host: text(_DOCKER_HOST, "a URL such as unix:///var/run/docker.sock") | None = None
    env: dict[
        text(_ENV_NAME, "a valid environment variable name"),
        Annotated[Any, AfterValidator(_env_value)],
    ] = {}
    container: ContainerSpec = ContainerSpec()


class NodeSpec(NodeDefaults):
    name: NodeName | None = None
    address: Host
    collective_address: Host | None = None


class InventoryFile(StrictModel):
    cluster: NodeName | None = None
    # The container platform over SSH (driver/runtimes/containers/ checks the name).
    container: text(r"[a-z][a-z0-9-]{0,31}", "a container platform's name") | None = None
    defaults: NodeDefaults | None = None
    nodes: Annotated[list[dict[str, Any]], Field(min_length=1)]
    # One cluster file can serve the SSH runtimes and Slurm: its section is checked here too.
    slurm: SlurmConfig | None = None


@dataclass(frozen=True)
class SshSettings:
    user: str
    port: int = 22
    key: str | None = None  # a private key file on the head node; None: agent / ~/.ssh keys
    connect_timeout: float = 10.0
    # Host keys: the user's and the system's known_hosts plus this file are trusted; an unknown
    # host is refused ("reject", OpenSSH's default) or recorded into this file ("accept-new").
    known_hosts: str | None = None
    host_key_policy: str = "reject"


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
    container: str | None = None  # the top-level ``container:`` (None: the runtime's)

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)


def _local_file(path: Path, where: str, value: str, must_exist: bool) -> str:
    expanded = Path(value).expanduser()
    if not expanded.is_absolute():
        expanded = (path.parent / expanded).resolve()
    if must_exist and not expanded.is_file():
        raise InventoryError(path, where, f"{str(expanded)!r} does not exist")
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


def _ssh(path: Path, where: str, spec: SshSpec | None, check_files: bool) -> SshSettings:
    spec = spec or SshSpec()
    accept_new = spec.host_key_policy == "accept-new"
    known_hosts = spec.known_hosts
    if known_hosts is None and accept_new:
        known_hosts = DEFAULT_KNOWN_HOSTS  # where OpenSSH records new hosts
    return SshSettings(
        user=spec.user or getpass.getuser(),
        port=spec.port,
        key=_local_file(path, f"{where}.key", spec.key, check_files) if spec.key else None,
        connect_timeout=float(spec.connect_timeout),
        # accept-new writes the file (it may not exist yet); reject reads it, so it must exist
        known_hosts=(
            _local_file(path, f"{where}.known_hosts", known_hosts, check_files and not accept_new)
            if known_hosts
            else None
        ),
        host_key_policy=spec.host_key_policy,
    )


def _container(path: Path, where: str, spec: ContainerSpec) -> ContainerSettings:
    gpus = spec.gpus if spec.gpus is not None else ("all" if spec.variant == "gpu" else None)
    if spec.variant == "cpu" and gpus is not None:
        raise InventoryError(
            path, f"{where}.gpus", "a cpu variant container gets no GPUs; remove gpus"
        )
    if spec.ipc == "host" and spec.shm_size is not None:
        raise InventoryError(
            path,
            f"{where}.shm_size",
            "has no effect with ipc: host (the host's /dev/shm is used); set ipc: private",
        )
    return ContainerSettings(
        variant=spec.variant,
        image=dict(spec.image or {}),
        gpus=gpus,
        ipc=spec.ipc,
        shm_size=spec.shm_size,
        memory=spec.memory,
        ulimits=dict(spec.ulimits),
        mounts=tuple(spec.mounts),
    )


def _node(path: Path, index: int, spec: NodeSpec, check_files: bool) -> Node:
    where = f"nodes[{index}]"
    return Node(
        index=index,
        name=spec.name or f"node{index}",
        address=spec.address,
        collective_address=spec.collective_address or spec.address,
        ssh=_ssh(path, f"{where}.ssh", spec.ssh, check_files),
        devices=spec.devices,
        interface=spec.interface,
        data_dir=spec.data_dir,
        scratch_dir=spec.scratch_dir,
        min_free_gb=float(spec.min_free_gb),
        python=dict(spec.python),
        docker_host=spec.docker_host,
        env=dict(spec.env),
        container=_container(path, f"{where}.container", spec.container),
    )


def parse_inventory(data: Any, path: Path | str, *, check_files: bool = True) -> Inventory:
    path = Path(path)
    try:
        parsed = validate(InventoryFile, data, path)
    except ConfigError as error:
        raise InventoryError(error.path, error.field_path, error.message) from None
    defaults_data = data.get("defaults") or {}
    nodes: list[Node] = []
    for index, entry in enumerate(parsed.nodes):
        try:
            spec = validate(NodeSpec, _merge(defaults_data, entry), path)
        except ConfigError as error:
            # A bad value that came from `defaults` is reported where it was written.
            key = error.field_path.split(".")[0].split("[")[0]
            if key and key not in entry and key in defaults_data:
                where = f"defaults.{error.field_path}"
            else:
                where = f"nodes[{index}].{error.field_path}"
            raise InventoryError(path, where, error.message) from None
        nodes.append(_node(path, index, spec, check_files))
    seen: dict[str, int] = {}
    endpoints: dict[tuple, int] = {}
    for node in nodes:
        if node.name in seen:
            raise InventoryError(
                path, f"nodes[{node.index}].name", f"{node.name!r} is also nodes[{seen[node.name]}]"
            )
        seen[node.name] = node.index
        endpoint = (node.address, node.ssh.port, node.docker_host)
        if endpoint in endpoints:
            raise InventoryError(
                path,
                f"nodes[{node.index}].address",
                f"{node.address}:{node.ssh.port} is already nodes[{endpoints[endpoint]}]; "
                "list every node once",
            )
        endpoints[endpoint] = node.index
    name = parsed.cluster or path.stem
    if re.fullmatch(_NAME, name) is None:
        raise InventoryError(
            path, "cluster", f"the file name {name!r} is no cluster name; set cluster: <name>"
        )
    return Inventory(path=path, name=name, nodes=tuple(nodes), container=parsed.container)


def load_inventory(path: Path | str, *, check_files: bool = True) -> Inventory:
    """Read and validate an inventory file; ``check_files``: SSH key files must exist."""
    path = Path(path)
    try:
        data = load_document(path)
    except ConfigError as error:
        raise InventoryError(error.path, error.field_path, error.message) from None
    return parse_inventory(data, path, check_files=check_files)


def _inside(folder: str, parent: str) -> bool:
    folder, parent = folder.rstrip("/") or "/", parent.rstrip("/") or "/"
    return folder == parent or folder.startswith(parent if parent == "/" else parent + "/")


def check_container_data_dir(inventory: Inventory, data_dir: str) -> None:
    """A case's ``data_dir`` is read inside every node's container at its own path: the node's
    ``data_dir`` (mounted at the same path) or a ``container.mounts`` target must hold it,
    else the script would find no data in the container. An :class:`InventoryError` naming
    the first node that lacks it and the fix."""
    for node in inventory.nodes:
        targets = [m.split(":")[1] for m in node.container.mounts]
        if node.data_dir and _inside(data_dir, node.data_dir):
            continue
        if any(_inside(data_dir, target) for target in targets):
            continue
        raise InventoryError(
            inventory.path,
            f"nodes[{node.index}].data_dir",
            f"node {node.name} mounts no folder that holds the cases' data_dir {data_dir!r} "
            f"into its containers (its data_dir: {node.data_dir or 'none'}; mounts: "
            f"{', '.join(node.container.mounts) or 'none'}); set data_dir: {data_dir} for the "
            "node (mounted read-only at the same path), or add a container mount for it",
        )
