"""The optimizer step both bare PyTorch loops take (``bare_loop.py``'s ResNet-50 and
``bare_llama.py``'s Llama), in one module of their own: ``bare_loop.py`` hands ``--model llama``
to ``bare_llama.py``, which imports this, not the loop that started it."""

from __future__ import annotations

from typing import Any


def optimizer_groups(model: Any, options: dict[str, Any]) -> tuple[list[dict], dict[str, Any]]:
    """The parameter groups (biases and norm weights get no weight decay) and the optimizer's
    implementation keywords (fused / foreach / a plain loop), as the kit's scripts make them."""
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    groups = [
        {"params": decay, "weight_decay": options["weight_decay"]},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    impl = options["optimizer_impl"]
    flavour = {"fused": impl == "fused" or None, "foreach": impl == "foreach" or None}
    if impl == "loop":
        flavour["foreach"] = False
    return groups, flavour


def backward_and_step(
    loss: Any, optimizer: Any, scaler: Any, params: Any, clip: float, set_to_none: bool
) -> None:
    """Backward, gradient clipping (unscaled first under a GradScaler), the optimizer's step."""
    import torch

    if scaler is not None:
        scaler.scale(loss).backward()
        if clip > 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(params, clip)
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        optimizer.step()
    optimizer.zero_grad(set_to_none=set_to_none)
