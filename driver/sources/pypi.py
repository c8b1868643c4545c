"""Upstream sources run from their PyPI release, unchanged, on CPU at tiny shapes.

A source whose official code is published on PyPI (``tf-models-official``) has a ``pypi:``
section in its ``source.yaml``: the package and the requirements file that pins its environment
(``.venvs/<source>``, created like a framework's, :func:`driver.frameworks.envs.ensure_env`),
how the release differs from the commit pinned for the GPU images and which one ran, and per
model the argv of the released entry point with tiny shapes chosen through the upstream's own
flags and config files of ours. A source whose release cannot train a model says why
(``runs: false``, ``why_not``) and registers nothing.

Each runnable section registers the source plug-in ``<source>-pypi`` (a case's ``source:``),
whose node command prints the run header, runs the optional ``prepare`` argv (input files the
upstream reads, written by code of ours) and the upstream argv in a fresh temporary folder, and
exits with the upstream's exit code. Its log is read by the source's own parser. Placeholders:
:data:`PLACEHOLDERS`. One node, one process: the upstream's own launchers are the GPU path.
"""

from __future__ import annotations

import functools
import shlex
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from driver.launchers.base import NodeRank
from driver.model.case import Case
from driver.parsers._runheader import RunHeader, header_line
from driver.schema import ConfigError, StrictModel, validate
from driver.sources.base import (
    HOST_PROBE,
    SOURCES,
    data_and_precision_problems,
    model_launch,
    refuse_unsupported,
    run_header,
)
from driver.sources.spec import SourceError, SourceSpec
from driver.sources.upstream import SPECS

SUFFIX = "-pypi"
PLACEHOLDERS = {
    "python": "the source environment's interpreter (.venvs/<source>/bin/python)",
    "config_dir": "the source's pypi/ folder (config files of ours)",
    "batch": "per-device batch",
    "global_batch": "batch x world size",
    "steps": "steps the source runs (warm-up + measured)",
    "warmup": "warm-up steps of the window",
    "measured": "measured steps of the window",
    "log_every": "the model's log interval in steps",
}


class PypiModel(StrictModel):
    argv: list[str] = Field(min_length=1)
    prepare: list[str] = Field(default_factory=list)  # run first, in the same folder
    log_every: int = Field(ge=1)
    step_offset: int = Field(default=0, ge=0)
    logging: Literal["rank0", "per-node", "per-process"] = "per-node"
    datasets: list[str] = Field(default_factory=lambda: ["synthetic"])
    precisions: list[str] = Field(default_factory=lambda: ["fp32"])
    notes: str = ""


class PypiSection(StrictModel):
    package: str  # the release(s), as pip names them
    python: str = "3.11"
    runs: bool
    differs: str = Field(min_length=1)  # release vs the pinned commit, and which ran
    requirements: str | None = None  # beside source.yaml; required when it runs
    why_not: str = ""  # required when it does not run
    # Left out of `dlperf envs` without names (CI's `make envs`) where the environment is too
    # big for every machine that runs the suite; made by name (`make envs ENVS=<source>`), and
    # the tests that need it skip without it. The reason, where false.
    by_name_only: str = ""
    models: dict[str, PypiModel] = Field(default_factory=dict)


def _check_placeholders(path: Path, where: str, items: list[str]) -> None:
    for i, item in enumerate(items):
        for _literal, name, _spec, _conversion in string.Formatter().parse(item):
            if name is not None and name not in PLACEHOLDERS:
                raise SourceError(
                    path,
                    f"{where}[{i}]",
                    f"unknown placeholder {{{name}}}; known: {', '.join(PLACEHOLDERS)}",
                )


def load_section(spec: SourceSpec) -> PypiSection | None:
    """The ``pypi:`` section of a source's file (None where it has none), checked."""
    data = spec.pypi
    if data is None:
        return None
    try:
        section = validate(PypiSection, data, spec.path)
    except ConfigError as error:
        raise SourceError(error.path, f"pypi.{error.field_path}", error.message) from None
    if section.runs:
        if not section.requirements or not (spec.folder / section.requirements).is_file():
            raise SourceError(
                spec.path,
                "pypi.requirements",
                f"a running section needs its pinned requirements file beside source.yaml, got "
                f"{section.requirements!r}",
            )
        if not section.models:
            raise SourceError(spec.path, "pypi.models", "a running section needs its models")
    elif not section.why_not.strip():
        raise SourceError(spec.path, "pypi.why_not", "say why the release does not run")
    for model, launch in section.models.items():
        if model not in spec.launches:
            raise SourceError(
                spec.path,
                f"pypi.models.{model}",
                f"not a model of the source ({', '.join(sorted(spec.launches))})",
            )
        _check_placeholders(spec.path, f"pypi.models.{model}.argv", launch.argv)
        _check_placeholders(spec.path, f"pypi.models.{model}.prepare", launch.prepare)
    return section


@dataclass(frozen=True)
class SourceEnv:
    """What :func:`driver.frameworks.envs.ensure_env` reads of a framework, for a source's venv."""

    name: str
    display: str
    python: str
    cpu_requirements: Path
    venv_library_globs: tuple[str, ...] = ()
    by_name_only: str = ""  # why `dlperf envs` makes it only when named


class PypiSource:
    """The PyPI release of an upstream source; ``SOURCES.get("<source>-pypi")()`` builds one."""

    image = ""  # no image: the local runtime runs it from .venvs/<source>
    workdir = ""  # the node command makes and enters its own temporary folder

    def __init__(self, spec: SourceSpec, section: PypiSection) -> None:
        self.spec, self.section = spec, section
        self.name = spec.name + SUFFIX
        self.framework = spec.framework
        self.models = tuple(section.models)
        self.repository = spec.repository
        self.commit = spec.commit  # the GPU images' pin (None: a release); section.package ran
        self.parser = spec.parser
        self.env = SourceEnv(
            name=spec.name,
            display=f"{spec.title} ({section.package})",
            python=section.python,
            cpu_requirements=spec.folder / str(section.requirements),
            by_name_only=section.by_name_only,
        )

    def launch_for(self, case: Case) -> PypiModel:
        launch = model_launch(self.section.models, case, self.name, self.models)
        problems = data_and_precision_problems(case, launch.datasets, launch.precisions)
        if case.xla:
            problems.append("XLA")
        if case.options:
            problems.append(f"options {sorted(case.options)} (it has none)")
        if case.topology.world_size != 1:
            problems.append(f"topology {case.topology.label} (one process on one node)")
        refuse_unsupported(case, self.name, problems)
        return launch

    def python(self) -> str:
        from driver.frameworks.envs import VENVS

        return str(VENVS / self.env.name / "bin" / "python")

    def context(self, case: Case, rank: NodeRank, batch_size: int) -> dict[str, Any]:
        launch = self.launch_for(case)
        warmup, measured, total = case.window_for(batch_size)
        for label, steps in (("warm-up", warmup), ("measured", measured)):
            if steps <= 0 or steps % launch.log_every:
                raise ValueError(
                    f"{case.id}: {label} steps {steps} must be a positive multiple of the log "
                    f"interval {launch.log_every} of {self.name} {case.model}"
                )
        return {
            "python": self.python(),
            "config_dir": str(self.spec.folder / "pypi"),
            "batch": batch_size,
            "global_batch": batch_size * rank.world_size,
            "steps": total,
            "warmup": warmup,
            "measured": measured,
            "log_every": launch.log_every,
        }

    def header(self, case: Case, rank: NodeRank, batch_size: int) -> RunHeader:
        launch = self.launch_for(case)
        return run_header(self.name, case, rank, batch_size, launch.logging, launch.step_offset)

    def command(self, case: Case, rank: NodeRank, batch_size: int) -> list[str]:
        launch = self.launch_for(case)
        context = self.context(case, rank, batch_size)
        argv = [item.format_map(context) for item in launch.argv]
        prepare = [item.format_map(context) for item in launch.prepare]
        # Every value is quoted into the script: nothing from a config reaches the shell raw.
        steps = [
            'printf "%s\\n" "$1"',
            HOST_PROBE,
            'scratch=$(mktemp -d "${TMPDIR:-/tmp}/dlperf-pypi.XXXXXX") || exit 1',
            'cd "$scratch" || exit 1',
        ]
        if prepare:
            steps.append(f'{shlex.join(prepare)} || {{ rc=$?; rm -rf "$scratch"; exit $rc; }}')
        steps += [shlex.join(argv), "rc=$?", 'cd / && rm -rf "$scratch"', "exit $rc"]
        header = header_line(self.header(case, rank, batch_size))
        return ["sh", "-c", "; ".join(steps), "dlperf-pypi", header]


def ensure_source_env(source: PypiSource, log=print) -> Path:  # noqa: ANN001
    """Create ``.venvs/<source>`` from its pinned requirements once (like a framework's)."""
    from driver.frameworks.envs import ensure_env

    return ensure_env(source.env, log=log)  # type: ignore[arg-type]


def ensure_case_envs(cases: list[Case], log=print) -> None:  # noqa: ANN001
    """Make the environment of every PyPI source the cases run (``dlperf run``, local)."""
    for name in sorted({case.source for case in cases}):
        source = SOURCES.get(name)() if name in SOURCES else None
        if isinstance(source, PypiSource):
            ensure_source_env(source, log=log)


SECTIONS: dict[str, PypiSection] = {}
for _name, _spec in SPECS.items():
    _section = load_section(_spec)
    if _section is None:
        continue
    SECTIONS[_name] = _section
    if _section.runs:
        SOURCES.add(_name + SUFFIX, functools.partial(PypiSource, _spec, _section))
