"""``source.yaml``: the file that pins one upstream source, read and checked.

The file names the repository and the full commit (or, where the repository cannot be read at a
commit, the PyPI release of it that the image installs, pinned by its wheel's sha256: ``release``),
the images.lock keys of the image that holds the code and of its base, the log parser, and per
model the upstream launcher and flags as an argv template (``{batch}``, ``{node_rank}``,
``{hosts_slots}``, ...; see :data:`PLACEHOLDERS`) plus flag blocks chosen by precision, XLA,
dataset and the source's options (``dali``, ...). A bad file is a :class:`SourceError` naming
the file, the field and what is allowed; a template's placeholders are checked when it is read.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, PrivateAttr

from driver.frameworks.base import REPO_ROOT
from driver.parsers._runheader import LOGGING_MODES
from driver.schema import (
    ConfigError,
    Line,
    Name,
    OptionName,
    StrictModel,
    load_document,
    number,
    one_of,
    text,
    validate,
)

SOURCE_GLOBS = (
    "NVIDIADeepLearningExamples/*/source.yaml",
    "*/upstream/source.yaml",
    "*/upstream/*/source.yaml",  # a framework's further sources (PyTorch/upstream/torchtitan)
)
COMMIT = re.compile(r"\A[0-9a-f]{40}\Z")  # Python's \Z: the very end ("$" allows a newline)
SHA256 = re.compile(r"\A[0-9a-f]{64}\Z")
LAUNCH_MODES = ("per-node", "mpi-head")
PLACEHOLDERS = {
    "batch": "per-device batch",
    "node_batch": "batch of one node (batch x processes per node)",
    "global_batch": "samples per step: batch x data-parallel replicas (the world size over "
    "tensor x pipeline x context parallel; the world size without model parallelism)",
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
# procs: GPUs (processes) per node
CONDITION_KEYS = ("precision", "dataset", "xla", "distributed", "multinode", "procs")


class SourceError(ConfigError):
    """A bad ``source.yaml``: ``<file>: <field>: <what is allowed>``."""


def _word(value: Any) -> str:
    """An argv item: text, or a number written as text (``--epochs 1``); one line."""
    if type(value) in (int, float):
        return str(value)
    if not isinstance(value, str) or re.fullmatch(r"[^\x00-\x1f\x7f]*", value) is None:
        raise ValueError(f"must be a string (one line), got {value!r}")
    return value


Word = Annotated[Any, AfterValidator(_word)]
Commit = text(COMMIT.pattern, "a full 40-hex commit")


class RepositoryFile(StrictModel):
    """A file of the repository that a release's wheel does not hold (Megatron-LM's
    ``pretrain_gpt.py`` beside the megatron-core wheel): the image fetches it at ``commit`` and
    refuses it unless its sha256 is this one."""

    path: text(r"[A-Za-z0-9_][A-Za-z0-9_./-]*", "a path in the repository, e.g. pretrain_gpt.py")
    commit: Commit
    sha256: text(SHA256.pattern, "the file's sha256 (64 lowercase hex)")


class ReleaseSpec(StrictModel):
    """A source pinned to a PyPI release of its repository instead of a commit (``release:``).

    The image installs exactly this wheel (pip ``--require-hashes``); ``branch`` is the
    repository's branch or tag the release was made from, as its project publishes it;
    ``files``: the repository's files the wheel lacks, fetched at the release's commit.
    """

    package: Name
    version: text(r"[0-9][0-9A-Za-z.+!-]*", "a release version, e.g. 2.3.0")
    file: text(r"[A-Za-z0-9_.+!-]+\.whl", "the wheel's file name (*.whl)")
    sha256: text(SHA256.pattern, "the wheel's sha256 (64 lowercase hex)")
    branch: Line
    files: list[RepositoryFile] = []

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


EnvName = text(r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name (letters, digits, _)")


class Conditions(StrictModel):
    when: dict[str, Any] = {}  # condition -> a value or a list of the values allowed

    def matches(self, facts: Mapping[str, Any]) -> bool:
        return all(
            facts.get(key) in (allowed if isinstance(allowed, list) else [allowed])
            for key, allowed in self.when.items()
        )


class FlagBlock(Conditions):
    """Arguments (and environment) the launch gets where its conditions hold."""

    args: list[Word] = []
    # Environment variables the upstream script reads (e.g. Paddle's FLAGS_*), set for the whole
    # launch where the block matches: rendered as ``env NAME=VALUE ...`` before the argv.
    env: dict[EnvName, Word] = {}


class Refusal(Conditions):
    """A variant the pinned code cannot run in the pinned image (``models.<model>.refused``):
    cases matching ``when`` are refused before they start, with ``because`` (the record of what
    the script calls and the image lacks is ``needs.yaml`` beside the file)."""

    when: Annotated[dict[str, Any], Field(min_length=1)]
    because: Line


class ModelLaunch(StrictModel):
    """One model of a source (``models.<model>``)."""

    commit: Commit | None = None  # default: the source's (None: pinned to a release)
    directory: Line = Field(alias="dir")  # the model's folder in the image (the wrapper cds in)
    launch: Annotated[Any, one_of(*LAUNCH_MODES)] = "per-node"
    logging: Annotated[Any, one_of(*LOGGING_MODES)] = "rank0"
    # -1: a label one ahead of the steps finished (TF1 BERT prints global_step + 1 of a counter
    # already advanced by the step: "Step = N" after N - 1 steps).
    step_offset: number(-1, 10**6, "an integer >= -1") = 0
    extra_steps: number(0, 10**6, "an integer >= 0") = 0
    log_every: number(1, 10**6, "an integer >= 1") = 1
    datasets: list[Annotated[Any, one_of("synthetic", "real")]] = ["synthetic"]
    precisions: list[Annotated[Any, one_of("fp32", "amp")]] = ["fp32", "amp"]
    xla: bool = False
    options: dict[OptionName, Any] = {}
    # The values an option may take where the pinned code knows only some (an attention kernel
    # it has a flavor for): any other value is refused before the case starts, never rendered
    # into a command that would run the default and record the value asked for.
    choices: dict[OptionName, Annotated[list[Any], Field(min_length=1)]] = {}
    collect: text(r"/[^\x00-\x1f\x7f]*", "an absolute path in the container") | None = None
    # Code that trains a whole epoch per run whatever the window asks (pytorch/examples'
    # main.py): the samples of that epoch and of the validation pass after it, so that the
    # plan prices a repeat by them, not by the window's steps.
    epoch_samples: number(1, 10**10, "an integer >= 1") | None = None
    validation_samples: number(0, 10**10, "an integer >= 0") = 0
    argv: Annotated[list[Word], Field(min_length=1)]
    flags: list[FlagBlock] = []
    refused: list[Refusal] = []
    notes: str = ""


class CurrentImageSpec(StrictModel):
    """The same pinned code on a current image, one built on a CUDA that runs on Hopper
    (``current_image:``), or why there is none. ``image`` is built from the source's Dockerfile on
    ``base_image`` (its ``# dlperf-also`` line; the base pinned in images.lock); ``differs`` names
    the software that differs from the pinned image (what ``dlperf factor`` reports between the
    two). ``refused``: why the pinned code cannot run on such an image. ``at``: the citations."""

    image: Name | None = None
    base_image: Line | None = None
    differs: list[Line] = []
    refused: Line | None = None
    at: Annotated[list[Line], Field(min_length=1)]


class SourceSpec(StrictModel):
    """A ``source.yaml`` as read (validated with the context ``path``: the file)."""

    name: Name
    framework: Name
    title: Line
    repository: Line
    commit: Commit | None = None  # exactly one of commit and release
    release: ReleaseSpec | None = None
    found: str  # where the commit was found (provenance)
    image: Line  # images.lock key of the built image
    base_image: Line  # images.lock key of its FROM image
    parser: Name
    workdir: Line
    ssh_port: number(1, 65535, "a TCP port 1-65535") = 2222
    notes: str = ""
    launches: Annotated[dict[Name, ModelLaunch], Field(min_length=1, alias="models")]
    pypi: Any = None  # the CPU run from PyPI: checked by driver/sources/pypi.py
    current_image: CurrentImageSpec | None = None  # the pinned code on a Hopper-capable image
    # Another release of the same code (torchtitan 0.2.2 beside 0.3.0): the source whose
    # published figures this one's cases stand beside, as that source in `dlperf factor`.
    pairs_with: Name | None = None
    _path: Path = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        self._path = Path(context["path"])

    @property
    def path(self) -> Path:
        return self._path

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
        pinned = {self.commit} | {launch.commit for launch in self.launches.values()}
        return {commit for commit in pinned if commit}


def _check_template(path: Path, where: str, text: str, options: Mapping[str, Any]) -> None:
    try:
        fields = list(string.Formatter().parse(text))
    except ValueError as error:
        raise SourceError(
            path, where, f"is not a valid template ({error}); write {{{{ for {{"
        ) from None
    for _literal, name, _spec, _conversion in fields:
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


def _check_conditions(path: Path, at: str, when: Mapping[str, Any], options: Mapping) -> None:
    for key in when:
        if key not in CONDITION_KEYS and key not in options:
            raise SourceError(
                path, f"{at}.when.{key}", f"not one of {CONDITION_KEYS} or the model's options"
            )


def _check_launch(path: Path, model: str, launch: ModelLaunch) -> None:
    """The templates' placeholders and the flag blocks' conditions of one model."""
    where = f"models.{model}."
    for i, item in enumerate(launch.argv):
        _check_template(path, f"{where}argv[{i}]", item, launch.options)
    for i, block in enumerate(launch.flags):
        at = f"{where}flags[{i}]"
        _check_conditions(path, at, block.when, launch.options)
        for j, item in enumerate(block.args):
            _check_template(path, f"{at}.args[{j}]", item, launch.options)
        for name, value in block.env.items():
            _check_template(path, f"{at}.env.{name}", value, launch.options)
    for i, refusal in enumerate(launch.refused):
        _check_conditions(path, f"{where}refused[{i}]", refusal.when, launch.options)
    for name, allowed in launch.choices.items():
        if name not in launch.options:
            raise SourceError(
                path, f"{where}choices.{name}", "names no option of the model (options:)"
            )
        if launch.options[name] not in allowed:
            raise SourceError(
                path,
                f"{where}choices.{name}",
                f"does not hold the option's default {launch.options[name]!r}; add it",
            )


def load_spec(path: Path) -> SourceSpec:
    try:
        spec = validate(SourceSpec, load_document(path), path, {"path": path})
    except ConfigError as error:
        raise SourceError(error.path, error.field_path, error.message) from None
    if (spec.commit is None) == (spec.release is None):
        raise SourceError(
            path, "commit", "give exactly one pin: commit (40 hex) or release (a PyPI wheel)"
        )
    for model, launch in spec.launches.items():
        if spec.release is not None and launch.commit is not None:
            raise SourceError(
                path, f"models.{model}.commit", "not allowed: the source is pinned to a release"
            )
    current = spec.current_image
    if current is not None:
        built = (current.image, current.base_image, current.differs)
        if (current.refused is None) != all(built) or (current.refused and any(built)):
            raise SourceError(
                path,
                "current_image",
                "give either image, base_image and differs (the variant on a current image) "
                "or refused (why the pinned code cannot run on one), with at",
            )
    for model, launch in spec.launches.items():
        _check_launch(path, model, launch)
    # a model without its own commit runs the source's
    launches = {m: launch.model_copy(update={"commit": launch.commit or spec.commit})
                for m, launch in spec.launches.items()}  # fmt: skip
    return spec.model_copy(update={"launches": launches})


def load_specs(root: Path = REPO_ROOT) -> list[SourceSpec]:
    files = sorted({path for pattern in SOURCE_GLOBS for path in root.glob(pattern)})
    specs = [load_spec(path) for path in files]
    names = [spec.name for spec in specs]
    for name in names:
        if names.count(name) > 1:
            raise SourceError(root, "name", f"source {name!r} is defined twice")
    for spec in specs:
        if spec.pairs_with is not None and spec.pairs_with not in set(names) - {spec.name}:
            raise SourceError(
                spec.path,
                "pairs_with",
                f"{spec.pairs_with!r} names no other source; give one of "
                f"{', '.join(sorted(set(names) - {spec.name}))}, or leave it out",
            )
    return specs
