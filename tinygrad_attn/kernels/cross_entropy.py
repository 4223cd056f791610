"""Cross-entropy fused with log-softmax, logits x (N, C) and integer targets t (N,).

    loss_i = lse_i - x_i[t_i],     lse_i = log sum_c exp(x_ic)
    dx_ic  = g_i * (softmax(x_i)_c - [c == t_i])

The one-hot matrix is never built: the backward subtracts 1 at the target
column only. Rows whose target is `ignore_index` have loss 0 and gradient 0.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import SAFE_FASTMATH, buffers
from .parallel import run_rows
from .softmax import _NO_MASK, row_max_and_sum
from .vector import exp_vectorizable, part_rows, wide_vectors


# Each kernel loops over rows [start, stop) (see softmax.py for why not a function per row).
@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy")
def _forward_rows(x, target, ignore_index, loss, lse, start, stop):
    """Returns (the rows whose target counts, the rows whose target is outside [0, C)): the targets are
    checked and counted in the same pass (a bad row's loss is left 0: the caller raises). One row at a time
    (softmax.py's row_max_and_sum): rows in pairs ran faster at small C and compiled for longer on a first
    run (docs/performance.md)."""
    wide_vectors()
    counted, outside, n = 0, 0, x.shape[1]
    for r in range(start, stop):
        t = target[r]
        if t == ignore_index or t < 0 or t >= n:
            loss[r], lse[r] = 0, 0
            outside += t != ignore_index
            continue
        m, total = row_max_and_sum(x, r, _NO_MASK, False)
        lse[r] = m + np.log(total)
        loss[r] = lse[r] - x[r, t]
        counted += 1
    return counted, outside


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy")
def _backward_rows(x, target, lse, row_grad, ignore_index, dx, start, stop):
    wide_vectors()
    for r in range(start, stop):
        if target[r] == ignore_index:
            for c in range(x.shape[1]):  # a loop: a slice assignment compiles numba's broadcasting setitem
                dx[r, c] = 0
            continue
        for c in range(x.shape[1]):
            dx[r, c] = exp_vectorizable(x[r, c] - lse[r]) * row_grad[r]
        dx[r, target[r]] -= row_grad[r]


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", parallel=True)
def _forward_parallel(x, target, ignore_index, loss, lse, parts):
    counted, outside = 0, 0
    for p in prange(parts):
        start, stop = part_rows(x.shape[0], p, parts)
        c, o = _forward_rows(x, target, ignore_index, loss, lse, start, stop)
        counted += c
        outside += o
    return counted, outside


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", parallel=True)
def _backward_parallel(x, target, lse, row_grad, ignore_index, dx, parts):
    for p in prange(parts):
        start, stop = part_rows(x.shape[0], p, parts)
        _backward_rows(x, target, lse, row_grad, ignore_index, dx, start, stop)


def check_targets(target: np.ndarray, classes: int, ignore_index: int, op: str = "cross_entropy") -> None:
    """Every target is a class index in [0, classes) or ignore_index (the kernels index rows with them), else
    one clear error naming the values."""
    if target.dtype.kind not in "iu":
        raise TypeError(f"{op}: target must hold integer class indices, got dtype {target.dtype}")
    bad = (target != ignore_index) & ((target < 0) | (target >= classes))
    if np.any(bad):
        values = sorted(set(target[bad].tolist()))
        raise IndexError(f"{op}: target values {values[:5]}{' ...' if len(values) > 5 else ''} are outside "
                         f"[0, {classes}) (ignore_index is {ignore_index})")


def cross_entropy_forward(x, target, ignore_index):
    """Returns (loss (N,), lse (N,), how many targets count); both 0 on ignored rows. The kernel checks and
    counts the targets as it goes; a target outside [0, C) raises check_targets's error."""
    if target.dtype.kind not in "iu":
        check_targets(target, x.shape[1], ignore_index)  # its TypeError
    loss, lse = np.empty(x.shape[0], x.dtype), np.empty(x.shape[0], x.dtype)
    counted, outside = run_rows(_forward_parallel, _forward_rows, x.size * 2, x, target, ignore_index, loss, lse)
    if outside:
        check_targets(target, x.shape[1], ignore_index)  # names the values
    return loss, lse, int(counted)


def cross_entropy_backward(x, target, lse, row_grad, ignore_index):
    """dx (N, C) = row_grad[:, None] * (softmax(x) - onehot(target)); targets were checked by the forward."""
    dx = buffers.empty(x.shape, x.dtype)
    run_rows(_backward_parallel, _backward_rows, x.size * 2, x, target, lse, row_grad, ignore_index, dx)
    return dx


def cross_entropy_reference(x: np.ndarray, target: np.ndarray, ignore_index: int) -> np.ndarray:
    """Per-row losses, 0 where ignored."""
    m = x.max(axis=-1, keepdims=True)
    log_probs = x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))
    keep = target != ignore_index
    picked = np.take_along_axis(log_probs, np.where(keep, target, 0)[:, None], axis=-1)[:, 0]
    return np.where(keep, -picked, 0)
