"""Tensor factories with PyTorch's names: float32 unless a dtype is given, random ones from `ta.manual_seed`'s
generator."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import rng
from .checks import check_number, check_tensor
from .engine import check_device, tensor_dtype
from .tensor import Tensor

_DEFAULT = np.float32


def _shape(size: tuple[Any, ...], op: str) -> tuple[int, ...]:
    size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
    if any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0 for n in size):
        raise ValueError(f"{op}: sizes must be non-negative ints, got {size!r}")
    size = tuple(int(n) for n in size)
    if max(size, default=0) > np.iinfo(np.intp).max or math.prod(size) > np.iinfo(np.intp).max:
        raise ValueError(f"{op}: size {size} has more elements than an array can hold")
    return size


def _dtype(dtype: Any, default: Any) -> Any:
    """`dtype` checked (one clear TypeError for what is no tensor dtype), or `default` when None."""
    return default if dtype is None else tensor_dtype(dtype, "dtype")


def _make(array: np.ndarray, dtype: Any, requires_grad: bool) -> Tensor:
    return Tensor(array.astype(_dtype(dtype, _DEFAULT), copy=False), requires_grad=requires_grad)


def tensor(data: Any, dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    check_device(device, "tensor")
    """A new tensor holding a copy of `data` (Python floats become float32, ints int64, as in PyTorch)."""
    data = data._data if isinstance(data, Tensor) else data
    array = np.array(data, copy=True)
    if not isinstance(data, (np.ndarray, np.generic)) and array.dtype == np.float64:
        array = array.astype(_DEFAULT)  # Python floats: the default float dtype, as Tensor(...) does
    return Tensor(array, requires_grad=requires_grad, dtype=dtype)


def zeros(*size: Any, dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    check_device(device, "zeros")
    return _make(np.zeros(_shape(size, "zeros")), dtype, requires_grad)


def ones(*size: Any, dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    check_device(device, "ones")
    return _make(np.ones(_shape(size, "ones")), dtype, requires_grad)


def full(size: Any, fill_value: float, dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    check_device(device, "full")
    if isinstance(fill_value, Tensor) and fill_value.ndim == 0:
        fill_value = fill_value.item()
    if not isinstance(fill_value, (int, float, np.number, np.bool_)):
        raise TypeError(f"full: fill_value must be a number, got {type(fill_value).__name__}")
    inferred = np.bool_ if isinstance(fill_value, (bool, np.bool_)) else np.int64 if isinstance(
        fill_value, (int, np.integer)) else _DEFAULT  # PyTorch infers the dtype from the fill value
    return _make(np.full(_shape((size,), "full"), fill_value), dtype or inferred, requires_grad)


def zeros_like(t: Tensor, dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    check_device(device, "zeros_like")
    t = check_tensor(t, "zeros_like")
    return Tensor(np.zeros(t.shape, tensor_dtype(dtype or t.dtype, "zeros_like")), requires_grad=requires_grad)


def ones_like(t: Tensor, dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    check_device(device, "ones_like")
    t = check_tensor(t, "ones_like")
    return Tensor(np.ones(t.shape, tensor_dtype(dtype or t.dtype, "ones_like")), requires_grad=requires_grad)


def arange(start: float, end: float | None = None, step: float = 1, dtype: Any = None,
           requires_grad: bool = False, device: Any = None) -> Tensor:
    check_device(device, "arange")
    """[start, end) by step; int64 when every argument is an int, float32 otherwise (PyTorch's rule)."""
    start, end = (0, start) if end is None else (start, end)
    for name, value in (("start", start), ("end", end), ("step", step)):
        check_number(value, name, "arange")
    if step == 0:
        raise ValueError("arange: step must not be 0")
    ints = all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in (start, end, step))
    values = np.arange(start, end, step)
    return Tensor(values.astype(_dtype(dtype, np.int64 if ints else _DEFAULT)), requires_grad=requires_grad)


def randn(*size: Any, generator: Any = None, dtype: Any = None, requires_grad: bool = False,
          device: Any = None) -> Tensor:
    check_device(device, "randn")
    return _make(rng.generator(generator).standard_normal(_shape(size, "randn")), dtype, requires_grad)


def rand(*size: Any, generator: Any = None, dtype: Any = None, requires_grad: bool = False,
         device: Any = None) -> Tensor:
    check_device(device, "rand")
    return _make(rng.generator(generator).random(_shape(size, "rand")), dtype, requires_grad)


def tril(t: Tensor, diagonal: int = 0) -> Tensor:
    """torch.tril's function form of `Tensor.tril` (entries above the diagonal-th diagonal set to 0)."""
    return check_tensor(t, "tril").tril(diagonal)


def triu(t: Tensor, diagonal: int = 0) -> Tensor:
    """torch.triu's function form of `Tensor.triu` (entries below the diagonal-th diagonal set to 0)."""
    return check_tensor(t, "triu").triu(diagonal)


def topk(t: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Tensor, Tensor]:  # noqa: A002
    """torch.topk's function form of `Tensor.topk`."""
    return check_tensor(t, "topk").topk(k, dim, largest, sorted)


def randint(low: int, high: int | None = None, size: Any = None, *, generator: Any = None, dtype: Any = None,
            requires_grad: bool = False, device: Any = None) -> Tensor:
    """Integers in [low, high) (or [0, low) when high is omitted), int64, from the framework's generator."""
    check_device(device, "randint")
    if isinstance(high, (tuple, list)) and size is None:  # randint(high, size), as PyTorch takes it
        high, size = None, high
    if high is None:
        low, high = 0, low
    if size is None:
        raise TypeError("randint: size is required, as in PyTorch: randint(high, (n,)) or randint(low, high, (n,))")
    for name, value in (("low", low), ("high", high)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"randint: {name} must be an int, got {value!r}")
    if high <= low:
        raise ValueError(f"randint: high ({high}) must be larger than low ({low})")
    shape = _shape(size if isinstance(size, (tuple, list)) else (size,), "randint")
    values = rng.generator(generator).integers(low, high, shape).astype(_dtype(dtype, np.int64))
    return Tensor(values, requires_grad=requires_grad)


def randperm(n: int, *, generator: Any = None, dtype: Any = None, device: Any = None) -> Tensor:
    """A random permutation of 0 .. n-1, int64."""
    check_device(device, "randperm")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"randperm: n must be a non-negative int, got {n!r}")
    return Tensor(rng.generator(generator).permutation(int(n)).astype(_dtype(dtype, np.int64)))


def empty(*size: Any, dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    """PyTorch's uninitialised tensor; here zeros (reading an uninitialised value is never useful)."""
    check_device(device, "empty")
    return _make(np.zeros(_shape(size, "empty")), dtype, requires_grad)


def full_like(t: Tensor, fill_value: float, dtype: Any = None, requires_grad: bool = False,
              device: Any = None) -> Tensor:
    check_device(device, "full_like")
    t = check_tensor(t, "full_like")
    return full(t.shape, fill_value, dtype=dtype or t.dtype, requires_grad=requires_grad)


def empty_like(t: Tensor, dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    return zeros_like(t, dtype, requires_grad, device)


def rand_like(t: Tensor, dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    t = check_tensor(t, "rand_like")
    return rand(*t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad, device=device)


def randn_like(t: Tensor, dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    t = check_tensor(t, "randn_like")
    return randn(*t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad, device=device)


def linspace(start: float, end: float, steps: int, dtype: Any = None, requires_grad: bool = False,
             device: Any = None) -> Tensor:
    check_device(device, "linspace")
    if dtype is not None and _dtype(dtype, None) == np.bool_:
        raise RuntimeError('linspace(): "linspace_cpu" not implemented for \'Bool\'')
    return _make(np.linspace(check_number(start, "start", "linspace"), check_number(end, "end", "linspace"),
                             int(steps)), dtype, requires_grad)


def eye(n: int, m: int | None = None, dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    check_device(device, "eye")
    return _make(np.eye(n, m), dtype, requires_grad)


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing the array's memory and dtype, as torch.from_numpy."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy: expected a numpy array, got {type(array).__name__}")
    return Tensor(array)


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor sharing memory with `data` where it can (a tensor or an array of that dtype), else a copy."""
    check_device(device, "as_tensor")
    if isinstance(data, Tensor):
        return data if dtype is None else data.to(dtype)
    if isinstance(data, np.ndarray):
        return Tensor(data if dtype is None else data.astype(_dtype(dtype, None), copy=False))
    return tensor(data, dtype=dtype)


def multinomial(probs: Any, num_samples: int, replacement: bool = False, *, generator: Any = None) -> Tensor:
    """Indices drawn from the rows of `probs` (1-D or 2-D non-negative weights, not necessarily summing to 1),
    from the framework's generator; int64, shape (num_samples,) or (rows, num_samples)."""
    p = np.asarray(probs._data if isinstance(probs, Tensor) else probs, dtype=np.float64)
    if p.ndim not in (1, 2) or p.shape[-1] == 0:
        raise ValueError(f"multinomial: probs must be 1-D or 2-D with at least one category, got shape {p.shape}")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise ValueError("multinomial: probs must be finite and non-negative")
    rows = p.reshape(-1, p.shape[-1])
    totals = rows.sum(-1)
    if np.any(totals <= 0):
        raise ValueError("multinomial: every row of probs needs a positive sum")
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples <= 0:
        raise ValueError(f"multinomial: num_samples must be a positive int, got {num_samples!r}")
    if not replacement and num_samples > int((rows > 0).sum(-1).min()):
        raise ValueError(f"multinomial: cannot draw {num_samples} samples without replacement from "
                         f"{int((rows > 0).sum(-1).min())} categories of non-zero probability")
    draw = rng.generator(generator)
    out = np.stack([draw.choice(len(row), num_samples, replace=replacement, p=row / row.sum()) for row in rows])
    return Tensor(out.reshape(p.shape[:-1] + (num_samples,)).astype(np.int64))


__all__ = ["arange", "as_tensor", "empty", "empty_like", "eye", "from_numpy", "full", "full_like", "linspace",
           "multinomial", "ones", "ones_like", "rand", "rand_like", "randint", "randn", "randn_like", "randperm",
           "tensor", "topk", "tril", "triu", "zeros", "zeros_like"]
