"""How flash attention's arrays lie in memory and how its work is cut up; the maths is in flash.py.

Groups: attention is G independent problems (batch x heads). They are kept as
a grid (P, Q, T, d) of views, whatever the strides: heads split from
(B, T, H, d) by a transpose are read where they lie, and an output laid out
like its input merges its heads back with a free reshape.

Chunks and tiles: a chunk is a rectangle of the grid, small enough that one
score tile of all its groups stays in cache (TILE_BYTES). A query block is
`tile[0]` query rows, a key tile `tile[1]` key columns. Under the causal mask
key tiles entirely above the diagonal are skipped.
"""

from __future__ import annotations

import math

import numpy as np

BLOCK_Q = 128  # query rows per tile
BLOCK_K = 256  # key columns per tile
SHORT_QUERIES = 512  # below this many queries, key tiles are BLOCK_K wide, and causal query blocks half as tall
LONG_QUERIES = 2048  # from this many queries on, tiles are twice as large each way (fewer Python-level steps)
TILE_BYTES = 1 << 20  # a chunk's score tile is kept around this size, so it stays in cache
STRIDED_TRANSPOSE_BYTES = 1 << 18  # a group spread wider than this is copied before it is transposed


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


def bias_tile(bias: np.ndarray | None, groups: tuple[slice, slice], rows: slice, cols: slice):
    """The part of a grid bias that one tile adds, size-1 dims kept."""
    if bias is None:
        return None
    index = (*groups, rows, cols)
    return bias[tuple(i if n > 1 else slice(None) for i, n in zip(index, bias.shape))]


def new_like(a: np.ndarray, last: int, fill=np.empty) -> np.ndarray:
    """A new (P, Q, T, last) array laid out like `a`: heads interleaved within rows when a's are."""
    p, n, t, _ = a.shape
    if n > 1 and t > 1 and a.strides[1] < a.strides[2]:
        return fill((p, t, n, last), a.dtype).transpose(0, 2, 1, 3)
    return fill((p, n, t, last), a.dtype)


def transposed(a: np.ndarray, factor: float, out: np.ndarray) -> np.ndarray:
    """out (p, h, d, T) = factor * a^T for a (p, h, T, d), each matrix contiguous.

    numpy's batched matmul runs BLAS only when the right operand's matrices are contiguous, so k^T
    and v^T are laid out once per chunk. A group spread over more than STRIDED_TRANSPOSE_BYTES
    (heads interleaved in wide rows) is copied first, since gathering its columns misses the cache.
    """
    if a.shape[2] * a.strides[2] > STRIDED_TRANSPOSE_BYTES:
        a = np.ascontiguousarray(a)
    return np.multiply(a.swapaxes(-1, -2), a.dtype.type(factor), out=out)


def tile_shape(tq: int, causal: bool) -> tuple[int, int]:
    """(query rows, key columns) of a score tile: larger for longer sequences, so that each numpy call
    covers more work and each BLAS product is larger.

    Under the causal mask a query block computes scores up to its last row's diagonal, so a short
    sequence, whose blocks are few, wastes a large share above the diagonal unless they are short.
    """
    if tq >= LONG_QUERIES:
        return 2 * BLOCK_Q, 2 * BLOCK_K
    if tq >= SHORT_QUERIES:
        return BLOCK_Q, 2 * BLOCK_K
    return (max(1, BLOCK_Q // 2) if causal else BLOCK_Q), BLOCK_K


def group_chunks(grid_shape: tuple[int, ...], tile: tuple[int, int], itemsize: int,
                 min_chunks: int = 1) -> list[tuple[slice, slice]]:
    """The grid (P, Q, ...) cut into rectangles (P slice, Q slice) whose score tile stays near TILE_BYTES,
    and into at least min_chunks of them where there are that many groups (so that n threads have work)."""
    n_outer, n_inner, tq, tk = grid_shape
    tile_bytes = max(min(tile[0], tq) * min(tile[1], tk) * itemsize, 1)
    size = max(1, min(TILE_BYTES // tile_bytes, -(-n_outer * n_inner // max(min_chunks, 1))))
    chunks, g, end = [], 0, n_outer * n_inner
    while g < end:
        p, h = divmod(g, n_inner)
        whole_rows = min(size, end - g) // n_inner
        if h == 0 and whole_rows:
            chunks.append((slice(p, p + whole_rows), slice(0, n_inner)))
            g += whole_rows * n_inner
        else:
            stop = min(n_inner, h + size)
            chunks.append((slice(p, p + 1), slice(h, stop)))
            g += stop - h
    return chunks


def query_blocks(tq: int, tile: tuple[int, int]) -> list[slice]:
    return [slice(r0, min(r0 + tile[0], tq)) for r0 in range(0, tq, tile[0])]


def key_tiles(rows: slice, tk: int, causal: bool, tile: tuple[int, int], keys: slice | None = None):
    """(key columns, tile crosses the diagonal) for each key tile a query block sees, within `keys`."""
    start, stop = (0, tk) if keys is None else (keys.start, keys.stop)
    if causal:
        stop = min(stop, rows.stop)  # keys >= rows.stop are hidden from every row of the block
    for c0 in range(start, stop, tile[1]):
        c1 = min(c0 + tile[1], stop)
        yield slice(c0, c1), causal and c1 - 1 > rows.start


def key_ranges(tq: int, tk: int, causal: bool, tile: tuple[int, int], n: int) -> list[slice]:
    """The keys cut into at most n ranges of whole key tiles, carrying about equal work.

    A key tile's work is the number of query rows whose blocks reach it: every row without the mask, under
    the causal mask only the blocks from the diagonal down, so the early ranges are cut narrower.
    """
    if tk == 0:
        return []
    starts = range(0, tk, tile[1])
    blocks = query_blocks(tq, tile)
    work = [sum(r.stop - r.start for r in blocks if not causal or r.stop > c0) for c0 in starts]
    parts, total, done, cuts = min(n, len(work)), sum(work), 0, [0]
    for i, w in enumerate(work[:-1]):  # a range ends once the ranges so far hold their share of the work
        done += w
        if len(cuts) < parts and done * parts >= total * len(cuts):
            cuts.append(i + 1)
    edges = [starts[c] for c in cuts] + [tk]
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]


def forward_items(grid_shape: tuple[int, ...], tile: tuple[int, int], itemsize: int, threads: int):
    """The forward's chunks and its work items (chunk, query block) for `threads` threads, largest first.

    Chunks are cut finer where that gives each thread two items or more. Under the causal mask late query
    blocks see the most keys, so they come first: the threads claim items in order, and the last to be
    claimed are then small ones.
    """
    blocks = query_blocks(grid_shape[2], tile)
    min_chunks = -(-2 * threads // max(len(blocks), 1)) if threads > 1 else 1
    chunks = group_chunks(grid_shape, tile, itemsize, min_chunks)
    return chunks, [(groups, rows) for rows in reversed(blocks) for groups in chunks]


def backward_items(grid_shape: tuple[int, ...], tile: tuple[int, int], itemsize: int, threads: int, causal: bool):
    """The backward's chunks, key ranges and work items (chunk, key range index) for `threads` threads.

    At least `threads` chunks where there are groups enough; where there are not, the keys are cut into
    ranges of equal work as well. Early keys are seen by the most queries, so their items come first.
    """
    chunks = group_chunks(grid_shape, tile, itemsize, threads)
    ranges = key_ranges(grid_shape[2], grid_shape[3], causal, tile, -(-threads // max(len(chunks), 1)))
    return chunks, ranges, [(groups, r) for r in range(len(ranges)) for groups in chunks]
