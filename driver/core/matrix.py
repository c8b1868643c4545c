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
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from driver.core.case import Case, Topology
from driver.plugins import load_all
from driver.registry import FRAMEWORKS, SOURCES

PRECISIONS = ("fp32", "amp")
DATASETS = ("synthetic", "real")
ONOFF = {"on": True, "off": False, True: True, False: False}

DEFAULTS: dict[str, Any] = {
    "warmup_steps": 20,
    "measured_steps": 100,
    "total_steps": None,  # None: warm-up + measured
    "repeats": 7,
    "timeout_s": 3600,
    "data_dir": None,
    "source": "dlperf",
    "epochs": None,
    "epoch_samples": None,
    "drop_caches": False,
    "loader_workers": "auto",
}
DEFAULT_TYPES: dict[str, tuple[type, ...]] = {
    "warmup_steps": (int,),
    "measured_steps": (int,),
    "total_steps": (int, type(None)),
    "repeats": (int,),
    "timeout_s": (int, float),
    "data_dir": (str, type(None)),
    "source": (str,),
    "epochs": (int, float, type(None)),
    "epoch_samples": (int, type(None)),
    "drop_caches": (bool,),
    "loader_workers": (int, str),
}
SUITE_KEYS = {"model", "topology", "batch_size", "precision", "xla", "dataset", "variants"}
SUITE_KEYS |= set(DEFAULTS)
TOP_KEYS = {"framework", "defaults", "suites", "profiles"}
PROFILE_KEYS = {"description", "defaults", "suites"}
DLPERF_PROFILE = "dlperf"


class MatrixError(ValueError):
    def __init__(self, path: Path | str, field_path: str, message: str) -> None:
        super().__init__(f"{path}: {field_path}: {message}")
        self.path, self.field_path = str(path), field_path


@dataclass(frozen=True)
class Overrides:
    """What the user narrows or changes on the command line (make NODES=4 BATCH=64 ...)."""

    models: tuple[str, ...] = ()
    topologies: tuple[str, ...] = ()  # e.g. ("4n32g",) from NODES=4 GPUS=8
    batch_sizes: tuple[int | str, ...] = ()
    precisions: tuple[str, ...] = ()
    xla: bool | None = None
    datasets: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    repeats: int | None = None
    warmup_steps: int | None = None
    measured_steps: int | None = None
    data_dir: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Matrix:
    path: Path
    framework: str
    profile: str
    description: str
    cases: list[Case]


def _fail(path: Path, where: str, message: str) -> MatrixError:
    return MatrixError(path, where, message)


def _check_keys(path: Path, where: str, data: dict, allowed: set[str]) -> None:
    for key in data:
        if key not in allowed:
            raise _fail(
                path,
                f"{where}.{key}" if where else str(key),
                f"unknown key; allowed keys: {', '.join(sorted(allowed))}",
            )


def _as_list(path: Path, where: str, value: Any) -> list:
    if isinstance(value, list):
        if not value:
            raise _fail(path, where, "empty list; give at least one value")
        return value
    return [value]


def _validated_defaults(path: Path, where: str, data: Any, base: dict[str, Any]) -> dict[str, Any]:
    if data is None:
        return dict(base)
    if not isinstance(data, dict):
        raise _fail(path, where, f"must be a mapping, got {type(data).__name__}")
    _check_keys(path, where, data, set(DEFAULTS))
    merged = dict(base)
    for key, value in data.items():
        types = DEFAULT_TYPES[key]
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise _fail(path, f"{where}.{key}", f"must be {names}, got {value!r}")
        merged[key] = value
    return merged


def _check_steps(path: Path, where: str, settings: dict[str, Any]) -> int:
    for key in ("warmup_steps", "measured_steps", "repeats"):
        minimum = 0 if key == "warmup_steps" else 1
        if settings[key] < minimum:
            raise _fail(path, f"{where}.{key}", f"must be >= {minimum}, got {settings[key]}")
    if settings["timeout_s"] <= 0:
        raise _fail(path, f"{where}.timeout_s", f"must be positive, got {settings['timeout_s']}")
    if settings["loader_workers"] != "auto" and (
        isinstance(settings["loader_workers"], str) or settings["loader_workers"] < 0
    ):
        raise _fail(
            path,
            f"{where}.loader_workers",
            f"must be 'auto' or a count >= 0, got {settings['loader_workers']!r}",
        )
    if (settings["epochs"] is None) != (settings["epoch_samples"] is None):
        raise _fail(path, f"{where}.epochs", "epoch mode needs both epochs and epoch_samples")
    if settings["epochs"] is not None and (
        settings["epochs"] <= 0 or settings["epoch_samples"] <= 0
    ):
        raise _fail(path, f"{where}.epochs", "epochs and epoch_samples must be positive")
    needed = settings["warmup_steps"] + settings["measured_steps"]
    total = settings["total_steps"] if settings["total_steps"] is not None else needed
    if needed > total:
        raise _fail(
            path,
            f"{where}.total_steps",
            f"warmup_steps + measured_steps = {needed} exceeds total_steps = {total}; "
            "raise total_steps or lower the others",
        )
    return total


def _batch(path: Path, where: str, value: Any) -> int | str:
    if value == "max":
        return "max"
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise _fail(path, where, f"must be a positive integer or 'max', got {value!r}")
    return value


def _choice(path: Path, where: str, value: Any, allowed: Iterable[Any]) -> Any:
    allowed = list(allowed)
    if value not in allowed:
        shown = ", ".join(str(a) for a in allowed)
        raise _fail(path, where, f"{value!r} is not allowed; allowed values: {shown}")
    return value


def _expand_suite(
    path: Path, where: str, suite: Any, framework: str, base: dict[str, Any], profile: str
) -> list[Case]:
    if not isinstance(suite, dict):
        raise _fail(path, where, "each suite must be a mapping")
    _check_keys(path, where, suite, SUITE_KEYS)
    plugin = FRAMEWORKS.get(framework)
    if "model" not in suite:
        raise _fail(path, f"{where}.model", f"missing; allowed models: {', '.join(plugin.models)}")
    model = _choice(path, f"{where}.model", suite["model"], plugin.models)
    settings = _validated_defaults(
        path, where, {k: v for k, v in suite.items() if k in DEFAULTS}, base
    )
    total = _check_steps(path, where, settings)
    _choice(path, f"{where}.source", settings["source"], ["dlperf", *SOURCES.names()])

    topologies = []
    for i, label in enumerate(_as_list(path, f"{where}.topology", suite.get("topology", "1n1g"))):
        try:
            topologies.append(Topology.parse(str(label)))
        except ValueError as error:
            raise _fail(path, f"{where}.topology[{i}]", str(error)) from None
    batches = [
        _batch(path, f"{where}.batch_size[{i}]", b)
        for i, b in enumerate(_as_list(path, f"{where}.batch_size", suite.get("batch_size", 32)))
    ]
    precisions = [
        _choice(path, f"{where}.precision[{i}]", p, PRECISIONS)
        for i, p in enumerate(_as_list(path, f"{where}.precision", suite.get("precision", "fp32")))
    ]
    xla_allowed = ["off", False] + (["on", True] if plugin.has_xla else [])
    xlas = [
        ONOFF[_choice(path, f"{where}.xla[{i}]", x, xla_allowed)]
        for i, x in enumerate(_as_list(path, f"{where}.xla", suite.get("xla", "off")))
    ]
    datasets = [
        _choice(path, f"{where}.dataset[{i}]", d, DATASETS)
        for i, d in enumerate(_as_list(path, f"{where}.dataset", suite.get("dataset", "synthetic")))
    ]
    if "real" in datasets and not settings["data_dir"]:
        raise _fail(path, f"{where}.data_dir", "dataset 'real' needs data_dir (the data folder)")
    variants = suite.get("variants", {"default": {}})
    if not isinstance(variants, dict) or not variants:
        raise _fail(path, f"{where}.variants", "must be a non-empty mapping of name -> options")
    for name, options in variants.items():
        if not isinstance(options, dict):
            raise _fail(path, f"{where}.variants.{name}", "must be a mapping of option -> value")
        if not str(name).replace("_", "").replace("-", "").isalnum():
            raise _fail(path, f"{where}.variants.{name}", "names use letters, digits, - and _")

    cases = []
    for topo, batch, precision, xla, dataset, (variant, options) in itertools.product(
        topologies, batches, precisions, xlas, datasets, variants.items()
    ):
        cases.append(
            Case(
                model=model,
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
            )
        )
    return cases


def load_matrix(path: Path | str, profile: str = DLPERF_PROFILE) -> Matrix:
    load_all()
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise _fail(path, "(file)", "does not exist") from None
    except yaml.YAMLError as error:
        raise _fail(path, "(file)", f"is not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise _fail(path, "(file)", "must be a mapping with keys framework, suites")
    _check_keys(path, "", data, TOP_KEYS)
    framework = data.get("framework")
    if framework not in FRAMEWORKS:
        raise _fail(
            path,
            "framework",
            f"{framework!r} is not allowed; allowed values: {', '.join(FRAMEWORKS.names())}",
        )
    base = _validated_defaults(path, "defaults", data.get("defaults"), DEFAULTS)
    suites, description = data.get("suites"), "the DLPerf protocol"
    if profile != DLPERF_PROFILE:
        profiles = data.get("profiles") or {}
        if profile not in profiles:
            raise _fail(
                path,
                "profiles",
                f"no profile {profile!r}; profiles here: {', '.join([DLPERF_PROFILE, *profiles])}",
            )
        chosen = profiles[profile]
        where = f"profiles.{profile}"
        if not isinstance(chosen, dict):
            raise _fail(path, where, "must be a mapping")
        _check_keys(path, where, chosen, PROFILE_KEYS)
        base = _validated_defaults(path, f"{where}.defaults", chosen.get("defaults"), base)
        suites = chosen.get("suites", suites)
        description = str(chosen.get("description", profile))
    if not isinstance(suites, list) or not suites:
        raise _fail(path, "suites", "must be a non-empty list of suites")
    cases: list[Case] = []
    for i, suite in enumerate(suites):
        cases.extend(_expand_suite(path, f"suites[{i}]", suite, framework, base, profile))
    ids = [case.id for case in cases]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise _fail(path, "suites", f"cases defined twice: {', '.join(duplicates)}")
    return Matrix(
        path=path, framework=framework, profile=profile, description=description, cases=cases
    )


def apply_overrides(cases: list[Case], overrides: Overrides) -> list[Case]:
    """Narrow the matrix to what the user asked for, and change repeat/step counts.

    A topology, batch or precision that the matrix does not list is still run when asked for
    explicitly: the user's command line wins over the file (make NODES=4 on a 1-node matrix).
    """
    from dataclasses import replace

    selected = [c for c in cases if not overrides.models or c.model in overrides.models]
    selected = [c for c in selected if not overrides.variants or c.variant in overrides.variants]
    selected = [c for c in selected if not overrides.datasets or c.dataset in overrides.datasets]
    selected = [c for c in selected if overrides.xla is None or c.xla == overrides.xla]

    def widen(items: list[Case], attr: str, values: tuple) -> list[Case]:
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

    selected = widen(selected, "topology", tuple(Topology.parse(t) for t in overrides.topologies))
    selected = widen(selected, "batch_size", overrides.batch_sizes)
    selected = widen(selected, "precision", overrides.precisions)
    changes: dict[str, Any] = {}
    for attr in ("repeats", "warmup_steps", "measured_steps", "data_dir"):
        value = getattr(overrides, attr)
        if value is not None:
            changes[attr] = value
    result = []
    for case in selected:
        updated = replace(case, **changes, options={**case.options, **overrides.options})
        needed = updated.warmup_steps + updated.measured_steps
        # A total the matrix left implicit (warm-up + measured) follows the new steps both ways:
        # a shorter window must not run the old number of steps after it.
        implicit = case.total_steps == case.warmup_steps + case.measured_steps
        if implicit or needed > updated.total_steps:
            updated = replace(updated, total_steps=needed)
        result.append(updated)
    return result
