"""podman over SSH on real parts: sshd nodes on loopback, Fabric, the podman engine.

The second real container platform: the same two-node scenario every SSH platform passes,
picked by the inventory's ``container: podman``, with the node's podman client making,
starting, inspecting and removing each node's container, and nothing of the session left.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from driver.runtimes.base import make_runtime, session_label
from tests.cluster_fixtures import require_real, two_nodes_two_repeats

pytestmark = pytest.mark.usefixtures("docker_engine")


@pytest.fixture(scope="session")
def podman_image(cpu_python_image: str) -> str:
    """The CPU image in podman's store (``docker save | podman load`` once), by podman's ID."""
    if shutil.which("podman") is None:
        require_real("podman is not installed (.ci/setup-system.sh installs it)")
    image = cpu_python_image.removeprefix("sha256:")
    if subprocess.run(["podman", "image", "exists", image]).returncode != 0:
        save = subprocess.Popen(["docker", "save", cpu_python_image], stdout=subprocess.PIPE)
        subprocess.run(["podman", "load"], stdin=save.stdout, capture_output=True, check=True)
        assert save.wait() == 0
    return image


def test_podman_runs_two_nodes_and_leaves_no_container(
    inventory_file, podman_image: str, image_options, tmp_path: Path
) -> None:
    path = inventory_file()
    data = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({"container": "podman", **data}, sort_keys=False))
    runtime = make_runtime("ssh", inventory=path, build_options=image_options)
    assert runtime.platform.name == "podman"
    session, record = two_nodes_two_repeats(runtime, tmp_path / "s")
    for node in ("node0", "node1"):
        facts = record["extra"]["nodes"][node]
        assert facts["exit_code"] == 0 and facts["image_id"] == podman_image
        assert facts["container_seconds"] > 0  # podman's own start and finish times
        provenance = record["extra"]["provenance"][node]
        assert provenance["image_id"] == podman_image  # as podman gives it
    checks = yaml.safe_load((session.root / "provenance" / "node0.json").read_text())["preflight"]
    assert [check["name"] for check in checks][:3] == ["ssh", "podman", "image"]
    label = f"label=dlperf.session={session_label(session.root)}"
    left = subprocess.run(["podman", "ps", "-aq", "--filter", label], capture_output=True)
    assert left.returncode == 0 and left.stdout.split() == []
