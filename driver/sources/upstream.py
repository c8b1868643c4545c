"""Upstream sources: one class, one YAML file of data per source (the "Source" column of DLPerf).

Each upstream source lives in its framework's folder as ``source.yaml`` beside the Dockerfile that
clones it at its pinned commit and the case matrix of its suites:

* ``NVIDIADeepLearningExamples/<Framework>/source.yaml`` (NGC PyTorch, TF1, MXNet)
* ``<Framework>/upstream/source.yaml`` (each framework's official benchmark repository)

The file names the repository and the full commit, the images.lock keys of the image that holds
the code and of its base, the log parser, and per model the upstream launcher and flags as an
argv template (``{batch}``, ``{node_rank}``, ``{hosts_slots}``, ...; see :data:`PLACEHOLDERS`)
plus flag blocks chosen by precision, XLA, dataset and the source's options (``dali``, ...).
Ranks and hosts come from the driver's :class:`NodeRank`, so nobody edits a per-node flag.

Every node command is ``sh -c <wrapper> dlperf-upstream <header> <upstream argv...>``: the
wrapper prints the run header (``driver.parsers._upstream``), enters the model's folder, runs the
upstream command unchanged and, where the source writes its step log to a file (DLLogger JSON),
prints that file after the run. With ``launch: mpi-head`` (Horovod sources) node 0 runs
``mpirun`` for every rank over SSH into the other nodes' containers; those nodes run an sshd and
wait for the job's ``orted`` to come and go.
"""

from __future__ import annotations

import functools
import re
import shlex
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from driver.core.case import Case
from driver.frameworks.base import REPO_ROOT
from driver.launchers.base import NodeRank
from driver.parsers._upstream import LOGGING_MODES, RunHeader, header_line
from driver.registry import SOURCES

SOURCE_GLOBS = ("NVIDIADeepLearningExamples/*/source.yaml", "*/upstream/source.yaml")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
LAUNCH_MODES = ("per-node", "mpi-head")
PLACEHOLDERS = {
    "batch": "per-device batch",
    "node_batch": "batch of one node (batch x processes per node)",
    "global_batch": "batch x world size",
    "steps": "steps the source runs (case steps + the model's extra_steps)",
    "run_samples": "global samples of those steps (steps x global batch), for epoch-sized runs",
    "warmup": "warm-up steps of the window",
    "measured": "measured steps of the window",
    "log_every": "the model's log interval in steps",
    "nodes": "node count",
    "node_rank": "this node's rank",
    "procs": "processes (GPUs) per node",
    "world": "world size",
    "master_addr": "address of node 0",
    "master_port": "the case's rendezvous port",
    "node_addr": "this node's address",
    "hosts": "node addresses, comma-separated",
    "hosts_slots": "addr:procs per node, comma-separated (mpirun -H)",
    "worker_hosts": "addr:master_port per node, comma-separated (tf.distribute workers)",
    "gpus": "0,1,...,procs-1",
    "data_dir": "the case's data folder",
    "ssh_port": "the containers' sshd port (mpi-head sources)",
    "options": "the source's options, e.g. {options[dali]}",
}
CONDITION_KEYS = ("precision", "dataset", "xla", "distributed", "multinode")
SOURCE_KEYS = {
    "name", "framework", "title", "repository", "commit", "found", "image", "base_image",
    "parser", "workdir", "ssh_port", "notes", "models",
    "pypi",  # the CPU run from PyPI: read by driver/sources/pypi.py
}  # fmt: skip
MODEL_KEYS = {
    "commit", "dir", "launch", "logging", "step_offset", "extra_steps", "log_every", "datasets",
    "precisions", "xla", "options", "collect", "argv", "flags", "notes",
}  # fmt: skip
WORKER_SCRIPT = (
    'printf "%s\\n" "$1"; /usr/sbin/sshd -p {port} || exit 1; n=0; '
    "until pgrep -x orted >/dev/null || pgrep -x prted >/dev/null; do n=$((n+1)); "
    'if [ "$n" -ge 900 ]; then echo "dlperf: no MPI job reached this node" >&2; exit 1; fi; '
    "sleep 1; done; while pgrep -x orted >/dev/null || pgrep -x prted >/dev/null; do sleep 1; "
    "done"
)


class SourceError(ValueError):
    def __init__(self, path: Path | str, where: str, message: str) -> None:
        super().__init__(f"{path}: {where}: {message}")


@dataclass(frozen=True)
class FlagBlock:
    when: dict[str, tuple[Any, ...]]  # condition -> allowed values
    args: tuple[str, ...]


@dataclass(frozen=True)
class ModelLaunch:
    model: str
    commit: str
    directory: str  # the model's folder in the image (the wrapper cds into it)
    launch: str
    logging: str
    step_offset: int
    extra_steps: int
    log_every: int
    datasets: tuple[str, ...]
    precisions: tuple[str, ...]
    xla: bool
    options: dict[str, Any]
    collect: str | None
    argv: tuple[str, ...]
    flags: tuple[FlagBlock, ...]
    notes: str = ""


@dataclass(frozen=True)
class SourceSpec:
    name: str
    framework: str
    title: str
    repository: str
    commit: str
    found: str  # where the commit was found (provenance)
    image: str  # images.lock key of the built image
    base_image: str  # images.lock key of its FROM image
    parser: str
    workdir: str
    ssh_port: int
    path: Path
    launches: dict[str, ModelLaunch] = field(default_factory=dict)
    notes: str = ""

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def dockerfile(self) -> Path:
        return self.folder / "Dockerfile"

    @property
    def matrix_file(self) -> Path:
        return self.folder / "matrix.yaml"

    @property
    def commits(self) -> set[str]:
        return {self.commit} | {launch.commit for launch in self.launches.values()}


def _need(path: Path, where: str, data: Mapping, key: str, kind: type | tuple[type, ...]) -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise SourceError(path, f"{where}{key}", f"must be {names}, got {value!r}")
    return value


def _strings(path: Path, where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str | int | float) for v in value):
        raise SourceError(path, where, f"must be a list of strings, got {value!r}")
    return tuple(str(v) for v in value)


def _check_template(path: Path, where: str, text: str, options: Mapping[str, Any]) -> None:
    for _literal, name, _spec, _conversion in string.Formatter().parse(text):
        if name is None:
            continue
        root = name.split("[", 1)[0].split(".", 1)[0]
        if root not in PLACEHOLDERS:
            raise SourceError(
                path, where, f"unknown placeholder {{{name}}}; known: {', '.join(PLACEHOLDERS)}"
            )
        if root == "options":
            key = name[len("options[") : -1] if name.startswith("options[") else ""
            if key not in options:
                raise SourceError(path, where, f"{{{name}}} names no option of the model")


def _launch(path: Path, model: str, data: Any, default_commit: str) -> ModelLaunch:
    where = f"models.{model}."
    if not isinstance(data, dict):
        raise SourceError(path, f"models.{model}", "must be a mapping")
    unknown = set(data) - MODEL_KEYS
    if unknown:
        raise SourceError(
            path, where + sorted(unknown)[0], f"unknown key; allowed: {sorted(MODEL_KEYS)}"
        )
    commit = str(data.get("commit", default_commit))
    if not COMMIT.match(commit):
        raise SourceError(path, where + "commit", f"must be a full 40-hex commit, got {commit!r}")
    launch = data.get("launch", "per-node")
    if launch not in LAUNCH_MODES:
        raise SourceError(path, where + "launch", f"must be one of {LAUNCH_MODES}")
    logging = data.get("logging", "rank0")
    if logging not in LOGGING_MODES:
        raise SourceError(path, where + "logging", f"must be one of {LOGGING_MODES}")
    options = data.get("options", {}) or {}
    if not isinstance(options, dict):
        raise SourceError(path, where + "options", "must be a mapping of option -> default")
    argv = _strings(path, where + "argv", data.get("argv"))
    if not argv:
        raise SourceError(path, where + "argv", "must not be empty")
    for i, item in enumerate(argv):
        _check_template(path, f"{where}argv[{i}]", item, options)
    blocks = []
    for i, block in enumerate(data.get("flags", []) or []):
        at = f"{where}flags[{i}]"
        if not isinstance(block, dict) or set(block) - {"when", "args"}:
            raise SourceError(path, at, "must be a mapping with keys when, args")
        when = block.get("when", {}) or {}
        if not isinstance(when, dict):
            raise SourceError(path, at + ".when", "must be a mapping")
        conditions = {}
        for key, value in when.items():
            if key not in CONDITION_KEYS and key not in options:
                raise SourceError(
                    path, f"{at}.when.{key}", f"not one of {CONDITION_KEYS} or the model's options"
                )
            conditions[key] = tuple(value) if isinstance(value, list) else (value,)
        args = _strings(path, at + ".args", block.get("args", []))
        for j, item in enumerate(args):
            _check_template(path, f"{at}.args[{j}]", item, options)
        blocks.append(FlagBlock(when=conditions, args=args))
    for key in ("step_offset", "extra_steps"):
        if not isinstance(data.get(key, 0), int) or data.get(key, 0) < 0:
            raise SourceError(path, where + key, "must be an integer >= 0")
    log_every = data.get("log_every", 1)
    if not isinstance(log_every, int) or log_every < 1:
        raise SourceError(path, where + "log_every", "must be an integer >= 1")
    collect = data.get("collect")
    if collect is not None and not (isinstance(collect, str) and collect.startswith("/")):
        raise SourceError(path, where + "collect", "must be an absolute path in the container")
    directory = _need(path, where, data, "dir", str)
    return ModelLaunch(
        model=model,
        commit=commit,
        directory=directory,
        launch=launch,
        logging=logging,
        step_offset=int(data.get("step_offset", 0)),
        extra_steps=int(data.get("extra_steps", 0)),
        log_every=log_every,
        datasets=_strings(path, where + "datasets", data.get("datasets", ["synthetic"])),
        precisions=_strings(path, where + "precisions", data.get("precisions", ["fp32", "amp"])),
        xla=bool(data.get("xla", False)),
        options=dict(options),
        collect=collect,
        argv=argv,
        flags=tuple(blocks),
        notes=str(data.get("notes", "")),
    )


def load_spec(path: Path) -> SourceSpec:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise SourceError(path, "(file)", f"is not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise SourceError(path, "(file)", "must be a mapping")
    unknown = set(data) - SOURCE_KEYS
    if unknown:
        raise SourceError(path, sorted(unknown)[0], f"unknown key; allowed: {sorted(SOURCE_KEYS)}")
    commit = _need(path, "", data, "commit", str)
    if not COMMIT.match(commit):
        raise SourceError(path, "commit", f"must be a full 40-hex commit, got {commit!r}")
    models = data.get("models")
    if not isinstance(models, dict) or not models:
        raise SourceError(path, "models", "must be a non-empty mapping of model -> launch")
    port = data.get("ssh_port", 2222)
    if not isinstance(port, int) or not 0 < port < 65536:
        raise SourceError(path, "ssh_port", "must be a TCP port")
    return SourceSpec(
        name=_need(path, "", data, "name", str),
        framework=_need(path, "", data, "framework", str),
        title=_need(path, "", data, "title", str),
        repository=_need(path, "", data, "repository", str),
        commit=commit,
        found=_need(path, "", data, "found", str),
        image=_need(path, "", data, "image", str),
        base_image=_need(path, "", data, "base_image", str),
        parser=_need(path, "", data, "parser", str),
        workdir=_need(path, "", data, "workdir", str),
        ssh_port=port,
        path=path,
        launches={str(m): _launch(path, str(m), d, commit) for m, d in models.items()},
        notes=str(data.get("notes", "")),
    )


def _matches(block: FlagBlock, facts: Mapping[str, Any]) -> bool:
    return all(facts.get(key) in allowed for key, allowed in block.when.items())


def wrapper_script(directory: str, collect: str | None) -> str:
    """The node's shell program: header, cd, the upstream command, then its step-log file."""
    parts = ['printf "%s\\n" "$1"', "shift", f"cd {shlex.quote(directory)} || exit 1"]
    if collect:
        quoted = shlex.quote(collect)
        parts.append(f"rm -f {quoted} && mkdir -p {shlex.quote(str(Path(collect).parent))}")
    parts += ['"$@"', "rc=$?"]
    if collect:
        parts.append(f"if [ -f {quoted} ]; then cat {quoted}; fi")
    parts.append("exit $rc")
    return "; ".join(parts)


class UpstreamSource:
    """A pinned upstream source; ``SOURCES.get(name)()`` builds one from its spec."""

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.framework = spec.framework
        self.models = tuple(spec.launches)
        self.repository = spec.repository
        self.commit = spec.commit
        self.image = spec.image
        self.parser = spec.parser
        self.workdir = spec.workdir

    def launch_for(self, case: Case) -> ModelLaunch:
        launch = self.spec.launches.get(case.model)
        if launch is None:
            raise ValueError(f"source {self.name} has no {case.model}; it has {self.models}")
        problems = []
        if case.dataset not in launch.datasets:
            problems.append(f"dataset {case.dataset} (it runs {', '.join(launch.datasets)})")
        if case.precision not in launch.precisions:
            problems.append(f"precision {case.precision}")
        if case.xla and not launch.xla:
            problems.append("XLA")
        if case.dataset == "real" and not case.data_dir:
            problems.append("dataset real without data_dir")
        unknown = sorted(set(case.options) - set(launch.options))
        if unknown:
            problems.append(
                f"option(s) {', '.join(unknown)} (options: {', '.join(launch.options) or 'none'})"
            )
        if problems:
            raise ValueError(
                f"{case.id}: source {self.name} {case.model} does not support "
                + "; ".join(problems)
            )
        return launch

    def header(self, case: Case, rank: NodeRank, batch_size: int) -> RunHeader:
        launch = self.launch_for(case)
        warmup, measured, _total = case.window_for(batch_size)
        return RunHeader(
            source=self.name,
            model=case.model,
            node_rank=rank.node_rank,
            nodes=rank.nodes,
            procs_per_node=rank.procs_per_node,
            batch=batch_size,
            logging=launch.logging,
            step_offset=launch.step_offset,
            warmup_steps=warmup,
            measured_steps=measured,
        )

    def context(self, case: Case, rank: NodeRank, batch_size: int) -> dict[str, Any]:
        launch = self.launch_for(case)
        warmup, measured, total = case.window_for(batch_size)
        for label, steps in (("warm-up", warmup), ("measured", measured)):
            if steps % launch.log_every:
                raise ValueError(
                    f"{case.id}: {label} steps {steps} are not a multiple of the log interval "
                    f"{launch.log_every} of {self.name} {case.model}"
                )
        addrs = list(rank.node_addrs) or [rank.master_addr]
        procs = rank.procs_per_node
        return {
            "batch": batch_size,
            "node_batch": batch_size * procs,
            "global_batch": batch_size * rank.world_size,
            "steps": total + launch.extra_steps,
            "run_samples": (total + launch.extra_steps) * batch_size * rank.world_size,
            "warmup": warmup,
            "measured": measured,
            "log_every": launch.log_every,
            "nodes": rank.nodes,
            "node_rank": rank.node_rank,
            "procs": procs,
            "world": rank.world_size,
            "master_addr": rank.master_addr,
            "master_port": rank.master_port,
            "node_addr": addrs[rank.node_rank] if rank.node_rank < len(addrs) else addrs[0],
            "hosts": ",".join(addrs),
            "hosts_slots": ",".join(f"{a}:{procs}" for a in addrs),
            "worker_hosts": ",".join(f"{a}:{rank.master_port}" for a in addrs),
            "gpus": ",".join(str(i) for i in range(procs)),
            "data_dir": case.data_dir or "",
            "ssh_port": self.spec.ssh_port,
            "options": {**launch.options, **case.options},
        }

    def launch_argv(self, case: Case, rank: NodeRank, batch_size: int) -> list[str]:
        """The upstream launcher's argv for this node (what a user would type, filled in)."""
        launch = self.launch_for(case)
        context = self.context(case, rank, batch_size)
        facts = {
            "precision": case.precision,
            "dataset": case.dataset,
            "xla": case.xla,
            "distributed": rank.world_size > 1,
            "multinode": rank.nodes > 1,
            **context["options"],
        }
        items = list(launch.argv)
        for block in launch.flags:
            if _matches(block, facts):
                items += block.args
        return [item.format_map(context) for item in items]

    def command(self, case: Case, rank: NodeRank, batch_size: int) -> list[str]:
        launch = self.launch_for(case)
        header = header_line(self.header(case, rank, batch_size))
        if launch.launch == "mpi-head" and rank.node_rank > 0:
            script = WORKER_SCRIPT.replace("{port}", str(self.spec.ssh_port))
            return ["sh", "-c", script, "dlperf-upstream", header]
        script = wrapper_script(launch.directory, launch.collect)
        return [
            "sh", "-c", script, "dlperf-upstream", header,
            *self.launch_argv(case, rank, batch_size),
        ]  # fmt: skip


def spec_files(root: Path = REPO_ROOT) -> list[Path]:
    return sorted({path for pattern in SOURCE_GLOBS for path in root.glob(pattern)})


def load_specs(root: Path = REPO_ROOT) -> list[SourceSpec]:
    specs = [load_spec(path) for path in spec_files(root)]
    names = [spec.name for spec in specs]
    for name in names:
        if names.count(name) > 1:
            raise SourceError(root, "name", f"source {name!r} is defined twice")
    return specs


SPECS: dict[str, SourceSpec] = {}
for _spec in load_specs():
    SPECS[_spec.name] = _spec
    SOURCES.add(_spec.name, functools.partial(UpstreamSource, _spec))
