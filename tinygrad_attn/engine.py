"""The autograd core: `Tensor`, `Function`, and the reverse-mode backward pass.

Every differentiable op is a `Function`: a `forward` on numpy arrays that may
save what its `backward` needs in `ctx`, and a `backward` that turns the
gradient of the output into one gradient per input. `Function.apply` runs the
forward and, when gradients are wanted, records a `Context` on the output: the
edges of the graph. `Tensor.backward` walks those edges once, in reverse
topological order, and hands each input its gradient.

The engine, not each op, sums broadcast gradients back to an input's shape
(`_unbroadcast`), so an op's backward may return a gradient of the output's
broadcast shape.

This module imports no op: ops.py (the primitive ops) and functional.py (the
fused ones) import it and give Tensor its operators and methods, so imports
go one way, from the rules to the engine.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

_grad_enabled = True


def is_grad_enabled() -> bool:
    """Whether new ops record the graph (False inside `no_grad`)."""
    return _grad_enabled


class no_grad:
    """Context manager and decorator: ops inside record no graph.

    >>> with no_grad(): y = x * 2          # y.requires_grad is False
    >>> @no_grad()
    ... def evaluate(model, x): ...
    """

    def __enter__(self) -> None:
        global _grad_enabled
        self._previous = _grad_enabled
        _grad_enabled = False

    def __exit__(self, *exc: object) -> None:
        global _grad_enabled
        _grad_enabled = self._previous

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def without_grad(*args: Any, **kwargs: Any) -> Any:
            with no_grad():
                return fn(*args, **kwargs)

        return without_grad


class Context:
    """What one application of a Function leaves for its backward.

    `inputs` are the parent tensors (the graph's edges), `needs_input_grad`
    says which of them want a gradient, and `saved_tensors` holds the arrays
    the forward chose to keep. Any other attribute (a shape, an axis) may be
    set on it freely.
    """

    def __init__(self, function: type[Function], inputs: tuple[Tensor, ...]):
        self.function = function
        self.inputs = inputs
        self.needs_input_grad = tuple(t.requires_grad for t in inputs)
        self.saved_tensors: tuple = ()
        self.released = False

    def save_for_backward(self, *arrays: Any) -> None:
        self.saved_tensors = arrays

    def release(self) -> None:
        """Drop the saved arrays once the backward pass no longer needs them."""
        self.saved_tensors = ()
        self.released = True


class Function:
    """Base class of every differentiable op, built-in or the user's own.

    Subclasses define two static methods on numpy arrays:

        forward(ctx, *arrays, **kwargs) -> array
        backward(ctx, grad) -> one gradient per positional input
                               (a tuple, or a bare array for one input; None
                               where an input needs no gradient)

    and are called as `MyOp.apply(*tensors, **kwargs)`.
    """

    @staticmethod
    def forward(ctx: Context, *arrays: np.ndarray, **kwargs: Any) -> np.ndarray:
        raise NotImplementedError

    @staticmethod
    def backward(ctx: Context, grad: np.ndarray) -> Any:
        raise NotImplementedError

    @classmethod
    def apply(cls, *inputs: Any, **kwargs: Any) -> Tensor:
        tensors = tuple(x if isinstance(x, Tensor) else Tensor(x) for x in inputs)
        ctx = Context(cls, tensors)
        out = np.asarray(cls.forward(ctx, *(t.data for t in tensors), **kwargs))
        requires_grad = _grad_enabled and any(ctx.needs_input_grad) and out.dtype.kind == "f"
        result = Tensor._result(out, ctx if requires_grad else None)
        for hook in _forward_hooks:
            hook(ctx, result)
        return result


# Observers of the engine (used by tinygrad_attn.debug): called as
# hook(ctx, output) after each forward and hook(ctx, grad_output, input_grads)
# after each backward step.
_forward_hooks: list[Callable] = []
_backward_hooks: list[Callable] = []


def _unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum `grad` over the axes numpy broadcasting added or stretched to reach `shape`."""
    if grad.shape == shape:
        return grad
    extra = grad.ndim - len(shape)
    stretched = tuple(i + extra for i, n in enumerate(shape) if n == 1 and grad.shape[i + extra] != 1)
    grad = grad.sum(axis=tuple(range(extra)) + stretched, keepdims=True)
    return grad.reshape(shape)


def _topological_order(root: Tensor) -> list[Tensor]:
    """Tensors reachable from `root` through the graph, parents before children.

    Iterative depth-first search, so a chain of any length fits the Python stack.
    """
    order, visited = [], set()
    stack: list[tuple[Tensor, bool]] = [(root, False)]
    while stack:
        node, parents_done = stack.pop()
        if parents_done:
            order.append(node)
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))
        if node._ctx is not None:
            stack.extend((parent, False) for parent in node._ctx.inputs if parent.requires_grad)
    return order


def _as_gradient_tuple(grads: Any, n_inputs: int, function: type) -> tuple:
    grads = grads if isinstance(grads, tuple) else (grads,)
    if len(grads) != n_inputs:
        raise RuntimeError(
            f"{function.__name__}.backward returned {len(grads)} gradients for {n_inputs} inputs"
        )
    return grads


def run_backward(root: Tensor, grad: np.ndarray, retain_graph: bool) -> None:
    """Propagate `grad` (dL/droot) to every leaf that requires grad.

    Gradients of intermediate tensors live only in the local `grads` dict and
    are dropped as soon as they have been passed on; leaves accumulate theirs
    into `.grad`.
    """
    grads: dict[int, np.ndarray] = {id(root): grad}
    for node in reversed(_topological_order(root)):
        g = grads.pop(id(node), None)
        if g is None:
            continue
        ctx = node._ctx
        if ctx is None:  # a leaf: accumulate
            g = g.astype(node.dtype, copy=False)
            node.grad = Tensor(g if node.grad is None else node.grad.data + g)
            continue
        if ctx.released:
            raise RuntimeError(
                f"backward through the graph a second time ({ctx.function.__name__}): its saved "
                "arrays were freed after the first backward; pass retain_graph=True to the first call"
            )
        input_grads = _as_gradient_tuple(ctx.function.backward(ctx, g), len(ctx.inputs), ctx.function)
        for hook in _backward_hooks:
            hook(ctx, g, input_grads)
        for parent, pg in zip(ctx.inputs, input_grads):
            if pg is None or not parent.requires_grad:
                continue
            pg = _unbroadcast(np.asarray(pg), parent.shape)
            if pg.dtype != parent.dtype:
                pg = pg.astype(parent.dtype)
            grads[id(parent)] = pg if id(parent) not in grads else grads[id(parent)] + pg
        if not retain_graph:
            ctx.release()


def tensor_dtype(dtype: Any, op: str) -> np.dtype:
    """`dtype` as a numpy dtype a tensor may have (float, integer or bool), or one clear TypeError."""
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{op}: dtype {dtype!r} is not a numpy dtype") from None
    if dtype.kind not in "fiub":
        raise TypeError(f"{op}: unsupported dtype {dtype} (expected a float, integer or bool dtype)")
    return dtype


def _short(value: Any, limit: int = 80) -> str:
    """repr(value) cut to `limit` characters, for error messages that must not echo a huge input."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _float_default(arr: np.ndarray) -> np.ndarray:
    """Python floats (parsed by numpy as float64) become float32, the framework's default."""
    return arr.astype(np.float32) if arr.dtype == np.float64 else arr


class Tensor:
    """An n-dimensional array that remembers how it was computed.

    Tensor(data, requires_grad=False, dtype=None): `data` is a scalar, a nested
    list or a numpy array. Python floats and lists become float32; numpy arrays
    keep their dtype and are used without a copy; integer and bool tensors
    (indices, masks) cannot require grad.
    """

    __array_priority__ = 1000  # so `ndarray + Tensor` calls Tensor.__radd__
    __hash__ = object.__hash__  # identity hash, although == is elementwise

    def __init__(self, data: Any, requires_grad: bool = False, dtype: Any = None):
        if isinstance(data, Tensor):
            data = data.data
        if isinstance(data, (np.ndarray, np.generic)):
            arr = np.asarray(data)
        else:
            try:
                arr = _float_default(np.asarray(data))
            except ValueError as err:  # ragged nesting
                raise ValueError(f"Tensor: data must be a number or a rectangular nested list, got "
                                 f"{_short(data)} ({err})") from None
        if dtype is not None:
            arr = arr.astype(tensor_dtype(dtype, "Tensor"), copy=False)
        if arr.dtype.kind not in "fiub":
            raise TypeError(f"Tensor: unsupported dtype {arr.dtype} (expected a float, integer or bool array), "
                            f"from {_short(data)}")
        if requires_grad and arr.dtype.kind != "f":
            raise TypeError(f"Tensor: only floating-point tensors can require grad, got dtype {arr.dtype}")
        self.data: np.ndarray = arr
        self.grad: Tensor | None = None
        self.requires_grad = bool(requires_grad)
        self._ctx: Context | None = None

    @classmethod
    def _result(cls, data: np.ndarray, ctx: Context | None) -> Tensor:
        """An op's output: the array is the op's own, so __init__'s checks are skipped."""
        t = object.__new__(cls)
        t.data, t.grad, t.requires_grad, t._ctx = data, None, ctx is not None, ctx
        return t

    # --- what it is -------------------------------------------------------
    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)
    ndim = property(lambda self: self.data.ndim)
    is_leaf = property(lambda self: self._ctx is None)

    def numel(self) -> int:
        """The number of elements (PyTorch's name; `size()` is the shape)."""
        return self.data.size

    def size(self, dim: int | None = None) -> Any:
        """The shape, as PyTorch's `size()`; `size(dim)` is one dim's length."""
        if dim is None:
            return self.data.shape
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
            raise TypeError(f"size: dim must be an int, got {dim!r}")
        if not -self.ndim <= dim < max(self.ndim, 1) or self.ndim == 0:
            raise IndexError(f"size: dim {dim} is out of range for a tensor with {self.ndim} dims")
        return self.data.shape[dim]

    def dim(self) -> int:
        return self.data.ndim

    def tolist(self) -> Any:
        return self.data.tolist()

    def _scalar(self, kind: str) -> Any:
        if self.data.size != 1:
            raise ValueError(f"{kind}(): only a tensor with one element can be converted, this one has shape "
                             f"{self.shape}")
        return self.data.item()

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

    def numpy(self) -> np.ndarray:
        return self.data

    def item(self) -> Any:
        if self.data.size != 1:
            raise ValueError(f"item: only a tensor with one element has an item, this one has shape {self.shape}")
        return self.data.item()

    def detach(self) -> Tensor:
        """The same data, cut from the graph."""
        return Tensor(self.data)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.data if dtype is None else self.data.astype(dtype)

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        body = np.array2string(self.data, precision=4, separator=", ", prefix="Tensor(", threshold=50)
        extra = f", dtype={self.dtype}"
        if self._ctx is not None:
            extra += f", grad_fn={self._ctx.function.__name__}"
        elif self.requires_grad:
            extra += ", requires_grad=True"
        return f"Tensor({body}{extra})"

    # --- the backward pass ---------------------------------------------------
    def backward(self, grad: Any = None, retain_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into the `.grad` of every leaf that requires grad.

        `grad` is dL/dself; it may be omitted only when self has one element.
        """
        if not self.requires_grad:
            raise RuntimeError("backward: this tensor does not require grad and has no graph behind it")
        if grad is None:
            if self.data.size != 1:
                raise RuntimeError(
                    f"backward: grad can be omitted only for a single-element output, "
                    f"this one has shape {self.shape}; pass grad of that shape"
                )
            grad = np.ones(self.shape, dtype=self.dtype)
        grad = np.asarray(grad.data if isinstance(grad, Tensor) else grad, dtype=self.dtype)
        if grad.shape != self.shape:
            raise ValueError(f"backward: grad has shape {grad.shape}, the tensor has shape {self.shape}")
        run_backward(self, grad, retain_graph)

    def zero_grad(self) -> None:
        self.grad = None
