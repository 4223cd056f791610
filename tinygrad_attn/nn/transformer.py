"""Transformer blocks and the two small models the toy tasks train.

Post-norm (norm_first=False, the original paper): x = LN(x + Sublayer(x)).
Pre-norm  (norm_first=True, easier to train):     x = x + Sublayer(LN(x)).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..engine import Tensor
from .attention import MultiHeadAttention
from .layers import GELU, Dropout, Embedding, LayerNorm, LearnedPositionalEncoding, Linear, ReLU
from .module import Module, ModuleList


class FeedForward(Module):
    """Position-wise MLP: Linear(E, F) -> activation -> dropout -> Linear(F, E)."""

    def __init__(self, d_model: int, dim_feedforward: int, dropout: float = 0.0, activation: str = "relu"):
        if activation not in ("relu", "gelu"):
            raise ValueError(f'FeedForward: activation must be "relu" or "gelu", got {activation!r}')
        self.linear1 = Linear(d_model, dim_feedforward)
        self.activation = ReLU() if activation == "relu" else GELU()
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))  # (B, T, E) -> (B, T, F) -> (B, T, E)


class TransformerEncoderLayer(Module):
    """Self-attention then feed-forward, each with a residual connection and LayerNorm.

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
    ):
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout)
        self.ff = FeedForward(d_model, dim_feedforward, dropout, activation)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)
        self.attn_weights: Tensor | None = None

    def _attend(self, x: Tensor, mask: Any, is_causal: bool, need_weights: bool) -> Tensor:
        out, self.attn_weights = self.self_attn(x, mask=mask, is_causal=is_causal, need_weights=need_weights)
        return self.dropout1(out)

    def forward(self, x: Tensor, mask: Any = None, is_causal: bool = False, need_weights: bool = False) -> Tensor:
        if self.norm_first:
            x = x + self._attend(self.norm1(x), mask, is_causal, need_weights)  # (B, T, E)
            return x + self.dropout2(self.ff(self.norm2(x)))
        x = self.norm1(x + self._attend(x, mask, is_causal, need_weights))
        return self.norm2(x + self.dropout2(self.ff(x)))


class TransformerDecoderLayer(Module):
    """Causal self-attention, cross-attention over the encoder's memory, then feed-forward.

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
        activation: str = "relu",
    ):
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, nhead, dropout=dropout)
        self.ff = FeedForward(d_model, dim_feedforward, dropout, activation)
        self.norm1, self.norm2, self.norm3 = LayerNorm(d_model), LayerNorm(d_model), LayerNorm(d_model)
        self.dropout1, self.dropout2, self.dropout3 = Dropout(dropout), Dropout(dropout), Dropout(dropout)
        self.self_attn_weights: Tensor | None = None
        self.cross_attn_weights: Tensor | None = None

    def _self_block(self, x: Tensor, need_weights: bool) -> Tensor:
        out, self.self_attn_weights = self.self_attn(x, is_causal=True, need_weights=need_weights)
        return self.dropout1(out)

    def _cross_block(self, x: Tensor, memory: Tensor, memory_mask: Any, need_weights: bool) -> Tensor:
        out, self.cross_attn_weights = self.cross_attn(x, memory, mask=memory_mask, need_weights=need_weights)
        return self.dropout2(out)  # queries from the target (B, Tt, E), keys/values from the source (B, Ts, E)

    def forward(self, x: Tensor, memory: Tensor, memory_mask: Any = None, need_weights: bool = False) -> Tensor:
        if self.norm_first:
            x = x + self._self_block(self.norm1(x), need_weights)
            x = x + self._cross_block(self.norm2(x), memory, memory_mask, need_weights)
            return x + self.dropout3(self.ff(self.norm3(x)))
        x = self.norm1(x + self._self_block(x, need_weights))
        x = self.norm2(x + self._cross_block(x, memory, memory_mask, need_weights))
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
    ):
        self.config = dict(vocab_size=vocab_size, max_len=max_len, d_model=d_model, nhead=nhead,
                           num_layers=num_layers, dim_feedforward=dim_feedforward, dropout=dropout)
        self.embed = Embedding(vocab_size, d_model)
        self.position = LearnedPositionalEncoding(d_model, max_len)
        self.layers = ModuleList(
            TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, norm_first=True)
            for _ in range(num_layers)
        )
        self.norm = LayerNorm(d_model)
        self.head = Linear(d_model, vocab_size)

    def forward(self, tokens: Any, return_attention: bool = False) -> Any:
        x = self.position(self.embed(tokens))  # (B, T, E)
        for layer in self.layers:
            x = layer(x, is_causal=True, need_weights=return_attention)
        logits = self.head(self.norm(x))  # (B, T, vocab)
        if return_attention:
            return logits, [layer.attn_weights for layer in self.layers]  # each (B, H, T, T)
        return logits


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
            TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, norm_first=True)
            for _ in range(num_encoder_layers)
        )
        self.decoder = ModuleList(
            TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout, norm_first=True)
            for _ in range(num_decoder_layers)
        )
        self.encoder_norm, self.decoder_norm = LayerNorm(d_model), LayerNorm(d_model)
        self.head = Linear(d_model, tgt_vocab)

    @staticmethod
    def source_mask(src_lengths: Any, ts: int) -> np.ndarray | None:
        """(B, 1, 1, Ts) bool: True on real source tokens, False on padding."""
        if src_lengths is None:
            return None
        return np.arange(ts)[None, :] < np.asarray(src_lengths)[:, None, None, None]

    def encode(self, src: Any, src_lengths: Any = None, need_weights: bool = False) -> Tensor:
        mask = self.source_mask(src_lengths, np.shape(src)[-1])
        x = self.src_position(self.src_embed(src))  # (B, Ts, E)
        for layer in self.encoder:
            x = layer(x, mask=mask, need_weights=need_weights)
        return self.encoder_norm(x)  # the memory (B, Ts, E)

    def decode(self, tgt: Any, memory: Tensor, src_lengths: Any = None, need_weights: bool = False) -> Tensor:
        mask = self.source_mask(src_lengths, memory.shape[1])
        x = self.tgt_position(self.tgt_embed(tgt))  # (B, Tt, E)
        for layer in self.decoder:
            x = layer(x, memory, memory_mask=mask, need_weights=need_weights)
        return self.head(self.decoder_norm(x))  # (B, Tt, vocab)

    def forward(self, src: Any, tgt: Any, src_lengths: Any = None, return_attention: bool = False) -> Any:
        memory = self.encode(src, src_lengths, return_attention)
        logits = self.decode(tgt, memory, src_lengths, return_attention)
        if return_attention:
            return logits, {
                "encoder": [layer.attn_weights for layer in self.encoder],  # (B, H, Ts, Ts)
                "decoder_self": [layer.self_attn_weights for layer in self.decoder],  # (B, H, Tt, Tt)
                "cross": [layer.cross_attn_weights for layer in self.decoder],  # (B, H, Tt, Ts)
            }
        return logits
