"""How the flash kernels call a compiled score modifier (flex attention's score_mod and mask_mod).

A modifier is one compiled C function of a fixed signature per score dtype, called once per tile:

    modify(mode, s, raw, rows, width, n, b, h, q_start, k_start, captured, grads, scale)

s and raw point to (rows, width) tiles of scores in the kernel's dtype, of which the first n columns are
the keys k_start .. k_start + n - 1 and the rows the queries q_start .. q_start + rows - 1 of batch entry b
and query head h. `captured` points to the float64 values of the tensors the modifier reads (each one
flattened, one after another) and `grads` to as many float64 plus one.

    mode SCORES         s <- score_mod(s)
    mode MASKED_SCORES  the same, then -inf where mask_mod hides the entry (a tile partly seen)
    mode PULL_BACK      s holds the gradient of the loss for the modified scores and raw the scores before
                        the modifier: grads[c] += s * d score_mod / d captured[c] for every captured value
                        read, then s <- scale * s * d score_mod / d score

An index that falls outside a captured tensor sets grads[-1] to 1 (the caller raises) and reads 0. The
kernels are compiled once for this signature, so a new modifier compiles alone (nn/attention/
modifier_compiler.py writes and compiles it). Without a modifier the kernels get None, and numba compiles
a version of them with no modifier call at all.
Without numba (NUMBA_DISABLE_JIT=1) a modifier is a Python function of the same arguments, the pointers
being numpy's `ctypes` objects.
"""

from __future__ import annotations

import ctypes

import numpy as np
from numba import types

SCORES, MASKED_SCORES, PULL_BACK = 0, 1, 2


def signature(dtype: np.dtype):
    """The C signature of a modifier on tiles of `dtype`."""
    tile = types.CPointer(types.float32 if np.dtype(dtype) == np.float32 else types.float64)
    values = types.CPointer(types.float64)
    return types.void(types.int64, tile, tile, *(types.int64,) * 7, values, values, types.float64)


def python_view(pointer, shape: tuple[int, ...], dtype) -> np.ndarray:
    """Without numba: the array a numpy `ctypes` object points to (numba's `carray` when compiled)."""
    c_type = np.ctypeslib.as_ctypes_type(np.dtype(dtype))
    return np.ctypeslib.as_array(ctypes.cast(pointer.data, ctypes.POINTER(c_type)), shape)
