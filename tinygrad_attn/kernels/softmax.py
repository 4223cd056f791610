"""Row-wise softmax and log-softmax over the last axis, with an optional keep-mask.

Shapes: x (R, N) C-contiguous, keep (R, N) bool (True = may attend) or an
empty (0, 0) array for "no mask". A row with nothing to attend to (every entry
masked or -inf) gives zeros in both softmax and log-softmax, and zero
gradient. Inside a live row, a masked entry has probability 0 (log-prob -inf)
and receives no gradient.

    forward:  y_j = exp(x_j - m) / sum_k exp(x_k - m),   m = max_k x_k
    softmax backward:      dx_j = y_j (g_j - sum_k g_k y_k)
    log-softmax backward:  dx_j = g_j - p_j sum_k g_k     (over live entries)
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import SAFE_FASTMATH


@njit(cache=True, parallel=True, fastmath=SAFE_FASTMATH)
def softmax_forward(x, keep, log):
    """Returns (y, lse): probabilities (or log-probabilities) and per-row log-sum-exp (-inf for dead rows)."""
    rows, n = x.shape
    has_mask = keep.shape[0] > 0
    out = np.empty_like(x)
    lse = np.empty(rows, dtype=x.dtype)
    for r in prange(rows):
        m = -np.inf
        for j in range(n):
            if (not has_mask or keep[r, j]) and x[r, j] > m:
                m = x[r, j]
        if m == -np.inf:  # nothing to attend to
            out[r, :] = 0.0
            lse[r] = -np.inf
            continue
        total = 0.0
        for j in range(n):
            e = np.exp(x[r, j] - m) if (not has_mask or keep[r, j]) else 0.0
            out[r, j] = e
            total += e
        row_lse = m + np.log(total)
        lse[r] = row_lse
        if log:
            for j in range(n):
                live = (not has_mask or keep[r, j]) and x[r, j] > -np.inf
                out[r, j] = x[r, j] - row_lse if live else -np.inf
        else:
            inv = 1.0 / total
            for j in range(n):
                out[r, j] *= inv
    return out, lse


@njit(cache=True, parallel=True, fastmath=SAFE_FASTMATH)
def softmax_backward(y, grad):
    """dx = y * (g - sum(g * y)) row by row; zero where y is 0."""
    rows, n = y.shape
    dx = np.empty_like(y)
    for r in prange(rows):
        dot = 0.0
        for j in range(n):
            dot += grad[r, j] * y[r, j]
        for j in range(n):
            dx[r, j] = y[r, j] * (grad[r, j] - dot)
    return dx


@njit(cache=True, parallel=True, fastmath=SAFE_FASTMATH)
def log_softmax_backward(y, grad, lse):
    """dx = g - exp(y) * sum(g) over live entries; zero for masked entries and dead rows."""
    rows, n = y.shape
    dx = np.zeros_like(y)
    for r in prange(rows):
        if lse[r] == -np.inf:
            continue
        total = 0.0
        for j in range(n):
            if y[r, j] != -np.inf:
                total += grad[r, j]
        for j in range(n):
            if y[r, j] != -np.inf:
                dx[r, j] = grad[r, j] - np.exp(y[r, j]) * total
    return dx


def softmax_reference(x: np.ndarray, keep: np.ndarray | None = None, log: bool = False) -> np.ndarray:
    """Plain-numpy softmax over the last axis with the same masking rules as the kernel."""
    live = (x > -np.inf) if keep is None else keep & (x > -np.inf)
    shifted = np.where(live, x, -np.inf)
    m = shifted.max(axis=-1, keepdims=True)
    dead = m == -np.inf
    e = np.where(live, np.exp(shifted - np.where(dead, 0, m)), 0)
    total = e.sum(axis=-1, keepdims=True)
    if log:
        lse = np.where(dead, 0, m + np.log(np.where(dead, 1, total)))
        return np.where(dead, 0, np.where(live, x - lse, -np.inf))
    return np.where(dead, 0, e / np.where(dead, 1, total))
