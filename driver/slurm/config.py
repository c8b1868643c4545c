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

from pathlib import Path
from typing import Annotated, Any

from driver.schema import (
    ConfigError,
    StrictModel,
    load_document,
    number,
    one_of,
    text,
    validate,
)

# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (sbatch --time); whole-text match.
TIME_LIMIT = r"\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+(:\d{1,2}){0,2}|UNLIMITED"
# One word of an option value: no whitespace or control characters (a value is one argv item,
# but a newline would still split an #SBATCH line or a log line that quotes it).
Word = text(r"[^\s\x00-\x1f\x7f]+", "one word (no spaces or control characters)")
TimeLimit = text(
    TIME_LIMIT,
    "a Slurm time limit: minutes (90), HH:MM:SS (04:00:00) or D-HH:MM:SS (1-00:00:00)",
)
Mount = text(
    r"/[^\s:,]*:/[^\s:,]*(:[a-z,]+)?",
    "SRC:DST[:FLAGS] with absolute paths (e.g. /data:/data:ro)",
)
SbatchOption = text(r"-[^\s\x00-\x1f\x7f]+", "an option: write each as --name=value")


class SlurmConfig(StrictModel):
    partition: Word | None = None
    account: Word | None = None
    qos: Word | None = None
    time_limit: TimeLimit = "04:00:00"
    constraint: Word | None = None
    reservation: Word | None = None
    gpus_per_node: number(0, 1024, "a GPU count 0-1024") | None = None
    gpu_request: Annotated[Any, one_of("gpus-per-node", "gres")] = "gpus-per-node"
    container: Annotated[Any, one_of("auto", "pyxis", "none")] = "auto"
    image: dict[Word, Word] = {}
    mounts: list[Mount] = []
    tasks: Annotated[Any, one_of("node", "device")] = "node"
    mpi: Word = "pmix"
    exclusive: bool = True
    extra_sbatch_args: list[SbatchOption] = []
    python: dict[Word, Word] = {}
    queue_timeout_s: number(1, 30 * 24 * 3600, "seconds, 1 to 30 days", integer=False) = (
        24 * 3600.0
    )


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
