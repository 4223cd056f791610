"""The numba kernels of flash attention: what happens to one score tile, in place.

A tile holds scores S (G, bq, bk) for G groups, bq query rows and bk key
columns; (q_start, k_start) place it in the whole (Tq, Tk) matrix, so that the
causal rule (key k_start + j is hidden from query q_start + i when
j > i + q_start - k_start, `visible_keys`) can be applied without building a
mask. Each kernel reads the rule the same way: entries past `limit` in a row
are hidden and become 0.

The loops are written with vector.py's `maximum` and `exp_vectorizable`, and each hot kernel starts with
its `wide_vectors()`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import SAFE_FASTMATH
from .vector import exp_vectorizable, maximum, wide_vectors

# A tile with rows of up to this many keys is shifted row by row (S - m, hidden keys -inf), then
# exponentiated as one flat array: a vectorised loop per row pays only on longer rows.
SHORT_ROW = 64


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def row_max(scores, g, i, limit, start):
    """max(start, scores[g, i, 0], ..., scores[g, i, limit - 1]), NaN if any of them is NaN.

    The kernels index the tile directly rather than pass row views, whose
    reference counting per row keeps this function from being inlined.
    """
    wide_vectors()
    m = start
    for j in range(limit):
        m = maximum(m, scores[g, i, j])
    return m


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def visible_keys(i, bk, q_start, k_start, causal):
    """How many leading keys of a tile row i may see: key k_start + j is hidden from query q_start + i when
    j > i + q_start - k_start."""
    return max(min(bk, q_start + i - k_start + 1), 0) if causal else bk


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, inline="always")
def exp_row(scores, g, i, limit, m):
    """scores[g, i, :limit] <- exp(S - m), the rest of the row <- 0 (hidden keys); returns the row's sum."""
    wide_vectors()
    total = scores.dtype.type(0)
    for j in range(limit):
        p = exp_vectorizable(scores[g, i, j] - m)
        scores[g, i, j] = p
        total += p
    scores[g, i, limit:] = 0  # a slice, which compiles to a memset (a loop from `limit` does not vectorise)
    return total


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, inline="always")
def shift_row(scores, g, i, limit, shift):
    """scores[g, i, :limit] -= shift, the rest of the row <- -inf (hidden); all -inf when shift is -inf
    (nothing seen). Returns shift. exp_in_place then makes the row exp(S - shift), 0 where hidden."""
    if shift == -np.inf:
        limit = 0
    for j in range(limit):
        scores[g, i, j] -= shift
    scores[g, i, limit:] = -np.inf
    return shift


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def exp_in_place(flat):
    """flat <- exp(flat), one vectorised loop over a whole tile."""
    wide_vectors()
    for j in range(flat.shape[0]):
        flat[j] = exp_vectorizable(flat[j])


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def softmax_tile(scores, maxima, sums, q_start, k_start, causal):
    """A query block's only key tile: scores (G, bq, bk) -> P = softmax(S) in place.

    No running max is needed when the whole row is in one tile. maxima and sums (G, bq) receive each
    row's max m and sum l of exp(S - m), from which lse = m + log l. Masked entries become 0; a row with
    nothing to attend to is all 0, with l = 0.
    """
    wide_vectors()
    groups, bq, bk = scores.shape
    short = bk <= SHORT_ROW
    if short:  # S - m row by row, then one exp over the whole tile (SHORT_ROW)
        for g in range(groups):
            for i in range(bq):
                limit = visible_keys(i, bk, q_start, k_start, causal)
                maxima[g, i] = shift_row(scores, g, i, limit, row_max(scores, g, i, limit, scores.dtype.type(-np.inf)))
        exp_in_place(scores.reshape(scores.size))
    for g in range(groups):
        for i in range(bq):
            limit = visible_keys(i, bk, q_start, k_start, causal)
            m = maxima[g, i] if short else row_max(scores, g, i, limit, scores.dtype.type(-np.inf))  # scores' dtype
            if m == -np.inf:
                limit = 0
            if short:
                total = scores.dtype.type(0)
                for j in range(limit):
                    total += scores[g, i, j]
            else:
                total = exp_row(scores, g, i, limit, m)
            inverse = scores.dtype.type(1) / total if limit else scores.dtype.type(0)
            for j in range(limit):
                scores[g, i, j] *= inverse
            maxima[g, i], sums[g, i] = m, total


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def online_softmax_tile(scores, maxima, sums, alpha, q_start, k_start, causal):
    """One key tile of a longer row, for the online softmax; in place.

    scores (G, bq, bk) -> P = exp(S - m') with m' = max(m, max_j S_j) the new running max; masked
    entries become 0. maxima (G, bq) becomes m'; alpha (G, bq) receives exp(m - m'), which rescales
    what was accumulated under the old max; sums (G, bq) becomes l * alpha + sum_j P_j.
    """
    wide_vectors()
    groups, bq, bk = scores.shape
    for g in range(groups):
        for i in range(bq):
            limit = visible_keys(i, bk, q_start, k_start, causal)
            m_old = maxima[g, i]
            m = row_max(scores, g, i, limit, m_old)
            if m == -np.inf:  # nothing seen yet in this row: all its P are 0
                limit = 0
            total = exp_row(scores, g, i, limit, m)
            rescale = exp_vectorizable(m_old - m) if m_old > -np.inf else scores.dtype.type(0)
            alpha[g, i] = rescale
            sums[g, i] = sums[g, i] * rescale + total
            maxima[g, i] = m


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def probs_from_lse(scores, lse, q_start, k_start, causal):
    """scores (G, bq, bk) -> P = exp(S - lse) in place, recomputed for the backward; 0 where masked or dead."""
    wide_vectors()
    groups, bq, bk = scores.shape
    short = bk <= SHORT_ROW
    for g in range(groups):
        for i in range(bq):
            shift = lse[g, i]  # a local, so the loop below has no load that may alias the scores
            limit = 0 if shift == -np.inf else visible_keys(i, bk, q_start, k_start, causal)  # NaN goes on
            if short:
                shift_row(scores, g, i, limit, shift)
            else:
                for j in range(limit):
                    scores[g, i, j] = exp_vectorizable(scores[g, i, j] - shift)
                scores[g, i, limit:] = 0
    if short:
        exp_in_place(scores.reshape(scores.size))  # exp(S - lse), 0 where hidden


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def score_gradient(probs, grad_probs, delta, scale):
    """grad_probs (G, bq, bk) -> scale * dS, dS = P * (dP - delta), in place: the softmax backward of a
    tile, times the score scale that dQ = scale dS K and dK = scale dS^T Q both need."""
    wide_vectors()
    groups, bq, bk = probs.shape
    for g in range(groups):
        for i in range(bq):
            d = delta[g, i]
            for j in range(bk):
                grad_probs[g, i, j] = probs[g, i, j] * (grad_probs[g, i, j] - d) * scale
