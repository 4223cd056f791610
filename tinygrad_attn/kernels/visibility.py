"""Which keys each query sees, for every attention variant: one description the kernels and the plan share.

A variant is one small int64 array, `vis`:

    vis[LO], vis[HI]   the band: query i may see key j only if i + LO <= j <= i + HI
                       full (-UNBOUNDED, UNBOUNDED), causal (-UNBOUNDED, 0), causal after P cached keys
                       (-UNBOUNDED, P), a causal sliding window of w keys (1 - w, 0)
    vis[GROUP]         query heads per key/value head: query head h reads kv head h // GROUP (grouped-query)
    vis[HAS_BIAS]      1 if a dense additive bias (an explicit mask) is added to the scores
    vis[MODIFIED]      1 if a compiled score modifier runs on every score (flex attention's score_mod)
    vis[MASKED]        1 if a compiled mask runs on the entries of partly seen tiles (flex's mask_mod)
    vis[ROWS], vis[KEYS]   the kernel's tile: query rows per block, key columns per tile

and its tile grid, int8 (1 or B, 1 or H, query blocks, key tiles): each tile of the kernel is EMPTY (no
query of the block sees a key of the tile: skipped in the forward, the backward and the plan), PARTIAL
(the band's row limits, and the mask if MASKED, decide entry by entry) or FULL. The grid comes from the
band and, for a block mask, from its blocks; `tile_grid` builds it, the kernels read it broadcast (no copy)
to every group (B, H, ...) by flash.py, layout.py's plans count the work of the tiles it keeps.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .vector import maximum, minimum

LO, HI, GROUP, HAS_BIAS, MODIFIED, MASKED, ROWS, KEYS = range(8)
UNBOUNDED = 1 << 62  # a band side with no limit
EMPTY, PARTIAL, FULL = 0, 1, 2


def band(causal: bool, offset: int = 0, window: int | None = None) -> tuple[int, int]:
    """(LO, HI) of the usual masks: causal (query i at position offset + i sees keys up to it), and a sliding
    `window` of keys (causal: the window keys ending at the query; otherwise window - 1 either side)."""
    hi = offset if causal else UNBOUNDED
    if window is None:
        return -UNBOUNDED, hi
    return offset - window + 1, hi if causal else offset + window - 1


def describe(lo: int, hi: int, group: int, has_bias: bool, modified: bool, masked: bool,
             tile: tuple[int, int]) -> np.ndarray:
    """The `vis` array of a variant."""
    return np.array([lo, hi, group, has_bias, modified, masked, tile[0], tile[1]], np.int64)


@njit(cache=True, nogil=True, inline="always")
def row_columns(i, n, q_start, k_start, lo, hi):
    """(first, stop): the columns of a tile row the band lets query q_start + i see, of the tile's n keys from
    k_start (first >= stop: none)."""
    here = q_start + i - k_start  # the query's own position, as a column of this tile
    return minimum(maximum(here + lo, 0), n), minimum(maximum(here + hi + 1, 0), n)  # UNBOUNDED: no overflow


@njit(cache=True, nogil=True, inline="always")
def block_columns(r0, r1, c0, c1, lo, hi):
    """[first, stop) within the keys [c0, c1) of a tile: those the band lets some query of rows [r0, r1) see.
    The rest of the tile is hidden from every row of the block, so its products are never made (the
    diagonal tiles of causal attention, the edges of a window); an EMPTY tile's range is empty."""
    return minimum(maximum(c0, r0 + lo), c1), maximum(minimum(c1, r1 + hi), c0)  # UNBOUNDED: no overflow


def band_grid(lo: int, hi: int, tq: int, tk: int, tile: tuple[int, int]) -> np.ndarray:
    """(query blocks, key tiles) int8: what the band lets each block of queries see of each key tile, EMPTY,
    PARTIAL or FULL (numpy: nothing to compile)."""
    bq, bk = tile
    r0 = np.arange(0, tq, bq, dtype=np.int64)[:, None]
    r1 = np.minimum(r0 + bq, tq)
    c0 = np.arange(0, tk, bk, dtype=np.int64)[None, :]
    c1 = np.minimum(c0 + bk, tk)
    free_lo, free_hi = lo <= -UNBOUNDED, hi >= UNBOUNDED
    empty = np.zeros(np.broadcast_shapes(r0.shape, c0.shape), bool)
    if not free_lo:
        empty |= c1 - 1 < r0 + lo  # the tile's last key is below what the block's first query sees
    if not free_hi:
        empty |= c0 > r1 - 1 + hi  # its first key is above what the block's last query sees
    all_low = True if free_lo else c0 >= r1 - 1 + lo  # every query sees the tile's first key
    all_high = True if free_hi else c1 - 1 <= r0 + hi  # and its last
    return np.where(empty, EMPTY, np.where(all_low & all_high, FULL, PARTIAL)).astype(np.int8)


@njit(cache=True, nogil=True)
def merge_blocks(band, tq, tk, bq, bk, blocks, block_q, block_k, grid):
    """grid (Gb, Gh, query blocks, key tiles) <- the band's states (band) where a block mask's cells (blocks
    (Gb, Gh, Tq / block_q, Tk / block_k) of EMPTY/PARTIAL/FULL) the tile covers allow: EMPTY if all its
    cells are, the band's state if all are FULL, else PARTIAL."""
    for a in range(grid.shape[0]):
        for b in range(grid.shape[1]):
            for t in range(grid.shape[2]):
                r0, r1 = t * bq, minimum(t * bq + bq, tq)
                for u in range(grid.shape[3]):
                    c0, c1 = u * bk, minimum(u * bk + bk, tk)
                    state = band[t, u]
                    if state != EMPTY:
                        seen, full = False, True
                        for x in range(r0 // block_q, (r1 - 1) // block_q + 1):
                            for y in range(c0 // block_k, (c1 - 1) // block_k + 1):
                                cell = blocks[a, b, x, y]
                                seen = seen or cell != EMPTY
                                full = full and cell == FULL
                        state = EMPTY if not seen else (state if full else PARTIAL)
                    grid[a, b, t, u] = state


def tile_grid(lo: int, hi: int, tq: int, tk: int, tile: tuple[int, int], blocks: np.ndarray | None = None,
              block_size: tuple[int, int] = (0, 0)) -> np.ndarray:
    """The tile grid (1 or B, 1 or H, query blocks, key tiles) of a band, and of a block mask's blocks."""
    band = band_grid(lo, hi, tq, tk, tile)
    if blocks is None:
        return band[None, None]
    grid = np.empty(blocks.shape[:2] + band.shape, np.int8)
    merge_blocks(band, tq, tk, *tile, np.ascontiguousarray(blocks, np.int8), *block_size, grid)
    return grid
