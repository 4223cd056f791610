"""Attention's building blocks as differentiable functions, imported as `F`.

The fused ops (softmax, log-softmax, layer norm, GELU, cross-entropy and
flash attention) are `Function`s whose forward and backward call the numba
kernels in `tinygrad_attn.kernels`; the rest are composites of Tensor ops.

Mask convention, everywhere: a bool mask is True where a query MAY attend; a
float mask is added to the scores (0 or -inf). Masks broadcast against
(..., Tq, Tk). A query row with nothing to attend to gives zeros, never NaN.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import rng
from .kernels.attention import as_group_grid, flash_attention_backward, flash_attention_forward, grid_bias
from .kernels.cross_entropy import cross_entropy_backward, cross_entropy_forward
from .kernels.gelu import gelu_backward, gelu_forward
from .kernels.layernorm import layer_norm_backward_input, layer_norm_backward_params, layer_norm_forward
from .kernels.softmax import log_softmax_backward, softmax_backward, softmax_forward
from .ops import check_broadcast, normalize_dim
from .tensor import Function, Tensor

_NO_MASK = np.zeros((0, 0), dtype=np.bool_)


def _rows(a: np.ndarray) -> np.ndarray:
    """(..., N) -> contiguous (R, N): the layout every row-wise kernel takes."""
    return np.ascontiguousarray(a.reshape(-1, a.shape[-1]))


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


def _along_last(fn: type[Function], x: Tensor, dim: int, keep: np.ndarray | None) -> Tensor:
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
    mask = mask.data if isinstance(mask, Tensor) else np.asarray(mask)
    if mask.dtype != np.bool_:
        raise TypeError(f"{op}: mask must be bool (True = keep), got dtype {mask.dtype}")
    check_broadcast(f"{op}: mask", mask.shape, shape)
    return mask


def softmax(x: Tensor, dim: int = -1, mask: Any = None) -> Tensor:
    """exp(x) / sum(exp(x)) along `dim`; entries where the bool `mask` is False get probability 0."""
    return _along_last(Softmax, x, dim, _bool_mask(mask, x.shape, "softmax"))


def log_softmax(x: Tensor, dim: int = -1, mask: Any = None) -> Tensor:
    """x - logsumexp(x) along `dim`; masked entries give -inf, fully masked rows 0."""
    return _along_last(LogSoftmax, x, dim, _bool_mask(mask, x.shape, "log_softmax"))


class LayerNorm(Function):
    """Normalise over the last axis, then scale by weight and shift by bias (both (N,))."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        x2 = _rows(x)  # (R, N)
        y, mean, rstd = layer_norm_forward(x2, weight, bias, eps)
        ctx.save_for_backward(x2, weight, mean, rstd)
        return y.reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        x2, weight, mean, rstd = ctx.saved_tensors
        g2 = _rows(grad)  # (R, N)
        grad_x = layer_norm_backward_input(g2, x2, weight, mean, rstd).reshape(grad.shape)
        if not (ctx.needs_input_grad[1] or ctx.needs_input_grad[2]):
            return grad_x, None, None
        grad_weight, grad_bias = layer_norm_backward_params(g2, x2, mean, rstd)  # sums of g * xhat and of g
        return grad_x, grad_weight, grad_bias


def layer_norm(
    x: Tensor,
    normalized_shape: int | tuple[int, ...],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """LayerNorm over the trailing dims `normalized_shape`; weight and bias have that shape."""
    normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(normalized_shape)
    if x.shape[x.ndim - k :] != normalized_shape or k == 0 or k > x.ndim:
        raise ValueError(f"layer_norm: normalized_shape {normalized_shape} does not end the input shape {x.shape}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and p.shape != normalized_shape:
            raise ValueError(f"layer_norm: {name} has shape {p.shape}, expected {normalized_shape}")
    dtype = np.result_type(*(t.dtype for t in (x, weight, bias) if t is not None))
    n = int(np.prod(normalized_shape))
    weight = Tensor(np.ones(n, dtype)) if weight is None else weight.astype(dtype).reshape(n)
    bias = Tensor(np.zeros(n, dtype)) if bias is None else bias.astype(dtype).reshape(n)
    flat = x.astype(dtype).reshape(x.shape[: x.ndim - k] + (n,))
    return LayerNorm.apply(flat, weight, bias, eps=eps).reshape(x.shape)


class Gelu(Function):
    @staticmethod
    def forward(ctx, x):
        flat = np.ascontiguousarray(x).reshape(-1)
        ctx.save_for_backward(flat)
        return gelu_forward(flat).reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        (flat,) = ctx.saved_tensors
        return gelu_backward(flat, np.ascontiguousarray(grad).reshape(-1)).reshape(grad.shape)


def gelu(x: Tensor) -> Tensor:
    """x * Phi(x) with the exact Gaussian CDF (erf form), as PyTorch's default GELU."""
    return Gelu.apply(x)


def relu(x: Tensor) -> Tensor:
    return x.relu()


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each entry with probability p and scale the rest by 1/(1-p); identity when not training."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    keep = rng.generator().random(x.shape) >= p
    scale = 0.0 if p == 1.0 else 1.0 / (1.0 - p)
    return x * Tensor((keep * scale).astype(x.dtype))


class CrossEntropy(Function):
    """Per-row loss lse - x[target] of logits (N, C); backward softmax - onehot, one-hot never built."""

    @staticmethod
    def forward(ctx, logits, target, ignore_index):
        x2 = np.ascontiguousarray(logits)
        loss, lse = cross_entropy_forward(x2, target, ignore_index)
        ctx.save_for_backward(x2, target, lse)
        ctx.ignore_index = ignore_index
        return loss

    @staticmethod
    def backward(ctx, grad):
        x2, target, lse = ctx.saved_tensors
        return cross_entropy_backward(x2, target, lse, np.ascontiguousarray(grad), ctx.ignore_index)


def cross_entropy(logits: Tensor, target: Any, ignore_index: int = -100, reduction: str = "mean") -> Tensor:
    """Cross-entropy of logits (N, C) or (B, T, C) against integer targets (N,) or (B, T).

    "mean" averages over the targets that are not `ignore_index` (0 when all
    are ignored), "sum" adds them, "none" returns one loss per target.
    """
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f'cross_entropy: reduction must be "mean", "sum" or "none", got {reduction!r}')
    target = np.asarray(target.data if isinstance(target, Tensor) else target)
    if target.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: target must hold integer class indices, got dtype {target.dtype}")
    if logits.ndim < 2 or target.shape != logits.shape[:-1]:
        raise ValueError(
            f"cross_entropy: logits of shape {logits.shape} need targets of shape {logits.shape[:-1]}, "
            f"got {target.shape}"
        )
    classes = logits.shape[-1]
    counted = target != ignore_index
    if np.any(counted & ((target < 0) | (target >= classes))):
        bad = target[counted & ((target < 0) | (target >= classes))]
        raise IndexError(f"cross_entropy: target values {sorted(set(bad.tolist()))[:5]} are outside [0, {classes})")
    losses = CrossEntropy.apply(
        logits.reshape(-1, classes), target=target.reshape(-1).astype(np.int64), ignore_index=ignore_index
    )
    if reduction == "none":
        return losses.reshape(target.shape)
    total = losses.sum()
    return total if reduction == "sum" else total * (1.0 / max(int(counted.sum()), 1))


class FlashAttention(Function):
    """softmax(q k^T * scale + bias, causal) v on (..., T, d) without building the T x T matrix."""

    @staticmethod
    def forward(ctx, q, k, v, scale, causal, bias):
        lead = q.shape[:-2]
        q4, k4, v4 = (as_group_grid(a) for a in (q, k, v))  # (P, Q, T, d) views: heads are not copied out
        bias = grid_bias(bias, lead)
        out, lse, k_scaled_t = flash_attention_forward(q4, k4, v4, scale, causal, bias)  # out laid out like q
        ctx.save_for_backward(q4, k4, v4, out, lse, k_scaled_t)
        ctx.scale, ctx.causal, ctx.bias, ctx.lead = scale, causal, bias, lead
        return out.reshape(lead + out.shape[2:])

    @staticmethod
    def backward(ctx, grad):
        q4, k4, v4, out, lse, k_scaled_t = ctx.saved_tensors
        grad4 = as_group_grid(grad)
        dq, dk, dv = flash_attention_backward(grad4, q4, k4, v4, out, lse, k_scaled_t, ctx.scale, ctx.causal,
                                              ctx.bias)
        return tuple(d.reshape(ctx.lead + d.shape[2:]) for d in (dq, dk, dv))


class PackedFlashAttention(Function):
    """Self-attention on packed projections: qkv (..., T, 3, H, d) -> (..., T, H, d).

    q, k and v are read as (..., H, T, d) views of qkv, the output comes out in (..., T, H, d) order, and
    the backward writes the three gradients into one packed array: the projection before and the one
    after each stay a single matmul, with no copy to split or merge the heads.
    """

    @staticmethod
    def forward(ctx, qkv, scale, causal, bias):
        lead = qkv.shape[:-4] + qkv.shape[-2:-1]  # (..., H)
        q, k, v = (as_group_grid(np.swapaxes(qkv[..., i, :, :], -3, -2)) for i in range(3))  # (P, Q, T, d)
        bias = grid_bias(bias, lead)
        out, lse, k_scaled_t = flash_attention_forward(q, k, v, scale, causal, bias)  # out laid out like q
        ctx.save_for_backward(q, k, v, out, lse, k_scaled_t)
        ctx.scale, ctx.causal, ctx.bias, ctx.packed_shape = scale, causal, bias, qkv.shape
        return np.swapaxes(out.reshape(lead + out.shape[2:]), -3, -2)  # (..., T, H, d)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, lse, k_scaled_t = ctx.saved_tensors
        grad_qkv = np.zeros(ctx.packed_shape, grad.dtype)  # (..., T, 3, H, d)
        targets = tuple(as_group_grid(np.swapaxes(grad_qkv[..., i, :, :], -3, -2)) for i in range(3))  # views
        grad4 = as_group_grid(np.swapaxes(grad, -3, -2))  # (P, Q, T, d)
        flash_attention_backward(grad4, q, k, v, out, lse, k_scaled_t, ctx.scale, ctx.causal, ctx.bias,
                                 grads=targets)
        return grad_qkv


def packed_self_attention(qkv: Tensor, mask: Any = None, is_causal: bool = False, scale: float | None = None) -> Tensor:
    """Self-attention on packed q, k, v projections, qkv (..., T, 3, H, d) -> (..., T, H, d).

    The same maths and masks as `scaled_dot_product_attention` on the heads q = qkv[..., 0, :, :] moved
    to (..., H, T, d), and likewise k and v: the mask broadcasts to (..., H, T, T). Reshaping the result
    to (..., T, H * d) merges the heads for free. Always the fused kernel: no weights, no dropout.
    """
    if qkv.ndim < 4 or qkv.shape[-3] != 3:
        raise ValueError(f"packed_self_attention: qkv must be (..., T, 3, H, d), got shape {qkv.shape}")
    *lead, t, _, heads, d = qkv.shape
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    mask = _attention_mask(mask, (*lead, heads, t, t))
    return PackedFlashAttention.apply(qkv, scale=scale, causal=is_causal, bias=_additive(mask, qkv.dtype))


def _attention_mask(mask: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    """Check that `mask` broadcasts to the scores' shape (..., Tq, Tk); returns its array."""
    if mask is None:
        return None
    mask = mask.data if isinstance(mask, Tensor) else np.asarray(mask)
    if mask.dtype.kind not in "bf":
        raise TypeError(f"mask: expected a bool (True = may attend) or float (additive) mask, got dtype {mask.dtype}")
    try:
        fits = mask.ndim <= len(shape) and np.broadcast_shapes(mask.shape, shape) == shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"mask: shape {mask.shape} does not broadcast to the attention scores' shape {shape}")
    return mask


def _additive(mask: np.ndarray | None, dtype: np.dtype) -> np.ndarray | None:
    """The flash kernels' form of a mask: added to the scores, so a bool mask becomes 0 (attend) or -inf."""
    if mask is None or mask.dtype != np.bool_:
        return mask
    return np.where(mask, 0.0, -np.inf).astype(dtype)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Any = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
    return_weights: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """softmax(q k^T * scale + mask) v for q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv).

    `mask` and `is_causal` combine: an entry is attended only if both allow it.
    Without weights or dropout this runs the fused flash kernel; with
    `return_weights=True` it returns (output, weights (..., Tq, Tk)).
    """
    if q.ndim < 2 or len({q.shape[:-2], k.shape[:-2], v.shape[:-2]}) != 1:
        raise ValueError(
            f"scaled_dot_product_attention: q, k, v need the same leading dims, got {q.shape}, {k.shape}, {v.shape}"
        )
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"scaled_dot_product_attention: q {q.shape} and k {k.shape} need the same last dim, "
            f"k and v {v.shape} the same length"
        )
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    mask = _attention_mask(mask, q.shape[:-1] + (k.shape[-2],))
    if not return_weights and dropout_p == 0.0:
        return FlashAttention.apply(q, k, v, scale=scale, causal=is_causal, bias=_additive(mask, q.dtype))

    scores = (q @ k.transpose(-2, -1)) * scale  # (..., Tq, Tk)
    keep = None
    if mask is not None and mask.dtype == np.bool_:
        keep = mask
    elif mask is not None:
        scores = scores + Tensor(mask.astype(scores.dtype))
    if is_causal:
        causal = np.tril(np.ones(scores.shape[-2:], dtype=np.bool_))
        keep = causal if keep is None else keep & causal
    weights = Softmax.apply(scores, keep=keep)  # (..., Tq, Tk), rows sum to 1 (or 0 if dead)
    out = dropout(weights, dropout_p) @ v  # (..., Tq, dv)
    return (out, weights) if return_weights else out
