"""PyTorch's FlexAttention API (`torch.nn.attention.flex_attention`) on this library's tensors.

    flex_attention(q, k, v, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False)

computes softmax(score_mod(q k^T * scale) where block_mask allows, else -inf) v, with

    score_mod(score, b, h, q_idx, kv_idx) -> score      a modifier of each score (ALiBi, soft-capping, ...)
    mask_mod(b, h, q_idx, kv_idx) -> bool               which keys each query may see (causal, windows, ...)

written in Python as PyTorch users write them. Two paths, as for scaled_dot_product_attention (chosen
with `sdpa_kernel`):

- The fused path (by default): the modifiers are traced and compiled into the flash kernel, forward and
  backward (modifier_compiler.py says how, and how their derivatives are written), the tiles the block
  mask leaves empty are skipped, and the (L, S) scores are never built. A tensor a score_mod captures (a
  learnable ALiBi slope, a bias table) gets its gradient. A modifier that cannot be compiled, and
  `return_lse=True`, take the math path instead (the first with a warning naming what stopped it).
- The math path: the modifiers run on whole tensors at once: `score` is the (B, H, L, S) score tensor and
  b, h, q_idx, kv_idx are int64 tensors of shapes (B, 1, 1, 1), (1, H, 1, 1), (1, 1, L, 1) and (1, 1, 1, S),
  so every elementwise expression a PyTorch modifier writes (arithmetic, comparisons, `where`, `tanh`,
  indexing a captured table by `h` or `q_idx - kv_idx`) broadcasts to the scores; it must return one value
  per score (a reduction over `score` would reduce over every score here, where PyTorch's modifier sees one
  at a time: refused). The modifier's ops are the library's own, the engine differentiates them, and a
  learner can step through them.

(PyTorch's own CPU path compiles the modifier for the forward only: its backward is refused on CPU.)

A `BlockMask` keeps which (BLOCK_SIZE x BLOCK_SIZE) blocks are empty, partial or full, as PyTorch's does,
found by evaluating mask_mod one row of blocks at a time (never the whole (L, S) grid at once);
`sparsity()` says what share of blocks is skipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ... import functional as F
from ...checks import float_tensor
from ...engine import no_grad
from ...kernels.flash import Variant
from ...kernels.visibility import UNBOUNDED
from ...tensor import Tensor
from .modifier_compiler import TraceError, compile_modifiers, evaluate, warn_fallback


def _indices(b: int, h: int, q_len: int, kv_len: int, rows: tuple[int, int] | None = None
             ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """b, h, q_idx, kv_idx as int64 tensors broadcasting to (B, H, L, S) (the queries of `rows` only)."""
    r0, r1 = rows if rows is not None else (0, q_len)
    return (Tensor(np.arange(b).reshape(b, 1, 1, 1)), Tensor(np.arange(h).reshape(1, h, 1, 1)),
            Tensor(np.arange(r0, r1).reshape(1, 1, r1 - r0, 1)), Tensor(np.arange(kv_len).reshape(1, 1, 1, kv_len)))


def _name(fn: Callable) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def _evaluate_mask(mask_mod: Callable, b: int, h: int, q_len: int, kv_len: int,
                   rows: tuple[int, int] | None = None) -> np.ndarray:
    """mask_mod on the grid (the query rows [r0, r1) of `rows`): a bool array broadcast to (b, h, rows,
    kv_len), checked."""
    r0, r1 = rows if rows is not None else (0, q_len)
    if not callable(mask_mod):
        raise TypeError(f"create_block_mask: mask_mod must be a function (b, h, q_idx, kv_idx) -> bool, "
                        f"got {type(mask_mod).__name__}")
    try:
        with no_grad():
            kept = mask_mod(*_indices(b, h, q_len, kv_len, (r0, r1)))
    except Exception as err:  # the user's function on this library's tensors: say which and why
        raise TypeError(f"create_block_mask: mask_mod {_name(mask_mod)!r} failed on tinygrad_attn tensors "
                        f"({type(err).__name__}: {err}); write it with operators, comparisons and ta's functions "
                        "(&, |, ~, ta.where)") from None
    kept = np.asarray(kept._data if isinstance(kept, Tensor) else kept)
    if kept.dtype != np.bool_:
        raise TypeError(f"create_block_mask: mask_mod {_name(mask_mod)!r} must return bool, got {kept.dtype}")
    try:
        return np.broadcast_to(kept, (b, h, r1 - r0, kv_len))
    except ValueError:
        raise ValueError(f"create_block_mask: mask_mod {_name(mask_mod)!r} returned shape {kept.shape}, which does "
                         f"not broadcast to (B, H, Q_LEN, KV_LEN) = {(b, h, q_len, kv_len)}") from None


def _block_states(mask_mod: Callable, shape: tuple[int, int, int, int], block_size: tuple[int, int]
                  ) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """(blocks, kernel_blocks, band), mask_mod evaluated one row of blocks at a time:

    blocks (B, H, Q blocks, KV blocks) int8, 0 where mask_mod hides the whole block, 2 where it hides
    nothing, 1 otherwise (PyTorch's classes); band (lo, hi) the narrowest band lo <= kv_idx - q_idx <= hi
    holding every key mask_mod keeps; kernel_blocks the same grid with 2 also where the mask is exactly
    that band inside the block (the causal diagonal, a window's edges): the kernel applies the band there
    by itself, so mask_mod runs only on the blocks the band does not explain."""
    b, h, q_len, kv_len = shape
    bq, bk = block_size
    nq, nk = -(-q_len // bq), -(-kv_len // bk)
    blocks, seen = np.empty((b, h, nq, nk), np.int8), np.empty((b, h, nq, nk), np.int64)
    edges = np.arange(0, kv_len, bk)
    widths = np.minimum(edges + bk, kv_len) - edges
    lo, hi = kv_len, -q_len  # no key kept yet: an empty band
    for t in range(nq):
        r0, r1 = t * bq, min(t * bq + bq, q_len)
        kept = _evaluate_mask(mask_mod, b, h, q_len, kv_len, (r0, r1))  # (B, H, rows, S)
        seen[:, :, t] = np.add.reduceat(kept.sum(axis=2, dtype=np.int64), edges, axis=-1)  # (B, H, KV blocks)
        blocks[:, :, t] = np.where(seen[:, :, t] == 0, 0, np.where(seen[:, :, t] == (r1 - r0) * widths, 2, 1))
        any_row = kept.any(axis=(0, 1))  # (rows, S): kept for some b, h
        some = any_row.any(axis=1)
        if some.any():
            first, last = any_row.argmax(axis=1), kv_len - 1 - any_row[:, ::-1].argmax(axis=1)
            offsets = np.arange(r0, r1)
            lo, hi = min(lo, int((first - offsets)[some].min())), max(hi, int((last - offsets)[some].max()))
    return blocks, np.where((blocks == 1) & (seen == _band_counts(lo, hi, q_len, kv_len, bq, bk)), 2, blocks), (lo, hi)


def _band_counts(lo: int, hi: int, q_len: int, kv_len: int, bq: int, bk: int) -> np.ndarray:
    """(Q blocks, KV blocks): how many entries of each block the band lo <= kv - q <= hi holds (one row of
    blocks at a time, as the mask is evaluated)."""
    c0 = np.arange(0, kv_len, bk)[None, :]
    counts = np.empty((-(-q_len // bq), c0.shape[1]), np.int64)
    for t in range(counts.shape[0]):
        rows = np.arange(t * bq, min(t * bq + bq, q_len))[:, None]
        seen = np.minimum(np.minimum(c0 + bk, kv_len), rows + hi + 1) - np.maximum(c0, rows + lo)  # (rows, KV blocks)
        counts[t] = np.clip(seen, 0, None).sum(axis=0)
    return counts


class BlockMask:
    """A mask_mod and its block grid of BLOCK_SIZE tiles, (B, H, Q blocks, KV blocks): 0 empty, 1 partial,
    2 full (B or H 1 when given as None, to broadcast). `band` and `kernel_blocks` are what the fused kernel
    reads (_block_states). `dense` evaluates the whole (B, H, Q_LEN, KV_LEN) bool mask, for the math path."""

    def __init__(self, mask_mod: Callable, shape: tuple[int, int, int, int], block_size: tuple[int, int]):
        self.mask_mod, self.BLOCK_SIZE = mask_mod, block_size
        self.shape, self.seq_lengths = shape, shape[2:]
        self.blocks, self.kernel_blocks, self.band = _block_states(mask_mod, shape, block_size)

    @property
    def dense(self) -> np.ndarray:
        return _evaluate_mask(self.mask_mod, *self.shape)

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
    if not callable(mask_mod):
        raise TypeError(f"create_block_mask: mask_mod must be a function (b, h, q_idx, kv_idx) -> bool, "
                        f"got {type(mask_mod).__name__}")
    return BlockMask(mask_mod, tuple(int(v) for v in sizes.values()), (int(blocks[0]), int(blocks[1])))


def noop_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    """Every key seen."""
    return Tensor(np.ones((), bool))


def _combined(mask_mods: tuple, op: str, every: bool) -> Callable:
    """One mask_mod from several: the keys all of them see (every) or any of them sees."""
    if not all(callable(m) for m in mask_mods):
        raise TypeError(f"{op}: every argument must be a mask_mod function")

    def combined(b, h, q_idx, kv_idx):
        result = None
        for mod in mask_mods:
            seen = mod(b, h, q_idx, kv_idx)
            result = seen if result is None else result & seen if every else result | seen
        return Tensor(np.full((), every)) if result is None else result

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
    group = 1
    if k.shape[1] != q.shape[1] or v.shape[1] != q.shape[1]:
        if not enable_gqa:
            raise ValueError(f"{op}: query has {q.shape[1]} heads and key/value {k.shape[1]}/{v.shape[1]}: "
                             "pass enable_gqa=True for grouped-query attention")
        group = F._group(q, k, v, op)
    b, h, q_len, kv_len = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    scale = F._scale(scale, q.shape[-1], op)
    if score_mod is not None and not callable(score_mod):
        raise TypeError(f"{op}: score_mod must be a function (score, b, h, q_idx, kv_idx) -> score, "
                        f"got {type(score_mod).__name__}")
    if block_mask is not None:
        if not isinstance(block_mask, BlockMask):
            raise TypeError(f"{op}: block_mask must come from create_block_mask, got {type(block_mask).__name__}")
        mb, mh, mq, mk = block_mask.shape
        if (mq, mk) != (q_len, kv_len) or mb not in (1, b) or mh not in (1, h):
            raise ValueError(f"{op}: block_mask was made for (B, H, Q_LEN, KV_LEN) = {block_mask.shape}, the "
                             f"attention is {(b, h, q_len, kv_len)}")
    if F._choose_kernel(return_lse, op) == "flash":
        fused = _fused(q, k, v, score_mod, block_mask, scale, group)
        if fused is not None:
            return fused
    if group > 1:
        k, v = F._grouped(q, k, v, group)
    return _math(q, k, v, score_mod, block_mask, scale, return_lse)


def _fused(q: Tensor, k: Tensor, v: Tensor, score_mod: Callable | None, block_mask: BlockMask | None,
           scale: float, group: int) -> Tensor | None:
    """The fused path: the modifiers compiled into the flash kernel (None, after a warning, if they cannot be)."""
    mask_mod = block_mask.mask_mod if block_mask is not None else None
    shape = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    compiled = None
    if score_mod is not None or mask_mod is not None:
        try:
            compiled = compile_modifiers(score_mod, mask_mod, q.dtype)
        except TraceError as err:  # what stopped the trace, named once; the math path runs it as written
            warn_fallback("+".join(_name(f) for f in (score_mod, mask_mod) if f is not None), err)
            return None
        except Exception:  # the modifier itself failed: the math path runs it and names the error
            return None

    def on_tensors(scores: Tensor, captured: tuple) -> tuple[Tensor, np.ndarray | None]:
        """The same modifiers on whole tensors, reading `captured` (the math of the higher derivatives)."""
        if compiled is not None and compiled.score_out is not None:
            scores = evaluate(compiled.trace, compiled.score_out, scores, captured, shape).astype(scores.dtype)
        return scores, (block_mask.dense if block_mask is not None else None)

    # a block mask: its band and its blocks; mask_mod runs only where some block is partial beyond the band
    lo, hi = block_mask.band if block_mask is not None else (-UNBOUNDED, UNBOUNDED)
    masked = compiled is not None and compiled.mask_out is not None and bool((block_mask.kernel_blocks == 1).any())
    scored = compiled is not None and compiled.score_out is not None
    variant = Variant(lo=lo, hi=hi, group=group, blocks=None if block_mask is None else block_mask.kernel_blocks,
                      block_size=(0, 0) if block_mask is None else block_mask.BLOCK_SIZE,
                      modify=compiled.modify if scored or masked else None, scored=scored, masked=masked,
                      math=on_tensors)
    return F.attention(q, k, v, variant, scale=scale, captured=() if compiled is None else compiled.captured)


def _math(q: Tensor, k: Tensor, v: Tensor, score_mod: Callable | None, block_mask: BlockMask | None, scale: float,
          return_lse: bool) -> Tensor | tuple[Tensor, Tensor]:
    """The math path: the modifiers on whole tensors, the (B, H, L, S) scores built."""
    op = "flex_attention"
    b, h, q_len, kv_len = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, L, S)
    if score_mod is not None:
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
    keep = None if block_mask is None else block_mask.dense
    weights = F.softmax(scores, -1, mask=keep)  # (B, H, L, S); a row with no key: all 0
    out = weights @ v  # (B, H, L, Ev)
    if not return_lse:
        return out
    hidden = scores if keep is None else scores.masked_fill(Tensor(~keep), -math.inf)
    return out, hidden.logsumexp(-1)  # (B, H, L): -inf for a row with no key


__all__ = ["BlockMask", "and_masks", "create_block_mask", "flex_attention", "noop_mask", "or_masks"]
