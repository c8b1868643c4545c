"""Images without docker on the login node: podman builds them from the same Dockerfiles, and
the Slurm platforms take them from podman's store.

Real parts: podman's command line (as root here: this machine has no ``newuidmap`` or
``/etc/subuid``, so a rootless build would run with one mapped UID, which apt and pip installs
cannot live with), the Debian base in podman's store (copied from docker's when docker holds
the pinned one, else made by the kit with debootstrap + ``podman import``), enroot 4.1.2's
``enroot import podman://`` (built by .ci/setup-system.sh). apptainer is not installed here: its
lines are rendered, and the podman half of them (``podman save``) runs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.cluster.slurm import SlurmConfig
from driver.core.plan import dry_run_plan
from driver.frontend.cli import main
from driver.images.base import ensure_base, recipe_for
from driver.images.build import BuildOptions, build_images, plan_images
from driver.images.engine import DockerEngine, LockError, PodmanEngine, open_engine
from driver.images.lock import REPO_LOCK, load_lock
from driver.runtimes.containers import apptainer
from driver.runtimes.containers.source_image import SourceImage
from driver.runtimes.slurm.job import Failure
from driver.runtimes.slurm.runtime import SlurmRuntime
from driver.sources.upstream import SPECS
from tests.cluster_fixtures import calibration_case, docker_available
from tests.conftest import require_real
from tests.test_slurm_upstream import plans

# Stored uncompressed: mksquashfs copies instead of compressing (as in test_slurm_pyxis).
SQUASH_OPTIONS = "-noI -noD -noF -noX -no-duplicates"

# An upstream source's image in miniature: its code under /workspace/src (where the real ones
# clone it), a first stage that uses the CA bundle the way the kit's Dockerfiles do (and fails
# if the kit passed CA_BUNDLE without the file), and a final stage that never sees it.
UPSTREAM_LIKE = """\
# dlperf-from BASE_IMAGE=@debian
# dlperf-context train.py
ARG BASE_IMAGE
FROM ${BASE_IMAGE} AS fetch
ARG CA_BUNDLE=
COPY certs/ /tmp/certs/
RUN set -eu; if [ -n "$CA_BUNDLE" ]; then test -s "/tmp/certs/$CA_BUNDLE"; fi; \\
    mkdir -p /workspace/src && echo "${CA_BUNDLE:-none}" > /workspace/src/fetched-with
FROM ${BASE_IMAGE}
COPY --from=fetch /workspace/src /workspace/src
COPY train.py /workspace/src/train.py
WORKDIR /workspace/src
"""


def podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def podman_options(tmp_path_factory: pytest.TempPathFactory) -> BuildOptions:
    """Build options over a copy of images.lock with the Debian base in podman's store: the
    pinned one copied from docker's (same ID) when docker holds it, else the kit's own
    ``dlperf images base --engine podman`` (debootstrap, ~3 min the first time on this
    machine; later runs find the base it made by its recipe label and pin that)."""
    if shutil.which("podman") is None:
        require_real("podman is not installed (.ci/setup-system.sh installs it)")
    lock_path = tmp_path_factory.mktemp("podman-lock") / "images.lock"
    shutil.copy(REPO_LOCK, lock_path)
    lock = load_lock(lock_path)
    engine = PodmanEngine()
    recipe = recipe_for("debian")
    pin = lock.get(recipe.tag)
    if pin and pin.resolved and not engine.image_id(pin.digest) and docker_available() is None:
        if DockerEngine().image_id(pin.digest):
            save = subprocess.Popen(["docker", "save", pin.digest], stdout=subprocess.PIPE)
            subprocess.run(["podman", "load"], stdin=save.stdout, capture_output=True, check=True)
            assert save.wait() == 0
    ca = os.environ.get("DLPERF_CA_BUNDLE")
    options = BuildOptions(
        lock_path=lock_path,
        ca_bundle=Path(ca) if ca else None,
        log=lambda line: print(line, flush=True),
        engine="podman",
    )
    started = time.monotonic()
    ensure_base(lock, recipe, log=options.log, engine=engine)
    print(f"debian base in podman in {time.monotonic() - started:.1f} s", flush=True)
    return options


@pytest.fixture(scope="module")
def podman_cpu_python(podman_options: BuildOptions) -> str:
    """The kit's shared CPU layer built by ``dlperf images build --engine podman`` (pip
    behind this machine's proxy takes DLPERF_CA_BUNDLE, as with docker); an earlier run's
    image of the same inputs is removed first, so that it is built each time (~20 s)."""
    tag = plan_images(["cpu-python"], podman_options)["cpu-python"].tag
    podman("rmi", tag)  # its tag only: the image stays while anything else names it
    argv = ["images", "build", "cpu-python", "--engine", "podman", "--no-base"]
    argv += ["--lock", str(podman_options.lock_path)]
    if podman_options.ca_bundle:
        argv += ["--ca-bundle", str(podman_options.ca_bundle)]
    assert main(argv) == 0
    return tag


def test_the_cli_builds_a_framework_layer_with_podman_and_keeps_the_ca_out(
    podman_cpu_python: str, podman_options: BuildOptions, capsys: pytest.CaptureFixture
) -> None:
    tag = podman_cpu_python
    engine = PodmanEngine()
    built = engine.image_id(tag)
    assert built and built.startswith("sha256:")
    labels = engine.labels(tag)
    assert labels["dlperf.image"] == "cpu-python" and len(labels["dlperf.inputs"]) == 64
    record = json.loads(
        (podman_options.lock_path.parent / ".dlperf" / "images-built.json").read_text()
    )[tag]
    assert record["engine"] == "podman" and record["id"] == built
    if docker_available() is None:  # podman built it, not docker
        assert DockerEngine().image_id(tag) is None
    ran = podman("run", "--rm", tag, "sh", "-c", "ls /tmp/certs; python3 -c 'import pynvml'")
    assert "No such file" in ran.stderr and "ModuleNotFoundError" not in ran.stderr
    # Same inputs: nothing is built again, and `images list` says where it is.
    capsys.readouterr()
    assert main(["images", "build", "cpu-python", "--engine", "podman", "--no-base",
                 "--lock", str(podman_options.lock_path)]) == 0  # fmt: skip
    assert f"{tag} is up to date in podman" in capsys.readouterr().out
    assert main(["images", "list", "--engine", "podman",
                 "--lock", str(podman_options.lock_path)]) == 0  # fmt: skip
    assert f"{tag}   built (podman {built[:19]})" in capsys.readouterr().out


@pytest.fixture(scope="module")
def upstream_like(
    podman_options: BuildOptions, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The upstream-like image (``UPSTREAM_LIKE``) built by the kit with podman, a CA bundle
    passed; removed after the module."""
    from driver.frameworks.base import REPO_ROOT

    root = tmp_path_factory.mktemp("tree")
    (root / "dockerfiles").mkdir()
    for recipe in (REPO_ROOT / "dockerfiles").glob("base-*.yaml"):
        (root / "dockerfiles" / recipe.name).write_text(recipe.read_text())
    (root / "dockerfiles" / "Dockerfile.src-demo").write_text(UPSTREAM_LIKE)
    (root / "dockerfiles" / "train.py").write_text("print('an upstream training script')\n")
    ca = root / "proxy-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nnot checked here\n-----END CERTIFICATE-----\n")
    options = dataclasses.replace(podman_options, root=root, ca_bundle=ca)
    built = build_images(["src-demo"], options)["src-demo"]
    assert built.engine == "podman"
    yield built.tag
    podman("rmi", "--force", built.tag)


def test_an_upstream_like_image_is_built_by_podman_with_the_ca_bundle_handled_the_same_way(
    upstream_like: str,
) -> None:
    ran = podman(
        "run", "--rm", upstream_like, "sh", "-c",
        "cat fetched-with; ls /workspace/src; ls /tmp/certs || true",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split()[:3] == ["extra-ca.crt", "fetched-with", "train.py"]
    assert "No such file" in ran.stderr  # the bundle stayed in the first stage


@pytest.fixture
def pyxis_source(
    upstream_like: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[SlurmRuntime, Path]:
    """A pyxis runtime whose pytorch-examples cases run the upstream-like image (the real
    source's image needs a registry base this machine cannot pull: which tag today's inputs
    give is the one thing stood in), its squashfs kept in ``tmp_path``."""
    image = SourceImage("pytorch-examples", "src-pytorch-examples", upstream_like)
    monkeypatch.setattr(
        SourceImage, "of", classmethod(lambda cls, source, image_choice="pinned": image)
    )
    runtime = SlurmRuntime(config=SlurmConfig(container="pyxis"))
    target = tmp_path / "enroot" / "src-pytorch-examples.sqsh"
    monkeypatch.setattr(type(runtime.platform), "squashfs", lambda self, image: target)
    monkeypatch.delenv("DLPERF_ENGINE", raising=False)
    return runtime, target


def test_the_pyxis_job_imports_the_podman_built_image_from_podman(
    pyxis_source: tuple[SlurmRuntime, Path],
    upstream_like: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rendered job names ``podman://<tag>``; the import itself is enroot's, for real, and
    leaves no container in podman's store (enroot removes its own with ``docker rm``)."""
    if shutil.which("enroot") is None:
        require_real("enroot is not built here (.ci/setup-system.sh builds it)")
    runtime, target = pyxis_source
    plan = plans(runtime, SPECS["pytorch-examples"])[0]
    lines = runtime.describe(plan)
    uri = f"podman://{upstream_like}"
    assert f"$ enroot import --output {target} {uri}" in lines
    assert not any(line.startswith("# refused") for line in lines)
    step = [line for line in lines if line.startswith("$ srun ") and "--label" in line]
    assert f"--container-image={target}" in step[0]
    for key in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(key, str(tmp_path / key.lower()))
    monkeypatch.setenv("ENROOT_SQUASH_OPTIONS", SQUASH_OPTIONS)
    before = podman("ps", "--all", "--format", "{{.Names}}").stdout.split()
    facts = runtime.platform.import_source_image(plan)
    assert facts["engine"] == "podman" and facts["image"] == upstream_like
    listed = subprocess.run(["unsquashfs", "-l", str(target)], capture_output=True, text=True)
    assert "squashfs-root/workspace/src/train.py" in listed.stdout.split()
    after = podman("ps", "--all", "--format", "{{.Names}}").stdout.split()
    assert [name for name in after if name not in before] == []
    # Once per image: the squashfs is there, nothing is asked of any engine again.
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    assert runtime.platform.import_source_image(plan)["squashfs"] == str(target)


def no_engine_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process sees neither podman (not on PATH) nor a docker engine (a socket that is
    not there)."""
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    monkeypatch.delenv("DLPERF_ENGINE", raising=False)


def test_a_login_node_without_docker_or_podman_is_refused_with_the_fixes(
    pyxis_source: tuple[SlurmRuntime, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    runtime, target = pyxis_source
    plan = plans(runtime, SPECS["pytorch-examples"])[0]
    no_engine_here(tmp_path, monkeypatch)
    fixes = r"install podman .*--engine podman`, or start dockerd; or build the image where"
    with pytest.raises(LockError, match=rf"neither a docker engine .* nor podman .*; {fixes}"):
        open_engine()
    with pytest.raises(LockError, match=r"podman is not installed here; install podman"):
        open_engine("podman")
    assert main(["images", "build", "cpu-python", "--no-base"]) == 1
    assert "nor podman is on this host; install podman" in capsys.readouterr().err
    refusal = runtime.refused(plan, submitting=True)
    assert refusal.startswith(f"{plan.case_id}: source pytorch-examples runs its own image")
    assert "neither a docker engine nor podman (engine: auto); install podman" in refusal
    assert "name it in slurm.image.pytorch-examples" in refusal
    lines = runtime.describe(plan)  # a dry run shows the line, and what the run will say
    assert f"# refused when run: {refusal}" in lines
    with pytest.raises(Failure, match="nor podman is on this host"):
        runtime.platform.import_source_image(plan)
    # A squashfs made earlier, or the image named in the cluster file: no engine is needed.
    named = SlurmRuntime(
        config=SlurmConfig(container="pyxis", image={"pytorch-examples": "reg.example#s/p:1"})
    )
    assert named.refused(plan, submitting=True) == ""
    target.parent.mkdir(parents=True)
    target.write_text("made before")
    assert runtime.refused(plan, submitting=True) == ""


def test_an_unknown_engine_is_refused_naming_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLPERF_ENGINE", "buildah")
    with pytest.raises(LockError, match=r"engine 'buildah' \(--engine or \$DLPERF_ENGINE\): "
                       r"choose one of auto, docker, podman"):  # fmt: skip
        open_engine()


def test_apptainer_under_slurm_takes_a_podman_image_from_its_archive(
    podman_cpu_python: str,
    podman_options: BuildOptions,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """apptainer is not installed here: the rendered lines are checked, and the kit's own run
    of them gets as far as podman's archive (made, then removed when apptainer is missing)."""
    monkeypatch.setenv("DLPERF_IMAGES_LOCK", str(podman_options.lock_path))
    monkeypatch.setattr(apptainer, "CACHE", tmp_path / "sif")
    monkeypatch.delenv("DLPERF_ENGINE", raising=False)
    if docker_available() is None and DockerEngine().image_id(podman_cpu_python):
        pytest.skip(f"docker holds {podman_cpu_python} too: docker-daemon:// would be used")
    runtime = SlurmRuntime(config=SlurmConfig(container="apptainer"))
    plan = dry_run_plan(calibration_case("1n2g"), runtime, 8)
    sif = tmp_path / "sif" / f"{podman_cpu_python.split('/')[-1].replace(':', '-')}.sif"
    archive = sif.with_name(f".{sif.name}.tar")
    lines = runtime.describe(plan)
    save = f"$ podman save --format docker-archive --output {archive} {podman_cpu_python}"
    build = f"$ apptainer build --force {sif} docker-archive://{archive}"
    assert lines[lines.index(save) + 1] == build
    if shutil.which("apptainer"):
        pytest.skip("apptainer is installed here: its real build belongs to another test")
    with pytest.raises(Failure, match=rf"apptainer could not build {podman_cpu_python}: .*"
                       r"apptainer"):  # fmt: skip
        runtime.platform.prepare(plan, None)  # type: ignore[arg-type]
    assert not archive.exists() and not sif.exists()
    assert sorted(p.name for p in (tmp_path / "sif").iterdir()) == []


def test_slurms_oci_bundle_is_made_from_the_podman_image(
    upstream_like: str, tmp_path: Path
) -> None:
    """Slurm's OCI containers: the bundle's root exported from a podman container of the image
    (``podman create`` + ``podman export``), its config from ``runc spec`` with the image's
    working folder; the export container is removed."""
    from driver.images import oci

    if not (shutil.which("runc") or Path("/usr/sbin/runc").exists()):
        require_real("runc is not installed (apt-get install runc)")
    before = podman("ps", "--all", "--format", "{{.Names}}").stdout.split()
    bundle = oci.source_from_image(upstream_like, tmp_path / "oci", print, "podman")
    assert (bundle / "rootfs" / "workspace" / "src" / "train.py").is_file()
    assert not (bundle / "rootfs" / "tmp" / "certs").exists()
    config = json.loads((bundle / "config.json").read_text())
    assert config["process"]["cwd"] == "/workspace/src"
    assert bundle.name == f"image-{PodmanEngine().image_id(upstream_like)[7:23]}"
    assert podman("ps", "--all", "--format", "{{.Names}}").stdout.split() == before


# -- rootless ------------------------------------------------------------------------------------
ROOTLESS_UID = 61234  # no passwd entry, no /etc/subuid range: podman maps this one UID alone
# What the unprivileged user runs: the kit's build of the upstream-like image, then the import
# pyxis makes of it (the same export helpers, enroot with the kit's `docker` script first).
ROOTLESS_SCRIPT = """\
import json, sys
from pathlib import Path
from driver.images import export
from driver.images.build import BuildOptions, build_images
from driver.images.engine import enroot_uri
home = Path(sys.argv[1])
options = BuildOptions(lock_path=home / "images.lock", root=home / "tree", engine="podman",
                       log=lambda line: print(line, file=sys.stderr))
built = build_images(["src-demo"], options)["src-demo"]
target = home / "src-demo.sqsh"
uri = enroot_uri(built.engine, built.tag)
with export.enroot_environment(built.engine) as env:
    export.make_file(target, lambda to: ["enroot", "import", "--output", str(to), uri], env=env)
print(json.dumps({"tag": built.tag, "id": built.id, "engine": built.engine, "uri": uri}))
"""


def as_user(home: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``argv`` as ROOTLESS_UID, its home and podman's configuration in ``home``."""
    environment = {
        "HOME": str(home), "XDG_RUNTIME_DIR": str(home / "run"),
        "XDG_CONFIG_HOME": str(home / "config"), "PATH": "/usr/local/bin:/usr/bin:/bin", **env,
    }  # fmt: skip
    return subprocess.run(
        ["setpriv", f"--reuid={ROOTLESS_UID}", f"--regid={ROOTLESS_UID}", "--clear-groups",
         "env", "-i", *(f"{k}={v}" for k, v in environment.items()), *argv],
        capture_output=True, text=True, timeout=600, cwd=home,
    )  # fmt: skip


@pytest.mark.skipif(
    not os.environ.get("DLPERF_SLOW_TESTS"),
    reason="~1 min and ~1 GB of vfs layers; set DLPERF_SLOW_TESTS=1",
)
def test_a_rootless_user_builds_and_imports_the_upstream_like_image(
    podman_options: BuildOptions,
) -> None:
    """podman rootless for real, as a UID that is not root: the kit's build (its Python is the
    kit's own packages on Debian's python3 of the same version: the kit's interpreter lives
    under /root), then ``enroot import podman://`` as that user, exit 0, nothing left."""
    import sys

    from driver.frameworks.base import REPO_ROOT

    site = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    python = Path(f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}")
    for tool in ("setpriv", "enroot"):
        if shutil.which(tool) is None:
            require_real(f"{tool} is not installed here")
    if not python.is_file():
        require_real(f"no {python} to run the kit's packages as another user")
    # pytest's folders are root's alone (0700): the user's home is one of its own in /var/tmp
    home = Path(tempfile.mkdtemp(prefix="dlperf-rootless-", dir="/var/tmp"))
    (home / "config" / "containers").mkdir(parents=True)
    # One mapped UID: files of other owners in an image (Debian's shadow group) cannot be
    # chowned; vfs storage may ignore that (overlay would need fuse-overlayfs, absent here).
    (home / "config" / "containers" / "storage.conf").write_text(
        '[storage]\ndriver = "vfs"\n[storage.options.vfs]\nignore_chown_errors = "true"\n'
    )
    (home / "tree" / "dockerfiles").mkdir(parents=True)
    for recipe in (REPO_ROOT / "dockerfiles").glob("base-*.yaml"):
        (home / "tree" / "dockerfiles" / recipe.name).write_text(recipe.read_text())
    (home / "tree" / "dockerfiles" / "Dockerfile.src-demo").write_text(UPSTREAM_LIKE)
    (home / "tree" / "dockerfiles" / "train.py").write_text("print('rootless')\n")
    shutil.copy(podman_options.lock_path, home / "images.lock")
    base = load_lock(home / "images.lock").get(recipe_for("debian").tag)
    assert base is not None
    podman("save", "--output", str(home / "base.tar"), base.digest)
    (home / "script.py").write_text(ROOTLESS_SCRIPT)
    subprocess.run(["chown", "-R", f"{ROOTLESS_UID}:{ROOTLESS_UID}", str(home)], check=True)
    try:
        info = as_user(home, "podman", "info", "--format", "{{.Host.Security.Rootless}}")
        assert info.stdout.strip() == "true", info.stderr[-1000:]
        loaded = as_user(home, "podman", "load", "--input", str(home / "base.tar"))
        assert loaded.returncode == 0, loaded.stderr[-1000:]
        started = time.monotonic()
        done = as_user(
            home, str(python), str(home / "script.py"), str(home),
            PYTHONPATH=f"{REPO_ROOT}:{site / 'site-packages'}",
            ENROOT_DATA_PATH=str(home / "enroot-data"),  # not XDG_DATA_HOME: podman's store
            ENROOT_CACHE_PATH=str(home / "enroot-cache"),
            ENROOT_RUNTIME_PATH=str(home / "enroot-run"),
            ENROOT_SQUASH_OPTIONS=SQUASH_OPTIONS,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-1000:] + done.stderr[-3000:]
        print(f"rootless build and import: {time.monotonic() - started:.1f} s")
        facts = json.loads(done.stdout.splitlines()[-1])
        assert facts["engine"] == "podman" and facts["uri"] == f"podman://{facts['tag']}"
        held = as_user(home, "podman", "image", "inspect", "--format", "{{.Id}}", facts["tag"])
        assert f"sha256:{held.stdout.strip()}" == facts["id"]
        assert PodmanEngine().image_id(facts["tag"]) is None  # in that user's store, not root's
        listed = subprocess.run(["unsquashfs", "-l", str(home / "src-demo.sqsh")],
                                capture_output=True, text=True)  # fmt: skip
        assert "squashfs-root/workspace/src/train.py" in listed.stdout.split()
        left = as_user(home, "podman", "ps", "--all", "--format", "{{.Names}}")
        assert left.returncode == 0 and left.stdout.split() == []
    finally:
        # vfs layers are plain folders owned by that user: root removes them
        shutil.rmtree(home, ignore_errors=True)
