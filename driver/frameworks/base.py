"""The framework plug-in: only what is really a framework's own.

Everything else (matrix, command line, parsing, statistics, results) is shared. A framework
declares where its folder and script are, which launcher starts its processes, how its
environment is installed, and which modules name its version. Registered in
``driver.registry.FRAMEWORKS`` by ``driver/frameworks/<name>.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Framework:
    name: str  # matrix and case-id name: "pytorch"
    display: str  # table column: "PyTorch"
    folder: str  # repository folder: "PyTorch"
    models: tuple[str, ...]
    script: str  # benchmark entry, relative to the repository root
    launcher: str  # LAUNCHERS name used when a node runs more than one process
    parser: str = "dlperf-jsonl"
    python: str = "3.11"  # interpreter version for the local virtual environment
    has_xla: bool = False
    has_amp_on_cpu: bool = True  # False: AMP is a no-op on CPU (recorded, footnoted)
    # Environment for every process (e.g. OMP_NUM_THREADS for frameworks that use 1 thread).
    env: dict[str, str] = field(default_factory=dict)
    # Extra library folders inside the venv to put on LD_LIBRARY_PATH (glob patterns).
    venv_library_globs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (REPO_ROOT / self.folder).is_dir():
            raise ValueError(f"framework {self.name}: folder {self.folder!r} does not exist")

    @property
    def path(self) -> Path:
        return REPO_ROOT / self.folder

    @property
    def matrix_file(self) -> Path:
        return self.path / "matrix.yaml"

    @property
    def cpu_requirements(self) -> Path:
        return self.path / "requirements-cpu.txt"
