"""The GPU check (docs/gpu-check.md): the command line of ``driver.diagnose.gpucheck``, run
by the node's own ``python3`` from the kit's checkout (``tools/gpu-check.sh``), where the kit is
not installed: its folder goes onto ``sys.path`` first.

    python3 tools/gpu_check.py run --out DIR [--python PY] [--budget-s S] [--stages LIST]
                                   [--resume ARCHIVE] [--cpu]
    python3 tools/gpu_check.py plan [--cpu]           # the stages, their estimates, the plans
    python3 tools/gpu_check.py unpack ARCHIVE [--results results]
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def entry() -> int:
    try:
        from driver.diagnose.gpucheck.check import main
    except ImportError as error:  # a python3 without the kit's packages (pydantic, PyYAML, ...)
        print(
            f"gpu_check.py: the kit's packages do not import under {sys.executable} ({error}); "
            "run it with the kit's Python (.venv/bin/python, or through tools/gpu-check.sh on "
            "a node)",
            file=sys.stderr,
        )
        return 3
    return main()


if __name__ == "__main__":
    sys.exit(entry())
