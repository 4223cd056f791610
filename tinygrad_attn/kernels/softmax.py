"""Row-wise softmax and log-softmax over the last axis, with an optional keep-mask.

Shapes: x (R, N) C-contiguous, keep (R, N) bool (True = may attend) or an
empty (0, 0) array for "no mask". A row with nothing to attend to (every entry
masked or -inf) gives zeros in both softmax and log-softmax, and zero
gradient. Inside a live row, a masked entry has probability 0 (log-prob -inf)
and receives no gradient. A NaN in a row's kept entries makes the row's kept entries NaN; its masked
entries stay 0.

    forward:  y_j = exp(x_j - m) / sum_k exp(x_k - m),   m = max_k x_k
    softmax backward:      dx_j = y_j (g_j - sum_k g_k y_k)
    log-softmax backward:  dx_j = g_j - p_j sum_k g_k     (over live entries)

Each kernel loops over a range of rows; `parallel.run_rows` runs it over all
rows on the calling thread, or its `prange` driver over parts of the rows.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import SAFE_FASTMATH, buffers
from .parallel import run_rows
from .vector import exp_vectorizable, maximum, part_rows, wide_vectors

_NO_MASK = np.zeros((0, 0), dtype=np.bool_)
_NO_LSE = {char: np.empty(0, char) for char in "fd"}  # softmax's "no log-sum-exp wanted"


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", inline="always")
def _kept_max(x, r, keep, has_mask):
    """max_j x_j over the kept entries of row r (-inf: none kept; NaN if one is NaN)."""
    m = x.dtype.type(-np.inf)
    for j in range(x.shape[1]):
        if not has_mask or keep[r, j]:
            m = maximum(m, x[r, j])
    return m


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", inline="always")
def row_max_and_sum(x, r, keep, has_mask):
    """The log-sum-exp of row r, as its max m and l = sum_j exp(x_j - m) over kept entries (l = 0: none)."""
    m = _kept_max(x, r, keep, has_mask)
    shift = m if m != -np.inf else x.dtype.type(0)  # nothing kept, or all -inf: every exp below is 0
    total = x.dtype.type(0)
    for j in range(x.shape[1]):
        if not has_mask or keep[r, j]:
            total += exp_vectorizable(x[r, j] - shift)
    return m, total


# Each kernel below loops over rows [start, stop): run_rows calls it with all rows on the calling thread,
# or its `prange` driver gives each part a range. A row loop inside the kernel, not a driver calling a
# function per row: with a function per row, numba counts references to the arrays on every row, which
# costs more than a short row's work. Likewise softmax and log-softmax are separate kernels: a test per
# row choosing between their loops slows every row.


PAIRED_ROWS_FROM = 64  # unmasked rows at least this long are taken two at a time


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", inline="always")
def pair_max(x, r):
    """Rows r and r + 1's maxima, in one loop over both (NaN if one is NaN), and their shifts: each max, or 0
    for a row that is all -inf (its exps are then 0)."""
    m0, m1 = x.dtype.type(-np.inf), x.dtype.type(-np.inf)
    for j in range(x.shape[1]):
        m0, m1 = maximum(m0, x[r, j]), maximum(m1, x[r + 1, j])
    zero = x.dtype.type(0)
    return m0, m1, m0 if m0 != -np.inf else zero, m1 if m1 != -np.inf else zero


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", inline="always")
def pair_exp_sums(x, r, s0, s1):
    """sum_j exp(x_j - s) over rows r and r + 1, in one loop over both (log-softmax keeps none of the exps)."""
    t0, t1 = x.dtype.type(0), x.dtype.type(0)
    for j in range(x.shape[1]):
        t0 += exp_vectorizable(x[r, j] - s0)
        t1 += exp_vectorizable(x[r + 1, j] - s1)
    return t0, t1


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy")
def _softmax_rows(x, keep, out, lse, start, stop):
    """row_max_and_sum's two passes, keeping each exp in out (one exp per entry), then out /= total; lse
    written only when given (not empty): its log per row costs a sixth of a short row's time.

    Unmasked rows of PAIRED_ROWS_FROM entries or more go two at a time, each loop over both rows: the two
    rows' max, sum and division are independent chains that overlap. Shorter rows stay one at a time: LLVM's
    vector loop takes 64 entries per pass, and the paired loops fell to scalar code below that."""
    wide_vectors()
    has_mask, want_lse, n = keep.shape[0] > 0, lse.size > 0, x.shape[1]
    first = start  # the first row left for the one-row loop
    if not has_mask and n >= PAIRED_ROWS_FROM:
        zero = x.dtype.type(0)
        for r in range(start, stop - 1, 2):  # rows r and r + 1
            m0, m1, s0, s1 = pair_max(x, r)
            t0, t1 = zero, zero
            for j in range(n):
                e0, e1 = exp_vectorizable(x[r, j] - s0), exp_vectorizable(x[r + 1, j] - s1)
                out[r, j], out[r + 1, j] = e0, e1
                t0 += e0
                t1 += e1
            if want_lse:
                lse[r] = m0 + np.log(t0 if t0 != 0 else x.dtype.type(1))
                lse[r + 1] = m1 + np.log(t1 if t1 != 0 else x.dtype.type(1))
            i0 = x.dtype.type(1) / t0 if t0 != 0 else zero
            i1 = x.dtype.type(1) / t1 if t1 != 0 else zero
            for j in range(n):
                out[r, j] *= i0
                out[r + 1, j] *= i1
        first = stop - (stop - start) % 2
    for r in range(first, stop):
        m = _kept_max(x, r, keep, has_mask)
        shift = m if m != -np.inf else x.dtype.type(0)
        total = x.dtype.type(0)
        for j in range(x.shape[1]):
            e = exp_vectorizable(x[r, j] - shift) if not has_mask or keep[r, j] else x.dtype.type(0)
            out[r, j] = e
            total += e
        if want_lse:
            lse[r] = m + np.log(total if total != 0 else x.dtype.type(1))  # a dead row: m = -inf, total = 0
        inverse = x.dtype.type(1) / total if total != 0 else x.dtype.type(0)  # a dead row's exps are 0; NaN spreads
        if has_mask:  # a masked entry stays exactly 0, even in a row a NaN has reached
            for j in range(x.shape[1]):
                out[r, j] = out[r, j] * inverse if keep[r, j] else x.dtype.type(0)
        else:
            for j in range(x.shape[1]):
                out[r, j] *= inverse


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy")
def _log_softmax_rows(x, keep, out, lse, start, stop):
    """row_max_and_sum, then out = x - lse; unmasked rows of PAIRED_ROWS_FROM entries or more two at a time,
    as in _softmax_rows."""
    wide_vectors()
    has_mask, n = keep.shape[0] > 0, x.shape[1]
    first = start  # the first row left for the one-row loop
    if not has_mask and n >= PAIRED_ROWS_FROM:
        for r in range(start, stop - 1, 2):  # rows r and r + 1
            m0, m1, s0, s1 = pair_max(x, r)
            t0, t1 = pair_exp_sums(x, r, s0, s1)
            lse0 = m0 + np.log(t0 if t0 != 0 else x.dtype.type(1))  # a dead row: -inf
            lse1 = m1 + np.log(t1 if t1 != 0 else x.dtype.type(1))
            lse[r], lse[r + 1] = lse0, lse1
            for j in range(n):
                out[r, j] = x[r, j] - lse0
                out[r + 1, j] = x[r + 1, j] - lse1
            if m0 == -np.inf:  # nothing to attend to: zeros
                out[r, :] = 0
            if m1 == -np.inf:
                out[r + 1, :] = 0
        first = stop - (stop - start) % 2
    for r in range(first, stop):
        m, total = row_max_and_sum(x, r, keep, has_mask)
        row_lse = m + np.log(total if total != 0 else x.dtype.type(1))  # a dead row: -inf
        lse[r] = row_lse
        for j in range(x.shape[1]):
            kept = not has_mask or keep[r, j]
            out[r, j] = x[r, j] - row_lse if kept else x.dtype.type(-np.inf)  # -inf - lse is -inf; NaN stays
        if m == -np.inf:  # nothing to attend to: zeros
            out[r, :] = 0


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy")
def _softmax_backward_rows(y, grad, dx, start, stop):
    wide_vectors()
    for r in range(start, stop):
        dot = y.dtype.type(0)
        for j in range(y.shape[1]):
            dot += grad[r, j] * y[r, j]
        for j in range(y.shape[1]):
            dx[r, j] = y[r, j] * (grad[r, j] - dot)


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy")
def _log_softmax_backward_rows(y, grad, lse, dx, start, stop):
    wide_vectors()
    for r in range(start, stop):
        total = y.dtype.type(0)
        for j in range(y.shape[1]):
            if y[r, j] != -np.inf:
                total += grad[r, j]
        dead = lse[r] == -np.inf  # nothing attended to: zero gradient
        for j in range(y.shape[1]):
            live = y[r, j] != -np.inf and not dead
            dx[r, j] = grad[r, j] - exp_vectorizable(y[r, j]) * total if live else y.dtype.type(0)


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", parallel=True)
def _softmax_parallel(x, keep, out, lse, parts):
    for p in prange(parts):
        start, stop = part_rows(x.shape[0], p, parts)
        _softmax_rows(x, keep, out, lse, start, stop)


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", parallel=True)
def _log_softmax_parallel(x, keep, out, lse, parts):
    for p in prange(parts):
        start, stop = part_rows(x.shape[0], p, parts)
        _log_softmax_rows(x, keep, out, lse, start, stop)


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", parallel=True)
def _softmax_backward_parallel(y, grad, dx, parts):
    for p in prange(parts):
        start, stop = part_rows(y.shape[0], p, parts)
        _softmax_backward_rows(y, grad, dx, start, stop)


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", parallel=True)
def _log_softmax_backward_parallel(y, grad, lse, dx, parts):
    for p in prange(parts):
        start, stop = part_rows(y.shape[0], p, parts)
        _log_softmax_backward_rows(y, grad, lse, dx, start, stop)


def softmax_forward(x: np.ndarray, keep: np.ndarray, log: bool, want_lse: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Returns (y, lse): probabilities (or log-probabilities) and per-row log-sum-exp (-inf for dead rows;
    empty for softmax when not `want_lse`, which its backward does not need)."""
    out = buffers.empty(x.shape, x.dtype)
    lse = np.empty(x.shape[0], x.dtype) if log or want_lse else _NO_LSE[x.dtype.char]
    drivers = (_log_softmax_parallel, _log_softmax_rows) if log else (_softmax_parallel, _softmax_rows)
    run_rows(*drivers, x.size * 4, x, keep, out, lse)
    return out, lse


def softmax_backward(y: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """dx = y * (g - sum(g * y)) row by row; zero where y is 0."""
    dx = buffers.empty(y.shape, y.dtype)
    run_rows(_softmax_backward_parallel, _softmax_backward_rows, y.size * 2, y, grad, dx)
    return dx


def log_softmax_backward(y: np.ndarray, grad: np.ndarray, lse: np.ndarray) -> np.ndarray:
    """dx = g - exp(y) * sum(g) over live entries; zero for masked entries and dead rows."""
    dx = buffers.empty(y.shape, y.dtype)
    run_rows(_log_softmax_backward_parallel, _log_softmax_backward_rows, y.size * 4, y, grad, lse, dx)
    return dx


def softmax_reference(x: np.ndarray, keep: np.ndarray | None = None, log: bool = False) -> np.ndarray:
    """Plain-numpy softmax over the last axis with the same masking rules as the kernel."""
    live = (x > -np.inf) | np.isnan(x) if keep is None else keep & ((x > -np.inf) | np.isnan(x))
    shifted = np.where(live, x, -np.inf)
    m = shifted.max(axis=-1, keepdims=True, initial=-np.inf)  # initial: rows may be empty
    dead = m == -np.inf
    e = np.where(live, np.exp(shifted - np.where(dead, 0, m)), 0)
    total = e.sum(axis=-1, keepdims=True)
    if log:
        lse = np.where(dead, 0, m + np.log(np.where(dead, 1, total)))
        return np.where(dead, 0, np.where(live, x - lse, -np.inf))
    return np.where(dead, 0, e / np.where(dead, 1, total))
