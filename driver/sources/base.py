"""The upstream-source plug-in interface (the "Source" column of DLPerf's tables).

A source is pinned upstream code (repository + full commit, or a PyPI release pinned by its
wheel's SHA-256) in a pinned image, started with its own launcher and flags, whose log is read
by a parser of its format. The driver fills ranks and hosts from the inventory; nobody edits
upstream files or per-node flags by hand.
"""

from __future__ import annotations

import base64
import shlex
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from driver.bench import fingerprint
from driver.launchers.base import NodeRank
from driver.model.case import Case
from driver.parsers._runheader import PARALLEL_FIELDS, RunHeader, parallel_problem
from driver.registry import Registry

L = TypeVar("L")  # a source's per-model launch record

# What the node prints right after the run header: its hostname, devices (GPU names, else the
# CPU model) and hardware fingerprint, one "DLPERF-HOST {json}" line read by the upstream parsers
# (driver.parsers._runheader.rank_host). Only the node knows them: the head renders the header.
# The fingerprint is driver/bench/fingerprint.py itself, run from its source (the upstream image
# does not hold the kit): zlib-compressed and base64-encoded, so that the program stays one line
# in dry runs and records, and decoding it gives that file byte for byte. Plain Python 3.6+ (the
# oldest upstream images); silent where no Python is found.
_FINGERPRINT_SOURCE = Path(fingerprint.__file__).read_bytes()
HOST_PROGRAM = "; ".join(
    (
        "import base64, json, zlib",
        'code = {"__name__": "dlperf_fingerprint"}',
        "exec(zlib.decompress(base64.b64decode("
        f"'{base64.b64encode(zlib.compress(_FINGERPRINT_SOURCE, 9)).decode('ascii')}'"
        ')).decode("utf-8"), code)',
        'print("DLPERF-HOST " + json.dumps(code["host_facts"](), sort_keys=True), flush=True)',
    )
)
HOST_PROBE = (
    "for py in python3 python; do if command -v $py >/dev/null 2>&1; then "
    f"$py -c {shlex.quote(HOST_PROGRAM)} 2>/dev/null; break; fi; done"
)


class Source(Protocol):
    name: str  # matrix `source:` value, e.g. "ngc-pytorch"
    framework: str  # FRAMEWORKS name whose column it belongs to
    models: tuple[str, ...]
    repository: str  # e.g. https://github.com/NVIDIA/DeepLearningExamples
    commit: str | None  # a full 40-hex commit; None where pinned to a release (``release``)
    image: str  # images.lock key of the image that holds the code at that pin
    parser: str  # PARSERS name for its log format
    workdir: str  # where the code lives inside the image

    def command(self, case: Case, rank: NodeRank, batch_size: int) -> list[str]:
        """argv that runs ``case`` on the node ``rank`` (their launcher, their flags)."""
        ...


def run_header(
    source: str, case: Case, rank: NodeRank, batch_size: int, logging: str, step_offset: int
) -> RunHeader:
    """The run header a source's node command prints first: what its parser needs to know
    about the case (window, batch, ranks) that the upstream log itself does not say."""
    warmup, measured, _total = case.window_for(batch_size)
    return RunHeader(
        source=source,
        model=case.model,
        node_rank=rank.node_rank,
        nodes=rank.nodes,
        procs_per_node=rank.procs_per_node,
        batch=batch_size,
        logging=logging,
        step_offset=step_offset,
        warmup_steps=warmup,
        measured_steps=measured,
        **parallel_degrees(case),
    )


def parallel_degrees(case: Case) -> dict[str, int]:
    """The case's model-parallel degrees (options ``tensor_parallel``, ``pipeline_parallel``,
    ``context_parallel``; 1 where absent), as the run header states them: what the source's
    config trains with, so that samples are counted per data-parallel replica."""
    return {name: case.options.get(name, 1) for name in PARALLEL_FIELDS}


def parallel_degree_problems(case: Case) -> list[str]:
    """What is wrong with the case's model-parallel degrees: not an integer >= 1, or a product
    that does not divide its devices."""
    degrees = parallel_degrees(case)
    bad = [
        f"option {name} {value!r} (an integer >= 1)"
        for name, value in degrees.items()
        if not isinstance(value, int) or isinstance(value, bool) or value < 1
    ]
    if bad:
        return bad
    problem = parallel_problem(case.topology.world_size, degrees)
    return [f"{problem} ({case.topology.label})"] if problem else []


def model_launch(launches: Mapping[str, L], case: Case, source: str, models: Iterable[str]) -> L:
    """The source's launch of ``case.model``, or a clear error naming the models it has."""
    launch = launches.get(case.model)
    if launch is None:
        raise ValueError(f"source {source} has no {case.model}; it has {tuple(models)}")
    return launch


def data_and_precision_problems(
    case: Case, datasets: Sequence[str], precisions: Sequence[str]
) -> list[str]:
    """What of ``case``'s data and precision a source's model does not run."""
    problems = []
    if case.dataset not in datasets:
        problems.append(f"dataset {case.dataset} (it runs {', '.join(datasets)})")
    if case.precision not in precisions:
        problems.append(f"precision {case.precision} (it runs {', '.join(precisions)})")
    return problems


def refuse_unsupported(case: Case, source: str, problems: list[str]) -> None:
    if problems:
        raise ValueError(
            f"{case.id}: source {source} {case.model} does not support " + "; ".join(problems)
        )


SOURCES: Registry[type[Source]] = Registry("source")  # each plug-in module registers


# Which image a source's case runs in (the case's ``image``): the source's pinned image, or its
# current image (``current_image`` in source.yaml: the same pinned code on a later base, built
# from the source's Dockerfile by its ``dlperf-also`` line). Part of the case's id when current.
PINNED, CURRENT = "pinned", "current"
IMAGE_CHOICES = (PINNED, CURRENT)


class ImageRefused(ValueError):
    """``image: current`` asked of a source that has no current image: ``where`` (the file and
    field that say so, or what the source is) and ``why``."""

    def __init__(self, source: str, where: str, why: str) -> None:
        self.source, self.where, self.why = source, where, why
        super().__init__(f"source {source} has no current image ({where}: {why})")


def current_image_spec(source: str) -> object:
    """The source's ``current_image`` entry (driver.sources.spec.CurrentImageSpec) when it
    names a built image; an :class:`ImageRefused` naming the field and the reason otherwise."""
    if source == "dlperf":
        raise ImageRefused(
            source,
            "the kit's own scripts",
            "they run in the framework's image (images.lock), which has no pinned and current "
            "pair; image: current selects an upstream source's current image",
        )
    plugin = SOURCES.get(source)()
    spec = getattr(plugin, "spec", None)
    if spec is None or not plugin.image:  # a PyPI source: ``image = ""``
        raise ImageRefused(
            source, "the source", "it runs from PyPI in the kit's own environment, in no image"
        )
    current = spec.current_image
    if current is None:
        raise ImageRefused(
            source,
            f"{spec.path}: current_image",
            "not given (the pinned image is the only one this source runs in)",
        )
    if current.refused:
        raise ImageRefused(source, f"{spec.path}: current_image.refused", current.refused)
    return current


def source_image(source: str, image: str = PINNED) -> str:
    """The images.lock/catalog name of the image an upstream source's case runs in: the one
    place every container platform resolves it (docker, podman, pyxis, Slurm's OCI). ``image``
    is the case's choice (:data:`IMAGE_CHOICES`); an :class:`ImageRefused` where the source has
    no current image."""
    if image == PINNED:
        return str(SOURCES.get(source)().image)
    if image != CURRENT:
        raise ValueError(f"image {image!r}: one of {', '.join(IMAGE_CHOICES)}")
    return str(current_image_spec(source).image)  # type: ignore[attr-defined]


def image_differs(case: Case) -> list[str]:
    """What differs in the software of ``case``'s image from the source's pinned one (its
    ``current_image.differs``); [] for a case on the pinned image."""
    if case.image == PINNED:
        return []
    return list(current_image_spec(case.source).differs)  # type: ignore[attr-defined]


def image_key(source: str, image: str = PINNED) -> str:
    """How settings name a source's image (``slurm.image.<key>``, ``slurm.oci_image.<key>``,
    ``slurm.oci_bundle.<key>``): the source for its pinned image, ``<source>-current`` for its
    current one (an entry for the pinned image never stands in for the current one)."""
    return source if image == PINNED else f"{source}-{image}"


def image_keys() -> list[str]:
    """Every source's key, and ``<source>-current`` of each source that has a current image."""
    keys = []
    for name in SOURCES.names():
        keys.append(name)
        try:
            current_image_spec(name)
        except ImageRefused:
            continue
        keys.append(image_key(name, CURRENT))
    return keys
