"""What each side runs: the kit's benchmark command, its ``dlperf run``, the bare loop.

The kit's benchmark command is the node command of the planned case as ``dlperf run``'s local
runtime starts it; the bare loop runs with the same interpreter, environment and threads.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from driver.core.command import node_commands, option_text
from driver.frameworks.base import FRAMEWORKS, REPO_ROOT
from driver.model.case import Case
from driver.runtimes.local import LocalRuntime, process_environment
from driver.studies.parity.plan import plan_case
from driver.studies.parity.process import SideCommand
from driver.studies.parity.records import ParityError, ParityRequest

BARE_SCRIPT = "bare_loop.py"  # beside each framework's benchmark folder: <Folder>/bare_loop.py
KIT_SESSION_PREFIX = "round-"


def option_arguments(options: Mapping[str, Any]) -> list[str]:
    return [
        arg for key in sorted(options) for arg in ("--option", f"{key}={option_text(options[key])}")
    ]


def commands(
    request: ParityRequest, handed: Mapping[str, Any] | None = None
) -> dict[str, SideCommand]:
    """What runs (``request`` as :func:`prepare` returns it):

    - ``kit``: the kit's benchmark command as ``dlperf run``'s local runtime starts it (the
      node command of the same plan; started until its header before the rounds);
    - ``driver``: the ``dlperf run`` command of the kit side (its session name is set per round);
    - ``bare``: the bare loop with the same interpreter, environment and threads, and the
      ``handed`` options (before the kit's header is known: the case's own options), under
      ``torchrun --nproc_per_node k`` at 1n<k>g;
    - ``bare_check``: the bare loop's option check (one process).
    """
    framework = FRAMEWORKS.get(request.framework)
    bare = framework.path / BARE_SCRIPT
    if not bare.is_file():
        raise ParityError(f"{framework.name} has no bare loop ({bare} is missing)")
    runtime = LocalRuntime(python_override=request.python)
    python = runtime.python(framework)
    if not Path(python).exists():
        raise ParityError(
            f"{python} does not exist: create the environment with `dlperf envs {framework.name}`"
            " or name an existing install with --python"
        )
    case, _profile = plan_case(request)
    node = node_commands(case, runtime, request.batch_size)[0]
    threads = {"OMP_NUM_THREADS": str(request.threads)} if request.threads else {}
    env = process_environment({**node.env, **threads})
    workdir = node.workdir or str(REPO_ROOT)
    processes = case.topology.world_size
    # Several processes: torchrun on this host, as the kit's own launcher starts its ranks.
    launcher = (
        [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
        if processes > 1
        else [python]
    )
    bare_script = [
        str(bare.relative_to(REPO_ROOT)),
        "--model", request.model,
        "--batch-size", str(request.batch_size),
        "--precision", request.precision,
        "--warmup-steps", str(request.warmup_steps),
        "--steps", str(request.measured_steps),
        *option_arguments(case.options if handed is None else handed),
    ]  # fmt: skip
    return {
        "kit": SideCommand(list(node.argv), env, workdir),
        "driver": SideCommand(
            driver_argv(request, case, Path(request.results), f"{KIT_SESSION_PREFIX}01"),
            {**os.environ, **threads},
            str(REPO_ROOT),
            terminal=request.terminal,
            watch=True,
        ),
        # Watched like the kit's driver, so that this process's once-a-second look at /proc
        # weighs on both sides alike.
        "bare": SideCommand([*launcher, *bare_script], env, workdir, watch=True),
        # Its option check: one process, before it loads the framework.
        "bare_check": SideCommand([python, *bare_script, "--check-options"], env, workdir),
    }


def driver_argv(request: ParityRequest, case: Case, results: Path, session: str) -> list[str]:
    """``dlperf run`` of exactly ``case``, one repeat (the driver of this interpreter)."""
    return [
        sys.executable, "-m", "driver", "run",
        "--framework", request.framework,
        "--profile", request.profile,
        "--model", case.model,
        "--nodes", "1", "--gpus", str(case.topology.world_size),
        "--batch", str(request.batch_size),
        "--amp", "on" if case.precision == "amp" else "off",
        "--xla", "on" if case.xla else "off",
        "--dataset", case.dataset,
        "--variant", case.variant,
        "--repeats", "1",
        "--warmup-steps", str(request.warmup_steps),
        "--measured-steps", str(request.measured_steps),
        *option_arguments(request.options),
        *(("--python", request.python) if request.python else ()),
        "--results", str(results),
        "--session", session,
    ]  # fmt: skip
