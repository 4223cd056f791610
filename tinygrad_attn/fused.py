"""The fused ops' gradient rules, beside their kernels' entry points: softmax, log-softmax, layer norm, GELU,
cross-entropy, linear, embedding and flash attention.

Each is one `Function` whose forward and first-order backward call a numba kernel (or one BLAS call), so
one node stands for many primitive ops and nothing between them is kept. Each also gives `math`: the same
op composed of primitive ops (ops.py). The engine differentiates that composition when a gradient must be
differentiated again (`create_graph=True`), as PyTorch's fused CPU kernels do: so a fused op is
differentiable to any order, its first derivative at kernel speed.

This module uses tensors only through their methods and ops' rules, so tensor.py can import it.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from .checks import bool_mask, check_indices, check_tensor, float_tensor, normalize_dim
from .engine import Function, Node
from .kernels.cross_entropy import cross_entropy_backward, cross_entropy_forward
from .kernels.embedding import scatter_add_rows
from .kernels.flash import flash_attention_backward, flash_attention_forward
from .kernels.gelu import gelu_backward, gelu_forward
from .kernels.layernorm import layer_norm_backward, layer_norm_forward
from .kernels.layout import as_group_grid, grid_bias
from .kernels.parallel import column_sums, matmul_pair, row_split_matmul, zeros
from .kernels.rmsnorm import rms_norm_backward, rms_norm_forward
from .kernels.softmax import log_softmax_backward, softmax_backward, softmax_forward
from .kernels.visibility import UNBOUNDED
from .ops import Cat, Erf, GetItem, Permute, Where, rows_of

_NO_MASK = np.zeros((0, 0), dtype=np.bool_)


def _rows(a: np.ndarray) -> np.ndarray:
    """(..., N) -> contiguous (R, N): the layout every row-wise kernel takes."""
    return np.ascontiguousarray(rows_of(a))


def _keep_rows(keep: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray:
    return _NO_MASK if keep is None else _rows(np.broadcast_to(keep, shape))


def _constant(like: Node, array: np.ndarray) -> Node:
    """An array as a tensor with no history, of like's class."""
    return type(like)._result(np.asarray(array), None)


def _softmax_math(x: Node, keep: np.ndarray | None, log: bool) -> Node:
    """softmax (or log-softmax) along the last axis from primitive ops; hidden entries give 0 (-inf),
    rows that see nothing 0, as the kernel gives."""
    if keep is not None:
        x = Where.apply(_constant(x, np.broadcast_to(keep, x.shape)), x, -np.inf)
    top = x._data.max(axis=-1, keepdims=True) if x.shape[-1] else np.zeros(x.shape[:-1] + (1,), x.dtype)
    z = x - _constant(x, np.where(np.isfinite(top), top, 0))  # the shift changes nothing but the range
    e = z.exp()
    total = e.sum(-1, keepdim=True)  # (..., 1)
    dead = total._data == 0  # a row that sees nothing
    total = total + _constant(x, dead.astype(x.dtype))
    if not log:
        return e / total
    y = z - total.log()
    return Where.apply(_constant(x, np.broadcast_to(dead, y.shape)), 0.0, y) if dead.any() else y


class Softmax(Function):
    """Softmax over the last axis; `keep` (bool, broadcastable) masks entries out."""

    @staticmethod
    def forward(ctx, x, keep=None):
        y, _ = softmax_forward(_rows(x), _keep_rows(keep, x.shape), False, want_lse=False)
        ctx.save_for_backward(y)
        return y.reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return softmax_backward(y, _rows(grad)).reshape(grad.shape)  # y * (g - sum(g * y))

    @staticmethod
    def math(x, keep=None):
        return _softmax_math(x, keep, False)


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

    @staticmethod
    def math(x, keep=None):
        return _softmax_math(x, keep, True)


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
        grad_x, grad_weight, grad_bias = layer_norm_backward(_rows(grad), x2, weight, mean, rstd)  # (R, N), (N,), (N,)
        return grad_x.reshape(grad.shape), grad_weight, grad_bias

    @staticmethod
    def math(x, weight, bias, eps):
        centred = x - x.mean(-1, keepdim=True)  # (..., N)
        variance = (centred * centred).mean(-1, keepdim=True)  # the biased variance, as PyTorch's
        return centred * (variance + eps) ** -0.5 * weight + bias


class RMSNorm(Function):
    """Divide by the root mean square over the last axis, then scale by weight ((N,)): layer norm without
    the mean or the bias."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        x2 = _rows(x)  # (R, N)
        y, rstd = rms_norm_forward(x2, weight, eps)
        ctx.save_for_backward(x2, weight, rstd)
        return y.reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        x2, weight, rstd = ctx.saved_tensors
        grad_x, grad_weight = rms_norm_backward(_rows(grad), x2, weight, rstd)  # (R, N), (N,)
        return grad_x.reshape(grad.shape), grad_weight

    @staticmethod
    def math(x, weight, eps):
        return x * ((x * x).mean(-1, keepdim=True) + eps) ** -0.5 * weight  # x / sqrt(mean(x^2) + eps) w


class Gelu(Function):
    """x * Phi(x), elementwise; `approximate` picks the tanh form."""

    @staticmethod
    def forward(ctx, x, approximate):
        flat = np.ascontiguousarray(x).reshape(-1)
        ctx.save_for_backward(flat)
        ctx.approximate = approximate
        return gelu_forward(flat, approximate).reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        (flat,) = ctx.saved_tensors
        return gelu_backward(flat, np.ascontiguousarray(grad).reshape(-1), ctx.approximate).reshape(grad.shape)

    @staticmethod
    def math(x, approximate):
        if approximate:  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
        return 0.5 * x * (1 + Erf.apply(x * (1 / math.sqrt(2))))  # x Phi(x)


class CrossEntropy(Function):
    """Per-row loss lse - x[target] of logits (N, C); backward softmax - onehot, one-hot never built.

    reduction "sum" or "mean" makes the output the one number s * sum of the losses (s = 1, or 1 / the count
    of targets that are not ignore_index, NaN when none is), so a reduced loss is one node; the kernel counts
    the targets as it checks them.
    """

    @staticmethod
    def forward(ctx, logits, target, ignore_index, reduction="none"):
        x2 = np.ascontiguousarray(logits)
        if x2.ndim != 2 or np.shape(target) != x2.shape[:1]:
            raise ValueError(f"CrossEntropy: logits (N, C) and target (N,) expected, got {x2.shape} and "
                             f"{np.shape(target)}")
        target = np.ascontiguousarray(target)
        loss, lse, counted = cross_entropy_forward(x2, target, ignore_index)  # checks every target against C first
        ctx.save_for_backward(x2, target, lse)
        ctx.ignore_index, ctx.total_scale = ignore_index, _total_scale(reduction, counted)
        return loss if ctx.total_scale is None else np.asarray(loss.sum() * ctx.total_scale, dtype=loss.dtype)

    @staticmethod
    def backward(ctx, grad):
        x2, target, lse = ctx.saved_tensors
        if ctx.total_scale is not None:  # d(s * sum loss)/d loss_i = s for every row
            grad = np.full(x2.shape[0], grad * ctx.total_scale, dtype=x2.dtype)
        return cross_entropy_backward(x2, target, lse, np.ascontiguousarray(grad), ctx.ignore_index)

    @staticmethod
    def math(logits, target, ignore_index, reduction="none"):
        counted = target != ignore_index  # (N,)
        picked = GetItem.apply(LogSoftmax.apply(logits), index=(np.arange(len(target)), np.where(counted, target, 0)))
        loss = -picked * _constant(logits, counted.astype(logits.dtype))  # (N,): ignored rows 0
        scale = _total_scale(reduction, int(np.count_nonzero(counted)))
        return loss if scale is None else loss.sum() * scale


def _total_scale(reduction: str, counted: int) -> float | None:
    """What the summed losses are multiplied by: None (no sum) for "none", 1 for "sum", 1 / count for "mean"."""
    return None if reduction == "none" else 1.0 if reduction == "sum" else 1.0 / counted if counted else math.nan


def _linear_math(x: Node, weight: Node, bias: Node | None) -> Node:
    y = x @ Permute.apply(weight, dims=(1, 0))  # (..., in) @ (in, out)
    return y if bias is None else y + bias


class LinearFunction(Function):
    """y = x W^T + b: x (..., in), W (out, in), b (out,) -> y (..., out).

    Every position is a row: with X the inputs as rows (N, in) and g = dL/dy as
    rows (N, out), the backward is
        dX = g W        (N, in)
        dW = g^T X      (out, in)
        db = sum_n g_n  (out,)
    """

    @staticmethod
    def forward(ctx, x, weight, bias=None):
        rows = rows_of(x)  # (N, in)
        ctx.save_for_backward(rows, weight)
        y = row_split_matmul(rows, weight.T, bias)  # (N, in) @ (in, out) + b
        return y.reshape(x.shape[:-1] + weight.shape[:1])  # (..., out)

    @staticmethod
    def backward(ctx, grad):
        has_bias = len(ctx.inputs) > 2
        grads = _linear_backward(ctx, grad, ctx.needs_input_grad[1], has_bias and ctx.needs_input_grad[2])
        return grads[: len(ctx.inputs)]

    @staticmethod
    def math(x, weight, bias=None):
        return _linear_math(x, weight, bias)


def fits_linear(x: Any, weight: Any, bias: Any = None) -> bool:
    """Whether x W^T + b is a layer's product that LinearFunction computes as one node: tensors of one float
    dtype, W (out, in) with x (..., in), b None or (out,). F.linear and addmm take this path (one product
    with the bias added in it, one backward); any other operands take their composite of ops."""
    if not (isinstance(x, Node) and isinstance(weight, Node) and weight.ndim == 2 and x.ndim >= 1
            and x.shape[-1] == weight.shape[1] and x.dtype == weight.dtype and x.dtype.kind == "f"):
        return False
    return bias is None or (isinstance(bias, Node) and bias.shape == weight.shape[:1] and bias.dtype == x.dtype)


def _linear_backward(ctx, grad, need_weight: bool, need_bias: bool):
    """(dX, dW, db) of y = x W^T + b from the rows X (N, in) and W that the forward saved; None where unneeded."""
    rows, weight = ctx.saved_tensors
    g = rows_of(grad)  # (N, out)
    if ctx.needs_input_grad[0] and need_weight:  # dX = g W, dW = g^T X: independent, each on its own thread
        grad_x, grad_weight = matmul_pair(g, weight, g.T, rows)
        grad_x = grad_x.reshape(ctx.inputs[0].shape)
    else:
        grad_x = row_split_matmul(g, weight).reshape(ctx.inputs[0].shape) if ctx.needs_input_grad[0] else None
        grad_weight = row_split_matmul(g.T, rows) if need_weight else None
    grad_bias = column_sums(g) if need_bias else None  # db = sum_n g_n
    return grad_x, grad_weight, grad_bias


class PackedLinearFunction(Function):
    """Linear layers that share one input, as one matmul: y = x [W_1; ...; W_n]^T + [b_1, ..., b_n].

    Inputs: x (..., in), then `count` weights W_i (out_i, in), then `count` biases b_i (out_i,) or none.
    y (..., sum out_i) holds the layers' outputs side by side. The backward is LinearFunction's on the
    stacked weight W (sum out_i, in); each layer's gradients are its blocks of dW = g^T X and db.
    """

    @staticmethod
    def forward(ctx, x, *params, count):
        weight = np.concatenate(params[:count])  # (sum out_i, in)
        bias = np.concatenate(params[count:]) if len(params) > count else None  # (sum out_i,)
        return LinearFunction.forward(ctx, x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        count = ctx.kwargs["count"]
        has_bias = len(ctx.inputs) > count + 1  # x, count weights, then count biases or none
        grad_x, grad_weight, grad_bias = _linear_backward(ctx, grad, True, has_bias)  # on the stacked W
        ends = list(itertools.accumulate(w.shape[0] for w in ctx.inputs[1:count + 1]))  # where each layer's rows end
        blocks = [slice(end - w.shape[0], end) for w, end in zip(ctx.inputs[1:count + 1], ends)]
        grad_biases = [grad_bias[rows] for rows in blocks] if has_bias else []
        return (grad_x, *[grad_weight[rows] for rows in blocks], *grad_biases)  # each layer's (out_i, ...) block

    @staticmethod
    def math(x, *params, count):
        bias = Cat.apply(*params[count:], axis=0) if len(params) > count else None
        return _linear_math(x, Cat.apply(*params[:count], axis=0), bias)


class EmbeddingLookup(Function):
    """Rows of `weight` picked by integer `indices`: gather forward, scatter-add backward."""

    @staticmethod
    def forward(ctx, weight, indices, padding_idx):
        indices = check_indices(indices, weight.shape[0], "EmbeddingLookup")  # whichever path reaches here
        ctx.save_for_backward(indices)
        ctx.num_rows, ctx.padding_idx = weight.shape[0], padding_idx
        return weight[indices]  # (*indices.shape, dim)

    @staticmethod
    def backward(ctx, grad):
        (indices,) = ctx.saved_tensors
        grad_weight = scatter_add_rows(ctx.num_rows, indices.reshape(-1), rows_of(grad))
        if ctx.padding_idx is not None:
            grad_weight[ctx.padding_idx] = 0  # the padding row never learns
        return grad_weight

    @staticmethod
    def math(weight, indices, padding_idx):
        rows = GetItem.apply(weight, index=indices)  # (*indices.shape, dim)
        if padding_idx is None:
            return rows
        padding = _constant(weight, np.broadcast_to((indices == padding_idx)[..., None], rows.shape))
        return Where.apply(padding, _constant(weight, rows._data), rows)  # the padding row's value, no gradient


class FlashAttention(Function):
    """softmax(q k^T * scale + bias) v under a `variant` (kernels/flash.py's Variant: causal, windows,
    grouped-query heads, a block mask, a compiled score modifier), fused: one node, the (Tq, Tk) matrix never
    built, the tiles nothing sees skipped.

    Inputs are q (..., Tq, d), k (..., Hkv, Tk, d), v (..., Hkv, Tk, dv) (Hkv = H / variant.group) then the
    tensors the variant's modifier reads, or one packed qkv (..., T, 3, H, d) from a packed projection
    (self-attention), read as q = qkv[..., 0, :, :] moved to (..., H, T, d), likewise k and v; its output
    is then (..., T, H, d), so merging the heads is a free reshape, and its gradient one packed array, so
    the projection's backward stays one matmul.
    """

    @staticmethod
    def forward(ctx, *inputs, scale, variant, bias):
        packed = len(inputs) == 1
        q, k, v, lead = _heads(inputs[:3])  # (P, Q, T, d) grids, views where the strides allow
        grid_mask = grid_bias(bias, lead)
        captured = _flat(inputs[3:])
        out, lse, read = flash_attention_forward(q, k, v, scale, variant, grid_mask, captured)
        # q, k, v for their versions; `read`, the rows the kernel read (copies when the views' rows lie apart), for
        # the backward to read as they are rather than copy again
        ctx.save_for_backward(q, k, v, out, lse, grid_mask, *read)
        ctx.scale, ctx.variant, ctx.lead, ctx.captured = scale, variant, lead, captured
        out = out.reshape(lead + out.shape[2:])  # (..., Tq, dv)
        return out.swapaxes(-3, -2) if packed else out  # packed: (..., T, H, d)

    @staticmethod
    def backward(ctx, grad):
        _, _, _, out, lse, grid_mask, q, k, v = ctx.saved_tensors
        packed = len(ctx.inputs) == 1
        grad = as_group_grid(grad.swapaxes(-3, -2) if packed else grad)  # (P, Q, Tq, dv)
        if not packed:
            *grads, captured = flash_attention_backward(grad, q, k, v, out, lse, ctx.scale, ctx.variant, grid_mask,
                                                        captured=ctx.captured)
            lead_kv = ctx.lead[:-1] + (ctx.lead[-1] // ctx.variant.group,) if ctx.lead else ctx.lead
            grads = [d.reshape((ctx.lead if i == 0 else lead_kv) + d.shape[2:]) for i, d in enumerate(grads)]
            return (*grads, *_unflat(captured, ctx.inputs[3:]))  # (..., T, d) each, then the captured tensors'
        grad_qkv = zeros(ctx.inputs[0].shape, grad.dtype)  # (..., T, 3, H, d): the three written in place
        *targets, _ = _heads((grad_qkv,))
        in_place = all(np.may_share_memory(t, grad_qkv) for t in targets)  # not when the grid had to be copied
        *grads, _ = flash_attention_backward(grad, q, k, v, out, lse, ctx.scale, ctx.variant, grid_mask,
                                             grads=targets if in_place else None)
        if not in_place:
            for i, d in enumerate(grads):
                grad_qkv[..., i, :, :] = d.reshape(ctx.lead + d.shape[2:]).swapaxes(-3, -2)
        return grad_qkv

    @staticmethod
    def math(*inputs, scale, variant, bias):
        packed = len(inputs) == 1
        if packed:  # (..., T, 3, H, d) -> q, k, v (..., H, T, d)
            q, k, v = (GetItem.apply(inputs[0], index=(Ellipsis, i, slice(None), slice(None))).transpose(-3, -2)
                       for i in range(3))
        else:
            q, k, v = inputs[:3]
        if variant.group > 1:  # kv head j serves query heads j * group .. (j + 1) * group - 1
            heads = np.arange(q.shape[-3]) // variant.group
            k, v = (GetItem.apply(t, index=(Ellipsis, heads, slice(None), slice(None))) for t in (k, v))
        out = attention_weights(q, k, bias, False, scale, variant, inputs[3:]) @ v  # (..., Tq, dv)
        return out.transpose(-3, -2) if packed else out


def _flat(captured: tuple[np.ndarray, ...]) -> np.ndarray | None:
    """The values a modifier reads, flattened one after another into float64 (None if there are none)."""
    if not captured:
        return None
    return np.concatenate([np.asarray(c, np.float64).reshape(-1) for c in captured])


def _unflat(flat: np.ndarray | None, captured: tuple[Node, ...]) -> list:
    """The flat gradient of the captured values cut back into their shapes (None for an integer tensor)."""
    grads, at = [], 0
    for c in captured:
        size = c._data.size
        float_kind = c.dtype.kind == "f" and flat is not None
        grads.append(flat[at:at + size].reshape(c.shape).astype(c.dtype) if float_kind else None)
        at += size
    return grads


def variant_keep(variant: Any, tq: int, tk: int) -> np.ndarray | None:
    """The band of a variant as a (Tq, Tk) bool mask (None when it hides nothing): the math path's form."""
    if variant.lo <= -UNBOUNDED and variant.hi >= UNBOUNDED:
        return None
    offset = np.arange(tk)[None, :] - np.arange(tq)[:, None]  # key j - query i
    return (offset >= variant.lo) & (offset <= variant.hi)


def attention_weights(q: Node, k: Node, mask: np.ndarray | Node | None, is_causal: bool, scale: float,
                      variant: Any = None, captured: tuple = ()) -> Node:
    """softmax(q k^T * scale + mask) from primitive ops, keys after a query hidden when `is_causal`, and
    under a `variant` its band, its modifier and its mask (variant.math, on whole tensors).

    A bool mask adds -inf where hidden, a float mask is added, as PyTorch's math path: a NaN score stays
    NaN. The future gets probability exactly 0, as in the flash kernel, which never looks at it: a NaN in
    a later position never reaches an earlier one. Rows that see nothing are 0.
    """
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., Tq, Tk)
    if isinstance(mask, Node):  # a float mask that requires grad: added as a tensor, so it gets its gradient
        scores = scores + mask.astype(scores.dtype)
    elif mask is not None:
        bias = np.where(mask, 0.0, -np.inf) if mask.dtype == np.bool_ else mask
        scores = scores + _constant(scores, bias.astype(scores.dtype))
    keep = np.tri(*scores.shape[-2:], dtype=np.bool_) if is_causal else None  # (Tq, Tk): key j <= query i
    if variant is not None:
        keep = variant_keep(variant, *scores.shape[-2:])
        if variant.math is not None:  # the modifier on the whole scores, and the mask it brings
            scores, extra = variant.math(scores, captured)
            keep = extra if keep is None else keep if extra is None else keep & extra
    return Softmax.apply(scores, keep=keep)  # (..., Tq, Tk): rows sum to 1, or are 0 where nothing may be seen


def _heads(inputs: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, ...]]:
    """(q, k, v) as (P, Q, T, d) grids and the leading dims they stand for; a packed qkv is split in place."""
    if len(inputs) == 1:
        (qkv,) = inputs  # (..., T, 3, H, d)
        views = [qkv[..., i, :, :].swapaxes(-3, -2) for i in range(3)]  # (..., H, T, d)
    else:
        views = list(inputs)
    return (*(as_group_grid(a) for a in views), views[0].shape[:-2])  # grids of a packed qkv are views


def _along_last(fn: type[Function], x: Node, dim: int, keep: np.ndarray | None, op: str) -> Node:
    """Apply a last-axis Function along `dim` by moving `dim` last and back."""
    ndim = x.ndim
    dim = normalize_dim(dim, ndim, op)
    if dim == ndim - 1 or ndim == 0:
        return fn.apply(x) if keep is None else fn.apply(x, keep=keep)  # no keyword to read for the usual call
    if keep is not None:
        keep = np.swapaxes(np.broadcast_to(keep, x.shape), dim, -1)
    return fn.apply(x.transpose(dim, -1), keep=keep).transpose(dim, -1)


def softmax(x: Node, dim: int = -1, mask: object = None, *, dtype: Any = None) -> Node:
    """exp(x) / sum(exp(x)) along `dim`; entries where the bool `mask` is False get probability 0; `dtype`
    casts x first, as PyTorch's."""
    x = float_tensor(x if dtype is None else check_tensor(x, "softmax").astype(dtype), "softmax")
    if x.ndim == 0:
        raise ValueError("softmax: the input needs at least one dim, got a 0-d tensor")
    return _along_last(Softmax, x, dim, None if mask is None else bool_mask(mask, x.shape, "softmax"), "softmax")


def log_softmax(x: Node, dim: int = -1, mask: object = None, *, dtype: Any = None) -> Node:
    """x - logsumexp(x) along `dim`; masked entries give -inf, fully masked rows 0; `dtype` casts x first."""
    x = float_tensor(x if dtype is None else check_tensor(x, "log_softmax").astype(dtype), "log_softmax")
    if x.ndim == 0:
        raise ValueError("log_softmax: the input needs at least one dim, got a 0-d tensor")
    return _along_last(LogSoftmax, x, dim, None if mask is None else bool_mask(mask, x.shape, "log_softmax"),
                       "log_softmax")
