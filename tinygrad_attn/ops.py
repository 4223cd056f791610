"""The primitive ops' gradient rules, in one table: one `Function` per op, forward beside backward.

Notation: `grad` is dL/d(output). Each backward returns dL/d(input) for each input, in the output's
(possibly broadcast) shape; the engine sums it back to the input's shape.

Every rule is the maths written once for two kinds of values (HIPS autograd's idea: the rules are in
the same ops as the forward). A first-order backward hands it numpy arrays, and it runs at numpy's
speed with no graph. With `create_graph=True` the engine hands it tensors instead (the saved inputs
and output as the tensors they are), and the same lines record the graph of the gradient, so it can
be differentiated again. Operators (`grad * b`, `-grad * a / (b * b)`, `@`, slicing, `.reshape`) mean
the same on both; the few other functions a rule needs come from `on(grad)`: numpy's for arrays,
these ops' own for tensors.

Composite ops (mean, transpose, unsqueeze, stack, ...) are built from these by Tensor's methods
(tensor.py) and functional.py; the fused kernels' rules are in fused.py, the argument checks in
checks.py.
"""

from __future__ import annotations

import math
from collections import namedtuple
from typing import Any

import numpy as np

from .engine import Context, Function, Node, device
from .kernels.parallel import matmul_pair, row_split_matmul
from .kernels.relu import relu_backward, relu_forward


class Rule(Function):
    """A primitive op: its backward runs on arrays (first order) and on tensors (higher order)."""

    differentiable = True


# --- what a rule needs besides operators: numpy's functions, or the same as ops on tensors ------------


class _OnArrays:
    """First order: numpy."""

    where = staticmethod(np.where)
    cumsum = staticmethod(np.cumsum)
    sin, cos, exp, log = staticmethod(np.sin), staticmethod(np.cos), staticmethod(np.exp), staticmethod(np.log)

    @staticmethod
    def zeros(shape, like):
        return np.zeros(shape, like.dtype)

    @staticmethod
    def expand(x, shape):
        return np.broadcast_to(x, shape)

    @staticmethod
    def cast(x, dtype):
        return x.astype(dtype)

    @staticmethod
    def permute(x, dims):
        return x.transpose(dims)

    @staticmethod
    def swap_last(x):
        return x.swapaxes(-1, -2)

    @staticmethod
    def index_add(shape, index, values):
        """zeros(shape) with `values` added at `index` (integer indices may repeat)."""
        out = np.zeros(shape, values.dtype)
        items = index if isinstance(index, tuple) else (index,)
        if any(isinstance(i, np.ndarray) and i.dtype.kind in "iu" for i in items):
            np.add.at(out, index, values)
        else:
            out[index] = values  # slices and bool masks never pick an element twice
        return out

    @staticmethod
    def einsum(subscripts, output, *operands):
        return np.einsum(",".join(subscripts) + "->" + output, *operands, optimize=len(operands) > 2)

    @staticmethod
    def index_put(a, index, value):
        out = a.copy()
        out[index] = value
        return out

    @staticmethod
    def take_along(a, indices, axis):
        return np.take_along_axis(a, indices, axis)

    @staticmethod
    def put_along(a, indices, values, axis):
        out = a.copy()
        np.put_along_axis(out, indices, values, axis)
        return out

    @staticmethod
    def relu_grad(a, grad):
        return relu_backward(a, grad)  # grad where a > 0, else 0, in one pass


class _OnTensors:
    """Higher order: the same functions as ops, so the gradient's own graph is recorded."""

    @staticmethod
    def where(cond, a, b):
        return Where.apply(cond, a, b)

    @staticmethod
    def cumsum(x, axis):
        return CumSum.apply(x, axis=axis)

    @staticmethod
    def sin(x):
        return Sin.apply(x)

    @staticmethod
    def cos(x):
        return Cos.apply(x)

    @staticmethod
    def exp(x):
        return Exp.apply(x)

    @staticmethod
    def log(x):
        return Log.apply(x)

    @staticmethod
    def zeros(shape, like):
        return type(like)._result(np.zeros(shape, like.dtype), None)

    @staticmethod
    def expand(x, shape):
        return Expand.apply(x, shape=tuple(shape))

    @staticmethod
    def cast(x, dtype):
        return Cast.apply(x, dtype=dtype)

    @staticmethod
    def permute(x, dims):
        return Permute.apply(x, dims=tuple(dims))

    @staticmethod
    def swap_last(x):
        dims = list(range(x.ndim))
        dims[-1], dims[-2] = dims[-2], dims[-1]
        return Permute.apply(x, dims=tuple(dims))

    @staticmethod
    def index_add(shape, index, values):
        return IndexAdd.apply(values, index=index, shape=shape)

    @staticmethod
    def index_put(a, index, value):
        return IndexPut.apply(a, value, index=index)

    @staticmethod
    def take_along(a, indices, axis):
        return TakeAlongDim.apply(a, indices=indices, axis=axis)

    @staticmethod
    def put_along(a, indices, values, axis):
        return Scatter.apply(a, values, index=indices, axis=axis)

    @staticmethod
    def relu_grad(a, grad):
        return Where.apply(type(a)._result(a._data > 0, None), grad, 0)

    @staticmethod
    def einsum(subscripts, output, *operands):
        return Einsum.apply(*operands, subscripts=tuple(subscripts), output=output)


def on(grad: Any) -> type:
    """The functions a rule uses on `grad`'s kind of value: numpy's for an array, ops for a tensor."""
    return _OnTensors if isinstance(grad, Node) else _OnArrays


# --- elementwise, two inputs ---------------------------------------------------


class Add(Rule):
    @staticmethod
    def forward(ctx, a, b):
        return a + b

    @staticmethod
    def backward(ctx, grad):
        return grad, grad  # d(a+b)/da = d(a+b)/db = 1


class Sub(Rule):
    @staticmethod
    def forward(ctx, a, b):
        return a - b

    @staticmethod
    def backward(ctx, grad):
        return grad, -grad


class Mul(Rule):
    @staticmethod
    def forward(ctx, a, b):
        need_a, need_b = ctx.needs_input_grad  # save only what a gradient needs (PyTorch's rule): a value
        ctx.save_for_backward(a if need_b else None, b if need_a else None)  # nothing saved may change in place
        return a * b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad
        return grad * b if need_a else None, grad * a if need_b else None


class Div(Rule):
    @staticmethod
    def forward(ctx, a, b):
        need_a, need_b = ctx.needs_input_grad
        ctx.save_for_backward(a if need_b else None, b)  # b for both gradients, a only for b's
        return a / b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad
        return grad / b if need_a else None, -grad * a / (b * b) if need_b else None  # d(a/b)/db = -a/b^2


class Where(Rule):
    """where(cond, a, b): a where cond is True, else b. cond gets no gradient."""

    @staticmethod
    def forward(ctx, cond, a, b):
        ctx.save_for_backward(cond)
        return np.where(cond, a, b)

    @staticmethod
    def backward(ctx, grad):
        (cond,) = ctx.saved_tensors
        m = on(grad)
        return None, m.where(cond, grad, 0), m.where(cond, 0, grad)


# --- elementwise, one input ----------------------------------------------------


class Neg(Rule):
    @staticmethod
    def forward(ctx, a):
        return -a

    @staticmethod
    def backward(ctx, grad):
        return -grad


def power(a: np.ndarray, p: Any) -> np.ndarray:
    """a ** p, with the exponents models use as products and square roots (PyTorch's fast paths): numpy's
    power with a float exponent calls libm's pow for every element, far slower than x * x * x."""
    if p == 2:
        return a * a
    if p == 3:
        return a * a * a
    if p == 0.5:
        return np.sqrt(a)
    if a.dtype.kind == "f":
        if p == -1:
            return 1 / a
        if p == -2:
            return 1 / (a * a)
        if p == -0.5:
            return 1 / np.sqrt(a)
        if p == 1.5:
            return a * np.sqrt(a)
    return a**p


class Pow(Rule):
    @staticmethod
    def forward(ctx, a, exponent):
        ctx.save_for_backward(a)
        ctx.exponent = exponent
        return power(a, exponent)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        p = ctx.exponent
        if p == 0:  # a^0 = 1 everywhere, 0^0 included: no gradient (p a^(p-1) would be 0 * inf at 0)
            return on(grad).zeros(grad.shape, grad)
        return grad * p * (a ** (p - 1) if isinstance(a, Node) else power(a, p - 1))  # d(a^p)/da = p a^(p-1)


class Exp(Rule):
    @staticmethod
    def forward(ctx, a):
        out = np.exp(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * out  # d(e^a)/da = e^a


class Log(Rule):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        with np.errstate(divide="ignore", invalid="ignore"):  # log(0) = -inf, log(-1) = NaN: PyTorch's, unwarned
            return np.log(a)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        return grad / a


class Sqrt(Rule):
    @staticmethod
    def forward(ctx, a):
        out = np.sqrt(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad / (2 * out)  # d(sqrt a)/da = 1 / (2 sqrt a)


class Tanh(Rule):
    @staticmethod
    def forward(ctx, a):
        out = np.tanh(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * (1 - out * out)


class Sigmoid(Rule):
    @staticmethod
    def forward(ctx, a):
        out = 0.5 * (1 + np.tanh(0.5 * a))  # = 1 / (1 + e^-a), without overflow
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * out * (1 - out)


class Relu(Rule):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return relu_forward(a)  # max(a, 0), NaN kept

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        return on(grad).relu_grad(a, grad)  # grad where a > 0, else 0: the subgradient at 0 is taken as 0


class Sin(Rule):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return np.sin(a)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        return grad * on(grad).cos(a)  # d(sin a)/da = cos a


class Cos(Rule):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return np.cos(a)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        return -grad * on(grad).sin(a)  # d(cos a)/da = -sin a


class Elementwise(Rule):
    """An elementwise function f and its derivative, written once: `derivative(a, out, m)` is f'(a) from the
    input a and the output out, with m = on(grad) for the functions it needs."""

    function: Any = None

    @classmethod
    def forward(cls, ctx, a):
        out = cls.function(a)
        ctx.save_for_backward(a, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        a, out = ctx.saved_tensors
        return grad * ctx.function.derivative(a, out, on(grad))


def _elementwise(name: str, function: Any, derivative: Any) -> type:
    return type(name, (Elementwise,), {"function": staticmethod(function), "derivative": staticmethod(derivative),
                                       "__doc__": f"{name.lower()}(a), elementwise."})


LN2, LN10 = math.log(2.0), math.log(10.0)
Tan = _elementwise("Tan", np.tan, lambda a, out, m: 1 + out * out)
Asin = _elementwise("Asin", np.arcsin, lambda a, out, m: (1 - a * a) ** -0.5)
Acos = _elementwise("Acos", np.arccos, lambda a, out, m: -((1 - a * a) ** -0.5))
Atan = _elementwise("Atan", np.arctan, lambda a, out, m: 1 / (1 + a * a))
Sinh = _elementwise("Sinh", np.sinh, lambda a, out, m: (m.exp(a) + m.exp(-a)) * 0.5)  # cosh a
Cosh = _elementwise("Cosh", np.cosh, lambda a, out, m: (m.exp(a) - m.exp(-a)) * 0.5)  # sinh a
Asinh = _elementwise("Asinh", np.arcsinh, lambda a, out, m: (a * a + 1) ** -0.5)
Acosh = _elementwise("Acosh", np.arccosh, lambda a, out, m: (a * a - 1) ** -0.5)
Atanh = _elementwise("Atanh", np.arctanh, lambda a, out, m: 1 / (1 - a * a))
Expm1 = _elementwise("Expm1", np.expm1, lambda a, out, m: out + 1)
Log1p = _elementwise("Log1p", np.log1p, lambda a, out, m: 1 / (1 + a))
Log2 = _elementwise("Log2", np.log2, lambda a, out, m: 1 / (a * LN2))
Log10 = _elementwise("Log10", np.log10, lambda a, out, m: 1 / (a * LN10))
Exp2 = _elementwise("Exp2", np.exp2, lambda a, out, m: out * LN2)


class Step(Rule):
    """A piecewise-constant function (floor, ceil, trunc, round, sign): zero gradient, as PyTorch's."""

    function: Any = None

    @classmethod
    def forward(cls, ctx, a):
        return cls.function(a)

    @staticmethod
    def backward(ctx, grad):
        return on(grad).zeros(grad.shape, grad)


Floor, Ceil, Trunc, Sign = (type(n, (Step,), {"function": staticmethod(f)})
                            for n, f in (("Floor", np.floor), ("Ceil", np.ceil), ("Trunc", np.trunc),
                                         ("Sign", np.sign)))
Round = type("Round", (Step,), {"function": staticmethod(np.round)})  # half to even, as PyTorch's


class PowTensor(Rule):
    """a ** b for a tensor exponent: d/da = b a^(b-1), d/db = a^b log a."""

    @staticmethod
    def forward(ctx, a, b):
        out = np.power(a, b)
        ctx.save_for_backward(a, b, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        a, b, out = ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad
        m = on(grad)
        return (grad * b * a ** (b - 1) if need_a else None,
                grad * out * m.log(m.where(a == 0, 1, a)) if need_b else None)  # 0 at a = 0, NaN below, as PyTorch


_erf = np.frompyfunc(math.erf, 1, 1)


class Erf(Rule):
    """erf(a) = 2/sqrt(pi) * integral of exp(-t^2) from 0 to a (libm's, one element at a time)."""

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return _erf(a).astype(a.dtype) if a.ndim else np.asarray(math.erf(a), a.dtype)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        return grad * (2 / math.sqrt(math.pi)) * on(grad).exp(-(a * a))  # d erf(a)/da = 2/sqrt(pi) e^(-a^2)


class Abs(Rule):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(np.sign(a))
        return np.abs(a)

    @staticmethod
    def backward(ctx, grad):
        (sign,) = ctx.saved_tensors
        return grad * sign  # the subgradient at 0 is taken as 0, as in PyTorch


class Clamp(Rule):
    """min(max(a, low), high); the gradient passes where low <= a <= high, as in PyTorch."""

    @staticmethod
    def forward(ctx, a, low, high):
        inside = np.ones(a.shape, bool)
        if low is not None:
            inside &= a >= low
        if high is not None:
            inside &= a <= high
        ctx.save_for_backward(inside)
        return np.clip(a, low, high)

    @staticmethod
    def backward(ctx, grad):
        (inside,) = ctx.saved_tensors
        return on(grad).where(inside, grad, 0)


class Cast(Rule):
    @staticmethod
    def forward(ctx, a, dtype):
        return a.astype(dtype)

    @staticmethod
    def backward(ctx, grad):
        return on(grad).cast(grad, ctx.inputs[0].dtype)


# --- reductions ------------------------------------------------------------------


class Sum(Rule):
    @staticmethod
    def forward(ctx, a, axis, keepdim):
        out = a.sum(axis=axis, keepdims=True)
        return out if keepdim else out.reshape(()) if axis is None else out.squeeze(axis)

    @staticmethod
    def backward(ctx, grad):
        # every summed element receives the gradient of its sum, spread from the shape with the summed dims kept
        shape, axis = ctx.inputs[0].shape, ctx.kwargs["axis"]
        kept = tuple(1 if axis is None or i in axis else n for i, n in enumerate(shape))
        return on(grad).expand(grad.reshape(kept), shape)


class Max(Rule):
    """Largest value along `axis`; tied maxima share the gradient evenly."""

    reduce = staticmethod(np.max)

    @classmethod
    def forward(cls, ctx, a, axis, keepdim):
        out = cls.reduce(a, axis=axis, keepdims=True)
        if ctx.needs_input_grad[0]:
            is_max = a == out
            ctx.save_for_backward((is_max / is_max.sum(axis=axis, keepdims=True)).astype(a.dtype))  # each tie's share
        ctx.kept_shape = out.shape
        return out if keepdim else np.squeeze(out, axis)

    @staticmethod
    def backward(ctx, grad):
        (share,) = ctx.saved_tensors
        return grad.reshape(ctx.kept_shape) * share


class Min(Max):
    """Smallest value along `axis` (computed as such: negating would wrap unsigned and INT_MIN values); tied
    minima share the gradient evenly."""

    reduce = staticmethod(np.min)


class CumSum(Rule):
    @staticmethod
    def forward(ctx, a, axis):
        ctx.axis = axis
        return np.cumsum(a, axis=axis)

    @staticmethod
    def backward(ctx, grad):
        # out_i = sum_{j <= i} a_j, so da_j = sum_{i >= j} grad_i: a cumulative sum from the end
        flip = (slice(None),) * ctx.axis + (slice(None, None, -1),)
        return on(grad).cumsum(grad[flip], ctx.axis)[flip]


# --- shape and indexing -----------------------------------------------------------------


class Reshape(Rule):
    view = True

    @staticmethod
    def forward(ctx, a, shape):
        return a.reshape(shape)

    @staticmethod
    def backward(ctx, grad):
        return grad.reshape(ctx.inputs[0].shape)


class Permute(Rule):
    view = True

    @staticmethod
    def forward(ctx, a, dims):
        return a.transpose(dims)

    @staticmethod
    def backward(ctx, grad):
        dims = ctx.kwargs["dims"]
        inverse = sorted(range(len(dims)), key=dims.__getitem__)  # the axis each dim went to
        return on(grad).permute(grad, tuple(inverse))


class Expand(Rule):
    """a broadcast to a larger shape (a read-only view); the engine sums the gradient back to a's shape."""

    view = True

    @staticmethod
    def forward(ctx, a, shape):
        return np.broadcast_to(a, shape)

    @staticmethod
    def backward(ctx, grad):
        return grad


class Clone(Rule):
    """A copy with its own (C-contiguous) memory; the gradient passes unchanged."""

    @staticmethod
    def forward(ctx, a):
        return np.array(a, order="C", copy=True)

    @staticmethod
    def backward(ctx, grad):
        return grad


class GetItem(Rule):
    """a[index] for ints, slices, None, Ellipsis and integer or bool arrays.

    Backward scatters the gradient into zeros of a's shape, adding where an index array picks the same
    element more than once (IndexAdd: GetItem's adjoint, as GetItem is IndexAdd's).
    """

    view = True

    @staticmethod
    def forward(ctx, a, index):
        return a[index]

    @staticmethod
    def backward(ctx, grad):
        return on(grad).index_add(ctx.inputs[0].shape, ctx.kwargs["index"], grad)


class IndexAdd(Rule):
    """zeros(shape) with `values` added at `index`: the adjoint of a[index]."""

    @staticmethod
    def forward(ctx, values, index, shape):
        return _OnArrays.index_add(shape, index, values)

    @staticmethod
    def backward(ctx, grad):
        return grad[ctx.kwargs["index"]]


class IndexPut(Rule):
    """a with a[index] = value; the gradient of the overwritten entries goes to value, not to a."""

    @staticmethod
    def forward(ctx, a, value, index):
        ctx.value_shape = value.shape
        out = a.copy()
        target = out[index]
        if np.shape(target) != value.shape and np.size(target) == value.size:  # y[1] = tensor([v]), as PyTorch
            value = value.reshape(np.shape(target))
        out[index] = value
        return out

    @staticmethod
    def backward(ctx, grad):
        index, m = ctx.kwargs["index"], on(grad)
        grad_a = m.index_put(grad, index, m.zeros((), grad))
        grad_value = grad[index]
        if grad_value.shape != ctx.value_shape and grad_value.size == math.prod(ctx.value_shape):
            grad_value = grad_value.reshape(ctx.value_shape)
        return grad_a, grad_value


class CopySlices(Rule):
    """base with the entries of one of its views replaced by `values`: an in-place write through a view, as
    PyTorch records it. `positions` holds the view's entries' flat indices in base, so the gradient of the
    written entries goes to `values` and base's old value gets the rest."""

    @staticmethod
    def forward(ctx, base, values, positions):
        out = base.copy()
        out.reshape(-1)[positions.reshape(-1)] = np.broadcast_to(values, positions.shape).reshape(-1)
        return out

    @staticmethod
    def backward(ctx, grad):
        positions, m = ctx.kwargs["positions"], on(grad)
        flat = grad.reshape(-1)
        grad_base = m.index_put(flat, positions.reshape(-1), m.zeros((), grad)).reshape(grad.shape)
        return grad_base, flat[positions]


class TakeAlongDim(Rule):
    """a's entries at `indices` along `axis` (np.take_along_axis); backward puts the gradient back in zeros
    (the indices along a row are distinct wherever this is used: topk, sort, max(dim))."""

    @staticmethod
    def forward(ctx, a, indices, axis):
        ctx.input_shape, ctx.axis = a.shape, axis
        return np.take_along_axis(a, indices, axis)

    @staticmethod
    def backward(ctx, grad):
        m = on(grad)
        return m.put_along(m.zeros(ctx.input_shape, grad), ctx.kwargs["indices"], grad, ctx.axis)


class Scatter(Rule):
    """a with the entries at `index` along `axis` taken from src (np.put_along_axis)."""

    @staticmethod
    def forward(ctx, a, src, index, axis):
        ctx.axis, ctx.src_shape = axis, src.shape
        out = a.copy()
        np.put_along_axis(out, index, src[tuple(slice(0, n) for n in index.shape)], axis)
        return out

    @staticmethod
    def backward(ctx, grad):
        index, m = ctx.kwargs["index"], on(grad)
        grad_a = m.put_along(grad, index, m.zeros(index.shape, grad), ctx.axis)  # overwritten: no gradient
        picked = m.take_along(grad, index, ctx.axis)
        if picked.shape != ctx.src_shape:  # src may be larger than index: its other entries get 0
            picked = m.index_put(m.zeros(ctx.src_shape, grad), tuple(slice(0, n) for n in index.shape), picked)
        return grad_a, picked


class Cat(Rule):
    @staticmethod
    def forward(ctx, *arrays, axis):
        ctx.axis = axis
        ctx.bounds = np.cumsum([0] + [a.shape[axis] for a in arrays])
        return np.concatenate(arrays, axis=axis)

    @staticmethod
    def backward(ctx, grad):
        before = (slice(None),) * ctx.axis
        return tuple(grad[before + (slice(int(a), int(b)),)] for a, b in zip(ctx.bounds[:-1], ctx.bounds[1:]))


class Stack(Rule):
    """Same-shaped arrays joined along a new axis; each gets its slice of the gradient back."""

    @staticmethod
    def forward(ctx, *arrays, axis):
        return np.stack(arrays, axis=axis)

    @staticmethod
    def backward(ctx, grad):
        before = (slice(None),) * ctx.kwargs["axis"]
        return tuple(grad[before + (i,)] for i in range(len(ctx.inputs)))


class CopyInto(Rule):
    """copy_: src broadcast to a's shape and cast to a's dtype; a's old value gets no gradient."""

    @staticmethod
    def forward(ctx, a, src):
        return np.array(np.broadcast_to(src, a.shape), dtype=a.dtype)

    @staticmethod
    def backward(ctx, grad):
        return on(grad).zeros(grad.shape, grad), grad  # the old value is overwritten: a zero gradient, as PyTorch


class Pad(Rule):
    """Constant padding (np.pad); backward cuts the padding off again."""

    @staticmethod
    def forward(ctx, a, widths, value):
        ctx.inner = tuple(slice(before, before + n) for (before, _), n in zip(widths, a.shape))
        return np.pad(a, widths, mode="constant", constant_values=value)

    @staticmethod
    def backward(ctx, grad):
        return grad[ctx.inner]


# --- linear algebra -------------------------------------------------------------------


def _right_operand(b: np.ndarray) -> np.ndarray:
    """A stacked right operand as a contiguous array: numpy's batched matmul may run outside BLAS for a
    transposed view (the math path's k^T), and the copy costs little beside the product."""
    return np.ascontiguousarray(b) if b.ndim > 2 and not b.flags.c_contiguous else b


def rows_of(a: np.ndarray) -> np.ndarray:
    """(..., N) -> (R, N), R the product of the leading dims (numpy cannot infer a -1 there when N is 0)."""
    return a.reshape(math.prod(a.shape[:-1]), a.shape[-1])


class Copysign(Rule):
    """|a| with b's sign bit; d/da = a / out (+-1, 0 where a is 0), d/db = 0, as PyTorch's."""

    @staticmethod
    def forward(ctx, a, b):
        out = np.copysign(a, b)
        with np.errstate(divide="ignore", invalid="ignore"):
            ctx.ratio = np.where(a == 0, 0, a / np.where(out == 0, 1, out)).astype(out.dtype)  # +-1
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.ratio, grad * np.zeros((), ctx.ratio.dtype)


class Fmod(Rule):
    """C's fmod: a - b * trunc(a / b), the sign of a; d/da = 1, d/db = -trunc(a / b) (PyTorch's)."""

    @staticmethod
    def forward(ctx, a, b):
        out = np.fmod(a, b)
        with np.errstate(divide="ignore", invalid="ignore"):
            ctx.quotient = np.round((a - out) / b) if ctx.needs_input_grad[1] else None  # a - out is q b, q whole
        return out

    @staticmethod
    def backward(ctx, grad):
        quotient = ctx.quotient
        return grad, None if quotient is None else grad * (-quotient).astype(quotient.dtype)


class Einsum(Rule):
    """np.einsum over operands with one subscript each (letters, no repeats within one) into `output`.

    The gradient of operand k is the einsum of the output's gradient with the other operands into operand
    k's letters; a letter only operand k has was summed over, so its gradient is the same along it
    (broadcast back)."""

    @staticmethod
    def forward(ctx, *operands, subscripts, output):
        ctx.save_for_backward(*operands)
        return _OnArrays.einsum(subscripts, output, *operands)

    @staticmethod
    def backward(ctx, grad):
        operands, subscripts, output = ctx.saved_tensors, ctx.kwargs["subscripts"], ctx.kwargs["output"]
        m, grads = on(grad), []
        for k, letters in enumerate(subscripts):
            if not ctx.needs_input_grad[k]:
                grads.append(None)
                continue
            others = [j for j in range(len(operands)) if j != k]
            known = set(output).union(*(subscripts[j] for j in others))
            kept = "".join(c for c in letters if c in known)  # the letters summed only here come back as 1s
            g = m.einsum([output, *(subscripts[j] for j in others)], kept, grad, *(operands[j] for j in others))
            shape = tuple(n if c in known else 1 for c, n in zip(letters, ctx.inputs[k].shape))
            grads.append(m.expand(g.reshape(shape), ctx.inputs[k].shape) if kept != letters else g)
        return tuple(grads)


class MatMul(Rule):
    """a @ b with np.matmul's rules: 1-D operands and broadcast batch dims.

    For 2-D: C = A B gives dA = dC B^T and dB = A^T dC. A 1-D operand is
    treated as a row (a) or column (b) vector and the added axis removed.
    """

    @staticmethod
    def forward(ctx, a, b):
        need_a, need_b = ctx.needs_input_grad
        ctx.save_for_backward(a if need_b else None, b if need_a else None)  # dA needs b, dB needs a
        if a.ndim >= 2 and b.ndim == 2:  # (..., n, k) @ (k, m): one GEMM over all rows, cut as Linear's are
            return row_split_matmul(rows_of(a), b).reshape(a.shape[:-1] + b.shape[-1:])
        return a @ _right_operand(b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors  # b is None when a needs no gradient, a when b needs none
        a_ndim, b_ndim = ctx.inputs[0].ndim, ctx.inputs[1].ndim
        m, grad_a, grad_b = on(grad), None, None
        if m is _OnArrays and a_ndim >= 2 and b_ndim == 2:  # a Linear layer's case: rows of a and grad together
            g_rows = rows_of(grad)  # (N, m)
            if a is not None and b is not None:  # dA = dC B^T, dB = A^T dC: independent, each on its own thread
                grad_a, grad_b = matmul_pair(g_rows, b.T, rows_of(a).T, g_rows)
                return grad_a.reshape(ctx.inputs[0].shape), grad_b
            if b is not None:
                grad_a = row_split_matmul(g_rows, b.T).reshape(ctx.inputs[0].shape)  # dA = dC B^T
            if a is not None:
                grad_b = row_split_matmul(rows_of(a).T, g_rows)  # dB = A^T dC
            return grad_a, grad_b
        g2 = grad.reshape(grad.shape + (1,)) if b_ndim == 1 else grad
        if a_ndim == 1:
            g2 = g2.reshape(g2.shape[:-1] + (1,) + g2.shape[-1:])  # (..., n, m)
        if b is not None:
            right = m.swap_last(b.reshape(b.shape + (1,)) if b_ndim == 1 else b)  # (..., m, k)
            if m is _OnArrays:
                right = _right_operand(right)  # laid out contiguously, for numpy's batched product
            grad_a = g2 @ right  # (..., n, k)
            if a_ndim == 1:
                grad_a = grad_a.reshape(grad_a.shape[:-2] + grad_a.shape[-1:])
        if a is not None:
            grad_b = m.swap_last(a.reshape((1,) + a.shape) if a_ndim == 1 else a) @ g2  # (..., k, m)
            if b_ndim == 1:
                grad_b = grad_b.reshape(grad_b.shape[:-1])
        return grad_a, grad_b


# PyTorch's named tuples for ops that return (values, indices): x.max(1).values, x.max(1)[0], `_, i = x.max(1)`.
return_types = {name: namedtuple(name, ["values", "indices"])
                for name in ("max", "min", "sort", "topk", "kthvalue", "median", "cummax", "cummin")}

_TYPE_NAMES = {np.dtype(np.float32): "torch.FloatTensor", np.dtype(np.float64): "torch.DoubleTensor",
               np.dtype(np.float16): "torch.HalfTensor", np.dtype(np.int64): "torch.LongTensor",
               np.dtype(np.int32): "torch.IntTensor", np.dtype(np.int16): "torch.ShortTensor",
               np.dtype(np.int8): "torch.CharTensor", np.dtype(np.uint8): "torch.ByteTensor",
               np.dtype(np.bool_): "torch.BoolTensor"}


def _is_dtype_name(value: Any) -> bool:
    """A string naming a dtype ("float32"), as opposed to a device ("cpu")."""
    if isinstance(value, device):
        return False
    try:
        np.dtype(value)
    except TypeError:
        return False
    return True


__all__ = ["Context", "Function", "Rule", "on"]
