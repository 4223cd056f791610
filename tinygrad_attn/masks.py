"""Attention masks in the framework's convention: bool, True where a query MAY attend; and PyTorch's
(`attn_mask` True = blocked or added floats, `key_padding_mask` True = padding) turned into it."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .tensor import Tensor


def causal_mask(tq: int, tk: int | None = None, offset: int = 0) -> Tensor:
    """(Tq, Tk) lower-triangular bool mask: query i may attend keys 0..i + offset.

    offset 0 aligns it to the upper left (PyTorch's is_causal); with a key/value cache holding P earlier
    positions, the Tq new queries sit at positions P..P+Tq-1 and take offset = P.
    """
    tk = tq if tk is None else tk
    for name, n in (("Tq", tq), ("Tk", tk), ("offset", offset)):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"causal_mask: {name} must be an int, got {n!r}")
    if tq < 0 or tk < 0:
        raise ValueError(f"causal_mask: sizes must be non-negative, got Tq={tq}, Tk={tk}")
    if int(tq) * int(tk) > np.iinfo(np.intp).max:
        raise ValueError(f"causal_mask: a ({tq}, {tk}) mask has more elements than an array can hold")
    return Tensor(np.tri(tq, tk, offset, dtype=np.bool_))


def padding_mask(lengths: Any, t: int) -> Tensor:
    """(B, 1, 1, T) bool mask: sequence b may attend its first lengths[b] positions."""
    lengths = np.asarray(lengths._data if isinstance(lengths, Tensor) else lengths)
    if lengths.ndim != 1 or lengths.dtype.kind not in "iu":
        raise ValueError(f"padding_mask: lengths must be a 1-D integer array, got shape {lengths.shape}")
    if np.any((lengths < 0) | (lengths > t)):
        raise ValueError(f"padding_mask: lengths {lengths.tolist()} must lie in [0, {t}]")
    return Tensor((np.arange(t)[None, :] < lengths[:, None])[:, None, None, :])


def _array(mask: Any) -> np.ndarray:
    return np.asarray(mask._data if isinstance(mask, Tensor) else mask)


def torch_masks(op: str, names: tuple[str, str], attn_mask: Any, key_padding_mask: Any, batch: int | None,
                heads: int, tq: int, tk: int) -> np.ndarray | None:
    """PyTorch's two masks of one attention call as one mask of this library's kind, checked first.

    attn_mask: (Tq, Tk), or (B * H, Tq, Tk) batched / (H, Tq, Tk) unbatched; bool True = blocked, or floats
    added to the scores. key_padding_mask: (B, Tk) batched / (Tk,) unbatched (batch None); True = padding.
    Returns bool True = may attend when both are bool, else additive floats (bool entries as -inf / 0).
    """
    masks = []
    for name, given in zip(names, (attn_mask, key_padding_mask)):
        if given is None:
            continue
        m = _array(given)
        if m.dtype.kind not in "bf":  # PyTorch's rule: an integer 0/1 mask would be added and mask nothing
            raise TypeError(f"{op}: only bool and floating types of {name} are supported, got an "
                            f"{'integer' if m.dtype.kind in 'iu' else str(m.dtype)} mask; use .bool() (True = blocked)")
        if name == names[0]:
            lead = heads if batch is None else batch * heads
            if m.shape not in ((tq, tk), (lead, tq, tk)):
                raise ValueError(f"{op}: {name} must be ({tq}, {tk}) or ({lead}, {tq}, {tk})"
                                 f"{' (batch * heads)' if batch is not None else ' (heads)'}, got {m.shape}")
            if m.ndim == 3 and batch is not None:
                m = m.reshape(batch, heads, tq, tk)  # (B * H, Tq, Tk) -> (B, H, Tq, Tk)
        else:
            wanted = (tk,) if batch is None else (batch, tk)
            if m.shape != wanted:
                raise ValueError(f"{op}: {name} must be {wanted} (True on padding), got {m.shape}")
            m = m[None, :] if batch is None else m[:, None, None, :]  # (1, Tk) or (B, 1, 1, Tk)
        masks.append(~m if m.dtype == np.bool_ else m)
    if not masks:
        return None
    if all(m.dtype == np.bool_ for m in masks):
        return masks[0] if len(masks) == 1 else masks[0] & masks[1]
    additive = [np.where(m, 0.0, -np.inf) if m.dtype == np.bool_ else m for m in masks]
    dtype = np.float64 if any(a.dtype == np.float64 for a in additive) else np.float32
    return sum(additive[1:], additive[0]).astype(dtype)


def is_causal_mask(mask: Any, t: int) -> bool:
    """Whether PyTorch's `mask` is exactly the (t, t) causal mask: True (bool) or -inf (float) above the
    diagonal, False or 0 on and below it, as nn.Transformer.generate_square_subsequent_mask makes it."""
    m = _array(mask)
    if m.shape != (t, t) or m.dtype.kind not in "bf":
        return False
    reference = _causal_reference(t, m.dtype == np.bool_) if t <= 256 else _causal_reference.__wrapped__(
        t, m.dtype == np.bool_)  # the small ones kept: a layer checks its mask at every call
    return bool((m == reference).all())  # same shape already: np.array_equal's own checks would repeat that


@functools.lru_cache(maxsize=8)
def _causal_reference(t: int, boolean: bool) -> np.ndarray:
    above = np.triu(np.ones((t, t), bool), 1)
    reference = above if boolean else np.where(above, -np.inf, 0.0).astype(np.float32)
    reference.flags.writeable = False
    return reference
