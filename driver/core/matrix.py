"""The case matrix: a YAML file per framework folder, validated, expanded into cases.

File shape (``<Framework>/matrix.yaml``)::

    framework: pytorch
    defaults: {warmup_steps: 20, measured_steps: 100, repeats: 7, timeout_s: 3600}
    suites:
      - model: resnet50
        topology: [1n1g, 1n8g, 2n16g, 4n32g]
        batch_size: [128, max]
        precision: [fp32, amp]
        xla: [off]
        dataset: [synthetic]
        variants: {default: {channels_last: true}}
    profiles:
      cpu-smoke:
        description: why this profile exists
        defaults: {...}      # merged over the top-level defaults
        suites: [...]        # replace the top-level suites

Any problem is one :class:`MatrixError` naming the file, the field, and what is allowed;
nothing runs.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, field_validator

from driver.frameworks.base import FRAMEWORKS, OptionError
from driver.model.case import (
    MAX_STEPS,
    Case,
    Topology,
    parse_topology,
)
from driver.plugins import load
from driver.schema import (
    ConfigError,
    FiniteFloat,
    Name,
    OptionName,
    StrictModel,
    did_you_mean,
    load_document,
    one_of,
    text,
    validate,
)
from driver.sources.base import IMAGE_CHOICES, PINNED, SOURCES, ImageRefused, current_image_spec
from driver.text import FreeText
from driver.workloads.base import WorkloadOptionError, check_case_options

PRECISIONS = ("fp32", "amp")
DATASETS = ("synthetic", "real")
ONOFF = {"on": True, "off": False, True: True, False: False}
DLPERF_PROFILE = "dlperf"
KIT_SOURCE = "dlperf"  # a case of the kit's own scripts (``source:`` of a matrix)
MAX_REPEATS = 1000
MAX_TIMEOUT_S = 30 * 24 * 3600.0
# One dlperf run selects at most MAX_CASES cases unless it says it means more (--max-cases): a
# list too many in a suite multiplies into days of runs. A matrix file expands to at most
# MAX_EXPANDED_CASES cases whatever is asked (each case is built in memory before selection).
MAX_CASES = 1000
MAX_EXPANDED_CASES = 100_000
COMMAND_LINE = "command line"


class MatrixError(ConfigError):
    """A bad matrix or command-line selection: ``<file>: <field>: <what is allowed>``."""


class UnknownProfile(MatrixError):
    """The profile asked for is not in the matrix (the CLI names its --profile)."""


# Field types -----------------------------------------------------------------------------------


def _as_list(value: Any) -> Any:
    if isinstance(value, list):
        if not value:
            raise ValueError("empty list; give at least one value")
        return value
    return [value]


def _batch(value: Any) -> int | str:
    if value == "max" and isinstance(value, str):
        return value
    if type(value) is not int or not 0 < value <= 1_000_000:
        raise ValueError(f"must be a positive integer (at most 1000000) or 'max', got {value!r}")
    return value


def _topology_label(label: Any) -> str:
    parse_topology(label)
    return label


Listed = BeforeValidator(_as_list)
Batch = Annotated[Any, AfterValidator(_batch)]
TopologyLabel = Annotated[Any, AfterValidator(_topology_label)]
Precision = Annotated[Any, one_of(*PRECISIONS)]
DatasetName = Annotated[Any, one_of(*DATASETS)]
XlaSetting = Annotated[Any, one_of("off", "on", False, True)]
# A folder on the nodes: safe path characters only, never an option ("-...") or a newline.
# Absolute, and refused rather than resolved against the matrix's folder: the scripts read it
# on the nodes, in their own working folder (inside a container under the docker runtime,
# where only absolute folders are mounted), and no shell expands a "~".
DataDir = text(
    r"/[A-Za-z0-9_./~+@=,:-]{0,4095}",
    "an absolute folder path (/data/imagenet) of letters, digits and _ . / ~ + @ = , : -",
)
VariantName = text(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}", "a name: letters, digits, - and _")
Steps = Annotated[int, Field(ge=0, le=MAX_STEPS)]
PositiveSteps = Annotated[int, Field(ge=1, le=MAX_STEPS)]
Repeats = Annotated[int, Field(ge=1, le=MAX_REPEATS)]


class Settings(StrictModel):
    """``defaults:`` (top level or a profile's), and the same keys inside a suite."""

    warmup_steps: Steps = 20
    measured_steps: PositiveSteps = 100
    total_steps: PositiveSteps | None = None  # None: warm-up + measured
    repeats: Repeats = 7
    timeout_s: Annotated[FiniteFloat, Field(gt=0, le=MAX_TIMEOUT_S)] = 3600.0
    data_dir: DataDir | None = None  # absolute: a relative one is refused, never resolved
    source: Name = "dlperf"
    epochs: Annotated[FiniteFloat, Field(gt=0, le=1e6)] | None = None
    epoch_samples: Annotated[int, Field(ge=1, le=10**12)] | None = None
    drop_caches: bool = False
    loader_workers: Any = "auto"
    # AMP's autocast dtype on the kit's own scripts: fp16 runs an H100 as DLPerf ran its V100s
    amp_dtype: Annotated[Any, one_of("auto", "bf16", "fp16")] = "auto"
    # An upstream source's image: pinned, or current (its source.yaml current_image)
    image: Annotated[Any, one_of(*IMAGE_CHOICES)] = PINNED

    @field_validator("loader_workers")
    @classmethod
    def _workers(cls, value: Any) -> Any:
        if value == "auto" and isinstance(value, str):
            return value
        if type(value) is not int or not 0 <= value <= 1024:
            raise ValueError(f"must be 'auto' or a count 0-1024, got {value!r}")
        return value


SETTING_KEYS = tuple(Settings.model_fields)
DEFAULTS: dict[str, Any] = Settings().model_dump()


class Suite(Settings):
    model: str
    topology: Annotated[list[TopologyLabel], Listed] = ["1n1g"]
    batch_size: Annotated[list[Batch], Listed] = [32]
    precision: Annotated[list[Precision], Listed] = ["fp32"]
    xla: Annotated[list[XlaSetting], Listed] = ["off"]
    dataset: Annotated[list[DatasetName], Listed] = ["synthetic"]
    variants: Annotated[dict[VariantName, dict[OptionName, Any]], Field(min_length=1)] = {
        "default": {}
    }


class Profile(StrictModel):
    description: FreeText("note") = ""  # printed by `dlperf run`, kept in session.json
    defaults: Settings | None = None
    suites: Annotated[list[Suite], Field(min_length=1)] | None = None


class MatrixFile(StrictModel):
    framework: str
    defaults: Settings | None = None
    suites: Annotated[list[Suite], Field(min_length=1)]
    profiles: dict[VariantName, Profile] = {}


class Overrides(StrictModel):
    """What the user narrows or changes on the command line (make NODES=4 BATCH=64 ...).

    The same bounds as the matrix: a value the matrix would refuse is refused here too.
    """

    models: tuple[str, ...] = ()
    topologies: tuple[TopologyLabel, ...] = ()  # e.g. ("4n32g",) from NODES=4 GPUS=8
    batch_sizes: tuple[Batch, ...] = ()
    precisions: tuple[Precision, ...] = ()
    xla: bool | None = None
    datasets: tuple[DatasetName, ...] = ()
    variants: tuple[str, ...] = ()
    repeats: Repeats | None = None
    warmup_steps: Steps | None = None
    measured_steps: PositiveSteps | None = None
    data_dir: DataDir | None = None
    amp_dtype: Annotated[Any, one_of("auto", "bf16", "fp16")] | None = None
    image: Annotated[Any, one_of(*IMAGE_CHOICES)] | None = None
    options: dict[OptionName, Any] = {}


# The dlperf run flag of each override (the others are --<name with dashes>).
OVERRIDE_FLAGS = {
    "topologies": "--nodes/--gpus", "batch_sizes": "--batch", "precisions": "--amp",
    "datasets": "--dataset", "models": "--model", "variants": "--variant", "options": "--option",
}  # fmt: skip


def overrides_from(values: dict[str, Any]) -> Overrides:
    """:class:`Overrides` from command-line values; errors name the flag (``--repeats``)."""
    try:
        return validate(Overrides, values, COMMAND_LINE)
    except ConfigError as error:
        key = error.field_path.split(".")[0].split("[")[0]
        flag = OVERRIDE_FLAGS.get(key, "--" + key.replace("_", "-"))
        option = error.field_path[len(key) :].lstrip(".")
        where = f"{flag} {option}" if key == "options" and option else flag
        raise MatrixError(COMMAND_LINE, where, error.message) from None


@dataclass
class Matrix:
    path: Path
    framework: str
    profile: str
    description: str
    cases: list[Case]


# Checks that need the registries (framework models, options, sources) -------------------------


def check_options(
    framework: str, source: str, model: str, options: dict[str, Any], path: Path | str, where: str
) -> None:
    """Every option name declared by the script (or upstream source) that reads it, every
    value of its type; else a :class:`MatrixError` at ``where.<option>``."""
    if source == "dlperf":
        plugin = FRAMEWORKS.get(framework)
        for name, value in options.items():
            try:
                plugin.check_option(name, value)
            except OptionError as error:
                raise MatrixError(path, f"{where}.{name}", str(error)) from None
        return
    launch = SOURCES.get(source)().spec.launches.get(model)
    declared = dict(launch.options) if launch is not None else {}
    for name, value in options.items():
        if name not in declared:
            raise MatrixError(
                path,
                f"{where}.{name}",
                f"source {source} {model} has no option {name!r}{did_you_mean(name, declared)}; "
                f"its options: {', '.join(sorted(declared)) or 'none'}",
            )
        default = declared[name]
        if default is not None and type(value) is not type(default):
            raise MatrixError(
                path,
                f"{where}.{name}",
                f"must be a {type(default).__name__} like its default {default!r}, got {value!r}",
            )


def check_image(source: str, image: str, path: Path | str, where: str) -> None:
    """``image: current`` only where the source has a current image: else a
    :class:`MatrixError` at ``where`` naming the source, the field of its source.yaml that says
    why, and the reason, before anything runs."""
    if image == PINNED:
        return
    try:
        current_image_spec(source)
    except ImageRefused as refused:
        raise MatrixError(
            path,
            where,
            f"image current: source {refused.source} has no current image ({refused.where}: "
            f"{refused.why}); run it on its pinned image (image: pinned)",
        ) from None


def check_model_options(
    model: str, options: dict[str, Any], topology: Topology, path: Path | str, where: str
) -> None:
    """What the options ask of the model at this topology (its parallelism and checkpointing,
    and the shape its workload checks): a :class:`MatrixError` at ``where.<field>`` before
    anything runs."""
    try:
        check_case_options(model, options, topology.world_size)
    except WorkloadOptionError as error:
        raise MatrixError(path, f"{where}.{error.field}", str(error)) from None


def _check_steps(path: Path, where: str, settings: dict[str, Any]) -> int:
    if (settings["epochs"] is None) != (settings["epoch_samples"] is None):
        raise MatrixError(path, f"{where}.epochs", "epoch mode needs both epochs and epoch_samples")
    needed = settings["warmup_steps"] + settings["measured_steps"]
    total = settings["total_steps"] if settings["total_steps"] is not None else needed
    if needed > total:
        raise MatrixError(
            path,
            f"{where}.total_steps",
            f"warmup_steps + measured_steps = {needed} exceeds total_steps = {total}; "
            "raise total_steps or lower the others",
        )
    return total


def _check_suite(
    path: Path, where: str, suite: Suite, framework: str, settings: dict[str, Any]
) -> int:
    """A suite's model, steps, source, XLA, data folder, options and image, checked against its
    framework; the total steps its cases run."""
    plugin = FRAMEWORKS.get(framework)
    models = plugin.trained_models()
    if suite.model not in models:
        raise MatrixError(
            path,
            f"{where}.model",
            f"{suite.model!r} is not allowed{did_you_mean(suite.model, models)}; "
            f"allowed models: {', '.join(models)}",
        )
    total = _check_steps(path, where, settings)
    sources = ["dlperf", *SOURCES.names()]
    if settings["source"] not in sources:
        raise MatrixError(
            path,
            f"{where}.source",
            f"{settings['source']!r} is not allowed{did_you_mean(settings['source'], sources)}; "
            f"allowed values: {', '.join(sources)}",
        )
    for i, xla in enumerate(suite.xla):
        if ONOFF[xla] and not plugin.has_xla:
            raise MatrixError(
                path, f"{where}.xla[{i}]", f"{framework} has no XLA; allowed values: off"
            )
    if "real" in suite.dataset and not settings["data_dir"]:
        raise MatrixError(
            path, f"{where}.data_dir", "dataset 'real' needs data_dir (the data folder)"
        )
    for name, options in suite.variants.items():
        check_options(
            framework, settings["source"], suite.model, options, path, f"{where}.variants.{name}"
        )
    check_image(settings["source"], settings["image"], path, f"{where}.image")
    return total


def _check_case_count(path: Path, where: str, count: int) -> None:
    if count > MAX_EXPANDED_CASES:
        raise MatrixError(
            path,
            where,
            f"expands to {count} cases (topologies x batch sizes x precisions x xla x datasets "
            f"x variants), more than a matrix may hold ({MAX_EXPANDED_CASES}); split it into "
            "suites of the cases you mean to run",
        )


def _expand_suite(
    path: Path, where: str, suite: Suite, framework: str, base: dict[str, Any], profile: str
) -> list[Case]:
    settings = {**base, **suite.model_dump(include=set(SETTING_KEYS), exclude_unset=True)}
    total = _check_suite(path, where, suite, framework, settings)
    topologies = [parse_topology(label) for label in suite.topology]
    for name, options in suite.variants.items():
        for topology in topologies:
            check_model_options(suite.model, options, topology, path, f"{where}.variants.{name}")
    xlas = list(dict.fromkeys(ONOFF[x] for x in suite.xla))
    count = len(topologies) * len(suite.batch_size) * len(suite.precision) * len(xlas)
    _check_case_count(path, where, count * len(suite.dataset) * len(suite.variants))
    cases = []
    for topo, batch, precision, xla, dataset, (variant, options) in itertools.product(
        topologies, suite.batch_size, suite.precision, xlas, suite.dataset, suite.variants.items()
    ):
        cases.append(
            Case(
                model=suite.model,
                framework=framework,
                topology=topo,
                batch_size=batch,
                precision=precision,
                dataset=dataset,
                xla=xla,
                variant=str(variant),
                source=settings["source"],
                warmup_steps=settings["warmup_steps"],
                measured_steps=settings["measured_steps"],
                total_steps=total,
                repeats=settings["repeats"],
                timeout_s=float(settings["timeout_s"]),
                options=dict(options),
                data_dir=settings["data_dir"],
                profile=profile,
                epochs=settings["epochs"],
                epoch_samples=settings["epoch_samples"],
                drop_caches=settings["drop_caches"],
                loader_workers=settings["loader_workers"],
                amp_dtype=settings["amp_dtype"],
                image=settings["image"],
            )
        )
    return cases


def _profile_cases(
    path: Path, data: MatrixFile, profile: str, where: str, suites: list[Suite], base: dict
) -> list[Case]:
    cases: list[Case] = []
    for i, suite in enumerate(suites):
        framework = FRAMEWORKS.canonical(data.framework)
        cases.extend(_expand_suite(path, f"{where}[{i}]", suite, framework, base, profile))
        if len(cases) > MAX_EXPANDED_CASES:
            raise MatrixError(
                path,
                where,
                f"expands to more than {MAX_EXPANDED_CASES} cases; split the matrix into files "
                "of the cases you mean to run",
            )
    counts = Counter(case.id for case in cases)
    duplicates = sorted(case_id for case_id, count in counts.items() if count > 1)
    if duplicates:
        raise MatrixError(path, where, f"cases defined twice: {', '.join(duplicates)}")
    return cases


def load_matrix(path: Path | str, profile: str = DLPERF_PROFILE) -> Matrix:
    """The cases of ``profile``; every suite of every profile is checked whatever is chosen."""
    load("frameworks")
    path = Path(path)
    try:
        data = validate(MatrixFile, load_document(path), path)
    except ConfigError as error:
        raise MatrixError(error.path, error.field_path, error.message) from None
    if data.framework not in FRAMEWORKS:
        raise MatrixError(
            path,
            "framework",
            f"{data.framework!r} is not allowed{did_you_mean(data.framework, FRAMEWORKS.names())}"
            f"; allowed values: {', '.join(FRAMEWORKS.names())}",
        )
    if profile != DLPERF_PROFILE and profile not in data.profiles:
        raise UnknownProfile(
            path,
            "profiles",
            f"no profile {profile!r}{did_you_mean(profile, data.profiles)}; "
            f"profiles here: {', '.join([DLPERF_PROFILE, *data.profiles])}",
        )
    top = {**DEFAULTS, **(data.defaults.model_dump(exclude_unset=True) if data.defaults else {})}
    chosen = _profile_cases(path, data, DLPERF_PROFILE, "suites", data.suites, top)
    description = "the DLPerf protocol"
    for name, entry in data.profiles.items():
        base = {**top, **(entry.defaults.model_dump(exclude_unset=True) if entry.defaults else {})}
        where = f"profiles.{name}.suites" if entry.suites is not None else "suites"
        cases = _profile_cases(path, data, name, where, entry.suites or data.suites, base)
        if name == profile:
            chosen, description = cases, entry.description or name
    return Matrix(
        path=path,
        framework=FRAMEWORKS.canonical(data.framework),
        profile=profile,
        description=description,
        cases=chosen,
    )


def check_case_count(count: int, max_cases: int) -> None:
    """A selection of more than ``max_cases`` cases (:data:`MAX_CASES` unless the command line
    raised it) is refused: it was meant, or it was a list too many."""
    if count > max_cases:
        raise MatrixError(
            COMMAND_LINE,
            "--max-cases",
            f"the selection holds {count} cases, more than {max_cases}: narrow it (--model, "
            f"--batch, --nodes/--gpus, --variant, --profile), or pass --max-cases {count} to "
            "run them all",
        )


def _check_option_overrides(cases: list[Case], overrides: Overrides) -> None:
    """Every ``--option`` is one the cases' scripts take, the refusal naming the flag."""
    for case in cases:
        try:
            check_options(
                case.framework, case.source, case.model, overrides.options, COMMAND_LINE, "option"
            )
        except MatrixError as error:
            name = error.field_path.split(".", 1)[1]
            raise MatrixError(COMMAND_LINE, f"--option {name}", error.message) from None


def _narrowed(cases: list[Case], overrides: Overrides) -> list[Case]:
    """The cases of the models, variants, data sets and XLA setting asked for."""
    selected = [c for c in cases if not overrides.models or c.model in overrides.models]
    selected = [c for c in selected if not overrides.variants or c.variant in overrides.variants]
    if overrides.data_dir is not None:
        # The kit's own scripts read the data asked for from --data-dir, whatever data set the
        # matrix lists: their case runs on it (an upstream source's runs only what it lists).
        selected = [
            replace(c, dataset=d) if c.source == KIT_SOURCE else c
            for c in selected
            for d in (overrides.datasets if c.source == KIT_SOURCE and overrides.datasets
                      else (c.dataset,))
        ]  # fmt: skip
    selected = [c for c in selected if not overrides.datasets or c.dataset in overrides.datasets]
    return [c for c in selected if overrides.xla is None or c.xla == overrides.xla]


def _widened(items: list[Case], attr: str, values: tuple) -> list[Case]:
    """Each case once per value of ``attr`` asked for (none asked for: the cases as they are)."""
    if not values:
        return items
    seen, out = set(), []
    for case in items:
        for value in values:
            changed = replace(case, **{attr: value})
            if changed.id not in seen:
                seen.add(changed.id)
                out.append(changed)
    return out


def _check_amp_dtype(selected: list[Case], overrides: Overrides) -> None:
    if overrides.amp_dtype is not None and any(c.source != "dlperf" for c in selected):
        upstream = sorted({c.source for c in selected if c.source != "dlperf"})
        raise MatrixError(
            COMMAND_LINE,
            "--amp-dtype",
            f"sets the kit's own scripts' autocast dtype; the selection holds upstream sources "
            f"({', '.join(upstream)}), which run their own AMP (fp16 on the NGC images): select "
            "the kit's own cases (--matrix of a framework) or drop --amp-dtype",
        )


def _overridden(case: Case, changes: dict[str, Any], options: dict[str, Any]) -> Case:
    """``case`` with the command line's counts, settings and options, its steps still adding up."""
    updated = replace(case, **changes, options={**case.options, **options})
    if options:
        try:
            check_case_options(updated.model, updated.options, updated.topology.world_size)
        except WorkloadOptionError as error:
            raise MatrixError(COMMAND_LINE, f"--option {error.field}", str(error)) from None
    needed = updated.warmup_steps + updated.measured_steps
    # A total the matrix left implicit (warm-up + measured) follows the new steps both ways:
    # a shorter window must not run the old number of steps after it.
    implicit = case.total_steps == case.warmup_steps + case.measured_steps
    if implicit or needed > updated.total_steps:
        updated = replace(updated, total_steps=needed)
    return updated


def apply_overrides(cases: list[Case], overrides: Overrides) -> list[Case]:
    """Narrow the matrix to what the user asked for, and change repeat/step counts.

    A topology, batch or precision that the matrix does not list is still run when asked for
    explicitly: the user's command line wins over the file (make NODES=4 on a 1-node matrix).
    """
    _check_option_overrides(cases, overrides)
    selected = _narrowed(cases, overrides)
    topologies = tuple(Topology.parse(t) for t in overrides.topologies)
    selected = _widened(selected, "topology", topologies)
    selected = _widened(selected, "batch_size", overrides.batch_sizes)
    selected = _widened(selected, "precision", overrides.precisions)
    changes: dict[str, Any] = {}
    for attr in ("repeats", "warmup_steps", "measured_steps", "data_dir", "amp_dtype", "image"):
        value = getattr(overrides, attr)
        if value is not None:
            changes[attr] = value
    _check_amp_dtype(selected, overrides)
    if overrides.image is not None:
        for source in sorted({c.source for c in selected}):
            check_image(source, overrides.image, COMMAND_LINE, "--image")
    return [_overridden(case, changes, overrides.options) for case in selected]
