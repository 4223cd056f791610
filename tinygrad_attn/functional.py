"""Attention's building blocks as differentiable functions. PyTorch programs import them from
`tinygrad_attn.nn.functional` (as `F`), which re-exports these very functions beside the losses and
activations; `cross_entropy` here is that one too (losses.py), with PyTorch's signature.

The fused ops (softmax, log-softmax, layer norm, GELU, cross-entropy and
flash attention) are `Function`s whose forward and backward call the numba
kernels in `tinygrad_attn.kernels`; the rest are composites of Tensor ops.

Mask convention, everywhere: a bool mask is True where a query MAY attend; a
float mask is added to the scores (0 or -inf). Masks broadcast against
(..., Tq, Tk). A query row with nothing to attend to gives zeros, never NaN.
"""

from __future__ import annotations

import contextlib
import enum
import math
import threading
from typing import Any

import numpy as np

from . import rng
from .checks import check_broadcast, check_indices, check_number, check_tensor, float_tensor
from .engine import ScopedSetting
from .fused import (
    EmbeddingLookup,
    FlashAttention,
    Gelu,
    LayerNorm,
    RMSNorm,
    attention_weights,
    log_softmax,
    softmax,
)
from .kernels.flash import Variant
from .losses import cross_entropy
from .memory import check_fits
from .tensor import Tensor


def layer_norm(
    x: Tensor,
    normalized_shape: int | tuple[int, ...],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """LayerNorm over the trailing dims `normalized_shape`; weight and bias have that shape."""
    x, n, k, dtype, rows = _normalized(x, normalized_shape, {"weight": weight, "bias": bias}, "layer_norm")
    eps = check_number(eps, "eps", "layer_norm", 0.0)
    weight = Tensor(np.ones(n, dtype)) if weight is None else rows(weight, (n,))
    bias = Tensor(np.zeros(n, dtype)) if bias is None else rows(bias, (n,))
    out = LayerNorm.apply(rows(x, x.shape[: x.ndim - k] + (n,)), weight, bias, eps=eps)
    return out if out.shape == x.shape else out.reshape(x.shape)


def rms_norm(x: Tensor, normalized_shape: int | tuple[int, ...], weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """RMSNorm over the trailing dims `normalized_shape`: x / sqrt(mean(x^2) + eps) * weight, PyTorch's
    `F.rms_norm` (eps None: the dtype's machine epsilon, as PyTorch). A fused row kernel, layer norm's twin."""
    x, n, k, dtype, rows = _normalized(x, normalized_shape, {"weight": weight}, "rms_norm")
    eps = float(np.finfo(dtype).eps) if eps is None else check_number(eps, "eps", "rms_norm", 0.0)
    weight = Tensor(np.ones(n, dtype)) if weight is None else rows(weight, (n,))
    out = RMSNorm.apply(rows(x, x.shape[: x.ndim - k] + (n,)), weight, eps=eps)
    return out if out.shape == x.shape else out.reshape(x.shape)


def _normalized(x: Tensor, normalized_shape: Any, params: dict, op: str) -> tuple:
    """Checks shared by the norms: (x, N = prod(normalized_shape), k = its number of dims, the result dtype,
    rows(t, shape)), where rows casts a tensor to that dtype and reshapes it only when needed."""
    x = float_tensor(x, op)
    if not isinstance(normalized_shape, (int, np.integer, tuple, list)):
        raise TypeError(f"{op}: normalized_shape must be an int or a tuple of ints, got {normalized_shape!r}")
    single = isinstance(normalized_shape, (int, np.integer))
    normalized_shape = (normalized_shape,) if single else tuple(normalized_shape)
    if any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0 for n in normalized_shape):
        raise ValueError(f"{op}: normalized_shape must hold positive ints, got {normalized_shape}")
    k = len(normalized_shape)
    if x.shape[x.ndim - k :] != normalized_shape or k == 0 or k > x.ndim:
        raise ValueError(f"{op}: normalized_shape {normalized_shape} does not end the input shape {x.shape}")
    for name, p in params.items():
        if p is not None and check_tensor(p, op, name).shape != normalized_shape:
            raise ValueError(f"{op}: {name} has shape {p.shape}, expected {normalized_shape}")
    dtype = np.result_type(x.dtype, *(t.dtype for t in params.values() if t is not None))

    def rows(t: Tensor, shape: tuple[int, ...]) -> Tensor:  # no reshape node when the shape is already right
        t = t.astype(dtype)
        return t if t.shape == shape else t.reshape(shape)

    return x, math.prod(int(n) for n in normalized_shape), k, dtype, rows


def embedding(input: Any, weight: Tensor, padding_idx: int | None = None, max_norm: Any = None,  # noqa: A002
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """PyTorch's F.embedding: rows of `weight` (num_embeddings, dim) at integer `input`; the padding row gets
    no gradient. max_norm, scale_grad_by_freq and sparse are PyTorch options not supported here."""
    weight = float_tensor(weight, "embedding", "weight")
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be 2-D (num_embeddings, embedding_dim), got {weight.shape}")
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding: max_norm, scale_grad_by_freq and sparse are not supported here")
    if padding_idx is not None:
        if isinstance(padding_idx, bool) or not isinstance(padding_idx, (int, np.integer)) or not (
                -weight.shape[0] <= padding_idx < weight.shape[0]):
            raise ValueError(f"embedding: padding_idx must be an int within num_embeddings {weight.shape[0]}, "
                             f"got {padding_idx!r}")
        padding_idx = int(padding_idx) % weight.shape[0]
    given = input if isinstance(input, Tensor) and input.dtype.kind in "iu" else check_indices(
        input, weight.shape[0], "embedding")
    return EmbeddingLookup.apply(weight, indices=given, padding_idx=padding_idx)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """x * Phi(x) with the exact Gaussian CDF (erf form), as PyTorch's default GELU;
    approximate="tanh" gives PyTorch's tanh approximation."""
    x = float_tensor(x, "gelu")
    if approximate not in ("none", "tanh"):
        raise ValueError(f'gelu: approximate must be "none" or "tanh", got {approximate!r}')
    return Gelu.apply(x, approximate=approximate == "tanh")


def relu(x: Tensor) -> Tensor:
    return check_tensor(x, "relu").relu()


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each entry with probability p and scale the rest by 1/(1-p); identity when not training."""
    if isinstance(p, (bool, str)) or not isinstance(p, (int, float, np.number)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    x = check_tensor(x, "dropout")
    if not training or p == 0.0:
        return x
    keep = rng.generator().random(x.shape) >= p
    scale = 0.0 if p == 1.0 else 1.0 / (1.0 - p)
    return x * Tensor((keep * scale).astype(x.dtype))


# --- scaled dot-product attention: two implementations behind one seam -------------------------------

SDPA_KERNELS = ("math", "flash")


class SDPBackend(enum.IntEnum):
    """PyTorch's names of attention backends (torch.nn.attention.SDPBackend): MATH is the math path here, and
    the fused ones (FLASH_ATTENTION, EFFICIENT_ATTENTION, CUDNN_ATTENTION) are the one fused kernel, flash."""

    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4
_allowed_kernels = ScopedSetting("tinygrad_attn_sdpa_kernels", SDPA_KERNELS)


class sdpa_kernel(contextlib.ContextDecorator):
    """Restrict which implementations `scaled_dot_product_attention` may run, like torch's `sdpa_kernel`.

        with ta.sdpa_kernel("math"):          # every attention inside runs the readable math path
            out = F.scaled_dot_product_attention(q, k, v)

    "math" composes matmul, masked_fill, softmax, dropout and matmul, so every step is a node of the
    graph; "flash" is the fused kernel, one node. Also a decorator. The choice is per thread (and per
    async context); blocks exited out of order still leave the innermost active one in force. By default
    both are allowed and flash runs unless the weights or dropout are asked for, which only the math
    path gives.
    """

    def __init__(self, *kernels: str | list[str] | tuple[str, ...]):
        names = []
        for k in kernels:
            if isinstance(k, SDPBackend) or (isinstance(k, (list, tuple)) and k and all(isinstance(n, SDPBackend)
                                                                                       for n in k)):
                names.extend("math" if b == SDPBackend.MATH else "flash" for b in (k if isinstance(k, (list, tuple))
                                                                                    else (k,)))
            elif isinstance(k, str):
                names.append(k)
            elif isinstance(k, (list, tuple)) and all(isinstance(n, str) for n in k):
                names.extend(k)
            else:
                raise TypeError(f"sdpa_kernel: kernels must be names from {SDPA_KERNELS} (or lists of them), "
                                f"got {k!r}")
        unknown = [n for n in names if n not in SDPA_KERNELS]
        if unknown or not names:
            raise ValueError(f"sdpa_kernel: unknown kernel name(s) {unknown or names!r}; choose from {SDPA_KERNELS}")
        self.kernels = tuple(names)
        self._entries = threading.local()

    def __enter__(self) -> sdpa_kernel:
        if not hasattr(self._entries, "stack"):
            self._entries.stack = []
        self._entries.stack.append(_allowed_kernels.push(self.kernels))
        return self

    def __exit__(self, *exc: object) -> None:
        stack = getattr(self._entries, "stack", None)
        if not stack:
            raise RuntimeError("sdpa_kernel: __exit__ without a matching __enter__ in this thread")
        _allowed_kernels.pop(stack.pop(), "sdpa_kernel")


def _choose_kernel(needs_math: bool, op: str) -> str:
    allowed = _allowed_kernels.value.get()
    if needs_math:
        if "math" not in allowed:
            raise RuntimeError(f"{op}: the attention weights, dropout and a mask that requires grad need the math "
                               f"kernel, but sdpa_kernel allows only {allowed}")
        return "math"
    return "flash" if "flash" in allowed else "math"


def attention_math(q: Tensor, k: Tensor, v: Tensor, mask: np.ndarray | None, is_causal: bool, dropout_p: float,
                   scale: float) -> tuple[Tensor, Tensor]:
    """The readable path: softmax(q k^T * scale + mask) v from primitive ops. Returns (out, weights)."""
    check_fits("scaled_dot_product_attention", "the math path's (..., Tq, Tk) scores and weights",
               q.shape[:-1] + k.shape[-2:-1], q.dtype.itemsize, 4,
               "the flash path never builds them: ask for no weights (need_weights=False, return_weights=False) "
               "and no dropout, or use a smaller batch or sequence")
    weights = attention_weights(q, k, mask, is_causal, scale)  # (..., Tq, Tk): softmax(q k^T * scale + mask)
    out = dropout(weights, dropout_p) @ v  # (..., Tq, dv)
    return out, weights


def _scale(scale: Any, d: int, op: str) -> float:
    """1 / sqrt(d) unless given; with d = 0 the scores are all 0 whatever the scale, so 1 stands in."""
    if scale is None:
        return 1.0 / math.sqrt(d) if d > 0 else 1.0
    if isinstance(scale, (bool, str)) or not isinstance(scale, (int, float, np.number)) or not math.isfinite(scale):
        raise ValueError(f"{op}: scale must be a finite number, got {scale!r:.40}")
    return float(scale)


def _attention_mask(mask: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    """Check that `mask` broadcasts to the scores' shape (..., Tq, Tk); returns its array."""
    if mask is None:
        return None
    mask = mask._data if isinstance(mask, Tensor) else np.asarray(mask)
    if mask.dtype.kind not in "bf":
        raise TypeError(f"mask: expected a bool (True = may attend) or float (additive) mask, got dtype {mask.dtype}")
    try:
        fits = mask.ndim <= len(shape) and check_broadcast("mask", mask.shape, shape) == shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"mask: shape {mask.shape} does not broadcast to the attention scores' shape {shape}")
    return mask


def _additive(mask: np.ndarray | None, dtype: np.dtype) -> np.ndarray | None:
    """The flash kernel's form of a mask: added to the scores, so a bool mask becomes 0 (attend) or -inf."""
    if mask is None:
        return None
    if mask.dtype != np.bool_:
        return mask.astype(dtype, copy=False)
    return np.where(mask, dtype.type(0), dtype.type(-np.inf))


def _group(q: Tensor, k: Tensor, v: Tensor, op: str) -> int:
    """Grouped-query attention: how many of q's Hq heads each of k and v's Hkv heads (dim -3) serves."""
    hq, hk, hv = q.shape[-3], k.shape[-3], v.shape[-3]
    if hk != hv or hk == 0 or hq % hk:
        raise ValueError(f"{op}: with enable_gqa, k and v need the same number of heads (dim -3), a divisor of "
                         f"q's; got q {q.shape}, k {k.shape}, v {v.shape}")
    return hq // hk


def _kv_lead(shape: tuple[int, ...], group: int) -> tuple[int, ...]:
    """q's leading dims as k and v have them: the head dim (-3) divided by the group."""
    lead = shape[:-2]
    return lead if group == 1 else lead[:-1] + (lead[-1] // group,)


def _grouped(q: Tensor, k: Tensor, v: Tensor, group: int) -> tuple[Tensor, Tensor]:
    """k and v (..., Hkv, T, d) repeated to q's Hq heads, each kv head serving `group` consecutive query
    heads (PyTorch's rule), for the math path; the gradient of a repeat sums over the group."""
    return k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)


def attention(q: Tensor, k: Tensor, v: Tensor, variant: Variant, mask: Any = None, scale: float | None = None,
              captured: tuple[Tensor, ...] = ()) -> Tensor:
    """softmax(q k^T * scale + mask) v under a variant (kernels/flash.py's Variant: a band, grouped kv heads,
    a block mask, a compiled modifier reading the `captured` tensors), for q (..., H, Tq, d), k and v
    (..., H / variant.group, Tk, d): the flash kernel, which skips the tiles nothing sees, or the math path
    (see `sdpa_kernel`), which builds the (Tq, Tk) scores. The attention layers' one entry for variants."""
    scale = _scale(scale, q.shape[-1], "attention")
    mask = _attention_mask(mask, q.shape[:-1] + (k.shape[-2],))
    if _choose_kernel(False, "attention") == "flash":
        return FlashAttention.apply(q, k, v, *captured, scale=scale, variant=variant, bias=_additive(mask, q.dtype))
    if variant.group > 1:
        k, v = _grouped(q, k, v, variant.group)
    return attention_weights(q, k, mask, False, scale, variant, captured) @ v  # (..., Tq, dv)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Any = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
    return_weights: bool = False,
    *,
    attn_mask: Any = None,
    enable_gqa: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """softmax(q k^T * scale + mask) v for q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv).

    `mask` (or PyTorch's name, `attn_mask`) and `is_causal` combine: an entry is attended only if both
    allow it. Runs the flash kernel or the math path (see `sdpa_kernel`); with `return_weights=True`
    it returns (output, weights (..., Tq, Tk)). `enable_gqa=True` (grouped-query attention, PyTorch's
    name): k and v may have fewer heads (dim -3) than q, a divisor of q's; query head h reads kv head
    h // (Hq / Hkv), as PyTorch's `repeat_interleave` of k and v does, and their gradients are summed over
    each group.
    """
    if attn_mask is not None:
        if mask is not None:
            raise TypeError("scaled_dot_product_attention: pass the mask as mask= or attn_mask=, not both")
        mask = attn_mask
    op = "scaled_dot_product_attention"
    q, k, v = float_tensor(q, op, "q"), float_tensor(k, op, "k"), float_tensor(v, op, "v")
    if not isinstance(enable_gqa, (bool, np.bool_)):
        raise TypeError(f"scaled_dot_product_attention: enable_gqa must be a bool, got {enable_gqa!r:.40}")
    group = 1
    if enable_gqa and q.ndim >= 3 and k.ndim >= 3 and v.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        group = _group(q, k, v, "scaled_dot_product_attention")
    if len({q.dtype, k.dtype, v.dtype}) > 1:
        raise TypeError(f"scaled_dot_product_attention: q, k, v must share a dtype, got {q.dtype}, {k.dtype}, "
                        f"{v.dtype}")
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2 or len({_kv_lead(q.shape, group), k.shape[:-2], v.shape[:-2]}) != 1:
        raise ValueError(
            f"scaled_dot_product_attention: q, k, v need the same leading dims, got {q.shape}, {k.shape}, {v.shape}"
        )
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"scaled_dot_product_attention: q {q.shape} and k {k.shape} need the same last dim, "
            f"k and v {v.shape} the same length"
        )
    check_number(dropout_p, "dropout_p", "scaled_dot_product_attention", 0.0, 1.0)
    scale = _scale(scale, q.shape[-1], "scaled_dot_product_attention")
    learned = isinstance(mask, Tensor) and mask.requires_grad  # a float mask that learns: its gradient, as PyTorch
    checked = _attention_mask(mask, q.shape[:-1] + (k.shape[-2],))
    mask = mask if learned else checked
    kernel = _choose_kernel(return_weights or dropout_p > 0.0 or learned, "scaled_dot_product_attention")
    if kernel == "flash":
        variant = Variant.causal(is_causal) if group == 1 else Variant.grouped(group, is_causal)
        return FlashAttention.apply(q, k, v, scale=scale, variant=variant, bias=_additive(mask, q.dtype))
    if group > 1:
        k, v = _grouped(q, k, v, group)
    out, weights = attention_math(q, k, v, mask, is_causal, dropout_p, scale)
    return (out, weights) if return_weights else out


def packed_self_attention(qkv: Tensor, mask: Any = None, is_causal: bool = False, scale: float | None = None) -> Tensor:
    """Self-attention on packed q, k, v projections, qkv (..., T, 3, H, d) -> (..., T, H, d).

    The same maths and masks as `scaled_dot_product_attention` on the heads q = qkv[..., 0, :, :] moved
    to (..., H, T, d), and likewise k and v: the mask broadcasts to (..., H, T, T). Reshaping the result
    to (..., T, H * d) merges the heads for free. No weights, no dropout.
    """
    qkv = float_tensor(qkv, "packed_self_attention", "qkv")
    if qkv.ndim < 4 or qkv.shape[-3] != 3:
        raise ValueError(f"packed_self_attention: qkv must be (..., T, 3, H, d), got shape {qkv.shape}")
    *lead, t, _, heads, d = qkv.shape
    scale = _scale(scale, d, "packed_self_attention")
    mask = _attention_mask(mask, (*lead, heads, t, t))
    if _choose_kernel(False, "packed_self_attention") == "flash":
        variant = Variant.causal(is_causal)
        return FlashAttention.apply(qkv, scale=scale, variant=variant, bias=_additive(mask, qkv.dtype))
    q, k, v = (qkv[..., i, :, :].transpose(-3, -2) for i in range(3))  # (..., H, T, d)
    out, _ = attention_math(q, k, v, mask, is_causal, 0.0, scale)
    return out.transpose(-3, -2)  # (..., T, H, d)


__all__ = ["cross_entropy", "dropout", "embedding", "gelu", "layer_norm", "log_softmax", "packed_self_attention",
           "relu", "rms_norm", "scaled_dot_product_attention", "SDPBackend", "sdpa_kernel", "softmax"]
