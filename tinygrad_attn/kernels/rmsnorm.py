"""RMSNorm over the last axis, x (R, N) -> y (R, N), with weight (N,): layer norm without the mean.

    rstd = 1 / sqrt(sum_j x_j^2 / N + eps),   xhat = x * rstd,   y = xhat * w

Backward, with gw = g * w:
    dx = rstd * (gw - xhat * mean(gw * xhat))
    dw = sum over rows of g * xhat

As layernorm.py: each kernel loops over a range of rows, `parallel.run_rows` runs it on the calling thread
or its `prange` driver over parts of the rows, each part summing its own rows' share of dw.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import SAFE_FASTMATH, buffers
from .parallel import row_parts, run_rows
from .vector import part_rows, wide_vectors


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy")
def _forward_rows(x, weight, eps, y, rstd, start, stop):
    wide_vectors()
    n = x.shape[1]
    size = x.dtype.type(n)  # an int divisor would turn float32 rows into float64 arithmetic
    for r in range(start, stop):
        s = x.dtype.type(0)
        for j in range(n):
            s += x[r, j] * x[r, j]
        inv = x.dtype.type(1) / np.sqrt(s / size + eps)
        rstd[r] = inv
        for j in range(n):
            y[r, j] = x[r, j] * inv * weight[j]


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy")
def _backward_rows(grad, x, weight, rstd, dx, dw, start, stop):
    """dx for rows [start, stop), and their sums of g * xhat added into dw."""
    wide_vectors()
    n = x.shape[1]
    for r in range(start, stop):
        inv = rstd[r]
        mean_gw_xhat = x.dtype.type(0)
        for j in range(n):
            xhat = x[r, j] * inv
            mean_gw_xhat += grad[r, j] * weight[j] * xhat
            dw[j] += grad[r, j] * xhat
        mean_gw_xhat /= x.dtype.type(n)
        for j in range(n):
            dx[r, j] = inv * (grad[r, j] * weight[j] - x[r, j] * inv * mean_gw_xhat)


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", parallel=True)
def _forward_parallel(x, weight, eps, y, rstd, parts):
    for p in prange(parts):
        start, stop = part_rows(x.shape[0], p, parts)
        _forward_rows(x, weight, eps, y, rstd, start, stop)


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", parallel=True)
def _backward_parallel(grad, x, weight, rstd, dx, dw, parts):
    """Rows cut into parts, each summing its own row of dw (dw has at least `parts` rows)."""
    parts = min(parts, dw.shape[0])
    for p in prange(parts):
        start, stop = part_rows(x.shape[0], p, parts)
        _backward_rows(grad, x, weight, rstd, dx, dw[p], start, stop)


def _backward_all_rows(grad, x, weight, rstd, dx, dw, start, stop):
    _backward_rows(grad, x, weight, rstd, dx, dw[0], start, stop)  # one part: dw (1, N)


def rms_norm_forward(x, weight, eps):
    """Returns (y, rstd); rstd (R,) is saved for the backward."""
    y, rstd = buffers.empty(x.shape, x.dtype), np.empty(x.shape[0], x.dtype)
    run_rows(_forward_parallel, _forward_rows, x.size * 2, x, weight, x.dtype.type(eps), y, rstd)
    return y, rstd


def rms_norm_backward(grad, x, weight, rstd):
    """(dx (R, N), dw (N,)) from the closed form above."""
    dx = buffers.empty(x.shape, x.dtype)
    parts = row_parts(x.shape[0], x.size * 3)
    dw = np.zeros((parts, x.shape[1]), x.dtype)
    run_rows(_backward_parallel, _backward_all_rows, x.size * 3, grad, x, weight, rstd, dx, dw)
    return dx, dw.sum(0)


def rms_norm_reference(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * weight
