"""Which images exist: shared layers in ``dockerfiles/``, framework images in their folders.

    dockerfiles/Dockerfile.<name>          -> image <name>            (shared layers)
    <Framework>/Dockerfile.cpu|gpu         -> image <framework>-cpu|gpu
    an upstream source's Dockerfile         -> the image its source.yaml names (src-...)

A Dockerfile names its bases only through build arguments declared in directives, so that no
``FROM`` can bypass ``images.lock``::

    # dlperf-from BASE_IMAGE=nvcr.io/nvidia/pytorch:25.04-py3   (a registry tag: pinned in the lock)
    # dlperf-from BASE_IMAGE=@cpu-python                        (an image we build or make)
    # dlperf-context requirements-cpu.txt                       (a file next to the Dockerfile)
    # dlperf-wheels requirements-cpu.txt torch                  (wheels from the wheelhouse;
    #                                                            the named ones must be there)
    # dlperf-also cpu-python-bullseye BASE_IMAGE=@debian-bullseye
    #                                 (the same Dockerfile built on other bases: another image;
    #                                  in a source's Dockerfile: its current_image)
    ARG BASE_IMAGE
    FROM ${BASE_IMAGE}

``@debian`` and ``@debian-bullseye`` are Debian bases made with debootstrap
(:mod:`driver.images.base`, one recipe ``dockerfiles/base-<name>.yaml`` each).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from driver.frameworks.base import REPO_ROOT
from driver.images.base import base_recipes
from driver.images.lock import LockError

SHARED_DIR = "dockerfiles"
VARIANTS = ("cpu", "gpu")
# Frameworks without images of their own run in another one that has what they need.
FALLBACK = {
    "calibration": {"cpu": "cpu-python", "gpu": "pytorch-gpu"},
    # Horovod is a second engine of the TensorFlow column; it runs in the TF GPU image.
    "tensorflow-horovod": {"gpu": "tensorflow-gpu"},
}

_DIRECTIVE = re.compile(r"^#\s*dlperf-(from|context|wheels|also)\s+(.+?)\s*$")
_FROM = re.compile(r"^FROM\s+(.+)$", re.IGNORECASE)
_ARG_REF = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")


@dataclass(frozen=True)
class WheelSpec:
    requirements: str  # relative to the Dockerfile's folder
    required: tuple[str, ...]  # distributions that must come from the wheelhouse


@dataclass(frozen=True)
class ImageSpec:
    name: str
    dockerfile: Path
    froms: dict[str, str]  # build argument -> "@image" or a registry tag
    context: tuple[str, ...] = ()
    wheels: WheelSpec | None = None
    framework: str | None = None
    variant: str | None = None
    depends: tuple[str, ...] = field(default=())  # images we build that this one starts FROM
    bases: tuple[str, ...] = field(default=())  # Debian bases (debootstrap) it starts FROM
    # `# dlperf-also NAME ARG=@ref ...`: further images from this Dockerfile on other bases.
    also: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = field(default=())

    @property
    def folder(self) -> Path:
        return self.dockerfile.parent

    @property
    def registry_refs(self) -> list[str]:
        return [ref for ref in self.froms.values() if not ref.startswith("@")]


def _assignment(where: str, directive: str, text: str) -> tuple[str, str]:
    arg, sep, ref = text.partition("=")
    if not sep or not arg.strip() or not ref.strip() or " " in ref.strip():
        raise LockError(f"{where}: dlperf-{directive} wants ARG=<tag or @image>, got {text!r}")
    return arg.strip(), ref.strip()


def _check_from(where: str, instruction: str, froms: dict[str, str], stages: set[str]) -> None:
    """A FROM names an earlier stage of the file or a ``# dlperf-from`` argument (a base pinned
    through images.lock); its stage name, if it gives one, is added to ``stages``."""
    tokens = [t for t in instruction.split() if not t.startswith("--")]
    image = tokens[0]
    alias = tokens[2].lower() if len(tokens) >= 3 and tokens[1].lower() == "as" else None
    arg = _ARG_REF.match(image)
    if image.lower() in stages:
        pass  # FROM an earlier stage of this file
    elif not arg or arg.group(1) not in froms:
        raise LockError(
            f"{where}: FROM {image} is not pinned through images.lock; write "
            "`ARG BASE_IMAGE` + `FROM ${BASE_IMAGE}` and a `# dlperf-from BASE_IMAGE=<tag>` "
            "directive (see docs/clusters.md)"
        )
    if alias:
        stages.add(alias)


def _check_also(
    path: Path, also: list[tuple[str, tuple[tuple[str, str], ...]]], froms: dict[str, str]
) -> None:
    """Each ``# dlperf-also`` sets only arguments a ``# dlperf-from`` declares."""
    for other, assignments in also:
        unknown = [arg for arg, _ in assignments if arg not in froms]
        if unknown:
            raise LockError(
                f"{path}: dlperf-also {other}: {', '.join(unknown)} is not a dlperf-from "
                f"argument of this Dockerfile ({', '.join(froms)})"
            )


def parse_dockerfile(path: Path, name: str, **kwargs: str | None) -> ImageSpec:
    froms: dict[str, str] = {}
    also: list[tuple[str, tuple[tuple[str, str], ...]]] = []
    context: list[str] = []
    wheels: WheelSpec | None = None
    stages: set[str] = set()
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        where = f"{path}:{number}"
        directive = _DIRECTIVE.match(line)
        if directive:
            kind, value = directive.groups()
            if kind == "from":
                arg, ref = _assignment(where, kind, value)
                froms[arg] = ref
            elif kind == "also":
                other, *assignments = value.split()
                if not assignments:
                    raise LockError(f"{where}: dlperf-also wants NAME ARG=<tag or @image> ...")
                also.append((other, tuple(_assignment(where, kind, a) for a in assignments)))
            elif kind == "context":
                context.extend(value.split())
            else:
                parts = value.split()
                wheels = WheelSpec(parts[0], tuple(parts[1:]))
            continue
        match = _FROM.match(line)
        if match:
            _check_from(where, match.group(1), froms, stages)
    if not froms:
        raise LockError(f"{path}: no `# dlperf-from` directive; every image needs a pinned base")
    _check_also(path, also, froms)
    return ImageSpec(
        name=name,
        dockerfile=path,
        froms=froms,
        context=tuple(context),
        wheels=wheels,
        depends=tuple(ref[1:] for ref in froms.values() if ref.startswith("@")),
        also=tuple(also),
        **kwargs,  # type: ignore[arg-type]
    )


def _with_bases(spec: ImageSpec, bases: set[str]) -> ImageSpec:
    """Split ``@`` references into Debian bases and images we build."""
    return replace(
        spec,
        depends=tuple(d for d in spec.depends if d not in bases),
        bases=tuple(d for d in spec.depends if d in bases),
    )


def _variants(spec: ImageSpec) -> list[ImageSpec]:
    """The spec and the images its ``dlperf-also`` directives make from the same Dockerfile."""
    out = [spec]
    for other, assignments in spec.also:
        froms = {**spec.froms, **dict(assignments)}
        out.append(
            replace(
                spec,
                name=other,
                froms=froms,
                depends=tuple(ref[1:] for ref in froms.values() if ref.startswith("@")),
                also=(),
            )
        )
    return out


def discover(root: Path = REPO_ROOT) -> dict[str, ImageSpec]:
    """Every image the repository (or a tree shaped like it) defines, by name."""
    from driver.frameworks.base import FRAMEWORKS
    from driver.plugins import load

    load("frameworks", "sources")
    bases = set(base_recipes(root))
    specs: dict[str, ImageSpec] = {}
    for path in sorted((root / SHARED_DIR).glob("Dockerfile.*")):
        name = path.name.split(".", 1)[1]
        for spec in _variants(parse_dockerfile(path, name)):
            specs[spec.name] = spec
    for framework_name in FRAMEWORKS.names():
        framework = FRAMEWORKS.get(framework_name)
        for variant in VARIANTS:
            path = root / framework.folder / f"Dockerfile.{variant}"
            if path.exists():
                name = f"{framework_name}-{variant}"
                specs[name] = parse_dockerfile(
                    path, name, framework=framework_name, variant=variant
                )
                if specs[name].also:
                    raise LockError(
                        f"{path}: dlperf-also is for the shared layers in {SHARED_DIR}/; a "
                        "framework image has one Dockerfile per base"
                    )
    for image, dockerfile in source_dockerfiles(root).items():
        # `dlperf-also`: the same pinned code on another base (a source's current image)
        for spec in _variants(parse_dockerfile(dockerfile, image, variant="gpu")):
            specs[spec.name] = spec
    specs = {name: _with_bases(spec, bases) for name, spec in specs.items()}
    for spec in specs.values():
        for dependency in spec.depends:
            if dependency not in specs:
                raise LockError(
                    f"{spec.dockerfile}: FROM @{dependency}: no such image; known: "
                    f"{', '.join(sorted([*bases, *specs]))}"
                )
    return specs


def source_dockerfiles(root: Path = REPO_ROOT) -> dict[str, Path]:
    """Images of the upstream source plug-ins (their code, cloned at a pinned commit)."""
    from driver.sources.base import SOURCES

    found: dict[str, Path] = {}
    for name in SOURCES.names():
        source = SOURCES.get(name)()
        image = getattr(source, "image", None)
        dockerfile = getattr(getattr(source, "spec", None), "dockerfile", None)
        if image and isinstance(dockerfile, Path):
            try:
                relative = dockerfile.relative_to(REPO_ROOT)
            except ValueError:
                relative = dockerfile
            path = root / relative
            if path.exists():
                found[str(image)] = path
    return found


def build_order(specs: dict[str, ImageSpec], names: list[str]) -> list[str]:
    """``names`` and the images they are built FROM, parents first."""
    order: list[str] = []

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if name in chain:
            raise LockError(f"images built FROM each other: {' -> '.join([*chain, name])}")
        if name in order:
            return
        if name not in specs:
            raise LockError(f"no image {name!r}; known: {', '.join(sorted(specs))}")
        for dependency in specs[name].depends:
            visit(dependency, (*chain, name))
        order.append(name)

    for name in names:
        visit(name, ())
    return order


def image_for(framework: str, variant: str, specs: dict[str, ImageSpec]) -> str:
    """The image a framework's processes run in, for a cpu or gpu node."""
    name = f"{framework}-{variant}"
    if name in specs:
        return name
    fallback = FALLBACK.get(framework, {}).get(variant)
    if fallback and fallback in specs:
        return fallback
    raise LockError(
        f"framework {framework!r} has no {variant} image (no {framework}/Dockerfile.{variant}); "
        f"known images: {', '.join(sorted(specs))}"
    )
