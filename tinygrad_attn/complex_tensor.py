"""Complex numbers as far as rotary position embeddings written PyTorch's way need them.

Llama-style code rotates pairs of features by multiplying complex numbers:

    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)             # e^(i theta), (T, d/2)
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)

Here a `ComplexTensor` is a pair of real tensors kept as one (..., 2) tensor `pair` (real part, imaginary
part), as view_as_real shows it; every operation is real Tensor ops on that pair, so the engine
differentiates it like any other and a real loss's gradient for a real input is PyTorch's. There is no
complex dtype: a ComplexTensor is refused where a Tensor is expected, and what it offers is listed below
(the rest is an AttributeError naming it). The choice, and what is left out, is in docs/api.md.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from .checks import check_tensor
from .tensor import Tensor, stack

_NAMES = {np.dtype(np.float32): "complex64", np.dtype(np.float64): "complex128"}


class ComplexTensor:
    """Complex values of shape `shape`, held as `pair` (*shape, 2): real and imaginary parts."""

    __slots__ = ("pair",)

    def __init__(self, pair: Tensor):
        if not isinstance(pair, Tensor) or pair.ndim < 1 or pair.shape[-1] != 2 or pair.dtype.kind != "f":
            raise ValueError(f"ComplexTensor: needs a float tensor whose last dim is 2 (real, imaginary), got "
                             f"{getattr(pair, 'shape', type(pair).__name__)}")
        self.pair = pair

    @property
    def real(self) -> Tensor:
        return self.pair[..., 0]

    @property
    def imag(self) -> Tensor:
        return self.pair[..., 1]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.pair.shape[:-1]

    @property
    def ndim(self) -> int:
        return self.pair.ndim - 1

    @property
    def dtype(self) -> str:
        """'complex64' or 'complex128' (a name: there is no complex dtype here)."""
        return _NAMES[self.pair.dtype]

    @property
    def requires_grad(self) -> bool:
        return self.pair.requires_grad

    @property
    def device(self) -> Any:
        return self.pair.device

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return self.ndim

    def numpy(self) -> np.ndarray:
        data = self.pair.detach().numpy()
        return data[..., 0] + 1j * data[..., 1]

    def view(self, *shape: Any) -> ComplexTensor:
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return ComplexTensor(self.pair.reshape(*shape, 2))

    reshape = view

    def unsqueeze(self, dim: int) -> ComplexTensor:
        return ComplexTensor(self.pair.unsqueeze(dim if dim >= 0 else dim - 1))  # the pair's last dim stays last

    def __getitem__(self, index: Any) -> ComplexTensor:
        index = index if isinstance(index, tuple) else (index,)
        if any(i is Ellipsis for i in index):
            return ComplexTensor(self.pair[index + (slice(None),)])
        return ComplexTensor(self.pair[index + (Ellipsis, slice(None))])

    def to(self, *args: Any, **kwargs: Any) -> ComplexTensor:
        """A device (the CPU) keeps it as it is; a complex dtype name picks its parts' precision."""
        for a in (*args, kwargs.get("dtype")):
            if isinstance(a, str) and a.startswith("complex"):
                return ComplexTensor(self.pair.astype(np.float32 if a == "complex64" else np.float64))
        return self

    def detach(self) -> ComplexTensor:
        return ComplexTensor(self.pair.detach())

    def conj(self) -> ComplexTensor:
        return ComplexTensor(stack([self.real, -self.imag], -1))

    def abs(self) -> Tensor:
        return (self.real * self.real + self.imag * self.imag).sqrt()

    def _parts(self, other: Any) -> tuple[Any, Any]:
        if isinstance(other, ComplexTensor):
            return other.real, other.imag
        if isinstance(other, builtins.complex):
            return other.real, other.imag
        if isinstance(other, Tensor) or isinstance(other, (int, float, np.integer, np.floating)):
            return other, 0.0
        return NotImplemented, None

    def __mul__(self, other: Any) -> ComplexTensor:
        c, d = self._parts(other)
        if c is NotImplemented:
            return NotImplemented
        a, b = self.real, self.imag
        if isinstance(d, float) and d == 0.0:  # times a real number or tensor
            return ComplexTensor(stack([a * c, b * c], -1))
        return ComplexTensor(stack([a * c - b * d, a * d + b * c], -1))  # (a + ib)(c + id)

    __rmul__ = __mul__

    def __add__(self, other: Any) -> ComplexTensor:
        c, d = self._parts(other)
        if c is NotImplemented:
            return NotImplemented
        return ComplexTensor(stack([self.real + c, self.imag + d], -1))

    __radd__ = __add__

    def __sub__(self, other: Any) -> ComplexTensor:
        c, d = self._parts(other)
        if c is NotImplemented:
            return NotImplemented
        return ComplexTensor(stack([self.real - c, self.imag - d], -1))

    def __neg__(self) -> ComplexTensor:
        return ComplexTensor(-self.pair)

    def __repr__(self) -> str:
        return f"ComplexTensor({self.numpy()!r}, dtype={self.dtype})"

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"ComplexTensor has no {name!r}: complex numbers here cover what rotary embeddings "
                             "use (polar, view_as_complex, view_as_real, *, +, -, real, imag, view, slicing)")


def polar(abs: Tensor, angle: Tensor) -> ComplexTensor:  # noqa: A002  (PyTorch's names)
    """abs * e^(i angle), as torch.polar: abs and angle real tensors of one shape (or broadcasting)."""
    r, theta = check_tensor(abs, "polar", "abs"), check_tensor(angle, "polar", "angle")
    if r.dtype != theta.dtype or r.dtype.kind != "f":
        raise TypeError(f"polar: abs and angle must be float tensors of one dtype, got {r.dtype} and {theta.dtype}")
    return ComplexTensor(stack([r * theta.cos(), r * theta.sin()], -1))


def view_as_complex(input: Tensor) -> ComplexTensor:  # noqa: A002
    """(..., 2) real -> (...) complex, as torch.view_as_complex (the pair itself, no copy)."""
    x = check_tensor(input, "view_as_complex")
    if x.ndim < 1 or x.shape[-1] != 2 or x.dtype.kind != "f":
        raise ValueError(f"view_as_complex: needs a float tensor whose last dim is 2, got shape {x.shape} and "
                         f"dtype {x.dtype}")
    return ComplexTensor(x)


def view_as_real(input: ComplexTensor) -> Tensor:  # noqa: A002
    """(...) complex -> (..., 2) real, as torch.view_as_real."""
    if not isinstance(input, ComplexTensor):
        raise TypeError(f"view_as_real: needs a complex tensor (from polar or view_as_complex), got "
                        f"{type(input).__name__}")
    return input.pair


def complex(real: Tensor, imag: Tensor) -> ComplexTensor:  # noqa: A001
    """real + i imag, as torch.complex."""
    r, i = check_tensor(real, "complex", "real"), check_tensor(imag, "complex", "imag")
    if r.dtype != i.dtype or r.dtype.kind != "f":
        raise TypeError(f"complex: real and imag must be float tensors of one dtype, got {r.dtype} and {i.dtype}")
    return ComplexTensor(stack([r, i], -1))


__all__ = ["ComplexTensor", "complex", "polar", "view_as_complex", "view_as_real"]
