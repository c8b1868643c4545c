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
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from driver.cluster.slurm import RankEnvironment, SlurmConfig
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
_DOCKER_HOST = r"(?:unix|tcp|ssh|fd|npipe)://[^\s\x00-\x1f\x7f]{1,1024}"
_ABSOLUTE = r"/[^\x00-\x1f\x7f]{0,4095}"  # no newline, NUL or other control character
_FILE = r"[^\x00-\x1f\x7f-][^\x00-\x1f\x7f]{0,4095}"
_COMMAND = r"[^\x00-\x1f\x7f\s-][^\x00-\x1f\x7f]{0,4095}"  # an interpreter; never "-..."
_IMAGE = r"/?[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}"


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


def _local_file(value: str, info: ValidationInfo, must_exist: bool) -> str:
    """A file on the head node, relative to the inventory's folder; ``must_exist`` unless the
    reader asked for no file checks (``check_files``)."""
    inventory = Path(info.context["path"])
    expanded = Path(value).expanduser()
    if not expanded.is_absolute():
        expanded = (inventory.parent / expanded).resolve()
    if must_exist and info.context["check_files"] and not expanded.is_file():
        raise ValueError(f"{str(expanded)!r} does not exist")
    return str(expanded)


class SshSettings(StrictModel):
    user: text(_USER, "a user name") | None = Field(None, validate_default=True)  # None: mine
    port: number(1, 65535, "a port number 1-65535") = 22
    key: LocalFile | None = None  # a private key file on the head node; None: agent / ~/.ssh keys
    connect_timeout: number(1, 3600, "a number of seconds 1-3600", integer=False) = 10
    # Host keys: the user's and the system's known_hosts plus this file are trusted; an unknown
    # host is refused ("reject", OpenSSH's default) or recorded into this file ("accept-new").
    host_key_policy: Annotated[str, one_of(*HOST_KEY_POLICIES)] = "reject"
    known_hosts: LocalFile | None = Field(None, validate_default=True)

    @field_validator("user")
    @classmethod
    def _default_user(cls, value: str | None) -> str:
        return value or getpass.getuser()

    @field_validator("key")
    @classmethod
    def _key_file(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _local_file(value, info, must_exist=True) if value else None

    @field_validator("known_hosts")
    @classmethod
    def _known_hosts_file(cls, value: str | None, info: ValidationInfo) -> str | None:
        accept_new = info.data.get("host_key_policy") == "accept-new"
        if value is None and accept_new:
            value = DEFAULT_KNOWN_HOSTS  # where OpenSSH records new hosts
        # accept-new writes the file (it may not exist yet); reject reads it, so it must exist
        return _local_file(value, info, must_exist=not accept_new) if value else None


class ContainerSettings(StrictModel):
    variant: Annotated[Any, one_of(*VARIANTS)] = "gpu"  # which image: <framework>-cpu or -gpu
    image: _by_framework("an image reference", _IMAGE) = {}  # framework -> image ref, overrides
    # docker run --gpus value; the gpu variant's default "all"
    gpus: text(_GPUS, "all, a count or device=<ids>", numbers=True) | None = None
    ipc: Annotated[Any, one_of(*IPC_MODES)] = "host"  # a node's processes share memory (NCCL)
    shm_size: Size | None = None  # only with a private ipc namespace: host ipc has host /dev/shm
    memory: Size | None = None  # docker run --memory (a cap; exceeding it is an OOM verdict)
    ulimits: dict[Annotated[Any, one_of(*ULIMITS)], Annotated[Any, AfterValidator(_ulimit)]] = {}
    mounts: list[Annotated[Any, AfterValidator(_mount)]] = []  # "source:target[:ro|rw]"

    @model_validator(mode="before")
    @classmethod
    def _gpu_variant_gets_all_gpus(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("variant", "gpu") == "gpu" and "gpus" not in data:
            return {**data, "gpus": "all"}
        return data

    @field_validator("image", mode="before")
    @classmethod
    def _no_image_is_none(cls, value: Any) -> Any:
        return {} if value is None else value  # "image:" left empty

    @field_validator("gpus")
    @classmethod
    def _no_gpus_for_cpu(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("variant") == "cpu":
            raise ValueError("a cpu variant container gets no GPUs; remove gpus")
        return value

    @field_validator("shm_size")
    @classmethod
    def _shm_size_needs_private_ipc(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("ipc") == "host":
            raise ValueError(
                "has no effect with ipc: host (the host's /dev/shm is used); set ipc: private"
            )
        return value


class NodeDefaults(StrictModel):
    """What ``defaults:`` may set: everything of a node but its name and addresses."""

    ssh: SshSettings = SshSettings()
    devices: number(1, MAX_NODE_DEVICES, f"an integer >= 1, at most {MAX_NODE_DEVICES}") = 1
    interface: text(_IFNAMES, "an interface name (e.g. eth0, ib0, ^docker,lo)") | None = None
    data_dir: AbsolutePath | None = None
    scratch_dir: AbsolutePath = "/var/tmp/dlperf"  # code, per-repeat logs, pid files
    min_free_gb: number(0, 1e6, "a number >= 0 (GB)", integer=False) = 5
    python: _by_framework("an interpreter path", _COMMAND) = {"default": "python3"}
    docker_host: text(_DOCKER_HOST, "a URL such as unix:///var/run/docker.sock") | None = None
    env: RankEnvironment = {}
    container: ContainerSettings = ContainerSettings()

    @field_validator("ssh", mode="before")
    @classmethod
    def _no_ssh_is_none(cls, value: Any) -> Any:
        return {} if value is None else value  # "ssh:" left empty: every default


class Node(NodeDefaults):
    """A node as the inventory lists it, its defaults merged in; validated with the context
    ``path``, ``check_files`` and ``index`` (its place in ``nodes``, which names it by default)."""

    name: NodeName = Field(None, validate_default=True)
    address: Host  # SSH address
    # where other nodes reach this one (MASTER_ADDR for node 0); default: the address
    collective_address: Host = Field(None, validate_default=True)

    @field_validator("name", mode="wrap")
    @classmethod
    def _default_name(cls, value: Any, handler: Any, info: ValidationInfo) -> str:
        return handler(value) if value is not None else f"node{info.context['index']}"

    @field_validator("collective_address", mode="wrap")
    @classmethod
    def _default_collective_address(cls, value: Any, handler: Any, info: ValidationInfo) -> str:
        return handler(value) if value is not None else info.data.get("address")

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


class InventoryFile(StrictModel):
    cluster: NodeName | None = None
    # The container platform over SSH (driver/runtimes/containers/ checks the name).
    container: text(r"[a-z][a-z0-9-]{0,31}", "a container platform's name") | None = None
    defaults: NodeDefaults | None = None
    nodes: Annotated[list[dict[str, Any]], Field(min_length=1)]
    # One cluster file can serve the SSH runtimes and Slurm: its section is checked here too.
    slurm: SlurmConfig | None = None


@dataclass(frozen=True)
class Inventory:
    path: Path
    name: str
    nodes: tuple[Node, ...]
    container: str | None = None  # the top-level ``container:`` (None: the runtime's)


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


def parse_inventory(data: Any, path: Path | str, *, check_files: bool = True) -> Inventory:
    path = Path(path)
    context = {"path": path, "check_files": check_files}
    try:  # files named in defaults are checked as each node has them (merged, below)
        parsed = validate(InventoryFile, data, path, {**context, "check_files": False})
    except ConfigError as error:
        raise InventoryError(error.path, error.field_path, error.message) from None
    defaults_data = data.get("defaults") or {}
    nodes: list[Node] = []
    for index, entry in enumerate(parsed.nodes):
        try:
            node = validate(Node, _merge(defaults_data, entry), path, {**context, "index": index})
        except ConfigError as error:
            # A bad value that came from `defaults` is reported where it was written.
            key = error.field_path.split(".")[0].split("[")[0]
            if key and key not in entry and key in defaults_data:
                where = f"defaults.{error.field_path}"
            else:
                where = f"nodes[{index}].{error.field_path}"
            raise InventoryError(path, where, error.message) from None
        nodes.append(node)
    seen: dict[str, int] = {}
    endpoints: dict[tuple, int] = {}
    for index, node in enumerate(nodes):
        if node.name in seen:
            raise InventoryError(
                path, f"nodes[{index}].name", f"{node.name!r} is also nodes[{seen[node.name]}]"
            )
        seen[node.name] = index
        endpoint = (node.address, node.ssh.port, node.docker_host)
        if endpoint in endpoints:
            raise InventoryError(
                path,
                f"nodes[{index}].address",
                f"{node.address}:{node.ssh.port} is already nodes[{endpoints[endpoint]}]; "
                "list every node once",
            )
        endpoints[endpoint] = index
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


def inside_folder(folder: str, parent: str) -> bool:
    """Whether the path ``folder`` is ``parent`` or lies under it (as text, no I/O)."""
    folder, parent = folder.rstrip("/") or "/", parent.rstrip("/") or "/"
    return folder == parent or folder.startswith(parent if parent == "/" else parent + "/")


def check_container_data_dir(inventory: Inventory, data_dir: str) -> None:
    """A case's ``data_dir`` is read inside every node's container at its own path: the node's
    ``data_dir`` (mounted at the same path) or a ``container.mounts`` target must hold it,
    else the script would find no data in the container. An :class:`InventoryError` naming
    the first node that lacks it and the fix."""
    for index, node in enumerate(inventory.nodes):
        targets = [m.split(":")[1] for m in node.container.mounts]
        if node.data_dir and inside_folder(data_dir, node.data_dir):
            continue
        if any(inside_folder(data_dir, target) for target in targets):
            continue
        raise InventoryError(
            inventory.path,
            f"nodes[{index}].data_dir",
            f"node {node.name} mounts no folder that holds the cases' data_dir {data_dir!r} "
            f"into its containers (its data_dir: {node.data_dir or 'none'}; mounts: "
            f"{', '.join(node.container.mounts) or 'none'}); set data_dir: {data_dir} for the "
            "node (mounted read-only at the same path), or add a container mount for it",
        )
