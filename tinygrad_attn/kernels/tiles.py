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


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, inline="always")
def visible_keys(i, bk, q_start, k_start, causal):
    """How many leading keys of tile row i may be seen: key k_start + j is hidden from query q_start + i
    when j > i + q_start - k_start."""
    return max(min(bk, q_start + i - k_start + 1), 0) if causal else bk


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, inline="always")
def row_max(s, i, limit, start):
    """max(start, s[i, 0], ..., s[i, limit - 1]), NaN if any of them is NaN."""
    wide_vectors()
    m = start
    for j in range(limit):
        m = maximum(m, s[i, j])
    return m


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy")
def exp_shifted(s, shift, q_start, k_start, causal):
    """s (bq, bk) <- P = exp(S - shift[:, None]) in place, 0 where hidden and in a row whose shift is -inf
    (nothing seen); a NaN shift makes its row NaN. The forward's P (shift the running max) and the backward's
    (shift lse) alike: each row is shifted (hidden keys -inf), then the tile exponentiated as one flat array,
    one vectorised loop however short its rows."""
    wide_vectors()
    bq, bk = s.shape
    for i in range(bq):
        shift_i = shift[i]  # a local, so the loops have no load that may alias the scores
        limit = 0 if shift_i == -np.inf else visible_keys(i, bk, q_start, k_start, causal)
        for j in range(bk):  # over the whole row, the hidden keys selected: one vector loop however many are seen
            s[i, j] = s[i, j] - shift_i if j < limit else -np.inf
    flat = s.reshape(s.size)
    for j in range(flat.shape[0]):
        flat[j] = exp_vectorizable(flat[j])


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy")
def online_softmax(s, m, l, alpha, q_start, k_start, causal, last):  # noqa: E741
    """One key tile of the online softmax: s (bq, bk) -> P = exp(S - m') in place, m' = max(m, rowmax S).

    m (bq,) becomes m'; alpha (bq,) receives exp(m - m'), which rescales what was summed under the old
    max; l (bq,) becomes l alpha + rowsum P. On the rows' `last` tile P and alpha are then divided by l',
    so that out alpha + P v is the output itself. Hidden entries become 0; a row that has seen nothing keeps
    m = -inf and l = 0 (and P = alpha = 0).
    """
    wide_vectors()
    bq, bk = s.shape
    for i in range(bq):
        m_new = row_max(s, i, visible_keys(i, bk, q_start, k_start, causal), m[i])
        alpha[i] = exp_vectorizable(m[i] - m_new) if m[i] > -np.inf else s.dtype.type(0)
        m[i] = m_new
    exp_shifted(s, m, q_start, k_start, causal)
    for i in range(bq):
        total = s.dtype.type(0)
        for j in range(bk):
            total += s[i, j]
        l[i] = l[i] * alpha[i] + total
        if last:
            inverse = 1 / l[i] if l[i] != 0 else s.dtype.type(0)
            alpha[i] *= inverse
            for j in range(bk):
                s[i, j] *= inverse


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy")
def score_gradient(p, dp, delta, scale):
    """dp (bq, bk) -> scale dS in place, dS = P (dP - delta): the softmax backward of a tile, times the
    score scale that dQ = scale dS K and dK = scale dS^T Q both need."""
    wide_vectors()
    bq, bk = p.shape
    for i in range(bq):
        d = delta[i]
        for j in range(bk):
            dp[i, j] = p[i, j] * (dp[i, j] - d) * scale
