"""The scalar and vector helpers every kernel is written with: a NaN-carrying max and min, an exp LLVM
vectorises, the widest vectors, a function kept out of line, and the rows of part p.

Compiled, `maximum` and `exp_vectorizable` become LLVM's NaN-propagating `maximum` and an exp made of a
polynomial and an exponent shift, both of which LLVM turns into vector instructions; numba's `max` and
`math.exp` do not vectorise. Without numba (NUMBA_DISABLE_JIT=1) their plain Python definitions run. Each
hot kernel that computes (the row kernels and the tile kernels) starts with `wide_vectors()`; ReLU's,
which only moves memory, keeps LLVM's default width.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, lower_builtin, overload, type_callable


def maximum(a, b):
    """The larger of two numbers of one type, NaN when either is NaN (IEEE 754-2019 maximum).

    Compiled, it is LLVM's `maximum` for floats, which the loop vectoriser turns into a
    vector reduction (numba's `max` compiles to a chain of compare-and-selects), and
    its `smax` for integers. A NaN score reaches the row max, and from it the output.
    """
    return a if a > b or a != a else b


def minimum(a, b):
    """The smaller of two numbers of one type, NaN when either is NaN: LLVM's `minimum` or `smin`, compiled."""
    return a if a < b or a != a else b


# Compiled, these and `wide_vectors` are lowered by hand, as blas.py's matmul_into is: numba's `min` and
# `max`, like an @overload, compile a small function of their own on first use.
def _type_extremum(context):
    def typer(a, b):
        return a if a == b and isinstance(a, (types.Float, types.Integer)) else None
    return typer


def _lower_extremum(name):
    def lower(context, builder, sig, args):
        kind = sig.args[0]
        if isinstance(kind, types.Float):
            intrinsic_name = f"llvm.{name}imum.f{kind.bitwidth}"  # llvm.maximum.f32, llvm.minimum.f64, ...
        else:
            intrinsic_name = f"llvm.{'s' if kind.signed else 'u'}{name}.i{kind.bitwidth}"  # llvm.smax.i64, ...
        function_type = ir.FunctionType(args[0].type, [args[0].type] * 2)
        return builder.call(cgutils.get_or_insert_function(builder.module, function_type, intrinsic_name), args)
    return lower


for _extremum, _name in ((maximum, "max"), (minimum, "min")):
    type_callable(_extremum)(_type_extremum)
    lower_builtin(_extremum, types.Number, types.Number)(_lower_extremum(_name))


def wide_vectors():
    """Let LLVM vectorise the calling kernel with the widest vectors the CPU has (512 bits with AVX-512).

    On AVX-512 CPUs LLVM otherwise prefers 256-bit vectors (wide instructions used to lower the
    clock of older Intel parts); the exp-heavy loops here run faster with 512. Compiled, this marks
    the calling function only: nothing else in the process changes. Without numba it does nothing.
    """


def never_inline():
    """Keep the calling function a call wherever it is used: LLVM's `noinline` on it, compiled.

    blas.py's two helpers behind every tile product, inlined by LLVM at each of the drivers' seven products,
    took longer to compile on a first run and ran no faster. Without numba it does nothing.
    """


def _mark_caller(marker, attribute):
    """Compiled, a call to `marker()` puts an LLVM attribute on the calling function and does nothing else."""
    type_callable(marker)(lambda context: lambda: types.none)

    @lower_builtin(marker)
    def lower(context, builder, sig, args):
        # set.add: llvmlite's attribute set checks names against a list that lacks LLVM's string attributes
        set.add(builder.function.attributes, attribute)
        return context.get_dummy_value()


_mark_caller(wide_vectors, '"prefer-vector-width"="512"')
_mark_caller(never_inline, "noinline")


@njit(cache=True, nogil=True, inline="always")
def part_rows(rows, p, parts):
    """Rows [start, stop) of part p of `parts` nearly equal parts."""
    return rows * p // parts, rows * (p + 1) // parts


@intrinsic
def _float_from_bits(typingctx, bits):
    """The float whose IEEE bits are `bits` (int32 -> float32, int64 -> float64): builds 2^n exactly."""
    width = {types.int32: (types.float32, ir.FloatType()), types.int64: (types.float64, ir.DoubleType())}
    if bits in width:
        result, llvm_type = width[bits]
        return result(bits), lambda context, builder, signature, args: builder.bitcast(args[0], llvm_type)
    return None


def exp_vectorizable(s):
    """exp(s), in a form LLVM vectorises inside the tile kernels (numba's own exp calls libm one value at a time).

    Compiled, it is exp(s) = 2^n e^r with n = round(s / ln 2) and r = s - n ln 2 in [-ln2/2, ln2/2]
    (ln 2 split in two parts, so r is exact), e^r from its Taylor series (degree 7 for float32, 13
    for float64: within 2 ulp of numpy's exp) and 2^n built from its exponent bits. Results below the
    smallest normal float flush to 0, so exp(-inf) = 0. Without numba, this plain definition runs.
    """
    return math.exp(s)


def _exp_float32(s):
    n = np.rint(s * np.float32(1.4426950408889634))  # s / ln 2
    r = s - n * np.float32(0.693145751953125) - n * np.float32(1.428606820309417e-06)  # ln 2 = hi + lo
    p = np.float32(1 / 5040)
    for c in (1 / 720, 1 / 120, 1 / 24, 1 / 6, 1 / 2, 1.0, 1.0):
        p = p * r + np.float32(c)
    two_n = _float_from_bits(np.int32((np.int32(n) + np.int32(127)) << np.int32(23)))
    return np.float32(0.0) if s < np.float32(-87.0) else p * two_n


def _exp_float64(s):
    n = np.rint(s * 1.4426950408889634)
    r = s - n * 0.6931471803691238 - n * 1.9082149292705877e-10
    p = 1 / 6227020800
    for c in (1 / 479001600, 1 / 39916800, 1 / 3628800, 1 / 362880, 1 / 40320, 1 / 5040, 1 / 720, 1 / 120,
              1 / 24, 1 / 6, 1 / 2, 1.0, 1.0):
        p = p * r + c
    two_n = _float_from_bits((np.int64(n) + np.int64(1023)) << np.int64(52))
    return 0.0 if s < -708.0 else p * two_n


# No reassociation here: it would let LLVM merge (s - n hi) - n lo into s - n ln 2 and lose r's precision.
@overload(exp_vectorizable, jit_options={"fastmath": {"contract", "nsz"}})
def _exp_vectorizable_compiled(s):
    return {types.float32: _exp_float32, types.float64: _exp_float64}.get(s)
