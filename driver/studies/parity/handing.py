"""The kit's header options handed to the bare loop.

Before the rounds, the kit's benchmark command is started until its header, which records every
option as the kit resolved it (its defaults, the device, the AMP dtype, the threads, ...). Each
option that changes the computation (all but :data:`NOT_HANDED`) is handed to the bare loop,
which applies it in plain framework code or refuses it with a one-line reason
(``--check-options``, before it loads the framework).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from driver.studies.bareloop import OPTIONS_TAG
from driver.studies.parity.commands import commands
from driver.studies.parity.process import Runner, finished, tail
from driver.studies.parity.records import ParityError, ParityRequest
from driver.workloads.base import find_workload

# Header options that are not handed to the bare loop, and why: they are passed as its own
# arguments, or they do not change one process's computation on synthetic data.
NOT_HANDED: dict[str, str] = {
    "batch_size": "an argument of its own (compared)",
    "precision": "an argument of its own (compared)",
    "warmup_steps": "an argument of its own",
    "total_steps": "the bare loop counts warm-up and measured steps",
    "global_batch_size": "one process",
    "distributed_backend": "one process: no collective (handed to the Llama loop, which shards)",
    "engine": "one process: no collective",
    "tf_config": "one process: no collective",
    "kvstore": "one process: no collective",
    "dataset": "synthetic data on both sides",
    "data_dir": "synthetic data: no input files",
    "loader_workers": "synthetic data: no loader",
    "normalize_on": "synthetic data: no loader",
    "dali": "synthetic data: no input pipeline",
    "weights_checksum": "after the measurement",
    "parameters": "compared as the count each side built",
    "num_threads_source": "where the count came from; the count is handed",
    "step_sync": "how the kit times its steps (the bare loop syncs once, at the end)",
    "parallelism": "one process: nothing to shard or reduce (handed to the Llama loop)",
    "amp_effective": "a fact the kit's script measured (autocast's output dtype), not a setting",
    "compilation_cache": "where JAX keeps compiled programs: the warm-up's length, not the step",
}


def handed_options(header: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The header's options that change the computation: what the bare loop must apply (the
    header records every shape option: the model's workload names those of other models, and
    those it hands although :data:`NOT_HANDED` lists them)."""
    options = dict(header.get("options") or {})
    workload = find_workload(model)
    not_handed = () if workload is None else workload.parity_not_handed
    handed = () if workload is None else workload.parity_handed
    skip = {*NOT_HANDED, *not_handed} - set(handed)
    return {key: value for key, value in sorted(options.items()) if key not in skip}


def probe_header(request: ParityRequest, runner: Runner) -> dict[str, Any]:
    """The header of the kit's benchmark command (started until it prints it)."""
    kit = commands(request)["kit"]
    probe = replace(kit, stop_after='"dlperf": "header"')
    result = finished(runner(probe, request.timeout_s))
    for line in (result.out + "\n" + result.err).splitlines():
        if '"header"' in line and line.lstrip().startswith("{"):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("dlperf") == "header":
                return record
    raise ParityError(
        f"the kit's benchmark exited with {result.code} before its header: "
        f"{' '.join(kit.argv)}\n" + tail(result.err or result.out)
    )


def check_bare_options(
    request: ParityRequest, handed: Mapping[str, Any], runner: Runner
) -> dict[str, Any]:
    """The options the bare loop would apply (it refuses what it cannot mirror, before loading
    the framework)."""
    check = commands(request, handed)["bare_check"]
    result = finished(runner(check, request.timeout_s))
    if result.code != 0:
        errors = [line for line in result.err.splitlines() if "error:" in line]
        reason = errors[-1].split("error:", 1)[1].strip() if errors else tail(result.err)
        raise ParityError(f"the bare {request.framework} loop refuses the kit's case: {reason}")
    for line in result.out.splitlines():
        if OPTIONS_TAG in line:
            return dict(json.loads(line)["options"])
    raise ParityError(f"the bare loop's option check printed nothing: {' '.join(check.argv)}")
