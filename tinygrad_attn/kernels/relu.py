"""ReLU, elementwise over a flat array: y = max(x, 0), a NaN kept; dx = g where x > 0, else 0.

numpy's maximum of an array and the scalar 0 runs without vector instructions (about 4x a copy), and
g * (x > 0) casts a bool array: one compiled loop for each costs about a copy. Arrays of other dtypes
take numpy's way.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import SAFE_FASTMATH, buffers
from .parallel import run_parts
from .vector import maximum, part_rows


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def _relu(x, grad, out):
    """out = max(x, 0) when grad is empty, else grad where x > 0 and 0 elsewhere (the subgradient at 0 is 0).
    With LLVM's default vector width: unlike the exp-heavy kernels, these loops only move memory, and ran
    faster with 256-bit vectors than with vector.wide_vectors's 512 (docs/performance.md)."""
    zero = x.dtype.type(0)
    if grad.size == 0:
        for i in range(x.size):
            out[i] = maximum(x[i], zero)  # NaN-carrying max: relu(NaN) is NaN
        return
    for i in range(x.size):
        out[i] = grad[i] if x[i] > zero else zero


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, parallel=True)
def _relu_parallel(x, grad, out, parts):
    for p in prange(parts):
        s, e = part_rows(x.size, p, parts)
        _relu(x[s:e], grad[s:e] if grad.size else grad, out[s:e])


def _relu_serial(x, grad, out, start, stop):  # run_parts's serial call: the whole array on this thread
    _relu(x, grad, out)


def _run(x: np.ndarray, grad: np.ndarray) -> np.ndarray:
    out = buffers.empty(x.shape, x.dtype)
    run_parts(_relu_parallel, _relu_serial, x.size, x.size, x.ravel(), grad, out.reshape(-1))  # flat views
    return out


_NO_GRAD = {char: np.empty(0, char) for char in "fd"}  # the forward's "no gradient": empty, never read


def relu_forward(x: np.ndarray) -> np.ndarray:
    if x.dtype.char not in "fd":  # float32 and float64 have kernels
        return np.maximum(x, 0)
    return _run(x, _NO_GRAD[x.dtype.char])


def relu_backward(x: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """dL/dx from the forward's input x and grad = dL/dy, of x's shape."""
    if x.dtype.char not in "fd" or grad.dtype != x.dtype:
        return grad * (x > 0)
    return _run(x, grad.ravel())


def relu_reference(x: np.ndarray, grad: np.ndarray | None = None) -> np.ndarray:
    return np.maximum(x, 0) if grad is None else np.where(x > 0, grad, 0).astype(grad.dtype)
