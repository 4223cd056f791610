"""The Adam / AdamW update fused into one pass over a parameter (and its numpy reference).

    g = grad (+ weight_decay * p for Adam's L2 form)
    m = b1 m + (1 - b1) g,   v = b2 v + (1 - b2) g^2
    p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
AdamW first decays the weight itself: p *= 1 - lr * weight_decay.
A dozen numpy passes per parameter become one loop.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import SAFE_FASTMATH


@njit(cache=True, fastmath=SAFE_FASTMATH)
def adam_update(param, grad, m, v, lr, beta1, beta2, eps, step, weight_decay, decoupled):
    """Update flat arrays param, m, v (all (N,)) in place for optimizer step number `step` (from 1)."""
    bias1 = 1.0 - beta1**step
    bias2 = 1.0 - beta2**step
    decay = 1.0 - lr * weight_decay if decoupled else 1.0
    l2 = 0.0 if decoupled else weight_decay
    for i in range(param.size):
        g = grad[i] + l2 * param[i]
        m[i] = beta1 * m[i] + (1.0 - beta1) * g
        v[i] = beta2 * v[i] + (1.0 - beta2) * g * g
        param[i] = param[i] * decay - lr * (m[i] / bias1) / (np.sqrt(v[i] / bias2) + eps)


def adam_reference(param, grad, m, v, lr, beta1, beta2, eps, step, weight_decay, decoupled):
    """The same update in plain numpy, returning new (param, m, v)."""
    if decoupled:
        param = param * (1 - lr * weight_decay)
    else:
        grad = grad + weight_decay * param
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad * grad
    return param - lr * (m / (1 - beta1**step)) / (np.sqrt(v / (1 - beta2**step)) + eps), m, v
