"""The backward of an embedding lookup: a scatter-add of gradient rows into the table's rows.

    out[i] = sum of rows[n] over every n with indices[n] == i

One compiled pass over the rows, each added where its index points. numpy's
ways are slower: np.add.at handles one index at a time, and sorting the
indices to sum each run with np.add.reduceat costs a sort and a gather.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import SAFE_FASTMATH
from .vector import wide_vectors


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def _scatter_add(indices, rows, out):
    """out[indices[n]] += rows[n]; returns -1, or the first n whose index lies outside out (nothing added
    from it on)."""
    wide_vectors()
    for n in range(indices.shape[0]):
        i = indices[n]
        if i < 0 or i >= out.shape[0]:
            return n
        for c in range(rows.shape[1]):
            out[i, c] += rows[n, c]
    return -1


def scatter_add_rows(num_rows: int, indices: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """(num_rows, D) sums of the rows (N, D) by their indices (N,); an index outside [0, num_rows) is an
    IndexError, checked as the kernel reads it."""
    out = np.zeros((num_rows, rows.shape[-1]), dtype=rows.dtype)
    flat = np.ascontiguousarray(indices, dtype=np.int64).reshape(-1)
    bad = _scatter_add(flat, np.ascontiguousarray(rows), out)
    if bad >= 0:
        raise IndexError(f"scatter_add_rows: indices must lie in [0, {num_rows}), got {flat[bad]} at position {bad}")
    return out


def scatter_add_rows_reference(num_rows: int, indices: np.ndarray, rows: np.ndarray) -> np.ndarray:
    out = np.zeros((num_rows, rows.shape[-1]), dtype=rows.dtype)
    np.add.at(out, indices, rows)
    return out
