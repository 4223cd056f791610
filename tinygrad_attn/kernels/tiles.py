"""The numba kernels of flash attention: what happens to one score tile, in place.

A tile holds scores S (G, bq, bk) for G groups, bq query rows and bk key
columns; (q_start, k_start) place it in the whole (Tq, Tk) matrix, so that the
causal rule (key k_start + j is hidden from query q_start + i when
j > i + q_start - k_start, `visible_keys`) can be applied without building a
mask. Each kernel reads the rule the same way: entries past `limit` in a row
are hidden and become 0.

`maximum` and `exp_vectorizable` are the two scalar functions the loops are
written with. Compiled, they become LLVM's NaN-propagating `maximum` and an
exp made of a polynomial and an exponent shift, both of which LLVM turns into
vector instructions; numba's `max` and `math.exp` do not vectorise. Without
numba (NUMBA_DISABLE_JIT=1) their plain Python definitions run. Each hot
kernel here and in the row kernels starts with `wide_vectors()`.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from . import SAFE_FASTMATH

# A tile with rows of up to this many keys is shifted row by row (S - m, hidden keys -inf), then
# exponentiated as one flat array: a vectorised loop per row pays only on longer rows.
SHORT_ROW = 64


def maximum(a, b):
    """The larger of two floats, NaN when either is NaN (IEEE 754-2019 maximum).

    Compiled, it is LLVM's `maximum`, which the loop vectoriser turns into a
    vector reduction (numba's `max` compiles to a chain of compare-and-selects).
    A NaN score reaches the row max, and from it the output.
    """
    return a if a > b or a != a else b


@intrinsic
def _llvm_maximum(typingctx, a, b):
    if a == b and isinstance(a, types.Float):
        def codegen(context, builder, signature, args):
            function_type = ir.FunctionType(args[0].type, [args[0].type, args[1].type])
            function = cgutils.get_or_insert_function(builder.module, function_type, f"llvm.maximum.f{a.bitwidth}")
            return builder.call(function, args)
        return a(a, b), codegen
    return None


@overload(maximum)
def _maximum_compiled(a, b):
    if a == b and isinstance(a, types.Float):
        return lambda a, b: _llvm_maximum(a, b)
    return None


def wide_vectors():
    """Let LLVM vectorise the calling kernel with the widest vectors the CPU has (512 bits with AVX-512).

    On AVX-512 CPUs LLVM otherwise prefers 256-bit vectors (wide instructions used to lower the
    clock of older Intel parts); the exp-heavy loops here run faster with 512. Compiled, this marks
    the calling function only: nothing else in the process changes. Without numba it does nothing.
    """


@intrinsic
def _prefer_wide_vectors(typingctx):
    def codegen(context, builder, signature, args):
        # llvmlite's attribute set checks names against a fixed list that lacks LLVM's string attributes
        set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        return context.get_dummy_value()
    return types.none(), codegen


@overload(wide_vectors, inline="always")  # inlined, so the intrinsic marks the caller
def _wide_vectors_compiled():
    return lambda: _prefer_wide_vectors()


@njit(cache=True, nogil=True, inline="always")
def part_rows(rows, p, parts):
    """Rows [start, stop) of part p of `parts` nearly equal parts."""
    return rows * p // parts, rows * (p + 1) // parts


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


@intrinsic
def _float_from_bits(typingctx, bits):
    """The float whose IEEE bits are `bits` (int32 -> float32, int64 -> float64): builds 2^n exactly."""
    width = {types.int32: (types.float32, ir.FloatType()), types.int64: (types.float64, ir.DoubleType())}
    if bits in width:
        result, llvm_type = width[bits]
        return result(bits), lambda context, builder, signature, args: builder.bitcast(args[0], llvm_type)
    return None


def exp_vectorizable(s):
    """exp(s), in a form LLVM vectorises inside the tile kernels (numba's own exp calls libm one value at a time).

    Compiled, it is exp(s) = 2^n e^r with n = round(s / ln 2) and r = s - n ln 2 in [-ln2/2, ln2/2]
    (ln 2 split in two parts, so r is exact), e^r from its Taylor series (degree 7 for float32, 13
    for float64: within 2 ulp of numpy's exp) and 2^n built from its exponent bits. Results below the
    smallest normal float flush to 0, so exp(-inf) = 0. Without numba, this plain definition runs.
    """
    return math.exp(s)


def _exp_float32(s):
    n = np.rint(s * np.float32(1.4426950408889634))  # s / ln 2
    r = s - n * np.float32(0.693145751953125) - n * np.float32(1.428606820309417e-06)  # ln 2 = hi + lo
    p = np.float32(1 / 5040)
    for c in (1 / 720, 1 / 120, 1 / 24, 1 / 6, 1 / 2, 1.0, 1.0):
        p = p * r + np.float32(c)
    two_n = _float_from_bits(np.int32((np.int32(n) + np.int32(127)) << np.int32(23)))
    return np.float32(0.0) if s < np.float32(-87.0) else p * two_n


def _exp_float64(s):
    n = np.rint(s * 1.4426950408889634)
    r = s - n * 0.6931471803691238 - n * 1.9082149292705877e-10
    p = 1 / 6227020800
    for c in (1 / 479001600, 1 / 39916800, 1 / 3628800, 1 / 362880, 1 / 40320, 1 / 5040, 1 / 720, 1 / 120,
              1 / 24, 1 / 6, 1 / 2, 1.0, 1.0):
        p = p * r + c
    two_n = _float_from_bits((np.int64(n) + np.int64(1023)) << np.int64(52))
    return 0.0 if s < -708.0 else p * two_n


# No reassociation here: it would let LLVM merge (s - n hi) - n lo into s - n ln 2 and lose r's precision.
@overload(exp_vectorizable, jit_options={"fastmath": {"contract", "nsz"}})
def _exp_vectorizable_compiled(s):
    return {types.float32: _exp_float32, types.float64: _exp_float64}.get(s)


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
