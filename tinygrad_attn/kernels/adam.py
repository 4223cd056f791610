"""The Adam / AdamW update fused into one pass over a parameter (and its numpy reference).

    g = grad (negated with maximize; + weight_decay * p for Adam's L2 form)
    m = b1 m + (1 - b1) g,   v = b2 v + (1 - b2) g^2
    v_max = max(v_max, v) with amsgrad, read below in v's place
    p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
AdamW (and Adam with decoupled weight decay) first decays the weight itself: p *= 1 - lr * weight_decay.
A dozen numpy passes per parameter become one loop.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import SAFE_FASTMATH
from .vector import maximum


@njit(cache=True, fastmath=SAFE_FASTMATH)
def adam_update(param, grad, m, v, v_max, lr, beta1, beta2, eps, step, weight_decay, decoupled, maximize):
    """Update flat arrays param, m, v (all (N,)) in place for optimizer step number `step` (from 1); v_max
    (N,) is amsgrad's running max of v, or empty without amsgrad."""
    bias1 = 1.0 - beta1**step
    bias2 = 1.0 - beta2**step
    decay = 1.0 - lr * weight_decay if decoupled else 1.0
    l2 = 0.0 if decoupled else weight_decay
    sign = -1.0 if maximize else 1.0
    amsgrad = v_max.size > 0
    for i in range(param.size):
        g = sign * grad[i] + l2 * param[i]
        m[i] = beta1 * m[i] + (1.0 - beta1) * g
        v[i] = beta2 * v[i] + (1.0 - beta2) * g * g
        second = v[i]
        if amsgrad:
            v_max[i] = maximum(v_max[i], v[i])  # NaN carried, as torch.maximum does
            second = v_max[i]
        param[i] = param[i] * decay - lr * (m[i] / bias1) / (np.sqrt(second / bias2) + eps)


def adam_reference(param, grad, m, v, lr, beta1, beta2, eps, step, weight_decay, decoupled, maximize=False,
                   v_max=None):
    """The same update in plain numpy, returning new (param, m, v) (and v_max when given)."""
    grad = -grad if maximize else grad
    if decoupled:
        param = param * (1 - lr * weight_decay)
    else:
        grad = grad + weight_decay * param
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad * grad
    second = v if v_max is None else np.maximum(v_max, v)
    param = param - lr * (m / (1 - beta1**step)) / (np.sqrt(second / (1 - beta2**step)) + eps)
    return (param, m, v) if v_max is None else (param, m, v, second)
