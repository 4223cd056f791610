"""LayerNorm over the last axis, x (R, N) -> y (R, N), with weight and bias (N,).

    mean = sum_j x_j / N,   rstd = 1 / sqrt(sum_j (x_j - mean)^2 / N + eps)
    xhat = (x - mean) * rstd,   y = xhat * w + b

Backward, with gw = g * w (the compact closed form):
    dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))
    dw = sum over rows of g * xhat,   db = sum over rows of g
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import SAFE_FASTMATH


@njit(cache=True, parallel=True, fastmath=SAFE_FASTMATH)
def layer_norm_forward(x, weight, bias, eps):
    """Returns (y, mean, rstd); mean and rstd (R,) are saved for the backward."""
    rows, n = x.shape
    y = np.empty_like(x)
    mean = np.empty(rows, dtype=x.dtype)
    rstd = np.empty(rows, dtype=x.dtype)
    for r in prange(rows):
        s = 0.0
        for j in range(n):
            s += x[r, j]
        mu = s / n
        var = 0.0
        for j in range(n):
            d = x[r, j] - mu
            var += d * d
        inv = 1.0 / np.sqrt(var / n + eps)
        mean[r] = mu
        rstd[r] = inv
        for j in range(n):
            y[r, j] = (x[r, j] - mu) * inv * weight[j] + bias[j]
    return y, mean, rstd


@njit(cache=True, parallel=True, fastmath=SAFE_FASTMATH)
def layer_norm_backward_input(grad, x, weight, mean, rstd):
    """dx (R, N) from the closed form above."""
    rows, n = x.shape
    dx = np.empty_like(x)
    for r in prange(rows):
        mean_gw = 0.0
        mean_gw_xhat = 0.0
        for j in range(n):
            gw = grad[r, j] * weight[j]
            mean_gw += gw
            mean_gw_xhat += gw * (x[r, j] - mean[r]) * rstd[r]
        mean_gw /= n
        mean_gw_xhat /= n
        for j in range(n):
            xhat = (x[r, j] - mean[r]) * rstd[r]
            dx[r, j] = rstd[r] * (grad[r, j] * weight[j] - mean_gw - xhat * mean_gw_xhat)
    return dx


@njit(cache=True, fastmath=SAFE_FASTMATH)
def layer_norm_backward_params(grad, x, mean, rstd):
    """dw = sum over rows of g * xhat, db = sum over rows of g, both (N,): one pass over g and x."""
    rows, n = x.shape
    dw = np.zeros(n, dtype=np.float64)
    db = np.zeros(n, dtype=np.float64)
    for r in range(rows):
        for j in range(n):
            dw[j] += grad[r, j] * (x[r, j] - mean[r]) * rstd[r]
            db[j] += grad[r, j]
    return dw.astype(x.dtype), db.astype(x.dtype)


def layer_norm_reference(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias
