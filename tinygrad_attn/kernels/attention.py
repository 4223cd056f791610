"""Flash-style scaled dot-product attention: the (Tq x Tk) matrix is never built.

Shapes: q (G, Tq, d), k (G, Tk, d), v (G, Tk, dv), G = batch x heads.
The queries are cut into blocks of BLOCK_Q rows and the keys into blocks of
BLOCK_K columns. For one query block, each key tile gives scores
S = (q * scale) k^T of shape (G, bq, bk), on numpy's BLAS; the numba kernel
`online_softmax_step` then folds the tile into a running row max m, running
sum l and running output acc (the online softmax):

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
gradients are zeros.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

BLOCK_Q = 256
BLOCK_K = 512


@njit(cache=True, parallel=True)
def online_softmax_step(scores, row_max, row_sum, acc, q_start, k_start, causal):
    """Fold one score tile into the running softmax, in place.

    scores (G, bq, bk) becomes the tile's unnormalised probabilities
    exp(S - new max); row_max, row_sum (G, bq) are updated and acc (G, bq, dv)
    is rescaled to the new max. With `causal`, key k_start + j is masked for
    query q_start + i when j > i + q_start - k_start.
    """
    groups, bq, bk = scores.shape
    for g in prange(groups):
        for i in range(bq):
            limit = min(bk, q_start + i - k_start + 1) if causal else bk
            m_old = row_max[g, i]
            m = m_old
            for j in range(bk):
                if j >= limit:
                    scores[g, i, j] = -np.inf
                elif scores[g, i, j] > m:
                    m = scores[g, i, j]
            if m == -np.inf:  # nothing to attend to yet
                scores[g, i, :] = 0.0
                continue
            total = 0.0
            for j in range(bk):
                p = np.exp(scores[g, i, j] - m)
                scores[g, i, j] = p
                total += p
            alpha = np.exp(m_old - m)
            row_sum[g, i] = row_sum[g, i] * alpha + total
            row_max[g, i] = m
            if alpha != 1.0:
                acc[g, i, :] *= alpha


@njit(cache=True, parallel=True)
def recompute_probabilities(scores, lse, q_start, k_start, causal):
    """scores (G, bq, bk) -> P = exp(S - lse) in place; 0 where masked or the row is dead."""
    groups, bq, bk = scores.shape
    for g in prange(groups):
        for i in range(bq):
            limit = min(bk, q_start + i - k_start + 1) if causal else bk
            row_lse = lse[g, i]
            for j in range(bk):
                if j >= limit or row_lse == -np.inf:
                    scores[g, i, j] = 0.0
                else:
                    scores[g, i, j] = np.exp(scores[g, i, j] - row_lse)


@njit(cache=True, parallel=True)
def score_gradient(probs, grad_probs, delta):
    """grad_probs (G, bq, bk) -> dS = P * (dP - delta) in place, the softmax backward of a tile."""
    groups, bq, bk = probs.shape
    for g in prange(groups):
        for i in range(bq):
            for j in range(bk):
                grad_probs[g, i, j] = probs[g, i, j] * (grad_probs[g, i, j] - delta[g, i])


def _query_blocks(tq: int):
    for r0 in range(0, tq, BLOCK_Q):
        yield slice(r0, min(r0 + BLOCK_Q, tq))


def _key_tiles(rows: slice, tk: int, causal: bool):
    """(key columns, tile crosses the diagonal) for each key tile of a query block that is not fully masked."""
    k_end = min(tk, rows.stop) if causal else tk  # keys >= rows.stop are masked for every row here
    for c0 in range(0, k_end, BLOCK_K):
        c1 = min(c0 + BLOCK_K, k_end)
        yield slice(c0, c1), causal and c1 - 1 > rows.start


def _add_bias(scores: np.ndarray, bias: np.ndarray | None, lead: tuple, rows: slice, cols: slice) -> None:
    """scores (G, bq, bk) += the additive mask's tile; bias broadcasts against (*lead, Tq, Tk)."""
    if bias is None:
        return
    tile = bias[..., rows if bias.shape[-2] > 1 else slice(None), cols if bias.shape[-1] > 1 else slice(None)]
    scores.reshape(lead + scores.shape[1:])[...] += tile


def flash_attention_forward(q, k, v, scale, causal, bias, lead):
    """Returns out (G, Tq, dv) and lse (G, Tq). `bias` is an additive mask or None."""
    groups, tq, _ = q.shape
    q_scaled = q * q.dtype.type(scale)
    out = np.zeros((groups, tq, v.shape[2]), dtype=q.dtype)
    lse = np.full((groups, tq), -np.inf, dtype=q.dtype)
    for rows in _query_blocks(tq):
        bq = rows.stop - rows.start
        row_max = np.full((groups, bq), -np.inf, dtype=q.dtype)
        row_sum = np.zeros((groups, bq), dtype=q.dtype)
        acc = np.zeros((groups, bq, v.shape[2]), dtype=q.dtype)
        for cols, crosses in _key_tiles(rows, k.shape[1], causal):
            scores = q_scaled[:, rows] @ k[:, cols].transpose(0, 2, 1)  # (G, bq, bk)
            _add_bias(scores, bias, lead, rows, cols)
            online_softmax_step(scores, row_max, row_sum, acc, rows.start, cols.start, crosses)
            acc += scores @ v[:, cols]  # (G, bq, dv)
        live = row_sum > 0
        out[:, rows] = acc / np.where(live, row_sum, 1)[..., None]
        lse[:, rows] = np.where(live, row_max + np.log(np.where(live, row_sum, 1)), -np.inf)
    return out, lse


def flash_attention_backward(grad_out, q, k, v, out, lse, scale, causal, bias, lead):
    """Returns dq, dk, dv for the forward above."""
    q_scaled = q * q.dtype.type(scale)
    delta = (grad_out * out).sum(axis=-1)  # (G, Tq)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for rows in _query_blocks(q.shape[1]):
        grad_o = grad_out[:, rows]
        row_lse, row_delta = np.ascontiguousarray(lse[:, rows]), np.ascontiguousarray(delta[:, rows])
        for cols, crosses in _key_tiles(rows, k.shape[1], causal):
            scores = q_scaled[:, rows] @ k[:, cols].transpose(0, 2, 1)  # (G, bq, bk)
            _add_bias(scores, bias, lead, rows, cols)
            recompute_probabilities(scores, row_lse, rows.start, cols.start, crosses)
            probs = scores
            dv[:, cols] += probs.transpose(0, 2, 1) @ grad_o  # (G, bk, dv)
            grad_scores = grad_o @ v[:, cols].transpose(0, 2, 1)  # dP (G, bq, bk)
            score_gradient(probs, grad_scores, row_delta)
            dq[:, rows] += grad_scores @ k[:, cols]  # (G, bq, d)
            dk[:, cols] += grad_scores.transpose(0, 2, 1) @ q_scaled[:, rows]  # (G, bk, d)
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
