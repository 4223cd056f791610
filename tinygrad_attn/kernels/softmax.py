"""Row-wise softmax and log-softmax over the last axis, with an optional keep-mask.

Shapes: x (R, N) C-contiguous, keep (R, N) bool (True = may attend) or an
empty (0, 0) array for "no mask". A row with nothing to attend to (every entry
masked or -inf) gives zeros in both softmax and log-softmax, and zero
gradient. Inside a live row, a masked entry has probability 0 (log-prob -inf)
and receives no gradient. A NaN in a row's kept entries makes the whole row NaN.

    forward:  y_j = exp(x_j - m) / sum_k exp(x_k - m),   m = max_k x_k
    softmax backward:      dx_j = y_j (g_j - sum_k g_k y_k)
    log-softmax backward:  dx_j = g_j - p_j sum_k g_k     (over live entries)

Each kernel is written for one row and run over the rows by a serial and a
`prange` driver; `parallel.run_rows` picks one.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import SAFE_FASTMATH
from .parallel import run_rows
from .tiles import exp_vectorizable, maximum, wide_vectors

_NO_MASK = np.zeros((0, 0), dtype=np.bool_)


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", inline="always")
def row_max_and_sum(x, r, keep, has_mask, exps):
    """The log-sum-exp of row r, as its max m and l = sum_j exp(x_j - m) over kept entries (l = 0: none).

    When `exps` is a row of x's length, exp(x_j - m) is also kept there (0 where masked), so softmax
    computes each exp once; pass an empty array otherwise.
    """
    wide_vectors()
    n = x.shape[1]
    m = x.dtype.type(-np.inf)
    for j in range(n):
        if not has_mask or keep[r, j]:
            m = maximum(m, x[r, j])
    total = x.dtype.type(0)
    if m == -np.inf:
        return m, total
    if exps.size == 0:
        for j in range(n):
            if not has_mask or keep[r, j]:
                total += exp_vectorizable(x[r, j] - m)
        return m, total
    for j in range(n):  # a separate loop: a test of exps.size inside one loop would slow both
        e = exp_vectorizable(x[r, j] - m) if not has_mask or keep[r, j] else x.dtype.type(0)
        exps[j] = e
        total += e
    return m, total


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", inline="always")
def _softmax_row(x, keep, log, out, lse, r):
    wide_vectors()
    has_mask = keep.shape[0] > 0
    n = x.shape[1]
    m, total = row_max_and_sum(x, r, keep, has_mask, out[r, :0] if log else out[r])
    if m == -np.inf:  # nothing to attend to
        out[r, :] = 0
        lse[r] = -np.inf
        return
    row_lse = m + np.log(total)
    lse[r] = row_lse
    if log:
        for j in range(n):
            live = (not has_mask or keep[r, j]) and x[r, j] != -np.inf  # a NaN stays NaN
            out[r, j] = x[r, j] - row_lse if live else -np.inf
    else:
        inverse = x.dtype.type(1) / total
        for j in range(n):
            out[r, j] *= inverse


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", inline="always")
def _softmax_backward_row(y, grad, dx, r):
    wide_vectors()
    dot = y.dtype.type(0)
    for j in range(y.shape[1]):
        dot += grad[r, j] * y[r, j]
    for j in range(y.shape[1]):
        dx[r, j] = y[r, j] * (grad[r, j] - dot)


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", inline="always")
def _log_softmax_backward_row(y, grad, lse, dx, r):
    wide_vectors()
    if lse[r] == -np.inf:
        dx[r, :] = 0
        return
    total = y.dtype.type(0)
    for j in range(y.shape[1]):
        if y[r, j] != -np.inf:
            total += grad[r, j]
    for j in range(y.shape[1]):
        dx[r, j] = grad[r, j] - np.exp(y[r, j]) * total if y[r, j] != -np.inf else 0


# Each row function runs over all rows twice over: on numba's threads (prange) and on the calling thread.


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", parallel=True)
def _softmax_parallel(x, keep, log, out, lse):
    for r in prange(x.shape[0]):
        _softmax_row(x, keep, log, out, lse, r)


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy")
def _softmax_serial(x, keep, log, out, lse):
    for r in range(x.shape[0]):
        _softmax_row(x, keep, log, out, lse, r)


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", parallel=True)
def _softmax_backward_parallel(y, grad, dx):
    for r in prange(y.shape[0]):
        _softmax_backward_row(y, grad, dx, r)


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy")
def _softmax_backward_serial(y, grad, dx):
    for r in range(y.shape[0]):
        _softmax_backward_row(y, grad, dx, r)


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", parallel=True)
def _log_softmax_backward_parallel(y, grad, lse, dx):
    for r in prange(y.shape[0]):
        _log_softmax_backward_row(y, grad, lse, dx, r)


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy")
def _log_softmax_backward_serial(y, grad, lse, dx):
    for r in range(y.shape[0]):
        _log_softmax_backward_row(y, grad, lse, dx, r)


def softmax_forward(x: np.ndarray, keep: np.ndarray, log: bool) -> tuple[np.ndarray, np.ndarray]:
    """Returns (y, lse): probabilities (or log-probabilities) and per-row log-sum-exp (-inf for dead rows)."""
    out, lse = np.empty_like(x), np.empty(x.shape[0], x.dtype)
    run_rows(_softmax_parallel, _softmax_serial, x.size * 4, x, keep, log, out, lse)
    return out, lse


def softmax_backward(y: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """dx = y * (g - sum(g * y)) row by row; zero where y is 0."""
    dx = np.empty_like(y)
    run_rows(_softmax_backward_parallel, _softmax_backward_serial, y.size * 2, y, grad, dx)
    return dx


def log_softmax_backward(y: np.ndarray, grad: np.ndarray, lse: np.ndarray) -> np.ndarray:
    """dx = g - exp(y) * sum(g) over live entries; zero for masked entries and dead rows."""
    dx = np.empty_like(y)
    run_rows(_log_softmax_backward_parallel, _log_softmax_backward_serial, y.size * 4, y, grad, lse, dx)
    return dx


def softmax_reference(x: np.ndarray, keep: np.ndarray | None = None, log: bool = False) -> np.ndarray:
    """Plain-numpy softmax over the last axis with the same masking rules as the kernel."""
    live = (x > -np.inf) | np.isnan(x) if keep is None else keep & ((x > -np.inf) | np.isnan(x))
    shifted = np.where(live, x, -np.inf)
    m = shifted.max(axis=-1, keepdims=True)
    dead = m == -np.inf
    e = np.where(live, np.exp(shifted - np.where(dead, 0, m)), 0)
    total = e.sum(axis=-1, keepdims=True)
    if log:
        lse = np.where(dead, 0, m + np.log(np.where(dead, 1, total)))
        return np.where(dead, 0, np.where(live, x - lse, -np.inf))
    return np.where(dead, 0, e / np.where(dead, 1, total))
