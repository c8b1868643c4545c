"""Every image reference the kit hands enroot (through pyxis's --container-image, or its own
``enroot import dockerd://`` or ``podman://``), parsed by enroot's own code of 3.5.0 and of
4.1.2: the ``src/common.sh`` and ``src/docker.sh`` of each release, kept by
.ci/setup-system.sh from the pinned, sha256-checked tarballs.

The parsing is enroot's: ``docker::import`` (``docker::daemon::import`` for ``dockerd://``) runs
unchanged; the harness below only replaces what it calls after parsing (the tool check, the
temporary folder, the ``cd`` into it) so that it prints the fields it parsed and stops before
anything is downloaded or imported.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from driver.images.engine import enroot_uri
from driver.images.lock import load_lock
from driver.images.registry import DOCKER_HUB, parse_reference
from driver.runtimes.containers.pyxis import enroot_reference
from tests.conftest import require_github_build
from tests.slurm_fixtures import ENROOT_SOURCES, ENROOT_VERSION

RELEASES = ("3.5.0", ENROOT_VERSION)

# Shell options as enroot's own entry script sets them (lastpipe: `... | { read ...; }` fills
# the function's variables); then its libraries; then the stops after parsing.
HARNESS = r"""
set -eo pipefail
shopt -s lastpipe
src=$1 ref=$2 scratch=$3
export ENROOT_LIBRARY_PATH=$src ENROOT_CACHE_PATH=$scratch ENROOT_CONFIG_PATH=$scratch
export ENROOT_TEMP_PATH=$scratch
source "$src/common.sh"
source "$src/docker.sh"
common::checkcmd() { :; }
common::mktmpdir() { printf '%s\n' "$ENROOT_TEMP_PATH/unused"; }
common::chdir() {
    printf 'user=%s\nregistry=%s\nimage=%s\ntag=%s\n' "${user-}" "${registry-}" "${image-}" \
        "${tag-}"
    exit 0
}
docker() { :; }  # the import's exit trap removes a container it never made
cd "$scratch"
case "$ref" in
docker://*) docker::import "$ref" "" "" ;;
*) docker::daemon::import "$ref" "" "" ;;
esac
"""


def enroot_parse(release: str, uri: str, scratch: Path) -> dict[str, str]:
    """The fields enroot ``release`` parses from ``uri``; AssertionError with enroot's own
    message when it refuses the reference."""
    src = ENROOT_SOURCES / f"enroot-{release}" / "src"
    if not (src / "docker.sh").is_file():
        require_github_build(f"enroot {release}'s sources are not in {src} (.ci/setup-system.sh)")
    done = subprocess.run(["bash", "-c", HARNESS, "harness", str(src), uri, str(scratch)],
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(f"enroot {release}: {(done.stderr or done.stdout).strip()}")
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


def registry_pins() -> list[str]:
    return sorted(ref for ref, pin in load_lock().pins.items() if pin.source == "registry")


def source_imports() -> list[str]:
    """The ``dockerd://`` and ``podman://`` references the kit imports an upstream source's
    built image by (from docker's store or podman's, whichever holds it)."""
    from driver.plugins import load
    from driver.runtimes.containers.source_image import SourceImage
    from driver.sources.base import SOURCES

    load("sources")  # every source registers itself

    refs = set()
    for name in SOURCES.names():
        if not getattr(SOURCES.get(name)(), "image", None):
            continue
        for choice in ("pinned", "current"):
            try:
                image = SourceImage.of(name, choice)
            except Exception:  # noqa: BLE001 - a source without that image
                continue
            if image.tag:  # one whose base is unresolved is never built, never imported
                refs |= {enroot_uri(engine, image.tag) for engine in ("docker", "podman")}
    return sorted(refs)


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("ref", registry_pins())
def test_every_pinned_base_parses_as_the_kit_renders_it(
    ref: str, release: str, tmp_path: Path
) -> None:
    """The framework images' bases (images.lock) in the form pyxis is given: enroot reads the
    registry, repository and tag the pin names (Docker Hub: enroot 3.x leaves the registry to
    its default, 4.x names it)."""
    rendered = enroot_reference(ref)
    assert "@" not in rendered
    parsed = enroot_parse(release, f"docker://{rendered}", tmp_path)
    wanted = parse_reference(ref)
    assert parsed["tag"] == wanted.tag
    if wanted.registry == DOCKER_HUB:
        assert parsed["registry"] in ("", DOCKER_HUB)
        assert parsed["image"] in (wanted.repository, wanted.repository.removeprefix("library/"))
    else:
        assert (parsed["registry"], parsed["image"]) == (wanted.registry, wanted.repository)


@pytest.mark.parametrize("release", RELEASES)
def test_the_pyxis_platform_renders_the_tag_form(release: str, tmp_path: Path) -> None:
    """What the pyxis platform puts after --container-image for PyTorch (its pin resolved)."""
    from driver.cluster.slurm import SlurmConfig
    from driver.runtimes.slurm.runtime import SlurmRuntime

    platform = SlurmRuntime(config=SlurmConfig(container="pyxis")).platform
    image = platform.image_for("pytorch")  # type: ignore[call-arg]
    assert image == "nvcr.io#nvidia/pytorch:25.04-py3"
    parsed = enroot_parse(release, f"docker://{image}", tmp_path)
    assert parsed == {"user": "", "registry": "nvcr.io", "image": "nvidia/pytorch",
                      "tag": "25.04-py3"}  # fmt: skip


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("ref", source_imports())
def test_source_image_imports_parse(ref: str, release: str, tmp_path: Path) -> None:
    parsed = enroot_parse(release, ref, tmp_path)
    assert parsed["image"] == ref.split("://", 1)[1]


def test_the_digest_form_is_what_enroot_3_refuses(tmp_path: Path) -> None:
    """Why the kit renders no digest: the form it rendered before is refused by 3.5.0 and
    read by 4.1.2 (which takes the digest for the tag)."""
    digest = load_lock().pins["nvcr.io/nvidia/pytorch:25.04-py3"].digest
    uri = f"docker://nvcr.io#nvidia/pytorch@{digest}"
    with pytest.raises(AssertionError, match=r"enroot 3\.5\.0: \[ERROR\] Invalid image reference"):
        enroot_parse("3.5.0", uri, tmp_path)
    assert enroot_parse(ENROOT_VERSION, uri, tmp_path)["tag"] == digest
