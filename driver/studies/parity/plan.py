"""The request checked, and the one case ``dlperf run`` plans for it on this host.

The framework's matrix under the profile ``auto`` chooses here, narrowed and overridden by the
command line exactly as ``dlperf run`` narrows it (``driver.core.matrix``): the kit side runs
that case, and the bare loop gets its options (``handing.py``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from driver.core.matrix import (
    MatrixError,
    UnknownProfile,
    apply_overrides,
    load_matrix,
    overrides_from,
)
from driver.core.session import choose_profile
from driver.frameworks.base import FRAMEWORKS, REPO_ROOT
from driver.model.case import Case, Topology
from driver.plugins import load
from driver.runtimes.base import RuntimeConfigError
from driver.runtimes.local import check_framework_python
from driver.schema import ConfigError
from driver.studies.bareloop import BARE_MODELS
from driver.studies.parity.records import ParityError, ParityRequest


def prepare(request: ParityRequest) -> ParityRequest:
    """The request with the framework's own name, checked (options: by the matrix's rules, in
    :func:`plan_case`)."""
    load("frameworks")
    if request.framework not in FRAMEWORKS:
        raise ParityError(
            f"--framework {request.framework}: not a framework of the kit "
            f"({', '.join(sorted(FRAMEWORKS.names()))})"
        )
    framework = FRAMEWORKS.get(request.framework)
    if request.model not in BARE_MODELS or request.model not in framework.models:
        raise ParityError(
            f"--model {request.model}: the bare loops train {', '.join(BARE_MODELS)} "
            f"({framework.name} has {', '.join(framework.models)})"
        )
    if request.model == "llama" and framework.name != "pytorch":
        raise ParityError(f"--model llama: only PyTorch has a bare Llama loop ({framework.name})")
    check_topology(request)
    if request.precision not in ("fp32", "amp"):
        raise ParityError(f"--precision {request.precision}: fp32 or amp")
    if request.rounds < 1:
        raise ParityError(f"--rounds must be at least 1, got {request.rounds}")
    if request.measured_steps < 1 or request.warmup_steps < 0 or request.batch_size < 1:
        raise ParityError("--batch and --measured-steps must be positive, --warmup-steps >= 0")
    if request.threads < 0:
        raise ParityError(f"--threads must be >= 0 (0: the kit's default), got {request.threads}")
    python = request.python
    if python is not None:
        try:  # as dlperf run checks it: it starts and imports the framework
            python = check_framework_python(python, [framework])
        except RuntimeConfigError as error:
            raise ParityError(str(error)) from None
    options = dict(request.options)
    for name, value in request.options.items():
        if type(value) is int and value in (0, 1):  # channels_last=1: a flag written as 0/1
            try:
                framework.check_option(name, value)
            except ValueError:
                options[name] = bool(value)
    # The kit's driver runs in the repository root: its --results must not depend on our cwd.
    results = Path(request.results).absolute()
    request = replace(
        request, framework=framework.name, options=options, python=python, results=results
    )
    plan_case(request)  # the selection and the options, checked now
    return request


# The (framework, model) pairs whose bare loop shards over several processes on one host.
SHARDING_BARE_LOOPS = {("pytorch", "llama"): "FSDP2 (fully_shard) under torchrun"}


def check_topology(request: ParityRequest) -> Topology:
    """``--topology``: 1n1g for every bare loop; 1n<k>g (k processes on this host, as ``dlperf
    run`` starts them) where the bare loop shards as the kit does."""
    try:
        topology = Topology.parse(request.topology)
    except ValueError as error:
        raise ParityError(f"--topology {request.topology}: {error}") from None
    if topology.world_size == 1:
        return topology
    if topology.nodes != 1:
        raise ParityError(
            f"--topology {request.topology}: parity runs on one host; use 1n<k>g (k processes)"
        )
    framework = FRAMEWORKS.get(request.framework).name
    how = SHARDING_BARE_LOOPS.get((framework, request.model))
    if how is None:
        loops = ", ".join(f"{f} {m} ({h})" for (f, m), h in SHARDING_BARE_LOOPS.items())
        raise ParityError(
            f"--topology {request.topology}: the bare {framework} {request.model} loop "
            f"runs one process and does not shard; only {loops} runs at 1n<k>g (or use 1n1g)"
        )
    return topology


def plan_case(request: ParityRequest) -> tuple[Case, str]:
    """The one case ``dlperf run`` runs for this request on this host, and its profile."""
    framework = FRAMEWORKS.get(request.framework)
    profile, _why = choose_profile(request.profile, "local")
    try:
        matrix = load_matrix(framework.matrix_file, profile)
        overrides = overrides_from(
            {
                "models": (request.model,),
                "topologies": (request.topology,),
                "batch_sizes": (request.batch_size,),
                "precisions": (request.precision,),
                "xla": request.xla,
                "datasets": ("synthetic",),
                "variants": (request.variant,),
                "repeats": 1,
                "warmup_steps": request.warmup_steps,
                "measured_steps": request.measured_steps,
                "options": dict(request.options),
            }
        )
        cases = apply_overrides(matrix.cases, overrides)
    except UnknownProfile as error:
        raise ParityError(f"--profile {request.profile}: {error.message}") from None
    except (MatrixError, ConfigError) as error:
        raise ParityError(str(error).replace("command line: ", "")) from None
    if len(cases) != 1:
        known = sorted({c.variant for c in matrix.cases if c.model == request.model})
        raise ParityError(
            f"--variant {request.variant} --xla {'on' if request.xla else 'off'}: the "
            f"{profile} profile of {framework.matrix_file.relative_to(REPO_ROOT)} has "
            f"{len(cases)} such {request.model} case(s); its variants: {', '.join(known)}"
        )
    return cases[0], profile
