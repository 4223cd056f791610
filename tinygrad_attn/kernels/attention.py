"""Flash-style scaled dot-product attention: the (Tq x Tk) matrix is never built.

Shapes: q (G, Tq, d), k (G, Tk, d), v (G, Tk, dv), G = batch x heads.
The queries are cut into blocks of BLOCK_Q rows and the keys into blocks of
BLOCK_K columns. For one query block, each key tile gives scores
S = (q * scale) k^T of shape (G, bq, bk), on numpy's BLAS; the numba kernel
`shift_by_running_max` masks the tile and subtracts the new
running max, numpy's SIMD exp turns it into probabilities, and the tile is
folded into a running row max m, running sum l and running output acc (the
online softmax):

    m' = max(m, max_j S_j),   P_j = exp(S_j - m'),   alpha = exp(m - m')
    l' = l * alpha + sum_j P_j,   acc' = acc * alpha + P V_tile

and at the end out = acc / l, lse = m + log l (saved for the backward).
With causal masking, key tiles entirely above the diagonal are skipped and
only tiles crossing it are masked element by element.

Backward (FlashAttention-2 style), recomputing P from the saved lse:
    P = exp(S - lse),  dV += P^T dO,  dP = dO V^T,
    dS = P * (dP - delta),  delta_i = sum_c dO_ic out_ic,
    dQ += dS K * scale,  dK += dS^T (Q * scale)

A row with nothing to attend to has l = 0: its output, lse (-inf) and
gradients are zeros. The (batch x head) groups are independent: they are
split among threads by `threads.run_over_groups`, and each thread walks its
groups in chunks whose tile stays in cache (TILE_BYTES).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import SAFE_FASTMATH
from .threads import run_over_groups

BLOCK_Q = 128
BLOCK_K = 256



@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def shift_by_running_max(scores, row_max, alpha, q_start, k_start, causal):
    """One tile's share of the online softmax, before the exponential; in place.

    scores (G, bq, bk): masks keys above the diagonal (key k_start + j is
    hidden from query q_start + i when j > i + q_start - k_start) and
    subtracts each row's new running max m' = max(m, max_j S_j).
    row_max (G, bq) becomes m'; alpha (G, bq) receives exp(m - m'), the factor
    that rescales what was accumulated under the old max.
    """
    groups, bq, bk = scores.shape
    for g in range(groups):
        for i in range(bq):
            limit = max(min(bk, q_start + i - k_start + 1), 0) if causal else bk
            m_old = row_max[g, i]
            m = m_old
            for j in range(limit):
                m = max(m, scores[g, i, j])
            shift = m if m > -np.inf else 0.0  # a row with nothing to attend to stays all -inf
            for j in range(limit):
                scores[g, i, j] -= shift
            for j in range(limit, bk):
                scores[g, i, j] = -np.inf
            alpha[g, i] = np.exp(m_old - m) if m_old > -np.inf else 0.0
            row_max[g, i] = m


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def shift_by_lse(scores, lse, q_start, k_start, causal):
    """scores (G, bq, bk) -> S - lse in place (exp of it is P); -inf where masked or the row is dead."""
    groups, bq, bk = scores.shape
    for g in range(groups):
        for i in range(bq):
            limit = max(min(bk, q_start + i - k_start + 1), 0) if causal else bk
            if lse[g, i] == -np.inf:
                limit = 0
            for j in range(limit):
                scores[g, i, j] -= lse[g, i]
            for j in range(limit, bk):
                scores[g, i, j] = -np.inf


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def score_gradient(probs, grad_probs, delta):
    """grad_probs (G, bq, bk) -> dS = P * (dP - delta) in place, the softmax backward of a tile."""
    groups, bq, bk = probs.shape
    for g in range(groups):
        for i in range(bq):
            for j in range(bk):
                grad_probs[g, i, j] = probs[g, i, j] * (grad_probs[g, i, j] - delta[g, i])


TILE_BYTES = 1 << 20  # a chunk of groups' score tile is kept around this size, so it stays in cache


def _group_chunks(groups: slice, tile_bytes_per_group: int):
    size = max(1, TILE_BYTES // max(tile_bytes_per_group, 1))
    for g0 in range(groups.start, groups.stop, size):
        yield slice(g0, min(g0 + size, groups.stop))


def _query_blocks(tq: int):
    for r0 in range(0, tq, BLOCK_Q):
        yield slice(r0, min(r0 + BLOCK_Q, tq))


def _key_tiles(rows: slice, tk: int, causal: bool):
    """(key columns, tile crosses the diagonal) for each key tile of a query block that is not fully masked."""
    k_end = min(tk, rows.stop) if causal else tk  # keys >= rows.stop are masked for every row here
    for c0 in range(0, k_end, BLOCK_K):
        c1 = min(c0 + BLOCK_K, k_end)
        yield slice(c0, c1), causal and c1 - 1 > rows.start


def group_bias(bias: np.ndarray | None, lead: tuple[int, ...]) -> np.ndarray | None:
    """An additive mask broadcastable to (*lead, Tq, Tk) as (1 or G, Tq or 1, Tk or 1).

    Only the mask's own leading dims are broadcast out (a padding mask
    (B, 1, 1, Tk) becomes (B*H, 1, Tk)); its last two dims are never expanded.
    """
    if bias is None:
        return None
    bias = bias.reshape((1,) * (len(lead) + 2 - bias.ndim) + bias.shape)
    if all(n == 1 for n in bias.shape[:-2]):
        return bias.reshape((1,) + bias.shape[-2:])
    return np.broadcast_to(bias, lead + bias.shape[-2:]).reshape((-1,) + bias.shape[-2:])


def _bias_tile(bias: np.ndarray | None, groups: slice, rows: slice, cols: slice):
    if bias is None:
        return None
    return bias[
        groups if bias.shape[0] > 1 else slice(None),
        rows if bias.shape[1] > 1 else slice(None),
        cols if bias.shape[2] > 1 else slice(None),
    ]


def _transposed(a: np.ndarray) -> np.ndarray:
    """(G, T, d) -> contiguous (G, d, T). numpy's batched matmul leaves BLAS when its right operand is a
    transposed view (measured 3-4x slower for small tiles), so k^T and v^T are laid out once per call."""
    return np.ascontiguousarray(a.transpose(0, 2, 1))


def _scores(q_scaled, k_t, bias, groups, rows, cols):
    """S = (q * scale) k^T (+ mask) for one tile: (g, bq, bk), on BLAS. k_t is k transposed, (G, d, Tk)."""
    scores = q_scaled[groups, rows] @ k_t[groups, :, cols]
    tile = _bias_tile(bias, groups, rows, cols)
    if tile is not None:
        scores += tile
    return scores


def _tile_bytes(q: np.ndarray, k: np.ndarray) -> int:
    return min(BLOCK_Q, q.shape[1]) * min(BLOCK_K, k.shape[1]) * q.itemsize


def flash_attention_forward(q, k, v, scale, causal, bias):
    """Returns out (G, Tq, dv) and lse (G, Tq). `bias` is an additive mask from `group_bias`, or None."""
    n_groups, tq, _ = q.shape
    q_scaled = q * q.dtype.type(scale)
    k_t = _transposed(k)  # (G, d, Tk)
    ones = np.ones(k.shape[1], dtype=q.dtype)  # P @ ones sums rows 3-4x faster than P.sum(-1)
    out = np.empty((n_groups, tq, v.shape[2]), dtype=q.dtype)
    lse = np.empty((n_groups, tq), dtype=q.dtype)

    def forward_share(share: slice) -> None:  # one thread's groups, chunk by chunk, tile by tile
        for groups in _group_chunks(share, _tile_bytes(q, k)):
            g = groups.stop - groups.start
            for rows in _query_blocks(tq):
                bq = rows.stop - rows.start
                row_max = np.full((g, bq), -np.inf, dtype=q.dtype)
                row_sum = np.zeros((g, bq), dtype=q.dtype)
                acc = np.zeros((g, bq, v.shape[2]), dtype=q.dtype)
                alpha = np.empty((g, bq), dtype=q.dtype)
                for cols, crosses in _key_tiles(rows, k.shape[1], causal):
                    scores = _scores(q_scaled, k_t, bias, groups, rows, cols)  # (g, bq, bk)
                    shift_by_running_max(scores, row_max, alpha, rows.start, cols.start, crosses)
                    probs = np.exp(scores, out=scores)  # P = exp(S - m'), numpy's SIMD exp
                    row_sum *= alpha
                    row_sum += probs @ ones[: probs.shape[-1]]
                    acc *= alpha[..., None]
                    acc += probs @ v[groups, cols]  # (g, bq, dv)
                live = row_sum > 0
                out[groups, rows] = acc / np.where(live, row_sum, 1)[..., None]
                lse[groups, rows] = np.where(live, row_max + np.log(np.where(live, row_sum, 1)), -np.inf)

    run_over_groups(forward_share, n_groups, n_groups * tq * k.shape[1])
    return out, lse


def flash_attention_backward(grad_out, q, k, v, out, lse, scale, causal, bias):
    """Returns dq, dk, dv for the forward above."""
    q_scaled = q * q.dtype.type(scale)
    k_t, v_t = _transposed(k), _transposed(v)  # (G, d, Tk), (G, dv, Tk)
    delta = (grad_out * out) @ np.ones(out.shape[-1], dtype=out.dtype)  # rowsum(dO * O): (G, Tq)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)

    def backward_share(share: slice) -> None:
        for groups in _group_chunks(share, _tile_bytes(q, k)):
            for rows in _query_blocks(q.shape[1]):
                grad_o = grad_out[groups, rows]  # (g, bq, dv)
                row_lse = np.ascontiguousarray(lse[groups, rows])
                row_delta = np.ascontiguousarray(delta[groups, rows])
                for cols, crosses in _key_tiles(rows, k.shape[1], causal):
                    scores = _scores(q_scaled, k_t, bias, groups, rows, cols)  # (g, bq, bk)
                    shift_by_lse(scores, row_lse, rows.start, cols.start, crosses)
                    probs = np.exp(scores, out=scores)  # P = exp(S - lse), recomputed instead of stored
                    dv[groups, cols] += probs.transpose(0, 2, 1) @ grad_o  # dV += P^T dO: (g, bk, dv)
                    grad_scores = grad_o @ v_t[groups, :, cols]  # dP = dO V^T: (g, bq, bk)
                    score_gradient(probs, grad_scores, row_delta)  # dS = P (dP - delta)
                    dq[groups, rows] += grad_scores @ k[groups, cols]  # (g, bq, d)
                    dk[groups, cols] += grad_scores.transpose(0, 2, 1) @ q_scaled[groups, rows]  # (g, bk, d)

    run_over_groups(backward_share, q.shape[0], q.shape[0] * q.shape[1] * k.shape[1])
    dq *= q.dtype.type(scale)
    return dq, dk, dv


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
