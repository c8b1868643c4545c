"""A bare JAX loop of the benchmark's ResNet-50, for ``dlperf parity`` (no harness).

Build the Flax model, one synthetic batch, an Optax optimizer (SGD with momentum or AdamW, no
weight decay on biases and norm weights, global-norm clipping), one ``jax.jit`` step with the
training state donated, bfloat16 compute for AMP; a timer around whole steps and one
``block_until_ready`` at the end. Shares with the kit's benchmark only the model definition;
takes every option that changes the computation (:data:`OPTIONS`), each applied in plain JAX.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root

from driver.studies.bareloop import COMMON_OPTIONS, only, parse_args, print_result  # noqa: E402

CPUS = set(os.sched_getaffinity(0))
OPTIONS: dict[str, Any] = {
    **COMMON_OPTIONS,
    "device": "auto",  # auto: a GPU when JAX has one; cpu; gpu
    "amp_dtype": None,  # amp only: bfloat16 (the kit's AMP in JAX); None: the same
    "mesh": {"data": 1, "fsdp": 1},  # one process, one device
    "fsdp_size": 1,
    "compiled": "jax.jit, state donated",
    "checkpoint_policy": None,  # Llama's remat; none for ResNet-50
    "data_format": "NHWC",
    "cpu_affinity": None,  # the CPUs the kit's process ran on (None: the threads decide)
}
REFUSALS = {
    "device": lambda value: None if value in ("auto", "cpu", "gpu") else "expected cpu or gpu",
    "amp_dtype": lambda value: (
        None if value in (None, "bfloat16") else "JAX's AMP here computes in bfloat16"
    ),
    "mesh": only({"data": 1, "fsdp": 1}, "one process on one device"),
    "fsdp_size": only(1, "one process: nothing to shard"),
    "compiled": only("jax.jit, state donated", "the bare step is one jit with donated state"),
    "checkpoint_policy": only(None, "ResNet-50 is not rematerialised"),
    "data_format": only("NHWC", "the Flax ResNet-50 is NHWC"),
    "cpu_affinity": lambda value: (
        None
        if value is None or (isinstance(value, list) and value and set(value) <= CPUS)
        else f"expected a list of this host's CPUs {sorted(CPUS)}"
    ),
    "xla": only(False, "--xla is TensorFlow's switch (JAX always compiles with XLA)"),
}


def main() -> int:
    args = parse_args("jax", options=OPTIONS, refusals=REFUSALS)
    options = args.options
    # XLA's CPU client sizes its thread pools to the CPUs the process may use: the kit's CPUs
    # where it handed them, else the first ``threads`` of ours.
    allowed = sorted(os.sched_getaffinity(0))
    if options["cpu_affinity"]:
        os.sched_setaffinity(0, options["cpu_affinity"])
    elif 0 < args.threads < len(allowed):
        os.sched_setaffinity(0, allowed[: args.threads])

    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from JAX.benchmark.models.resnet import ResNet50

    if options["device"] == "cpu":
        jax.config.update("jax_platforms", "cpu")
    dtype = jnp.bfloat16 if args.precision == "amp" else jnp.float32
    model = ResNet50(options["num_classes"], options["zero_init_residual"], dtype)
    size, classes = options["image_size"], options["num_classes"]
    rng = np.random.default_rng(options["seed"])
    images = jnp.asarray(rng.standard_normal((args.batch_size, size, size, 3), dtype=np.float32))
    labels = jnp.asarray(rng.integers(0, classes, (args.batch_size,), dtype=np.int32))
    variables = model.init(jax.random.PRNGKey(options["seed"]), images[:1], train=False)
    params, batch_stats = variables["params"], variables["batch_stats"]

    decayed = lambda tree: jax.tree.map(lambda p: p.ndim > 1, tree)  # noqa: E731
    clip = [optax.clip_by_global_norm(options["grad_clip"])] if options["grad_clip"] > 0 else []
    if options["optimizer"] == "sgd":
        tx = optax.chain(
            *clip,
            optax.add_decayed_weights(options["weight_decay"], mask=decayed),
            optax.sgd(options["lr"], momentum=options["momentum"] or None),
        )
    else:
        tx = optax.chain(*clip, optax.adamw(
            options["lr"], b1=0.9, b2=0.999, eps=1e-6, weight_decay=options["weight_decay"],
            mask=decayed,
        ))  # fmt: skip
    opt_state = tx.init(params)

    def step(params: Any, batch_stats: Any, opt_state: Any) -> tuple[Any, Any, Any, jax.Array]:
        def objective(params: Any) -> tuple[jax.Array, Any]:
            logits, updated = model.apply(
                {"params": params, "batch_stats": batch_stats}, images, train=True,
                mutable=["batch_stats"],
            )  # fmt: skip
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
            return loss, updated["batch_stats"]

        (loss, batch_stats), grads = jax.value_and_grad(objective, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), batch_stats, opt_state, loss

    train = jax.jit(step, donate_argnums=(0, 1, 2))
    state = (params, batch_stats, opt_state)
    for _ in range(args.warmup_steps):
        *state, loss = train(*state)  # the first call compiles
        jax.block_until_ready(loss)
    cpu_start, start = time.process_time(), time.perf_counter()
    for _ in range(args.steps):
        *state, loss = train(*state)
    jax.block_until_ready((state, loss))  # the one host sync
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start

    device = jax.devices()[0]
    applied = {
        "device": "gpu" if device.platform == "gpu" else "cpu",
        "amp_dtype": "bfloat16" if dtype == jnp.bfloat16 else None,
        "mesh": {"data": 1, "fsdp": 1},
        "fsdp_size": 1,
        "compiled": "jax.jit, state donated",
        "checkpoint_policy": None,
        "data_format": "NHWC",
        "cpu_affinity": sorted(os.sched_getaffinity(0)) if device.platform == "cpu" else None,
        "xla": False,
        "image_size": int(images.shape[1]),
        "num_classes": int(state[0]["Dense_0"]["kernel"].shape[-1]),
        "zero_init_residual": options["zero_init_residual"],
        "optimizer": options["optimizer"],
        "lr": options["lr"],
        "momentum": options["momentum"],
        "weight_decay": options["weight_decay"],
        "grad_clip": options["grad_clip"],
        "num_threads": args.threads,
        "seed": options["seed"],
    }
    print_result(
        "jax", args, seconds=seconds, cpu_seconds=cpu_seconds, device=applied["device"],
        loss=float(loss), parameters=sum(int(p.size) for p in jax.tree.leaves(state[0])),
        applied=applied,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
