"""Flash attention: softmax(q k^T * scale + bias) v without ever building the (Tq, Tk) matrix.

The queries are taken a block of rows at a time and the keys a tile of
columns at a time. Forward, for one query block, over its key tiles (the
online softmax; m the running row max, l the running sum, acc the running
output):

    S = q (k * scale)^T + bias            a (bq, bk) tile of scores
    m' = max(m, rowmax S),  P = exp(S - m'),  alpha = exp(m - m')
    l' = l alpha + rowsum P,  acc' = acc alpha + P V
    out = acc / l,  lse = m + log l       (lse is saved for the backward)

Backward (FlashAttention-2), recomputing P from lse instead of storing it:

    P = exp(S - lse),  dV += P^T dO,  dP = dO V^T
    dS = P (dP - delta),  delta = rowsum(dO * out)
    dQ += scale dS K,  dK += scale dS^T q

Every array carries two leading dims (p, h): a chunk of the (batch, head)
groups, done together so that each numpy call covers many small problems.
How the groups lie in memory, how they are cut into chunks and tiles, and
which thread runs what live in layout.py and parallel.py; the numba kernels
for one tile in tiles.py. When every group fits one tile, small.py runs the
same steps compiled, a group at a time. A row with nothing to attend to (every key masked)
gets l = 0: output 0, lse -inf, gradients 0. A NaN anywhere in a row's
scores makes that row's output NaN.
"""

from __future__ import annotations

import numpy as np

from .layout import (
    as_group_grid,
    backward_items,
    bias_tile,
    forward_items,
    grid_bias,
    key_tiles,
    new_like,
    query_blocks,
    tile_shape,
    transposed,
)
from .parallel import gemm_for, parallel_each, threads_for
from .small import blas_rows, fits_one_tile, one_tile_backward, one_tile_forward
from .tiles import online_softmax_tile, probs_from_lse, score_gradient, softmax_tile


def attend_query_block(q, kt, v, bias, groups, rows, causal, tile, out, lse):
    """Forward for the query block `rows` of the chunk `groups`: writes its out and lse.

    q (P, Q, Tq, d) and v (P, Q, Tk, dv) are the whole grids, kt (p, h, d, Tk) the chunk's (k * scale)^T.
    """
    q_block = q[groups + (rows,)]  # (p, h, bq, d)
    shape = q_block.shape[:-1]  # (p, h, bq)
    m = np.full(shape, -np.inf, q.dtype)  # running row max
    l = np.zeros(shape, q.dtype)  # running row sum of exp(S - m)  # noqa: E741
    tiles = list(key_tiles(rows, kt.shape[-1], causal, tile))
    if len(tiles) == 1:  # all the keys in one tile: a plain softmax, no running max
        ((cols, crosses),) = tiles
        s = _scores(q_block, kt, bias, groups, rows, cols)  # S: (p, h, bq, bk)
        softmax_tile(_tiles(s), _rows(m), _rows(l), rows.start, cols.start, crosses)  # S <- softmax(S)
        np.matmul(s, v[groups + (cols,)], out=out[groups + (rows,)])  # softmax(S) V: (p, h, bq, dv)
        lse[groups + (rows,)] = log_sum_exp(m, l)
        return
    alpha = np.empty(shape, q.dtype)  # exp(m_old - m_new), rescales what came before
    acc = np.zeros(shape + v.shape[-1:], q.dtype)  # running sum of exp(S - m) V: (p, h, bq, dv)
    for cols, crosses in tiles:
        s = _scores(q_block, kt, bias, groups, rows, cols)  # S: (p, h, bq, bk)
        online_softmax_tile(_tiles(s), _rows(m), _rows(l), _rows(alpha), rows.start, cols.start, crosses)  # S <- P
        acc *= alpha[..., None]
        acc += s @ v[groups + (cols,)]  # acc' = acc alpha + P V: (p, h, bq, dv)
    out[groups + (rows,)] = acc / np.where(l > 0, l, 1)[..., None]  # softmax(S) V, 0 where nothing is seen
    lse[groups + (rows,)] = log_sum_exp(m, l)


def backward_tile(q, k, kt, v_t, grad_out, lse, delta, bias, groups, rows, cols, crosses, scale, dq, dk, dv, once):
    """The gradients one score tile contributes to dq[rows], dk[cols] and dv[cols] of the chunk.

    kt (p, h, d, Tk) and v_t (p, h, dv, Tk) are the chunk's (k * scale)^T and v^T; lse and delta the
    chunk's (p * h, Tq) rows; dq, dk, dv (p, h, T, d) the chunk's gradients. once = (dq's, dk's and
    dv's) says this tile is the only one to reach those rows, which are then written instead of added to.
    """
    q_block, grad_block = q[groups + (rows,)], grad_out[groups + (rows,)]  # (p, h, bq, d), (p, h, bq, dv)
    s = _scores(q_block, kt, bias, groups, rows, cols)  # S: (p, h, bq, bk)
    probs_from_lse(_tiles(s), lse[:, rows], rows.start, cols.start, crosses)  # S <- P = exp(S - lse)
    _add_product(dv[..., cols, :], s.swapaxes(-1, -2), grad_block, once[1])  # dV += P^T dO: (p, h, bk, dv)
    dp = grad_block @ v_t[..., cols]  # dP = dO V^T: (p, h, bq, bk)
    score_gradient(_tiles(s), _tiles(dp), delta[:, rows], scale)  # dP <- scale dS, dS = P (dP - delta)
    _add_product(dq[..., rows, :], dp, k[groups + (cols,)], once[0])  # dQ += scale dS K: (p, h, bq, d)
    _add_product(dk[..., cols, :], dp.swapaxes(-1, -2), q_block, once[1])  # dK += scale dS^T Q: (p, h, bk, d)


def _add_product(target, a, b, write):
    """target += a @ b, or target = a @ b (no temporary) when `write`."""
    if write:
        np.matmul(a, b, out=target)
    else:
        target += a @ b


def _scores(q_block, kt, bias, groups, rows, cols):
    """S = q (k * scale)^T + bias for one tile: (p, h, bq, bk)."""
    s = q_block @ kt[..., cols]
    if bias is not None:
        s += bias_tile(bias, groups, rows, cols)
    return s


def log_sum_exp(m: np.ndarray, l: np.ndarray) -> np.ndarray:  # noqa: E741
    """lse = m + log l from a row's max m and sum l of exp(x - m); -inf where l = 0 (nothing seen)."""
    live = l > 0
    return np.where(live, m + np.log(np.where(live, l, 1)), np.where(np.isnan(l), np.nan, -np.inf))


def _tiles(a: np.ndarray) -> np.ndarray:
    return a.reshape(a.shape[0] * a.shape[1], *a.shape[-2:])  # (p, h, x, y) -> (p h, x, y), a view


def _rows(a: np.ndarray) -> np.ndarray:
    return a.reshape(a.shape[0] * a.shape[1], a.shape[-1])  # (p, h, x) -> (p h, x)


def flash_attention_forward(q, k, v, scale, causal, bias):
    """q (P, Q, Tq, d), k (P, Q, Tk, d), v (P, Q, Tk, dv) grids (layout.as_group_grid); bias from grid_bias.

    Returns out (P, Q, Tq, dv) laid out like q, lse (P, Q, Tq) and kt = (k * scale)^T (P, Q, d, Tk),
    which the backward needs again (None when each group fits one tile: small.py then recomputes it).
    """
    (n_outer, n_inner, tq, _), tk = q.shape, k.shape[2]
    tile = tile_shape(tq, causal)
    out, gemm = new_like(q, v.shape[3]), gemm_for(q.dtype)
    if fits_one_tile(q, k, v, tile, gemm):  # every group one tile: the compiled steps (small.py)
        return out, log_sum_exp(*one_tile_forward(q, k, v, scale, causal, bias, out, gemm)), None
    lse = np.empty((n_outer, n_inner, tq), q.dtype)
    kt = np.empty(k.shape[:2] + k.shape[:1:-1], k.dtype)
    work = float(q.size) * tk
    chunks, items = forward_items((n_outer, n_inner, tq, tk), tile, q.itemsize, threads_for(work, 1 << 30))
    parallel_each(lambda groups: transposed(k[groups], scale, kt[groups]), chunks, k.size)
    parallel_each(lambda item: attend_query_block(q, kt[item[0]], v, bias, *item, causal, tile, out, lse),
                  items, work)
    return out, lse, kt


def flash_attention_backward(grad_out, q, k, v, out, lse, kt, scale, causal, bias, grads=None):
    """dq, dk, dv for the forward above, (P, Q, T, d) each.

    `grads` may give three zero-filled arrays (any layout) to receive them, such as views into one
    packed gradient. Work items are (chunk, key range) pairs: each owns dk and dv over its keys. When
    there are fewer chunks than threads the keys are cut into ranges, and each range adds into a dq of
    its own. A gradient that every tile writes once is written in place (in its input's layout, when
    no target is given); one that tiles add into is summed in a contiguous array first.
    """
    if kt is None:  # the forward ran small.py's compiled steps
        return _one_tile_backward(grad_out, q, k, v, out, lse, scale, causal, bias, grads)
    (n_outer, n_inner, tq, _), tk = q.shape, k.shape[2]
    tile = tile_shape(tq, causal)
    work = float(q.size) * tk * 2
    chunks, ranges, items = backward_items((n_outer, n_inner, tq, tk), tile, q.itemsize, threads_for(work, 1 << 30),
                                           causal)
    once = (tk <= tile[1] and len(ranges) <= 1, tq <= tile[0])  # (dq's rows, dk's and dv's) meet one tile each
    targets = grads or (None, None, None)
    dq, dk, dv = (_gradient(target, a, written) for target, a, written in zip(targets, (q, k, v), once + once[1:]))
    dq_parts = [dq] + [np.zeros(q.shape, q.dtype) for _ in range(len(ranges) - 1)]
    delta = (grad_out * out) @ np.ones(out.shape[-1], out.dtype)  # rowsum(dO * out): (P, Q, Tq)
    v_t = np.empty(v.shape[:2] + v.shape[:1:-1], v.dtype)  # (P, Q, dv, Tk)
    parallel_each(lambda groups: transposed(v[groups], 1.0, v_t[groups]), chunks, v.size)

    def run(item):
        groups, r = item
        chunk_lse, chunk_delta = (_rows(np.ascontiguousarray(a[groups])) for a in (lse, delta))  # (p h, Tq)
        for rows in query_blocks(tq, tile):
            for cols, crosses in key_tiles(rows, tk, causal, tile, ranges[r]):
                backward_tile(q, k, kt[groups], v_t[groups], grad_out, chunk_lse, chunk_delta, bias, groups, rows,
                              cols, crosses, scale, dq_parts[r][groups], dk[groups], dv[groups], once)

    parallel_each(run, items, work)
    for part in dq_parts[1:]:
        dq += part
    result = (dq, dk, dv)
    for target, got in zip(targets, result):
        if target is not None and target is not got:
            target[...] = got
    return tuple(got if target is None else target for target, got in zip(targets, result))


def _one_tile_backward(grad_out, q, k, v, out, lse, scale, causal, bias, grads):
    """small.py's backward, into the targets (views of one packed gradient) or new arrays laid out like the
    inputs; a target BLAS could not write (none from the packed path) gets a new array, copied in."""
    writable = grads is not None and all(blas_rows(t) for t in grads)
    dq, dk, dv = grads if writable else (new_like(a, a.shape[3]) for a in (q, k, v))
    grad_out = grad_out if blas_rows(grad_out) else np.ascontiguousarray(grad_out)  # e.g. a broadcast gradient
    one_tile_backward(grad_out, q, k, v, out, lse, scale, causal, bias, dq, dk, dv, gemm_for(q.dtype))
    for target, got in zip(grads if grads is not None and not writable else (), (dq, dk, dv)):
        target[...] = got
    return grads if grads is not None else (dq, dk, dv)


def _gradient(target, like, written_once):
    """Where a gradient is gathered: the target (or a zeroed array laid out like its input) when each
    entry is written once, else a contiguous zeroed array (adding into a strided one is slower)."""
    if not written_once:
        return np.zeros(like.shape, like.dtype)
    return target if target is not None else new_like(like, like.shape[3], np.zeros)


__all__ = ["as_group_grid", "attention_reference", "flash_attention_backward", "flash_attention_forward", "grid_bias"]


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
