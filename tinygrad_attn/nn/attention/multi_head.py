"""MultiHeadAttention with PyTorch's maths: project, split heads, attend, merge heads, project.

Shapes: B batch, Tq query length, Tk key length, E embed_dim, H heads,
d = E / H the head size.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from ... import functional as F
from ...checks import check_tensor
from ...engine import check_device
from ...fused import PackedLinearFunction
from ...interop import mha_from_torch, mha_to_torch
from ...kernels.flash import Variant
from ...kernels.visibility import band
from ...masks import causal_mask, torch_masks
from ...tensor import Tensor, cat
from .. import init
from ..layers import Linear
from ..module import Module
from ..rotary import RotaryEmbedding


class KVCache:
    """Keys and values already computed, per attention module, for generating one token at a time.

    Self-attention appends each new position's k and v (B, H, T, d) and attends over all of them;
    cross-attention computes its keys and values from the encoder's memory once. `length` counts the
    positions the model has fed through so far (the model advances it).

    A cache belongs to the first model (or lone attention module) that fills it and to one batch size:
    another model, another batch size, or cross-attention over another memory is a clear ValueError,
    never stale keys; `reset()` empties it for a new use. A call that fails leaves it as it was
    (`transaction`). With gradients on, the cached keys stay in the graph, so every projection gets its
    gradient; without (generation), only arrays are kept.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget everything: owner, batch size, keys and values."""
        self.length = 0
        self.owner: Module | None = None
        self.batch: int | None = None
        self._members: set[int] = set()
        self._store: dict[Module, dict] = {}  # keyed by the module itself (never by an id a new one could get)

    @staticmethod
    def check(cache: Any, op: str) -> KVCache | None:
        """`cache` if it is a KVCache or None, else one clear TypeError."""
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"{op}: kv_cache must be a KVCache or None, got {type(cache).__name__}")
        return cache

    def claim(self, owner: Module, batch: int, op: str) -> None:
        """Check (before anything changes) that `owner` may use this cache for `batch` rows; the first
        caller becomes the owner. A module of the owning model may use it too."""
        if self.owner is None:
            self.owner, self.batch = owner, batch
            self._members = {id(m) for m in owner.modules()}  # the owner is held, so these ids stay its own
        elif owner is not self.owner and id(owner) not in self._members:
            raise ValueError(f"{op}: this KVCache holds the keys of another {type(self.owner).__name__}; "
                             "use a new KVCache() for each model (or cache.reset())")
        if batch != self.batch:
            raise ValueError(f"{op}: this KVCache holds a batch of {self.batch} sequences, got {batch}; "
                             "use a new KVCache() for another batch (or cache.reset())")

    @contextlib.contextmanager
    def transaction(self):
        """Undo whatever a failing call added: positions appended, entries created, length advanced."""
        saved = (self.length, self.owner, self.batch, self._members, dict(self._store),
                 {m: (e["n"], len(e["k_parts"])) for m, e in self._store.items() if "n" in e})
        try:
            yield self
        except BaseException:
            self.length, self.owner, self.batch, self._members, store, counts = saved
            self._store = store
            for module, (n, parts) in counts.items():
                entry = store[module]
                entry["n"] = n
                del entry["k_parts"][parts:], entry["v_parts"][parts:]
            raise

    def positions(self, module: Module) -> int:
        """How many positions `module`'s keys hold so far (0 before its first call)."""
        entry = self._store.get(module)
        return 0 if entry is None else entry["n"]

    def extend(self, module: Module, k: Tensor, v: Tensor, keep: int | None = None) -> tuple[Tensor, Tensor]:
        """Append k, v (B, H, T, d) for `module`; returns its keys and values so far (B, H, P + T, d). With
        `keep` (a sliding window's length) and no graph to keep, only the last keep - 1 positions are kept
        before appending: all that the next queries can see (`positions` still counts every position)."""
        entry = self._store.get(module)
        if entry is not None and entry["keys"].shape[:2] != k.shape[:2]:
            raise ValueError(f"MultiHeadAttention: this KVCache holds keys of shape (B, H) = "
                             f"{entry['keys'].shape[:2]}, got {k.shape[:2]}; use a new KVCache()")
        if entry is None:
            capacity = max(16, 2 * k.shape[2])
            entry = {"keys": np.empty(k.shape[:2] + (capacity, k.shape[3]), k.dtype),
                     "values": np.empty(v.shape[:2] + (capacity, v.shape[3]), v.dtype), "n": 0, "dropped": 0,
                     "k_parts": [], "v_parts": []}
            self._store[module] = entry
        keys, values = entry["keys"], entry["values"]
        if keep is not None and not entry["k_parts"] and not (k.requires_grad or v.requires_grad):
            held = entry["n"] - entry["dropped"]
            if held > keep - 1:  # positions no later query can see: dropped, the rest moved to the front
                extra = held - (keep - 1)
                for a in (keys, values):
                    a[:, :, :keep - 1] = a[:, :, extra:held].copy()
                entry["dropped"] += extra
        n = entry["n"] - entry["dropped"]  # positions held
        if n + k.shape[2] > keys.shape[2]:  # grow by doubling: appending stays linear in total
            capacity = 2 * (n + k.shape[2])
            grown = [np.empty(a.shape[:2] + (capacity, a.shape[3]), a.dtype) for a in (keys, values)]
            grown[0][:, :, :n], grown[1][:, :, :n] = keys[:, :, :n], values[:, :, :n]
            keys, values = entry["keys"], entry["values"] = grown
        keys[:, :, n : n + k.shape[2]] = k._data
        values[:, :, n : n + v.shape[2]] = v._data
        entry["n"] += k.shape[2]
        if entry["k_parts"] or k.requires_grad or v.requires_grad:  # under autograd: keep the graph's pieces
            if not entry["k_parts"]:
                entry["start"] = n  # positions before this one were cached without a graph
            entry["k_parts"].append(k)
            entry["v_parts"].append(v)
            start = entry["start"]
            head_k, head_v = Tensor(keys[:, :, :start].copy()), Tensor(values[:, :, :start].copy())
            return cat([head_k, *entry["k_parts"]], dim=2), cat([head_v, *entry["v_parts"]], dim=2)
        n += k.shape[2]
        return Tensor(keys[:, :, :n]), Tensor(values[:, :, :n])

    def constant(self, module: Module, memory: Tensor, compute) -> tuple[Tensor, Tensor]:
        """Keys and values that do not grow (cross-attention's, from `memory`): computed on first use. A later
        call with another memory is refused, never answered from the old one."""
        entry = self._store.get(module)
        if entry is None:
            k, v = compute()
            self._store[module] = {"memory": memory, "k": k, "v": v}
            return k, v
        known = entry["memory"]
        if memory is not known and (memory.shape != known.shape or not np.array_equal(memory._data, known._data)):
            raise ValueError("MultiHeadAttention: this KVCache holds cross-attention keys computed from another "
                             "memory; use a new KVCache() for a new source (or cache.reset())")
        return entry["k"], entry["v"]


class MultiHeadAttention(Module):
    """Multi-head attention over batch-first inputs (B, T, E), or unbatched (T, E).

    Submodules q_proj, k_proj, v_proj, out_proj are Linear layers; k_proj and
    v_proj take kdim and vdim inputs. `forward` returns (output, weights): the
    weights per head (B, H, Tq, Tk), averaged over heads when asked, or None
    with need_weights=False, which runs the fused flash-attention kernel.

    Self-attention (key and value left out, or the query tensor itself) without
    weights or dropout takes the packed path, as PyTorch's in_proj does: the
    three projections run as one matmul on the stacked weights, and the heads
    are read from and written to that packed (B, T, 3, H, d) array in place.
    The maths is the same; only the number of matmuls and copies changes.

    The variants small models use today, as options (each None: the plain layer):
    - n_kv_heads: grouped-query attention, k_proj and v_proj give n_kv_heads heads (a divisor of
      num_heads), each serving num_heads / n_kv_heads query heads; a KV cache then holds kv heads only.
    - window: a sliding window, query i sees only the `window` keys ending at its own position (with
      is_causal; without, keys within window - 1 positions either side).
    - rotary: rotary position embeddings on q and k of self-attention (True, or a RotaryEmbedding for
      another base or the interleaved layout); with a KV cache, at the positions the cache has reached.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
        n_kv_heads: int | None = None,
        window: int | None = None,
        rotary: Any = None,
    ):
        for name, n in (("embed_dim", embed_dim), ("num_heads", num_heads)):
            if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
                raise ValueError(f"MultiHeadAttention: {name} must be a positive int, got {n!r}")
        if embed_dim % num_heads:
            raise ValueError(
                f"MultiHeadAttention: embed_dim {embed_dim} is not divisible by num_heads {num_heads}"
            )
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.kdim, self.vdim, self.dropout = kdim or embed_dim, vdim or embed_dim, dropout
        self.n_kv_heads = num_heads if n_kv_heads is None else n_kv_heads
        if isinstance(self.n_kv_heads, bool) or not isinstance(self.n_kv_heads, int) or self.n_kv_heads < 1 or (
                num_heads % self.n_kv_heads):
            raise ValueError(f"MultiHeadAttention: n_kv_heads must be a positive divisor of num_heads {num_heads}, "
                             f"got {n_kv_heads!r}")
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise ValueError(f"MultiHeadAttention: window must be an int >= 1 or None, got {window!r}")
        self.window = window
        if rotary is True:
            rotary = RotaryEmbedding(self.head_dim)
        if rotary not in (None, False) and not isinstance(rotary, RotaryEmbedding):
            raise TypeError(f"MultiHeadAttention: rotary must be True, None or a RotaryEmbedding, got {rotary!r:.40}")
        if isinstance(rotary, RotaryEmbedding) and rotary.head_dim != self.head_dim:
            raise ValueError(f"MultiHeadAttention: rotary is for heads of {rotary.head_dim}, these have "
                             f"{self.head_dim}")
        self.rotary = rotary or None
        kv_width = self.n_kv_heads * self.head_dim
        self.q_proj = Linear(embed_dim, embed_dim, bias)
        self.k_proj = Linear(self.kdim, kv_width, bias)
        self.v_proj = Linear(self.vdim, kv_width, bias)
        self.out_proj = Linear(embed_dim, embed_dim, bias)

    def _split_heads(self, x: Tensor, heads: int | None = None) -> Tensor:
        b, t, _ = x.shape
        return x.reshape(b, t, heads or self.num_heads, self.head_dim).transpose(1, 2)  # (B, T, E) -> (B, H, T, d)

    def _variant(self) -> bool:
        """Whether an option (grouped kv heads, a window, rotary) asks for the general path."""
        return self.n_kv_heads != self.num_heads or self.window is not None or self.rotary is not None

    def _heads(self, query: Tensor, key: Tensor, value: Tensor, offset: int,
               self_attention: bool) -> tuple[Tensor, Tensor, Tensor]:
        """q (B, H, Tq, d), k and v (B, Hkv, Tk, d), rotary applied at positions offset.. when asked."""
        q = self._split_heads(self.q_proj(query))  # (B, H, Tq, d)
        k = self._split_heads(self.k_proj(key), self.n_kv_heads)  # (B, Hkv, Tk, d)
        v = self._split_heads(self.v_proj(value), self.n_kv_heads)  # (B, Hkv, Tk, d)
        if self.rotary is not None and self_attention:
            q, k = self.rotary(q, offset), self.rotary(k, offset)  # positions offset.. offset + T - 1
        return q, k, v

    def _attention_variant(self, is_causal: bool, past: int) -> Variant:
        """The band (causal, the window) and kv groups of this module, query i at position past + i."""
        lo, hi = band(is_causal, past, self.window)
        return Variant(lo=lo, hi=hi, group=self.num_heads // self.n_kv_heads)

    def _window_mask(self, mask: Any, tq: int, tk: int, past: int, is_causal: bool) -> Any:
        """`mask` with the keys outside the sliding window taken away (query i is at position past + i)."""
        if self.window is None:
            return mask
        distance = (past + np.arange(tq))[:, None] - np.arange(tk)[None, :]  # query position - key position
        outside = distance >= self.window if is_causal else np.abs(distance) >= self.window
        return _hide(mask, outside)

    def _project_packed(self, x: Tensor) -> Tensor:
        """q, k and v of one input as one matmul, like PyTorch's packed in_proj: (B, T, E) -> (B, T, 3, H, d)."""
        projections = (self.q_proj, self.k_proj, self.v_proj)
        biases = tuple(p.bias for p in projections if p.bias is not None)
        qkv = PackedLinearFunction.apply(x, *(p.weight for p in projections), *biases, count=3)  # (B, T, 3E)
        return qkv.reshape(x.shape[0], x.shape[1], 3, self.num_heads, self.head_dim)

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        mask: Any = None,
        is_causal: bool = False,
        need_weights: bool = True,
        average_attn_weights: bool = False,
        kv_cache: KVCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """`kv_cache` (generation): keys and values of earlier positions come from the cache, and
        is_causal then places the queries after them (query i sees keys 0..P + i)."""
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t is not None or name == "query":
                check_tensor(t, "MultiHeadAttention", name)
        if KVCache.check(kv_cache, "MultiHeadAttention") is not None:
            return self._forward_cached(query, key, value, mask, is_causal, need_weights, kv_cache)
        key = query if key is None else key
        value = key if value is None else value
        self_attention = key is query and value is query
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
        self._check_inputs(query, key, value)
        b, tq, e = query.shape
        dropout_p = self.dropout if self.training else 0.0

        if self_attention and not need_weights and dropout_p == 0.0 and not self._variant():
            qkv = self._project_packed(query)  # (B, T, 3, H, d)
            out = F.packed_self_attention(qkv, mask=mask, is_causal=is_causal)  # (B, T, H, d), heads in place
            weights = None
        elif not need_weights and dropout_p == 0.0:  # the fused kernel under the variant: the band, kv groups
            q, k, v = self._heads(query, key, value, 0, self_attention)  # (B, H, Tq, d), (B, Hkv, Tk, d) x 2
            out = F.attention(q, k, v, self._attention_variant(is_causal, 0), mask=mask)  # (B, H, Tq, d)
            out, weights = out.transpose(1, 2), None  # (B, Tq, H, d)
        else:
            q, k, v = self._heads(query, key, value, 0, self_attention)  # (B, H, Tq, d), (B, Hkv, Tk, d) x 2
            mask = self._window_mask(mask, tq, key.shape[1], 0, is_causal)
            attended = F.scaled_dot_product_attention(
                q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout_p, return_weights=need_weights,
                enable_gqa=self.n_kv_heads != self.num_heads,
            )  # softmax(q k^T / sqrt(d)) v: (B, H, Tq, d), weights (B, H, Tq, Tk); checks mask against (B, H, Tq, Tk)
            out, weights = attended if need_weights else (attended, None)
            out = out.transpose(1, 2)  # (B, Tq, H, d)
        out = self.out_proj(out.reshape(b, tq, e))  # merge heads, project: (B, Tq, E)

        if weights is not None and average_attn_weights:
            weights = weights.mean(dim=1)  # (B, Tq, Tk)
        if unbatched:
            out = out.squeeze(0)
            weights = None if weights is None else weights.squeeze(0)
        return out, weights

    def _forward_cached(self, query, key, value, mask, is_causal, need_weights, cache):
        self_attention = key is None or key is query
        if query.ndim != 3 or query.shape[-1] != self.embed_dim:
            raise ValueError(f"MultiHeadAttention: query must be (B, T, {self.embed_dim}) with a kv_cache, "
                             f"got {query.shape}")
        b, tq, e = query.shape
        cache.claim(self, b, "MultiHeadAttention")
        if self_attention:
            q, k, v = self._heads(query, query, query, cache.positions(self), True)  # rotary at the next positions
            keep = self.window if is_causal else None  # a causal window: only its last keys are kept
            k, v = cache.extend(self, k, v, keep)  # (B, Hkv, P + Tq, d): kv heads only
        else:
            q = self._split_heads(self.q_proj(query))  # (B, H, Tq, d)
            value = key if value is None else value
            if key.ndim != 3 or key.shape[0] != b:
                raise ValueError(f"MultiHeadAttention: key must be (B={b}, T, E) with a kv_cache, got {key.shape}")
            k, v = cache.constant(self, key, lambda: (self._split_heads(self.k_proj(key), self.n_kv_heads),
                                                      self._split_heads(self.v_proj(value), self.n_kv_heads)))
        past = k.shape[2] - tq if self_attention else 0  # keys held before this call's queries
        if not need_weights:
            out = F.attention(q, k, v, self._attention_variant(is_causal, past), mask=mask)  # (B, H, Tq, d)
            return self.out_proj(out.transpose(1, 2).reshape(b, tq, e)), None
        if is_causal:
            future = ~causal_mask(tq, k.shape[2], offset=past)._data  # (Tq, P + Tq)
            mask = _hide(mask, future)
        mask = self._window_mask(mask, tq, k.shape[2], past, is_causal)
        gqa = self.n_kv_heads != self.num_heads
        out, weights = (F.scaled_dot_product_attention(q, k, v, mask=mask, return_weights=True, enable_gqa=gqa)
                        if need_weights else
                        (F.scaled_dot_product_attention(q, k, v, mask=mask, enable_gqa=gqa), None))  # (B, H, Tq, d)
        return self.out_proj(out.transpose(1, 2).reshape(b, tq, e)), weights

    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor) -> None:
        for name, t, width in (("query", query, self.embed_dim), ("key", key, self.kdim), ("value", value, self.vdim)):
            if t.ndim != 3 or t.shape[-1] != width:
                raise ValueError(f"MultiHeadAttention: {name} must be (B, T, {width}) or (T, {width}), got {t.shape}")
        if not query.shape[0] == key.shape[0] == value.shape[0] or key.shape[1] != value.shape[1]:
            raise ValueError(
                f"MultiHeadAttention: batch sizes and key/value lengths disagree: query {query.shape}, "
                f"key {key.shape}, value {value.shape}"
            )

    def extra_repr(self) -> str:
        options = "".join(f", {name}={value}" for name, value in (("n_kv_heads", self.n_kv_heads),
                                                                   ("window", self.window)) if value is not None
                          and not (name == "n_kv_heads" and value == self.num_heads))
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, dropout={self.dropout}{options}"
                + (", rotary=True" if self.rotary is not None else ""))


class MultiheadAttention(MultiHeadAttention):
    """`torch.nn.MultiheadAttention`'s interface over MultiHeadAttention, for ported programs.

    As PyTorch's: inputs are (T, B, E) unless batch_first=True (or unbatched (T, E)); a bool `attn_mask`
    (T, S) or (B * H, T, S) is True where a query may NOT look, the opposite of this library's own bool
    masks, and a float one is added to the scores; `key_padding_mask` (B, S) is True on padding;
    need_weights=True and average_attn_weights=True by default, so the weights are (B, T, S). is_causal is
    a hint that attn_mask is the causal mask, and needs it, as in PyTorch. The parameters keep this
    library's names (q_proj, k_proj, v_proj, out_proj); `state_dict` gives PyTorch's (`in_proj_weight` packed,
    or q/k/v_proj_weight when kdim or vdim differ) and `load_state_dict` takes either.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device: Any = None, dtype: Any = None):
        if add_bias_kv or add_zero_attn:
            raise ValueError("MultiheadAttention: add_bias_kv and add_zero_attn are not supported here")
        check_device(device, "MultiheadAttention")
        super().__init__(embed_dim, num_heads, dropout, bias, kdim, vdim)
        init_as_pytorch(self)
        self.batch_first = bool(batch_first)
        if dtype is not None:
            self.to(dtype)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Any = None,
                need_weights: bool = True, attn_mask: Any = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        for name, t in (("query", query), ("key", key), ("value", value)):
            check_tensor(t, "MultiheadAttention", name)
        if is_causal and attn_mask is None:
            raise RuntimeError("MultiheadAttention: is_causal is a hint that attn_mask is the causal mask; give "
                               "attn_mask too (as PyTorch requires)")
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise ValueError(f"MultiheadAttention: query, key and value must all be batched (3-D) or all unbatched "
                             f"(2-D), got shapes {query.shape}, {key.shape} and {value.shape}")
        batched = query.ndim == 3
        if batched and not self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)  # (B, T, E)
        keep = torch_masks("MultiheadAttention", ("attn_mask", "key_padding_mask"), attn_mask, key_padding_mask,
                           query.shape[0] if batched else None, self.num_heads, query.shape[-2], key.shape[-2])
        out, weights = super().forward(query, key, value, mask=keep, need_weights=need_weights,
                                       average_attn_weights=average_attn_weights)
        if batched and not self.batch_first:
            out = out.transpose(0, 1)  # back to (T, B, E)
        return out, weights


    def _state_to_saved(self, state: dict[str, Any]) -> dict[str, Any]:
        return to_torch_names(state)

    def _state_from_saved(self, state: dict[str, Any]) -> dict[str, Any]:
        return from_torch_names(state)


def init_as_pytorch(mha: MultiHeadAttention, biases: bool = True) -> None:
    """torch.nn.MultiheadAttention's starting weights: q, k and v Xavier-uniform as the one (3E, E) matrix
    PyTorch packs them in (each on its own when kdim or vdim differ), their biases and the output's 0."""
    projections = (mha.q_proj, mha.k_proj, mha.v_proj)
    packed = len({p.weight.shape for p in projections}) == 1 and mha.kdim == mha.vdim == mha.embed_dim
    for p in projections:
        rows, cols = p.weight.shape
        fan_out = 3 * rows if packed else rows
        bound = float(np.sqrt(6.0 / (cols + fan_out)))
        init.uniform_(p.weight, -bound, bound)
    if biases:
        for p in (*projections, mha.out_proj):
            if p.bias is not None:
                init.zeros_(p.bias)


def to_torch_names(state: dict[str, Any]) -> dict[str, Any]:
    """A MultiHeadAttention's state entries under torch.nn.MultiheadAttention's names; the entries whose name
    stays (out_proj) are the same objects, the packed in_proj_weight and in_proj_bias new tensors."""
    return {k: state[k] if k in state else Tensor(v) for k, v in mha_to_torch(state).items()}


def from_torch_names(state: dict[str, Any]) -> dict[str, Any]:
    """torch.nn.MultiheadAttention's entries under this library's names; entries already so named pass."""
    if "in_proj_weight" not in state and not any(f"{n}_proj_weight" in state for n in "qkv"):
        return state
    return {k: state.get(k, v) for k, v in mha_from_torch(state).items()}


def _hide(mask, hidden: np.ndarray):
    """`mask` (bool: True may attend; float: added) with the entries where `hidden` is True taken away."""
    if mask is None:
        return ~hidden
    mask = mask._data if isinstance(mask, Tensor) else np.asarray(mask)
    if mask.dtype == np.bool_:
        return mask & ~hidden
    return np.where(hidden, -np.inf, mask).astype(mask.dtype)
