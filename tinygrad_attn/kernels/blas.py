"""A matrix product whose row blocks run on numba's threads, each block one call to numpy's own BLAS.

All parallel work runs on numba's threads (parallel.py), and a `prange`
launch costs a few microseconds. So the product's rows are cut into parts
inside a `prange`, and each part calls `?gemm` of the OpenBLAS that numpy
loaded, through the ctypes
function passed in (a first-class function argument: the compiled kernel is
cached on disk like the others, and the function's address is only known at
run time). Only the 64-bit-integer interface of numpy's wheels is used
(`scipy_cblas_?gemm64_`, `cblas_?gemm64_`); without it, products go through `parallel_for`.
"""

from __future__ import annotations

import ctypes

import numpy as np
from numba import njit, prange

from .vector import part_rows

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # CBLAS enum values
_NAMES = {np.dtype(np.float32): ("scipy_cblas_sgemm64_", "cblas_sgemm64_"),
          np.dtype(np.float64): ("scipy_cblas_dgemm64_", "cblas_dgemm64_")}


def find_gemm(library: ctypes.CDLL | None, dtype: np.dtype):
    """The library's `?gemm` for `dtype` as a typed ctypes function, or None."""
    names = _NAMES.get(np.dtype(dtype), ())
    for name in names:
        function = getattr(library, name, None) if library is not None else None
        if function is not None:
            real = ctypes.c_float if np.dtype(dtype) == np.float32 else ctypes.c_double
            i64 = ctypes.c_int64  # the pointers too: numba passes them as addresses, the same in the 64-bit ABI
            function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, i64, i64, i64, real, i64, i64,
                                 i64, i64, real, i64, i64]
            function.restype = None
            return function
    return None


def blas_operand(a: np.ndarray) -> tuple[int, int] | None:
    """(transpose flag, leading dimension) that describe a 2-D view to BLAS, or None if no flag can.

    A row-major view (unit stride along rows) is passed as it is; a transposed one (unit stride down
    columns) as its transpose, flagged.
    """
    rows, cols = a.shape
    item = a.itemsize
    if a.strides[1] == item and a.strides[0] % item == 0 and a.strides[0] // item >= max(1, cols):
        return NO_TRANS, a.strides[0] // item
    if a.strides[0] == item and a.strides[1] % item == 0 and a.strides[1] // item >= max(1, rows):
        return TRANS, a.strides[1] // item
    return None


@njit(cache=True, nogil=True, parallel=True)
def matmul_rows_parallel(a, b, out, trans_a, lda, trans_b, ldb, parts, gemm):
    """out (N, M) = a (N, K) @ b (K, M), rows cut into `parts` parts, one gemm call per part."""
    n, k = a.shape
    m = b.shape[1]
    one, zero = out.dtype.type(1), out.dtype.type(0)
    a_data, b_data, out_data = np.int64(a.ctypes.data), np.int64(b.ctypes.data), np.int64(out.ctypes.data)
    for p in prange(parts):
        start, stop = part_rows(n, p, parts)
        if stop > start:
            gemm(ROW_MAJOR, trans_a, trans_b, stop - start, m, k, one, a_data + start * a.strides[0], lda,
                 b_data, ldb, zero, out_data + start * out.strides[0], m)
