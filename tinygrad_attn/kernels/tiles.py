"""What flash attention does to one score tile between its products, in place: the numba kernels.

A tile holds the scores S of bq query rows and n key columns of one group, in
the first n columns of C-contiguous rows s (bq, width >= n): rows of a scratch
buffer wider than the widest tile, so that every tile, the last narrower one
too, is laid out for vectorised loops without a reshape. (q_start, k_start)
place it in the whole (Tq, Tk) matrix, so that the band of visibility.py (query q sees key c only if
q + lo <= c <= q + hi: causal, sliding windows) is applied without building a mask: each row's
columns outside [first, stop) (`visibility.row_columns`) are hidden and become 0; the columns past n are
neither read nor written.

The loops are written with vector.py's `maximum` and `exp_vectorizable`, and each kernel starts with
its `wide_vectors()`. The kernels are inlined where flash.py calls them (inline="always"): a first run
compiles them inside its two drivers, sooner than as functions of their own; called from
Python, as the tests do, each compiles on its own. `exp_shifted` alone is a function of its own: both
drivers run it (the forward through online_softmax), and one compile serves both, which a first run
finishes sooner than two inlined copies (docs/performance.md).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import SAFE_FASTMATH
from .vector import exp_vectorizable, maximum, wide_vectors
from .visibility import row_columns

SHORT_ROW = 32  # tile rows of up to this many columns take exp over all of them in exp_shifted


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, inline="always")
def row_max(s, i, first, stop, start):
    """max(start, s[i, first], ..., s[i, stop - 1]), NaN if any of them is NaN. The columns run as unsigned
    numbers (first >= 0): a signed index may be negative, which numba wraps around, and LLVM would not
    vectorise the loop."""
    wide_vectors()
    m = start
    for j in range(np.uint64(first), np.uint64(maximum(first, stop))):
        m = maximum(m, s[i, j])
    return m


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy")
def exp_shifted(s, n, shift, q_start, k_start, lo, hi):
    """The tile's n columns of s (bq, width) <- P = exp(S - shift[:, None]) in place, 0 where hidden and in a
    row whose shift is -inf (nothing seen); a NaN shift makes its row NaN. The forward's P (shift the running
    max) and the backward's (shift lse) alike. A row that sees most of its keys, or a short one, takes exp
    over all n columns in one vectorised loop (over the few columns a short row sees, the loop would run one
    column at a time), then zeros where hidden; a row that sees few of many takes exp over the keys it sees
    alone, zeros either side. Unsigned columns, as in row_max."""
    wide_vectors()
    zero = s.dtype.type(0)
    for i in range(s.shape[0]):
        shift_i = shift[i]  # a local, so the loop has no load that may alias the scores
        first, stop = row_columns(i, n, q_start, k_start, lo, hi)
        if shift_i == -np.inf:
            first, stop = 0, 0
        stop = maximum(first, stop)
        whole = n <= SHORT_ROW or 4 * (stop - first) >= 3 * n  # exp over every column, the hidden ones then 0
        for j in range(np.uint64(0 if whole else first), np.uint64(n if whole else stop)):
            s[i, j] = exp_vectorizable(s[i, j] - shift_i)
        for j in range(np.uint64(0), np.uint64(first)):
            s[i, j] = zero
        for j in range(np.uint64(stop), np.uint64(n)):
            s[i, j] = zero


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", inline="always")
def online_softmax(s, n, m, l, alpha, q_start, k_start, lo, hi):  # noqa: E741
    """One key tile of the online softmax: the tile's n columns of s (bq, width) -> P = exp(S - m') in place,
    m' = max(m, rowmax S).

    m (bq,) becomes m'; alpha (bq,) receives exp(m - m'), which rescales what was summed under the old
    max; l (bq,) becomes l alpha + rowsum P. Hidden entries become 0; a row that has seen nothing keeps
    m = -inf and l = 0 (and P = alpha = 0).
    """
    wide_vectors()
    bq = s.shape[0]
    for i in range(bq):
        first, stop = row_columns(i, n, q_start, k_start, lo, hi)
        alpha[i] = m[i]  # the old max, for now
        m[i] = row_max(s, i, first, stop, m[i])
    for i in range(bq):  # a loop of its own, vectorised over the rows
        alpha[i] = exp_vectorizable(alpha[i] - m[i]) if alpha[i] > -np.inf else s.dtype.type(0)
    exp_shifted(s, n, m, q_start, k_start, lo, hi)
    for i in range(bq):
        total = s.dtype.type(0)
        for j in range(n):
            total += s[i, j]
        l[i] = l[i] * alpha[i] + total


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", inline="always")
def score_gradient(p, dp, n, delta, scale):
    """dp (bq, width) -> scale dS in place on the tile's n columns, dS = P * (dP - delta): the softmax backward
    of a tile, times the score scale that dQ = scale dS K and dK = scale dS^T Q both need."""
    wide_vectors()
    bq = p.shape[0]
    for i in range(bq):
        d = delta[i]
        for j in range(n):
            dp[i, j] = p[i, j] * (dp[i, j] - d) * scale
