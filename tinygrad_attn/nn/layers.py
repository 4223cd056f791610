"""The basic layers: Linear, LayerNorm, Embedding, Dropout, activations and positional encodings.

Initialisation follows PyTorch's defaults and draws from the framework's
generator, so `manual_seed` makes a model reproducible.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import functional as F
from .. import rng
from ..checks import check_indices, check_tensor
from ..fused import EmbeddingLookup, LinearFunction
from ..memory import check_fits
from ..tensor import Tensor
from .module import Module, Parameter


def _uniform(bound: float, shape: tuple[int, ...]) -> np.ndarray:
    return rng.generator().uniform(-bound, bound, shape).astype(np.float32)


class Linear(Module):
    """y = x W^T + b, W of shape (out_features, in_features), both ~ U(-1/sqrt(in), 1/sqrt(in))."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        in_features, out_features = _size(in_features, "in_features", "Linear"), _size(out_features, "out_features",
                                                                                         "Linear")
        self.in_features, self.out_features = in_features, out_features
        check_fits("Linear", "the weights", (out_features, in_features), 4, 3, "use smaller in/out features")
        bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
        self.weight = Parameter(_uniform(bound, (out_features, in_features)))
        self.bias = Parameter(_uniform(bound, (out_features,))) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        if check_tensor(x, "Linear").shape[-1:] != (self.in_features,):
            raise ValueError(f"Linear: input of shape {x.shape} needs last dim {self.in_features}")
        if x.dtype != self.weight.dtype:
            raise RuntimeError(f"Linear: input and weight must have the same dtype, got {x.dtype} and "
                               f"{self.weight.dtype} (cast the input with .to({self.weight.dtype}) or the module with "
                               ".to(dtype), as PyTorch requires)")
        params = (self.weight,) if self.bias is None else (self.weight, self.bias)
        return LinearFunction.apply(x, *params)  # (..., in) -> (..., out)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class LayerNorm(Module):
    """Normalise the trailing `normalized_shape` dims to mean 0, variance 1, then scale and shift."""

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True):
        self.normalized_shape = _normalized_shape(normalized_shape, "LayerNorm")
        self.eps = eps
        self.weight = Parameter(np.ones(self.normalized_shape, np.float32)) if elementwise_affine else None
        self.bias = Parameter(np.zeros(self.normalized_shape, np.float32)) if elementwise_affine and bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.weight is not None}, "
                f"bias={self.bias is not None}")


class RMSNorm(Module):
    """Divide the trailing `normalized_shape` dims by their root mean square, then scale (PyTorch's
    nn.RMSNorm; eps None: the dtype's machine epsilon)."""

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float | None = None,
                 elementwise_affine: bool = True):
        self.normalized_shape = _normalized_shape(normalized_shape, "RMSNorm")
        self.eps = eps
        self.weight = Parameter(np.ones(self.normalized_shape, np.float32)) if elementwise_affine else None

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.weight is not None}"


def _normalized_shape(shape: Any, op: str) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    for n in shape:
        _size(n, "normalized_shape", op, minimum=1)
    return shape


def _size(value: Any, name: str, op: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{op}: {name} must be an int >= {minimum}, got {value!r}")
    return int(value)


class Embedding(Module):
    """A lookup table of `num_embeddings` vectors, initialised N(0, 1); the padding row starts at zero."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None):
        num_embeddings = _size(num_embeddings, "num_embeddings", "Embedding")
        embedding_dim = _size(embedding_dim, "embedding_dim", "Embedding")
        if padding_idx is not None:
            if isinstance(padding_idx, bool) or not isinstance(padding_idx, (int, np.integer)) or not (
                    -num_embeddings <= padding_idx < num_embeddings):
                raise ValueError(f"Embedding: padding_idx must be an int in [{-num_embeddings}, {num_embeddings}), "
                                 f"got {padding_idx!r}")
            padding_idx = int(padding_idx) % num_embeddings
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        check_fits("Embedding", "the table", (num_embeddings, embedding_dim), 4, 3, "use a smaller table")
        weight = rng.generator().standard_normal((num_embeddings, embedding_dim)).astype(np.float32)
        if padding_idx is not None:
            weight[padding_idx] = 0
        self.weight = Parameter(weight)

    def forward(self, indices: Any) -> Tensor:
        original = indices
        indices = check_indices(indices, self.num_embeddings, "Embedding")
        check_fits("Embedding", "the looked-up vectors", indices.shape + (self.embedding_dim,),
                   self.weight.dtype.itemsize, 1, "use a smaller batch or sequence")
        given = original if isinstance(original, Tensor) and original.dtype.kind in "iu" else indices  # guarded
        return EmbeddingLookup.apply(self.weight, indices=given, padding_idx=self.padding_idx)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, padding_idx={self.padding_idx}"


class Dropout(Module):
    def __init__(self, p: float = 0.5):
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class GELU(Module):
    """F.gelu as a module; approximate="tanh" is PyTorch's tanh form (GPT-2's)."""

    def __init__(self, approximate: str = "none"):
        if approximate not in ("none", "tanh"):
            raise ValueError(f'GELU: approximate must be "none" or "tanh", got {approximate!r}')
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return "" if self.approximate == "none" else f"approximate={self.approximate!r}"


class Flatten(Module):
    """Dims start_dim..end_dim merged into one (by default all but the batch dim), as PyTorch's nn.Flatten."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)


class Unflatten(Module):
    """Dim `dim` split into `unflattened_size`, as PyTorch's nn.Unflatten."""

    def __init__(self, dim: int, unflattened_size: Any):
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x: Tensor) -> Tensor:
        return x.unflatten(self.dim, self.unflattened_size)


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.relu()


def sinusoidal_table(max_len: int, dim: int) -> np.ndarray:
    """(max_len, dim): PE[pos, 2i] = sin(pos / 10000^(2i/dim)), PE[pos, 2i+1] = cos(same)."""
    position = np.arange(max_len)[:, None]  # (T, 1)
    frequency = np.exp(-math.log(10000.0) * np.arange(0, dim, 2) / dim)  # (ceil(dim/2),)
    table = np.zeros((max_len, dim))
    table[:, 0::2] = np.sin(position * frequency)
    table[:, 1::2] = np.cos(position * frequency[: dim // 2])
    return table


def _positions(x: Tensor, offset: int, op: str) -> int:
    """T of x (..., T, E), after checking x and the offset of its first position."""
    if check_tensor(x, op).ndim < 2:
        raise ValueError(f"{op}: input must be (..., T, E), got shape {x.shape}")
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)) or offset < 0:
        raise ValueError(f"{op}: offset must be a non-negative int, got {offset!r}")
    return x.shape[-2]


class PositionalEncoding(Module):
    """Adds the fixed sinusoidal encoding of each position to x (B, T, E)."""

    def __init__(self, dim: int, max_len: int = 512):
        self.dim, self.max_len = dim, max_len
        self.table = sinusoidal_table(max_len, dim)  # a constant, not a parameter

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x + the encodings of positions offset..offset+T-1 (offset: positions already in a KV cache)."""
        t = _positions(x, offset, "PositionalEncoding")
        if offset + t > self.max_len:
            raise ValueError(f"PositionalEncoding: positions up to {offset + t} exceed max_len {self.max_len}")
        return x + Tensor(self.table[offset : offset + t].astype(x.dtype))

    def extra_repr(self) -> str:
        return f"{self.dim}, max_len={self.max_len}"


class LearnedPositionalEncoding(Module):
    """Adds a learned vector per position to x (B, T, E)."""

    def __init__(self, dim: int, max_len: int = 512):
        self.max_len = max_len
        self.embedding = Embedding(max_len, dim)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x + the learned vectors of positions offset..offset+T-1 (offset: positions already in a KV cache)."""
        t = _positions(x, offset, "LearnedPositionalEncoding")
        if offset + t > self.max_len:
            raise ValueError(f"LearnedPositionalEncoding: positions up to {offset + t} exceed max_len {self.max_len}")
        return x + self.embedding(np.arange(offset, offset + t))
