"""The Debian base images, made without a registry: debootstrap a rootfs, ``docker import`` it
(or ``podman import``: the engine of :mod:`driver.images.engine`).

Each recipe ``dockerfiles/base-<name>.yaml`` is a base that Dockerfiles name as ``@<name>``
(``@debian``: bookworm; ``@debian-bullseye``: Debian 11, for wheels that stop at Python 3.9/3.10).
A recipe names the suite, variant, mirror and packages; the image is tagged
``dlperf/debian:<suite>-<hash of the recipe>`` and its image ID is pinned in ``images.lock``.
A machine that already holds the pinned image does nothing; one that does not (a fresh CI
runner) makes a new base and re-pins it, saying so: the package versions a mirror serves move
with Debian point releases, so a base is pinned, not reproduced.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from driver.files import sha256_bytes
from driver.frameworks.base import REPO_ROOT
from driver.images.engine import DockerEngine
from driver.images.lock import Lock, LockError, Pin

if TYPE_CHECKING:
    from driver.images.engine import Engine

RECIPE_PREFIX = "base-"
DEFAULT_BASE = "debian"
REPOSITORY = "dlperf/debian"
RECIPE_KEYS = {"suite", "variant", "mirror", "components", "include"}

Log = Callable[[str], None]


def base_recipes(root: Path = REPO_ROOT) -> dict[str, Path]:
    """Base name -> recipe file, from ``dockerfiles/base-<name>.yaml``."""
    return {
        path.stem.removeprefix(RECIPE_PREFIX): path
        for path in sorted((root / "dockerfiles").glob(f"{RECIPE_PREFIX}*.yaml"))
    }


def recipe_for(name: str, root: Path = REPO_ROOT) -> BaseRecipe:
    recipes = base_recipes(root)
    if name not in recipes:
        raise LockError(
            f"no Debian base {name!r}: no dockerfiles/{RECIPE_PREFIX}{name}.yaml; known bases: "
            f"{', '.join(sorted(recipes)) or 'none'}"
        )
    return load_recipe(recipes[name])


@dataclass(frozen=True)
class BaseRecipe:
    path: Path  # the recipe file; not part of the digest (a renamed recipe is the same base)
    suite: str
    variant: str
    mirror: str
    components: tuple[str, ...]
    include: tuple[str, ...]

    @property
    def digest(self) -> str:
        text = json.dumps(
            {
                "suite": self.suite,
                "variant": self.variant,
                "mirror": self.mirror,
                "components": sorted(self.components),
                "include": sorted(self.include),
            },
            sort_keys=True,
        )
        return sha256_bytes(text.encode())

    @property
    def tag(self) -> str:
        return f"{REPOSITORY}:{self.suite}-{self.digest[:12]}"


def load_recipe(path: Path) -> BaseRecipe:
    data = yaml.safe_load(path.read_text()) or {}
    unknown = set(data) - RECIPE_KEYS
    missing = {"suite", "mirror"} - set(data)
    if unknown or missing:
        raise LockError(
            f"{path}: unknown keys {sorted(unknown)} / missing {sorted(missing)}; "
            f"allowed keys: {', '.join(sorted(RECIPE_KEYS))}"
        )
    return BaseRecipe(
        path=path,
        suite=str(data["suite"]),
        variant=str(data.get("variant", "minbase")),
        mirror=str(data["mirror"]),
        components=tuple(data.get("components") or ["main"]),
        include=tuple(data.get("include") or []),
    )


def _privileged(argv: list[str]) -> list[str]:
    """debootstrap and reading the rootfs need root: sudo -n when we are not."""
    if os.geteuid() == 0:
        return argv
    if not shutil.which("sudo"):
        raise LockError(f"{argv[0]} needs root; run as root or install sudo")
    return ["sudo", "-n", *argv]


def debootstrap_version() -> str:
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", "debootstrap"], capture_output=True, text=True
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _debootstrap(recipe: BaseRecipe, rootfs: Path, log: Log) -> None:
    """The recipe's Debian into ``rootfs``; its output's tail where it fails."""
    argv = [
        "debootstrap",
        f"--variant={recipe.variant}",
        f"--components={','.join(recipe.components)}",
        *([f"--include={','.join(recipe.include)}"] if recipe.include else []),
        recipe.suite,
        str(rootfs),
        recipe.mirror,
    ]
    log(f"base: {' '.join(argv)}")
    done = subprocess.run(_privileged(argv), capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise LockError(f"debootstrap failed (exit {done.returncode}):\n{tail}")


def _remove_leftovers(rootfs: Path) -> None:
    """Downloaded .debs and package lists are build leftovers, not part of the base."""
    subprocess.run(
        _privileged(
            [
                "sh",
                "-c",
                'rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/* '
                '"$1"/var/cache/debconf/*-old "$1"/var/log/*.log',
                "clean",
                str(rootfs),
            ]
        ),
        check=True,
    )


def make_rootfs_image(recipe: BaseRecipe, log: Log, engine: Engine | None = None) -> str:
    """debootstrap + docker (or ``engine``'s) import; returns the new image's ID (tagged
    ``recipe.tag``)."""
    engine = engine or DockerEngine()
    if not shutil.which("debootstrap"):
        raise LockError("debootstrap is not installed (apt-get install debootstrap)")
    workdir = Path(tempfile.mkdtemp(prefix="dlperf-debootstrap-", dir="/var/tmp"))
    rootfs = workdir / "rootfs"
    try:
        started = time.monotonic()
        _debootstrap(recipe, rootfs, log)
        log(f"base: debootstrap took {time.monotonic() - started:.1f} s")
        _remove_leftovers(rootfs)
        tar = subprocess.Popen(
            _privileged(["tar", "--numeric-owner", "--sort=name", "-C", str(rootfs), "-c", "."]),
            stdout=subprocess.PIPE,
        )
        imported = subprocess.run(
            engine.import_argv(
                ["ENV LANG=C.UTF-8", 'CMD ["/bin/bash"]', f"LABEL dlperf.recipe={recipe.digest}"],
                f"dlperf base: debootstrap {recipe.variant} {recipe.suite}",
                recipe.tag,
            ),
            stdin=tar.stdout,
            capture_output=True,
            text=True,
        )
        assert tar.stdout is not None
        tar.stdout.close()
        if tar.wait() != 0 or imported.returncode != 0:
            raise LockError(f"{engine.name} import of the base failed: {imported.stderr.strip()}")
        log(f"base: made {recipe.tag} in {time.monotonic() - started:.1f} s ({engine.name})")
        made = imported.stdout.strip().splitlines()[-1]  # podman prints its progress first
        return f"sha256:{made.removeprefix('sha256:')}"
    finally:
        subprocess.run(_privileged(["rm", "-rf", str(workdir)]), check=False)


def ensure_base(
    lock: Lock,
    recipe: BaseRecipe | None = None,
    *,
    rebuild: bool = False,
    log: Log = print,
    engine: Engine | None = None,
) -> Pin:
    """The pinned base on this machine (in ``engine``, docker's by default): nothing to do when
    the pinned image is here."""
    recipe = recipe or recipe_for(DEFAULT_BASE)
    engine = engine or DockerEngine()
    pin = lock.get(recipe.tag)
    if pin and pin.resolved and not rebuild:
        if engine.image_id(pin.digest):
            if engine.image_id(recipe.tag) != pin.digest:
                engine.tag(pin.digest, recipe.tag)
            log(f"base: {recipe.tag} is pinned and present ({pin.digest[:19]}); nothing to do")
            return pin
        local = _made_here_from(engine, recipe)
        if local:
            # debootstrap never makes the same bytes twice: a machine that made this recipe
            # before pins its own build rather than remaking it (and every image above it).
            log(
                f"base: the pinned {recipe.tag} ({pin.digest[:19]}) is not on this machine; "
                f"pinning this machine's own build of the same recipe ({local[:19]}); "
                "`--rebuild` makes a new one, docker load a saved copy keeps the pinned digest"
            )
            return _pin(lock, recipe, local, log, previous=pin.digest)
        log(
            f"base: the pinned {recipe.tag} ({pin.digest[:19]}) is not on this machine; making "
            "a new one (docker load a saved copy instead to keep the pinned digest)"
        )
    elif not rebuild and (existing := engine.image_id(recipe.tag)):
        log(f"base: {recipe.tag} exists here but is not pinned; pinning {existing[:19]}")
        return _pin(lock, recipe, existing, log, previous=None)
    new_id = make_rootfs_image(recipe, log, engine)
    return _pin(lock, recipe, new_id, log, previous=pin.digest if pin else None)


def _made_here_from(engine: Engine, recipe: BaseRecipe) -> str | None:
    """The ID of an image this machine made from ``recipe`` (its tag and recipe label), if any."""
    found = engine.image_id(recipe.tag)
    if found is None:
        return None
    return found if engine.labels(recipe.tag).get("dlperf.recipe") == recipe.digest else None


def _recipe_label(recipe: BaseRecipe) -> str:
    try:
        return str(recipe.path.resolve().relative_to(REPO_ROOT))
    except ValueError:  # a recipe outside the repository (tests)
        return recipe.path.name


def _pin(lock: Lock, recipe: BaseRecipe, digest: str, log: Log, previous: str | None) -> Pin:
    label = _recipe_label(recipe)
    pin = Pin(
        digest=digest,
        source="debootstrap",
        recipe=label,
        made=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        debootstrap=debootstrap_version(),
    )
    # An edited recipe supersedes its older base: one pin per recipe file (other recipes, e.g.
    # bookworm beside bullseye, keep theirs).
    for ref in [
        r
        for r, p in lock.pins.items()
        if p.source == "debootstrap" and r != recipe.tag and p.recipe == label
    ]:
        del lock.pins[ref]
    lock.pins[recipe.tag] = pin
    lock.save()
    if previous and previous != digest:
        log(f"base: re-pinned {recipe.tag}: {previous[:19]} -> {digest[:19]} in {lock.path}")
    else:
        log(f"base: pinned {recipe.tag} = {digest} in {lock.path}")
    return pin
