"""Tensor: an n-dimensional array that remembers how it was computed, with every method PyTorch gives it.

One place for the whole class: its state (the array, the gradient, the graph edge, the version counter,
the hooks) and every operator and method, each a few lines that check their arguments and call one
gradient rule from ops.py (a Function: forward beside backward) or compose other methods. A reader
finds `Tensor.softmax` or `__add__` here. The engine (engine.py) records and walks the graph.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from . import rng
from .checks import (
    check_broadcast,
    check_flag,
    check_matmul,
    check_number,
    check_tensor,
    normalize_dim,
    normalize_dims,
    normalize_index,
    resolve_shape,
)
from .dtypes import DEFAULT_FLOAT, is_number, result_type
from .engine import (
    _CPU,
    CONSTANT_VERSION,
    Context,
    Function,
    Node,
    RemovableHandle,
    _float_default,
    _short,
    check_device,
    device,
    is_grad_enabled,
    no_grad,
    refresh_view,
    run_backward,
    tensor_dtype,
    view_chain,
    watch,
)
from .fused import log_softmax, softmax
from .kernels.buffers import only_view
from .ops import (
    _TYPE_NAMES,
    Abs,
    Acos,
    Acosh,
    Add,
    Asin,
    Asinh,
    Atan,
    Atanh,
    Cast,
    Cat,
    Ceil,
    Clamp,
    Clone,
    CopyInto,
    Copysign,
    CopySlices,
    Cos,
    Cosh,
    CumSum,
    Div,
    Erf,
    Exp,
    Exp2,
    Expand,
    Expm1,
    Floor,
    Fmod,
    GetItem,
    IndexAdd,
    IndexPut,
    Log,
    Log1p,
    Log2,
    Log10,
    MatMul,
    Max,
    Min,
    Mul,
    Neg,
    Permute,
    Pow,
    PowTensor,
    Relu,
    Reshape,
    Round,
    Scatter,
    Sigmoid,
    Sign,
    Sin,
    Sinh,
    Sqrt,
    Stack,
    Sub,
    Sum,
    TakeAlongDim,
    Tan,
    Tanh,
    Trunc,
    Where,
    _is_dtype_name,
    return_types,
)


def initial_gradient(output: Tensor, gradient: Any, op: str, create_graph: bool) -> Any:
    """dL/d(output) to start a backward pass from: ones for a one-element output when not given; an array,
    or a tensor under create_graph (a given tensor keeps its graph, so it can be differentiated too)."""
    if gradient is None:
        if output._data.size != 1:
            raise RuntimeError(f"{op}: grad can be implicitly created only for scalar outputs; this output has shape "
                               f"{output.shape}: pass a gradient of that shape")
        gradient = np.ones(output.shape, dtype=output.dtype)
    if isinstance(gradient, Tensor) and create_graph:
        if gradient.shape != output.shape:
            raise RuntimeError(f"{op}: grad has shape {gradient.shape}, the output has shape {output.shape}")
        return gradient if gradient.dtype == output.dtype else gradient.astype(output.dtype)
    array = np.asarray(gradient._data if isinstance(gradient, Tensor) else gradient, dtype=output.dtype)
    if array.shape != output.shape:
        raise ValueError(f"{op}: grad has shape {array.shape}, the output has shape {output.shape}")
    return Tensor._result(array, None) if create_graph else array


_SYMBOLS = {Add: "+", Sub: "-", Mul: "*", Div: "/"}


class Tensor(Node):
    """An n-dimensional array that remembers how it was computed.

    Tensor(data, requires_grad=False, dtype=None), as torch.Tensor: a nested
    list or a number sequence becomes float32 (ints and bools too); a numpy
    array keeps its dtype and is used without a copy; Tensor(2, 3) is a
    tensor of zeros of shape (2, 3). Integer and bool tensors (indices,
    masks) cannot require grad. `ta.tensor(data)` infers the dtype instead.

    Fields: `_data` is the numpy array; `.data` is a detached Tensor sharing
    it (PyTorch's meaning); `.numpy()` gives the array.
    """

    __array_priority__ = 1000  # so `ndarray + Tensor` calls Tensor.__radd__
    __hash__ = object.__hash__  # identity hash, although == is elementwise
    # what a new tensor holds until it is set (read from the class, so making a tensor sets four fields only)
    grad, _base, _retains_grad, _view_of = None, None, False, None
    _hooks: dict | tuple = ()  # a dict of its own once a hook is registered
    _private_view = staticmethod(only_view)  # a gradient in a pooled buffer nothing else views becomes .grad as it is

    def __init__(self, *data: Any, requires_grad: bool = False, dtype: Any = None):
        if len(data) != 1 or (isinstance(data[0], int) and not isinstance(data[0], bool)):  # Tensor(2, 3), Tensor()
            arr = self._zeros_of_size(data)  # Tensor(2, 3) and Tensor() as torch.Tensor: a shape
        else:
            arr = self._array_of(data[0])
        if dtype is not None:
            arr = arr.astype(tensor_dtype(dtype, "Tensor"), copy=False)
        if arr.dtype.kind not in "fiub":
            raise TypeError(f"Tensor: unsupported dtype {arr.dtype} (expected a float, integer or bool array), "
                            f"from {_short(data)}")
        if requires_grad and arr.dtype.kind != "f":
            raise TypeError(f"Tensor: only floating-point tensors can require grad, got dtype {arr.dtype}")
        self._init(arr, None)
        self.requires_grad = bool(requires_grad)

    @staticmethod
    def _zeros_of_size(size: tuple) -> np.ndarray:
        if not size:
            return np.zeros((0,), np.float32)  # torch.Tensor() is empty
        if any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0 for n in size):
            raise TypeError(f"Tensor: expected one sequence or array, or sizes (non-negative ints), got "
                            f"{_short(size)}")
        return np.zeros(tuple(int(n) for n in size), np.float32)

    @staticmethod
    def _array_of(data: Any) -> np.ndarray:
        if isinstance(data, Tensor):
            return data._data
        if isinstance(data, (np.ndarray, np.generic)):
            return np.asarray(data)
        if isinstance(data, (float, bool, complex)):
            raise TypeError(f"Tensor: data must be a sequence or an array, got {type(data).__name__} {data!r}; "
                            "for a 0-d tensor use ta.tensor(value)")
        try:
            arr = np.asarray(data)
        except ValueError as err:  # ragged nesting
            raise ValueError(f"Tensor: data must be a number or a rectangular nested list, got "
                             f"{_short(data)} ({err})") from None
        return arr.astype(np.float32) if arr.dtype.kind in "fiub" else arr  # torch.Tensor(list) is float32

    def _init(self, arr: np.ndarray, ctx: Context | None) -> None:
        self._data, self.grad, self.requires_grad, self._ctx = arr, None, ctx is not None, ctx
        self._version_counter = [0]  # shared by every view of the same memory
        # _view_of: (parent, view op, its arguments, root, root's node then) for a view made by an op

    @classmethod
    def _result(cls, data: np.ndarray, ctx: Context | None) -> Tensor:
        """An op's output: the array is the op's own, so __init__'s checks are skipped."""
        t = object.__new__(Tensor)  # _init's fields, set here without a call: this runs once per op
        t._data, t.requires_grad, t._ctx, t._version_counter = data, ctx is not None, ctx, [0]
        return t

    @staticmethod
    def _constant(data: np.ndarray) -> Tensor:
        """An operand made from a number for one op (the 0.5 of x * 0.5): no list of its own to count versions."""
        t = object.__new__(Tensor)
        t._data, t.requires_grad, t._ctx, t._version_counter = data, False, None, CONSTANT_VERSION
        return t

    @classmethod
    def _wrap(cls, value: Any) -> Tensor:
        """A number or array as a tensor with no history: floats float32 unless an array says otherwise."""
        if isinstance(value, Tensor):
            return value
        arr = np.asarray(value) if isinstance(value, (np.ndarray, np.generic)) else _float_default(np.asarray(value))
        return cls._result(arr, None)

    # --- what it is -------------------------------------------------------
    shape = property(lambda self: self._data.shape)
    dtype = property(lambda self: self._data.dtype)
    ndim = property(lambda self: self._data.ndim)
    is_leaf = property(lambda self: self._ctx is None)
    @property
    def grad_fn(self) -> Context | None:
        """The node that made this tensor (None for a leaf); a view whose base changed in place since is read
        through the base's new node, as PyTorch regenerates a view's grad_fn when it is asked for."""
        seen = self._view_of
        if seen is not None and seen[3]._ctx is not seen[4] and is_grad_enabled():
            refresh_view(self)
        return self._ctx

    _version = property(lambda self: self._version_counter[0])
    retains_grad = property(lambda self: self._retains_grad)
    device = property(lambda self: _CPU)
    is_cuda = property(lambda self: False)

    @property
    def data(self) -> Tensor:
        """A tensor sharing this one's memory, cut from the graph; changes through it are not tracked
        (PyTorch's `.data`). The numpy array is `.numpy()`."""
        return Tensor._result(self._data, None)

    @data.setter
    def data(self, value: Any) -> None:
        arr = value._data if isinstance(value, Tensor) else np.asarray(value)
        if self.requires_grad and arr.dtype.kind != "f":
            raise TypeError(f".data = ...: a tensor that requires grad needs float data, got dtype {arr.dtype}")
        self._data = arr

    def bump_version(self) -> None:
        """Count one in-place change of this tensor's memory (and of every view sharing it)."""
        self._refuse_constant("an in-place change")
        self._version_counter[0] += 1

    def _refuse_constant(self, op: str) -> None:
        if self._version_counter is CONSTANT_VERSION:
            raise RuntimeError(f"{op}: a number an operator turned into a tensor (the 0.5 of x * 0.5) cannot be "
                               "changed in place: it belongs to the op that made it")

    def numel(self) -> int:
        """The number of elements (PyTorch's name; `size()` is the shape)."""
        return self._data.size

    nelement = numel

    def size(self, dim: int | None = None) -> Any:
        """The shape, as PyTorch's `size()`; `size(dim)` is one dim's length."""
        if dim is None:
            return self._data.shape
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
            raise TypeError(f"size: dim must be an int, got {dim!r}")
        if not -self.ndim <= dim < max(self.ndim, 1) or self.ndim == 0:
            raise IndexError(f"size: dim {dim} is out of range for a tensor with {self.ndim} dims")
        return self._data.shape[dim]

    def dim(self) -> int:
        return self._data.ndim

    def tolist(self) -> Any:
        return self._data.tolist()

    def _scalar(self, kind: str) -> Any:
        if self._data.size != 1:
            raise ValueError(f"{kind}(): only a tensor with one element can be converted, this one has shape "
                             f"{self.shape}")
        return self._data.item()

    def __float__(self) -> float:
        return float(self._scalar("float"))

    def __int__(self) -> int:
        return int(self._scalar("int"))

    def __bool__(self) -> bool:
        return bool(self._scalar("bool"))

    def __index__(self) -> int:
        if self.dtype.kind not in "iu":
            raise TypeError(f"only integer tensors of one element can be used as an index, not {self.dtype}")
        return int(self._scalar("index"))

    def numpy(self, *, force: bool = False) -> np.ndarray:
        """The numpy array itself (shared memory). As in PyTorch, refused on a tensor that requires grad (a write
        into the array would change values the graph relies on, unseen): use detach().numpy(), or force=True
        for a copy."""
        if self.requires_grad:
            if force:
                return self._data.copy()
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() "
                               "instead.")
        return self._data

    def item(self) -> Any:
        if self._data.size != 1:
            raise ValueError(f"item: only a tensor with one element has an item, this one has shape {self.shape}")
        return self._data.item()

    def detach(self) -> Tensor:
        """The same memory and version counter, cut from the graph."""
        t = Tensor._result(self._data, None)
        t._version_counter, t._base = self._version_counter, self if self._base is None else self._base
        return t

    def detach_(self) -> Tensor:
        self._ctx, self.requires_grad = None, False
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if requires_grad and self.dtype.kind != "f":
            raise RuntimeError(f"requires_grad_: only floating-point tensors can require grad, got {self.dtype}")
        if not requires_grad and self._ctx is not None:
            raise RuntimeError("requires_grad_(False): only a leaf can stop requiring grad; use detach()")
        self.requires_grad = bool(requires_grad)
        return self

    def register_hook(self, hook: Callable) -> RemovableHandle:
        """hook(grad) runs when this tensor's gradient is computed; returning a tensor replaces the gradient.
        Returns a handle whose remove() unregisters it."""
        if not self.requires_grad:
            raise RuntimeError("register_hook: cannot register a hook on a tensor that doesn't require gradient")
        if not callable(hook):
            raise TypeError(f"register_hook: hook must be callable, got {_short(hook)}")
        if not isinstance(self._hooks, dict):
            self._hooks = {}
        if self._ctx is not None:
            watch(self)  # backward runs the hooks when it reaches this tensor's node
        handle = RemovableHandle(self._hooks)
        self._hooks[handle.id] = hook
        return handle

    def retain_grad(self) -> None:
        """Keep this non-leaf tensor's gradient in `.grad` after backward (a leaf keeps it anyway)."""
        if not self.requires_grad:
            raise RuntimeError("retain_grad: can't retain_grad on a tensor that doesn't require gradient")
        if self._ctx is not None:
            self._retains_grad = True
            watch(self)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self._data if dtype is None else self._data.astype(dtype)

    def __format__(self, spec: str) -> str:
        """f"{t:.4f}" formats a one-element tensor's value, as PyTorch does; other tensors print as str(t)."""
        if self._data.size == 1 and self.ndim == 0:
            return format(self._data.item(), spec)
        return format(str(self), spec)

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        body = np.array2string(self._data, precision=4, separator=", ", prefix="tensor(", threshold=50)
        extra = "" if self.dtype in (np.float32, np.int64, np.bool_) else f", dtype=ta.{self.dtype}"
        if self._ctx is not None:
            extra += f", grad_fn=<{self._ctx.name()}>"
        elif self.requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    # --- the backward pass ---------------------------------------------------
    def backward(self, gradient: Any = None, retain_graph: bool | None = None, create_graph: bool = False,
                 inputs: Any = None, grad: Any = None) -> None:
        """Accumulate d(self)/d(leaf) into the `.grad` of every leaf that requires grad (or of `inputs` only).

        `gradient` is dL/dself; it may be omitted only when self has one element. With `create_graph=True`
        the gradients are tensors with their own graph, so they can be differentiated again; the graph is
        then kept (`retain_graph` defaults to `create_graph`, as in PyTorch).
        """
        from_user = grad if gradient is None else gradient
        if not self.requires_grad:
            raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn "
                               "(backward: this tensor has no graph behind it)")
        root_grad = initial_gradient(self, from_user, "backward", create_graph)
        if inputs is not None:
            inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
            if not inputs or not all(isinstance(t, Tensor) and t.requires_grad for t in inputs):
                raise RuntimeError("backward: inputs must be a non-empty sequence of tensors that require grad")
        run_backward([self], [root_grad], create_graph if retain_graph is None else bool(retain_graph),
                     bool(create_graph), accumulate_into=inputs)

    def zero_grad(self) -> None:
        self.grad = None


    # --- arithmetic (gradient rules in py) ---------------------------------
    def _operand(self, other: Any) -> Tensor:
        """`other` as a tensor; a plain number takes this tensor's dtype when that loses nothing (PyTorch's
        promotion: a float32 tensor times 0.5 stays float32)."""
        if isinstance(other, Tensor):
            return other
        if is_number(other):
            return Tensor._result(np.asarray(other, dtype=result_type(self, other)), None)
        if isinstance(other, (list, tuple)):
            return Tensor._wrap(np.asarray(other))
        return Tensor._wrap(other)

    def _promoted(self, other: Any) -> tuple[Tensor, Tensor]:
        """Both operands in the dtype PyTorch computes `self op other` in (a cast is a node of the graph)."""
        kind, own = type(other), self._data.dtype
        if kind is Tensor and other._data.dtype == own:
            return self, other
        if (kind is float or kind is int) and own.kind == "f":  # the common case: x * 0.5 keeps x's dtype
            return self, Tensor._constant(np.asarray(other, own))
        number = not isinstance(other, Tensor)
        dtype = result_type(self, other)
        other = self._operand(other)
        if number and other.dtype != dtype:
            other = Tensor._result(other._data.astype(dtype), None)
        return self.astype(dtype), other.astype(dtype)

    def _binary(self, op: type[Function], other: Any, reverse: bool = False) -> Tensor:
        kind = type(other)
        if kind is float and not reverse and self._data.dtype.kind == "f":  # x * 0.5: the commonest case, direct
            return op.apply(self, Tensor._constant(np.asarray(other, self._data.dtype)))
        if kind is not Tensor and not isinstance(other, (Tensor, np.ndarray, np.generic, complex)) and not is_number(
                other):
            if hasattr(kind, "__ta_function__"):  # a traced stand-in (flex attention's modifiers): its own operator
                return NotImplemented
            # a list, a (values, indices) pair, None or a string: PyTorch's TypeError, not a guess at a tensor
            sides = (type(other).__name__, "Tensor") if reverse else ("Tensor", type(other).__name__)
            raise TypeError(f"unsupported operand type(s) for {_SYMBOLS[op]}: '{sides[0]}' and '{sides[1]}'")
        a, b = self._promoted(other)
        if op is Div and a._data.dtype.kind != "f":  # true division of integers gives the default float
            a, b = a.astype(DEFAULT_FLOAT), b.astype(DEFAULT_FLOAT)
        if reverse:
            a, b = b, a
        sa, sb = a._data.shape, b._data.shape
        if sa != sb and sa and sb:  # a 0-d operand broadcasts to anything
            check_broadcast(op.__name__.lower(), sa, sb)
        return op.apply(a, b)

    def __add__(self, other): return self._binary(Add, other)
    def __radd__(self, other): return self._binary(Add, other, reverse=True)
    def __sub__(self, other): return self._binary(Sub, other)
    def __rsub__(self, other): return self._binary(Sub, other, reverse=True)
    def __mul__(self, other): return self._binary(Mul, other)
    def __rmul__(self, other): return self._binary(Mul, other, reverse=True)
    def __truediv__(self, other): return self._binary(Div, other)
    def __rtruediv__(self, other): return self._binary(Div, other, reverse=True)
    def __neg__(self): return Neg.apply(self)

    def __pow__(self, exponent: Any) -> Tensor:
        if isinstance(exponent, Tensor):  # a tensor exponent: both operands promoted, broadcast
            a, b = self._promoted(exponent)
            if a.dtype.kind == "b":
                raise NotImplementedError('"pow" not implemented for \'Bool\' (as PyTorch); convert with .int()')
            check_broadcast("pow", a.shape, b.shape)
            if a.dtype.kind != "f" and b.dtype.kind != "f" and np.any(b._data < 0):  # PyTorch's integer rule:
                base, power = np.broadcast_arrays(a._data, b._data)  # 1 ** -n = 1, (-1) ** -n = +-1, else 0
                with np.errstate(all="ignore"):
                    whole = np.power(base, np.maximum(power, 0))
                inverse = np.where(base == 1, 1, np.where(base == -1, np.where(power % 2, -1, 1), 0))
                return Tensor._result(np.where(power < 0, inverse, whole).astype(whole.dtype), None)
            return PowTensor.apply(a, b)
        if isinstance(exponent, (bool, str)) or not isinstance(exponent, (int, float, np.number)):
            raise TypeError(f"pow: the exponent must be a number or a tensor, got {exponent!r:.40}")
        base = self
        if self.dtype.kind in "iub":
            if isinstance(exponent, (float, np.floating)):  # an integer tensor to a float power: float32, as PyTorch
                base = self.astype(DEFAULT_FLOAT)
            elif exponent < 0:
                raise RuntimeError("pow: Integers to negative integer powers are not allowed.")
        return Pow.apply(base, exponent=exponent)

    def __rpow__(self, base: Any) -> Tensor:
        """number ** tensor, as PyTorch: the base takes the tensor's dtype (a float base and an integer
        tensor give float32)."""
        if isinstance(base, (bool, str)) or not is_number(base):
            raise TypeError(f"unsupported operand type(s) for ** or pow(): '{type(base).__name__}' and 'Tensor'")
        return self._operand(base) ** self

    def __rmod__(self, other: Any) -> Tensor:
        return self._operand(other) % self

    def matmul(self, other: Any) -> Tensor:
        other = self._operand(other)
        check_matmul(self.shape, other.shape, self.dtype.itemsize)
        if other.dtype != self.dtype:
            raise RuntimeError(f"matmul: expected both operands to have the same dtype, got {self.dtype} and "
                               f"{other.dtype} (cast one with .to(dtype), as PyTorch requires)")
        return MatMul.apply(self, other)

    def __matmul__(self, other): return self.matmul(other)
    def __rmatmul__(self, other): return self._operand(other).matmul(self)

    # comparisons give bool tensors with no history
    def __lt__(self, other): return Tensor(self._data < self._operand(other)._data)
    def __le__(self, other): return Tensor(self._data <= self._operand(other)._data)
    def __gt__(self, other): return Tensor(self._data > self._operand(other)._data)
    def __ge__(self, other): return Tensor(self._data >= self._operand(other)._data)
    def __eq__(self, other): return Tensor(self._data == self._operand(other)._data)  # type: ignore[override]
    def __ne__(self, other): return Tensor(self._data != self._operand(other)._data)  # type: ignore[override]

    # the same by name, as torch's x.add(y, alpha=2), x.mul(y), x.eq(y), ...
    def add(self, other, alpha=1): return self + (other if alpha == 1 else self._operand(other) * alpha)
    def sub(self, other, alpha=1): return self - (other if alpha == 1 else self._operand(other) * alpha)
    def mul(self, other): return self * other
    def div(self, other: Any, rounding_mode: str | None = None) -> Tensor:
        """self / other; rounding_mode "trunc" or "floor" rounds the quotient (integers stay integers)."""
        if rounding_mode is None:
            return self / other
        if rounding_mode not in ("trunc", "floor"):
            raise ValueError(f'div expected rounding_mode to be one of None, "trunc", or "floor" but found '
                             f"{rounding_mode!r}")
        a, b = self._promoted(other)
        quotient = a / b
        rounded = quotient.trunc() if rounding_mode == "trunc" else quotient.floor()
        return rounded if a.dtype.kind == "f" else rounded.astype(a.dtype)
    def neg(self): return -self
    def pow(self, exponent): return self ** exponent
    def lt(self, other): return self < other
    def le(self, other): return self <= other
    def gt(self, other): return self > other
    def ge(self, other): return self >= other
    def eq(self, other): return self == other
    def ne(self, other): return self != other

    # --- elementwise functions ----------------------------------------------
    # integer and bool inputs compute in the default float (float32), as PyTorch's: _float_op
    def exp(self): return Exp.apply(self) if self._data.dtype.kind == "f" else self._float_op(Exp)
    def log(self): return Log.apply(self) if self._data.dtype.kind == "f" else self._float_op(Log)
    def sqrt(self): return Sqrt.apply(self) if self._data.dtype.kind == "f" else self._float_op(Sqrt)
    def tanh(self): return Tanh.apply(self) if self._data.dtype.kind == "f" else self._float_op(Tanh)
    def sigmoid(self): return Sigmoid.apply(self) if self._data.dtype.kind == "f" else self._float_op(Sigmoid)
    def relu(self): return Relu.apply(self)

    def astype(self, dtype: Any) -> Tensor:
        """A differentiable cast: the gradient flows back in this tensor's dtype."""
        dtype = tensor_dtype(dtype, "astype")
        return self if dtype == self.dtype else Cast.apply(self, dtype=dtype)

    def float(self): return self.astype(np.float32)
    def double(self): return self.astype(np.float64)

    # --- reductions ---------------------------------------------------------
    def sum(self, dim: int | tuple[int, ...] | None = None, keepdim: bool = False, *, dtype: Any = None,
            axis: Any = None) -> Tensor:
        """The sum over `dim` (numpy's `axis=` too); `dtype` casts first, as PyTorch's."""
        dim = _dim_or_axis(dim, axis, "sum")
        keepdim = check_flag(keepdim, "keepdim", "sum")
        x = self if dtype is None else self.astype(dtype)
        return Sum.apply(x, axis=normalize_dims(dim, self.ndim, "sum"), keepdim=keepdim)

    def mean(self, dim: int | tuple[int, ...] | None = None, keepdim: bool = False, *, dtype: Any = None,
             axis: Any = None) -> Tensor:
        dim = _dim_or_axis(dim, axis, "mean")
        if dtype is not None:
            return self.astype(dtype).mean(dim, keepdim)
        if self._data.dtype.kind != "f":
            raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating point "
                               f"or complex dtype. Got: {self.dtype} (give dtype=, or call .float() first)")
        axis = normalize_dims(dim, self.ndim, "mean")
        check_flag(keepdim, "keepdim", "mean")
        count = math.prod(self.shape[a] for a in axis)
        return self.sum(dim, keepdim) * (1.0 / count if count else math.nan)  # the mean of nothing is NaN

    def amax(self, dim: int | tuple[int, ...] | None = None, keepdim: bool = False) -> Tensor:
        """Largest value over `dim` (all dims by default); the gradient is split evenly among tied maxima."""
        keepdim = check_flag(keepdim, "keepdim", "amax")
        return Max.apply(self, axis=self._nonempty_dims(dim, "amax"), keepdim=keepdim)

    def amin(self, dim: int | tuple[int, ...] | None = None, keepdim: bool = False) -> Tensor:
        """Smallest value over `dim` (all dims by default); the gradient is split evenly among tied minima."""
        keepdim = check_flag(keepdim, "keepdim", "amin")
        return Min.apply(self, axis=self._nonempty_dims(dim, "amin"), keepdim=keepdim)

    def max(self, dim: Any = None, keepdim: bool = False) -> Any:
        """x.max(): the largest value; x.max(dim): PyTorch's (values, indices) named tuple, the gradient
        going to the index returned; x.max(other): the elementwise maximum."""
        if isinstance(dim, Tensor):
            return maximum(self, dim)
        if dim is None:
            check_flag(keepdim, "keepdim", "max")
            return self.amax()
        return self._extreme(np.argmax, "max", dim, keepdim)

    def min(self, dim: Any = None, keepdim: bool = False) -> Any:
        """As max: x.min(), x.min(dim) -> (values, indices), x.min(other)."""
        if isinstance(dim, Tensor):
            return minimum(self, dim)
        if dim is None:
            check_flag(keepdim, "keepdim", "min")
            return self.amin()
        return self._extreme(np.argmin, "min", dim, keepdim)

    def _extreme(self, arg: Any, name: str, dim: int, keepdim: bool) -> Any:
        keepdim = check_flag(keepdim, "keepdim", name)
        if isinstance(dim, (tuple, list)):
            raise TypeError(f"{name}: dim must be one int when indices are returned, got {dim!r}; use amax/amin")
        axis = self._nonempty_dims(dim, name)[0] if self.ndim else 0
        if self.ndim == 0:
            return return_types[name](self.clone(), Tensor._result(np.zeros((), np.int64), None))
        index = arg(self._data, axis=axis, keepdims=True).astype(np.int64)  # the first NaN wins, as in PyTorch
        return self._picked(name, index, axis, keepdim)

    def _picked(self, name: str, index: np.ndarray, axis: int, keepdim: bool) -> Any:
        """(values at `index` along `axis`, index) as PyTorch's named tuple; values carry the gradient."""
        values = TakeAlongDim.apply(self, indices=index, axis=axis)
        if not keepdim:
            values, index = values.squeeze(axis), np.squeeze(index, axis)
        return return_types[name](values, Tensor._result(index, None))

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = False) -> Any:
        """(values, indices) sorted along `dim`; NaN sorts as the largest value, as in PyTorch."""
        axis = normalize_dim(dim, self.ndim, "sort")
        check_flag(descending, "descending", "sort")
        data = self._data if self.ndim else self._data.reshape(1)
        order = np.argsort(data, axis=axis, kind="stable")
        if descending:  # reversed ascending order keeps NaN first; ties keep their order
            order = np.flip(np.argsort(np.flip(data, axis), axis=axis, kind="stable"), axis)
            order = data.shape[axis] - 1 - order if data.shape[axis] else order
        order = order.astype(np.int64).reshape(self.shape)
        values = TakeAlongDim.apply(self, indices=order, axis=axis) if self.ndim else self.clone()
        return return_types["sort"](values, Tensor._result(order, None))

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
        return self.sort(dim, descending, stable).indices

    def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False) -> Any:
        """(values, indices) of the k-th smallest entry (k from 1) along `dim`."""
        axis = normalize_dim(dim, self.ndim, "kthvalue")
        length = self.shape[axis] if self.ndim else 1
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= length:
            raise IndexError(f"kthvalue: k must be an int in [1, {length}] (the length of dim {dim}), got {k!r}")
        order = self.sort(dim).indices._data
        index = np.take(order, [k - 1], axis=axis) if self.ndim else order.reshape(())
        return self._picked("kthvalue", index, axis, check_flag(keepdim, "keepdim", "kthvalue")) if self.ndim \
            else return_types["kthvalue"](self.clone(), Tensor._result(np.zeros((), np.int64), None))

    def median(self, dim: int | None = None, keepdim: bool = False) -> Any:
        """The lower median (PyTorch's: no average of the two middle values); NaN if the row holds NaN.
        x.median() is a value; x.median(dim) is (values, indices)."""
        if dim is None:
            flat = self.reshape(-1)
            if flat.shape[0] == 0:
                raise ValueError("median: the tensor is empty")
            return flat.median(0).values
        axis = normalize_dim(dim, self.ndim, "median")
        self._nonempty_dims(dim, "median")
        if self.ndim == 0:
            return return_types["median"](self.clone(), Tensor._result(np.zeros((), np.int64), None))
        order = np.argsort(self._data, axis=axis, kind="stable")
        index = np.take(order, [(self.shape[axis] - 1) // 2], axis=axis)
        if self.dtype.kind == "f":
            nan = np.isnan(self._data)
            has_nan = nan.any(axis=axis, keepdims=True)
            index = np.where(has_nan, np.argmax(nan, axis=axis, keepdims=True), index)
        return self._picked("median", index.astype(np.int64), axis, check_flag(keepdim, "keepdim", "median"))

    def var(self, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *, correction: Any = None) -> Tensor:
        """Variance with PyTorch's default correction=1 (Bessel's, the unbiased estimate); correction=0 is the
        population variance. `unbiased=False` is the older spelling of correction=0."""
        if isinstance(dim, bool):  # x.var(False): the old positional `unbiased`
            dim, unbiased = None, dim
        if unbiased is not None and correction is not None:
            raise TypeError("var: give unbiased or correction, not both")
        correction = (1 if unbiased is None or unbiased else 0) if correction is None else correction
        correction = check_number(correction, "correction", "var", low=0)
        if self._data.dtype.kind != "f":
            raise RuntimeError(f"std and var only support floating point and complex dtypes, got {self.dtype}")
        axis = normalize_dims(dim, self.ndim, "var")
        count = math.prod(self.shape[a] for a in axis)
        centred = self - self.mean(axis, keepdim=True)
        return (centred * centred).sum(axis, keepdim) * (1.0 / (count - correction) if count > correction
                                                         else math.nan if count == 0 else math.inf)

    def std(self, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *, correction: Any = None) -> Tensor:
        """Standard deviation: the square root of var (PyTorch's default correction=1)."""
        return self.var(dim, unbiased, keepdim, correction=correction).sqrt()

    def all(self, dim: int | None = None, keepdim: bool = False, **numpy_args: Any) -> Tensor:
        """True where every entry along `dim` (or in the tensor) is non-zero; np.all(tensor) works too."""
        dim = numpy_args.get("axis", dim)
        axis = None if dim is None else normalize_dim(dim, self.ndim, "all")
        return Tensor._result(np.asarray(np.all(self._data, axis=axis, keepdims=keepdim and dim is not None)), None)

    def any(self, dim: int | None = None, keepdim: bool = False, **numpy_args: Any) -> Tensor:
        dim = numpy_args.get("axis", dim)
        axis = None if dim is None else normalize_dim(dim, self.ndim, "any")
        return Tensor._result(np.asarray(np.any(self._data, axis=axis, keepdims=keepdim and dim is not None)), None)

    def unique(self, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False,  # noqa: A002
               dim: int | None = None) -> Any:
        if dim is not None:
            raise NotImplementedError("unique: dim is not supported here; use unique() on the flattened tensor")
        values, inverse, counts = np.unique(self._data, return_inverse=True, return_counts=True)
        out = [Tensor._result(values, None)]
        if return_inverse:
            out.append(Tensor._result(inverse.reshape(self.shape).astype(np.int64), None))
        if return_counts:
            out.append(Tensor._result(counts.astype(np.int64), None))
        return out[0] if len(out) == 1 else tuple(out)

    def nonzero(self, as_tuple: bool = False) -> Any:
        if self.ndim == 0 and not as_tuple:  # PyTorch: one row per nonzero element, no column for a 0-d tensor
            return Tensor._result(np.zeros((int(bool(self._data)), 0), np.int64), None)
        found = np.nonzero(self._data if self.ndim else self._data.reshape(1))
        if as_tuple:
            return tuple(Tensor._result(i.astype(np.int64), None) for i in found)
        return Tensor._result(np.stack(found, axis=1).astype(np.int64) if found else np.zeros((0, 0), np.int64),
                              None)

    def cumsum(self, dim: int, *, dtype: Any = None) -> Tensor:
        """Running sums along `dim`; `dtype` casts the input first, as PyTorch's."""
        if dtype is not None:
            return self.astype(dtype).cumsum(dim)
        axis = normalize_dim(dim, self.ndim, "cumsum")
        if self.ndim == 0:  # the cumulative sum of one number is itself, 0-d (integers as int64, as PyTorch)
            return self.astype(np.int64) if self.dtype.kind in "iub" else self.clone()
        return CumSum.apply(self, axis=axis)

    def _along_last(self, dim: int, name: str) -> tuple[Tensor, int, tuple[int, ...]]:
        """self with `dim` moved last, the axis, and the permutation that puts it back."""
        axis = normalize_dim(dim, self.ndim, name)
        order = tuple(i for i in range(self.ndim) if i != axis) + (axis,)
        back = tuple(int(i) for i in np.argsort(order))
        return (self.permute(order) if axis != self.ndim - 1 else self), axis, back

    def prod(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None, axis: Any = None) -> Tensor:
        """The product over `dim` (everything when None), as a tree of products: exact with zeros, and
        differentiable twice; integer and bool inputs give int64, as PyTorch."""
        dim = _dim_or_axis(dim, axis, "prod")
        x = self if dtype is None else self.astype(dtype)
        if x.dtype.kind in "biu" and dtype is None:
            x = x.astype(np.int64)
        if dim is None:
            return x.reshape(-1).prod(0)
        keepdim = check_flag(keepdim, "keepdim", "prod")
        if x.ndim == 0:
            return x.clone()
        y, axis_, back = x._along_last(dim, "prod")
        while y.shape[-1] > 1:  # pair neighbours up: log2(n) products
            if y.shape[-1] % 2:
                y = cat([y, Tensor._result(np.ones(y.shape[:-1] + (1,), y.dtype), None)], dim=-1)
            y = y[..., 0::2] * y[..., 1::2]
        if y.shape[-1] == 0:  # the product of nothing is 1 (still in the graph: its gradient, empty, flows back)
            y = y.sum(-1, keepdim=True) * 0 + 1
        out = y.squeeze(-1)
        return out.unsqueeze(axis_) if keepdim else out

    def _scan(self, dim: int, name: str, combine: Any) -> Tensor:
        """The inclusive scan of `combine` along `dim` (Hillis-Steele: log2(n) steps of whole-tensor ops)."""
        if self.ndim == 0:
            return self.clone()
        y, _, back = self._along_last(dim, name)
        n, step = y.shape[-1], 1
        while step < n:
            y = cat([y[..., :step], combine(y[..., step:], y[..., :n - step])], dim=-1)
            step *= 2
        return y.permute(back) if back != tuple(range(self.ndim)) else y

    def cumprod(self, dim: int, *, dtype: Any = None) -> Tensor:
        """Running products along `dim`; integers and bools give int64, as PyTorch."""
        x = self if dtype is None else self.astype(dtype)
        if x.dtype.kind in "biu" and dtype is None:
            x = x.astype(np.int64)
        return x._scan(dim, "cumprod", lambda a, b: a * b)

    def logcumsumexp(self, dim: int) -> Tensor:
        """log(cumsum(exp(x))) along `dim`, never overflowing: a scan of logaddexp (floats only, as PyTorch)."""
        if self.dtype.kind != "f":
            raise RuntimeError(f"logcumsumexp: not implemented for {self.dtype} input (as PyTorch); convert it "
                               "with .float()")
        return self._scan(dim, "logcumsumexp", _logaddexp)

    def cummax(self, dim: int) -> Any:
        """(running maxima, their indices) along `dim`: ties and NaN as PyTorch (the latest tie; a NaN stays)."""
        return self._running("cummax", dim, np.greater)

    def cummin(self, dim: int) -> Any:
        return self._running("cummin", dim, np.less)

    def _running(self, name: str, dim: int, better: Any) -> Any:
        axis = normalize_dim(dim, self.ndim, name)
        data = np.moveaxis(self._data if self.ndim else self._data.reshape(1), axis if self.ndim else 0, -1)
        index = np.zeros(data.shape, np.int64)
        if data.shape[-1]:
            best, current = data[..., 0].copy(), np.zeros(data.shape[:-1], np.int64)
            for j in range(data.shape[-1]):
                v = data[..., j]
                take = (better(v, best) | (v == best) | np.isnan(v)) & ~np.isnan(best) if data.dtype.kind == "f" \
                    else better(v, best) | (v == best)
                best, current = np.where(take, v, best), np.where(take, j, current)
                index[..., j] = current
        index = np.moveaxis(index, -1, axis) if self.ndim else index.reshape(())
        values = self.gather(axis, Tensor._result(index, None)) if self.ndim else self.clone()  # ties repeat
        return return_types[name](values, Tensor._result(index, None))

    def fmod(self, other: Any) -> Tensor:
        """C's fmod (the sign of self), as torch.fmod; differentiable in both for floats."""
        other = self._operand(other)
        a, b = self._promoted(other)
        if a.dtype.kind == "b":
            raise NotImplementedError('"fmod" not implemented for \'Bool\' (as PyTorch); convert with .int()')
        check_broadcast("fmod", a.shape, b.shape)
        if a.dtype.kind in "biu":
            if np.any(b._data == 0):
                raise RuntimeError("fmod: ZeroDivisionError (an integer divided by 0)")
            return Tensor._result(np.fmod(a._data, b._data), None)
        return Fmod.apply(a, b)

    def copysign(self, other: Any) -> Tensor:
        """|self| with the sign of other (its sign bit: -0.0 counts as negative), as torch.copysign."""
        other = self._operand(other)
        a, b = self._promoted(other)
        if a.dtype.kind != "f":
            a, b = a.astype(DEFAULT_FLOAT), b.astype(DEFAULT_FLOAT)
        check_broadcast("copysign", a.shape, b.shape)
        return Copysign.apply(a, b)

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        """The entries (i, i + offset) of dims dim1, dim2, as a last dim (torch.diagonal). A copy here, not
        a view: an in-place write to it does not reach self."""
        if self.ndim < 2:
            raise RuntimeError(f"diagonal: needs at least 2 dims, got shape {self.shape}")
        a, b = normalize_dim(dim1, self.ndim, "diagonal"), normalize_dim(dim2, self.ndim, "diagonal")
        if a == b:
            raise RuntimeError(f"diagonal: dim1 and dim2 cannot be the same dim ({dim1}, {dim2})")
        offset = int(check_number(offset, "offset", "diagonal"))
        order = tuple(i for i in range(self.ndim) if i not in (a, b)) + (a, b)
        x = self.permute(order)
        rows0, cols0 = max(-offset, 0), max(offset, 0)
        n = max(0, min(x.shape[-2] - rows0, x.shape[-1] - cols0))
        i = np.arange(n)
        return x[..., rows0 + i, cols0 + i]

    def sin(self) -> Tensor: return Sin.apply(self) if self._data.dtype.kind == "f" else self._float_op(Sin)
    def cos(self) -> Tensor: return Cos.apply(self) if self._data.dtype.kind == "f" else self._float_op(Cos)
    def _float_op(self, rule: type[Function]) -> Tensor:  # integer and bool inputs give float32, as PyTorch
        return rule.apply(self if self.dtype.kind == "f" else self.astype(DEFAULT_FLOAT))

    def tan(self) -> Tensor: return self._float_op(Tan)
    def asin(self) -> Tensor: return self._float_op(Asin)
    def acos(self) -> Tensor: return self._float_op(Acos)
    def atan(self) -> Tensor: return self._float_op(Atan)
    def sinh(self) -> Tensor: return self._float_op(Sinh)
    def cosh(self) -> Tensor: return self._float_op(Cosh)
    def asinh(self) -> Tensor: return self._float_op(Asinh)
    def acosh(self) -> Tensor: return self._float_op(Acosh)
    def atanh(self) -> Tensor: return self._float_op(Atanh)
    def expm1(self) -> Tensor: return self._float_op(Expm1)
    def log1p(self) -> Tensor: return self._float_op(Log1p)
    def log2(self) -> Tensor: return self._float_op(Log2)
    def log10(self) -> Tensor: return self._float_op(Log10)
    def exp2(self) -> Tensor: return self._float_op(Exp2)
    def erf(self) -> Tensor: return self._float_op(Erf)
    arcsin, arccos, arctan, arcsinh, arccosh, arctanh = asin, acos, atan, asinh, acosh, atanh

    def floor(self) -> Tensor: return self if self.dtype.kind in "iub" else Floor.apply(self)
    def ceil(self) -> Tensor: return self if self.dtype.kind in "iub" else Ceil.apply(self)
    def trunc(self) -> Tensor: return self if self.dtype.kind in "iub" else Trunc.apply(self)
    def sign(self) -> Tensor: return Sign.apply(self)

    def round(self, decimals: int = 0) -> Tensor:
        if self.dtype.kind in "iub":
            return self
        if decimals:
            scale = 10.0**decimals
            return Round.apply(self * scale) / scale
        return Round.apply(self)

    def isnan(self) -> Tensor: return Tensor._result(np.isnan(self._data), None)
    def isinf(self) -> Tensor: return Tensor._result(np.isinf(self._data), None)
    def isfinite(self) -> Tensor: return Tensor._result(np.isfinite(self._data), None)

    def isclose(self, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
        other = self._operand(other)
        return Tensor._result(np.isclose(self._data, other._data, rtol=rtol, atol=atol, equal_nan=equal_nan), None)

    def logsumexp(self, dim: Any, keepdim: bool = False) -> Tensor:
        """log(sum(exp(x))) over `dim`, shifted by the (constant) maximum so it never overflows."""
        keepdim = check_flag(keepdim, "keepdim", "logsumexp")
        x = self if self.dtype.kind == "f" else self.astype(DEFAULT_FLOAT)
        axes = normalize_dims(dim, x.ndim, "logsumexp")
        top = x._data.max(axis=axes, keepdims=True) if x._data.size else np.zeros((1,) * x.ndim, x.dtype)
        top = Tensor._result(np.where(np.isfinite(top), top, 0).astype(x.dtype), None)
        out = (x - top).exp().sum(axes, keepdim=True).log() + top  # log sum exp(x - c) + c, c constant
        return out if keepdim else out.reshape(tuple(n for i, n in enumerate(out.shape) if i not in axes))

    def lerp(self, end: Any, weight: Any) -> Tensor:
        """self + weight * (end - self), as torch.lerp."""
        return self + (self._operand(end) - self) * weight

    def where(self, condition: Any, other: Any) -> Tensor:
        """self where condition holds, else other (PyTorch's Tensor.where)."""
        return where(condition, self, other)

    def tril(self, diagonal: int = 0) -> Tensor:
        return self._triangle(diagonal, lower=True)

    def triu(self, diagonal: int = 0) -> Tensor:
        return self._triangle(diagonal, lower=False)

    def _triangle(self, diagonal: int, lower: bool) -> Tensor:
        name = "tril" if lower else "triu"
        if self.ndim < 2:
            raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions, got shape {self.shape}")
        if isinstance(diagonal, bool) or not isinstance(diagonal, (int, np.integer)):
            raise TypeError(f"{name}: diagonal must be an int, got {diagonal!r}")
        k = min(max(int(diagonal), -self.shape[-2]), self.shape[-1])  # beyond the matrix: the same as its edge
        below = np.tri(*self.shape[-2:], k=k if lower else k - 1, dtype=bool)
        return self.masked_fill(~below if lower else below, 0)  # j <= i + diagonal kept (tril), or dropped (triu)

    def flip(self, *args: Any, dims: Any = None) -> Tensor:
        """A copy with the order of `dims` reversed (PyTorch's flip copies; it is not a view)."""
        if dims is not None and args:
            raise TypeError("flip: give the dims once, as arguments or as dims=")
        dims = (dims if isinstance(dims, (tuple, list)) else (dims,)) if dims is not None else args
        dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
        axes = normalize_dims(dims, self.ndim, "flip")
        return self[tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(self.ndim))].clone()

    def roll(self, shifts: Any, dims: Any = None) -> Tensor:
        """Entries moved `shifts` places along `dims` (the flattened tensor when dims is None), wrapping round."""
        if dims is None:
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        shifts = tuple(shifts) if isinstance(shifts, (tuple, list)) else (shifts,)
        dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
        if len(shifts) != len(dims):
            raise RuntimeError(f"roll: shifts {shifts} and dims {dims} must have the same length")
        out = self
        for shift, dim in zip(shifts, dims):
            axis = normalize_dim(dim, self.ndim, "roll")
            n = self.shape[axis]
            if n:
                order = (np.arange(n) - int(shift)) % n
                out = out[(slice(None),) * axis + (order,)]
        return out

    def repeat(self, *sizes: Any) -> Tensor:
        """The tensor tiled `sizes` times along each dim (leading new dims when there are more sizes)."""
        sizes = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
        if len(sizes) < self.ndim or any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0
                                         for n in sizes):
            raise RuntimeError(f"repeat: sizes {sizes} must be non-negative ints, at least one per dim of "
                               f"{self.shape}")
        shape = (1,) * (len(sizes) - self.ndim) + self.shape
        x = self.reshape(tuple(d for n in shape for d in (1, n)))  # (1, n0, 1, n1, ...)
        x = x.expand(tuple(d for r, n in zip(sizes, shape) for d in (r, n)))  # (r0, n0, r1, n1, ...)
        return x.reshape(tuple(r * n for r, n in zip(sizes, shape))).clone()

    def repeat_interleave(self, repeats: Any, dim: int | None = None) -> Tensor:
        """Each entry repeated `repeats` times along `dim` (the flattened tensor when dim is None)."""
        if dim is None:
            return self.flatten().repeat_interleave(repeats, 0)
        axis = normalize_dim(dim, self.ndim, "repeat_interleave")
        counts = repeats._data if isinstance(repeats, Tensor) else np.asarray(repeats)
        if counts.dtype.kind not in "iu" or np.any(counts < 0) or counts.ndim > 1 or (
                counts.ndim == 1 and counts.size != self.shape[axis]):
            raise RuntimeError(f"repeat_interleave: repeats must be a non-negative int or {self.shape[axis]} of "
                               f"them, got {_short(repeats)}")
        order = np.repeat(np.arange(self.shape[axis]), counts)
        return self[(slice(None),) * axis + (order,)]

    def unbind(self, dim: int = 0) -> tuple[Tensor, ...]:
        axis = normalize_dim(dim, self.ndim, "unbind")
        before = (slice(None),) * axis
        return tuple(GetItem.apply(self, index=before + (i,)) for i in range(self.shape[axis]))

    def outer(self, other: Any) -> Tensor:
        other = check_tensor(other, "outer", "vec2")
        if self.ndim != 1 or other.ndim != 1:
            raise RuntimeError(f"outer: both operands must be 1-D, got shapes {self.shape} and {other.shape}")
        return self.unsqueeze(1) * other.unsqueeze(0)

    def gather(self, dim: int, index: Any) -> Tensor:
        """out[i][j] = self[index[i][j]][j] for dim 0, likewise for any dim; repeated indices add their gradients."""
        axis = normalize_dim(dim, self.ndim, "gather")
        idx = check_tensor(index, "gather", "index")
        if idx.dtype.kind not in "iu" or idx.ndim != self.ndim:
            raise RuntimeError(f"gather: index must be an int64 tensor with {self.ndim} dims, got {idx.dtype} of "
                               f"shape {idx.shape}")
        if any(n > m for i, (n, m) in enumerate(zip(idx.shape, self.shape)) if i != axis):
            raise RuntimeError(f"gather: index of shape {idx.shape} is larger than the input's {self.shape} "
                               f"outside dim {dim}")
        length = self.shape[axis]
        if idx.numel() and (idx._data.min() < -length or idx._data.max() >= length):
            raise IndexError(f"gather: index out of range for dim {dim} of length {length}")
        grid = list(np.ix_(*(np.arange(n) for n in idx.shape))) if idx.ndim else []
        grid[axis] = idx
        return self[tuple(grid)]

    def masked_select(self, mask: Any) -> Tensor:
        """The entries where the bool mask (broadcast with self) is True, as a 1-D tensor."""
        mask = check_tensor(mask, "masked_select", "mask")
        if mask.dtype != np.bool_:
            raise RuntimeError(f"masked_select: expected a bool mask, got {mask.dtype}")
        shape = check_broadcast("masked_select", self.shape, mask.shape)
        return self.expand(shape)[Tensor._result(np.broadcast_to(mask._data, shape).copy(), None)]

    def unflatten(self, dim: int, sizes: Any) -> Tensor:
        axis = normalize_dim(dim, self.ndim, "unflatten")
        sizes = resolve_shape(tuple(sizes), (self.shape[axis],), "unflatten")
        return self.reshape(self.shape[:axis] + sizes + self.shape[axis + 1:])
    def rsqrt(self) -> Tensor: return self.sqrt().reciprocal()
    def reciprocal(self) -> Tensor: return 1.0 / self
    def square(self) -> Tensor: return self * self
    def norm(self, p: float = 2, dim: Any = None, keepdim: bool = False) -> Tensor:
        if p != 2:
            raise NotImplementedError(f"norm: only p=2 is supported here, got p={p!r}")
        return (self * self).sum(dim, keepdim).sqrt()

    def _in_place(self, op: str, compute: Any, *operands: Any) -> Tensor:
        """Change this tensor's memory to compute(self), as PyTorch's in-place ops do.

        Out of any recorded graph the result is written straight back. When the graph is recorded, the op
        runs on a copy of the old value (so its backward keeps what it needs), its result is written into
        this tensor's memory, and this tensor becomes that result in the graph; ops that used the old value
        keep their edge to the old node. Written through a view (x[1:3].add_(y), x.T.copy_(y)), the view's
        root is rebased as PyTorch's CopySlices does: root = root_old with the view's entries replaced, so
        the gradient of those entries goes to the written value and the rest to root_old. Every write
        counts one on the version counter, which backward checks against what each op saved."""
        self._refuse_constant(op)
        if not self._data.flags.writeable:
            raise RuntimeError(f"{op}: this tensor's data (shape {self.shape}) is a read-only view (from expand); "
                               "clone() it first")
        seen = self._view_of
        stale = seen is not None and seen[3]._ctx is not seen[4]  # a view whose base changed in place since
        if stale and is_grad_enabled() and not self.requires_grad and seen[3].requires_grad:
            raise RuntimeError(f"{op}: a leaf Variable that requires grad is being used in an in-place operation "
                               "(a view made before its base joined the graph: use it in an op, or read its "
                               "grad_fn, before changing it in place, as PyTorch requires)")
        recording = is_grad_enabled() and (self.requires_grad or any(
            isinstance(o, Tensor) and o.requires_grad for o in operands))
        if not recording:
            with no_grad():
                result = compute(self)
            self._write(op, result)
            self.bump_version()
            return self
        if stale:
            refresh_view(self)
        root, chain = view_chain(self)
        if root.requires_grad and root._ctx is None:
            what = "a leaf tensor" if root is self else "a view of a leaf tensor"
            raise RuntimeError(f"{op}: {what} that requires grad is being used in an in-place operation; change "
                               "it under ta.no_grad() (as optimizers do), or change a clone()")
        old = Tensor._result(self._data.copy(), self._ctx)
        old.requires_grad = self.requires_grad
        if self._ctx is not None:
            self._ctx.watched = False  # its hooks and retained gradient go with this tensor to its new node
        result = compute(old)
        self._write(op, result)
        if root is not self:  # a view: the root's entries under it are replaced, the root rebased on them
            positions = np.arange(root._data.size).reshape(root.shape)
            for cls, kwargs in chain:  # where the view's entries lie in the root
                positions = cls.forward(Context(cls, (), {}), positions, **kwargs)
            root_old = Tensor._result(root._data, root._ctx)
            root_old.requires_grad = root.requires_grad
            if root._ctx is not None:
                root._ctx.watched = False
            values = result if result.dtype == root.dtype else result.astype(root.dtype)
            result = CopySlices.apply(root_old, values, positions=positions)
        target = root
        target.bump_version()
        if result.requires_grad:
            target._ctx, target.requires_grad = result._ctx, True
            if target._hooks or target._retains_grad:
                watch(target)
        if root is not self:
            refresh_view(self)
        return self

    def _write(self, op: str, result: Tensor) -> None:
        """result's values into this tensor's memory, or one clear error if they do not fit."""
        if result.shape != self.shape and np.broadcast_shapes(result.shape, self.shape) != self.shape:
            raise RuntimeError(f"{op}: the result of shape {result.shape} does not fit this tensor's {self.shape}")
        narrowing = result.dtype.kind == "f" and self.dtype.kind in "iub"
        if narrowing or (self.dtype.kind == "b" and result.dtype.kind != "b"):  # PyTorch's rule for in-place ops
            raise RuntimeError(f"{op}: result type {result.dtype} can't be cast to the desired output type "
                               f"{self.dtype}")
        np.copyto(self._data, result._data, casting="unsafe")

    def add_(self, other: Any, alpha: float = 1) -> Tensor:
        return self._in_place("add_", lambda t: t + (other if alpha == 1 else other * alpha), other)

    def sub_(self, other: Any, alpha: float = 1) -> Tensor:
        return self._in_place("sub_", lambda t: t - (other if alpha == 1 else other * alpha), other)

    def mul_(self, other: Any) -> Tensor: return self._in_place("mul_", lambda t: t * other, other)
    def div_(self, other: Any) -> Tensor: return self._in_place("div_", lambda t: t / other, other)
    def pow_(self, exponent: Any) -> Tensor: return self._in_place("pow_", lambda t: t ** exponent, exponent)
    def neg_(self) -> Tensor: return self._in_place("neg_", lambda t: -t)
    def exp_(self) -> Tensor: return self._in_place("exp_", lambda t: t.exp())
    def sqrt_(self) -> Tensor: return self._in_place("sqrt_", lambda t: t.sqrt())
    def relu_(self) -> Tensor: return self._in_place("relu_", lambda t: t.relu())
    def __iadd__(self, other: Any) -> Tensor: return self.add_(other)
    def __isub__(self, other: Any) -> Tensor: return self.sub_(other)
    def __imul__(self, other: Any) -> Tensor: return self.mul_(other)
    def __itruediv__(self, other: Any) -> Tensor: return self.div_(other)

    def clamp_(self, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
        return self._in_place("clamp_", lambda t: t.clamp(min, max))

    def fill_(self, value: Any) -> Tensor:
        if isinstance(value, Tensor):
            if value.ndim:
                raise RuntimeError(f"fill_: only a 0-d tensor can be a fill value, got shape {value.shape}")
            return self._in_place("fill_", lambda t: t * 0 + value, value)
        if not is_number(value):
            raise TypeError(f"fill_: value must be a number, got {_short(value)}")
        return self._in_place("fill_", lambda t: t.masked_fill(np.ones((), bool), value))

    def zero_(self) -> Tensor: return self.fill_(0)

    def masked_fill_(self, mask: Any, value: Any) -> Tensor:
        return self._in_place("masked_fill_", lambda t: t.masked_fill(mask, value))

    def copy_(self, src: Any) -> Tensor:
        src = src if isinstance(src, Tensor) else Tensor._wrap(np.asarray(src))
        check_broadcast("copy_", src.shape, self.shape)
        return self._in_place("copy_", lambda t: CopyInto.apply(t, src), src)

    def scatter(self, dim: int, index: Any, src: Any = None, value: Any = None, *, reduce: str | None = None) -> Tensor:
        """Out-of-place scatter: entries at `index` along `dim` take src's (or `value`); reduce="add" or
        "multiply" combines them with the entries instead, as PyTorch's (repeated indices accumulate)."""
        if reduce is not None:
            if reduce not in ("add", "multiply"):
                raise ValueError(f'scatter: reduce must be "add" or "multiply", got {reduce!r}')
            if src is None or is_number(src):
                index_t = index if isinstance(index, Tensor) else Tensor._wrap(np.asarray(index))
                src = Tensor._result(np.full(index_t.shape, value if src is None else src, self.dtype), None)
            return self.scatter_reduce(dim, index, src, "sum" if reduce == "add" else "prod")
        axis = normalize_dim(dim, self.ndim, "scatter")
        given = index  # an index tensor is passed on as itself, so a change of it before backward is caught
        index = index._data if isinstance(index, Tensor) else np.asarray(index)
        if index.dtype.kind not in "iu" or index.ndim != self.ndim:
            raise TypeError(f"scatter: index must be an int tensor with {self.ndim} dims, got {index.dtype} of "
                            f"shape {index.shape}")
        if index.size and (index.min() < -self.shape[axis] or index.max() >= self.shape[axis]):
            raise IndexError(f"scatter: index out of range for dim {dim} of length {self.shape[axis]}")
        if src is None and value is None:
            raise TypeError("scatter: give src (a tensor) or value (a number)")
        if src is None or is_number(src):
            src = Tensor._result(np.full(index.shape, value if src is None else src, self.dtype), None)
        if isinstance(src, Tensor) and src.dtype != self.dtype:
            raise RuntimeError(f"scatter(): Expected self.dtype to be equal to src.dtype, got {self.dtype} and "
                               f"{src.dtype}")
        src = self._operand(src).astype(self.dtype)
        if any(i > n for i, n in zip(index.shape, src.shape)):
            raise ValueError(f"scatter: index of shape {index.shape} is larger than src's {src.shape}")
        return Scatter.apply(self, src, index=given if isinstance(given, Tensor) else index, axis=axis)

    def scatter_(self, dim: int, index: Any, src: Any = None, value: Any = None, *, reduce: str | None = None
                 ) -> Tensor:
        return self._in_place("scatter_", lambda t: t.scatter(dim, index, src, value, reduce=reduce), src)

    def scatter_add(self, dim: int, index: Any, src: Any) -> Tensor:
        """self with src's entries added at `index` along `dim` (repeated indices add up), as torch's."""
        return self.scatter_reduce(dim, index, src, "sum")

    def scatter_add_(self, dim: int, index: Any, src: Any) -> Tensor:
        return self._in_place("scatter_add_", lambda t: t.scatter_add(dim, index, src), src)

    def scatter_reduce(self, dim: int, index: Any, src: Any, reduce: str, *, include_self: bool = True) -> Tensor:
        """PyTorch's scatter_reduce: src's entries combined into self's at `index` along `dim` by "sum", "prod",
        "mean", "amax" or "amin" (with self's entry unless include_self=False; untouched entries stay). The
        gradients are PyTorch's: amax/amin's shared evenly among the entries equal to the result."""
        if reduce not in ("sum", "prod", "mean", "amax", "amin"):
            raise ValueError(f'scatter_reduce: reduce must be "sum", "prod", "mean", "amax" or "amin", got {reduce!r}')
        axis = normalize_dim(dim, self.ndim, "scatter_reduce")
        idx = np.asarray(index._data if isinstance(index, Tensor) else index)
        src = check_tensor(src, "scatter_reduce", "src")
        if idx.dtype.kind not in "iu" or idx.ndim != self.ndim or src.ndim != self.ndim:
            raise TypeError(f"scatter_reduce: index must be an int tensor and src a tensor, both with {self.ndim} "
                            f"dims, got index {idx.dtype} {idx.shape} and src {src.shape}")
        if src.dtype != self.dtype:
            raise RuntimeError(f"scatter_reduce(): Expected self.dtype to be equal to src.dtype, got {self.dtype} "
                               f"and {src.dtype}")
        if any(i > n for i, n in zip(idx.shape, src.shape)) or any(
                i > n for d, (i, n) in enumerate(zip(idx.shape, self.shape)) if d != axis):
            raise ValueError(f"scatter_reduce: index of shape {idx.shape} is larger than src {src.shape} or self "
                             f"{self.shape} outside dim {dim}")
        if idx.size and (idx.min() < -self.shape[axis] or idx.max() >= self.shape[axis]):
            raise IndexError(f"scatter_reduce: index out of range for dim {dim} of length {self.shape[axis]}")
        coords = list(np.indices(idx.shape))
        coords[axis] = idx % self.shape[axis] if self.shape[axis] else idx
        coords = tuple(coords)  # where each src entry goes
        values = src[tuple(slice(0, n) for n in idx.shape)]  # the src entries used
        count = np.zeros(self.shape, np.int64)
        np.add.at(count, coords, 1)
        touched = Tensor._result(count > 0, None)
        keep = self if include_self else where(touched, Tensor._result(np.zeros((), self.dtype), None), self)
        if reduce in ("sum", "mean"):
            total = keep + IndexAdd.apply(values, index=coords, shape=self.shape)
            if reduce == "sum":
                return total
            if self.dtype.kind != "f":
                raise RuntimeError("scatter_reduce: mean of an integer tensor is not supported here; use .float()")
            divisor = count + (1 if include_self else 0)
            return total / Tensor._result(np.maximum(divisor, 1).astype(self.dtype), None)
        result = self._data.copy() if include_self else np.where(count > 0, self._data * 0, self._data)
        fill = {"prod": 1, "amax": -np.inf, "amin": np.inf}[reduce] if self.dtype.kind == "f" else None
        if not include_self and fill is not None:
            result = np.where(count > 0, fill, self._data).astype(self.dtype)
        elif not include_self:
            info = np.iinfo(self.dtype)
            result = np.where(count > 0, {"prod": 1, "amax": info.min, "amin": info.max}[reduce], self._data)
        ufunc = {"prod": np.multiply, "amax": np.maximum, "amin": np.minimum}[reduce]
        ufunc.at(result, coords, values._data)
        out = Tensor._result(result.astype(self.dtype), None)
        if not (self.requires_grad or src.requires_grad) or self.dtype.kind != "f":
            return out
        if reduce == "prod":  # d out / d x = the product of the others: exact with zeros, first order only
            raise NotImplementedError("scatter_reduce: the gradient of reduce=\"prod\" is not supported here; "
                                      "use sum of logs, or amax/amin/sum/mean")
        hit = values._data == result[coords]  # amax/amin: the entries equal to the result share its gradient
        self_hit = (self._data == result) & ((count == 0) | include_self)
        ties = self_hit.astype(np.int64)
        np.add.at(ties, coords, hit.astype(np.int64))
        share = 1.0 / np.maximum(ties, 1)
        self_weight = self_hit * share
        src_weight = hit * share[coords]
        moved = (self - self.detach()) * Tensor._result(self_weight.astype(self.dtype), None)
        moved = moved + IndexAdd.apply((values - values.detach()) * Tensor._result(src_weight.astype(self.dtype),
                                                                                   None), index=coords,
                                       shape=self.shape)
        return out + moved  # the value exactly (x - x.detach() is 0), the gradient shared among the maxima

    def index_fill(self, dim: int, index: Any, value: Any) -> Tensor:
        axis = normalize_dim(dim, self.ndim, "index_fill")
        index = np.asarray(index._data if isinstance(index, Tensor) else index).reshape(-1)
        if index.dtype.kind not in "iu":
            raise TypeError(f"index_fill: index must be an int tensor, got {index.dtype}")
        length = self.shape[axis] if self.ndim else 1
        if index.size and (index.min() < -length or index.max() >= length):
            raise IndexError(f"index_fill: index out of range for dim {dim} of length {length}")
        picked = np.zeros(length, bool)
        picked[index] = True
        return self.masked_fill(picked.reshape((-1,) + (1,) * (self.ndim - axis - 1)) if self.ndim else picked[0],
                                value)

    def index_fill_(self, dim: int, index: Any, value: Any) -> Tensor:
        return self._in_place("index_fill_", lambda t: t.index_fill(dim, index, value))

    def normal_(self, mean: float = 0.0, std: float = 1.0, *, generator: Any = None) -> Tensor:
        draw = rng.generator(generator).normal(mean, std, self.shape)
        return self._in_place("normal_", lambda t: Tensor._result(draw.astype(self.dtype), None))

    def uniform_(self, a: float = 0.0, b: float = 1.0, *, generator: Any = None) -> Tensor:
        draw = rng.generator(generator).uniform(a, b, self.shape)
        return self._in_place("uniform_", lambda t: Tensor._result(draw.astype(self.dtype), None))

    def bernoulli_(self, p: Any = 0.5, *, generator: Any = None) -> Tensor:
        """Each entry 1 with probability p (a number, or a tensor broadcast to this one's shape), else 0."""
        draw = _bernoulli(p, self.shape, generator, "bernoulli_")
        return self._in_place("bernoulli_", lambda t: Tensor._result(draw.astype(self.dtype), None))

    def bernoulli(self, p: Any = None, *, generator: Any = None) -> Tensor:
        """A new tensor of this one's shape and dtype: 1 with probability p (this tensor's entries when p is
        None, as torch.bernoulli(input)), else 0. No gradient flows through a draw."""
        draw = _bernoulli(self._data if p is None else p, self.shape, generator, "bernoulli")
        return Tensor(draw.astype(self.dtype if self.dtype.kind == "f" else np.float32))

    # --- dtypes and devices ---------------------------------------------------------
    def to(self, *args: Any, **kwargs: Any) -> Tensor:
        """to(dtype), to(device), to(device, dtype), to(other tensor); "cpu" is the only device."""
        dtype = kwargs.pop("dtype", None)
        check_device(kwargs.pop("device", None), "to")
        kwargs.pop("non_blocking", None)
        kwargs.pop("copy", None)
        if kwargs:
            raise TypeError(f"to: unexpected arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, Tensor):
                dtype = a.dtype
            elif isinstance(a, (str, device)) and not _is_dtype_name(a):
                check_device(a, "to")
            elif isinstance(a, int) and not isinstance(a, bool):
                check_device(a, "to")
            else:
                dtype = a
        return self if dtype is None else self.astype(dtype)

    def cpu(self) -> Tensor: return self

    def cuda(self, *args: Any, **kwargs: Any) -> Tensor:
        raise RuntimeError("cuda: tinygrad_attn runs on the CPU only (ta.cuda.is_available() is False); use .cpu()")

    def type(self, dtype: Any = None) -> Any:
        """x.type() names the dtype as PyTorch does ('torch.FloatTensor'); x.type(dtype) casts, dtype a dtype,
        a name such as 'torch.LongTensor', or a tensor type such as torch.ByteTensor."""
        if dtype is None:
            return _TYPE_NAMES.get(self.dtype, f"ta.{self.dtype}")
        if callable(dtype) and isinstance(getattr(dtype, "dtype", None), np.dtype):  # ta.ByteTensor, ...
            dtype = dtype.dtype
        if isinstance(dtype, str):
            names = {v: k for k, v in _TYPE_NAMES.items()}
            if dtype not in names:
                raise TypeError(f"type: unknown type name {dtype!r}; use one of {sorted(names)} or a dtype")
            dtype = names[dtype]
        return self.astype(dtype)

    def type_as(self, other: Tensor) -> Tensor: return self.astype(check_tensor(other, "type_as", "other").dtype)
    def long(self) -> Tensor: return self.astype(np.int64)
    def int(self) -> Tensor: return self.astype(np.int32)
    def bool(self) -> Tensor: return self.astype(np.bool_)
    def half(self) -> Tensor: return self.astype(np.float16)
    def is_floating_point(self) -> bool: return self.dtype.kind == "f"
    def element_size(self) -> int: return self.dtype.itemsize

    @property
    def itemsize(self) -> int: return self.dtype.itemsize

    @property
    def nbytes(self) -> int: return self._data.nbytes

    def stride(self, dim: int | None = None) -> Any:
        """Steps between neighbours along each dim, in elements (numpy's strides / itemsize), as PyTorch's."""
        steps = tuple(s // self.dtype.itemsize for s in self._data.strides)
        return steps if dim is None else steps[normalize_dim(dim, self.ndim, "stride")]

    def is_contiguous(self) -> bool: return bool(self._data.flags.c_contiguous)

    def storage_offset(self) -> int:
        """Elements between the start of the memory this tensor views and its first entry."""
        base = self._data
        while base.base is not None and isinstance(base.base, np.ndarray):
            base = base.base
        start = self._data.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        return start // self.dtype.itemsize

    def view_as(self, other: Tensor) -> Tensor: return self.view(check_tensor(other, "view_as", "other").shape)
    def reshape_as(self, other: Tensor) -> Tensor: return self.reshape(check_tensor(other, "reshape_as", "other").shape)
    def expand_as(self, other: Tensor) -> Tensor: return self.expand(check_tensor(other, "expand_as", "other").shape)

    # --- bool and integer bitwise operators (combine masks: causal & padding) ---------
    def _bitwise(self, fn: Any, other: Any, name: str) -> Tensor:
        if _traced(other) is not None:  # a traced stand-in (flex attention's modifiers): its own operator
            return NotImplemented
        other = self._operand(other)
        for t in (self, other):
            if t.dtype.kind not in "biu":
                raise TypeError(f"{name}: only bool and integer tensors, got {t.dtype}")
        check_broadcast(name, self.shape, other.shape)
        return Tensor._result(fn(self._data, other._data), None)

    def __and__(self, other): return self._bitwise(np.bitwise_and, other, "&")
    def __or__(self, other): return self._bitwise(np.bitwise_or, other, "|")
    def __xor__(self, other): return self._bitwise(np.bitwise_xor, other, "^")
    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__
    def logical_and(self, other): return self.bool() & self._operand(other).bool()
    def logical_or(self, other): return self.bool() | self._operand(other).bool()
    def logical_not(self): return Tensor._result(~self._data.astype(bool), None)

    def __invert__(self) -> Tensor:
        if self.dtype.kind not in "biu":
            raise TypeError(f"~: only bool and integer tensors, got {self.dtype}")
        return Tensor._result(~self._data, None)

    def __floordiv__(self, other: Any) -> Tensor:
        a, b = self._promoted(other)
        return Tensor._result(np.floor_divide(a._data, b._data), None)

    def __mod__(self, other: Any) -> Tensor:
        a, b = self._promoted(other)
        return Tensor._result(np.mod(a._data, b._data), None)

    def _nonempty_dims(self, dim: int | tuple[int, ...] | None, op: str) -> tuple[int, ...]:
        """The dims a max or min reduces over, none of them empty (there is no max of nothing)."""
        axis = normalize_dims(dim, self.ndim, op)
        if any(self.shape[a] == 0 for a in axis):
            raise ValueError(f"{op}: the tensor of shape {self.shape} is empty along dim {dim}")
        return axis

    # --- shape ----------------------------------------------------------------
    def reshape(self, *shape: Any) -> Tensor:
        shape = resolve_shape(shape, self.shape)
        return self if shape == self.shape else Reshape.apply(self, shape=shape)

    def view(self, *shape: Any) -> Tensor:
        """reshape that never copies: like PyTorch, a layout that would need a copy raises."""
        target = resolve_shape(shape, self.shape, "view")
        data = self._data
        if data.size and not data.flags.c_contiguous and not np.may_share_memory(data.reshape(target), data):
            raise RuntimeError(f"view: shape {target} is not compatible with the strides of this tensor "
                               f"(shape {self.shape}, a non-contiguous view); use .reshape(...) or "
                               f".contiguous().view(...)")
        return self if target == self.shape else Reshape.apply(self, shape=target)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        if self.ndim == 0:
            return self.reshape(1)
        start, end = normalize_dim(start_dim, self.ndim, "flatten"), normalize_dim(end_dim, self.ndim, "flatten")
        if start > end:
            raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
        return self.reshape(self.shape[:start] + (math.prod(self.shape[start : end + 1]),) + self.shape[end + 1 :])

    def expand(self, *shape: Any) -> Tensor:
        """Broadcast to `shape` (-1 keeps a dim), without copying."""
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        if len(shape) < self.ndim:
            raise ValueError(f"expand: shape {shape} has fewer dims than the tensor's {self.shape}")
        own = (1,) * (len(shape) - self.ndim) + self.shape
        target = tuple(o if n == -1 else n for n, o in zip(shape, own))
        if any(not isinstance(n, (int, np.integer)) or n < 0 for n in target) or any(
                o != n and o != 1 for o, n in zip(own, target)):
            raise ValueError(f"expand: the tensor of shape {self.shape} cannot be expanded to {shape}")
        return Expand.apply(self, shape=target)

    def clone(self) -> Tensor:
        return Clone.apply(self)

    def contiguous(self) -> Tensor:
        return self if self._data.flags.c_contiguous else Clone.apply(self)

    def split(self, split_size_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
        """Pieces along `dim`: of split_size each (the last may be smaller), or of the given sizes."""
        axis = normalize_dim(dim, self.ndim, "split")
        length = self.shape[axis]
        if isinstance(split_size_or_sections, (int, np.integer)) and not isinstance(split_size_or_sections, bool):
            if split_size_or_sections <= 0:
                raise ValueError(f"split: split_size must be positive, got {split_size_or_sections}")
            sizes = [min(split_size_or_sections, length - i) for i in range(0, length, split_size_or_sections)] or [0]
        elif not isinstance(split_size_or_sections, (list, tuple)):
            raise TypeError(f"split: split_size_or_sections must be an int or a list of ints, got "
                            f"{_short(split_size_or_sections)}")
        else:
            sizes = [int(n) for n in split_size_or_sections]
            if sum(sizes) != length or any(n < 0 for n in sizes):
                raise ValueError(f"split: sizes {sizes} do not add up to dim {dim}'s length {length}")
        starts = itertools.accumulate([0] + sizes[:-1])
        lead = (slice(None),) * axis
        return tuple(self[lead + (slice(a, a + n),)] for a, n in zip(starts, sizes))

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        """At most `chunks` pieces of ceil(length / chunks) along `dim`, as PyTorch's chunk."""
        if isinstance(chunks, bool) or not isinstance(chunks, (int, np.integer)) or chunks <= 0:
            raise ValueError(f"chunk: chunks must be a positive int, got {chunks!r}")
        length = self.shape[normalize_dim(dim, self.ndim, "chunk")]
        if length == 0:  # PyTorch gives `chunks` empty pieces
            return self.split([0] * int(chunks), dim)
        return self.split(-(-length // chunks), dim)

    def abs(self) -> Tensor:
        return Abs.apply(self)

    def clamp_min(self, min: float) -> Tensor:  # noqa: A002
        return self.clamp(min=min)

    def clamp_max(self, max: float) -> Tensor:  # noqa: A002
        return self.clamp(max=max)

    def clamp(self, min: float | None = None, max: float | None = None) -> Tensor:  # noqa: A002  (PyTorch's names)
        if min is None and max is None:
            raise ValueError("clamp: give min, max or both")
        for name, bound in (("min", min), ("max", max)):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, (int, float, np.number))):
                raise TypeError(f"clamp: {name} must be a number, got {bound!r}")
        return Clamp.apply(self, low=min, high=max)

    clip = clamp

    def _arg(self, fn, name: str, dim: int | None, keepdim: bool) -> Tensor:
        check_flag(keepdim, "keepdim", name)
        self._nonempty_dims(dim, name)
        if dim is None:
            return Tensor._result(np.asarray(fn(self._data.reshape(-1)), dtype=np.int64), None)
        axis = normalize_dim(dim, self.ndim, name)
        return Tensor._result(np.asarray(fn(self._data, axis=axis, keepdims=keepdim), dtype=np.int64), None)

    def argmax(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        return self._arg(np.argmax, "argmax", dim, keepdim)

    def argmin(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        return self._arg(np.argmin, "argmin", dim, keepdim)

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Tensor, Tensor]:  # noqa: A002
        """(values, indices) of the k largest (or smallest) entries along `dim`; values carry the gradient."""
        axis = normalize_dim(dim, self.ndim, "topk")
        length = self.shape[axis] if self.ndim else 1
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k <= length:
            raise ValueError(f"topk: k must be an int in [0, {length}] (the length of dim {dim}), got {k!r}")
        indices = self.sort(dim=axis, descending=bool(largest)).indices._data if self.ndim else np.zeros(1, np.int64)
        indices = np.take(indices, np.arange(k), axis=axis if self.ndim else 0)  # no negation: exact for any dtype
        return return_types["topk"](TakeAlongDim.apply(self, indices=indices, axis=axis),
                                    Tensor._result(indices, None))

    def __setitem__(self, index: Any, value: Any) -> None:
        """x[index] = value, in place (PyTorch's index_put_): recorded in the graph when x or value needs a
        gradient, as any in-place op."""
        split = _ints_first(index, self.ndim)
        if split is not None:  # the dims placed as x[index] places them: through the ints' view
            view = self[split[0]]
            view[split[1]] = value
            return
        index = normalize_index(index, self.shape)
        if isinstance(value, Tensor) or not is_number(value):
            value = self._operand(value if isinstance(value, Tensor) else np.asarray(value))
        self._refuse_constant("item assignment")
        if not is_grad_enabled() or not (self.requires_grad or (isinstance(value, Tensor) and value.requires_grad)):
            if not self._data.flags.writeable:
                raise RuntimeError(f"item assignment: this tensor's data (shape {self.shape}) is a read-only view "
                                   "(from expand); clone() it first")
            array = value._data if isinstance(value, Tensor) else value
            try:
                self._data[index] = array
            except ValueError as err:
                raise ValueError(f"item assignment: value of shape {np.shape(array)} does not fit "
                                 f"x[{_short(index, 40)}] of a tensor of shape {self.shape} ({err})") from None
            self.bump_version()
            return
        value = value if isinstance(value, Tensor) else Tensor._result(np.asarray(value, self.dtype), None)
        self.grad_fn  # noqa: B018  (x[i] = v reads x first, so a view whose base changed is read anew, as PyTorch)
        self._in_place("setitem", lambda t: IndexPut.apply(t, value.astype(t.dtype), index=index), value)

    def permute(self, *dims: Any) -> Tensor:
        dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
        if sorted(normalize_dim(d, self.ndim, "permute") for d in dims) != list(range(self.ndim)):
            raise ValueError(f"permute: dims {dims} are not a permutation of the {self.ndim} dims of {self.shape}")
        return Permute.apply(self, dims=tuple(normalize_dim(d, self.ndim, "permute") for d in dims))

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        ndim = self._data.ndim
        dims = list(range(ndim))
        a, b = normalize_dim(dim0, ndim, "transpose"), normalize_dim(dim1, ndim, "transpose")
        dims[a], dims[b] = dims[b], dims[a]
        return Permute.apply(self, dims=tuple(dims))

    def t(self) -> Tensor:
        """A 2-D tensor transposed; a 0-d or 1-D one as it is (a view), as PyTorch's t()."""
        if self.ndim > 2:
            raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D (shape "
                               f"{self.shape}); use transpose(dim0, dim1) or permute")
        return Permute.apply(self, dims=tuple(range(self.ndim))[::-1])

    def swapaxes(self, axis0: int, axis1: int) -> Tensor:
        """transpose(axis0, axis1), as PyTorch's (also spelled swapdims)."""
        return self.transpose(axis0, axis1)

    swapdims = swapaxes

    @property
    def mT(self) -> Tensor:  # noqa: N802  (PyTorch's name)
        """The last two dims swapped (a batch of matrices transposed)."""
        if self.ndim < 2:
            raise RuntimeError(f"mT: needs a tensor of at least 2 dims, got shape {self.shape}")
        return self.transpose(-2, -1)

    def movedim(self, source: Any, destination: Any) -> Tensor:
        """The dims `source` moved to positions `destination` (ints or sequences of ints), the others in order."""
        src = tuple(source) if isinstance(source, (tuple, list)) else (source,)
        dst = tuple(destination) if isinstance(destination, (tuple, list)) else (destination,)
        if len(src) != len(dst):
            raise RuntimeError(f"movedim: source {src} and destination {dst} must have the same number of dims")
        src = tuple(normalize_dim(d, self.ndim, "movedim") for d in src)
        dst = tuple(normalize_dim(d, self.ndim, "movedim") for d in dst)
        if len(set(src)) != len(src) or len(set(dst)) != len(dst):
            raise RuntimeError(f"movedim: repeated dim in source {source} or destination {destination}")
        order = [d for d in range(self.ndim) if d not in src]
        for d, s in sorted(zip(dst, src)):
            order.insert(d, s)
        return self.permute(tuple(order))

    def narrow(self, dim: int, start: int, length: int) -> Tensor:
        """The view of `length` entries from `start` along `dim` (start may be negative, as PyTorch's)."""
        axis = normalize_dim(dim, self.ndim, "narrow")
        size = self.shape[axis]
        for name, n in (("start", start), ("length", length)):
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
                raise TypeError(f"narrow: {name} must be an int, got {n!r}")
        begin = start + size if -size <= start < 0 else start
        if not 0 <= begin <= size or length < 0 or begin + length > size:
            raise IndexError(f"narrow: start {start} and length {length} are out of range for dim {dim} of size "
                             f"{size}")
        return self[(slice(None),) * axis + (slice(begin, begin + length),)]

    def select(self, dim: int, index: int) -> Tensor:
        """The view at `index` along `dim`, that dim removed."""
        axis = normalize_dim(dim, self.ndim, "select")
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"select: index must be an int, got {index!r}")
        if not -self.shape[axis] <= index < self.shape[axis]:
            raise IndexError(f"select: index {index} is out of range for dim {dim} of size {self.shape[axis]}")
        return self[(slice(None),) * axis + (int(index),)]

    def index_select(self, dim: int, index: Any) -> Tensor:
        """The entries at the 1-D integer `index` along `dim`, in its order (repeats allowed)."""
        axis = normalize_dim(dim, self.ndim, "index_select")
        idx = np.asarray(index._data if isinstance(index, Tensor) else index)
        if idx.ndim > 1 or (idx.size and idx.dtype.kind not in "iu"):
            raise TypeError(f"index_select: index must be a 1-D integer tensor, got shape {idx.shape} and dtype "
                            f"{idx.dtype}")
        return self[(slice(None),) * axis + (Tensor(idx.reshape(-1).astype(np.int64)),)]

    def _new(self, make: Any, dtype: Any) -> Tensor:
        return Tensor(make(np.dtype(self.dtype if dtype is None else tensor_dtype(dtype, "new_*"))))

    def new_zeros(self, *size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
        """Zeros of `size`, of this tensor's dtype unless given, as PyTorch's."""
        check_device(device, "new_zeros")
        return self._new(lambda d: np.zeros(_size_tuple(size, "new_zeros"), d), dtype).requires_grad_(requires_grad)

    def new_ones(self, *size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
        check_device(device, "new_ones")
        return self._new(lambda d: np.ones(_size_tuple(size, "new_ones"), d), dtype).requires_grad_(requires_grad)

    def new_empty(self, *size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
        check_device(device, "new_empty")
        return self._new(lambda d: np.empty(_size_tuple(size, "new_empty"), d), dtype).requires_grad_(requires_grad)

    def new_full(self, size: Any, fill_value: Any, *, dtype: Any = None, device: Any = None,
                 requires_grad: bool = False) -> Tensor:
        check_device(device, "new_full")
        return self._new(lambda d: np.full(_size_tuple((size,), "new_full"), fill_value, d),
                         dtype).requires_grad_(requires_grad)

    def new_tensor(self, data: Any, *, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
        """A copy of `data` as a new leaf, of this tensor's dtype unless given."""
        check_device(device, "new_tensor")
        data = data._data if isinstance(data, Tensor) else data
        return self._new(lambda d: np.array(data, dtype=d), dtype).requires_grad_(requires_grad)

    @property
    def T(self) -> Tensor:
        if self.ndim != 2:
            raise ValueError(f".T: only for 2-D tensors, this one has shape {self.shape}; use transpose(dim0, dim1)")
        return self.transpose(0, 1)

    def unsqueeze(self, dim: int) -> Tensor:
        dim = normalize_dim(dim, self.ndim + 1, "unsqueeze")
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    def squeeze(self, dim: Any = None) -> Tensor:
        """The size-1 dims removed: all of them, or those of `dim` (an int or a tuple) that have size 1."""
        if dim is None:
            return self.reshape(tuple(n for n in self.shape if n != 1))
        dims = dim if isinstance(dim, (tuple, list)) else (dim,)
        drop = {d for d in (normalize_dim(d, self.ndim, "squeeze") for d in dims) if self.shape[d] == 1}
        if not drop:
            return self
        return self.reshape(tuple(n for i, n in enumerate(self.shape) if i not in drop))

    def __getitem__(self, index: Any) -> Tensor:
        if _basic_index(index):  # ints, slices, None, Ellipsis: a view, checked by numpy as it is taken
            try:
                return GetItem.apply(self, index=index)
            except IndexError as err:
                raise IndexError(f"index {index!r} is invalid for a tensor of shape {self.shape}: {err}") from None
        traced = _traced(*index) if type(index) is tuple else _traced(index)
        if traced is not None:  # a captured tensor read at traced positions (flex attention's modifiers)
            return type(traced).__ta_function__("getitem", (self, index))
        split = _ints_first(index, self.ndim)
        if split is not None:  # PyTorch's placement: ints select first, then the tensor indices
            return self[split[0]][split[1]]
        return GetItem.apply(self, index=normalize_index(index, self.shape, keep_tensors=True))  # index tensors guarded

    def masked_fill(self, mask: Any, value: float) -> Tensor:
        """Entries where the bool `mask` is True become `value` (and get no gradient)."""
        original = mask
        mask = mask._data if isinstance(mask, Tensor) else np.asarray(mask)
        if mask.dtype != np.bool_:
            raise TypeError(f"masked_fill: mask must be bool, got dtype {mask.dtype}")
        if isinstance(value, (bool, str)) or not isinstance(value, (int, float, np.number)):
            raise TypeError(f"masked_fill: value must be a number, got {value!r:.40}")
        check_broadcast("masked_fill", mask.shape, self.shape)  # the result has the broadcast shape, as PyTorch's
        cond = original if isinstance(original, Tensor) else Tensor(mask)  # a mask tensor changed later is caught
        return Where.apply(cond, Tensor(np.asarray(value, dtype=self.dtype)), self)

    # --- softmax along a dim (the fused rules in ops.py) ----------------------------------------------
    def softmax(self, dim: int = -1, dtype: Any = None) -> Tensor:
        """exp(x) / sum(exp(x)) along `dim`, as torch's x.softmax(dim); `dtype` casts x first."""
        return softmax(self, dim, dtype=dtype)

    def log_softmax(self, dim: int = -1, dtype: Any = None) -> Tensor:
        """x - logsumexp(x) along `dim`, as torch's x.log_softmax(dim); `dtype` casts x first."""
        return log_softmax(self, dim, dtype=dtype)


def _bernoulli(p: Any, shape: tuple[int, ...], generator: Any, op: str) -> np.ndarray:
    """0/1 draws of `shape`, each 1 with its probability in p (checked to lie in [0, 1])."""
    probs = np.asarray(p._data if isinstance(p, Tensor) else p, dtype=np.float64)
    if np.isnan(probs).any() or (probs < 0).any() or (probs > 1).any():
        raise ValueError(f"{op}: probabilities must lie in [0, 1], got values from {np.nanmin(probs)} to "
                         f"{np.nanmax(probs)}" + (" (and NaN)" if np.isnan(probs).any() else ""))
    check_broadcast(op, probs.shape, shape)
    return rng.generator(generator).random(shape) < probs


def _size_tuple(size: tuple, op: str) -> tuple[int, ...]:
    """A size given as ints or as one sequence of ints, checked."""
    size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)
    for n in size:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"{op}: sizes must be non-negative ints, got {size}")
    return tuple(int(n) for n in size)


def cat(tensors: list[Tensor], dim: int = 0) -> Tensor:
    """Join tensors along an existing dim."""
    tensors = [t if isinstance(t, Tensor) else Tensor(t) for t in tensors]
    if not tensors:
        raise ValueError("cat: expected a non-empty list of tensors")
    first = tensors[0].shape
    axis = normalize_dim(dim, len(first), "cat")
    for t in tensors[1:]:
        if len(t.shape) != len(first) or any(
            n != m for i, (n, m) in enumerate(zip(t.shape, first)) if i != axis
        ):
            raise ValueError(f"cat: shapes {first} and {t.shape} differ outside dim {dim}")
    return Cat.apply(*tensors, axis=axis)


def stack(tensors: list[Tensor], dim: int = 0) -> Tensor:
    """Join same-shaped tensors along a new dim."""
    tensors = [t if isinstance(t, Tensor) else Tensor(t) for t in tensors]
    if not tensors:
        raise ValueError("stack: expected a non-empty list of tensors")
    shapes = {t.shape for t in tensors}
    if len(shapes) > 1:
        raise ValueError(f"stack: all tensors must have the same shape, got {sorted(shapes)}")
    ndim = tensors[0].ndim + 1
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or not -ndim <= dim < ndim:
        raise IndexError(f"stack: dim {dim!r} is out of range for stacking tensors of {ndim - 1} dims "
                         f"(allowed: {-ndim} to {ndim - 1})")
    return Stack.apply(*tensors, axis=int(dim) % ndim)


def _logaddexp(a: Tensor, b: Tensor) -> Tensor:
    """log(exp(a) + exp(b)) = max + log1p(exp(-|a - b|)); -inf with -inf gives -inf (not NaN)."""
    both = Tensor._result(np.isneginf(a._data) & np.isneginf(b._data), None)
    gap = where(both, 0.0, a - b)
    return where(both, a, maximum(a, b) + (-gap.abs()).exp().log1p())


def _dim_or_axis(dim: Any, axis: Any, op: str) -> Any:
    """PyTorch takes numpy's `axis=` as an alias of `dim`."""
    if axis is not None:
        if dim is not None:
            raise TypeError(f"{op}: got both dim and its alias axis")
        return axis
    return dim


def _basic_index(index: Any) -> bool:
    """Whether an index holds only ints, slices, None and Ellipsis (numpy's basic indexing, which makes a view)."""
    for item in index if type(index) is tuple else (index,):
        kind = type(item)
        if kind is not int and kind is not slice and item is not None and item is not Ellipsis:
            return False
    return True


def _traced(*args: Any) -> Any:
    """The first of args that is a traced stand-in, or None. Flex attention compiles a modifier by calling it
    on stand-ins that record what is done to them (nn/attention/modifier_compiler.py); a function here given
    one hands the call to its class's `__ta_function__(name, args)`, as PyTorch's `__torch_function__`."""
    for x in args:
        if hasattr(type(x), "__ta_function__"):
            return x
    return None


def where(cond: Any, a: Any, b: Any) -> Tensor:
    """Elementwise choice: a where the bool `cond` is True, else b."""
    if not isinstance(cond, Tensor) and (traced := _traced(cond, a, b)) is not None:
        return type(traced).__ta_function__("where", (cond, a, b))
    cond = cond if isinstance(cond, Tensor) else Tensor(np.asarray(cond))
    if cond.dtype != np.bool_:
        raise TypeError(f"where: cond must be bool, got dtype {cond.dtype}")
    dtype = result_type(*(x if isinstance(x, Tensor) or is_number(x) else Tensor._wrap(x) for x in (a, b)))
    a, b = (x.astype(dtype) if isinstance(x, Tensor) else Tensor._result(np.asarray(x, dtype), None) for x in (a, b))
    check_broadcast("where", cond.shape, a.shape, b.shape)
    return Where.apply(cond, a, b)


def _is_array_index(item: Any) -> bool:
    if isinstance(item, Tensor):
        return item.ndim > 0 or item.dtype.kind == "b"
    if isinstance(item, (np.ndarray, list)):
        return np.ndim(item) > 0 or np.asarray(item).dtype == np.bool_
    return False


def _ints_first(index: Any, ndim: int) -> tuple[tuple, tuple] | None:
    """(the int indices with slices elsewhere, the rest) when an index mixes ints with tensor indices: PyTorch
    applies an int as a plain selection, so `x[1, :, idx]` keeps idx's dims where idx stands (numpy counts the
    int as an array index and, the two being apart, moves both to the front). None otherwise."""
    items = index if isinstance(index, tuple) else (index,)
    ints = [isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_)) for i in items]
    if not any(ints) or not any(_is_array_index(i) for i in items) or sum(i is Ellipsis for i in items) > 1:
        return None

    def width(item: Any) -> int:  # the dims an index item consumes
        if item is None or item is Ellipsis:
            return 0
        if _is_array_index(item):
            data = item._data if isinstance(item, Tensor) else np.asarray(item)
            return data.ndim if data.dtype == np.bool_ else 1
        return 1

    spare = ndim - sum(width(i) for i in items)
    first, rest = [], []
    for item, is_int in zip(items, ints):
        if is_int:
            first.append(item)
        elif item is Ellipsis:
            first += [slice(None)] * max(spare, 0)
            rest.append(item)
        else:
            first += [slice(None)] * width(item)
            rest.append(item)
    return tuple(first), tuple(rest)


def _accept_axis(method: Any) -> Any:
    """PyTorch's `axis=` alias of `dim=` (numpy's spelling), on a method whose argument is `dim`."""
    def method_with_axis(self: Tensor, *args: Any, **kwargs: Any) -> Any:
        if "axis" in kwargs:
            if "dim" in kwargs or args:
                raise TypeError(f"{method.__name__}: got both dim and its alias axis")
            kwargs["dim"] = kwargs.pop("axis")
        return method(self, *args, **kwargs)

    method_with_axis.__name__, method_with_axis.__qualname__ = method.__name__, method.__qualname__
    method_with_axis.__doc__ = method.__doc__
    return method_with_axis


for _name in ("amax", "amin", "max", "min", "argmax", "argmin", "var", "std", "logsumexp", "cumsum", "cumprod",
              "softmax", "log_softmax", "median", "norm", "flip", "squeeze", "unsqueeze", "argsort", "sort"):
    if hasattr(Tensor, _name):
        setattr(Tensor, _name, _accept_axis(getattr(Tensor, _name)))


def maximum(a: Any, b: Any) -> Tensor:
    """The elementwise larger of a and b (NaN if either is NaN); ties share the gradient evenly."""
    if (traced := _traced(a, b)) is not None:
        return type(traced).__ta_function__("maximum", (a, b))
    a = a if isinstance(a, Tensor) else Tensor._wrap(a)
    a, b = a._promoted(b)
    shape = check_broadcast("maximum", a.shape, b.shape)
    return stack([a.expand(shape), b.expand(shape)]).amax(0)


def minimum(a: Any, b: Any) -> Tensor:
    """The elementwise smaller of a and b (NaN if either is NaN); ties share the gradient evenly."""
    if (traced := _traced(a, b)) is not None:
        return type(traced).__ta_function__("minimum", (a, b))
    a = a if isinstance(a, Tensor) else Tensor._wrap(a)
    a, b = a._promoted(b)
    shape = check_broadcast("minimum", a.shape, b.shape)
    return stack([a.expand(shape), b.expand(shape)]).amin(0)


__all__ = ["Tensor", "cat", "maximum", "minimum", "stack", "where"]
