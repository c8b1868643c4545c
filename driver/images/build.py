"""Build images from their Dockerfiles, pinned by images.lock, tagged by a hash of their inputs.

Inputs of an image: its Dockerfile, the context files it names, the wheels it takes from the
wheelhouse, and its resolved bases (a registry digest, the Debian base's ID, or the input hash
of a parent image we build). Same inputs, same tag: a rebuild is a no-op. The CA bundle for a
TLS-intercepting proxy is not an input (it changes how packages are fetched, not which) and
never reaches the final image (multi-stage builds copy only the finished venv).

Builds run with host networking through docker's API (the classic builder) or podman's command
line (:mod:`driver.images.engine`), so a build needs nothing but one of the two: no BuildKit, no
buildx, no daemon with podman, no registry for our own layers.
An upstream source's image can take its code from a local git copy instead of its repository
(:mod:`driver.images.local_copy`); its build record then says so.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from driver.files import sha256_bytes, sha256_file, write_json, write_text
from driver.frameworks.base import REPO_ROOT
from driver.images.base import ensure_base, recipe_for
from driver.images.catalog import ImageSpec, build_order, discover
from driver.images.engine import Engine, engines_holding, open_engine
from driver.images.local_copy import LocalCopy, check_dockerfile, serve
from driver.images.lock import Lock, LockError, load_lock

Log = Callable[[str], None]
REPOSITORY = "dlperf"
CA_NAME = "extra-ca.crt"
HASH_SCHEMA = 1


@dataclass
class BuildOptions:
    lock_path: Path | None = None  # None: images.lock at the repository root
    root: Path = REPO_ROOT  # where dockerfiles/ and the framework folders are
    wheelhouse: tuple[Path, ...] | None = None  # None: pip's find-links folders
    ca_bundle: Path | None = None  # extra CA bundle for pip behind a TLS-intercepting proxy
    # image -> the checked local copy of its source's repository, served to its build in place
    # of the network repository (not an input: the Dockerfile checks out the same commits)
    local_copies: dict[str, LocalCopy] = field(default_factory=dict)
    log: Log = print
    engine: str | None = None  # docker, podman or auto; None: $DLPERF_ENGINE, else auto

    def open_engine(self) -> Engine:
        return open_engine(self.engine)

    def lock(self) -> Lock:
        return load_lock(self.lock_path)

    def wheel_dirs(self) -> list[Path]:
        return list(self.wheelhouse) if self.wheelhouse is not None else pip_find_links()


@dataclass
class BuiltImage:
    name: str
    tag: str  # dlperf/<name>:<input hash>
    id: str | None  # the image's own digest (ID) in the local engine; None: not built
    inputs: str  # the full input hash
    froms: dict[str, str]  # build argument -> what it resolved to
    built: bool = False  # False: it already existed (same inputs)
    seconds: float = 0.0
    engine: str = "docker"  # the engine that holds it here (docker or podman)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Plan:
    spec: ImageSpec
    hashed_from: dict[str, str]  # what goes into the input hash
    build_args: dict[str, str]  # what the build gets
    context: dict[str, Path]  # name in the build context -> file
    wheels: list[Path]
    inputs: str = ""
    tag: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


# -- wheelhouse ---------------------------------------------------------------------------------
def pip_find_links() -> list[Path]:
    """Local folders pip is configured to find wheels in (PIP_FIND_LINKS, pip.conf files)."""
    values: list[str] = []
    xdg = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    files = [
        *(Path(d) / "pip" / "pip.conf" for d in xdg),
        Path("/etc/pip.conf"),
        Path.home() / ".pip" / "pip.conf",
        Path.home() / ".config" / "pip" / "pip.conf",
    ]
    if os.environ.get("VIRTUAL_ENV"):
        files.append(Path(os.environ["VIRTUAL_ENV"]) / "pip.conf")
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(Path(os.environ["PIP_CONFIG_FILE"]))
    for path in files:
        if not path.is_file():
            continue
        parser = configparser.ConfigParser()
        try:
            parser.read(path)
        except configparser.Error:
            continue
        for section in ("global", "install"):
            for key in ("find-links", "find_links"):
                if parser.has_option(section, key):
                    values += parser.get(section, key).split()
    values += os.environ.get("PIP_FIND_LINKS", "").split()
    dirs: list[Path] = []
    for value in values:
        path = Path(value.removeprefix("file://"))
        if "://" not in value.removeprefix("file://") and path.is_dir() and path not in dirs:
            dirs.append(path)
    return dirs


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements_of(path: Path) -> dict[str, str | None]:
    """distribution -> pinned version (== only) of a requirements file."""
    out: dict[str, str | None] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(==\s*([^\s;,]+))?", line)
        if match:
            out[_normalize(match.group(1))] = match.group(4)
    return out


def select_wheels(spec: ImageSpec, dirs: list[Path]) -> list[Path]:
    """The wheelhouse's wheels of the distributions the image's requirements name."""
    if spec.wheels is None:
        return []
    requirements_path = spec.folder / spec.wheels.requirements
    if not requirements_path.exists():
        raise LockError(f"{requirements_path}: missing (named by {spec.dockerfile})")
    wanted = requirements_of(requirements_path)
    found: dict[str, list[Path]] = {}
    for folder in dirs:
        for wheel in sorted(folder.glob("*.whl")):
            parts = wheel.name[:-4].split("-")
            if len(parts) < 5:
                continue
            dist, version = _normalize(parts[0]), parts[1]
            if dist not in wanted:
                continue
            pinned = wanted[dist]
            if pinned and version != pinned and version.split("+", 1)[0] != pinned:
                continue
            found.setdefault(dist, []).append(wheel)
    for required in spec.wheels.required:
        dist = _normalize(required)
        if dist not in found:
            pinned = wanted.get(dist)
            raise LockError(
                f"{spec.name}: no wheel for {required}{'==' + pinned if pinned else ''} in the "
                f"wheelhouse ({', '.join(map(str, dirs)) or 'no folder: pip has no find-links'}); "
                "pass --wheelhouse DIR with it (the image never downloads it from "
                "download.pytorch.org, and PyPI's build of it is the CUDA one)"
            )
    return [wheel for dist in sorted(found) for wheel in found[dist]]


# -- hashing ------------------------------------------------------------------------------------
class HashCache:
    """sha256 of big files (wheels) by path, size and mtime, kept beside the build records."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, dict[str, Any]] = {}
        if path.exists():
            try:
                self.data = json.loads(path.read_text()).get("files", {})
            except (OSError, ValueError):
                self.data = {}

    def sha256(self, file: Path) -> str:
        stat = file.stat()
        key = str(file.resolve())
        entry = self.data.get(key)
        if entry and entry["size"] == stat.st_size and entry["mtime_ns"] == stat.st_mtime_ns:
            return entry["sha256"]
        digest = sha256_file(file)
        self.data[key] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}
        return digest


def state_dir(lock: Lock) -> Path:
    """Build records and caches live beside the lock (``.dlperf/``, not committed)."""
    return lock.path.parent / ".dlperf"


# -- planning -----------------------------------------------------------------------------------
def _pinned_base(name: str, base: str, lock: Lock, root: Path) -> str:
    """The lock's pinned reference of the Debian base ``base`` an image is built FROM."""
    recipe = recipe_for(base, root)
    pin = lock.get(recipe.tag)
    if pin is None or not pin.resolved:
        raise LockError(
            f"{name}: its base {recipe.tag} is not pinned in {lock.path}; run "
            f"`make base-image` (dlperf images base {base}) first"
        )
    return lock.pinned_ref(recipe.tag)


def _pinned_registry_image(name: str, ref: str, lock: Lock) -> str:
    """The lock's pinned reference (by digest) of a registry image an image is built FROM."""
    pin = lock.get(ref)
    if pin is None:
        raise LockError(
            f"{name}: FROM {ref} is not in {lock.path}; add it and run "
            "`dlperf images lock` on a machine that can pull from its registry"
        )
    if not pin.resolved:
        raise LockError(
            f"{name}: FROM {ref} has digest '{pin.digest}' in {lock.path}; run "
            "`dlperf images lock` on a machine that can pull from its registry, then "
            "commit the lock (a digest is never guessed)"
        )
    return lock.pinned_ref(ref)


def _plan(
    name: str,
    specs: dict[str, ImageSpec],
    lock: Lock,
    plans: dict[str, _Plan],
    options: BuildOptions,
    cache: HashCache,
) -> _Plan:
    spec = specs[name]
    hashed: dict[str, str] = {}
    args: dict[str, str] = {}
    for arg, ref in sorted(spec.froms.items()):
        if ref[1:] in spec.bases:
            hashed[arg] = args[arg] = _pinned_base(name, ref[1:], lock, options.root)
        elif ref.startswith("@"):
            parent = plans[ref[1:]]
            hashed[arg] = parent.tag  # the parent's inputs, not its machine-specific ID
            args[arg] = parent.tag  # replaced by the parent's ID once it is built
        else:
            hashed[arg] = args[arg] = _pinned_registry_image(name, ref, lock)
    context: dict[str, Path] = {}
    for relative in spec.context:
        path = spec.folder / relative
        if not path.is_file():
            raise LockError(f"{path}: missing (named by `# dlperf-context` in {spec.dockerfile})")
        context[relative] = path
    wheels = select_wheels(spec, options.wheel_dirs())
    digest_input = {
        "schema": HASH_SCHEMA,
        "name": name,
        "dockerfile": sha256_file(spec.dockerfile),
        "from": hashed,
        "context": {key: sha256_file(path) for key, path in sorted(context.items())},
        "wheels": {wheel.name: cache.sha256(wheel) for wheel in wheels},
    }
    inputs = sha256_bytes(json.dumps(digest_input, sort_keys=True).encode())
    plan = _Plan(spec, hashed, args, context, wheels, inputs, f"{REPOSITORY}/{name}:{inputs[:16]}")
    plans[name] = plan
    return plan


def plan_images(names: list[str], options: BuildOptions) -> dict[str, _Plan]:
    lock = options.lock()
    specs = discover(options.root)
    cache = HashCache(state_dir(lock) / "hash-cache.json")
    plans: dict[str, _Plan] = {}
    for name in build_order(specs, names):
        _plan(name, specs, lock, plans, options, cache)
    write_json(cache.path, {"files": cache.data})
    return plans


def resolve_image(name: str, options: BuildOptions) -> BuiltImage:
    """The built image for ``name`` with today's inputs, from the first engine here holding it
    (docker's, then podman's, under ``auto``); LockError when none does."""
    plan = plan_images([name], options)[name]
    for engine, found in engines_holding(plan.tag, options.engine):
        return BuiltImage(name, plan.tag, found, plan.inputs, plan.hashed_from, engine=engine.name)
    options.open_engine()  # no engine at all: its own error names the fixes
    raise LockError(
        f"image {plan.tag} ({name} with the current inputs) is not built here; run "
        f"`dlperf images build {name}` (make images)"
    )


# -- building -----------------------------------------------------------------------------------
def _context_dir(plan: _Plan, ca_bundle: Path | None) -> Path:
    root = Path(tempfile.mkdtemp(prefix=f"dlperf-build-{plan.spec.name}-", dir="/var/tmp"))
    shutil.copyfile(plan.spec.dockerfile, root / "Dockerfile")
    for relative, path in plan.context.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, root / relative)
    for folder in ("wheelhouse", "certs"):
        (root / folder).mkdir()
        write_text(root / folder / ".keep", "")  # COPY of a folder needs it to exist
    for wheel in plan.wheels:
        try:
            os.link(wheel, root / "wheelhouse" / wheel.name)  # same file system: no copy
        except OSError:
            shutil.copyfile(wheel, root / "wheelhouse" / wheel.name)
    if ca_bundle is not None:
        shutil.copyfile(ca_bundle, root / "certs" / CA_NAME)
    return root


def _ensure_registry_base(engine: Engine, ref: str, log: Log) -> None:
    if engine.image_id(ref):
        return
    log(f"pulling {ref}")
    try:
        engine.pull(ref)
    except Exception as error:  # noqa: BLE001 - any pull failure ends this image the same way
        raise LockError(
            f"cannot pull the pinned base {ref}: {error}. Build this image on a machine that "
            f"reaches the registry (or `{engine.name} load` the base there first)"
        ) from None


def _build_one(
    engine: Engine,
    plan: _Plan,
    options: BuildOptions,
    log_dir: Path,
    extra_args: dict[str, str] | None = None,
    extra_labels: dict[str, str] | None = None,
) -> float:
    for value in plan.build_args.values():
        if "@sha256:" in value:
            _ensure_registry_base(engine, value, options.log)
    ca = options.ca_bundle
    if ca is not None and not ca.is_file():
        raise LockError(f"--ca-bundle {ca}: no such file")
    build_args = {**plan.build_args, **(extra_args or {})}
    if ca is not None:
        build_args["CA_BUNDLE"] = CA_NAME
    context = _context_dir(plan, ca)
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{plan.spec.name}.log"
    started = time.monotonic()
    labels = {
        "dlperf.image": plan.spec.name,
        "dlperf.inputs": plan.inputs,
        "org.opencontainers.image.base.name": ",".join(plan.hashed_from.values()),
        **(extra_labels or {}),
    }
    try:
        with log_path.open("w") as log_file:
            engine.build(
                context, plan.tag, build_args, labels, log_file,
                lambda line: options.log(f"  {plan.spec.name}: {line[:110]}"),
            )  # fmt: skip
    except LockError as error:
        raise LockError(
            f"building {plan.spec.name} with {engine.name} failed: {error}\n"
            f"(full log: {log_path}; behind a TLS-intercepting proxy pass --ca-bundle FILE)"
        ) from None
    finally:
        shutil.rmtree(context, ignore_errors=True)
    return time.monotonic() - started


def _resolve_froms(
    name: str, plan: _Plan, engine: Engine, results: dict[str, BuiltImage]
) -> None:
    """Each FROM of the plan as this machine's engine builds it: a pinned Debian base must be
    in the engine; a parent image is replaced by its built ID."""
    for arg, ref in plan.spec.froms.items():
        if ref[1:] in plan.spec.bases:
            if not engine.image_id(plan.build_args[arg]):
                raise LockError(
                    f"{name}: the pinned Debian base {ref} ({plan.build_args[arg][:19]}) is "
                    f"not in this machine's {engine.name}; run `make base-image` (dlperf "
                    f"images base {ref[1:]}{' --engine podman' * (engine.name == 'podman')})"
                )
        elif ref.startswith("@"):
            parent = results[ref[1:]]
            plan.build_args[arg] = parent.id or parent.tag


def _up_to_date(
    name: str, plan: _Plan, engine: Engine, options: BuildOptions, existing: str
) -> BuiltImage:
    """The image the engine already holds under the plan's tag (its inputs are the same)."""
    options.log(f"{name}: {plan.tag} is up to date in {engine.name} ({existing[:19]})")
    if name in options.local_copies:  # same commits, same image: nothing to clone
        options.log(f"  {name}: its local copy was not needed")
    return BuiltImage(name, plan.tag, existing, plan.inputs, plan.hashed_from, engine=engine.name)


def _build_fresh(
    name: str, plan: _Plan, engine: Engine, options: BuildOptions, log_dir: Path
) -> float:
    """Build the plan's image, its code from a local copy where one is given; the seconds."""
    copy = options.local_copies.get(name)
    if copy is None:
        return _build_one(engine, plan, options, log_dir)
    with serve(copy, log_dir / f"{name}.git-daemon.log") as url:
        options.log(f"  {name}: its code from the local copy {copy.path} ({url})")
        return _build_one(
            engine,
            plan,
            options,
            log_dir,
            {"REPO": url},
            {"dlperf.code-from": f"local copy {copy.path} of {copy.repository}"},
        )


def build_images(
    names: list[str] | None,
    options: BuildOptions,
    *,
    make_base: bool = False,
) -> dict[str, BuiltImage]:
    """Build ``names`` (every image when None) and what they are built FROM; skip what exists.

    ``make_base``: make/pin the Debian base first when an image needs it (make images).
    """
    lock = options.lock()
    specs = discover(options.root)
    wanted = names or sorted(specs)
    order = build_order(specs, wanted)
    for name, copy in options.local_copies.items():
        if name in order:  # before anything is built
            check_dockerfile(copy.source, specs[name].dockerfile)
    engine = options.open_engine()
    if make_base:
        for base in sorted({base for n in order for base in specs[n].bases}):
            ensure_base(lock, recipe_for(base, options.root), log=options.log, engine=engine)
    cache = HashCache(state_dir(lock) / "hash-cache.json")
    records_path = state_dir(lock) / "images-built.json"
    records = json.loads(records_path.read_text()) if records_path.exists() else {}
    plans: dict[str, _Plan] = {}
    results: dict[str, BuiltImage] = {}
    for name in order:
        plan = _plan(name, specs, lock, plans, options, cache)
        _resolve_froms(name, plan, engine, results)
        existing = engine.image_id(plan.tag)
        if existing:
            results[name] = _up_to_date(name, plan, engine, options, existing)
            continue
        options.log(f"{name}: building {plan.tag} from {plan.spec.dockerfile} ({engine.name})")
        seconds = _build_fresh(name, plan, engine, options, state_dir(lock) / "build-logs")
        copy = options.local_copies.get(name)
        built_id = engine.image_id(plan.tag)
        options.log(f"{name}: built {plan.tag} = {built_id} in {seconds:.1f} s ({engine.name})")
        results[name] = BuiltImage(
            name, plan.tag, built_id, plan.inputs, plan.hashed_from, True, seconds, engine.name
        )
        records[plan.tag] = {
            **results[name].to_dict(),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "wheels": [wheel.name for wheel in plan.wheels],
            **({"code": copy.provenance()} if copy else {}),
        }
        write_json(records_path, records)
    write_json(cache.path, {"files": cache.data})
    return results
