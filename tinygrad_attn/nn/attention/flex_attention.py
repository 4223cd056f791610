"""PyTorch's FlexAttention API (`torch.nn.attention.flex_attention`) on this library's tensors.

    flex_attention(q, k, v, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False)

computes softmax(score_mod(q k^T * scale) where block_mask allows, else -inf) v, with

    score_mod(score, b, h, q_idx, kv_idx) -> score      a modifier of each score (ALiBi, soft-capping, ...)
    mask_mod(b, h, q_idx, kv_idx) -> bool               which keys each query may see (causal, windows, ...)

written in Python as PyTorch users write them. Here they run on whole tensors at once: `score` is the
(B, H, L, S) score tensor and b, h, q_idx, kv_idx are int64 tensors of shapes (B, 1, 1, 1), (1, H, 1, 1),
(1, 1, L, 1) and (1, 1, 1, S), so every elementwise expression a PyTorch modifier writes (arithmetic,
comparisons, `where`, `tanh`, indexing a captured table by `h` or `q_idx - kv_idx`) broadcasts to the
scores; it must return one value per score (a reduction over `score` would reduce over every score here,
where PyTorch's modifier sees one at a time: refused). The modifier's ops are the library's own: its
gradient, and the gradient of any tensor it captures (a learnable ALiBi slope, a bias table), comes from
the engine like any other, and a learner can step through it. This is the math path: the T x T scores are
built. (PyTorch's own CPU path compiles the modifier into a kernel for the forward and has no backward on
CPU.)

A `BlockMask` keeps the mask_mod evaluated on the whole (L, S) grid, and which (BLOCK_SIZE x BLOCK_SIZE)
blocks are empty, partial or full, as PyTorch's does; `sparsity()` says what share of blocks is skipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ... import functional as F
from ...checks import float_tensor
from ...engine import no_grad
from ...tensor import Tensor


def _indices(b: int, h: int, q_len: int, kv_len: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """b, h, q_idx, kv_idx as int64 tensors broadcasting to (B, H, L, S)."""
    return (Tensor(np.arange(b).reshape(b, 1, 1, 1)), Tensor(np.arange(h).reshape(1, h, 1, 1)),
            Tensor(np.arange(q_len).reshape(1, 1, q_len, 1)), Tensor(np.arange(kv_len).reshape(1, 1, 1, kv_len)))


def _name(fn: Callable) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def _evaluate_mask(mask_mod: Callable, b: int, h: int, q_len: int, kv_len: int) -> np.ndarray:
    """mask_mod on the whole grid: a bool array broadcast to (b, h, q_len, kv_len), checked."""
    if not callable(mask_mod):
        raise TypeError(f"create_block_mask: mask_mod must be a function (b, h, q_idx, kv_idx) -> bool, "
                        f"got {type(mask_mod).__name__}")
    try:
        with no_grad():
            kept = mask_mod(*_indices(b, h, q_len, kv_len))
    except Exception as err:  # the user's function on this library's tensors: say which and why
        raise TypeError(f"create_block_mask: mask_mod {_name(mask_mod)!r} failed on tinygrad_attn tensors "
                        f"({type(err).__name__}: {err}); write it with operators, comparisons and ta's functions "
                        "(&, |, ~, ta.where)") from None
    kept = np.asarray(kept._data if isinstance(kept, Tensor) else kept)
    if kept.dtype != np.bool_:
        raise TypeError(f"create_block_mask: mask_mod {_name(mask_mod)!r} must return bool, got {kept.dtype}")
    try:
        return np.broadcast_to(kept, (b, h, q_len, kv_len))
    except ValueError:
        raise ValueError(f"create_block_mask: mask_mod {_name(mask_mod)!r} returned shape {kept.shape}, which does "
                         f"not broadcast to (B, H, Q_LEN, KV_LEN) = {(b, h, q_len, kv_len)}") from None


class BlockMask:
    """A mask_mod evaluated once: `dense` (B, H, Q_LEN, KV_LEN) bool (B or H 1 when given as None, to
    broadcast), and the block grid of BLOCK_SIZE x BLOCK_SIZE tiles: 0 empty, 1 partial, 2 full."""

    def __init__(self, mask_mod: Callable, dense: np.ndarray, block_size: tuple[int, int]):
        self.mask_mod, self.dense, self.BLOCK_SIZE = mask_mod, dense, block_size
        b, h, q_len, kv_len = dense.shape
        self.shape, self.seq_lengths = (b, h, q_len, kv_len), (q_len, kv_len)
        bq, bk = block_size
        nq, nk = -(-q_len // bq), -(-kv_len // bk)
        padded = np.zeros((b, h, nq * bq, nk * bk), np.int8)
        inside = np.zeros_like(padded, bool)
        padded[:, :, :q_len, :kv_len] = dense
        inside[:, :, :q_len, :kv_len] = True
        seen = padded.reshape(b, h, nq, bq, nk, bk).sum((3, 5))
        cells = inside.reshape(b, h, nq, bq, nk, bk).sum((3, 5))
        self.blocks = np.where(seen == 0, 0, np.where(seen == cells, 2, 1)).astype(np.int8)  # (B, H, nq, nk)

    def to_dense(self) -> Tensor:
        """The block grid (B, H, Q blocks, KV blocks): 1 where a block has an entry to compute, as PyTorch's."""
        return Tensor((self.blocks > 0).astype(np.int32))

    def sparsity(self) -> float:
        """The percentage of blocks with nothing to compute."""
        return float(100.0 * (self.blocks == 0).mean())

    def __repr__(self) -> str:
        return (f"BlockMask(shape={self.shape}, sparsity={self.sparsity():.2f}%, "
                f"mask_mod={_name(self.mask_mod)})")


def create_block_mask(mask_mod: Callable, B: int | None, H: int | None, Q_LEN: int, KV_LEN: int,  # noqa: N803
                      device: Any = "cpu", BLOCK_SIZE: int | tuple[int, int] = 128,  # noqa: N803
                      _compile: bool = False) -> BlockMask:
    """PyTorch's `create_block_mask`: mask_mod evaluated on every (b, h, q_idx, kv_idx); B or H None
    means the mask is the same for every batch entry or head."""
    sizes = {"B": 1 if B is None else B, "H": 1 if H is None else H, "Q_LEN": Q_LEN, "KV_LEN": KV_LEN}
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"create_block_mask: {name} must be an int >= 1 (B and H may be None), got {value!r}")
    if str(device) not in ("cpu", "None"):
        raise ValueError(f"create_block_mask: device {device!r}: this library runs on the CPU only")
    blocks = (BLOCK_SIZE, BLOCK_SIZE) if isinstance(BLOCK_SIZE, (int, np.integer)) else tuple(BLOCK_SIZE)
    if len(blocks) != 2 or any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1 for n in blocks):
        raise ValueError(f"create_block_mask: BLOCK_SIZE must be an int >= 1 or two, got {BLOCK_SIZE!r}")
    dense = _evaluate_mask(mask_mod, *(int(v) for v in sizes.values()))
    return BlockMask(mask_mod, dense, (int(blocks[0]), int(blocks[1])))


def noop_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    """Every key seen."""
    return Tensor(np.ones((), bool))


def _combined(mask_mods: tuple, op: str, every: bool) -> Callable:
    """One mask_mod from several: the keys all of them see (every) or any of them sees."""
    if not all(callable(m) for m in mask_mods):
        raise TypeError(f"{op}: every argument must be a mask_mod function")

    def combined(b, h, q_idx, kv_idx):
        result = Tensor(np.full((), every))
        for mod in mask_mods:
            seen = mod(b, h, q_idx, kv_idx)
            result = result & seen if every else result | seen
        return result

    combined.__name__ = op
    return combined


def and_masks(*mask_mods: Callable) -> Callable:
    """A mask_mod seeing a key only where every one of mask_mods does."""
    return _combined(mask_mods, "and_masks", True)


def or_masks(*mask_mods: Callable) -> Callable:
    """A mask_mod seeing a key where any one of mask_mods does."""
    return _combined(mask_mods, "or_masks", False)


def flex_attention(query: Tensor, key: Tensor, value: Tensor, score_mod: Callable | None = None,
                   block_mask: BlockMask | None = None, scale: float | None = None, enable_gqa: bool = False,
                   return_lse: bool = False, kernel_options: Any = None) -> Tensor | tuple[Tensor, Tensor]:
    """PyTorch's `flex_attention` for q (B, Hq, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev) -> (B, Hq, L, Ev)
    (and the log-sum-exp of each row's scores, (B, Hq, L), natural log, with return_lse). A row that sees
    no key gives 0 (its lse -inf), as PyTorch's."""
    op = "flex_attention"
    q, k, v = (float_tensor(t, op, n) for t, n in ((query, "query"), (key, "key"), (value, "value")))
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"{op}: query, key and value must be 4-D (B, H, L, E), got {q.shape}, {k.shape}, {v.shape}")
    if len({q.dtype, k.dtype, v.dtype}) > 1:
        raise TypeError(f"{op}: query, key and value must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[0] != k.shape[0] or k.shape[0] != v.shape[0] or q.shape[-1] != k.shape[-1] or k.shape[2] != v.shape[2]:
        raise ValueError(f"{op}: expected query (B, Hq, L, E), key (B, Hkv, S, E), value (B, Hkv, S, Ev), got "
                         f"{q.shape}, {k.shape}, {v.shape}")
    if k.shape[1] != q.shape[1] or v.shape[1] != q.shape[1]:
        if not enable_gqa:
            raise ValueError(f"{op}: query has {q.shape[1]} heads and key/value {k.shape[1]}/{v.shape[1]}: "
                             "pass enable_gqa=True for grouped-query attention")
        k, v = F._grouped(q, k, v, op)
    b, h, q_len, kv_len = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    scale = F._scale(scale, q.shape[-1], op)
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, L, S)
    if score_mod is not None:
        if not callable(score_mod):
            raise TypeError(f"{op}: score_mod must be a function (score, b, h, q_idx, kv_idx) -> score, "
                            f"got {type(score_mod).__name__}")
        try:
            modified = score_mod(scores, *_indices(b, h, q_len, kv_len))
        except Exception as err:
            raise TypeError(f"{op}: score_mod {_name(score_mod)!r} failed on tinygrad_attn tensors "
                            f"({type(err).__name__}: {err}); write it with operators and ta's functions "
                            "(ta.where, ta.tanh, ...)") from None
        if not isinstance(modified, Tensor) or modified.shape != scores.shape:  # a reduction over `score` would
            raise ValueError(  # reduce over every score here, where PyTorch's modifier sees one score at a time
                f"{op}: score_mod {_name(score_mod)!r} must return a tensor shaped like the scores {scores.shape} "
                f"(one value per score, no reduction), got {getattr(modified, 'shape', type(modified).__name__)}")
        scores = modified.astype(q.dtype)
    keep = None
    if block_mask is not None:
        if not isinstance(block_mask, BlockMask):
            raise TypeError(f"{op}: block_mask must come from create_block_mask, got {type(block_mask).__name__}")
        mb, mh, mq, mk = block_mask.shape
        if (mq, mk) != (q_len, kv_len) or mb not in (1, b) or mh not in (1, h):
            raise ValueError(f"{op}: block_mask was made for (B, H, Q_LEN, KV_LEN) = {block_mask.shape}, the "
                             f"attention is {(b, h, q_len, kv_len)}")
        keep = block_mask.dense
    weights = F.softmax(scores, -1, mask=keep)  # (B, H, L, S); a row with no key: all 0
    out = weights @ v  # (B, H, L, Ev)
    if not return_lse:
        return out
    hidden = scores if keep is None else scores.masked_fill(Tensor(~keep), -math.inf)
    return out, hidden.logsumexp(-1)  # (B, H, L): -inf for a row with no key


__all__ = ["BlockMask", "and_masks", "create_block_mask", "flex_attention", "noop_mask", "or_masks"]
