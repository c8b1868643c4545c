"""The ``slurm:`` section of a cluster file: how the kit asks a Slurm cluster for nodes.

    slurm:
      partition: gpu
      account: perf
      qos: normal
      time_limit: "04:00:00"        # the session's job; Slurm's formats (MM, HH:MM:SS, D-HH, ...),
                                    # finite: never 0 or UNLIMITED, at most 365 days
      constraint: h100
      reservation: bench
      gpus_per_node: 8
      gpu_request: gpus-per-node    # or gres (--gres=gpu:8)
      container: auto               # auto | pyxis | oci | none
      image: {pytorch: nvcr.io#nvidia/pytorch@sha256:...}   # pyxis; default: images.lock
      oci_image: {calibration: dlperf/cpu-python:b3ac...}   # oci: a local docker image the kit
                                    # exports into a bundle (once per image), or
      oci_bundle: {default: /shared/bundles/pytorch}        # oci: a ready bundle (config.json
                                    # + root folder); the kit adds its mounts per session
      oci_cache: /shared/dlperf-oci # oci: where bundles are made (nodes must see it);
                                    # default: .dlperf/oci in the kit's checkout
      mounts: ["/data:/data:ro", "/scratch/me:/scratch"]    # pyxis --container-mounts
                                    # (flags joined by "+": ro+nosuid)
      tasks: node                   # node: one task per node running the framework's launcher;
                                    # device: one task per device, --mpi=<mpi>
      mpi: pmix
      exclusive: true
      extra_sbatch_args: ["--comment=dlperf"]  # never an option the kit sets (KIT_SBATCH_OPTIONS)
      python: {pytorch: /shared/venvs/pytorch/bin/python}  # container none; default: the kit's

Only the ``slurm:`` key is read here; the rest of the file is the inventory's, which embeds this
section (one cluster file serves the SSH runtimes and Slurm): the schema stands beside it. Every
value reaches ``sbatch``/``srun`` as one element of an argv list, never through a shell. The keys of
``image``, ``oci_image``, ``oci_bundle`` and ``python`` are frameworks the kit knows (and
``default``, where a default is read): a misspelt key would otherwise be silently unused.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, field_validator, model_validator

from driver.schema import (
    ConfigError,
    StrictModel,
    load_document,
    number,
    one_of,
    text,
    validate,
)
from driver.text import FreeText

# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (sbatch --time); whole-text match.
# Never UNLIMITED (nor 0, which Slurm also reads as no limit: SlurmConfig._finite_time_limit):
# the session's job holds its nodes until the kit cancels it, and its time limit is what frees
# them when the kit cannot (killed with SIGKILL, its host lost).
TIME_LIMIT = r"\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+(:\d{1,2}){0,2}"
MAX_TIME_LIMIT_S = 365 * 24 * 3600
# One word of an option value: no whitespace or control characters (a value is one argv item,
# but a newline would still split an #SBATCH line or a log line that quotes it).
Word = text(r"[^\s\x00-\x1f\x7f]+", "one word (no spaces or control characters)")

# The ranks' own settings (NCCL_IB_HCA, NCCL_SOCKET_IFNAME, UCX_TLS, ...): a name, and a value
# on one line (a number is taken as its text). Passed to every rank of every repeat and kept in
# each record's commands; what the kit sets for a rank (its DLPERF_*, MASTER_* and rank
# variables, PYTHONPATH) is never overridden by them.
_ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
_VALUE = r"[^\x00-\x08\x0a-\x1f\x7f]{0,65536}"  # any text on one line


def _env_value(value: Any) -> str:
    if type(value) in (int, float):
        return str(value)
    if not isinstance(value, str) or re.fullmatch(_VALUE, value) is None:
        raise ValueError(f"must be a string (one line) or a number, got {value!r}")
    return value


KIT_SET_VARIABLES = frozenset({
    "PYTHONPATH", "PYTHONUNBUFFERED", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE",
    "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK",
})  # fmt: skip
RankEnvironment = dict[
    text(_ENV_NAME, "a valid environment variable name"),
    Annotated[Any, AfterValidator(_env_value)],
]
TimeLimit = text(
    TIME_LIMIT,
    "a Slurm time limit: minutes (90), HH:MM:SS (04:00:00) or D-HH:MM:SS (1-00:00:00)",
)
# pyxis joins a mount's flags with "+" (a comma starts the next mount) and hands them to
# enroot's mount, which takes mount(8)'s bind options: these, each once, ro or rw not both.
MOUNT_FLAGS = (
    "ro", "rw", "nosuid", "suid", "nodev", "dev", "noexec", "exec", "bind", "rbind",
    "private", "rprivate", "slave", "rslave", "shared", "rshared", "unbindable", "runbindable",
)  # fmt: skip


def _mount_flags(value: Any) -> Any:
    if not isinstance(value, str) or value.count(":") != 2:
        return value  # no flags: the pattern has checked it
    flags = value.rsplit(":", 1)[1].split("+")
    unknown = [flag for flag in flags if flag not in MOUNT_FLAGS]
    if unknown:
        raise ValueError(
            f"{value!r}: mount flag {unknown[0]!r} is not one pyxis passes on "
            f"({', '.join(MOUNT_FLAGS)}); join flags with '+' (e.g. /data:/data:ro+nosuid)"
        )
    if len(set(flags)) != len(flags) or {"ro", "rw"} <= set(flags):
        raise ValueError(f"{value!r}: each flag once, and ro or rw, not both")
    return value


Mount = Annotated[
    text(
        r"/[^\s:,]*:/[^\s:,]*(:[a-z+]+)?",
        "SRC:DST[:FLAGS] with absolute paths, flags joined by '+' (e.g. /data:/data:ro)",
    ),
    AfterValidator(_mount_flags),
]
AbsolutePath = text(r"/[^\x00-\x1f\x7f]*", "an absolute path (/shared/...)")
# Folders the kit must never make its bundle cache in or under (it writes and removes bundles
# there): the root and the system's own trees, and the top folders that hold everyone's files.
SYSTEM_TREES = (
    "/proc", "/sys", "/dev", "/etc", "/boot", "/usr", "/bin", "/sbin", "/lib", "/lib32",
    "/lib64", "/libx32", "/run", "/var/run", "/var/lib", "/var/log", "/var/spool", "/var/cache",
)  # fmt: skip
SHARED_TOPS = ("/", "/home", "/tmp", "/var", "/var/tmp", "/opt", "/srv", "/mnt", "/media", "/root")


def _cache_folder(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if ".." in value.split("/"):
        raise ValueError(f"{value!r}: a '..' in the path; give the folder itself")
    folder = posixpath.normpath("/" + value.lstrip("/"))  # normpath keeps a leading "//"
    inside = [t for t in SYSTEM_TREES if folder == t or folder.startswith(t + "/")]
    if inside or folder in SHARED_TOPS:
        raise ValueError(
            f"{value!r} is {'inside ' + inside[0] if inside else 'a system folder'}: the kit "
            "writes and removes OCI bundles there; give a folder of its own on a file system "
            "the nodes share (e.g. /shared/dlperf-oci)"
        )
    from driver.frameworks.base import REPO_ROOT

    checkout = str(REPO_ROOT.resolve())
    if folder == checkout or checkout.startswith(folder.rstrip("/") + "/"):
        raise ValueError(
            f"{value!r} is {'the kit' if folder == checkout else 'a folder holding the kit'}'s "
            "own checkout: the kit writes and removes OCI bundles there; give a folder of its "
            "own on a file system the nodes share (e.g. /shared/dlperf-oci)"
        )
    return value


def _framework_key(*extra: str, sources: bool = False) -> Any:
    """A key naming a framework the kit knows (or one of ``extra``); with ``sources``, also an
    upstream source (``slurm.image.pytorch-examples``: a source runs in its own image), or a
    source's current image (``slurm.image.gluon-nlp-current``)."""

    def check(key: Any) -> Any:
        from driver.frameworks.base import FRAMEWORKS
        from driver.plugins import load
        from driver.sources.base import image_keys

        load("frameworks", "sources")
        names = [*FRAMEWORKS.names(), *(image_keys() if sources else ())]
        return one_of(*extra, *names).func(key)

    return Annotated[Word, AfterValidator(check)]


SbatchOption = text(r"-[^\s\x00-\x1f\x7f]+", "an option: write each as --name=value")
# A docker image reference (``[registry[:port]/]name[:tag][@sha256:digest]``, docker's grammar,
# lower-case path components): ``../../etc`` or ``/x`` is no image, whatever docker would say.
_IMAGE_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
OciImage = text(
    rf"(?:[A-Za-z0-9][A-Za-z0-9.-]*(?::\d+)?/)?{_IMAGE_PART}(?:/{_IMAGE_PART})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?",
    "a docker image reference: name[:tag][@sha256:digest], e.g. dlperf/cpu-python:3f2a",
)

# The sbatch options the kit sets itself (render.py sbatch_argv), or that would
# break the session's job, with their short forms: an extra argument naming one would override
# the kit's (sbatch takes the last), e.g. --job-name hides the job from leftover cleanup and
# --nodes=1 runs a 2-node case on one node. Each with the fix.
KIT_SBATCH_OPTIONS: dict[str, tuple[str | None, str]] = {
    "job-name": ("J", "the kit names the job after the session (to find leftover jobs); drop it"),
    "nodes": ("N", "the kit asks for the nodes each case needs; drop it"),
    "ntasks": ("n", "the kit runs one task per node; drop it"),
    "ntasks-per-node": (None, "the kit runs one task per node; drop it"),
    "time": ("t", "set slurm.time_limit instead"),
    "output": ("o", "the kit keeps the job's output in the session folder; drop it"),
    "parsable": (None, "the kit sets it to read the job id; drop it"),
    "wrap": (None, "the kit sends its own batch script; drop it"),
    "array": ("a", "the kit holds one job per session; drop it"),
    "partition": ("p", "set slurm.partition instead"),
    "account": ("A", "set slurm.account instead"),
    "qos": ("q", "set slurm.qos instead"),
    "constraint": ("C", "set slurm.constraint instead"),
    "reservation": (None, "set slurm.reservation instead"),
    "gpus-per-node": (None, "set slurm.gpus_per_node instead"),
    "gres": (None, "set slurm.gpus_per_node and slurm.gpu_request: gres instead"),
    "gpus": ("G", "set slurm.gpus_per_node instead"),
    "exclusive": (None, "set slurm.exclusive instead"),
    "error": ("e", "the kit keeps the job's errors with its output in the session folder; drop it"),
    "chdir": ("D", "the kit runs the job in its checkout (its paths are relative to it); drop it"),
    "export": (None, "the job's steps need the environment the kit submits it with; drop it"),
    "export-file": (None, "the job's steps run with the environment the kit submits; drop it"),
    "get-user-env": (None, "the job's steps run with the environment the kit submits; drop it"),
    # who the job runs as, what container it runs in, what files it reads: never from a file
    "uid": (None, "the job runs as the user who submits it; drop it"),
    "gid": (None, "the job runs with the group of the user who submits it; drop it"),
    "container": (None, "set slurm.container and slurm.oci_bundle instead"),
    "container-image": (None, "set slurm.container: pyxis and slurm.image instead"),
    "container-mounts": (None, "set slurm.mounts instead"),
    "container-name": (None, "the kit runs each case in its own container; drop it"),
    "container-workdir": (None, "the kit runs the job in its checkout; drop it"),
    "container-env": (None, "the job's steps run with the environment the kit submits; drop it"),
    "container-remap-root": (None, "the job runs as the user who submits it; drop it"),
    "container-writable": (None, "the kit runs the image as it is pinned; drop it"),
    "input": ("i", "the kit's job reads no standard input; drop it"),
    "open-mode": (None, "the kit keeps the job's output in the session folder; drop it"),
    "bb": (None, "a burst buffer stages files the kit does not track; drop it"),
    "bbf": (None, "a burst buffer file stages files the kit does not track; drop it"),
}  # fmt: skip
# sbatch's short options that take no value: in "-vN2" the N is an option of its own.
SBATCH_SHORT_FLAGS = "hHOQsvVW"


def kit_option_in(argument: str) -> str | None:
    """The kit's own sbatch option that ``argument`` sets, if any: ``--name[=value]``, an
    abbreviation sbatch accepts (``--job=x``, getopt's unique prefixes), ``-Jx``, ``-N 2``,
    ``-vN2``; ``--`` alone (what follows would be taken as the batch script)."""
    if argument == "--":
        return "--"
    if argument.startswith("--"):
        name = argument[2:].split("=", 1)[0]
        if name in KIT_SBATCH_OPTIONS:
            return name
        abbreviated = [option for option in KIT_SBATCH_OPTIONS if name and option.startswith(name)]
        return abbreviated[0] if abbreviated else None
    if not argument.startswith("-"):
        return None  # not an option (the item's own check refuses it)
    shorts = {short: option for option, (short, _) in KIT_SBATCH_OPTIONS.items() if short}
    for letter in argument[1:]:
        if letter in shorts:
            return shorts[letter]
        if letter not in SBATCH_SHORT_FLAGS:
            return None  # an option with a value: the rest of the word is that value
    return None


class SlurmConfig(StrictModel):
    partition: Word | None = None
    account: Word | None = None
    qos: Word | None = None
    time_limit: TimeLimit = "04:00:00"  # checked as Slurm reads it: time_limit_seconds
    # A selection longer than time_limit runs as several jobs, a new one whenever the next
    # repeat's estimate exceeds what is left of the current job (off: such a selection is
    # refused before sbatch).
    split_jobs: bool = False
    constraint: Word | None = None
    reservation: Word | None = None
    gpus_per_node: number(0, 1024, "a GPU count 0-1024") | None = None
    gpu_request: Annotated[Any, one_of("gpus-per-node", "gres")] = "gpus-per-node"
    # auto (pyxis where srun lists it, else none) or a container platform the runtime checks
    # against the ones Slurm runs (driver/runtimes/containers/).
    container: text(r"[a-z][a-z0-9-]{0,31}", "auto or a container platform's name") = "auto"
    image: dict[_framework_key("default", sources=True), Word] = {}
    oci_image: dict[_framework_key("default", sources=True), OciImage] = {}
    oci_bundle: dict[_framework_key("default", sources=True), AbsolutePath] = {}
    oci_cache: Annotated[AbsolutePath, AfterValidator(_cache_folder)] | None = None
    mounts: list[Mount] = []
    tasks: Annotated[Any, one_of("node", "device")] = "node"
    mpi: Word = "pmix"
    exclusive: bool = True
    extra_sbatch_args: list[SbatchOption] = []
    python: dict[_framework_key(), Word] = {}
    queue_timeout_s: number(1, 30 * 24 * 3600, "seconds, 1 to 30 days", integer=False) = 24 * 3600.0
    env: RankEnvironment = {}  # every rank's (NCCL, UCX, IB settings), recorded in provenance
    # The nodes' device as the plan looks it up (e.g. "H100", "NVIDIA H100 80GB HBM3"): the
    # estimate and its time-limit guard apply without --hardware (make cannot pass it).
    hardware: FreeText("label") | None = None

    @field_validator("time_limit", mode="before")
    @classmethod
    def _finite_time_limit(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value  # the type's own check refuses it
        if value.strip().upper() in ("UNLIMITED", "INFINITE", "-1") or (
            re.fullmatch(TIME_LIMIT, value) and time_limit_seconds(value) == 0
        ):
            raise ValueError(
                f"{value!r} means no time limit to Slurm; the session's job needs a finite one "
                '(its time limit frees the nodes if the kit cannot cancel it), e.g. "04:00:00"'
            )
        if re.fullmatch(TIME_LIMIT, value):
            time_limit_seconds(value)  # each field within its range, the whole within bounds
        return value

    @field_validator("env")
    @classmethod
    def _not_the_kits(cls, value: dict[str, str]) -> dict[str, str]:
        kits = sorted(
            name for name in value
            if name.startswith("DLPERF_") or name in KIT_SET_VARIABLES
        )  # fmt: skip
        if kits:
            raise ValueError(
                f"{', '.join(kits)}: set by the kit for every rank (its code, its rank and "
                "rendezvous); leave them out of env"
            )
        return value

    @model_validator(mode="after")
    def _oci_only_with_oci(self) -> SlurmConfig:
        if self.container in ("pyxis", "none"):
            given = [name for name in ("oci_image", "oci_bundle") if getattr(self, name)]
            if given or self.oci_cache:
                named = ", ".join(given + (["oci_cache"] if self.oci_cache else []))
                raise ValueError(
                    f"{named} given with container: {self.container}, which never reads "
                    f"{'them' if len(named.split(', ')) > 1 else 'it'} (pyxis runs slurm.image; "
                    "none runs no container): set container: oci, or drop them"
                )
        if self.container in ("oci", "none") and self.image:
            raise ValueError(
                f"image ({', '.join(sorted(self.image))}) given with container: "
                f"{self.container}, which never reads it (oci runs oci_image or oci_bundle; "
                "none runs no container): set container: pyxis, or drop image"
            )
        if self.container == "none":
            relative = sorted(name for name, path in self.python.items() if path[:1] != "/")
            if relative:
                name = relative[0]
                raise ValueError(
                    f"python.{name}: {self.python[name]!r} is not an absolute path: with "
                    "container: none each node starts it from the job's folder and its own "
                    "PATH, not the interpreter you checked; give the absolute path of the "
                    "environment's python (e.g. /shared/venvs/pytorch/bin/python)"
                )
        return self

    @field_validator("extra_sbatch_args", mode="before")
    @classmethod
    def _no_kit_option(cls, value: Any) -> Any:
        for argument in value if isinstance(value, list) else []:
            option = kit_option_in(argument) if isinstance(argument, str) else None
            if option == "--":
                raise ValueError(
                    "'--' ends sbatch's options (what follows would be read as the batch "
                    "script); drop it"
                )
            if option is not None:
                short, fix = KIT_SBATCH_OPTIONS[option]
                shown = f"--{option}" + (f" (-{short})" if short else "")
                raise ValueError(
                    f"{argument!r} sets {shown}, which the kit controls (an extra argument "
                    f"would override it): {fix}"
                )
        return value


def time_limit_seconds(text: str) -> int:
    """Seconds of a time limit in one of Slurm's formats (``TIME_LIMIT``), read as Slurm's
    ``time_str2secs`` reads it (days, hours, minutes and seconds summed), and bounded as Slurm
    does not: minutes and seconds below 60, hours below 24 after a day count, at most
    :data:`MAX_TIME_LIMIT_S`; ``99:99:99`` would be 100 hours and 40 minutes to Slurm, a typo
    to anyone reading it. ValueError says which field and what to write."""
    example = 'e.g. "04:00:00" (4 hours) or "1-12:00:00" (1 day 12 hours)'
    days, _, clock = text.rpartition("-") if "-" in text else ("", "", text)
    parts = [int(p) for p in clock.split(":")]
    if days:  # D-H, D-H:M, D-H:M:S
        hours, minutes, seconds = (parts + [0, 0])[:3]
        if hours > 23:
            raise ValueError(f"{text!r}: {hours} hours after a day count; at most 23 ({example})")
    elif len(parts) == 3:  # H:M:S
        hours, minutes, seconds = parts
    else:  # M, M:S
        hours, minutes, seconds = 0, parts[0], parts[1] if len(parts) == 2 else 0
    bounded_minutes = days or len(parts) == 3
    if (bounded_minutes and minutes > 59) or seconds > 59:
        field = "minutes" if bounded_minutes and minutes > 59 else "seconds"
        raise ValueError(f"{text!r}: {field} above 59; Slurm would carry them over ({example})")
    total = int(days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds
    if total > MAX_TIME_LIMIT_S:
        raise ValueError(f"{text!r} is over 365 days; give a limit the session can end in")
    return total


class SlurmClusterFile(StrictModel):
    """A cluster file as the Slurm runtime reads it: its ``slurm:`` section (the nodes come
    from Slurm). ``defaults``/``nodes`` belong to the SSH runtimes' inventory schema, which
    checks them whenever a docker or process runtime reads the same file."""

    cluster: Word | None = None
    slurm: SlurmConfig = SlurmConfig()
    defaults: Any = None
    nodes: Any = None


class SlurmConfigError(ConfigError):
    """A bad ``slurm:`` section: ``<file>: slurm.<field>: <problem; the fix>`` (the CLI prints
    it and exits 2, as for every configuration file)."""


def load_slurm_config(path: Path | str | None) -> SlurmConfig:
    """The ``slurm:`` section of the cluster file at ``path`` (None: every default), read by
    the strict loader every configuration file goes through (``driver.schema``)."""
    if path is None:
        return SlurmConfig()
    try:
        return validate(SlurmClusterFile, load_document(path), path).slurm
    except ConfigError as error:
        raise SlurmConfigError(error.path, error.field_path, error.message) from None
