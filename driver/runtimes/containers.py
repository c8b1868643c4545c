"""The container-platform axis: what a node's command runs inside.

A runtime is a transport (how node commands reach the nodes: this host, SSH, Slurm) crossed
with a container platform (what each command runs inside), the way ReFrame keeps its
schedulers apart from its container platforms. The pairs the kit runs:

    platform  over SSH (ssh/)                          under Slurm (slurm/)
    none      process: a process group the kit starts, the nodes' own Python; srun holds the
              stops and times itself (ssh/process.py)  tasks
    docker    docker: ``docker create`` + ``start -a`` -
              per node (ssh/docker.py)
    pyxis     -                                        ``srun --container-image``: one named
                                                       container per node, made once per job
    oci       -                                        ``srun --container=<bundle>``: Slurm's
                                                       own, one bundle per session

:class:`ContainerPlatform` is what every platform answers, whichever transport asks: what a
node's process sees (its interpreter, where the kit's code is), whether an upstream source's
own image can run, what is refused before any node is asked, what the session made and must
remove. Each transport then asks the same platform, in its own terms, how a node's command is
wrapped, prepared, stopped and collected: over SSH as shell commands a node runs
(``ssh.launch.SshPlatform``), under Slurm as what a step and its job carry
(``slurm.containers.SlurmPlatform``). A new platform is one class beside its transport.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar


class ContainerPlatform:
    """What a node's process runs inside; the defaults are those of no container at all."""

    name: ClassVar[str] = "none"  # none | docker | pyxis | oci (in every record's facts)
    # Where the kit's code is mounted inside; None: at its own path (or not mounted at all).
    mount_point: ClassVar[str | None] = None
    # An upstream source's code is only in its own image (``src-<source>``): only a platform
    # that runs that image can run it.
    runs_sources: ClassVar[bool] = False

    def python(self, framework: str) -> str | None:  # noqa: ARG002 - an image's is per image
        """The interpreter of ``framework``'s scripts inside, or None: the host's (the
        transport knows where: the inventory's ``python``, the kit's venvs)."""
        return None

    def workdir(self, code: str) -> str:
        """The kit's code folder (``code`` where it lies) as the node's process sees it."""
        return self.mount_point or code

    def check(self, session_root: Path) -> None:
        """Refuse what this platform cannot run for the session at ``session_root`` (a one-line
        ``RuntimeConfigError`` naming the file, field and fix), before any node is asked."""

    def close(self) -> None:
        """Remove what the session made for this platform (nothing, unless it made files)."""
