"""LayerNorm over the last axis, x (R, N) -> y (R, N), with weight and bias (N,).

    mean = sum_j x_j / N,   rstd = 1 / sqrt(sum_j (x_j - mean)^2 / N + eps)
    xhat = (x - mean) * rstd,   y = xhat * w + b

Backward, with gw = g * w (the compact closed form):
    dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))
    dw = sum over rows of g * xhat,   db = sum over rows of g

Each kernel does rows [start, stop); the wrappers share the rows among the
pool's threads, and each thread sums its rows' share of dw and db.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import SAFE_FASTMATH
from .parallel import parallel_for, shares, threads_for


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def _forward_rows(x, weight, bias, eps, y, mean, rstd, start, stop):
    n = x.shape[1]
    for r in range(start, stop):
        s = x.dtype.type(0)
        for j in range(n):
            s += x[r, j]
        mu = s / n
        var = x.dtype.type(0)
        for j in range(n):
            d = x[r, j] - mu
            var += d * d
        inv = x.dtype.type(1) / np.sqrt(var / n + eps)
        mean[r], rstd[r] = mu, inv
        for j in range(n):
            y[r, j] = (x[r, j] - mu) * inv * weight[j] + bias[j]


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def _backward_rows(grad, x, weight, mean, rstd, dx, dw, db, start, stop):
    """dx for rows [start, stop), and their sums of g * xhat and g added into dw and db."""
    n = x.shape[1]
    for r in range(start, stop):
        mu, inv = mean[r], rstd[r]
        mean_gw = x.dtype.type(0)
        mean_gw_xhat = x.dtype.type(0)
        for j in range(n):
            xhat = (x[r, j] - mu) * inv
            gw = grad[r, j] * weight[j]
            mean_gw += gw
            mean_gw_xhat += gw * xhat
            dw[j] += grad[r, j] * xhat
            db[j] += grad[r, j]
        mean_gw /= n
        mean_gw_xhat /= n
        for j in range(n):
            xhat = (x[r, j] - mu) * inv
            dx[r, j] = inv * (grad[r, j] * weight[j] - mean_gw - xhat * mean_gw_xhat)


def layer_norm_forward(x, weight, bias, eps):
    """Returns (y, mean, rstd); mean and rstd (R,) are saved for the backward."""
    y, mean, rstd = np.empty_like(x), np.empty(x.shape[0], x.dtype), np.empty(x.shape[0], x.dtype)
    parallel_for(lambda s: _forward_rows(x, weight, bias, eps, y, mean, rstd, s.start, s.stop), x.shape[0],
                 x.size * 3)
    return y, mean, rstd


def layer_norm_backward(grad, x, weight, mean, rstd):
    """(dx (R, N), dw (N,), db (N,)) from the closed form above."""
    dx = np.empty_like(x)
    parts = shares(x.shape[0], threads_for(x.size * 4, x.shape[0])) or [slice(0, 0)]
    dw, db = np.zeros((len(parts), x.shape[1]), x.dtype), np.zeros((len(parts), x.shape[1]), x.dtype)

    def run(which: slice) -> None:
        for i in range(which.start, which.stop):
            _backward_rows(grad, x, weight, mean, rstd, dx, dw[i], db[i], parts[i].start, parts[i].stop)

    parallel_for(run, len(parts), x.size * 4)
    return dx, dw.sum(0), db.sum(0)


def layer_norm_reference(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias
