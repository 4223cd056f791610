"""Argument checks: one clear error naming the argument and its values, instead of a traceback from numpy.

Every public function and method checks its arguments with these before any work, so a bad input never
reaches a kernel or numpy's own error messages.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .engine import Node, _short
from .memory import check_fits


def check_broadcast(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The shape the given shapes broadcast to, or one clear error naming them."""
    if len(shapes) == 2:  # the usual call (a binary op), without numpy's arrays: a dim agrees or is 1
        a, b = shapes if len(shapes[0]) >= len(shapes[1]) else shapes[::-1]
        out, offset = list(a), len(a) - len(b)
        for i, n in enumerate(b):
            m = a[offset + i]
            if n != m and n != 1:
                if m != 1:
                    break
                out[offset + i] = n
        else:
            return tuple(out)
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
    if len(a) <= 2 and len(b) <= 2:  # no batch dims, the usual product: numpy's broadcast_shapes is not called
        batch = ()
    else:
        try:
            batch = np.broadcast_shapes(a[:-2], b[:-2])
        except ValueError:
            raise ValueError(f"matmul: batch dims of shapes {a} and {b} cannot be broadcast together") from None
    out = batch + (a[-2:-1] if len(a) > 1 else ()) + (b[-1:] if len(b) > 1 else ())
    check_fits("matmul", f"the product of {a} and {b}", out, itemsize, 1, "use smaller operands")


def normalize_dim(dim: int, ndim: int, op: str) -> int:
    if type(dim) is int and -ndim <= dim < ndim:  # the usual call
        return dim % ndim
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
    size = math.prod(current)
    if all(type(n) is int and n >= -1 for n in shape):  # the usual call: ints, at most one -1
        holes = shape.count(-1)
        if holes == 0 and math.prod(shape) == size:
            return tuple(shape)
        known = -math.prod(shape)  # the other sizes' product, when there is one -1
        if holes == 1 and known > 0 and size % known == 0:
            return tuple(size // known if n == -1 else n for n in shape)
    if any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) for n in shape):
        raise TypeError(f"{op}: sizes must be ints, got {shape!r}")
    shape = tuple(int(n) for n in shape)
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


def normalize_index(index: Any, shape: tuple[int, ...], keep_tensors: bool = False) -> Any:
    """Lists in an index become numpy arrays, and tensors too unless `keep_tensors` (an op given an index
    tensor guards its version); out-of-range ints raise IndexError."""
    items = index if isinstance(index, tuple) else (index,)
    converted, checked = [], []
    for item in items:
        original = item
        if isinstance(item, Node):
            item = item._data
        elif isinstance(item, list):
            item = np.asarray(item)
        if isinstance(item, np.ndarray) and item.dtype.kind not in "iub":
            raise IndexError(f"index: arrays used as indices must be integer or bool, got dtype {item.dtype}")
        checked.append(item)
        converted.append(original if keep_tensors and isinstance(original, Node) else item)
    try:
        stand_in = np.lib.stride_tricks.as_strided(np.zeros(1, np.bool_), shape, (0,) * len(shape))
        stand_in[tuple(checked)]  # validate on a zero-stride stand-in of the same shape: no memory
    except IndexError as err:
        raise IndexError(f"index {index!r} is invalid for a tensor of shape {shape}: {err}") from None
    return tuple(converted) if isinstance(index, tuple) else converted[0]


def float_tensor(x: Any, op: str, name: str = "input") -> Node:
    """x as a float32 or float64 tensor, or one clear error: integer and bool inputs are refused (as PyTorch
    refuses them in softmax and layer norm), float16 too (the kernels compute in float32 or float64)."""
    x = check_tensor(x, op, name)
    if x.dtype not in (np.float32, np.float64):
        hint = "; convert it with .float()" if x.dtype.kind in "iubf" else ""
        raise TypeError(f"{op}: {name} must be float32 or float64, got {x.dtype}{hint}")
    return x


def bool_mask(mask: Any, shape: tuple[int, ...], op: str) -> np.ndarray | None:
    if mask is None:
        return None
    mask = mask._data if isinstance(mask, Node) else np.asarray(mask)
    if mask.dtype != np.bool_:
        raise TypeError(f"{op}: mask must be bool (True = keep), got dtype {mask.dtype}")
    check_broadcast(f"{op}: mask", mask.shape, shape)
    return mask


def check_indices(indices: Any, rows: int, op: str) -> np.ndarray:
    """Integer indices in [0, rows), as an array; anything else is one clear error."""
    indices = np.asarray(indices._data if isinstance(indices, Node) else indices)
    if indices.dtype.kind not in "iu":
        raise TypeError(f"{op}: indices must be integers, got dtype {indices.dtype}")
    if indices.size and (indices.min() < 0 or indices.max() >= rows):
        raise IndexError(f"{op}: indices must lie in [0, {rows}), got values from {indices.min()} to {indices.max()}")
    return indices
