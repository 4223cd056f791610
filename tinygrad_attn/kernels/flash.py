"""Flash attention: softmax(scale q k^T + bias) v without ever building the (Tq, Tk) matrix, compiled.

Forward, for one query block of one group (the online softmax, over its key
tiles; m the running row max, l the running row sum, out the running output):

    S = q (scale k)^T + bias              a (bq, bk) tile of scores
    m' = max(m, rowmax S),  P = exp(S - m'),  alpha = exp(m - m')
    l' = l alpha + rowsum P,  out' = out alpha + P v
    after the last tile: out / l is the output, lse = m + log l (saved for the backward)

Backward (FlashAttention-2), for one range of key tiles of one group, over the
query blocks that see each tile, recomputing P from lse instead of storing it:

    P = exp(S - lse),  dV += P^T dO,  dP = dO v^T
    dS = P * (dP - delta),  delta = rowsum(dO * out)
    dQ += scale dS k,  dK += scale dS^T q

Every variant (causal, a cache offset, a sliding window, grouped kv heads, a block mask, a compiled score
modifier) is one `Variant`, read by the loops as visibility.py describes: a tile no query of its block sees
is skipped in both passes, a tile seen whole needs no mask, a tile seen in part is multiplied only over
the keys some query of its block sees (visibility.block_columns) and takes each row's band limits and the
compiled mask (modifiers.py), and with a modifier S is score_mod(S) and the backward's dS is multiplied by
its derivative.

`attend_query_blocks` and `backward_key_ranges` are those loops over a list of
items, run on one thread; their `prange` drivers give each thread its list
(layout.py's plan, from the same tile grid). Products go through blas.py's `matmul_into` (BLAS, called
from compiled code), what happens to a tile in between through tiles.py. Rows
and columns are taken with views.py's `rows(a, start, stop)` (a[start:stop])
and `columns(a, start, stop)` (a[:, start:stop]), which compile without
numba's slice clamping. With NUMBA_DISABLE_JIT=1 the same code runs as Python,
a debugger can step into.

A row with nothing to attend to (every key masked) gets l = 0: output 0 P v
(0, or NaN from a NaN in v, as on the math path), lse -inf, gradients 0; with no
key at all, 0. A NaN anywhere in a row's scores makes that row's output NaN.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit, prange

from . import SAFE_FASTMATH, buffers, parallel
from .blas import kernel_gemm, matmul_into
from .layout import backward_plan, dense_rows, forward_plan, new_like, rows_apart, tile_shape
from .modifiers import MASKED_SCORES, PULL_BACK, SCORES
from .scratch import scratch
from .tiles import exp_shifted, online_softmax, score_gradient
from .vector import minimum, never_inline
from .views import columns, rows
from .visibility import (
    EMPTY,
    GROUP,
    HAS_BIAS,
    HI,
    KEYS,
    LO,
    MASKED,
    MODIFIED,
    PARTIAL,
    ROWS,
    UNBOUNDED,
    block_columns,
    describe,
    tile_grid,
)

FEW_ROWS = 16  # a query block of fewer rows multiplies by k^T where it lies instead of laying it out
ROW_PAD = 16  # columns past the widest tile in the score scratch rows: rows exactly a tile wide ran the small
# tiles' kernels slower, a placement effect of the scratch arrays in the cache (docs/performance.md)


@njit(cache=True, nogil=True)  # not inlined: in the drivers' 512-bit vector setting this copy runs slower
def transpose_into(tile, factor, out):
    """out (d, bk) <- factor tile^T, contiguous: BLAS multiplies by a transposed right operand at about half
    its speed (numpy's OpenBLAS, row-major), so k^T and v^T are laid out once per key tile."""
    for j in range(tile.shape[0]):
        for c in range(tile.shape[1]):
            out[c, j] = tile[j, c] * factor


@njit(cache=True, nogil=True, inline="always")
def scores_into(s, q_rows, k_t, factor, bias, has_bias, gemm):
    """s (bq, bk) <- factor q k_t + bias, the bias tile (bq, bk) added only if has_bias."""
    matmul_into(q_rows, k_t, s, factor, 0.0, gemm)  # S = q (scale k)^T: (bq, d) (d, bk) -> (bq, bk)
    if has_bias:
        for i in range(s.shape[0]):
            for j in range(s.shape[1]):
                s[i, j] += bias[i, j]


@njit(cache=True, nogil=True)
def apply_modifier(modify, mode, s, raw, n_rows, n, a, b, q_start, k_start, captured, grads, scale):
    """The compiled modifier on a tile (modifiers.py's call): s and raw (bq, bk) scratch tiles, of which n_rows x n
    hold the tile of batch entry a, head b, from query q_start and key k_start."""
    never_inline()  # one compiled call, not one per call site of the two drivers
    modify(mode, s.ctypes, raw.ctypes, n_rows, s.shape[1], n, a, b, q_start, k_start, captured.ctypes, grads.ctypes,
           scale)


@njit(cache=True, nogil=True, inline="always")
def copy_tile(src, dst, n_rows, n):
    """dst[:n_rows, :n] <- src[:n_rows, :n] (loops: a slice assignment compiles numba's broadcasting code)."""
    for i in range(n_rows):
        for j in range(n):
            dst[i, j] = src[i, j]


@njit(cache=True, nogil=True, inline="always")
def scale_rows(a, factor):
    """a (r, c) <- a * factor[:, None] (loops: numba's array expressions take longer to compile)."""
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            a[i, j] *= factor[i]


# The tile kernels are inlined into the two drivers (tiles.py), so these carry the tiles' fastmath flags.
@njit(cache=True, nogil=True, error_model="numpy", fastmath=SAFE_FASTMATH)
def attend_query_blocks(q, k, v, variant, modify, out, lse, gemm, part, items):
    """The forward for items group * n_blocks + query block, one after another: out and lse of each.
    Each key tile's (scale k)^T is laid out once per kv head in this part's own buffer, when a block first
    needs it, and read by every later block of that kv head (the items of a part come group after group).
    `variant` is (vis, scale, bias, grid, captured, grads): visibility.py's description and tile grid, the
    bias grid, and what the compiled modifier `modify` reads and writes (modifiers.py); modify None: no
    modifier (numba then compiles no modifier call at all)."""
    vis, scale, bias, grid, captured, grads = variant
    lo, hi, group, has_bias, bq, bk = vis[LO], vis[HI], vis[GROUP], vis[HAS_BIAS] != 0, vis[ROWS], vis[KEYS]
    modified, masked = vis[MODIFIED] != 0, vis[MASKED] != 0
    n_inner, tq, tk = q.shape[1], q.shape[2], k.shape[2]
    n_blocks = -(-tq // bq)
    d, d_v, n_kv = q.shape[3], v.shape[3], k.shape[1]
    s_buf = scratch(bq, bk + ROW_PAD, q)
    n_tiles = -(-tk // bk) if tq >= FEW_ROWS else 0  # a few rows (decoding) read k^T where it lies
    k_t = scratch(n_tiles * d, bk, q)  # rows u d .. u d + d: key tile u's (scale k)^T, of kv head `head`
    laid, head = scratch(1, n_tiles, q), -1  # laid[0, u] 1 once tile u holds head's keys
    state = scratch(3, bq, q)
    m, l, alpha = state[0], state[1], state[2]  # noqa: E741  (bq,) each: the running max, sum, rescaling
    for item in items:
        g, block = divmod(item, n_blocks)
        a, b = divmod(g, n_inner)
        q_g, k_g, v_g, bias_g = q[a, b], k[a, b // group], v[a, b // group], bias[a, b]  # (Tq, d), (Tk, d), ..
        seen = grid[a, b, block]  # (key tiles,): each one's state
        if a * n_kv + b // group != head:  # another kv head: no tile laid out yet
            head = a * n_kv + b // group
            for u in range(n_tiles):
                laid[0, u] = 0
        r0 = block * bq
        r1 = minimum(r0 + bq, tq)
        q_rows, out_rows = rows(q_g, r0, r1), rows(out[a, b], r0, r1)  # (bq, d), (bq, dv)
        bias_rows = rows(bias_g, r0, r1)  # (bq, Tk)
        for i in range(r1 - r0):
            m[i] = -np.inf
            l[i] = 0
        started = False  # whether a product wrote the output
        for u in range(len(seen)):
            if seen[u] == EMPTY:  # no query of the block sees a key of the tile: skipped
                continue
            c0, c1 = block_columns(r0, r1, u * bk, minimum(u * bk + bk, tk), lo, hi)  # the keys the block sees
            n = c1 - c0
            s_rows = rows(s_buf, 0, r1 - r0)  # (bq, bk + ROW_PAD): the tile in its first n columns, C rows for tiles.py
            s = columns(s_rows, 0, n)  # (bq, n)
            if r1 - r0 >= FEW_ROWS:  # (scale k)^T, laid out for BLAS's fastest product: (d, bk)
                tile_t = rows(k_t, u * d, u * d + d)  # (d, bk)
                if laid[0, u] == 0:  # the backward's very values: S - lse <= 0 exactly there
                    transpose_into(rows(k_g, u * bk, minimum(u * bk + bk, tk)), scale,
                                   columns(tile_t, 0, minimum(u * bk + bk, tk) - u * bk))
                    laid[0, u] = 1
                keys, factor = columns(tile_t, c0 - u * bk, c1 - u * bk), 1.0
            else:  # a few rows (one when decoding): k^T read where it lies
                keys, factor = rows(k_g, c0, c1).T, scale
            scores_into(s, q_rows, keys, factor, columns(bias_rows, c0, c1), has_bias, gemm)
            partial = seen[u] == PARTIAL
            if modify is not None:  # S <- score_mod(S), -inf where mask_mod hides
                if modified or (masked and partial):
                    apply_modifier(modify, MASKED_SCORES if masked and partial else SCORES, s_buf, s_buf, r1 - r0, n,
                                   a, b, r0, c0, captured, grads[part], 0.0)
            online_softmax(s_rows, n, m, l, alpha, r0, c0, lo, hi)  # S <- P = exp(S - m'), ..
            if started:
                scale_rows(out_rows, alpha)  # out alpha (nothing to rescale before the first product)
            v_tile = rows(v_g, c0, c1)  # (bk, dv)
            matmul_into(s, v_tile, out_rows, 1.0, 1.0 if started else 0.0, gemm)  # out += P v: (bq, bk) (bk, dv)
            started = True
        lse_rows = rows(lse[a, b], r0, r1)  # (bq,)
        for i in range(r1 - r0):  # lse = m + log l, out / l; a row that saw nothing: lse -inf, out 0 P v
            lse_rows[i] = m[i] + math.log(l[i]) if l[i] > 0 else (l[i] if l[i] != l[i] else -np.inf)
            inverse = q.dtype.type(1) / l[i] if l[i] != 0 else q.dtype.type(0)  # in q's dtype, as out is
            for c in range(d_v):  # no key tile at all: no product wrote the output, 0
                out_rows[i, c] = out_rows[i, c] * inverse if started else 0
@njit(cache=True, nogil=True, error_model="numpy", fastmath=SAFE_FASTMATH)
def backward_key_ranges(grad, q, k, v, out, lse, variant, modify, edges, dq_parts, dk, dv, gemm, part, items):
    """The backward for items group * n_ranges + key range, one after another: dK and dV of the range's
    keys added into dk and dv (one per query head), dQ into dq_parts[range], the captured values' gradients
    into variant's grads[part] (all zero-filled)."""
    vis, scale, bias, grid, captured, grads = variant
    lo, hi, group, has_bias, bq, bk = vis[LO], vis[HI], vis[GROUP], vis[HAS_BIAS] != 0, vis[ROWS], vis[KEYS]
    modified, masked = vis[MODIFIED] != 0, vis[MASKED] != 0
    n_inner, tq, tk, n_ranges = q.shape[1], q.shape[2], k.shape[2], len(edges) - 1
    d, d_v = q.shape[3], v.shape[3]
    s_buf, dp_buf = scratch(bq, bk + ROW_PAD, q), scratch(bq, bk + ROW_PAD, q)
    raw_buf = scratch(bq if modified else 1, bk + ROW_PAD, q)  # the scores before the modifier, as wide
    kt_buf, vt_buf = scratch(d, bk, q), scratch(d_v, bk, q)
    per_row = scratch(2, tq, q)
    delta, lse_rows = per_row[0], per_row[1]  # (Tq,): every row's delta; the lse of a block's rows
    one = q.dtype.type(1)  # in q's dtype, as the scale is: transpose_into compiles one version
    score_factor = one if modified else scale  # with a modifier, the scale comes with its derivative
    for item in items:
        g, r = divmod(item, n_ranges)
        a, b = divmod(g, n_inner)
        q_g, k_g, v_g, bias_g, grad_g = q[a, b], k[a, b // group], v[a, b // group], bias[a, b], grad[a, b]
        kv_head = b // (n_inner // dk.shape[1])  # dk per query head, or per kv head when one part runs it all
        dq_g, dk_g, dv_g = dq_parts[r, a, b], dk[a, kv_head], dv[a, kv_head]  # (Tq, d): this range's share of dQ
        out_g = out[a, b]  # (Tq, dv)
        seen = grid[a, b]  # (query blocks, key tiles)
        for i in range(tq):  # delta = rowsum(dO * out): (Tq,), once per item
            total = q.dtype.type(0)
            for c in range(d_v):
                total += grad_g[i, c] * out_g[i, c]
            delta[i] = total
        for u0 in range(edges[r], edges[r + 1], bk):
            u = u0 // bk
            u1 = minimum(u0 + bk, tk)
            transpose_into(rows(k_g, u0, u1), scale, columns(kt_buf, 0, u1 - u0))  # (scale k)^T: (d, bk)
            transpose_into(rows(v_g, u0, u1), one, columns(vt_buf, 0, u1 - u0))  # v^T: (dv, bk)
            for t in range(seen.shape[0]):
                if seen[t, u] == EMPTY:  # no query of the block sees a key of the tile
                    continue
                partial = seen[t, u] == PARTIAL
                r0 = t * bq
                r1 = minimum(r0 + bq, tq)
                c0, c1 = block_columns(r0, r1, u0, u1, lo, hi)  # the keys of the tile the block sees
                n = c1 - c0
                k_tile = rows(k_g, c0, c1)  # (n, d)
                k_t, v_t = columns(kt_buf, c0 - u0, c1 - u0), columns(vt_buf, c0 - u0, c1 - u0)  # (d, n), (dv, n)
                dk_tile, dv_tile = rows(dk_g, c0, c1), rows(dv_g, c0, c1)  # (n, d), (n, dv)
                q_rows, d_out = rows(q_g, r0, r1), rows(grad_g, r0, r1)  # (bq, d), (bq, dv)
                s_rows, dp_rows = rows(s_buf, 0, r1 - r0), rows(dp_buf, 0, r1 - r0)  # tiles in their n columns
                s, dp = columns(s_rows, 0, n), columns(dp_rows, 0, n)  # (bq, n)
                if r1 - r0 >= FEW_ROWS:  # the forward's product for these rows, so that S - lse <= 0 exactly
                    keys, factor = k_t, one
                else:
                    keys, factor = k_tile.T, scale
                scores_into(s, q_rows, keys, factor, columns(rows(bias_g, r0, r1), c0, c1), has_bias, gemm)
                if modify is not None:
                    if modified:
                        copy_tile(s_buf, raw_buf, r1 - r0, n)
                    if modified or (masked and partial):  # S <- score_mod(S), -inf where mask_mod hides
                        apply_modifier(modify, MASKED_SCORES if masked and partial else SCORES, s_buf, s_buf, r1 - r0,
                                       n, a, b, r0, c0, captured, grads[part], 0.0)
                for i in range(r1 - r0):  # contiguous, like the forward's m: exp_shifted compiles one version
                    lse_rows[i] = lse[a, b, r0 + i]
                exp_shifted(s_rows, n, lse_rows, r0, c0, lo, hi)  # S <- P = exp(S - lse)
                matmul_into(s.T, d_out, dv_tile, 1.0, 1.0, gemm)  # dV += P^T dO: (bk, bq) (bq, dv)
                matmul_into(d_out, v_t, dp, 1.0, 0.0, gemm)  # dP = dO v^T: (bq, dv) (dv, bk)
                score_gradient(s_rows, dp_rows, n, rows(delta, r0, r1), score_factor)  # dP <- dS = P * (dP - delta)
                if modify is not None:
                    if modified:  # dS <- scale dS score_mod'(S); the captured values' gradients
                        apply_modifier(modify, PULL_BACK, dp_buf, raw_buf, r1 - r0, n, a, b, r0, c0, captured,
                                       grads[part], scale)
                matmul_into(dp, k_tile, rows(dq_g, r0, r1), 1.0, 1.0, gemm)  # dQ += scale dS k: (bq, bk) (bk, d)
                matmul_into(dp.T, q_rows, dk_tile, 1.0, 1.0, gemm)  # dK += scale dS^T q: (bk, bq) (bq, d)


@njit(cache=True, nogil=True, error_model="numpy", parallel=True)
def _forward_parallel(q, k, v, variant, modify, out, lse, gemm, bounds, items):
    for p in prange(len(bounds) - 1):  # p is unsigned here: int64(p) calls the version the calling thread runs
        attend_query_blocks(q, k, v, variant, modify, out, lse, gemm, np.int64(p), items[bounds[p]:bounds[p + 1]])


@njit(cache=True, nogil=True, error_model="numpy", parallel=True)
def _backward_parallel(grad, q, k, v, out, lse, variant, modify, edges, dq_parts, dk, dv, gemm, bounds, items):
    for p in prange(len(bounds) - 1):
        backward_key_ranges(grad, q, k, v, out, lse, variant, modify, edges, dq_parts, dk, dv, gemm, np.int64(p),
                            items[bounds[p]:bounds[p + 1]])  # as in _forward_parallel


@dataclass(frozen=True, eq=False)
class Variant:
    """Which keys each query sees and how its scores are modified, as the attention layers describe it:
    the band (visibility.band), the query heads per kv head, a block mask's blocks (B or 1, H or 1, Q blocks,
    KV blocks) of block_size, and a compiled modifier (modifiers.py) for q's dtype with whether it changes the
    scores (a score_mod: run on every tile) and whether it masks (a mask_mod: run on the tiles seen in part).
    Compared by identity (its arrays and functions), hashed the same way."""

    lo: int = -UNBOUNDED
    hi: int = UNBOUNDED
    group: int = 1
    blocks: np.ndarray | None = None
    block_size: tuple[int, int] = (0, 0)
    modify: Any = None
    scored: bool = False
    masked: bool = False
    math: Any = None  # the modifier and mask on whole tensors, for the math path: (scores, captured) -> (scores, keep)

    @staticmethod
    def causal(causal: bool) -> Variant:
        return _CAUSAL if causal else _FULL

    @staticmethod
    @functools.lru_cache(maxsize=64)
    def grouped(group: int, causal: bool) -> Variant:
        """Grouped-query heads, `group` query heads per kv head, causal or not (one object per pair)."""
        return Variant(hi=0 if causal else UNBOUNDED, group=group)


_FULL, _CAUSAL = Variant(), Variant(hi=0)


def _bias(bias, shape, dtype):
    """The grid bias broadcast (no copy) to the whole (P, Q, Tq, Tk), and whether there is one."""
    if bias is None:
        return _no_bias(shape, np.dtype(dtype)), False
    return np.broadcast_to(bias.astype(dtype, copy=False), shape), True


@functools.lru_cache(maxsize=64)
def _no_bias(shape, dtype):
    """Zeros of that shape, never read, one element in memory (kept per shape, not broadcast anew at each call)."""
    return np.broadcast_to(np.zeros((1, 1, 1, 1), dtype), shape)


def _plan_of(q, k, v, variant):
    """(lead, Tq, Tk, tile, threads, reused, grids): lead the groups' grid (P, Q); reused when some rows are
    read by more than one tile; grids visibility.py's tile grid, for the plans, and the same broadcast (no
    copy) to every group (P, Q, query blocks, key tiles), as the kernels read it (both kept per shape when the
    band alone makes them)."""
    (n_outer, n_inner, tq, d), tk = q.shape, k.shape[2]
    if variant.blocks is None:  # the band alone: the same for every call of these shapes
        tile, grids, seen = _band_layout(tq, tk, max(d, v.shape[3]), variant.lo, variant.hi, (n_outer, n_inner))
    else:
        tile = tile_shape(tq, tk, max(d, v.shape[3]))
        grid = tile_grid(variant.lo, variant.hi, tq, tk, tile, variant.blocks, variant.block_size)
        grids = grid, np.broadcast_to(grid, (n_outer, n_inner) + grid.shape[2:])
        seen = np.count_nonzero(grid) / max(grid.size, 1)
    work = float(q.size) * tk + float(v.size) * tq  # multiply-adds of S = q k^T and P v, all tiles seen
    threads = parallel.threads_for(work * seen, parallel.MIN_ATTENTION_WORK)
    return (n_outer, n_inner), tq, tk, tile, threads, tq > tile[0] or tk > tile[1], grids


@functools.lru_cache(maxsize=256)
def _band_layout(tq, tk, d, lo, hi, lead):
    """(tile, (grid, grid broadcast to the groups `lead`), the share of tiles seen) of a band at these sizes;
    the grid read-only, as it is shared."""
    tile = tile_shape(tq, tk, d)
    grid = tile_grid(lo, hi, tq, tk, tile)
    grid.flags.writeable = False
    return tile, (grid, np.broadcast_to(grid, lead + grid.shape[2:])), np.count_nonzero(grid) / max(grid.size, 1)


def _kernel_variant(variant, q, scale, tk, tile, every_group, bias, captured, parts):
    """The kernels' `variant` tuple (vis, scale, bias, grid, captured, grads), grid `every_group`: the tile
    grid broadcast to every group (P, Q, query blocks, key tiles); grads (parts, C + 1), written only by a
    modifier (without one, zeros kept per part count and never written)."""
    bias, has_bias = _bias(bias, q.shape[:3] + (tk,), q.dtype)
    vis = _description(variant.lo, variant.hi, variant.group, has_bias, variant.scored, variant.masked, tile)
    scale = q.dtype.type(scale)
    if variant.modify is None:
        return vis, scale, bias, every_group, _NOTHING_CAPTURED, _unwritten_grads(parts)
    values = np.zeros(1) if captured is None else captured
    return vis, scale, bias, every_group, values, np.zeros((parts, len(values) + 1))


_NOTHING_CAPTURED = np.zeros(1)
_NOTHING_CAPTURED.flags.writeable = False


@functools.lru_cache(maxsize=256)
def _description(*fields):
    vis = describe(*fields)
    vis.flags.writeable = False
    return vis


@functools.lru_cache(maxsize=64)
def _unwritten_grads(parts):
    grads = np.zeros((parts, 2))
    grads.flags.writeable = False
    return grads


def _checked(grads, variant):
    """The captured values' gradients summed over the parts; an index outside a captured tensor raises."""
    if variant.modify is None:  # nothing reads a captured tensor
        return grads[0, :-1]
    if grads[:, -1].any():
        raise IndexError(f"flex_attention: {getattr(variant.modify, 'name', 'a modifier')} read a captured tensor at "
                         "an index outside it")
    return grads[:, :-1].sum(axis=0)


def flash_attention_forward(q, k, v, scale, variant, bias, captured=None):
    """q (P, Q, Tq, d), k (P, Q / group, Tk, d), v (P, Q / group, Tk, dv) grids (layout.as_group_grid); bias
    from grid_bias; the variant's modifier reads `captured` (float64, flat).

    Returns out (P, Q, Tq, dv), laid out like q, lse (P, Q, Tq), and the q, k, v the kernel read (contiguous
    copies where the given rows lie apart, else the arrays given), which the backward may take as they are.
    """
    out, lse = new_like(q, v.shape[3]), buffers.empty(q.shape[:3], q.dtype)  # out laid out like the q given
    lead, tq, tk, tile, threads, reused, (grid, every_group) = _plan_of(q, k, v, variant)
    q, k, v = dense_rows(q, reused), dense_rows(k, reused), dense_rows(v, reused)
    plan = forward_plan(lead, grid, tile, tq, tk, threads)
    kernel_variant = _kernel_variant(variant, q, scale, tk, tile, every_group, bias, captured, 1)
    parallel.run_plan(_forward_parallel, attend_query_blocks, plan, q, k, v, kernel_variant, variant.modify, out, lse,
                      kernel_gemm(q.dtype)[0])
    _checked(kernel_variant[-1], variant)
    return out, lse, (q, k, v)


def flash_attention_backward(grad_out, q, k, v, out, lse, scale, variant, bias, grads=None, captured=None):
    """dq, dk, dv (P, Q, T, d) each, for the forward above, and the captured values' gradient (float64,
    flat, or None without a modifier); `grads` may give three zero-filled arrays to receive dq, dk, dv (such
    as views into one packed gradient)."""
    lead, tq, tk, tile, threads, reused, (grid, every_group) = _plan_of(q, k, v, variant)
    dq, dk_to, dv_to = grads if grads is not None else (new_like(a, a.shape[3], parallel.zeros) for a in (q, k, v))
    edges, plan = backward_plan(lead, grid, tile, tq, tk, threads)
    # grouped-query: the query heads of a group add into one kv head's dk and dv when one part runs every
    # item, one after another; on several threads each query head has its own, summed over the group after
    per_head = variant.group > 1 and len(plan[0]) > 2
    dk, dv = (parallel.zeros((a.shape[0], q.shape[1]) + a.shape[2:], a.dtype) if per_head else
              parallel.zeros(a.shape, a.dtype) if rows_apart(a, reused) else a for a in (dk_to, dv_to))
    grad_out, q, k, v = (dense_rows(a, reused) for a in (grad_out, q, k, v))
    n_ranges = len(edges) - 1
    dq_parts = dq[None] if n_ranges <= 1 else parallel.zeros((n_ranges,) + q.shape, q.dtype)
    kernel_variant = _kernel_variant(variant, q, scale, tk, tile, every_group, bias, captured, len(plan[0]) - 1)
    parallel.run_plan(_backward_parallel, backward_key_ranges, plan, grad_out, q, k, v, out, lse, kernel_variant,
                      variant.modify, edges, dq_parts, dk, dv, kernel_gemm(q.dtype)[0])
    if n_ranges > 1:
        dq_parts.sum(axis=0, out=dq)
    for summed, to in ((dk, dk_to), (dv, dv_to)):
        if per_head:
            p, n_kv, t, c = to.shape
            to[...] = summed.reshape(p, n_kv, variant.group, t, c).sum(axis=2)
        elif summed is not to:
            to[...] = summed
    return dq, dk_to, dv_to, (_checked(kernel_variant[-1], variant) if variant.modify is not None else None)


def attention_reference(q, k, v, scale, causal, bias):
    """Dense plain-numpy attention with the same masking rules, for the tests: softmax(q k^T * scale + bias) v."""
    scores = (q @ np.swapaxes(k, -1, -2)) * scale
    if bias is not None:
        scores = scores + bias
    if causal:
        tq, tk = scores.shape[-2:]
        scores = np.where(np.tri(tq, tk, dtype=bool), scores, -np.inf)
    m = scores.max(axis=-1, keepdims=True, initial=-np.inf)  # initial: there may be no keys
    dead = m == -np.inf
    e = np.exp(scores - np.where(dead, 0, m))
    weights = np.where(dead, 0, e / np.where(dead, 1, e.sum(axis=-1, keepdims=True)))
    return weights @ v
