"""The inventory schema: each mistake is one error naming the file, the field, what is allowed."""

from __future__ import annotations

import getpass
import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from driver.cluster.inventory import (
    InventoryError,
    check_container_data_dir,
    load_inventory,
    parse_inventory,
)
from driver.cluster.remote import env_prefix, shell
from driver.frameworks.base import REPO_ROOT
from driver.schema import ConfigError


def parse(data: Any, check_files: bool = False):
    return parse_inventory(data, "inv.yaml", check_files=check_files)


def error_of(data: Any, check_files: bool = False) -> str:
    with pytest.raises(InventoryError) as caught:
        parse(data, check_files)
    return str(caught.value)


def nodes(*entries: dict, **defaults: Any) -> dict:
    return {"defaults": defaults, "nodes": list(entries)}


@pytest.mark.parametrize("name", ["inventory.yaml", "inventory-cpu.yaml", "inventory-4n32g.yaml"])
def test_examples_are_valid(name: str) -> None:
    inventory = load_inventory(REPO_ROOT / "examples" / name, check_files=False)
    assert len(inventory.nodes) >= 2
    assert len({node.name for node in inventory.nodes}) == len(inventory.nodes)


def test_defaults_merge_under_each_node_and_mappings_merge_per_key() -> None:
    inventory = parse(
        nodes(
            {"name": "a", "address": "10.0.0.1"},
            {"name": "b", "address": "10.0.0.2", "interface": "ib1", "ssh": {"port": 2222},
             "container": {"gpus": "device=0,1"}, "env": {"B": 2}},
            ssh={"user": "bench", "port": 22},
            devices=8,
            interface="ib0",
            container={"variant": "gpu", "ulimits": {"memlock": -1}},
            env={"A": "1"},
        )
    )  # fmt: skip
    a, b = inventory.nodes
    assert (a.interface, b.interface) == ("ib0", "ib1")
    assert (a.ssh.user, a.ssh.port, b.ssh.user, b.ssh.port) == ("bench", 22, "bench", 2222)
    assert a.container.gpus == "all" and b.container.gpus == "device=0,1"
    assert b.container.ulimits == {"memlock": "-1"}
    assert b.env == {"A": "1", "B": "2"}
    assert b.collective_env() == {"NCCL_SOCKET_IFNAME": "ib1", "GLOO_SOCKET_IFNAME": "ib1"}
    assert inventory.name == "inv"


@pytest.mark.parametrize(
    ("data", "field", "hint"),
    [
        ({"nodes": [{"address": "h"}], "extra": 1}, "inv.yaml: extra:", "allowed keys: cluster"),
        (nodes({"address": "h", "gpu": 1}), "nodes[0].gpu:", "allowed keys:"),
        (nodes({"address": "h", "container": {"shm": "1g"}}), "nodes[0].container.shm:", "ipc"),
        (nodes({"address": "h", "ssh": {"password": "x"}}), "nodes[0].ssh.password:", "key"),
        (nodes({"name": "x"}), "nodes[0].address:", "missing"),
        (nodes({"address": "h", "ssh": {"port": 0}}), "nodes[0].ssh.port:", "1-65535"),
        (nodes({"address": "h", "devices": 0}), "nodes[0].devices:", ">= 1"),
        (nodes({"address": "h", "devices": True}), "nodes[0].devices:", "integer"),
        (nodes({"address": "h", "container": {"variant": "tpu"}}), "variant:", "cpu, gpu"),
        (nodes({"address": "h", "container": {"ipc": "none"}}), "ipc:", "host, private"),
        (nodes({"address": "h", "container": {"shm_size": "8g"}}), "shm_size:", "ipc: private"),
        (nodes({"address": "h", "container": {"ipc": "private", "shm_size": "lots"}}),
         "shm_size:", "16g"),
        (nodes({"address": "h", "container": {"variant": "cpu", "gpus": "all"}}), "gpus:", "cpu"),
        (nodes({"address": "h", "container": {"gpus": "some"}}), "gpus:", "device="),
        (nodes({"address": "h", "container": {"ulimits": {"files": 1}}}), "files:", "nofile"),
        (nodes({"address": "h", "container": {"ulimits": {"stack": "big"}}}), "stack:", "-1"),
        (nodes({"address": "h", "container": {"mounts": ["d:/d"]}}), "mounts[0]:", "absolute"),
        (nodes({"address": "h", "container": {"mounts": ["/a:/b:rx"]}}), "mounts[0]:", "ro, rw"),
        (nodes({"address": "h", "data_dir": "data"}), "nodes[0].data_dir:", "absolute"),
        (nodes({"address": "h", "interface": "eth 0"}), "interface:", "interface name"),
        (nodes({"address": "h; rm -rf /"}), "nodes[0].address:", "host name or IP"),
        (nodes({"address": "h", "ssh": {"user": "$(id)"}}), "ssh.user:", "user name"),
        (nodes({"address": "h", "env": {"1X": "y"}}), "env.1X:", "variable name"),
        (nodes({"address": "h", "python": {"tensorflw": "/x"}}), "python.tensorflw:", "pytorch"),
        (nodes({"address": "h", "docker_host": "/var/run/docker.sock"}), "docker_host:", "URL"),
        (nodes({"address": "h", "name": "a b"}), "nodes[0].name:", "node name"),
        (nodes({"address": "h", "name": "a"}, {"address": "g", "name": "a"}), "nodes[1].name:",
         "also nodes[0]"),
        (nodes({"address": "h"}, {"address": "h"}), "nodes[1].address:", "list every node once"),
        ({"nodes": []}, "inv.yaml: nodes:", "non-empty"),
        (nodes({"address": "h"}, devices=-1), "inv.yaml: defaults.devices:", ">= 1"),
        ({"defaults": {"address": "h"}, "nodes": [{"address": "h"}]}, "defaults.address:", "keys"),
    ],
)  # fmt: skip
def test_bad_inventories_name_the_field_and_what_is_allowed(
    data: dict, field: str, hint: str
) -> None:
    message = error_of(data)
    assert message.startswith("inv.yaml: ")
    assert field in message and hint in message, message


def test_key_files_must_exist_when_checked(tmp_path: Path) -> None:
    message = error_of(nodes({"address": "h", "ssh": {"key": str(tmp_path / "nope")}}), True)
    assert "nodes[0].ssh.key" in message and "does not exist" in message
    key = tmp_path / "id"
    key.write_text("k")
    inventory = parse(nodes({"address": "h", "ssh": {"key": str(key)}}), True)
    assert inventory.nodes[0].ssh.key == str(key)


def test_a_mapping_or_value_left_empty_takes_the_defaults() -> None:
    empty = {"address": "h", "ssh": {"user": None}, "container": {"image": None}}
    node = parse(nodes(empty, {"address": "g", "ssh": None}, ssh=None)).nodes[0]
    assert node.ssh.user == getpass.getuser() and node.ssh.port == 22
    assert node.container.image == {} and node.container.gpus == "all"
    assert (node.name, node.collective_address) == ("node0", "h")


def test_files_named_in_defaults_are_checked_as_each_node_has_them(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    message = error_of(nodes({"address": "h"}, ssh={"key": missing}), True)
    assert message.startswith("inv.yaml: defaults.ssh.key: ") and "does not exist" in message
    # a node that records new host keys (accept-new) creates the file: it need not exist yet
    accept_new = {"address": "h", "ssh": {"host_key_policy": "accept-new"}}
    inventory = parse(nodes(accept_new, ssh={"known_hosts": missing}), True)
    assert inventory.nodes[0].ssh.known_hosts == missing


def test_file_errors_and_the_cli_reports_it_like_a_matrix_error(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="does not exist"):
        load_inventory(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [\n")
    with pytest.raises(InventoryError, match="not valid YAML"):
        load_inventory(bad)
    assert issubclass(InventoryError, ConfigError)  # `dlperf` prints it as "error: ..." (exit 2)


def test_a_case_needing_more_nodes_than_listed_is_a_clear_error(tmp_path: Path) -> None:
    from driver.runtimes.ssh.runtime import DockerRuntime

    path = tmp_path / "two.yaml"
    path.write_text("nodes: [{address: 10.0.0.1}, {address: 10.0.0.2}]\n")
    runtime = DockerRuntime(path)
    assert runtime.node_addresses(2) == [("node0", "10.0.0.1"), ("node1", "10.0.0.2")]
    with pytest.raises(ValueError, match=r"needs 4 nodes, the inventory lists 2"):
        runtime.node_addresses(4)


HOSTILE = [
    "$(touch /tmp/x)",
    "`id`",
    "a'b",
    'a"b',
    "; rm -rf / #",
    "x\ny",
    "\\",
    "*",
    "",
    "-n",
]


def test_shell_quoting_round_trips_hostile_values_through_a_real_shell() -> None:
    argv = ["printf", "%s\\0", *HOSTILE]
    out = subprocess.run(["sh", "-c", shell(argv)], capture_output=True, check=True).stdout
    assert out.decode().split("\0")[:-1] == HOSTILE
    env = {f"V{i}": value for i, value in enumerate(HOSTILE)}
    program = (
        "import os, json; "
        "print(json.dumps({k: v for k, v in os.environ.items() if k[1:].isdigit()}))"
    )
    command = shell([*env_prefix(env), "python3", "-c", program])
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    assert json.loads(result.stdout) == env
    assert shlex.split(command)[1:3] == [f"V0={HOSTILE[0]}", f"V1={HOSTILE[1]}"]


# --------------------------------------------------------------------------------------------
# SSH host keys (real sshd nodes from tests/cluster_fixtures.py)


def test_an_unknown_host_key_is_refused_naming_the_node_and_the_fix(
    ssh_nodes, inventory_file, tmp_path: Path
) -> None:
    from driver.cluster.remote import NodeUnreachable, Remote, UnknownHostKey

    trusted = load_inventory(inventory_file())  # the fixture's known_hosts has both keys
    assert Remote(trusted.nodes[0]).run("true").ok

    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    strict = load_inventory(inventory_file(name="strict.yaml", per_node={
        1: {"ssh": {"port": ssh_nodes[1].port, "key": str(ssh_nodes[1].key),
                    "known_hosts": str(empty)}},
    }))  # fmt: skip
    with pytest.raises(UnknownHostKey) as caught:
        Remote(strict.nodes[1]).connection()
    message = str(caught.value)
    assert "node node1" in message and f"[127.0.0.3]:{ssh_nodes[1].port}" in message
    assert "ssh-keyscan" in message and "host_key_policy: accept-new" in message
    assert empty.read_text() == ""  # refused means not recorded

    # accept-new: trusted on first use and recorded (the file need not exist yet) ...
    recorded = tmp_path / "new" / "known_hosts"
    tofu = load_inventory(inventory_file(name="tofu.yaml", per_node={
        1: {"ssh": {"port": ssh_nodes[1].port, "key": str(ssh_nodes[1].key),
                    "known_hosts": str(recorded), "host_key_policy": "accept-new"}},
    }))  # fmt: skip
    assert Remote(tofu.nodes[1]).run("true").ok
    assert recorded.read_text() == ssh_nodes[1].host_key_line()
    # ... and a key that changed afterwards is refused, also under accept-new.
    other = tmp_path / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kind, key = Path(f"{other}.pub").read_text().split()[:2]
    recorded.write_text(f"[127.0.0.3]:{ssh_nodes[1].port} {kind} {key}\n")
    with pytest.raises(NodeUnreachable, match="node node1.*host key of .* changed.*ssh-keygen -R"):
        Remote(tofu.nodes[1]).connection()


def test_host_key_policy_is_checked_and_accept_new_defaults_to_the_users_known_hosts() -> None:
    message = error_of(nodes({"address": "h", "ssh": {"host_key_policy": "yes"}}))
    assert "nodes[0].ssh.host_key_policy" in message and "reject, accept-new" in message
    node = parse(nodes({"address": "h", "ssh": {"host_key_policy": "accept-new"}})).nodes[0]
    assert node.ssh.known_hosts == str(Path("~/.ssh/known_hosts").expanduser())
    assert parse(nodes({"address": "h"})).nodes[0].ssh.host_key_policy == "reject"


def test_a_data_dir_no_container_mounts_is_refused(tmp_path: Path) -> None:
    """Under docker the scripts read a case's data_dir inside the node's container: the node's
    data_dir (mounted at the same path) or a mount's target must hold it."""
    path = tmp_path / "inventory.yaml"
    path.write_text(
        "nodes:\n"
        "  - {name: a, address: 10.0.0.1, data_dir: /data}\n"
        "  - {name: b, address: 10.0.0.2, container: {mounts: ['/nfs/imagenet:/data']}}\n"
        "  - {name: c, address: 10.0.0.3, data_dir: /data/imagenet}\n"
    )
    inventory = load_inventory(path, check_files=False)
    for held in ("/data/imagenet", "/data/imagenet/train", "/data/imagenet/"):
        check_container_data_dir(inventory, held)
    for missing, node in (("/data", "c"), ("/datasets/x", "a"), ("/dat", "a")):
        with pytest.raises(InventoryError) as caught:
            check_container_data_dir(inventory, missing)
        message = str(caught.value)
        assert message.startswith(f"{path}: nodes[") and f"node {node} mounts no folder" in message
        assert f"set data_dir: {missing} for the node" in message
