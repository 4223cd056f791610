"""GELU, elementwise over a flat contiguous array: the exact erf form and PyTorch's tanh approximation.

    gelu(x) = x * Phi(x),   Phi(x) = (1 + erf(x / sqrt 2)) / 2 = erfc(-x / sqrt 2) / 2
    gelu'(x) = Phi(x) + x * phi(x),   phi(x) = exp(-x^2 / 2) / sqrt(2 pi)

    tanh form: gelu(x) = x (1 + tanh(u)) / 2,  u = sqrt(2 / pi) (x + 0.044715 x^3)

float64 uses libm's erfc: Phi(x) = erfc(-x / sqrt 2) / 2 keeps the left tail's digits.
float32 uses erfc(z) = exp(-z^2) t q(t), t = 1 / (1 + 0.3 z), q a degree-8 polynomial: a least-squares
fit of erfcx(z) / t for z in [0, 9.5] (below which Phi(-|x|) is still a normal float32), relative error
below 6e-8 with its float32 coefficients. The exp is the vectorisable one of vector.py, not one libm call
per element, and exp(-z^2) = exp(-x^2 / 2) is also the Gaussian density's: the backward needs one exp
per element. Rounding z^2 to float32 moves exp(-z^2) by up to half an ulp of z^2, so far in the left
tail (x < -3) the relative error grows to a few 1e-6; the absolute error stays below 1e-7 |x|, as with
PyTorch's 0.5 x (1 + erf(x / sqrt 2)), which cancels there.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from . import SAFE_FASTMATH, buffers
from .parallel import run_rows
from .vector import exp_vectorizable, part_rows, wide_vectors

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_ERFCX_P = np.float32(0.3)
# q(t), highest degree first: erfc(z) = exp(-z^2) t q(t) with t = 1 / (1 + 0.3 z), fitted on z in [0, 9.5]
_ERFCX_COEFFICIENTS = tuple(np.float32(c) for c in (
    -0.12854731, 0.48077114, -0.50224943, 0.53606226, -0.08643175, 0.21133251, 0.14928977, 0.17057618, 0.16919662))


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", inline="always")
def normal_cdf_and_gaussian_f32(x):
    """(Phi(x), exp(-x^2 / 2)) for a float32 x, Phi through erfc of |x| / sqrt 2 (no cancellation in either tail)."""
    z = abs(x) * np.float32(_INV_SQRT2)
    t = np.float32(1) / (np.float32(1) + _ERFCX_P * z)
    c = _ERFCX_COEFFICIENTS  # written out: a loop over a tuple here keeps LLVM from vectorising the caller
    q = c[8] + t * (c[7] + t * (c[6] + t * (c[5] + t * (c[4] + t * (c[3] + t * (c[2] + t * (c[1] + t * c[0])))))))
    gaussian = exp_vectorizable(-z * z)  # exp(-x^2 / 2)
    half_erfc = np.float32(0.5) * t * q * gaussian  # erfc(z) / 2 = Phi(-|x|)
    return (np.float32(1) - half_erfc if x > 0 else half_erfc), gaussian


# error_model="numpy": no ZeroDivisionError check on a division, which would keep LLVM from vectorising.
# Each kernel has a forward loop and a backward loop: one loop testing `backward` inside runs both at
# half speed. Each loop starts at 0: numba then knows i >= 0 and adds no wraparound (which blocks vectors).
@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy")
def _erf_gelu_f32(x, out, grad):
    """The float32 erf form: out = gelu(x), or grad * gelu'(x) when grad is not empty."""
    wide_vectors()
    if grad.size == 0:
        for i in range(x.size):
            cdf, _ = normal_cdf_and_gaussian_f32(x[i])
            out[i] = x[i] * cdf
        return
    for i in range(x.size):
        v = x[i]
        cdf, gaussian = normal_cdf_and_gaussian_f32(v)
        out[i] = grad[i] * (cdf + v * gaussian * np.float32(_INV_SQRT_2PI))  # Phi(v) + v phi(v)


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy")
def _erf_gelu_exact(x, out, grad):
    """The erf form with libm's erfc, for float64."""
    wide_vectors()
    if grad.size == 0:
        for i in range(x.size):
            out[i] = x[i] * (0.5 * math.erfc(-x[i] * _INV_SQRT2))
        return
    for i in range(x.size):
        v = x[i]
        out[i] = grad[i] * (0.5 * math.erfc(-v * _INV_SQRT2) + v * math.exp(-0.5 * v * v) * _INV_SQRT_2PI)


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", inline="always")
def _tanh_u(v, f):
    """tanh(u), u = sqrt(2 / pi) (v + 0.044715 v^3), from e = exp(-2 |u|) <= 1: no overflow, and it vectorises."""
    u = f(_SQRT_2_OVER_PI) * (v + f(0.044715) * v * v * v)
    e = exp_vectorizable(f(-2) * abs(u))
    return (f(1) - e) / (f(1) + e) if u >= 0 else (e - f(1)) / (f(1) + e)


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy")
def _tanh_gelu(x, out, grad):
    """PyTorch's tanh approximation, in x's dtype."""
    wide_vectors()
    f = x.dtype.type
    half, one, cubic, k = f(0.5), f(1), f(0.044715), f(_SQRT_2_OVER_PI)
    if grad.size == 0:
        for i in range(x.size):
            out[i] = half * x[i] * (one + _tanh_u(x[i], f))
        return
    for i in range(x.size):
        v = x[i]
        th = _tanh_u(v, f)
        out[i] = grad[i] * (half * (one + th) + half * v * (one - th * th) * k * (one + f(3) * cubic * v * v))


@njit(cache=True, nogil=True, fastmath=SAFE_FASTMATH, error_model="numpy", parallel=True)
def _gelu_parallel(x, out, grad, form, parts):
    """The kernel of `form` (0 float32 erf, 1 exact erf, 2 tanh) over `parts` slices of x on numba's threads."""
    for p in prange(parts):
        s, e = part_rows(x.size, p, parts)
        g = grad[s:e] if grad.size else grad
        if form == 0:
            _erf_gelu_f32(x[s:e], out[s:e], g)
        elif form == 1:
            _erf_gelu_exact(x[s:e], out[s:e], g)
        else:
            _tanh_gelu(x[s:e], out[s:e], g)


def _run(x: np.ndarray, grad: np.ndarray, approximate: bool) -> np.ndarray:
    form = 2 if approximate else 0 if x.dtype == np.float32 else 1
    out = buffers.empty(x.shape, x.dtype)
    serial = (_erf_gelu_f32, _erf_gelu_exact, _tanh_gelu)[form]
    run_rows(_gelu_parallel, lambda *args: serial(*args[:3]), x.size * 8, x, out, grad, form)  # all of x
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
