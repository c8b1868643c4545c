"""Llama 3 sizes by name, their parameter counts and the training FLOPs per token (stdlib only).

One place for the numbers every consumer needs: the PyTorch model builds itself from
:class:`LlamaShape`, the driver checks a case's size and sequence length before anything runs,
a release computes MFU from :func:`training_flops_per_token`, and the estimate before booking
and a session's table call the same function (through :data:`LLAMA_WORKLOAD`, its workload).

The published sizes are Meta's configurations (``config.json`` of meta-llama/Llama-3.1-8B,
Llama-3.2-1B and Llama-3.1-70B; Llama 3 paper, arXiv:2407.21783, table 3): RMSNorm (eps 1e-5),
rotary embeddings with theta 500,000, SwiGLU feed-forward, grouped-query attention with 8
key/value heads, vocabulary 128,256; Llama 3.2 1B ties the output projection to the token
embeddings. The ``llama-tiny`` and ``llama-small`` sizes are ours, for tests and CPU smoke runs.

FLOPs per token (training: forward + backward), the formula of PaLM (Chowdhery et al. 2022,
appendix B) as torchtitan computes it (``get_nparams_and_flops``, torchtitan/models/utils.py)::

    6 x N + 12 x layers x heads x head_dim x seq_len

where N is the number of parameters that take part in a matmul: every distinct parameter but
the token-embedding table (a lookup), and the output projection whether untied or tied to that
table, since a tied projection still runs. torchtitan counts the tied projection since commit
4ed3c536 (2026-05-08, "Fix weight tying parameter accounting": "keep tied lm_head weights
included in FLOPs accounting because the output projection still runs"); before it, and in the
kit's releases before this count, a tied projection did not count (``tied_output_counted``
False; :data:`FLOPS_FORMULA_BEFORE_4ED3C536`), which puts Llama 3.2 1B's FLOPs 15% lower at
8,192 tokens (9.06e9 against 1.0636e10 a token), and its MFU with them. The attention term
counts the full (not causal-halved) score and value matmuls. Recomputation by activation
checkpointing is not counted (model FLOPs, not hardware FLOPs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from driver.workloads.base import (
    SIZE,
    WORKLOADS,
    MemoryPlan,
    Option,
    Workload,
    WorkloadOptionError,
    resolve_parallelism,
)

MODEL = "llama"
FLOPS_FORMULA = (
    "6 x matmul parameters (all but the token embedding; a tied output projection counts) + "
    "12 x layers x heads x head_dim x seq_len per token (PaLM, Chowdhery et al. 2022, appendix "
    "B; torchtitan get_nparams_and_flops since 4ed3c536)"
)
# The count of the kit's releases before torchtitan's 4ed3c536 was followed: a tied output
# projection not counted. A version released with it is audited with it (its manifest names it).
FLOPS_FORMULA_BEFORE_4ED3C536 = (
    "6 x non-embedding parameters + 12 x layers x heads x head_dim x seq_len per token "
    "(PaLM, Chowdhery et al. 2022, appendix B; torchtitan get_nparams_and_flops)"
)


@dataclass(frozen=True)
class LlamaShape:
    """A Llama 3 decoder's sizes."""

    dim: int
    layers: int
    heads: int
    kv_heads: int
    ffn_dim: int
    vocab_size: int
    tied_embeddings: bool = False
    rope_theta: float = 500_000.0
    norm_eps: float = 1e-5
    max_seq_len: int = 131_072  # the published context length (8,192 before 3.1's extension)

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    def problems(self) -> list[str]:
        """What makes this shape unbuildable (empty when it is fine)."""
        found = []
        if self.dim % self.heads:
            found.append(f"dim {self.dim} is not a multiple of heads {self.heads}")
        elif self.head_dim % 2:
            found.append(f"head_dim {self.head_dim} is odd (rotary embeddings rotate pairs)")
        if self.heads % self.kv_heads:
            found.append(f"heads {self.heads} is not a multiple of kv_heads {self.kv_heads}")
        return found

    def parameters(self) -> int:
        """Distinct parameters (a tied output projection counts once)."""
        per_layer = (
            self.dim * self.heads * self.head_dim  # wq
            + 2 * self.dim * self.kv_heads * self.head_dim  # wk, wv
            + self.heads * self.head_dim * self.dim  # wo
            + 3 * self.dim * self.ffn_dim  # w1, w2, w3 (SwiGLU)
            + 2 * self.dim  # attention and feed-forward RMSNorm weights
        )
        output = 0 if self.tied_embeddings else self.vocab_size * self.dim
        return self.embedding_parameters() + self.layers * per_layer + self.dim + output

    def embedding_parameters(self) -> int:
        return self.vocab_size * self.dim

    def non_embedding_parameters(self) -> int:
        return self.parameters() - self.embedding_parameters()

    def matmul_parameters(self, tied_output_counted: bool = True) -> int:
        """The parameters a token's forward pass multiplies by: all but the embedding table,
        and a tied output projection once more (it is that table, and it runs)."""
        tied = self.embedding_parameters() if self.tied_embeddings and tied_output_counted else 0
        return self.non_embedding_parameters() + tied


# Published sizes (see the module docstring) and ours for CPUs and tests.
LLAMA_SIZES: dict[str, LlamaShape] = {
    "llama3-8b": LlamaShape(4096, 32, 32, 8, 14_336, 128_256),
    "llama3-1b": LlamaShape(2048, 16, 32, 8, 8192, 128_256, tied_embeddings=True),
    "llama3-70b": LlamaShape(8192, 80, 64, 8, 28_672, 128_256),
    "llama-small": LlamaShape(256, 4, 8, 4, 768, 8192, max_seq_len=4096),
    "llama-tiny": LlamaShape(64, 2, 4, 2, 192, 512, max_seq_len=1024),
}
DEFAULT_SIZE = "llama3-8b"


class LlamaOptionError(WorkloadOptionError):
    """A Llama size or sequence length the model cannot take; ``field`` names it."""


def llama_shape(options: Mapping[str, Any]) -> LlamaShape:
    """The shape named by ``options['llama_size']``, checked against ``options['seq_len']``."""
    name = options.get("llama_size", DEFAULT_SIZE)
    if name not in LLAMA_SIZES:
        raise LlamaOptionError(
            "llama_size", f"{name!r} is not a known size; use one of {', '.join(LLAMA_SIZES)}"
        )
    shape = LLAMA_SIZES[str(name)]
    seq_len = options.get("seq_len")
    if seq_len is not None:
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 2:
            raise LlamaOptionError("seq_len", f"must be an integer >= 2, got {seq_len!r}")
        if seq_len > shape.max_seq_len:
            raise LlamaOptionError(
                "seq_len",
                f"{seq_len} is longer than {name}'s context of {shape.max_seq_len} tokens; "
                "give a shorter seq_len",
            )
    return shape


def training_flops_per_token(
    shape: LlamaShape, seq_len: int, tied_output_counted: bool = True
) -> float:
    """Training (forward + backward) model FLOPs per token: see the module docstring."""
    attention = 12 * shape.layers * shape.heads * shape.head_dim * seq_len
    return float(6 * shape.matmul_parameters(tied_output_counted) + attention)


def training_flops_per_sample(
    options: Mapping[str, Any], tied_output_counted: bool = True
) -> float:
    """FLOPs of one training sequence (``seq_len`` tokens) of the size in ``options``."""
    seq_len = int(options["seq_len"])
    shape = llama_shape(options)
    return training_flops_per_token(shape, seq_len, tied_output_counted) * seq_len


# Each count's words, as a release's manifest records them (``model_costs[...].source``) ->
# whether it counts a tied output projection: an audit recomputes a version by its own count.
FLOPS_FORMULAS = {FLOPS_FORMULA: True, FLOPS_FORMULA_BEFORE_4ED3C536: False}


# --- memory, for planning ------------------------------------------------------------------
# Training state a parameter costs, in bytes: fp32 master weight and gradient, and AdamW's two
# fp32 moments (bf16 weights for the compute are gathered one block at a time under FSDP).
STATE_BYTES_PER_PARAMETER = 4 + 4 + 8
# Activations kept per layer and token, in bytes per unit of the model width, by checkpointing
# mode. none: Korthikanti et al. 2022 (arXiv:2205.05198, section 4) count 34 x width bytes a
# layer a token for a transformer layer in 16-bit, without the attention-score term a fused
# (flash) attention never stores. selective: 28, fitted to the one published peak there is,
# torchtitan's Llama 3.1 8B (82.4 GiB at batch 2, sequence 8192, FSDP on 8 GPUs, op-level
# selective checkpointing, no compile: published/llama3/torchtitan.yaml), which this model
# then gives within 1%. full: each layer's input (2 x width) kept, one layer recomputed at a
# time with all of its activations.
ACTIVATION_BYTES_PER_WIDTH = {"none": 34, "selective": 28, "full": 2}
# The loss's logits: bf16 outputs and their fp32 copy for the cross entropy, per token.
LOGIT_BYTES_PER_VOCAB = 2 + 4
# torch.compile fuses elementwise ops and keeps fewer of their outputs: torchtitan's published
# pair (the same 1n8g run with and without compile, 77.0 and 82.4 GiB, published/llama3/
# torchtitan.yaml) keeps 0.92 of the activations once the 15.0 GiB of training state is taken off.
COMPILED_ACTIVATION_SHARE = 0.92
USABLE_MEMORY = 0.9  # the share of a device's memory a plan counts on (allocator, CUDA context)
# A repeat's start on GPUs (process group, the model built and sharded, the first all-gathers)
# and a torch.compile warm-up, per size: assumed, not measured (no run of the kit on a GPU yet,
# and neither torchtitan nor NeMo publish one); the CPU runs' start-up does not stand for them.
# A measured start-up longer than these wins (the estimate's rule).
ASSUMED_STARTUP_S = {"llama3-1b": 30.0, "llama3-8b": 60.0, "llama3-70b": 180.0}
ASSUMED_COMPILE_S = 120.0
# Its search on a GPU starts at the matrix's fixed batch (GPU_BATCH) and the largest batch is a
# few sequences: one doubling that fails, one or two bisections.
SEARCH_PROBES = 3
# The matrix's batch: at sequence 8192 a device holds a few sequences (:func:`largest_batch`),
# so a search starts there, not at 16.
GPU_BATCH = {"fp32": 2, "amp": 2}


def memory_shards(options: Mapping[str, Any], ranks: int, ranks_per_node: int) -> int:
    """Over how many ranks the training state is sharded: all of them under FSDP (Llama's
    default on several ranks), a node's under HSDP, none under DDP or on one rank."""
    parallelism = resolve_parallelism(MODEL, str(options.get("parallelism", "auto")), ranks)
    return {"fsdp": ranks, "hsdp": ranks_per_node}.get(parallelism, 1)


def training_memory_bytes(
    shape: LlamaShape, seq_len: int, shards: int, checkpointing: str, model_parallel: int = 1
) -> tuple[float, float]:
    """(bytes of training state a device holds, bytes of activations per sequence) for a
    planning estimate (see the constants above): not a measurement, and no substitute for
    ``batch_size: max``'s search, which starts near it. ``model_parallel`` (tensor x context
    parallel degrees) splits a sequence's activations: tensor parallelism with sequence
    parallelism and a parallel loss (torchtitan's and Megatron's defaults) keeps 1/t of every
    activation and of the logits (Korthikanti et al. 2022, section 4.2.2), context parallelism
    1/c of the tokens."""
    state = shape.parameters() * STATE_BYTES_PER_PARAMETER / max(shards, 1)
    kept = ACTIVATION_BYTES_PER_WIDTH[checkpointing] * shape.dim * seq_len * shape.layers
    if checkpointing == "full":  # the layer being recomputed holds its whole activations
        kept += ACTIVATION_BYTES_PER_WIDTH["none"] * shape.dim * seq_len
    logits = LOGIT_BYTES_PER_VOCAB * shape.vocab_size * seq_len
    return float(state), float(kept + logits) / max(model_parallel, 1)


def case_memory_bytes(
    options: Mapping[str, Any], ranks: int, ranks_per_node: int
) -> tuple[float, float]:
    """:func:`training_memory_bytes` of a case's options (``seq_len`` given) on ``ranks``
    ranks, ``ranks_per_node`` a node: (training state a device holds, bytes a sequence)."""
    split = int(options.get("tensor_parallel", 1)) * int(options.get("context_parallel", 1))
    state, per_sequence = training_memory_bytes(
        llama_shape(options),
        int(options["seq_len"]),
        memory_shards(options, ranks, ranks_per_node),
        str(options.get("activation_checkpointing", "none")),
        split,
    )
    return state, per_sequence * (COMPILED_ACTIVATION_SHARE if options.get("compile") else 1.0)


def resident_sequences(options: Mapping[str, Any], batch: int) -> float:
    """Sequences whose activations a device holds at once, for the estimate: the per-device
    batch, or, for a source that accumulates micro-batches (Megatron-LM: option
    ``micro_batch``), one micro-batch (a pipeline stage's 1F1B schedule holds up to PP
    micro-batches of its 1/PP of the layers, about one micro-batch of all of them). Their
    split over tensor and context parallelism is :func:`case_memory_bytes`'s bytes a
    sequence."""
    if "micro_batch" not in options:
        return float(batch)
    return float(int(options["micro_batch"]))


def largest_batch(
    options: Mapping[str, Any], ranks: int, ranks_per_node: int, device_bytes: float
) -> int:
    """The largest per-device batch that fits ``device_bytes`` by :func:`training_memory_bytes`
    (0 where not even one sequence does; the training state alone may not)."""
    state, per_sequence = case_memory_bytes(options, ranks, ranks_per_node)
    room = device_bytes * USABLE_MEMORY - state
    return max(0, int(room // per_sequence))


@dataclass(frozen=True)
class LlamaWorkload(Workload):
    """Llama's counts are formulas of its size: tokens a sample, FLOPs, parameters."""

    def shape(self, options: Mapping[str, Any]) -> LlamaShape:
        return llama_shape(options)

    def tokens_per_sample(self, options: Mapping[str, Any]) -> int | None:
        return int(options.get("seq_len") or 0) or None

    def flops_per_sample(self, options: Mapping[str, Any]) -> float | None:
        try:
            return training_flops_per_sample(options)
        except (KeyError, TypeError, ValueError):  # LlamaOptionError is a ValueError
            return None

    def parameters(self, options: Mapping[str, Any]) -> int | None:
        return self.shape(options).parameters()

    def check_options(self, options: Mapping[str, Any]) -> None:
        problems = llama_shape(options).problems()
        if problems:
            raise LlamaOptionError("llama_size", "; ".join(problems))

    def flops_by_count(
        self, options: Mapping[str, Any], count: str | None = None
    ) -> tuple[float | None, str]:
        words = count if count in FLOPS_FORMULAS else FLOPS_FORMULA
        return training_flops_per_sample(options, FLOPS_FORMULAS[words]), words

    def figure_shape(self, options: Mapping[str, Any]) -> str:
        merged = {**self.planned_options, **options}
        return f"{merged['llama_size']} at {merged['seq_len']} tokens"

    def gpu_startup(self, options: Mapping[str, Any]) -> tuple[float, str] | None:
        size = str(options.get("llama_size", DEFAULT_SIZE))
        assumed = ASSUMED_STARTUP_S.get(size, 0.0)
        assumed += ASSUMED_COMPILE_S if options.get("compile") else 0.0
        return assumed, f"{size} on GPUs"

    def memory(
        self, options: Mapping[str, Any], ranks: int, ranks_per_node: int
    ) -> MemoryPlan | None:
        if "seq_len" not in options:
            return None
        state, per_sequence = case_memory_bytes(options, ranks, ranks_per_node)
        shards = memory_shards(options, ranks, ranks_per_node)
        return MemoryPlan(state, per_sequence, shards, USABLE_MEMORY)

    def resident_samples(self, options: Mapping[str, Any], batch: int) -> float:
        return resident_sequences(options, batch)


PLANNED_SEQ_LEN = 8192  # the matrix's, where a case names none

LLAMA_WORKLOAD = WORKLOADS.add(
    MODEL,
    LlamaWorkload(
        name=MODEL,
        title="Llama 3 pre-training",
        # seq_len is BERT's option too (its default, 128, is the first declared); the
        # vocabulary is the size's.
        options={
            "seq_len": Option(128, SIZE),
            "llama_size": Option(DEFAULT_SIZE, tuple(LLAMA_SIZES)),
        },
        data_formats=("tokens",),
        listed=4,
        planned_options={"llama_size": DEFAULT_SIZE, "seq_len": PLANNED_SEQ_LEN},
        # The image and BERT options, and momentum (its AdamW has none), are not handed; the
        # bare Llama loop shards with FSDP2 under torchrun as the kit does (none on one process).
        parity_not_handed=(
            "image_size", "num_classes", "channels_last", "aux_logits", "vocab_size",
            "bert_layers", "bert_hidden", "bert_heads", "bert_intermediate", "max_predictions",
            "momentum",
        ),  # fmt: skip
        parity_handed=("parallelism", "distributed_backend"),
        flops_source=FLOPS_FORMULA,
        flops_note=f"MFU of Llama: training FLOPs per token = {FLOPS_FORMULA}.",
        gpu_batch=GPU_BATCH,
        search_probes=SEARCH_PROBES,
        shards=True,
        scales_from_smallest_topology=True,
        sample_name="sequence",
    ),
)
