"""The ``slurm:`` section of a cluster file: how the kit asks a Slurm cluster for nodes.

    slurm:
      partition: gpu
      account: perf
      qos: normal
      time_limit: "04:00:00"        # the session's job; Slurm's formats (MM, HH:MM:SS, D-HH, ...)
      constraint: h100
      reservation: bench
      gpus_per_node: 8
      gpu_request: gpus-per-node    # or gres (--gres=gpu:8)
      container: auto               # auto | pyxis | none
      image: {pytorch: nvcr.io#nvidia/pytorch@sha256:...}   # pyxis; default: images.lock
      mounts: ["/data:/data:ro", "/scratch/me:/scratch"]    # pyxis --container-mounts
      tasks: node                   # node: one task per node running the framework's launcher;
                                    # device: one task per device, --mpi=<mpi>
      mpi: pmix
      exclusive: true
      extra_sbatch_args: ["--comment=dlperf"]
      python: {pytorch: /shared/venvs/pytorch/bin/python}  # container none; default: the kit's

Only the ``slurm:`` key is read here; the rest of the file is the inventory's. Every value
reaches ``sbatch``/``srun`` as one element of an argv list, never through a shell.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from driver.runtimes.base import RuntimeConfigError

# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (sbatch --time).
TIME_LIMIT = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+(:\d{1,2}){0,2}|UNLIMITED)$")
# One word of an option value: no whitespace or control characters (a value is one argv item,
# but a newline would still split an #SBATCH line or a log line that quotes it).
Word = Annotated[str, Field(min_length=1, pattern=r"^[^\s\x00-\x1f]+$")]


class SlurmConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    partition: Word | None = None
    account: Word | None = None
    qos: Word | None = None
    time_limit: str = "04:00:00"
    constraint: Word | None = None
    reservation: Word | None = None
    gpus_per_node: int | None = Field(default=None, ge=0)
    gpu_request: Literal["gpus-per-node", "gres"] = "gpus-per-node"
    container: Literal["auto", "pyxis", "none"] = "auto"
    image: dict[str, Word] = Field(default_factory=dict)
    mounts: list[Word] = Field(default_factory=list)
    tasks: Literal["node", "device"] = "node"
    mpi: Word = "pmix"
    exclusive: bool = True
    extra_sbatch_args: list[Word] = Field(default_factory=list)
    python: dict[str, Word] = Field(default_factory=dict)
    queue_timeout_s: float = Field(default=24 * 3600.0, gt=0)

    @field_validator("time_limit")
    @classmethod
    def _time_limit(cls, value: str) -> str:
        if not TIME_LIMIT.match(value):
            raise ValueError(
                f"{value!r} is not a Slurm time limit: write minutes (90), HH:MM:SS (04:00:00) "
                "or D-HH:MM:SS (1-00:00:00)"
            )
        return value

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, value: list[str]) -> list[str]:
        for mount in value:
            parts = mount.split(":")
            if not 2 <= len(parts) <= 3 or not all(parts[:2]) or not parts[0].startswith("/"):
                raise ValueError(
                    f"{mount!r} is not SRC:DST[:FLAGS] with absolute paths (e.g. /data:/data:ro)"
                )
        return value

    @field_validator("extra_sbatch_args")
    @classmethod
    def _extra(cls, value: list[str]) -> list[str]:
        for arg in value:
            if not arg.startswith("-"):
                raise ValueError(f"{arg!r} is not an option: write each as --name=value")
        return value


class SlurmConfigError(RuntimeConfigError):
    """A bad ``slurm:`` section: the message names the file, the field and the fix (the CLI
    prints it and exits 2, as for every runtime built from a bad command line or file)."""


def parse_slurm_config(data: object, path: Path | str) -> SlurmConfig:
    """The ``slurm:`` section of an already-read cluster file (absent: every default)."""
    section = data.get("slurm") if isinstance(data, dict) else None
    if section is None:
        return SlurmConfig()
    if not isinstance(section, dict):
        raise SlurmConfigError(f"{path}: slurm: must be a mapping (see docs/clusters.md)")
    try:
        return SlurmConfig.model_validate(section)
    except ValidationError as error:
        problems = []
        for item in error.errors():
            field = ".".join(str(part) for part in item["loc"])
            message = item["msg"].removeprefix("Value error, ")
            if item["type"] == "extra_forbidden":
                known = ", ".join(SlurmConfig.model_fields)
                message = f"is not a slurm option (known: {known})"
            problems.append(f"{path}: slurm.{field}: {message}")
        raise SlurmConfigError("\n".join(problems)) from None


def load_slurm_config(path: Path | str | None) -> SlurmConfig:
    """The ``slurm:`` section of the cluster file at ``path`` (None: every default)."""
    if path is None:
        return SlurmConfig()
    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise SlurmConfigError(f"{path}: the cluster file does not exist") from None
    except yaml.YAMLError as error:
        raise SlurmConfigError(f"{path}: is not valid YAML: {error}") from None
    return parse_slurm_config(data, path)
