"""Flash attention when each group's queries and keys fit one tile: the same steps as flash.py, compiled.

For one group (a query block that is the whole sequence, one key tile), with
the products made by numpy's own BLAS (blas.py) and the tile kernels of
tiles.py in between:

    forward:   S = q (k * scale)^T + bias,  P = softmax(S),  out = P v,  lse = m + log l
    backward:  P = exp(S - lse),  dV = P^T dO,  dP = dO v^T,  dS = scale P (dP - delta),
               dQ = dS k,  dK = dS^T q

On short sequences each numpy call of flash.py's tiled path does little work
and its cost is the call; here a `prange` over the groups runs them all in
compiled code, on numba's threads, without the GIL. flash.py chooses this path
(`fits_one_tile`) when the shapes and the layout allow it.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .blas import NO_TRANS, ROW_MAJOR, TRANS, blas_operand
from .parallel import run_parts
from .tiles import probs_from_lse, score_gradient, softmax_tile
from .vector import part_rows


def fits_one_tile(q, k, v, tile, gemm) -> bool:
    """Whether attention on these (P, Q, T, d) grids runs here: one tile per group, nothing empty, and
    a gemm that reads every group where it lies (`blas_rows`)."""
    return (gemm is not None and q.shape[2] <= tile[0] and k.shape[2] <= tile[1]
            and min(q.shape[2], k.shape[2], q.shape[3], v.shape[3]) > 0
            and q.dtype == k.dtype == v.dtype and all(blas_rows(a) for a in (q, k, v)))


def blas_rows(a: np.ndarray) -> bool:
    """Whether each (T, d) matrix of a grid is one BLAS reads where it lies, row-major (blas_operand)."""
    return a.shape[0] * a.shape[1] == 0 or (blas_operand(a[0, 0]) or (None,))[0] == NO_TRANS


@njit(cache=True, nogil=True, inline="always")
def _at(a, i, j):
    """The address of matrix (i, j) of a (P, Q, T, d) grid, and its leading dimension in elements."""
    ld = a.strides[2] // a.itemsize if a.shape[2] > 1 else a.shape[3]
    return np.int64(a.ctypes.data) + i * a.strides[0] + j * a.strides[1], ld


@njit(cache=True, nogil=True, inline="always")
def _scores(q, k, bias, has_bias, scale, a, b, kt, s, gemm):
    """s (1, Tq, Tk) = q (k * scale)^T + bias for group (a, b); kt (d, Tk) receives (k * scale)^T."""
    tq, tk, d = q.shape[2], k.shape[2], k.shape[3]
    for j in range(tk):
        for c in range(d):
            kt[c, j] = k[a, b, j, c] * scale
    q_at, ldq = _at(q, a, b)
    gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, tq, tk, d, q.dtype.type(1), q_at, ldq, np.int64(kt.ctypes.data), tk,
         q.dtype.type(0), np.int64(s.ctypes.data), tk)
    if has_bias:
        ba, bb = min(a, bias.shape[0] - 1), min(b, bias.shape[1] - 1)
        for i in range(tq):
            for j in range(tk):
                s[0, i, j] += bias[ba, bb, min(i, bias.shape[2] - 1), min(j, bias.shape[3] - 1)]


@njit(cache=True, nogil=True)
def _forward_groups(q, k, v, bias, has_bias, scale, causal, out, maxima, sums, gemm, start, stop):
    """out, and each row's max and sum of exp(S - max), of the groups [start, stop) of the grid (P, Q)."""
    n_inner, tq, tk, d, dv = q.shape[1], q.shape[2], k.shape[2], k.shape[3], v.shape[3]
    kt, s = np.empty((d, tk), q.dtype), np.empty((1, tq, tk), q.dtype)
    for group in range(start, stop):
        a, b = group // n_inner, group % n_inner
        _scores(q, k, bias, has_bias, scale, a, b, kt, s, gemm)  # S: (Tq, Tk)
        softmax_tile(s, maxima[a, b:b + 1], sums[a, b:b + 1], 0, 0, causal)  # S <- P
        (v_at, ldv), (out_at, ldo) = _at(v, a, b), _at(out, a, b)
        gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, tq, dv, tk, q.dtype.type(1), np.int64(s.ctypes.data), tk, v_at, ldv,
             q.dtype.type(0), out_at, ldo)  # out = P V: (Tq, dv)


@njit(cache=True, nogil=True)
def _backward_groups(grad, q, k, v, out, lse, bias, has_bias, scale, causal, dq, dk, dv, gemm, start, stop):
    """dq, dk and dv of the groups [start, stop), each written once."""
    n_inner, tq, tk, d, d_v = q.shape[1], q.shape[2], k.shape[2], k.shape[3], v.shape[3]
    one, zero = q.dtype.type(1), q.dtype.type(0)
    kt, s, dp = np.empty((d, tk), q.dtype), np.empty((1, tq, tk), q.dtype), np.empty((1, tq, tk), q.dtype)
    lse_row, delta = np.empty((1, tq), q.dtype), np.empty((1, tq), q.dtype)
    for group in range(start, stop):
        a, b = group // n_inner, group % n_inner
        _scores(q, k, bias, has_bias, scale, a, b, kt, s, gemm)  # S: (Tq, Tk)
        for i in range(tq):
            lse_row[0, i] = lse[a, b, i]
            total = zero
            for c in range(d_v):
                total += grad[a, b, i, c] * out[a, b, i, c]
            delta[0, i] = total  # rowsum(dO * out)
        probs_from_lse(s, lse_row, 0, 0, causal)  # S <- P
        (q_at, ldq), (k_at, ldk), (v_at, ldv), (g_at, ldg) = _at(q, a, b), _at(k, a, b), _at(v, a, b), _at(grad, a, b)
        (dq_at, lddq), (dk_at, lddk), (dv_at, lddv) = _at(dq, a, b), _at(dk, a, b), _at(dv, a, b)
        p_at, dp_at = np.int64(s.ctypes.data), np.int64(dp.ctypes.data)
        gemm(ROW_MAJOR, TRANS, NO_TRANS, tk, d_v, tq, one, p_at, tk, g_at, ldg, zero, dv_at, lddv)  # dV = P^T dO
        gemm(ROW_MAJOR, NO_TRANS, TRANS, tq, tk, d_v, one, g_at, ldg, v_at, ldv, zero, dp_at, tk)  # dP = dO V^T
        score_gradient(s, dp, delta, scale)  # dP <- scale dS
        gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, tq, d, tk, one, dp_at, tk, k_at, ldk, zero, dq_at, lddq)  # dQ = dS K
        gemm(ROW_MAJOR, TRANS, NO_TRANS, tk, d, tq, one, dp_at, tk, q_at, ldq, zero, dk_at, lddk)  # dK = dS^T Q


@njit(cache=True, nogil=True, parallel=True)
def _forward_parallel(q, k, v, bias, has_bias, scale, causal, out, maxima, sums, gemm, parts):
    groups = q.shape[0] * q.shape[1]
    for p in prange(parts):
        start, stop = part_rows(groups, p, parts)
        _forward_groups(q, k, v, bias, has_bias, scale, causal, out, maxima, sums, gemm, start, stop)


@njit(cache=True, nogil=True, parallel=True)
def _backward_parallel(grad, q, k, v, out, lse, bias, has_bias, scale, causal, dq, dk, dv, gemm, parts):
    groups = q.shape[0] * q.shape[1]
    for p in prange(parts):
        start, stop = part_rows(groups, p, parts)
        _backward_groups(grad, q, k, v, out, lse, bias, has_bias, scale, causal, dq, dk, dv, gemm, start, stop)


def _bias(bias, dtype):
    """The grid bias, or a stand-in never read, so that the kernels have one signature."""
    return (np.zeros((1, 1, 1, 1), dtype), False) if bias is None else (bias, True)


def one_tile_forward(q, k, v, scale, causal, bias, out, gemm):
    """Fills out (P, Q, Tq, dv) for grids that `fits_one_tile`; returns each row's max m and sum l of
    exp(S - m), (P, Q, Tq) each, from which lse = m + log l."""
    bias, has_bias = _bias(bias, q.dtype)
    maxima, sums = (np.empty(q.shape[:3], q.dtype) for _ in range(2))
    run_parts(_forward_parallel, _forward_groups, q.shape[0] * q.shape[1], float(q.size) * k.shape[2] * 2,
              q, k, v, bias, has_bias, q.dtype.type(scale), causal, out, maxima, sums, gemm)
    return maxima, sums


def one_tile_backward(grad, q, k, v, out, lse, scale, causal, bias, dq, dk, dv, gemm):
    """Writes dq, dk, dv (unit-stride rows) for grids that `fits_one_tile`."""
    bias, has_bias = _bias(bias, q.dtype)
    run_parts(_backward_parallel, _backward_groups, q.shape[0] * q.shape[1], float(q.size) * k.shape[2] * 5,
              grad, q, k, v, out, lse, bias, has_bias, q.dtype.type(scale), causal, dq, dk, dv, gemm)
