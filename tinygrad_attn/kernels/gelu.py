"""GELU, exact erf form, elementwise over a flat contiguous array.

    gelu(x) = x * Phi(x),   Phi(x) = (1 + erf(x / sqrt 2)) / 2
    gelu'(x) = Phi(x) + x * phi(x),   phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from . import SAFE_FASTMATH

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@njit(cache=True, parallel=True, fastmath=SAFE_FASTMATH)
def gelu_forward(x):
    out = np.empty_like(x)
    for i in prange(x.size):
        out[i] = x[i] * 0.5 * (1.0 + math.erf(x[i] * _INV_SQRT2))
    return out


@njit(cache=True, parallel=True, fastmath=SAFE_FASTMATH)
def gelu_backward(x, grad):
    dx = np.empty_like(x)
    for i in prange(x.size):
        cdf = 0.5 * (1.0 + math.erf(x[i] * _INV_SQRT2))
        pdf = math.exp(-0.5 * x[i] * x[i]) * _INV_SQRT_2PI
        dx[i] = grad[i] * (cdf + x[i] * pdf)
    return dx


def gelu_reference(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return (x * 0.5 * (1.0 + erf(x * _INV_SQRT2))).astype(x.dtype)
