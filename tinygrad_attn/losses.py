"""Losses with PyTorch's signatures and maths, built from the primitive ops (so their gradients are the ops'),
plus `pad` and `one_hot`. The fused `cross_entropy` of class indices lives in functional.py; here it also takes
class weights and class probabilities, as PyTorch's does.

Layout, as in PyTorch: class scores are (N, C) or (N, C, d1, ...) with targets (N,) or (N, d1, ...); a
(B, T, C) tensor goes as `logits.reshape(-1, C)` (nanoGPT's way) or `logits.transpose(1, 2)`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .checks import check_number, check_tensor, float_tensor
from .engine import _short
from .fused import CrossEntropy, log_softmax
from .ops import Pad
from .tensor import Tensor

REDUCTIONS = ("mean", "sum", "none")


def _reduction(reduction: Any, op: str, extra: tuple[str, ...] = ()) -> str:
    if reduction not in REDUCTIONS + extra:
        allowed = ", ".join(repr(r) for r in REDUCTIONS + extra)
        raise ValueError(f"{op}: reduction must be one of {allowed}, got {_short(reduction)}")
    return reduction


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.mean()


def _pair(input: Any, target: Any, op: str) -> tuple[Tensor, Tensor]:  # noqa: A002  (PyTorch's names)
    """input and target as float tensors of the same shape (PyTorch warns and broadcasts; here that is an error,
    since a broadcast loss is almost always a bug)."""
    input = float_tensor(input, op)
    target = input._operand(target) if not isinstance(target, Tensor) else target
    if target.dtype.kind != "f":
        raise TypeError(f"{op}: target must be a float tensor, got {target.dtype}")
    if target.shape != input.shape:
        raise ValueError(f"{op}: input of shape {input.shape} and target of shape {target.shape} differ; "
                         "reshape one of them (PyTorch would broadcast them, which is rarely what is meant)")
    return input, target.astype(input.dtype)


def mse_loss(input: Tensor, target: Any, reduction: str = "mean") -> Tensor:  # noqa: A002
    """(input - target)^2, reduced."""
    reduction = _reduction(reduction, "mse_loss")
    input, target = _pair(input, target, "mse_loss")
    diff = input - target
    return _reduce(diff * diff, reduction)


def l1_loss(input: Tensor, target: Any, reduction: str = "mean") -> Tensor:  # noqa: A002
    """|input - target|, reduced."""
    reduction = _reduction(reduction, "l1_loss")
    input, target = _pair(input, target, "l1_loss")
    return _reduce((input - target).abs(), reduction)


def _softplus(x: Tensor) -> Tensor:
    """log(1 + e^x) without overflow: max(x, 0) + log(1 + e^-|x|)."""
    return x.relu() + (1.0 + (-x.abs()).exp()).log()


def binary_cross_entropy_with_logits(input: Tensor, target: Any, weight: Any = None, reduction: str = "mean",  # noqa: A002
                                     pos_weight: Any = None) -> Tensor:
    """-[pos_weight t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))], with log sigmoid(x) = -softplus(-x)."""
    reduction = _reduction(reduction, "binary_cross_entropy_with_logits")
    input, target = _pair(input, target, "binary_cross_entropy_with_logits")
    positive = target if pos_weight is None else target * pos_weight
    loss = positive * _softplus(-input) + (1.0 - target) * _softplus(input)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def binary_cross_entropy(input: Tensor, target: Any, weight: Any = None, reduction: str = "mean") -> Tensor:  # noqa: A002
    """-[t log p + (1 - t) log(1 - p)] of probabilities p, each log clamped at -100 as PyTorch does."""
    reduction = _reduction(reduction, "binary_cross_entropy")
    input, target = _pair(input, target, "binary_cross_entropy")
    if input.numel() and (np.nanmin(input._data) < 0 or np.nanmax(input._data) > 1):
        raise ValueError("binary_cross_entropy: input must hold probabilities in [0, 1]; for scores use "
                         "binary_cross_entropy_with_logits")
    loss = -(target * input.log().clamp(min=-100) + (1.0 - target) * (1.0 - input).log().clamp(min=-100))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def kl_div(input: Tensor, target: Any, reduction: str = "mean", log_target: bool = False) -> Tensor:  # noqa: A002
    """Pointwise KL divergence of log-probabilities `input` from `target`: t (log t - input), 0 where t = 0
    (or e^t (t - input) with log_target). "batchmean" divides the sum by the batch size (the true KL);
    "mean", PyTorch's default, divides by the number of elements."""
    reduction = _reduction(reduction, "kl_div", ("batchmean",))
    input, target = _pair(input, target, "kl_div")
    if log_target:
        loss = target.exp() * (target - input)
    else:
        positive = target._data > 0
        safe = target.masked_fill(~positive, 1.0)  # log 1 = 0 where t = 0: 0 log 0 is taken as 0
        loss = target * safe.log() - target * input
    if reduction == "batchmean":
        return loss.sum() * (1.0 / input.shape[0] if input.ndim and input.shape[0] else math.nan)
    return _reduce(loss, reduction)


def _indices(target: Any, op: str) -> np.ndarray:
    target = np.asarray(target._data if isinstance(target, Tensor) else target)
    if target.dtype.kind not in "iu":
        raise TypeError(f"{op}: target must hold integer class indices, got dtype {target.dtype}")
    return target.astype(np.int64)  # a copy: the graph keeps it, and the caller's array may change before backward


def _class_weight(weight: Any, classes: int, dtype: np.dtype, op: str) -> np.ndarray:
    w = np.asarray(weight._data if isinstance(weight, Tensor) else weight, dtype=dtype)
    if w.shape != (classes,):
        raise ValueError(f"{op}: weight must have one entry per class, shape ({classes},), got {w.shape}")
    return w


def nll_loss(input: Tensor, target: Any, weight: Any = None, ignore_index: int = -100,  # noqa: A002
             reduction: str = "mean") -> Tensor:
    """-w[y] input[y] per target of log-probabilities (N, C) or (N, C, d1, ...); "mean" divides by the sum of
    the weights of the counted targets (NaN when none counts, as in PyTorch)."""
    reduction = _reduction(reduction, "nll_loss")
    input = float_tensor(input, "nll_loss")
    target = _indices(target, "nll_loss")
    rows, flat = class_rows(input, target, "nll_loss")
    counted = flat != ignore_index
    classes = rows.shape[1]
    outside = counted & ((flat < 0) | (flat >= classes))
    if outside.any():
        raise IndexError(f"nll_loss: targets {np.unique(flat[outside])[:5].tolist()} are outside [0, {classes})")
    safe = np.where(counted, flat, 0)
    w = np.ones(classes, rows.dtype) if weight is None else _class_weight(weight, classes, rows.dtype, "nll_loss")
    w_rows = np.where(counted, w[safe], 0).astype(rows.dtype)  # (M,)
    loss = -rows[np.arange(rows.shape[0]), safe] * Tensor._result(w_rows, None)
    if reduction == "none":
        return loss.reshape(target.shape)
    if reduction == "sum":
        return loss.sum()
    return loss.sum() * (1.0 / w_rows.sum() if w_rows.sum() else math.nan)


def class_rows(input: Tensor, target: np.ndarray, op: str) -> tuple[Tensor, np.ndarray]:  # noqa: A002
    """Scores (C,), (N, C) or (N, C, d1, ...) with targets (), (N,) or (N, d1, ...), PyTorch's layout, as rows
    (M, C) and targets (M,)."""
    if input.ndim == 1:
        input, target = input.unsqueeze(0), target.reshape(1, *target.shape)
    if input.ndim < 2 or target.shape != input.shape[:1] + input.shape[2:]:
        hint = ("; logits (B, T, C) go as logits.reshape(-1, C) with target.reshape(-1), as in PyTorch"
                if input.ndim >= 3 and target.shape == input.shape[:-1] else "")
        raise ValueError(f"{op}: logits of shape {input.shape} need targets of shape "
                         f"{input.shape[:1] + input.shape[2:]}, got {target.shape}{hint}")
    if input.ndim == 2:  # rows already: no reshape node
        return input, target.reshape(-1)
    if input.ndim > 2:  # (N, C, d1, ...) -> (N, d1, ..., C) -> (M, C)
        input = input.permute(0, *range(2, input.ndim), 1)
    return input.reshape(math.prod(input.shape[:-1]), input.shape[-1]), target.reshape(-1)


def _fused_rows(rows: Tensor, flat_target: np.ndarray, shape: tuple, ignore_index: Any, reduction: str,
                label_smoothing: float) -> Tensor:
    """The fused kernel's cross-entropy of rows (M, C) against targets (M,) (of `shape` before flattening)."""
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, (int, np.integer)) or not (
            -2**63 <= ignore_index < 2**63):
        raise TypeError(f"cross_entropy: ignore_index must be an int64, got {ignore_index!r} (Overflow when unpacking "
                        "long)")
    ignore_index = int(ignore_index)
    if reduction != "none" and label_smoothing == 0:  # the common case: one node, which counts the targets
        return CrossEntropy.apply(rows, target=flat_target, ignore_index=ignore_index, reduction=reduction)
    losses = CrossEntropy.apply(rows, target=flat_target, ignore_index=ignore_index)
    counted = flat_target != ignore_index
    if label_smoothing > 0:
        uniform = -log_softmax(rows, -1).mean(-1) * Tensor(counted.astype(rows.dtype))  # mean_c -log p_c
        losses = losses * (1.0 - label_smoothing) + uniform * label_smoothing
    if reduction == "none":
        return losses.reshape(shape)
    count = int(counted.sum())
    return losses.sum() * (1.0 if reduction == "sum" else 1.0 / count if count else math.nan)


def cross_entropy(input: Tensor, target: Any, weight: Any = None, ignore_index: int = -100,  # noqa: A002
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """PyTorch's cross_entropy: scores (N, C) or (N, C, d1, ...) against class indices or class probabilities
    (a float target of the input's shape), with class `weight`, `ignore_index` and `label_smoothing` e: each
    row's loss is (1 - e) nll + e mean_c(-w_c log p_c). Without weight, indices take the fused kernel."""
    reduction = _reduction(reduction, "cross_entropy")
    label_smoothing = check_number(label_smoothing, "label_smoothing", "cross_entropy", 0.0, 1.0)
    input = float_tensor(input, "cross_entropy", "logits")
    probabilities = isinstance(target, Tensor) and target.dtype.kind == "f"
    if probabilities:
        return _soft_cross_entropy(input, target, weight, reduction, label_smoothing)
    target = _indices(target, "cross_entropy")
    rows, flat = class_rows(input, target, "cross_entropy")
    if weight is None:
        return _fused_rows(rows, flat, target.shape, ignore_index, reduction, label_smoothing)
    classes = rows.shape[1]
    w = _class_weight(weight, classes, rows.dtype, "cross_entropy")
    logp = log_softmax(rows, -1)
    nll = nll_loss(logp, flat, w, ignore_index, "none")  # (M,)
    counted = flat != ignore_index
    w_rows = np.where(counted, w[np.where(counted, flat, 0)], 0)
    loss = nll * (1.0 - label_smoothing)
    if label_smoothing:
        smooth = -(logp * Tensor._result(w, None)).sum(-1) * Tensor._result(counted.astype(rows.dtype), None)
        loss = loss + smooth * (label_smoothing / classes)
    if reduction == "none":
        return loss.reshape(target.shape)
    total = loss.sum()
    return total if reduction == "sum" else total * (1.0 / w_rows.sum() if w_rows.sum() else math.nan)


def _soft_cross_entropy(input: Tensor, target: Tensor, weight: Any, reduction: str, label_smoothing: float) -> Tensor:
    """-sum_c w_c t_c log p_c per row, for class probabilities t (the input's shape); "mean" divides by the
    number of rows, as PyTorch."""
    if target.shape != input.shape:
        raise ValueError(f"cross_entropy: class probabilities must have the input's shape {input.shape}, got "
                         f"{target.shape}")
    classes = input.shape[1] if input.ndim > 1 else input.shape[0]
    dim = 1 if input.ndim > 1 else 0
    t = target.astype(input.dtype)
    if label_smoothing:
        t = t * (1.0 - label_smoothing) + label_smoothing / classes
    weighted = log_softmax(input, dim) * t
    if weight is not None:
        shape = (classes,) + (1,) * (input.ndim - dim - 1)
        weighted = weighted * Tensor._result(_class_weight(weight, classes, input.dtype, "cross_entropy")
                                             .reshape(shape), None)
    loss = -weighted.sum(dim)
    return _reduce(loss, reduction)


def pad(input: Tensor, pad: Any, mode: str = "constant", value: float | None = None) -> Tensor:  # noqa: A002
    """PyTorch's F.pad: `pad` is (left, right) for the last dim, then (top, bottom) for the one before, and so
    on. mode "constant" (`value`; a negative width cuts entries off), "reflect" (mirrored without repeating
    the edge), "replicate" (the edge repeated) or "circular" (wrapped round); the last three pick entries of
    the input, so their gradient adds back into the entries picked."""
    input = check_tensor(input, "pad")
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise ValueError(f'pad: mode must be "constant", "reflect", "replicate" or "circular", got {mode!r}')
    if not isinstance(pad, (tuple, list)) or len(pad) % 2 or any(
            isinstance(p, bool) or not isinstance(p, (int, np.integer)) for p in pad):
        raise TypeError(f"pad: pad must be a tuple of an even number of ints, got {_short(pad)}")
    if len(pad) // 2 > input.ndim:
        raise ValueError(f"pad: {len(pad)} widths pad {len(pad) // 2} dims, the input has {input.ndim}")
    if mode != "constant":
        return _pad_by_index(input, [int(p) for p in pad], mode)
    value = 0.0 if value is None else check_number(value, "value", "pad")
    widths = [(0, 0)] * input.ndim
    for i in range(len(pad) // 2):
        widths[input.ndim - 1 - i] = (int(pad[2 * i]), int(pad[2 * i + 1]))
    cut = tuple(slice(max(-b, 0), n - max(-e, 0)) for (b, e), n in zip(widths, input.shape))
    if any(s.stop < s.start for s in cut):
        raise ValueError(f"pad: negative widths {pad} cut more than the input of shape {input.shape} holds")
    x = input[cut] if any(b < 0 or e < 0 for b, e in widths) else input
    grow = tuple((max(b, 0), max(e, 0)) for b, e in widths)
    return x if not any(b or e for b, e in grow) else Pad.apply(x, widths=grow, value=value)


def _pad_by_index(x: Tensor, pad: list[int], mode: str) -> Tensor:
    """reflect / replicate / circular padding: each padded dim indexed by positions mapped into the input."""
    k = len(pad) // 2
    if k not in (1, 2, 3) or x.ndim not in (k + 1, k + 2):  # PyTorch's rule: (batch,) channels, then the k dims
        raise NotImplementedError(f"pad: {mode} padding of {k} dims takes a {k + 1}-D or {k + 2}-D input, as "
                                  f"PyTorch's (1 to 3 padded dims), got shape {x.shape}")
    for i in range(len(pad) // 2):
        axis, (left, right) = x.ndim - 1 - i, (pad[2 * i], pad[2 * i + 1])
        n = x.shape[axis]
        if min(left, right) < 0:
            raise ValueError(f"pad: {mode} padding takes no negative widths, got {pad}")
        if mode == "reflect" and max(left, right) >= n:
            raise ValueError(f"pad: reflect padding ({left}, {right}) must be less than the dim's size {n}")
        if mode == "circular" and max(left, right) > n:
            raise ValueError(f"pad: circular padding ({left}, {right}) must be at most the dim's size {n}")
        if n == 0 and (left or right):
            raise ValueError(f"pad: cannot {mode}-pad an empty dim (shape {x.shape})")
        where_from = np.arange(-left, n + right)
        if mode == "reflect":
            where_from = np.abs(where_from)
            where_from = np.where(where_from >= n, 2 * (n - 1) - where_from, where_from)
        elif mode == "replicate":
            where_from = np.clip(where_from, 0, n - 1)
        else:
            where_from = where_from % n
        if left or right:
            x = x[(slice(None),) * axis + (where_from,)]
    return x


def one_hot(tensor: Any, num_classes: int = -1) -> Tensor:
    """int64 one-hot of class indices: shape (*tensor.shape, num_classes); num_classes=-1 takes max + 1."""
    indices = _indices(check_tensor(tensor, "one_hot", "tensor"), "one_hot")
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < -1:
        raise ValueError(f"one_hot: num_classes must be a non-negative int or -1, got {_short(num_classes)}")
    if num_classes == -1:
        num_classes = int(indices.max()) + 1 if indices.size else 0
    if indices.size and (indices.min() < 0 or indices.max() >= num_classes):
        raise IndexError(f"one_hot: class values must be in [0, {num_classes}), got {indices.min()} to "
                         f"{indices.max()}")
    return Tensor._result((indices[..., None] == np.arange(num_classes)).astype(np.int64), None)


__all__ = ["binary_cross_entropy", "binary_cross_entropy_with_logits", "cross_entropy", "kl_div", "l1_loss",
           "mse_loss", "nll_loss", "one_hot", "pad"]
