"""Cross-entropy fused with log-softmax, logits x (N, C) and integer targets t (N,).

    loss_i = lse_i - x_i[t_i],     lse_i = log sum_c exp(x_ic)
    dx_ic  = g_i * (softmax(x_i)_c - [c == t_i])

The one-hot matrix is never built: the backward subtracts 1 at the target
column only. Rows whose target is `ignore_index` have loss 0 and gradient 0.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import SAFE_FASTMATH


@njit(cache=True, parallel=True, fastmath=SAFE_FASTMATH)
def cross_entropy_forward(x, target, ignore_index):
    """Returns (loss (N,), lse (N,)); both 0 on ignored rows."""
    rows, classes = x.shape
    loss = np.zeros(rows, dtype=x.dtype)
    lse = np.zeros(rows, dtype=x.dtype)
    for r in prange(rows):
        if target[r] == ignore_index:
            continue
        m = x[r, 0]
        for c in range(1, classes):
            m = max(m, x[r, c])
        total = 0.0
        for c in range(classes):
            total += np.exp(x[r, c] - m)
        lse[r] = m + np.log(total)
        loss[r] = lse[r] - x[r, target[r]]
    return loss, lse


@njit(cache=True, parallel=True, fastmath=SAFE_FASTMATH)
def cross_entropy_backward(x, target, lse, row_grad, ignore_index):
    """dx (N, C) = row_grad[:, None] * (softmax(x) - onehot(target))."""
    rows, classes = x.shape
    dx = np.zeros_like(x)
    for r in prange(rows):
        if target[r] == ignore_index:
            continue
        for c in range(classes):
            dx[r, c] = np.exp(x[r, c] - lse[r]) * row_grad[r]
        dx[r, target[r]] -= row_grad[r]
    return dx


def cross_entropy_reference(x: np.ndarray, target: np.ndarray, ignore_index: int) -> np.ndarray:
    """Per-row losses, 0 where ignored."""
    m = x.max(axis=-1, keepdims=True)
    log_probs = x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))
    keep = target != ignore_index
    picked = np.take_along_axis(log_probs, np.where(keep, target, 0)[:, None], axis=-1)[:, 0]
    return np.where(keep, -picked, 0)
