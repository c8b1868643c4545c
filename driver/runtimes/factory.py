"""``make_runtime``: the one way a runtime is built, from its name in ``RUNTIMES``
(``driver.runtimes.base``, beside the interface it holds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from driver.runtimes.base import RUNTIMES, Runtime, RuntimeConfigError


def make_runtime(name: str, *, inventory: Path | str | None = None, **options: Any) -> Runtime:
    """The runtime registered as ``name``, built with its options.

    A runtime class says how it uses a cluster file in ``cluster_file``: ``"required"`` (the
    SSH runtimes: the file lists the nodes), ``"optional"`` (Slurm: its ``slurm:`` section, or
    every default inside an allocation) or ``"none"`` (local: a file given is refused rather
    than silently ignored).
    """
    from driver.plugins import load_all

    load_all()
    runtime_class = RUNTIMES.get(name)
    use = getattr(runtime_class, "cluster_file", "none")
    if use == "required" and not inventory:
        raise RuntimeConfigError(
            f"--runtime {name} needs --inventory FILE (the cluster file; see docs/clusters.md)"
        )
    if use == "none":
        if inventory:
            raise RuntimeConfigError(
                f"--runtime {name} runs on this host and takes no --inventory; "
                "use --runtime docker, process or slurm for a cluster file"
            )
        return runtime_class(**options)
    return runtime_class(inventory, **options)
