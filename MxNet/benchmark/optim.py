"""AdamW for MXNet 1.9 (its optimizer registry has Adam, LAMB, ... but no decoupled AdamW).

Built on the fused ``contrib.adamw_update`` kernel that GluonNLP's BERTAdam used: no bias
correction, weight decay decoupled from the gradient, as in the BERT reference optimizer.
"""

from __future__ import annotations

from typing import Any

import mxnet as mx

NAME = "dlperfadamw"  # registry names are lower-cased class names


class DlperfAdamW(mx.optimizer.Optimizer):
    def __init__(
        self,
        learning_rate: float = 1e-4,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-6,
        **kwargs: Any,
    ) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon

    def create_state(self, index: int, weight: mx.nd.NDArray) -> tuple[Any, Any]:
        zeros = {"ctx": weight.context, "dtype": weight.dtype, "stype": weight.stype}
        return mx.nd.zeros(weight.shape, **zeros), mx.nd.zeros(weight.shape, **zeros)

    def update(self, index: int, weight: Any, grad: Any, state: tuple[Any, Any]) -> None:
        self._update_count(index)
        mean, var = state
        # The kernel computes w -= eta * (lr * m / (sqrt(v) + eps) + wd * w): the schedule goes
        # in eta so that the decay is scaled by the learning rate too (AdamW).
        mx.nd.contrib.adamw_update(
            weight,
            grad,
            mean,
            var,
            rescale_grad=self.rescale_grad,
            lr=1.0,
            eta=self._get_lr(index),
            beta1=self.beta1,
            beta2=self.beta2,
            epsilon=self.epsilon,
            wd=self._get_wd(index),
            clip_gradient=self.clip_gradient if self.clip_gradient is not None else -1,
            out=weight,
        )


def register_adamw() -> str:
    """Register the optimizer once; returns the name to pass to ``gluon.Trainer``."""
    if NAME not in mx.optimizer.Optimizer.opt_registry:
        mx.optimizer.Optimizer.register(DlperfAdamW)
    return NAME
