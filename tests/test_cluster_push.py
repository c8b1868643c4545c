"""``dlperf images push`` and pre-flight against a node with a docker engine of its own.

node1's inventory entry points its docker client at a second, empty engine started here
(``docker_host``), so it really lacks the image: pre-flight says so, ``images push`` streams the
image over SSH (``docker save | ssh node docker load``), and a repeat then runs on two engines.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.cluster.inventory import load_inventory
from driver.cluster.preflight import failures
from driver.core.runner import run_cases
from driver.frontend.cli import main
from driver.images.push import push_images
from driver.model.results import Session
from driver.runtimes.ssh.runtime import DockerRuntime
from tests.cluster_fixtures import calibration_case, quiet, require_real


@pytest.fixture(scope="module")
def second_engine(docker_engine: None) -> Iterator[str]:
    """A second dockerd with its own image store; yields its DOCKER_HOST."""
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        require_real("no dockerd binary to start a second engine (apt-get install docker.io)")
    root = Path(tempfile.mkdtemp(prefix="dlperf-engine-", dir="/tmp"))  # short socket paths
    host = f"unix://{root}/docker.sock"
    log = (root / "dockerd.log").open("w")
    argv = [str(dockerd), "-H", host, "--data-root", str(root / "data")]
    argv += ["--exec-root", str(root / "exec"), "--pidfile", str(root / "docker.pid")]
    # A bridge of its own, not --bridge=none: a dockerd told "none" deletes the host's docker0
    # as it starts (the first engine's bridge, whose containers then fail to start: exit 125).
    bridge = f"dlpbr{os.getpid() % 100000}"
    first_bridge = Path("/sys/class/net/docker0").exists()
    subprocess.run(["ip", "link", "del", bridge], capture_output=True)  # a killed run's
    for step in (["add", bridge, "type", "bridge"], ["set", bridge, "up"]):
        subprocess.run(["ip", "link", *step], check=True, capture_output=True)
    subprocess.run(
        ["ip", "addr", "add", f"10.213.{os.getpid() % 250}.1/24", "dev", bridge],
        check=True, capture_output=True,
    )  # fmt: skip
    argv += [f"--bridge={bridge}", "--iptables=false", "--ip-masq=false", "--ip-forward=false"]
    # Sharing the running containerd (in a namespace of its own) lets this engine stop in a
    # blink; a containerd of its own would take ~20 s to shut down.
    for sock in ("/var/run/docker/containerd/containerd.sock", "/run/containerd/containerd.sock"):
        if Path(sock).exists():
            argv += ["--containerd", sock, "--containerd-namespace", "dlperf-test"]
            argv += ["--containerd-plugins-namespace", "dlperf-test-plugins"]
            break
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(
            ["docker", "-H", host, "info"], capture_output=True
        ).returncode:  # fmt: skip
            if process.poll() is not None or time.monotonic() > deadline:
                require_real(
                    f"a second dockerd did not start: {(root / 'dockerd.log').read_text()[-500:]}"
                )
            time.sleep(0.2)
        # The first engine keeps its bridge (its containers on the default network need it).
        assert Path("/sys/class/net/docker0").exists() or not first_bridge
        yield host
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
        # dockerd leaves its default network namespace mounted; the data folder goes with it.
        subprocess.run(["umount", str(root / "exec" / "netns" / "default")], capture_output=True)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)
        # Deleting the engine's layers takes seconds on a busy disk: let it finish on its own.
        subprocess.Popen(["rm", "-rf", str(root)], start_new_session=True)


def test_push_copies_only_where_missing_then_a_repeat_runs_on_both_engines(
    inventory_file,
    second_engine: str,
    cpu_python_image: str,
    image_options,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.setenv("DLPERF_IMAGES_LOCK", str(image_options.lock_path))
    path = inventory_file(per_node={1: {"docker_host": second_engine}})
    runtime = DockerRuntime(path, build_options=image_options)
    checks, _ = runtime.preflight(runtime.remotes, "calibration")
    [missing] = failures(checks)
    assert (missing.node, missing.name) == ("node1", "image")
    assert "dlperf images push" in missing.detail

    code = main(["images", "push", "cpu-python", "--inventory", str(path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "node0: dlperf/cpu-python" in out and "present" in out
    assert "node1: dlperf/cpu-python" in out and "copied" in out
    checks, _ = runtime.preflight(runtime.remotes, "calibration")
    assert not failures(checks)
    again = push_images(load_inventory(path), [("x", cpu_python_image, None)], log=quiet)
    assert [r.action for r in again] == ["present", "present"]

    case = calibration_case("2n4g")
    session = Session.open(tmp_path / "s")
    summary = run_cases(
        [case], session, DockerRuntime(path, build_options=image_options), printer=quiet
    )
    assert summary.ok
    ran = subprocess.run(
        ["docker", "-H", second_engine, "ps", "-a", "--format", "{{.Names}}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert ran.strip() == ""  # node1's container ran there and was removed


def test_preflight_command_reports_each_node_and_check(
    inventory_file,
    cpu_python_image: str,
    image_options,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.setenv("DLPERF_IMAGES_LOCK", str(image_options.lock_path))
    good = inventory_file()
    assert main(["preflight", "--inventory", str(good), "--framework", "calibration"]) == 0
    out = capsys.readouterr().out
    for check in ("ssh", "docker", "image", "devices", "disk"):
        assert f"node1        {check}" in out
    assert "all nodes ready" in out
    bad = inventory_file(
        name="bad.yaml",
        per_node={
            0: {"devices": 512},
            1: {"ssh": {"port": 9, "key": str(Path(tmp_path))}, "container": {"variant": "cpu"}},
        },
    )
    assert main(["preflight", "--inventory", str(bad), "--framework", "calibration"]) == 2
    assert "ssh.key" in capsys.readouterr().err  # a folder is not a key file: caught on load
    key = inventory_file(name="k.yaml").parent / "k"
    key.write_text("not a key")
    bad = inventory_file(
        name="bad2.yaml", per_node={0: {"devices": 512}, 1: {"ssh": {"port": 9, "key": str(key)}}}
    )
    assert main(["preflight", "--inventory", str(bad), "--framework", "calibration"]) == 1
    out = capsys.readouterr().out
    # The calibration workload's ranks sleep: 512 per node is a rehearsal, not a failure (a
    # real framework's oversubscription fails: tests/test_preflight.py).
    assert "node0        devices  ok" in out and "512 rank(s) per node need no device" in out
    assert "node1        ssh      FAIL" in out and "failed check(s)" in out
