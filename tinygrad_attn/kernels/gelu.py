"""GELU, elementwise over a flat contiguous array: the exact erf form and PyTorch's tanh approximation.

    gelu(x) = x * Phi(x),   Phi(x) = (1 + erf(x / sqrt 2)) / 2 = erfc(-x / sqrt 2) / 2
    gelu'(x) = Phi(x) + x * phi(x),   phi(x) = exp(-x^2 / 2) / sqrt(2 pi)

    tanh form: gelu(x) = x (1 + tanh(u)) / 2,  u = sqrt(2 / pi) (x + 0.044715 x^3)

float64 uses libm's erfc (Phi(x) = erfc(-x / sqrt 2) / 2 keeps the left tail's digits). float32 uses erfc(z) = t exp(-z^2 + P(t)),
t = 1 / (1 + z / 2), P a degree-9 polynomial (Numerical Recipes' erfcc: relative error below
1.2e-7 for z >= 0, about one float32 ulp), with the vectorisable exp of tiles.py, so that LLVM
turns the loop into vector instructions instead of one libm call per element.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from . import SAFE_FASTMATH
from .parallel import parallel_for
from .tiles import exp_vectorizable

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def normal_cdf_f32(x):
    """Phi(x) for a float32 x, through erfc of |x| / sqrt 2 (no cancellation in either tail)."""
    z = abs(x) * np.float32(_INV_SQRT2)
    t = np.float32(1) / (np.float32(1) + np.float32(0.5) * z)
    p = np.float32(0.17087277)
    for c in (-0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418, 0.37409196, 1.00002368,
              -1.26551223):
        p = p * t + np.float32(c)
    a = abs(x)
    ah = np.float32(np.floor(a * np.float32(256))) / np.float32(256)  # |x| to 8 fractional bits: ah^2 / 2 is exact
    # exp(-z^2 + p) with z^2 = x^2 / 2, as exp(-ah^2 / 2) exp(p - (a - ah)(a + ah) / 2): rounding z or z^2 to
    # float32 would shift the exponent by an ulp of z^2 (4e-6 near 50), and the tail's value by as much
    e = exp_vectorizable(-ah * ah * np.float32(0.5)) * exp_vectorizable(p - (a - ah) * (a + ah) * np.float32(0.5))
    half_erfc = np.float32(0.5) * t * e  # erfc(z) / 2 = Phi(-|x|)
    return np.float32(1) - half_erfc if x > 0 else half_erfc


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH)
def _gelu_rows(x, out, grad, start, stop, approximate, exact_erf):
    """out = gelu(x) when grad is empty, else out = grad * gelu'(x), for elements [start, stop)."""
    backward = grad.size > 0
    f = x.dtype.type  # constants in x's dtype, so float32 stays float32 (and twice as wide in a vector)
    half, one, cubic = f(0.5), f(1), f(0.044715)
    for i in range(start, stop):
        v = x[i]
        if approximate:
            th = np.tanh(f(_SQRT_2_OVER_PI) * (v + cubic * v * v * v))
            if backward:
                du = f(_SQRT_2_OVER_PI) * (one + f(3) * cubic * v * v)
                out[i] = grad[i] * (half * (one + th) + half * v * (one - th * th) * du)
            else:
                out[i] = half * v * (one + th)
            continue
        cdf = half * math.erfc(-v * f(_INV_SQRT2)) if exact_erf else normal_cdf_f32(v)
        if backward:
            out[i] = grad[i] * (cdf + v * exp_vectorizable(-half * v * v) * f(_INV_SQRT_2PI))
        else:
            out[i] = v * cdf


def _run(x: np.ndarray, grad: np.ndarray, approximate: bool) -> np.ndarray:
    out = np.empty_like(x)
    exact_erf = x.dtype != np.float32
    parallel_for(lambda s: _gelu_rows(x, out, grad, s.start, s.stop, approximate, exact_erf), x.size, x.size * 8)
    return out


def gelu_forward(x: np.ndarray, approximate: bool = False) -> np.ndarray:
    return _run(x, x[:0], approximate)


def gelu_backward(x: np.ndarray, grad: np.ndarray, approximate: bool = False) -> np.ndarray:
    return _run(x, grad, approximate)


def gelu_reference(x: np.ndarray, approximate: bool = False) -> np.ndarray:
    x64 = x.astype(np.float64)
    if approximate:
        return (0.5 * x64 * (1 + np.tanh(_SQRT_2_OVER_PI * (x64 + 0.044715 * x64**3)))).astype(x.dtype)
    erfc = np.vectorize(math.erfc, otypes=[np.float64])
    return (x64 * 0.5 * erfc(-x64 * _INV_SQRT2)).astype(x.dtype)
