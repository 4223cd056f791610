"""What flash attention does to one score tile between its products, in place: the numba kernels.

A tile holds the scores S (bq, bk) of bq query rows and bk key columns of one
group; (q_start, k_start) place it in the whole (Tq, Tk) matrix, so that the
causal rule (key k_start + j is hidden from query q_start + i when
j > i + q_start - k_start, `visible_keys`) is applied without building a mask.
Entries past a row's `limit` are hidden and become 0. Tiles are C-contiguous.

The loops are written with vector.py's `maximum` and `exp_vectorizable`, and each kernel starts with
its `wide_vectors()`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import SAFE_FASTMATH
from .vector import exp_vectorizable, maximum, wide_vectors

# Rows of up to this many keys are shifted row by row (S - m, hidden keys -inf), then exponentiated as
# one flat array: a vectorised loop per row pays only on longer rows.
SHORT_ROW = 64


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def visible_keys(i, bk, q_start, k_start, causal):
    """How many leading keys of tile row i may be seen: key k_start + j is hidden from query q_start + i
    when j > i + q_start - k_start."""
    return max(min(bk, q_start + i - k_start + 1), 0) if causal else bk


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def row_max(s, i, limit, start):
    """max(start, s[i, 0], ..., s[i, limit - 1]), NaN if any of them is NaN."""
    wide_vectors()
    m = start
    for j in range(limit):
        m = maximum(m, s[i, j])
    return m


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, inline="always")
def shift_row(s, i, limit, shift):
    """s[i, :limit] -= shift, the rest of the row <- -inf (hidden), all -inf when shift is -inf (nothing
    seen): an exp of the whole tile then makes the row exp(S - shift), 0 where hidden."""
    if shift == -np.inf:
        limit = 0
    for j in range(limit):
        s[i, j] -= shift
    for j in range(limit, s.shape[1]):
        s[i, j] = -np.inf


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def exp_in_place(flat):
    """flat <- exp(flat), one vectorised loop over a whole tile."""
    wide_vectors()
    for j in range(flat.shape[0]):
        flat[j] = exp_vectorizable(flat[j])


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def online_softmax(s, m, l, alpha, q_start, k_start, causal):  # noqa: E741
    """One key tile of the online softmax: s (bq, bk) -> P = exp(S - m') in place, m' = max(m, rowmax S).

    m (bq,) becomes m'; alpha (bq,) receives exp(m - m'), which rescales what was summed under the old
    max; l (bq,) becomes l alpha + rowsum P. Hidden entries become 0; a row that has seen nothing keeps
    m = -inf and l = 0.
    """
    wide_vectors()
    bq, bk = s.shape
    short = bk <= SHORT_ROW
    for i in range(bq):
        limit = visible_keys(i, bk, q_start, k_start, causal)
        m_new = row_max(s, i, limit, m[i])
        alpha[i] = exp_vectorizable(m[i] - m_new) if m[i] > -np.inf else s.dtype.type(0)
        m[i] = m_new
        if short:
            shift_row(s, i, limit, m_new)
    if short:
        exp_in_place(s.reshape(s.size))
    for i in range(bq):
        limit = 0 if m[i] == -np.inf else visible_keys(i, bk, q_start, k_start, causal)
        total = s.dtype.type(0)
        if short:
            for j in range(limit):
                total += s[i, j]
        else:
            shift = m[i]  # a local, so the loop has no load that may alias the scores
            for j in range(limit):
                p = exp_vectorizable(s[i, j] - shift)
                s[i, j] = p
                total += p
            for j in range(limit, bk):
                s[i, j] = 0
        l[i] = l[i] * alpha[i] + total


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def probs_from_lse(s, lse, q_start, k_start, causal):
    """s (bq, bk) -> P = exp(S - lse) in place, recomputed for the backward; 0 where hidden or dead."""
    wide_vectors()
    bq, bk = s.shape
    short = bk <= SHORT_ROW
    for i in range(bq):
        shift = lse[i]
        limit = 0 if shift == -np.inf else visible_keys(i, bk, q_start, k_start, causal)  # NaN goes on
        if short:
            shift_row(s, i, limit, shift)
        else:
            for j in range(limit):
                s[i, j] = exp_vectorizable(s[i, j] - shift)
            for j in range(limit, bk):
                s[i, j] = 0
    if short:
        exp_in_place(s.reshape(s.size))


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def score_gradient(p, dp, delta, scale):
    """dp (bq, bk) -> scale dS in place, dS = P (dP - delta): the softmax backward of a tile, times the
    score scale that dQ = scale dS K and dK = scale dS^T Q both need."""
    wide_vectors()
    bq, bk = p.shape
    for i in range(bq):
        d = delta[i]
        for j in range(bk):
            dp[i, j] = p[i, j] * (dp[i, j] - d) * scale
