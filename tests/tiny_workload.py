"""A model the kit does not ship, added the way a new model is: one workload module (this file
stands for ``driver/workloads/tiny_lm.py``) naming the framework it has a model file in; the
matrix entry is the test's. Importing it registers the workload once a process."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from driver.workloads.base import SIZE, WORKLOADS, MemoryPlan, Option, Workload

NAME = "tiny-lm"
PARAMETERS = 1_000_000
FORMULA = "6 x parameters per token (a dense decoder without attention's term)"
FLOPS_NOTE = f"MFU of Tiny LM: {FORMULA}."
STATE_BYTES = 16 * PARAMETERS  # fp32 weights and gradients, AdamW's two moments
TOKEN_BYTES = 2**20  # activations a token keeps: a round figure a test can reason with


@dataclass(frozen=True)
class TinyLm(Workload):
    def tokens_per_sample(self, options: Mapping[str, Any]) -> int | None:
        return int(options["seq_len"])

    def flops_per_sample(self, options: Mapping[str, Any]) -> float | None:
        return 6.0 * PARAMETERS * int(options["seq_len"])

    def parameters(self, options: Mapping[str, Any]) -> int | None:
        return PARAMETERS

    def figure_shape(self, options: Mapping[str, Any]) -> str:
        return f"at {options.get('seq_len', self.planned_options['seq_len'])} tokens"

    def memory(
        self, options: Mapping[str, Any], ranks: int, ranks_per_node: int
    ) -> MemoryPlan | None:
        return MemoryPlan(STATE_BYTES, TOKEN_BYTES * int(options["seq_len"]), 1, 0.9)


TINY_LM = TinyLm(
    name=NAME,
    title="Tiny LM pre-training",
    options={"seq_len": Option(128, SIZE)},
    data_formats=("tokens",),
    frameworks=("pytorch",),
    planned_options={"seq_len": 2048},
    parity_not_handed=("image_size", "num_classes", "momentum"),
    flops_source=FORMULA,
    flops_note=FLOPS_NOTE,
    gpu_batch={"fp32": 4, "amp": 4},
    search_probes=2,  # its largest batch is a few sequences over its GPU start
    scales_from_smallest_topology=True,
)
if NAME not in WORKLOADS:
    WORKLOADS.add(NAME, TINY_LM)
