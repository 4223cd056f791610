"""The primitive ops: one `Function` per op, forward and backward side by side.

Notation: `grad` is dL/d(output). Each backward returns dL/d(input) for each
input, in the output's (possibly broadcast) shape; the engine sums it back to
the input's shape. Composite ops (mean, transpose, unsqueeze, stack, ...) are
built from these by Tensor's methods (tensor.py) and functional.py.
"""

from __future__ import annotations

import math
from collections import namedtuple
from typing import Any

import numpy as np

from .engine import Context, Function, Node, _short, device
from .kernels.parallel import row_split_matmul
from .kernels.relu import relu_backward, relu_forward
from .kernels.softmax import log_softmax_backward, softmax_backward, softmax_forward
from .memory import check_fits

# --- elementwise, two inputs ---------------------------------------------------


class Add(Function):
    @staticmethod
    def forward(ctx, a, b):
        return a + b

    @staticmethod
    def backward(ctx, grad):
        return grad, grad  # d(a+b)/da = d(a+b)/db = 1


class Sub(Function):
    @staticmethod
    def forward(ctx, a, b):
        return a - b

    @staticmethod
    def backward(ctx, grad):
        return grad, -grad


class Mul(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad * b, grad * a


class Div(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a / b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad / b, -grad * a / (b * b)  # d(a/b)/db = -a/b^2


class Where(Function):
    """where(cond, a, b): a where cond is True, else b. cond gets no gradient."""

    @staticmethod
    def forward(ctx, cond, a, b):
        ctx.save_for_backward(cond)
        return np.where(cond, a, b)

    @staticmethod
    def backward(ctx, grad):
        (cond,) = ctx.saved_tensors
        return None, np.where(cond, grad, 0), np.where(cond, 0, grad)


# --- elementwise, one input ----------------------------------------------------


class Neg(Function):
    @staticmethod
    def forward(ctx, a):
        return -a

    @staticmethod
    def backward(ctx, grad):
        return -grad


class Pow(Function):
    @staticmethod
    def forward(ctx, a, exponent):
        ctx.save_for_backward(a)
        ctx.exponent = exponent
        return a**exponent

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        p = ctx.exponent
        return grad * p * a ** (p - 1)  # d(a^p)/da = p a^(p-1)


class Exp(Function):
    @staticmethod
    def forward(ctx, a):
        out = np.exp(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * out  # d(e^a)/da = e^a


class Log(Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return np.log(a)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        return grad / a


class Sqrt(Function):
    @staticmethod
    def forward(ctx, a):
        out = np.sqrt(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad / (2 * out)  # d(sqrt a)/da = 1 / (2 sqrt a)


class Tanh(Function):
    @staticmethod
    def forward(ctx, a):
        out = np.tanh(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * (1 - out * out)


class Sigmoid(Function):
    @staticmethod
    def forward(ctx, a):
        out = 0.5 * (1 + np.tanh(0.5 * a))  # = 1 / (1 + e^-a), without overflow
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * out * (1 - out)


class Relu(Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return relu_forward(a)  # max(a, 0), NaN kept

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        return relu_backward(a, grad)  # grad where a > 0, else 0: the subgradient at 0 is taken as 0


class Cast(Function):
    @staticmethod
    def forward(ctx, a, dtype):
        ctx.input_dtype = a.dtype
        return a.astype(dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad.astype(ctx.input_dtype)


# --- reductions ------------------------------------------------------------------


class Sum(Function):
    @staticmethod
    def forward(ctx, a, axis, keepdim):
        ctx.input_shape, ctx.axis = a.shape, axis
        return a.sum(axis=axis, keepdims=keepdim)

    @staticmethod
    def backward(ctx, grad):
        # every summed element receives the gradient of its sum
        kept = np.expand_dims(grad, ctx.axis) if grad.ndim < len(ctx.input_shape) else grad
        return np.broadcast_to(kept, ctx.input_shape)


class Max(Function):
    """Largest value along `axis`; tied maxima share the gradient evenly."""

    @staticmethod
    def forward(ctx, a, axis, keepdim):
        out = a.max(axis=axis, keepdims=True)
        ctx.save_for_backward(a == out)
        ctx.axis = axis
        return out if keepdim else np.squeeze(out, axis)

    @staticmethod
    def backward(ctx, grad):
        (is_max,) = ctx.saved_tensors
        kept = np.expand_dims(grad, ctx.axis) if grad.ndim < is_max.ndim else grad
        return kept * is_max / is_max.sum(axis=ctx.axis, keepdims=True)


# --- shape ---------------------------------------------------------------------------


class Reshape(Function):
    @staticmethod
    def forward(ctx, a, shape):
        ctx.input_shape = a.shape
        return a.reshape(shape)

    @staticmethod
    def backward(ctx, grad):
        return grad.reshape(ctx.input_shape)


class Permute(Function):
    @staticmethod
    def forward(ctx, a, dims):
        ctx.dims = dims
        return a.transpose(dims)

    @staticmethod
    def backward(ctx, grad):
        inverse = sorted(range(len(ctx.dims)), key=ctx.dims.__getitem__)  # the axis each dim went to
        return grad.transpose(inverse)


class GetItem(Function):
    """a[index] for ints, slices, None, Ellipsis and integer or bool arrays.

    Backward scatters the gradient into zeros of a's shape, adding where an
    index array picks the same element more than once.
    """

    @staticmethod
    def forward(ctx, a, index):
        ctx.save_for_backward(index)  # index arrays are released with the graph, like any saved array
        ctx.input_shape = a.shape
        return a[index]

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        out = np.zeros(ctx.input_shape, dtype=grad.dtype)
        items = index if isinstance(index, tuple) else (index,)
        if any(isinstance(i, np.ndarray) and i.dtype.kind in "iu" for i in items):
            np.add.at(out, index, grad)  # integer indices may repeat: accumulate
        else:
            out[index] = grad  # slices and bool masks never pick an element twice
        return out


class Cat(Function):
    @staticmethod
    def forward(ctx, *arrays, axis):
        ctx.axis = axis
        ctx.split_points = np.cumsum([a.shape[axis] for a in arrays])[:-1]
        return np.concatenate(arrays, axis=axis)

    @staticmethod
    def backward(ctx, grad):
        return tuple(np.split(grad, ctx.split_points, axis=ctx.axis))


class Abs(Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(np.sign(a))
        return np.abs(a)

    @staticmethod
    def backward(ctx, grad):
        (sign,) = ctx.saved_tensors
        return grad * sign  # the subgradient at 0 is taken as 0, as in PyTorch


class Clamp(Function):
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
        return grad * inside


class Expand(Function):
    """a broadcast to a larger shape (a read-only view); the engine sums the gradient back to a's shape."""

    @staticmethod
    def forward(ctx, a, shape):
        return np.broadcast_to(a, shape)

    @staticmethod
    def backward(ctx, grad):
        return grad


class Clone(Function):
    """A copy with its own (C-contiguous) memory; the gradient passes unchanged."""

    @staticmethod
    def forward(ctx, a):
        return np.array(a, order="C", copy=True)

    @staticmethod
    def backward(ctx, grad):
        return grad


class TakeAlongDim(Function):
    """a's entries at `indices` along `axis` (np.take_along_axis); backward scatters into zeros."""

    @staticmethod
    def forward(ctx, a, indices, axis):
        ctx.save_for_backward(indices)
        ctx.input_shape, ctx.axis = a.shape, axis
        return np.take_along_axis(a, indices, axis)

    @staticmethod
    def backward(ctx, grad):
        (indices,) = ctx.saved_tensors
        out = np.zeros(ctx.input_shape, grad.dtype)
        np.put_along_axis(out, indices, grad, ctx.axis)  # indices along a row are distinct here (topk)
        return out


class Sin(Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return np.sin(a)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        return grad * np.cos(a)  # d(sin a)/da = cos a


class CumSum(Function):
    @staticmethod
    def forward(ctx, a, axis):
        ctx.axis = axis
        return np.cumsum(a, axis=axis)

    @staticmethod
    def backward(ctx, grad):
        # out_i = sum_{j <= i} a_j, so da_j = sum_{i >= j} grad_i: a cumulative sum from the end
        return np.flip(np.cumsum(np.flip(grad, ctx.axis), axis=ctx.axis), ctx.axis)


class CopyInto(Function):
    """copy_: src broadcast to a's shape and cast to a's dtype; a's old value gets no gradient."""

    @staticmethod
    def forward(ctx, a, src):
        return np.array(np.broadcast_to(src, a.shape), dtype=a.dtype)

    @staticmethod
    def backward(ctx, grad):
        return np.zeros_like(grad), grad  # the old value is overwritten: a zero gradient, as PyTorch


class IndexPut(Function):
    """a with a[index] = value; the gradient of the overwritten entries goes to value, not to a."""

    @staticmethod
    def forward(ctx, a, value, index):
        ctx.index, ctx.value_shape = index, value.shape
        out = a.copy()
        target = out[index]
        if np.shape(target) != value.shape and np.size(target) == value.size:  # y[1] = tensor([v]), as PyTorch
            value = value.reshape(np.shape(target))
        out[index] = value
        return out

    @staticmethod
    def backward(ctx, grad):
        grad_a = grad.copy()
        grad_a[ctx.index] = 0
        grad_value = np.asarray(grad[ctx.index])
        if grad_value.shape != ctx.value_shape and grad_value.size == math.prod(ctx.value_shape):
            grad_value = grad_value.reshape(ctx.value_shape)
        return grad_a, grad_value


class Scatter(Function):
    """a with the entries at `index` along `axis` taken from src (np.put_along_axis)."""

    @staticmethod
    def forward(ctx, a, src, index, axis):
        ctx.index, ctx.axis, ctx.src_shape = index, axis, src.shape
        out = a.copy()
        np.put_along_axis(out, index, src[tuple(slice(0, n) for n in index.shape)], axis)
        return out

    @staticmethod
    def backward(ctx, grad):
        grad_a = grad.copy()
        np.put_along_axis(grad_a, ctx.index, 0, ctx.axis)
        grad_src = np.zeros(ctx.src_shape, grad.dtype)
        grad_src[tuple(slice(0, n) for n in ctx.index.shape)] = np.take_along_axis(grad, ctx.index, ctx.axis)
        return grad_a, grad_src


# --- linear algebra -------------------------------------------------------------------


def _right_operand(b: np.ndarray) -> np.ndarray:
    """A stacked right operand as a contiguous array: numpy's batched matmul may run outside BLAS for a
    transposed view (the math path's k^T), and the copy costs little beside the product."""
    return np.ascontiguousarray(b) if b.ndim > 2 and not b.flags.c_contiguous else b


def rows_of(a: np.ndarray) -> np.ndarray:
    """(..., N) -> (R, N), R the product of the leading dims (numpy cannot infer a -1 there when N is 0)."""
    return a.reshape(math.prod(a.shape[:-1]), a.shape[-1])


class MatMul(Function):
    """a @ b with np.matmul's rules: 1-D operands and broadcast batch dims.

    For 2-D: C = A B gives dA = dC B^T and dB = A^T dC. A 1-D operand is
    treated as a row (a) or column (b) vector and the added axis removed.
    """

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        if a.ndim >= 2 and b.ndim == 2:  # (..., n, k) @ (k, m): one GEMM over all rows, cut as Linear's are
            return row_split_matmul(rows_of(a), b).reshape(a.shape[:-1] + b.shape[-1:])
        return a @ _right_operand(b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        if a.ndim >= 2 and b.ndim == 2:  # a Linear layer's case: rows of a and grad folded together
            a_rows, g_rows = rows_of(a), rows_of(grad)  # (N, k), (N, m)
            return row_split_matmul(g_rows, b.T).reshape(a.shape), row_split_matmul(a_rows.T, g_rows)  # dA, dB
        a2 = a[None, :] if a.ndim == 1 else a  # (..., n, k)
        b2 = b[:, None] if b.ndim == 1 else b  # (..., k, m)
        g2 = grad
        if b.ndim == 1:
            g2 = np.expand_dims(g2, -1)
        if a.ndim == 1:
            g2 = np.expand_dims(g2, -2)  # (..., n, m)
        grad_a = g2 @ _right_operand(np.swapaxes(b2, -1, -2))  # (..., n, k)
        grad_b = np.swapaxes(a2, -1, -2) @ g2  # (..., k, m)
        if a.ndim == 1:
            grad_a = grad_a.squeeze(-2)
        if b.ndim == 1:
            grad_b = grad_b.squeeze(-1)
        return grad_a, grad_b


# --- argument checks: one clear error instead of a traceback from numpy ---------------


def check_broadcast(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        listed = " and ".join(str(s) for s in shapes)
        raise ValueError(f"{op}: shapes {listed} cannot be broadcast together") from None


def check_matmul(a: tuple[int, ...], b: tuple[int, ...], itemsize: int = 8) -> None:
    if len(a) == 0 or len(b) == 0:
        raise ValueError(f"matmul: both operands need at least 1 dim, got shapes {a} and {b}")
    k_b = b[0] if len(b) == 1 else b[-2]
    if a[-1] != k_b:
        raise ValueError(f"matmul: shapes {a} and {b} are not aligned ({a[-1]} != {k_b})")
    try:
        batch = np.broadcast_shapes(a[:-2], b[:-2])
    except ValueError:
        raise ValueError(f"matmul: batch dims of shapes {a} and {b} cannot be broadcast together") from None
    out = batch + (a[-2:-1] if len(a) > 1 else ()) + (b[-1:] if len(b) > 1 else ())
    check_fits("matmul", f"the product of {a} and {b}", out, itemsize, 1, "use smaller operands")


def normalize_dim(dim: int, ndim: int, op: str) -> int:
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
        raise TypeError(f"{op}: dim must be an int, got {dim!r}")
    if not -max(ndim, 1) <= dim < max(ndim, 1):
        raise IndexError(f"{op}: dim {dim} is out of range for a tensor with {ndim} dims")
    return int(dim) % max(ndim, 1)


def check_tensor(x: Any, op: str, name: str = "input") -> Node:
    """x if it is a Tensor, else one clear TypeError (as PyTorch's functions and modules take only tensors)."""
    if not isinstance(x, Node):
        raise TypeError(f"{op}: {name} must be a Tensor, got {type(x).__name__}; wrap it as ta.tensor(...)")
    return x


def check_number(value: Any, name: str, op: str, low: float = -math.inf, high: float = math.inf,
                 high_open: bool = False) -> float:
    """A finite real in [low, high] (or [low, high) when high_open), else a clear error naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{op}: {name} must be a number, got {_short(value)}")
    value = float(value)
    if not math.isfinite(value) or value < low or value > high or (high_open and value == high):
        interval = f" in [{low}, {high}{')' if high_open else ']'}" if (low, high) != (-math.inf, math.inf) else ""
        raise ValueError(f"{op}: {name} must be a finite number{interval}, got {value}")
    return value


def check_flag(value: Any, name: str, op: str) -> bool:
    """A bool argument such as keepdim, or one clear TypeError (PyTorch takes only bools there too)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{op}: {name} must be a bool, got {_short(value)}")
    return bool(value)


def normalize_dims(dim: int | tuple[int, ...] | None, ndim: int, op: str) -> tuple[int, ...]:
    """`dim` as a sorted tuple of non-negative axes; None means all of them."""
    if dim is None:
        return tuple(range(ndim))
    dims = tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
    axes = tuple(sorted({normalize_dim(d, ndim, op) for d in dims}))
    if len(axes) != len(dims):
        raise ValueError(f"{op}: dim {dim} names the same dim twice")
    return axes


def resolve_shape(shape: tuple[Any, ...], current: tuple[int, ...], op: str = "reshape") -> tuple[int, ...]:
    """A reshape target (ints, possibly one -1, or a single tuple) as a tuple of ints."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    if any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) for n in shape):
        raise TypeError(f"{op}: sizes must be ints, got {shape!r}")
    shape = tuple(int(n) for n in shape)
    size = math.prod(current)
    known = math.prod(n for n in shape if n != -1)
    if shape.count(-1) > 1 or any(n < -1 for n in shape):
        raise ValueError(f"{op}: invalid shape {shape} (at most one -1, no other negative size)")
    if -1 in shape:
        if known == 0 or size % known:
            raise ValueError(f"{op}: cannot reshape a tensor of shape {current} (size {size}) into {shape}")
        shape = tuple(size // known if n == -1 else n for n in shape)
    if math.prod(shape) != size:
        raise ValueError(f"{op}: cannot reshape a tensor of shape {current} (size {size}) into {shape}")
    return shape


def normalize_index(index: Any, shape: tuple[int, ...]) -> Any:
    """Tensors and lists in an index become numpy arrays; out-of-range ints raise IndexError."""
    items = index if isinstance(index, tuple) else (index,)
    converted = []
    for item in items:
        if isinstance(item, Node):
            item = item._data
        elif isinstance(item, list):
            item = np.asarray(item)
        if isinstance(item, np.ndarray) and item.dtype.kind not in "iub":
            raise IndexError(f"index: arrays used as indices must be integer or bool, got dtype {item.dtype}")
        converted.append(item)
    try:
        stand_in = np.lib.stride_tricks.as_strided(np.zeros(1, np.bool_), shape, (0,) * len(shape))
        stand_in[tuple(converted)]  # validate on a zero-stride stand-in of the same shape: no memory
    except IndexError as err:
        raise IndexError(f"index {index!r} is invalid for a tensor of shape {shape}: {err}") from None
    return tuple(converted) if isinstance(index, tuple) else converted[0]


# PyTorch's named tuples for ops that return (values, indices): x.max(1).values, x.max(1)[0], `_, i = x.max(1)`.
return_types = {name: namedtuple(name, ["values", "indices"])
                for name in ("max", "min", "sort", "topk", "kthvalue", "median")}

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



# --- softmax along a dim: the fused rules Tensor.softmax and functional.softmax both call -----------------

_NO_MASK = np.zeros((0, 0), dtype=np.bool_)


def _rows(a: np.ndarray) -> np.ndarray:
    """(..., N) -> contiguous (R, N): the layout every row-wise kernel takes."""
    return np.ascontiguousarray(rows_of(a))


def _keep_rows(keep: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray:
    return _NO_MASK if keep is None else _rows(np.broadcast_to(keep, shape))


class Softmax(Function):
    """Softmax over the last axis; `keep` (bool, broadcastable) masks entries out."""

    @staticmethod
    def forward(ctx, x, keep=None):
        y, _ = softmax_forward(_rows(x), _keep_rows(keep, x.shape), False)
        ctx.save_for_backward(y)
        return y.reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return softmax_backward(y, _rows(grad)).reshape(grad.shape)  # y * (g - sum(g * y))


class LogSoftmax(Function):
    """Log-softmax over the last axis; masked entries are -inf, dead rows 0."""

    @staticmethod
    def forward(ctx, x, keep=None):
        y, lse = softmax_forward(_rows(x), _keep_rows(keep, x.shape), True)
        ctx.save_for_backward(y, lse)
        return y.reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        y, lse = ctx.saved_tensors
        return log_softmax_backward(y, _rows(grad), lse).reshape(grad.shape)  # g - p * sum(g)


def _float_tensor(x: Any, op: str, name: str = "input") -> Node:
    """x as a float32 or float64 tensor, or one clear error: integer and bool inputs are refused (as PyTorch
    refuses them in softmax and layer norm), float16 too (the kernels compute in float32 or float64)."""
    x = check_tensor(x, op, name)
    if x.dtype not in (np.float32, np.float64):
        hint = "; convert it with .float()" if x.dtype.kind in "iubf" else ""
        raise TypeError(f"{op}: {name} must be float32 or float64, got {x.dtype}{hint}")
    return x


def _along_last(fn: type[Function], x: Node, dim: int, keep: np.ndarray | None) -> Node:
    """Apply a last-axis Function along `dim` by moving `dim` last and back."""
    dim = normalize_dim(dim, x.ndim, fn.__name__.lower())
    if dim == x.ndim - 1 or x.ndim == 0:
        return fn.apply(x, keep=keep)
    if keep is not None:
        keep = np.swapaxes(np.broadcast_to(keep, x.shape), dim, -1)
    return fn.apply(x.transpose(dim, -1), keep=keep).transpose(dim, -1)


def _bool_mask(mask: Any, shape: tuple[int, ...], op: str) -> np.ndarray | None:
    if mask is None:
        return None
    mask = mask._data if isinstance(mask, Node) else np.asarray(mask)
    if mask.dtype != np.bool_:
        raise TypeError(f"{op}: mask must be bool (True = keep), got dtype {mask.dtype}")
    check_broadcast(f"{op}: mask", mask.shape, shape)
    return mask


def softmax(x: Node, dim: int = -1, mask: Any = None) -> Node:
    """exp(x) / sum(exp(x)) along `dim`; entries where the bool `mask` is False get probability 0."""
    x = _float_tensor(x, "softmax")
    if x.ndim == 0:
        raise ValueError("softmax: the input needs at least one dim, got a 0-d tensor")
    return _along_last(Softmax, x, dim, _bool_mask(mask, x.shape, "softmax"))


def log_softmax(x: Node, dim: int = -1, mask: Any = None) -> Node:
    """x - logsumexp(x) along `dim`; masked entries give -inf, fully masked rows 0."""
    x = _float_tensor(x, "log_softmax")
    if x.ndim == 0:
        raise ValueError("log_softmax: the input needs at least one dim, got a 0-d tensor")
    return _along_last(LogSoftmax, x, dim, _bool_mask(mask, x.shape, "log_softmax"))


__all__ = ["Context", "Function"]
