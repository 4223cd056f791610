"""Transformer blocks and the two small models the toy tasks train.

Post-norm (norm_first=False, the original paper): x = LN(x + Sublayer(x)).
Pre-norm  (norm_first=True, easier to train):     x = x + Sublayer(LN(x)).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .. import rng
from ..engine import no_grad
from ..memory import check_fits
from ..tensor import Tensor
from .activations import SiLU
from .attention import KVCache, MultiHeadAttention
from .layers import GELU, Dropout, Embedding, LayerNorm, LearnedPositionalEncoding, Linear, ReLU, RMSNorm
from .module import Module, ModuleList


class FeedForward(Module):
    """Position-wise MLP: Linear(E, F) -> activation -> dropout -> Linear(F, E); with activation "swiglu"
    (Llama's), Linear(F, E)(silu(Linear(E, F) x) * Linear3(E, F) x), the three without bias. `activation`
    may also be a callable (a function of a Tensor, or a Module), as in torch.nn.TransformerEncoderLayer."""

    def __init__(self, d_model: int, dim_feedforward: int, dropout: float = 0.0, activation: Any = "relu",
                 bias: bool = True):
        if not callable(activation) and activation not in ("relu", "gelu", "swiglu"):
            raise ValueError(f'FeedForward: activation must be "relu", "gelu", "swiglu" or a callable, '
                             f'got {activation!r}')
        gated = activation == "swiglu"
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias and not gated)
        self.activation = activation if callable(activation) else (
            ReLU() if activation == "relu" else GELU() if activation == "gelu" else SiLU())
        self.linear3 = Linear(d_model, dim_feedforward, bias=False) if gated else None  # the gate's other half
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias and not gated)

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.activation(self.linear1(x))  # (B, T, E) -> (B, T, F)
        if self.linear3 is not None:
            hidden = hidden * self.linear3(x)  # SwiGLU: silu(x W1) * (x W3)
        return self.linear2(self.dropout(hidden))  # (B, T, F) -> (B, T, E)


class EncoderBlock(Module):
    """Self-attention then feed-forward, each with a residual connection and LayerNorm: the layer of this
    library's models, in its conventions (batch-first, `mask` True = may attend, a KV cache, the variants).
    nn.TransformerEncoderLayer is the same layer behind torch.nn's interface.

    `forward` keeps the last attention weights (B, H, T, T) in `self.attn_weights`
    when called with need_weights=True.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        norm_first: bool = False,
        activation: str = "relu",
        norm: str = "layer",
        n_kv_heads: int | None = None,
        window: int | None = None,
        rotary: Any = None,
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
    ):
        """`norm` "layer" (LayerNorm) or "rms" (RMSNorm); n_kv_heads, window and rotary are
        MultiHeadAttention's variants (grouped-query, sliding window, rotary positions); bias=False leaves
        the biases out of every Linear and LayerNorm, as in PyTorch."""
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias, n_kv_heads=n_kv_heads,
                                            window=window, rotary=rotary)
        self.ff = FeedForward(d_model, dim_feedforward, dropout, activation, bias)
        self.norm1, self.norm2 = (_norm(norm, d_model, layer_norm_eps, bias) for _ in range(2))
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)
        self.attn_weights: Tensor | None = None

    def _attend(self, x: Tensor, mask: Any, is_causal: bool, need_weights: bool, kv_cache: Any) -> Tensor:
        out, self.attn_weights = self.self_attn(x, mask=mask, is_causal=is_causal, need_weights=need_weights,
                                                kv_cache=kv_cache)
        return self.dropout1(out)

    def forward(self, x: Tensor, mask: Any = None, is_causal: bool = False, need_weights: bool = False,
                kv_cache: Any = None) -> Tensor:
        if self.norm_first:
            x = x + self._attend(self.norm1(x), mask, is_causal, need_weights, kv_cache)  # (B, T, E)
            return x + self.dropout2(self.ff(self.norm2(x)))
        x = self.norm1(x + self._attend(x, mask, is_causal, need_weights, kv_cache))
        return self.norm2(x + self.dropout2(self.ff(x)))


def _norm(kind: str, d_model: int, eps: float = 1e-5, bias: bool = True) -> Module:
    if kind not in ("layer", "rms"):
        raise ValueError(f'norm must be "layer" (LayerNorm) or "rms" (RMSNorm), got {kind!r}')
    return LayerNorm(d_model, eps, bias=bias) if kind == "layer" else RMSNorm(d_model)


class DecoderBlock(Module):
    """Self-attention (causal unless is_causal=False), cross-attention over the encoder's memory, then
    feed-forward: the decoder layer of this library's models, in its conventions (see EncoderBlock);
    nn.TransformerDecoderLayer is the same layer behind torch.nn's interface.

    Keeps the last weights in `self_attn_weights` (B, H, Tt, Tt) and
    `cross_attn_weights` (B, H, Tt, Ts) when called with need_weights=True.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        norm_first: bool = False,
        activation: Any = "relu",
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
    ):
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias)
        self.cross_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias)
        self.ff = FeedForward(d_model, dim_feedforward, dropout, activation, bias)
        self.norm1, self.norm2, self.norm3 = (LayerNorm(d_model, layer_norm_eps, bias=bias) for _ in range(3))
        self.dropout1, self.dropout2, self.dropout3 = Dropout(dropout), Dropout(dropout), Dropout(dropout)
        self.self_attn_weights: Tensor | None = None
        self.cross_attn_weights: Tensor | None = None

    def _self_block(self, x: Tensor, mask: Any, is_causal: bool, need_weights: bool, kv_cache: Any) -> Tensor:
        out, self.self_attn_weights = self.self_attn(x, mask=mask, is_causal=is_causal, need_weights=need_weights,
                                                     kv_cache=kv_cache)
        return self.dropout1(out)

    def _cross_block(self, x: Tensor, memory: Tensor, memory_mask: Any, need_weights: bool, kv_cache: Any) -> Tensor:
        out, self.cross_attn_weights = self.cross_attn(x, memory, mask=memory_mask, need_weights=need_weights,
                                                       kv_cache=kv_cache)
        return self.dropout2(out)  # queries from the target (B, Tt, E), keys/values from the source (B, Ts, E)

    def forward(self, x: Tensor, memory: Tensor, memory_mask: Any = None, need_weights: bool = False,
                kv_cache: Any = None, mask: Any = None, is_causal: bool = True) -> Tensor:
        """`mask` and is_causal: the self-attention's (True = may attend); memory_mask: the cross-attention's."""
        if self.norm_first:
            x = x + self._self_block(self.norm1(x), mask, is_causal, need_weights, kv_cache)
            x = x + self._cross_block(self.norm2(x), memory, memory_mask, need_weights, kv_cache)
            return x + self.dropout3(self.ff(self.norm3(x)))
        x = self.norm1(x + self._self_block(x, mask, is_causal, need_weights, kv_cache))
        x = self.norm2(x + self._cross_block(x, memory, memory_mask, need_weights, kv_cache))
        return self.norm3(x + self.dropout3(self.ff(x)))


class CausalLM(Module):
    """Decoder-only language model: tokens (B, T) -> logits (B, T, vocab), each position sees only its past."""

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        d_model: int = 64,
        nhead: int = 4,
        num_layers: int = 2,
        dim_feedforward: int = 256,
        dropout: float = 0.0,
        n_kv_heads: int | None = None,
        window: int | list | tuple | None = None,
        rotary: bool = False,
        norm: str = "layer",
        activation: str = "relu",
    ):
        """The defaults are the GPT-style model of the toy tasks. A Llama-style one: rotary=True (no learned
        positions), norm="rms", activation="swiglu", n_kv_heads (grouped-query), and `window` a sliding
        window for every layer, or a list with one entry (an int or None) per layer."""
        self.config = dict(vocab_size=vocab_size, max_len=max_len, d_model=d_model, nhead=nhead,
                           num_layers=num_layers, dim_feedforward=dim_feedforward, dropout=dropout)
        variant = dict(n_kv_heads=n_kv_heads, window=window, rotary=rotary, norm=norm, activation=activation)
        self.config.update({k: v for k, v in variant.items()  # only what differs: older runs' configs stay as they were
                            if v != {"rotary": False, "norm": "layer", "activation": "relu"}.get(k)})
        windows = list(window) if isinstance(window, (list, tuple)) else [window] * num_layers
        if len(windows) != num_layers:
            raise ValueError(f"CausalLM: window lists {len(windows)} entries for {num_layers} layers")
        self.embed = Embedding(vocab_size, d_model)
        self.position = None if rotary else LearnedPositionalEncoding(d_model, max_len)
        self.layers = ModuleList(
            EncoderBlock(d_model, nhead, dim_feedforward, dropout, norm_first=True, activation=activation, norm=norm,
                         n_kv_heads=n_kv_heads, window=w, rotary=True if rotary else None)
            for w in windows
        )
        self.norm = _norm(norm, d_model)
        self.head = Linear(d_model, vocab_size)

    def forward(self, tokens: Any, return_attention: bool = False, kv_cache: KVCache | None = None) -> Any:
        """Logits (B, T, vocab). With a `kv_cache`, `tokens` continue the positions it holds."""
        if KVCache.check(kv_cache, "CausalLM") is None:
            x = self._blocks(tokens, 0, return_attention, None)
        else:
            kv_cache.claim(self, np.shape(tokens)[0] if np.ndim(tokens) == 2 else -1, "CausalLM")
            with kv_cache.transaction():  # a refused call leaves the cache as it was
                x = self._blocks(tokens, kv_cache.length, return_attention, kv_cache)
                kv_cache.length += x.shape[1]
        logits = self.head(self.norm(x))  # (B, T, vocab)
        if return_attention:
            return logits, [layer.attn_weights for layer in self.layers]  # each (B, H, T, T)
        return logits

    def _blocks(self, tokens: Any, offset: int, return_attention: bool, kv_cache: KVCache | None) -> Tensor:
        c = self.config  # what one token keeps for backward, about: per layer 12 E + 2 F, then 3 vocab
        per_token = c["num_layers"] * (12 * c["d_model"] + 2 * c["dim_feedforward"]) + 3 * c["vocab_size"]
        check_fits("CausalLM", "the activations of a step", tuple(np.shape(tokens)) + (per_token,),
                   self.head.weight.dtype.itemsize, 1, "use a smaller batch or block size")
        x = self.embed(tokens)  # (B, T, E)
        if self.position is not None:  # learned positions; with rotary, attention turns q and k instead
            x = self.position(x, offset)
        for layer in self.layers:
            x = layer(x, is_causal=True, need_weights=return_attention, kv_cache=kv_cache)
        return x

    @no_grad()
    def generate(self, tokens: Any, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 use_cache: bool = True) -> np.ndarray:
        """The prompt (B, T) followed by max_new_tokens sampled tokens, (B, T + max_new_tokens), int64.

        Each step samples from softmax(logits / temperature) over the top_k most likely tokens (all
        when None), from `ta.manual_seed`'s generator; top_k=1 is greedy. With the cache, each new token
        attends to the cached keys and values instead of running the prefix again; past `max_len`
        positions the context is cut to the last max_len tokens, as without a cache.
        """
        tokens = _check_generation(tokens, max_new_tokens, temperature, top_k, self.config["vocab_size"])
        check_fits("generate", "the generated tokens", (tokens.shape[0], tokens.shape[1] + max_new_tokens), 8, 2,
                   "ask for fewer new tokens")
        max_len = self.config["max_len"]
        cache = KVCache() if use_cache else None
        logits = self(tokens[:, -max_len:], kv_cache=cache)._data[:, -1]  # (B, vocab)
        for step in range(max_new_tokens):
            tokens = np.concatenate([tokens, sample_next(logits, temperature, top_k)], axis=1)
            if step == max_new_tokens - 1:
                break
            if cache is not None and cache.length < max_len:
                logits = self(tokens[:, -1:], kv_cache=cache)._data[:, -1]  # one new position
            else:  # no cache, or the window is full: run the last max_len tokens again
                cache = KVCache() if use_cache else None
                logits = self(tokens[:, -max_len:], kv_cache=cache)._data[:, -1]
        return tokens


class Seq2SeqTransformer(Module):
    """Encoder-decoder model: source tokens (B, Ts) and shifted target tokens (B, Tt) -> logits (B, Tt, vocab).

    `src_lengths` (B,) marks padding at the end of each source sequence: the
    encoder's self-attention and the decoder's cross-attention ignore it.
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        max_len: int,
        d_model: int = 64,
        nhead: int = 4,
        num_encoder_layers: int = 2,
        num_decoder_layers: int = 2,
        dim_feedforward: int = 256,
        dropout: float = 0.0,
    ):
        self.config = dict(src_vocab=src_vocab, tgt_vocab=tgt_vocab, max_len=max_len, d_model=d_model, nhead=nhead,
                           num_encoder_layers=num_encoder_layers, num_decoder_layers=num_decoder_layers,
                           dim_feedforward=dim_feedforward, dropout=dropout)
        self.src_embed, self.tgt_embed = Embedding(src_vocab, d_model), Embedding(tgt_vocab, d_model)
        self.src_position = LearnedPositionalEncoding(d_model, max_len)
        self.tgt_position = LearnedPositionalEncoding(d_model, max_len)
        self.encoder = ModuleList(
            EncoderBlock(d_model, nhead, dim_feedforward, dropout, norm_first=True)
            for _ in range(num_encoder_layers)
        )
        self.decoder = ModuleList(
            DecoderBlock(d_model, nhead, dim_feedforward, dropout, norm_first=True)
            for _ in range(num_decoder_layers)
        )
        self.encoder_norm, self.decoder_norm = LayerNorm(d_model), LayerNorm(d_model)
        self.head = Linear(d_model, tgt_vocab)

    @staticmethod
    def source_mask(src_lengths: Any, ts: int, batch: int | None = None) -> np.ndarray | None:
        """(B, 1, 1, Ts) bool: True on real source tokens, False on padding."""
        if src_lengths is None:
            return None
        lengths = np.asarray(src_lengths._data if isinstance(src_lengths, Tensor) else src_lengths)
        if lengths.ndim != 1 or lengths.dtype.kind not in "iu" or (batch is not None and lengths.shape[0] != batch):
            raise ValueError(f"Seq2SeqTransformer: src_lengths must be {batch if batch is not None else 'B'} "
                             f"integers (one per sequence), got shape {lengths.shape} and dtype {lengths.dtype}")
        if lengths.size and (lengths.min() < 0 or lengths.max() > ts):
            raise ValueError(f"Seq2SeqTransformer: src_lengths must lie in [0, {ts}], got {lengths.tolist()[:8]}")
        return np.arange(ts)[None, :] < lengths[:, None, None, None]

    def encode(self, src: Any, src_lengths: Any = None, need_weights: bool = False) -> Tensor:
        mask = self.source_mask(src_lengths, np.shape(src)[-1], np.shape(src)[0])
        x = self.src_position(self.src_embed(src))  # (B, Ts, E)
        for layer in self.encoder:
            x = layer(x, mask=mask, need_weights=need_weights)
        return self.encoder_norm(x)  # the memory (B, Ts, E)

    def decode(self, tgt: Any, memory: Tensor, src_lengths: Any = None, need_weights: bool = False) -> Tensor:
        mask = self.source_mask(src_lengths, memory.shape[1], memory.shape[0])
        x = self.tgt_position(self.tgt_embed(tgt))  # (B, Tt, E)
        for layer in self.decoder:
            x = layer(x, memory, memory_mask=mask, need_weights=need_weights)
        return self.head(self.decoder_norm(x))  # (B, Tt, vocab)

    @no_grad()
    def generate(self, src: Any, max_new_tokens: int, bos: int, eos: int | None = None, src_lengths: Any = None,
                 temperature: float = 1.0, top_k: int | None = None, use_cache: bool = True) -> np.ndarray:
        """Target tokens (B, 1 + n) starting with `bos`: the encoder runs once, then each step decodes one
        token from the cached self-attention keys and values and the cross-attention's (computed from
        the memory once). Stops after max_new_tokens, or once every row has produced `eos`; a row that
        has ends with eos from then on. top_k=1 is greedy decoding."""
        src = _check_generation(src, max_new_tokens, temperature, top_k, self.config["src_vocab"])
        memory = self.encode(src, src_lengths)  # (B, Ts, E), once
        mask = self.source_mask(src_lengths, memory.shape[1], memory.shape[0])
        tokens = np.full((src.shape[0], 1), bos, dtype=np.int64)
        cache = KVCache() if use_cache else None
        done = np.zeros(src.shape[0], bool)
        for _ in range(max_new_tokens):
            if cache is not None and cache.length < self.config["max_len"]:
                logits = self._decode_cached(tokens[:, cache.length:], memory, mask, cache)._data[:, -1]
            else:
                logits = self.decode(tokens[:, -self.config["max_len"]:], memory, src_lengths)._data[:, -1]
            following = sample_next(logits, temperature, top_k)
            if eos is not None:
                following[done, 0] = eos
                done |= following[:, 0] == eos
            tokens = np.concatenate([tokens, following], axis=1)
            if eos is not None and done.all():
                break
        return tokens

    translate = generate

    def _decode_cached(self, tgt: np.ndarray, memory: Tensor, mask: Any, cache: KVCache) -> Tensor:
        cache.claim(self, tgt.shape[0], "Seq2SeqTransformer")
        with cache.transaction():  # a refused call leaves the cache as it was
            x = self.tgt_position(self.tgt_embed(tgt), cache.length)  # (B, Tnew, E)
            for layer in self.decoder:
                x = layer(x, memory, memory_mask=mask, kv_cache=cache)
            cache.length += tgt.shape[1]
        return self.head(self.decoder_norm(x))  # (B, Tnew, vocab)

    def forward(self, src: Any, tgt: Any, src_lengths: Any = None, return_attention: bool = False) -> Any:
        c = self.config  # what one position keeps for backward, about: per layer 12 E + 2 F (decoder 16 E), 3 vocab
        per_src = c["num_encoder_layers"] * (12 * c["d_model"] + 2 * c["dim_feedforward"])
        per_tgt = c["num_decoder_layers"] * (16 * c["d_model"] + 2 * c["dim_feedforward"]) + 3 * c["tgt_vocab"]
        shape_src, shape_tgt = tuple(np.shape(src)), tuple(np.shape(tgt))
        check_fits("Seq2SeqTransformer", "the activations of a step", shape_src[:1] + (
            (int(np.prod(shape_src[1:])) * per_src + int(np.prod(shape_tgt[1:])) * per_tgt),),
            self.head.weight.dtype.itemsize, 1, "use a smaller batch or shorter sequences")
        memory = self.encode(src, src_lengths, return_attention)
        logits = self.decode(tgt, memory, src_lengths, return_attention)
        if return_attention:
            return logits, {
                "encoder": [layer.attn_weights for layer in self.encoder],  # (B, H, Ts, Ts)
                "decoder_self": [layer.self_attn_weights for layer in self.decoder],  # (B, H, Tt, Tt)
                "cross": [layer.cross_attn_weights for layer in self.decoder],  # (B, H, Tt, Ts)
            }
        return logits


def _check_generation(tokens: Any, max_new_tokens: int, temperature: float, top_k: int | None,
                      vocab: int) -> np.ndarray:
    tokens = np.asarray(tokens._data if isinstance(tokens, Tensor) else tokens)
    if tokens.ndim == 1:
        tokens = tokens[None, :]
    if tokens.ndim != 2 or tokens.shape[1] == 0 or tokens.dtype.kind not in "iu":
        raise ValueError(f"generate: tokens must be a non-empty (B, T) integer array, got shape {tokens.shape} "
                         f"and dtype {tokens.dtype}")
    if tokens.min() < 0 or tokens.max() >= vocab:
        raise IndexError(f"generate: tokens must lie in [0, {vocab}), got values from {tokens.min()} to {tokens.max()}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 0:
        raise ValueError(f"generate: max_new_tokens must be a non-negative int, got {max_new_tokens!r}")
    if isinstance(temperature, (bool, np.bool_)) or not isinstance(temperature, numbers.Real) \
            or not 0 < temperature < np.inf:  # any real type: int, float, numpy scalars; NaN fails too
        raise ValueError(f"generate: temperature must be a positive number, got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1):
        raise ValueError(f"generate: top_k must be a positive int or None, got {top_k!r}")
    return tokens.astype(np.int64)


def sample_next(logits: np.ndarray, temperature: float, top_k: int | None) -> np.ndarray:
    """One token per row (B, 1) from softmax(logits / temperature), restricted to the top_k largest logits.

    Logits that are not finite (NaN weights) are a ValueError, never tokens. A temperature so small that
    logits / temperature overflows is greedy for that row: the limit of the distribution as T -> 0.
    """
    logits = logits.astype(np.float64)
    if not np.isfinite(logits).all():
        rows = np.unique(np.nonzero(~np.isfinite(logits))[0])
        raise ValueError(f"generate: the model's logits are not finite (NaN or inf) in rows {rows.tolist()[:8]}; "
                         "are its weights finite?")
    greedy = np.argmax(logits, axis=-1)  # (B,)
    with np.errstate(over="ignore"):
        logits = logits / float(temperature)  # (B, vocab)
    overflow = ~np.isfinite(logits).all(axis=-1)  # rows where only the largest logit counts
    if top_k == 1 or overflow.all():
        return greedy[:, None].astype(np.int64)
    if top_k is not None and top_k < logits.shape[-1]:
        kth = np.sort(logits, axis=-1)[:, -top_k][:, None]
        logits = np.where(logits < kth, -np.inf, logits)
    one_hot = np.where(np.arange(logits.shape[-1]) == greedy[:, None], 0.0, -np.inf)
    logits = np.where(overflow[:, None], one_hot, logits)  # an overflowing row: all on its largest logit
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    generator = rng.generator()
    return np.array([[generator.choice(len(p), p=p)] for p in probs], dtype=np.int64)
