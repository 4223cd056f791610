"""Attention masks in the framework's convention: bool, True where a query MAY attend."""

from __future__ import annotations

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
