"""Model-FLOPs utilization: training FLOPs per sample from the model definitions, device peaks.

FLOPs are counted by ``PyTorch.benchmark.flops.training_flops_per_sample`` (FlopCounterMode over
one forward + backward on the meta device) when torch is importable at release time; the
values are cached in the release manifest (``model_costs``) so that an audit needs no torch.
The parameter count (for the gradient size of the scaling bound) comes from the same models.

    MFU = throughput (samples/s) x FLOPs per sample / (devices x dense peak FLOP/s)

The peak is the device's (``reports/peaks.yaml``, matched on the record header's device name)
at the precision the run computed in: AMP -> its autocast dtype (bf16 or fp16), fp32 -> TF32
when the run enabled TF32 math, else IEEE fp32 (``driver.model.figures``, the one loader and
matcher of the peaks, and ``mfu()``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from driver.bench.contract import SHAPE_OPTIONS
from driver.workloads.base import find_workload

FLOPS_SOURCE = "PyTorch/benchmark/flops.py training_flops_per_sample (FlopCounterMode)"
GRADIENT_BYTES_PER_PARAMETER = 4  # fp32 gradients (also under AMP: fp32 master weights)


def shape_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options that change a model's shapes (and so its FLOPs)."""
    return {key: options[key] for key in sorted(SHAPE_OPTIONS) if key in options}


def _counted(model: str) -> bool:
    """Its FLOPs are counted from its PyTorch definition (its workload has no formula)."""
    workload = find_workload(model)
    return workload is not None and workload.counted


def cost_key(model: str, options: Mapping[str, Any]) -> str:
    return f"{model}|{json.dumps(shape_options(options), sort_keys=True)}"


def compute_model_costs(
    wanted: Iterable[tuple[str, Mapping[str, Any]]], printer: Any = None
) -> dict[str, dict[str, Any]]:
    """FLOPs per sample and parameters for each (model, options); {} when torch is absent.

    Models without a PyTorch definition (the calibration workload) are skipped; a formula
    model's come from its formula (:func:`formula_costs`), with or without torch.
    """
    wanted = list(wanted)
    costs = formula_costs(wanted)
    todo = {cost_key(m, o): (m, shape_options(o)) for m, o in wanted if _counted(m)}
    if not todo:
        return costs
    try:
        import torch

        from PyTorch.benchmark.flops import resolved_options, training_flops_per_sample
        from PyTorch.benchmark.models import build_model, count_parameters
    except ImportError as error:
        if printer:
            printer(f"model FLOPs not computed (no torch here: {error}); MFU cells will be '-'")
        return costs
    for key, (model, options) in sorted(todo.items()):
        flops = training_flops_per_sample(model, options)
        with torch.device("meta"):
            parameters = count_parameters(build_model(model, resolved_options(model, options)))
        costs[key] = {
            "model": model,
            "options": options,
            "flops_per_sample": float(flops),
            "parameters": int(parameters),
            "source": FLOPS_SOURCE,
            "torch": torch.__version__,
        }
    return costs


def formula_costs(
    wanted: Iterable[tuple[str, Mapping[str, Any]]], formula: str | None = None
) -> dict[str, dict[str, Any]]:
    """FLOPs per sample and parameters of the formula models, from their sizes, by the count
    ``formula`` names where their workload has it (a version is audited by its own count),
    else by their current one."""
    costs: dict[str, dict[str, Any]] = {}
    for model, options in wanted:
        workload = find_workload(model)
        if workload is None or not workload.has_formula:
            continue
        shaped = shape_options(options)
        resolved = {**SHAPE_OPTIONS, **shaped}
        flops, source = workload.flops_by_count(resolved, formula)
        costs[cost_key(model, options)] = {
            "model": model,
            "options": shaped,
            "flops_per_sample": flops,
            "parameters": workload.parameters(resolved),
            "source": source,
        }
    return costs
