"""Dtypes with PyTorch's names, and PyTorch's type promotion.

The dtype objects are numpy dtypes, so `x.dtype == ta.long` and `dtype=ta.float32` work as in PyTorch and
numpy alike. `result_type` is PyTorch's rule for what an op of several operands computes in:

- three kinds of operand, from strongest to weakest: tensors with dims, 0-d tensors, plain numbers (Python
  or numpy scalars); a weaker kind changes the result only when it is of a higher category
  (bool < integer < float), and then
- a plain float stands for the default float dtype (float32), so `float32 tensor * 0.5`, `arange(n) * 0.5`
  and `int tensor / int tensor` stay float32, where numpy's rules would give float64.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

float32 = float = np.dtype(np.float32)  # noqa: A001  (PyTorch's names)
float64 = double = np.dtype(np.float64)
float16 = half = np.dtype(np.float16)
int8 = np.dtype(np.int8)
int16 = short = np.dtype(np.int16)
int32 = int = np.dtype(np.int32)  # noqa: A001
int64 = long = np.dtype(np.int64)
uint8 = np.dtype(np.uint8)
bool = np.dtype(np.bool_)  # noqa: A001

DEFAULT_FLOAT = float32


class UnsupportedDtype:
    """A PyTorch dtype name numpy has no type for (`ta.bfloat16`): it exists, so a program that merely
    names it (nanoGPT's table of dtypes) runs; using it for a tensor is one clear TypeError."""

    def __init__(self, name: str, instead: str):
        self.name, self.instead = name, instead

    def __repr__(self) -> str:
        return f"ta.{self.name}"


bfloat16 = UnsupportedDtype("bfloat16", "ta.float32 (or ta.float16 to store half the bytes)")

_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2}


def promote_types(a: np.dtype, b: np.dtype) -> np.dtype:
    """PyTorch's promote_types: within a category the wider type; an integer with a float gives the float."""
    if a == b:
        return a
    ca, cb = _CATEGORY[a.kind], _CATEGORY[b.kind]
    if ca != cb:
        return a if ca > cb else b
    return np.promote_types(a, b)


def _number_dtype(value: Any) -> np.dtype:
    """The dtype a plain number stands for: bool, int64, or the default float."""
    if isinstance(value, (builtins.bool, np.bool_)):
        return bool
    if isinstance(value, (builtins.int, np.integer)):
        return long
    if isinstance(value, (builtins.complex, np.complexfloating)):
        raise TypeError(f"complex numbers are not supported (real dtypes only), got {value!r}")
    return DEFAULT_FLOAT


def _combine(higher: np.dtype | None, lower: np.dtype | None) -> np.dtype | None:
    """A stronger kind's result and a weaker kind's: the weaker one counts only from a higher category."""
    if higher is None:
        return lower
    if lower is None or higher.kind == "f":
        return higher
    if higher.kind == "b" or lower.kind == "f":
        return promote_types(higher, lower)
    return higher


def result_type(*operands: Any) -> np.dtype:
    """The dtype an elementwise op of these operands computes in (torch.result_type's rule).

    Each operand is a Tensor-like (anything with `.dtype` and `.ndim`) or a plain number."""
    dims = zero = numbers = None
    for x in operands:
        if hasattr(x, "ndim") and hasattr(x, "dtype") and not isinstance(x, np.generic):
            if x.ndim:
                dims = x.dtype if dims is None else promote_types(dims, x.dtype)
            else:
                zero = x.dtype if zero is None else promote_types(zero, x.dtype)
        else:
            d = _number_dtype(x)
            numbers = d if numbers is None else promote_types(numbers, d)
    return _combine(dims, _combine(zero, numbers))


def is_number(value: Any) -> builtins.bool:
    """A plain Python or numpy real number (bools included)."""
    return isinstance(value, (builtins.int, builtins.float, np.bool_, np.integer, np.floating))


__all__ = ["DEFAULT_FLOAT", "bool", "double", "float", "float16", "float32", "float64", "half", "int", "int8",
           "int16", "int32", "int64", "is_number", "long", "promote_types", "result_type", "short", "uint8"]
