"""How flash attention's arrays lie in memory, and its work plan; the maths is in flash.py.

Groups: attention is G independent problems (batch x heads), kept as a grid
(P, Q, T, d) of views whatever the strides: heads split from (B, T, H, d) by a
transpose are read where they lie, and an output laid out like its input
merges its heads back with a free reshape.

Work plan: a pure function of the shapes, visibility.py's tile grid and the thread count. The items are
(group, query block) in the forward and (group, key range) in the backward;
each item's work is the score entries it computes (the tiles the grid keeps: under the causal mask
those up to the diagonal, under a sliding window those of the band). `share_out` gives each thread a list of items of
about equal work, so each thread's part is one loop index of a `prange`. Plans
are kept per shape (a training step asks for the same ones again), so their
arrays are never written.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from . import buffers
from .blas import ONE_THREAD_PRODUCT

MAX_KEYS = 128  # key columns per tile
MAX_ROWS = 256  # query rows per block


def as_group_grid(a: np.ndarray) -> np.ndarray:
    """(..., T, d) -> (P, Q, T, d), a view whenever the leading dims allow it (a copy otherwise)."""
    lead = a.shape[:-2]
    if len(lead) <= 2:
        return a.reshape((1,) * (2 - len(lead)) + a.shape)
    return a.reshape((math.prod(lead[:-1]), lead[-1]) + a.shape[-2:])  # not -1: any size may be 0


def grid_bias(bias: np.ndarray | None, lead: tuple[int, ...]) -> np.ndarray | None:
    """An additive mask broadcastable to (*lead, Tq, Tk) as (1 or P, 1 or Q, Tq or 1, Tk or 1).

    Dims of size 1 stay 1 (a padding mask (B, 1, 1, Tk) is not copied per head or query).
    """
    if bias is None:
        return None
    bias = bias.reshape((1,) * (len(lead) + 2 - bias.ndim) + bias.shape)
    if len(lead) <= 2:
        return bias.reshape((1,) * (2 - len(lead)) + bias.shape)
    if all(n == 1 for n in bias.shape[:-2]):
        return bias.reshape((1, 1) + bias.shape[-2:])
    return as_group_grid(np.broadcast_to(bias, lead + bias.shape[-2:]))


def new_like(a: np.ndarray, last: int, fill=buffers.empty) -> np.ndarray:
    """A new (P, Q, T, last) array laid out like `a`: heads interleaved within rows when a's are."""
    p, n, t, _ = a.shape
    if n > 1 and t > 1 and a.strides[1] < a.strides[2]:
        return fill((p, t, n, last), a.dtype).transpose(0, 2, 1, 3)
    return fill((p, n, t, last), a.dtype)


def rows_apart(a: np.ndarray, reused: bool = True) -> bool:
    """Whether a (P, Q, T, d) is better copied to contiguous rows: when its rows are not unit-stride (what
    BLAS reads in place, such as a gradient broadcast from a sum), or when they lie apart (q, k, v as views
    of one packed (B, T, 3, H, d) projection) and are `reused` by several tiles: BLAS copies each operand into
    its own layout at every call, and rows far apart several times slower."""
    item = a.itemsize
    unit = (a.shape[3] <= 1 or a.strides[3] == item) and (  # and rows that do not overlap (head dim 1, broadcast)
        a.shape[2] <= 1 or (a.strides[2] >= a.shape[3] * item and a.strides[2] % item == 0))
    together = a.shape[2] <= 1 or a.strides[2] == a.shape[3] * item
    return not unit or (reused and not together)


def dense_rows(a: np.ndarray, reused: bool = True) -> np.ndarray:
    """a itself, or a contiguous copy (in reused memory) when its rows are apart (`rows_apart`)."""
    return buffers.contiguous(a) if rows_apart(a, reused) else a


def tile_shape(tq: int, tk: int, d: int) -> tuple[int, int]:
    """(query rows, key columns) of a score tile, for heads of width d (the larger of q's and v's).

    Every product of a tile multiplies bq x bk x d numbers, kept at most blas.ONE_THREAD_PRODUCT: OpenBLAS
    then runs it on the calling thread whatever its own thread count, so that n threads calling it at
    once put n threads on the cores.
    """
    area = max(ONE_THREAD_PRODUCT // max(d, 1), 64)
    bk = max(1, min(tk, MAX_KEYS, area))
    return max(1, min(tq, area // bk, MAX_ROWS)), bk


def _tile_work(grid: np.ndarray, lead: tuple[int, int], tile: tuple[int, int], tq: int, tk: int) -> np.ndarray:
    """Score entries of each (group, query block, key tile) that the kernels compute: the tile's area where
    visibility.py's grid keeps it, 0 where it is skipped. (P * Q, query blocks, key tiles)."""
    heights = np.minimum(np.arange(grid.shape[2]) * tile[0] + tile[0], tq) - np.arange(grid.shape[2]) * tile[0]
    widths = np.minimum(np.arange(grid.shape[3]) * tile[1] + tile[1], tk) - np.arange(grid.shape[3]) * tile[1]
    area = heights[:, None] * widths[None, :] * (grid != 0)  # (Gb, Gh, query blocks, key tiles)
    return np.broadcast_to(area, tuple(lead) + area.shape[2:]).reshape((lead[0] * lead[1],) + area.shape[2:])


def _key(grid: np.ndarray) -> tuple:
    return grid.shape, grid.tobytes()


@functools.lru_cache(maxsize=256)
def _forward_plan(lead, grid_key, tile, tq, tk, threads):
    shape, data = grid_key
    work = _tile_work(np.frombuffer(data, np.int8).reshape(shape), lead, tile, tq, tk).sum(axis=2)  # (G, blocks)
    bounds, items = share_out(work.reshape(-1), threads)
    for p in range(len(bounds) - 1):  # each part's items group after group: a group's keys laid out once, in cache
        items[bounds[p]:bounds[p + 1]].sort()
    return bounds, items


def forward_plan(lead: tuple[int, int], grid: np.ndarray, tile: tuple[int, int], tq: int, tk: int, threads: int):
    """The forward's items, group * n_blocks + query block, shared out among `threads` threads; lead is the
    groups' grid (P, Q), grid visibility.py's tile grid."""
    return _forward_plan(tuple(lead), _key(grid), tile, tq, tk, threads)


def key_ranges(per_tile: np.ndarray, tk: int, bk: int, n: int) -> np.ndarray:
    """Edges (n_ranges + 1,) of the keys cut into at most n ranges of whole key tiles and about equal work,
    given the work of each key tile (under the causal mask the early ranges are narrower)."""
    cols = np.arange(0, tk, bk)
    if len(cols) == 0:
        return np.array([0, tk], np.int64)
    total = np.cumsum(per_tile)
    parts = max(1, min(n, len(cols)))
    cuts = np.searchsorted(total, total[-1] * np.arange(1, parts) / parts, side="left") + 1
    return np.unique(np.concatenate([[0], np.append(cols, tk)[cuts], [tk]])).astype(np.int64)


@functools.lru_cache(maxsize=256)
def _backward_plan(lead, grid_key, tile, tq, tk, threads):
    shape, data = grid_key
    work = _tile_work(np.frombuffer(data, np.int8).reshape(shape), lead, tile, tq, tk).sum(axis=1)  # (G, key tiles)
    groups = work.shape[0]
    edges = key_ranges(work.sum(axis=0), tk, tile[1], -(-2 * threads // max(groups, 1)) if threads > 1 else 1)
    starts = np.searchsorted(np.arange(0, tk, tile[1]), edges[:-1])
    per_range = np.add.reduceat(work, starts, axis=1) if work.shape[1] else np.zeros((groups, 1))
    return edges, share_out(per_range.reshape(-1), threads)


def backward_plan(lead: tuple[int, int], grid: np.ndarray, tile: tuple[int, int], tq: int, tk: int, threads: int):
    """The backward's key ranges (edges) and its items, group * n_ranges + range, shared out among
    `threads` threads. The keys are cut into ranges only when there are too few groups to keep every
    thread busy twice over; each range then adds into a dQ of its own (summed at the end)."""
    return _backward_plan(tuple(lead), _key(grid), tile, tq, tk, threads)


CONTIGUOUS_SLACK = 0.05  # runs of consecutive items are kept when no thread gets more than this over its share


def share_out(work: np.ndarray, threads: int) -> tuple[np.ndarray, np.ndarray]:
    """Items 0..n-1 of the given work cut into `threads` lists of about equal work: (bounds, items), thread p
    running items[bounds[p]:bounds[p + 1]].

    Runs of consecutive items when they share the work out within CONTIGUOUS_SLACK: a thread then writes
    whole heads of the output, never rows a cache line shares with another thread's head (q, k, v and their
    gradients are views of one packed projection, heads side by side in each row). Otherwise (a few items of
    very unequal work) largest first, dealt out to the threads back and forth (1, 2, .., n, n, .., 2, 1, 1,
    2, ..): each round's largest item goes to the thread the round before gave the smallest."""
    n_items = len(work)
    threads = max(1, min(threads, n_items))
    work = np.asarray(work, np.float64)
    total = np.concatenate([[0.0], np.cumsum(work)])  # total[i]: the work of items 0..i-1
    shares = total[-1] * np.arange(1, threads) / threads  # where each thread's run should end
    cuts = np.searchsorted(total, shares)  # the first run end at or past each share, or the one before if nearer
    cuts -= (cuts > 0) & (total[cuts] - shares > shares - total[np.maximum(cuts - 1, 0)])
    bounds = np.concatenate([[0], cuts, [n_items]]).astype(np.int64)
    if np.all(np.diff(bounds) > 0) and np.diff(total[bounds]).max() <= total[-1] / threads * (1 + CONTIGUOUS_SLACK):
        return bounds, np.arange(n_items, dtype=np.int64)
    order = np.argsort(-work, kind="stable")
    turn = np.arange(n_items)
    lane = np.where((turn // threads) % 2 == 0, turn % threads, threads - 1 - turn % threads)
    by_lane = np.argsort(lane, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(np.bincount(lane, minlength=threads))]).astype(np.int64)
    return bounds, order[by_lane].astype(np.int64)
