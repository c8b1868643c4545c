"""Per-framework virtual environments for the local and process runtimes.

Each framework pins its CPU requirements in ``<Framework>/requirements-cpu.txt`` and names the
Python it needs; ``ensure_env`` creates ``.venvs/<framework>`` once (with that Python, from
pyenv when the system one differs) and reinstalls only when the requirements file changes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from driver.files import sha256_bytes, write_text
from driver.frameworks.base import REPO_ROOT, Framework

VENVS = Path(os.environ.get("DLPERF_VENVS", REPO_ROOT / ".venvs"))
STAMP = ".dlperf-requirements.sha256"


class FrameworkEnvError(RuntimeError):
    pass


def venv_path(framework: Framework) -> Path:
    return VENVS / framework.name


def venv_python(framework: Framework) -> Path:
    return venv_path(framework) / "bin" / "python"


def find_python(version: str) -> str:
    """An interpreter of ``version`` (major.minor): this one, pythonX.Y on PATH, or pyenv's."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return sys.executable
    on_path = shutil.which(f"python{version}")
    # A pyenv shim is on PATH for every installed version but fails (exit 127) unless that
    # version is selected: only trust an interpreter that really starts.
    if on_path and subprocess.run([on_path, "-c", ""], capture_output=True).returncode == 0:
        return on_path
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for candidate in sorted(pyenv_root.glob(f"{version}.*"), reverse=True):
        python = candidate / "bin" / "python"
        if python.exists():
            return str(python)
    raise FrameworkEnvError(
        f"no Python {version} found (needed by this framework's wheels); install python{version} "
        "or a pyenv version of it"
    )


def library_dirs(framework: Framework) -> list[str]:
    """Folders of the venv matching ``framework.venv_library_globs`` (shared libraries that a
    wheel dlopens by name, e.g. the nvidia-*-cu11 wheels' lib folders), for LD_LIBRARY_PATH."""
    root = venv_path(framework)
    found = {
        str(path)
        for pattern in framework.venv_library_globs
        for path in root.glob(pattern)
        if path.is_dir()
    }
    return sorted(found)


def venv_environment(framework: Framework) -> dict[str, str]:
    """Extra process environment a framework's venv needs (empty for most frameworks)."""
    dirs = library_dirs(framework)
    if not dirs:
        return {}
    inherited = os.environ.get("LD_LIBRARY_PATH")
    return {"LD_LIBRARY_PATH": os.pathsep.join([*dirs, *([inherited] if inherited else [])])}


def ensure_env(framework: Framework, log=print) -> Path:  # noqa: ANN001
    python = venv_python(framework)
    stamp = venv_path(framework) / STAMP
    wanted = sha256_bytes(framework.cpu_requirements.read_bytes())
    if python.exists() and stamp.exists() and stamp.read_text().strip() == wanted:
        return python
    log(f"creating the {framework.display} environment in {venv_path(framework)} (once)")
    if not python.exists():
        subprocess.run(
            [find_python(framework.python), "-m", "venv", str(venv_path(framework))], check=True
        )
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "-r", str(framework.cpu_requirements)],
        check=True,
    )
    write_text(stamp, wanted + "\n")
    return python
