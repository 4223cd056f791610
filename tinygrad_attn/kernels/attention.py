"""Flash-style scaled dot-product attention: the (Tq x Tk) matrix is never built.

Shapes: q (P, Q, Tq, d), k (P, Q, Tk, d), v (P, Q, Tk, dv): a grid of
G = P x Q independent groups, (batch, heads) for multi-head attention, taken
where they lie in memory (see `as_group_grid`). The queries are cut into
blocks of BLOCK_Q rows and the keys into blocks of BLOCK_K columns (both
twice that from LONG_QUERIES queries on). For one query block, each key
tile gives scores S = q (k * scale)^T of shape
(p, h, bq, bk), on numpy's BLAS; the numba kernel `online_softmax_tile`
masks the tile, turns it into probabilities in one pass over each row (with
`exp_vectorizable`, an exp that LLVM vectorises), and the tile is folded into
a running row max m, running sum l and running output acc (the online
softmax):

    m' = max(m, max_j S_j),   P_j = exp(S_j - m'),   alpha = exp(m - m')
    l' = l * alpha + sum_j P_j,   acc' = acc * alpha + P V_tile

and at the end out = acc / l, lse = m + log l (saved for the backward, with
k * scale transposed, so that only v is transposed again). A
query block whose keys fit one tile needs none of that: `softmax_tile` gives
P = softmax(S) and lse directly, and out = P V. With causal masking, key
tiles entirely above the diagonal are skipped and only tiles crossing it are
masked element by element.

Backward (FlashAttention-2 style), recomputing P from the saved lse:
    P = exp(S - lse),  dV += P^T dO,  dP = dO V^T,
    dS = P * (dP - delta),  delta_i = sum_c dO_ic out_ic,
    dQ += (scale dS) K,  dK += (scale dS)^T Q

A row with nothing to attend to has l = 0: its output, lse (-inf) and
gradients are zeros. The (batch x head) groups are independent: they are
split among threads by `threads.run_over_groups`, and each thread walks its
groups in chunks whose tile stays in cache (TILE_BYTES).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from . import SAFE_FASTMATH
from .threads import run_over_groups

BLOCK_Q = 128
BLOCK_K = 256
LONG_QUERIES = 2048  # from this many queries on, tiles are twice as large each way (see `_tile_shape`)


def maximum(a, b):
    """The larger of two floats, NaN when either is NaN (IEEE 754-2019 maximum).

    Compiled, it is LLVM's `maximum`, which the loop vectoriser turns into a
    vector reduction: the row max of 8 x 32 x 512 scores took 64 us as a chain
    of compare-and-selects (numba's `max`) and 7 us this way. The NaN a score
    may carry also reaches the row max, and from it the output.
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


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def row_max(scores, g, i, limit, start):
    """max(start, scores[g, i, 0], ..., scores[g, i, limit - 1]), NaN if any of them is NaN.

    The kernels index the tile directly rather than pass row views: a view
    costs a reference count increment and decrement per row, and kept this
    function from being inlined (softmax tile on 128 x 32 x 32 scores: 154 ->
    112 us without views).
    """
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
    smallest normal float flush to 0, so exp(-inf) = 0. Measured on 1M float32 values: 0.22 ns per
    value with the row sum, against 0.5 ns for numpy's exp alone. Without numba, this plain definition runs.
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


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def softmax_tile(scores, maxima, sums, q_start, k_start, causal):
    """A query block's only key tile: scores (G, bq, bk) -> P = softmax(S) in place.

    No running max is needed when the whole row is in one tile. maxima and sums (G, bq) receive each
    row's max m and sum l of exp(S - m), from which `_log_sum_exp` makes lse. Masked entries become 0; a
    row with nothing to attend to is all 0, with l = 0.
    """
    groups, bq, bk = scores.shape
    for g in range(groups):
        for i in range(bq):
            limit = visible_keys(i, bk, q_start, k_start, causal)
            m = row_max(scores, g, i, limit, scores.dtype.type(-np.inf))  # in the scores' dtype: exp stays float32
            if m == -np.inf:
                limit = 0
            total = scores.dtype.type(0)
            for j in range(limit):
                p = exp_vectorizable(scores[g, i, j] - m)
                scores[g, i, j] = p
                total += p
            inverse = scores.dtype.type(1) / total if limit else scores.dtype.type(0)
            for j in range(limit):
                scores[g, i, j] *= inverse
            scores[g, i, limit:] = 0  # a slice: in a loop from `limit`, numba's negative-index check on j
            # keeps LLVM from vectorising the stores (causal 2 x 256 x 512 tiles: 85 -> 15 us for the zeros)
            maxima[g, i], sums[g, i] = m, total


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def online_softmax_tile(scores, maxima, sums, alpha, q_start, k_start, causal):
    """One key tile of a longer row, for the online softmax; in place.

    scores (G, bq, bk) -> P = exp(S - m') with m' = max(m, max_j S_j) the new running max; masked
    entries become 0. maxima (G, bq) becomes m'; alpha (G, bq) receives exp(m - m'), which rescales
    what was accumulated under the old max; sums (G, bq) becomes l * alpha + sum_j P_j.
    """
    groups, bq, bk = scores.shape
    for g in range(groups):
        for i in range(bq):
            limit = visible_keys(i, bk, q_start, k_start, causal)
            m_old = maxima[g, i]
            m = row_max(scores, g, i, limit, m_old)
            if m == -np.inf:  # nothing seen yet in this row: all its P are 0
                limit = 0
            total = scores.dtype.type(0)
            for j in range(limit):
                p = exp_vectorizable(scores[g, i, j] - m)
                scores[g, i, j] = p
                total += p
            scores[g, i, limit:] = 0
            rescale = exp_vectorizable(m_old - m) if m_old > -np.inf else scores.dtype.type(0)
            alpha[g, i] = rescale
            sums[g, i] = sums[g, i] * rescale + total
            maxima[g, i] = m


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def probs_from_lse(scores, lse, q_start, k_start, causal):
    """scores (G, bq, bk) -> P = exp(S - lse) in place, recomputed for the backward; 0 where masked or dead."""
    groups, bq, bk = scores.shape
    for g in range(groups):
        for i in range(bq):
            shift = lse[g, i]  # a local, so the loop below has no load that may alias the scores
            limit = visible_keys(i, bk, q_start, k_start, causal) if shift > -np.inf else 0
            for j in range(limit):
                scores[g, i, j] = exp_vectorizable(scores[g, i, j] - shift)
            scores[g, i, limit:] = 0


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def score_gradient(probs, grad_probs, delta, scale):
    """grad_probs (G, bq, bk) -> scale * dS, dS = P * (dP - delta), in place: the softmax backward of a
    tile, times the score scale that dQ = scale dS K and dK = scale dS^T Q both need."""
    groups, bq, bk = probs.shape
    for g in range(groups):
        for i in range(bq):
            d = delta[g, i]
            for j in range(bk):
                grad_probs[g, i, j] = probs[g, i, j] * (grad_probs[g, i, j] - d) * scale


TILE_BYTES = 1 << 20  # a chunk of groups' score tile is kept around this size, so it stays in cache
STRIDED_TRANSPOSE_BYTES = 1 << 18  # beyond this span, a group's k or v is copied before it is transposed


def as_group_grid(a: np.ndarray) -> np.ndarray:
    """(..., T, d) -> (P, Q, T, d), a view whenever the leading dims allow it.

    Any strides are fine: numpy's matmul runs BLAS on each (T, d) matrix as
    long as its rows are unit-stride, so q, k and v split into heads by
    reshape (B, T, H, d) + transpose (B, H, T, d) are used where they lie,
    without a copy. Leading dims beyond two are merged into P when their
    strides allow, copied otherwise.
    """
    lead = a.shape[:-2]
    if len(lead) <= 2:
        return a.reshape((1,) * (2 - len(lead)) + a.shape)
    return a.reshape((-1, lead[-1]) + a.shape[-2:])  # numpy copies only when the strides require it


def _new_like_layout(a: np.ndarray, last: int, fill=np.empty) -> np.ndarray:
    """A new (P, Q, T, last) array laid out like `a`: when a's groups are interleaved within its rows
    (heads split from (B, T, H, d)), so is the result, and merging the heads back is a free reshape.
    `fill` is np.empty or np.zeros."""
    p, n, t, _ = a.shape
    if n > 1 and t > 1 and a.strides[1] < a.strides[2]:
        return fill((p, t, n, last), a.dtype).transpose(0, 2, 1, 3)
    return fill((p, n, t, last), a.dtype)


def _group_chunks(share: slice, n_inner: int, size: int):
    """Cut the flat groups of `share` (group g is (g // n_inner, g % n_inner) of the grid) into
    rectangles (P slice, Q slice) of at most `size` groups."""
    g, size = share.start, max(1, size)
    while g < share.stop:
        p, h = divmod(g, n_inner)
        whole_rows = min(size, share.stop - g) // n_inner
        if h == 0 and whole_rows:
            yield slice(p, p + whole_rows), slice(0, n_inner)
            g += whole_rows * n_inner
        else:
            end = min(n_inner, h + size, h + share.stop - g)
            yield slice(p, p + 1), slice(h, end)
            g += end - h


def _tile_shape(tq: int) -> tuple[int, int]:
    """(query rows, key columns) of a score tile. Long sequences take 2 BLOCK_Q x 2 BLOCK_K: with few
    groups per thread, the smaller tiles meant hundreds of tile steps of Python and numpy calls per group.
    Measured with 2 threads at (G, T, d) = (8, 4096, 64): forward 0.90 to 0.95 and backward 0.87 to 0.91
    of the smaller tiles' time; at T = 1024 the two were even, at T = 256 the larger took 1.25x."""
    return (2 * BLOCK_Q, 2 * BLOCK_K) if tq >= LONG_QUERIES else (BLOCK_Q, BLOCK_K)


def _chunks(share: slice, q: np.ndarray, k: np.ndarray, tile: tuple[int, int]):
    """`share` in chunks of groups whose score tile (tile[0] x tile[1]) stays near TILE_BYTES."""
    tile_bytes = min(tile[0], q.shape[2]) * min(tile[1], k.shape[2]) * q.itemsize
    return _group_chunks(share, q.shape[1], TILE_BYTES // max(tile_bytes, 1))


def _query_blocks(tq: int, tile: tuple[int, int]):
    for r0 in range(0, tq, tile[0]):
        yield slice(r0, min(r0 + tile[0], tq))


def _key_tiles(rows: slice, tk: int, causal: bool, tile: tuple[int, int]):
    """(key columns, tile crosses the diagonal) for each key tile of a query block that is not fully masked."""
    k_end = min(tk, rows.stop) if causal else tk  # keys >= rows.stop are masked for every row here
    for c0 in range(0, k_end, tile[1]):
        c1 = min(c0 + tile[1], k_end)
        yield slice(c0, c1), causal and c1 - 1 > rows.start


def grid_bias(bias: np.ndarray | None, lead: tuple[int, ...]) -> np.ndarray | None:
    """An additive mask broadcastable to (*lead, Tq, Tk) as (1 or P, 1 or Q, Tq or 1, Tk or 1).

    Dims of size 1 stay 1 (a padding mask (B, 1, 1, Tk) is not copied per head
    or per query); only leading dims beyond the grid's two are broadcast out.
    """
    if bias is None:
        return None
    bias = bias.reshape((1,) * (len(lead) + 2 - bias.ndim) + bias.shape)  # (1.., *mask shape), rank len(lead) + 2
    if len(lead) <= 2:
        return bias.reshape((1,) * (2 - len(lead)) + bias.shape)
    if all(n == 1 for n in bias.shape[:-2]):
        return bias.reshape((1, 1) + bias.shape[-2:])
    return as_group_grid(np.broadcast_to(bias, lead + bias.shape[-2:]))


def _bias_tile(bias: np.ndarray | None, ps: slice, hs: slice, rows: slice, cols: slice):
    if bias is None:
        return None
    index = (ps, hs, rows, cols)
    return bias[tuple(i if n > 1 else slice(None) for i, n in zip(index, bias.shape))]


def _transposed(a: np.ndarray, factor: float = 1.0, out: np.ndarray | None = None) -> np.ndarray:
    """(p, h, T, d) -> factor * a^T, (p, h, d, T) with contiguous matrices, in `out` if given. numpy's
    batched matmul leaves BLAS when its right operand is a transposed view (measured 3-4x slower for
    small tiles), so k^T and v^T are laid out once per chunk of groups, by the thread that uses them.

    Each output row gathers one column of a group's (T, d) matrix. When that matrix is spread over more
    than STRIDED_TRANSPOSE_BYTES (heads interleaved in rows of the model width), the gather misses the
    cache at every step, so the group is first copied to contiguous rows: (2, 4096, 64) with rows of 512
    floats took 2.4 ms read in place and 1.1 ms copied first; (32, 4, 32, 16) with rows of 64 floats,
    0.036 against 0.069 ms."""
    if a.shape[2] * a.strides[2] > STRIDED_TRANSPOSE_BYTES:
        a = np.ascontiguousarray(a)
    out = np.empty(a.shape[:2] + a.shape[:1:-1], a.dtype) if out is None else out
    return np.multiply(a.swapaxes(-1, -2), a.dtype.type(factor), out=out)


def _scores(q, k_scaled_t, bias, groups, rows, cols):
    """S = q (k * scale)^T (+ mask) for one tile: (p, h, bq, bk), on BLAS. `groups` is (P slice, Q slice)
    of the grid, k_scaled_t the chunk's scaled k transposed, (p, h, d, Tk)."""
    scores = q[groups + (rows,)] @ k_scaled_t[..., cols]
    tile = _bias_tile(bias, *groups, rows, cols)
    if tile is not None:
        scores += tile
    return scores


def flash_attention_forward(q, k, v, scale, causal, bias):
    """q (P, Q, Tq, d), k (P, Q, Tk, d), v (P, Q, Tk, dv), any unit-stride rows; `bias` from `grid_bias`.

    Returns out (P, Q, Tq, dv), laid out like q, lse (P, Q, Tq), and (k * scale)^T (P, Q, d, Tk), which the
    backward needs again.
    """
    n_outer, n_inner, tq, _ = q.shape
    tile = _tile_shape(tq)
    out = _new_like_layout(q, v.shape[3])
    lse = np.empty((n_outer, n_inner, tq), dtype=q.dtype)
    k_scaled_t = np.empty(k.shape[:2] + k.shape[:1:-1], k.dtype)  # (P, Q, d, Tk)

    def forward_share(share: slice) -> None:  # one thread's groups, chunk by chunk, block by block
        for groups in _chunks(share, q, k, tile):
            chunk_k_scaled_t = _transposed(k[groups], scale, out=k_scaled_t[groups])  # (p, h, d, Tk)
            for rows in _query_blocks(tq, tile):
                tiles = list(_key_tiles(rows, k.shape[2], causal, tile))
                attend = _attend_one_tile if len(tiles) == 1 else _attend_online
                lse[groups + (rows,)] = attend(q, chunk_k_scaled_t, v, bias, groups, rows, tiles,
                                               out[groups + (rows,)])

    run_over_groups(forward_share, n_outer * n_inner, n_outer * n_inner * tq * k.shape[2])
    return out, lse, k_scaled_t


def _attend_one_tile(q, k_scaled_t, v, bias, groups, rows, tiles, out):
    """out (p, h, bq, dv) = softmax(S) V for a query block whose keys fit one tile; returns lse (p, h, bq)."""
    ((cols, crosses),) = tiles
    scores = _scores(q, k_scaled_t, bias, groups, rows, cols)  # (p, h, bq, bk)
    p, h, bq, bk = scores.shape
    row_max, row_sum = np.empty((p, h, bq), q.dtype), np.empty((p, h, bq), q.dtype)  # m, l
    softmax_tile(scores.reshape(-1, bq, bk), row_max.reshape(-1, bq), row_sum.reshape(-1, bq), rows.start,
                 cols.start, crosses)  # P, in place
    np.matmul(scores, v[groups + (cols,)], out=out)
    return _log_sum_exp(row_max, row_sum)


def _attend_online(q, k_scaled_t, v, bias, groups, rows, tiles, out):
    """The same over several key tiles, with the online softmax's running max m, sum l and output acc."""
    shape = (groups[0].stop - groups[0].start, groups[1].stop - groups[1].start, rows.stop - rows.start)
    row_max, row_sum = np.full(shape, -np.inf, q.dtype), np.zeros(shape, q.dtype)  # m, l: (p, h, bq)
    alpha = np.empty(shape, q.dtype)
    acc = np.zeros(shape + (v.shape[3],), q.dtype)  # (p, h, bq, dv)
    for cols, crosses in tiles:
        scores = _scores(q, k_scaled_t, bias, groups, rows, cols)  # (p, h, bq, bk)
        bq, bk = scores.shape[2:]
        online_softmax_tile(scores.reshape(-1, bq, bk), row_max.reshape(-1, bq), row_sum.reshape(-1, bq),
                            alpha.reshape(-1, bq), rows.start, cols.start, crosses)  # P = exp(S - m'), l, alpha
        acc *= alpha[..., None]
        acc += scores @ v[groups + (cols,)]  # acc' = acc * alpha + P V_tile: (p, h, bq, dv)
    np.divide(acc, np.where(row_sum > 0, row_sum, 1)[..., None], out=out)
    return _log_sum_exp(row_max, row_sum)


def _log_sum_exp(row_max, row_sum):
    """lse = m + log l, -inf where l = 0 (nothing to attend to); numpy's log on all rows at once, which
    is faster than one libm call per row inside the kernels (4096 rows: about 60 us)."""
    live = row_sum > 0
    return np.where(live, row_max + np.log(np.where(live, row_sum, 1)), -np.inf)


def flash_attention_backward(grad_out, q, k, v, out, lse, k_scaled_t, scale, causal, bias, grads=None):
    """Returns dq, dk, dv for the forward above, (P, Q, T, d); `k_scaled_t` is the forward's third result.

    `grads` may give three zero-filled (P, Q, T, d) arrays, any layout with unit-stride rows, that receive
    the gradients (views into one packed gradient). Otherwise a gradient that each tile writes once (dq
    when every query block meets one key tile, dk and dv when there is one query block) is written in
    its input's layout, so merging heads is free, and one that tiles add into stays contiguous: adding
    into the strided layout costs a 4-D iteration per tile.
    """
    tq, tk = q.shape[2], k.shape[2]
    tile = _tile_shape(tq)
    dq_once = len(list(_key_tiles(_last_block(tq, tile), tk, causal, tile))) <= 1
    dkv_once = tq <= tile[0]
    targets = grads if grads is not None else (None, None, None)
    dq, dk, dv = (_accumulator(target, a, once)
                  for target, a, once in zip(targets, (q, k, v), (dq_once, dkv_once, dkv_once)))
    ones = np.ones(out.shape[3], dtype=out.dtype)

    def backward_share(share: slice) -> None:
        for groups in _chunks(share, q, k, tile):
            chunk_k_scaled_t, v_t = k_scaled_t[groups], _transposed(v[groups])  # (p, h, d, Tk), (p, h, dv, Tk)
            delta = (grad_out[groups] * out[groups]) @ ones  # rowsum(dO * O): (p, h, Tq)
            for rows in _query_blocks(tq, tile):
                bq = rows.stop - rows.start
                grad_o = grad_out[groups + (rows,)]  # (p, h, bq, dv)
                row_lse = np.ascontiguousarray(lse[groups + (rows,)]).reshape(-1, bq)
                row_delta = np.ascontiguousarray(delta[..., rows]).reshape(-1, bq)
                for cols, crosses in _key_tiles(rows, tk, causal, tile):
                    scores = _scores(q, chunk_k_scaled_t, bias, groups, rows, cols)  # (p, h, bq, bk)
                    bk = scores.shape[-1]
                    probs_from_lse(scores.reshape(-1, bq, bk), row_lse, rows.start, cols.start, crosses)  # P
                    _write_or_add(dv, groups + (cols,), scores.swapaxes(-1, -2), grad_o, dkv_once)  # dV += P^T dO
                    grad_scores = grad_o @ v_t[..., cols]  # dP = dO V^T: (p, h, bq, bk)
                    score_gradient(scores.reshape(-1, bq, bk), grad_scores.reshape(-1, bq, bk), row_delta,
                                   scale)  # scale * dS, dS = P (dP - delta)
                    _write_or_add(dq, groups + (rows,), grad_scores, k[groups + (cols,)], dq_once)  # dQ += scale dS K
                    _write_or_add(dk, groups + (cols,), grad_scores.swapaxes(-1, -2), q[groups + (rows,)],
                                  dkv_once)  # dK += scale dS^T Q

    n_groups = q.shape[0] * q.shape[1]
    run_over_groups(backward_share, n_groups, n_groups * tq * tk)
    for target, accumulated in zip(targets, (dq, dk, dv)):
        if target is not None and target is not accumulated:
            target[...] = accumulated
    return tuple(accumulated if target is None else target for target, accumulated in zip(targets, (dq, dk, dv)))


def _accumulator(target: np.ndarray | None, like: np.ndarray, once: bool) -> np.ndarray:
    """Where tiles put a gradient: the target itself (or a zeroed array in like's layout) when each entry is
    written once, a contiguous zeroed array when tiles add into it."""
    if not once:
        return np.zeros(like.shape, like.dtype)
    return target if target is not None else _new_like_layout(like, like.shape[3], np.zeros)


def _last_block(tq: int, tile: tuple[int, int]) -> slice:
    """The last query block, the one that meets the most key tiles."""
    return slice(max(0, (tq - 1) // tile[0] * tile[0]), tq)


def _write_or_add(grad: np.ndarray, index: tuple, a: np.ndarray, b: np.ndarray, once: bool) -> None:
    """grad[index] = a @ b when each entry of grad is written once, grad[index] += a @ b otherwise."""
    if once:
        np.matmul(a, b, out=grad[index])
    else:
        grad[index] += a @ b


def attention_reference(q, k, v, scale, causal, bias):
    """Dense plain-numpy attention with the same masking rules: softmax(q k^T * scale + bias) v."""
    scores = (q @ np.swapaxes(k, -1, -2)) * scale
    if bias is not None:
        scores = scores + bias
    if causal:
        tq, tk = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((tq, tk), dtype=bool)), scores, -np.inf)
    m = scores.max(axis=-1, keepdims=True)
    dead = m == -np.inf
    e = np.exp(scores - np.where(dead, 0, m))
    total = e.sum(axis=-1, keepdims=True)
    weights = np.where(dead, 0, e / np.where(dead, 1, total))
    return weights @ v
