"""LayerNorm over the last axis, x (R, N) -> y (R, N), with weight and bias (N,).

    mean = sum_j x_j / N,   rstd = 1 / sqrt(sum_j (x_j - mean)^2 / N + eps)
    xhat = (x - mean) * rstd,   y = xhat * w + b

Backward, with gw = g * w (the compact closed form):
    dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))
    dw = sum over rows of g * xhat,   db = sum over rows of g

Each kernel loops over a range of rows; `parallel.run_rows` runs it over all
rows on the calling thread, or its `prange` driver over parts of the rows. In
the backward each part sums its own rows' share of dw and db.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import SAFE_FASTMATH, buffers
from .parallel import row_parts, run_rows
from .vector import part_rows, wide_vectors


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy")
def _forward_rows(x, weight, bias, eps, y, mean, rstd, start, stop):
    wide_vectors()
    n = x.shape[1]
    size = x.dtype.type(n)  # dividing by the int n would turn float32 rows into float64 arithmetic
    for r in range(start, stop):
        s = x.dtype.type(0)
        for j in range(n):
            s += x[r, j]
        mu = s / size
        var = x.dtype.type(0)
        for j in range(n):
            d = x[r, j] - mu
            var += d * d
        inv = x.dtype.type(1) / np.sqrt(var / size + eps)
        mean[r], rstd[r] = mu, inv
        for j in range(n):
            y[r, j] = (x[r, j] - mu) * inv * weight[j] + bias[j]


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy")
def _backward_rows(grad, x, weight, mean, rstd, dx, dw, db, start, stop):
    """dx for rows [start, stop), and their sums of g * xhat and g added into dw and db."""
    wide_vectors()
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
        mean_gw /= x.dtype.type(n)  # in x's dtype: an int divisor would make float32 rows float64
        mean_gw_xhat /= x.dtype.type(n)
        for j in range(n):
            xhat = (x[r, j] - mu) * inv
            dx[r, j] = inv * (grad[r, j] * weight[j] - mean_gw - xhat * mean_gw_xhat)


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", parallel=True)
def _forward_parallel(x, weight, bias, eps, y, mean, rstd, parts):
    for p in prange(parts):
        start, stop = part_rows(x.shape[0], p, parts)
        _forward_rows(x, weight, bias, eps, y, mean, rstd, start, stop)


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", parallel=True)
def _backward_parallel(grad, x, weight, mean, rstd, dx, dw, db, parts):
    """Rows cut into parts, each summing its own row of dw and db (dw has at least `parts` rows)."""
    parts = min(parts, dw.shape[0])
    for p in prange(parts):
        start, stop = part_rows(x.shape[0], p, parts)
        _backward_rows(grad, x, weight, mean, rstd, dx, dw[p], db[p], start, stop)


def _backward_all_rows(grad, x, weight, mean, rstd, dx, dw, db, start, stop):
    _backward_rows(grad, x, weight, mean, rstd, dx, dw[0], db[0], start, stop)  # one part: dw (1, N)


def layer_norm_forward(x, weight, bias, eps):
    """Returns (y, mean, rstd); mean and rstd (R,) are saved for the backward."""
    y, mean, rstd = buffers.empty(x.shape, x.dtype), np.empty(x.shape[0], x.dtype), np.empty(x.shape[0], x.dtype)
    run_rows(_forward_parallel, _forward_rows, x.size * 3, x, weight, bias, x.dtype.type(eps), y, mean, rstd)
    return y, mean, rstd


def layer_norm_backward(grad, x, weight, mean, rstd):
    """(dx (R, N), dw (N,), db (N,)) from the closed form above."""
    dx = buffers.empty(x.shape, x.dtype)
    parts = row_parts(x.shape[0], x.size * 4)
    dw, db = np.zeros((parts, x.shape[1]), x.dtype), np.zeros((parts, x.shape[1]), x.dtype)
    run_rows(_backward_parallel, _backward_all_rows, x.size * 4, grad, x, weight, mean, rstd, dx, dw, db)
    return (dx, dw[0], db[0]) if parts == 1 else (dx, dw.sum(0), db.sum(0))  # one part: nothing to sum


def layer_norm_reference(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias
