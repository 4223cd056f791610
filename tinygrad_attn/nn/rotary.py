"""Rotary position embeddings (RoPE): each pair of a head's features turned by an angle that grows with the
position, so that the score q_m . k_n depends on the positions only through m - n.

For a head of d features and position m, pair i (i < d / 2) turns by m * theta_i, theta_i = base^(-2i / d).
Two layouts of the pairs are in use, the same maths on other features:

    half-split (GPT-NeoX, Hugging Face's Llama, nanochat): pair i is (x_i, x_{i + d/2})
        out = x * cos + rotate_half(x) * sin,    rotate_half(x) = (-x_{d/2..d-1}, x_{0..d/2-1})
    interleaved (Meta's Llama, llama2.c: what complex-number code computes): pair i is (x_{2i}, x_{2i+1})
        out_{2i} = x_{2i} cos - x_{2i+1} sin,    out_{2i+1} = x_{2i} sin + x_{2i+1} cos

Both are ordinary tensor ops, so their backward (a rotation by -angle) comes from the engine.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..tensor import Tensor, cat, stack
from .module import Module


def rotary_angles(positions: Any, head_dim: int, base: float = 10000.0) -> np.ndarray:
    """m * theta_i for each position m and pair i: (T, head_dim // 2), float64."""
    if isinstance(head_dim, bool) or not isinstance(head_dim, (int, np.integer)) or head_dim < 2 or head_dim % 2:
        raise ValueError(f"rotary: head_dim must be an even int >= 2, got {head_dim!r}")
    if not np.isfinite(base) or base <= 0:
        raise ValueError(f"rotary: base must be a finite number > 0, got {base!r}")
    theta = float(base) ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)  # (d/2,)
    return np.asarray(positions, dtype=np.float64)[:, None] * theta[None, :]  # (T, d/2)


def rotate_half(x: Tensor) -> Tensor:
    """(x_1, x_2) -> (-x_2, x_1) over the last dim's two halves."""
    half = x.shape[-1] // 2
    return cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rotary(x: Tensor, angles: np.ndarray, interleaved: bool = False) -> Tensor:
    """x (..., T, d) turned by angles (T, d/2) (`rotary_angles`), in either layout (module docstring)."""
    t, d = x.shape[-2], x.shape[-1]
    if angles.shape != (t, d // 2) or d % 2:
        raise ValueError(f"apply_rotary: x of shape {x.shape} needs angles of shape ({t}, {d // 2}), got "
                         f"{angles.shape}")
    cos, sin = np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)  # (T, d/2)
    if not interleaved:
        cos2, sin2 = Tensor(np.concatenate([cos, cos], -1)), Tensor(np.concatenate([sin, sin], -1))  # (T, d)
        return x * cos2 + rotate_half(x) * sin2
    pairs = x.reshape(*x.shape[:-1], d // 2, 2)  # (..., T, d/2, 2)
    even, odd = pairs[..., 0], pairs[..., 1]  # (..., T, d/2) each
    c, s = Tensor(cos), Tensor(sin)
    return stack([even * c - odd * s, even * s + odd * c], dim=-1).reshape(x.shape)


class RotaryEmbedding(Module):
    """RoPE for heads of `head_dim` features: `rope(x, offset)` turns x (..., T, head_dim) as positions
    offset..offset + T - 1 (offset: the positions a KV cache already holds). No parameters."""

    def __init__(self, head_dim: int, base: float = 10000.0, interleaved: bool = False):
        rotary_angles(np.zeros(0), head_dim, base)  # checks the arguments
        self.head_dim, self.base, self.interleaved = int(head_dim), float(base), bool(interleaved)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        if x.shape[-1] != self.head_dim:
            raise ValueError(f"RotaryEmbedding: expected (..., T, {self.head_dim}), got {x.shape}")
        angles = rotary_angles(np.arange(offset, offset + x.shape[-2]), self.head_dim, self.base)
        return apply_rotary(x, angles, self.interleaved)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}, interleaved={self.interleaved}"
