"""torch.nn's Transformer interface over this library's blocks, for ported programs: TransformerEncoderLayer,
TransformerDecoderLayer, TransformerEncoder, TransformerDecoder and Transformer.

As PyTorch's: inputs are (T, B, E) unless batch_first=True, or unbatched (T, E); `*_mask` (T, S) or
(B * H, T, S) is bool True where a query may NOT look, or floats added to the scores; `*_key_padding_mask`
(B, S) is True on padding; `is_causal` is a hint that the mask is the causal one and needs that mask.
A mask equal to the causal mask (generate_square_subsequent_mask) runs as the fused causal kernel. The
parameters keep this library's names (self_attn.q_proj, ff.linear1, ...), but `state_dict` gives PyTorch's
(self_attn.in_proj_weight, linear1, multihead_attn) and `load_state_dict` takes them (or this library's), so
a checkpoint moves between the two as it is.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from ..checks import check_tensor
from ..engine import check_device
from ..masks import is_causal_mask, torch_masks
from ..tensor import Tensor
from . import init
from .attention.multi_head import from_torch_names, init_as_pytorch, to_torch_names
from .layers import LayerNorm
from .module import Module, ModuleList
from .transformer import DecoderBlock, EncoderBlock

ACTIVATIONS = ("relu", "gelu")  # torch.nn's layers take these names, or a callable


def _activation(activation: Any, op: str) -> Any:
    if not callable(activation) and activation not in ACTIVATIONS:
        raise ValueError(f'{op}: activation must be "relu", "gelu" or a callable, got {activation!r}')
    return activation


def _batch_first(x: Tensor, batch_first: bool) -> Tensor:
    """(T, B, E) -> (B, T, E) unless already batch-first; unbatched (T, E) -> (1, T, E)."""
    if x.ndim == 2:
        return x.unsqueeze(0)
    return x if batch_first else x.transpose(0, 1)


def _back(x: Tensor, batched: bool, batch_first: bool) -> Tensor:
    """The inverse of _batch_first."""
    if not batched:
        return x.squeeze(0)
    return x if batch_first else x.transpose(0, 1)


def _check_input(op: str, name: str, x: Any, d_model: int, batched: bool | None = None) -> None:
    check_tensor(x, op, name)
    if x.ndim not in (2, 3) or x.shape[-1] != d_model or (batched is not None and (x.ndim == 3) != batched):
        wanted = "(T, B, E) or (B, T, E)" if batched is not False else "(T, E)"
        raise ValueError(f"{op}: {name} must be {wanted} with E = d_model = {d_model}, got {x.shape}")


def _self_masks(op: str, names: tuple[str, str, str], mask: Any, padding: Any, is_causal: bool, batch: int | None,
                heads: int, t: int) -> tuple[bool, Any]:
    """(causal, mask in this library's kind) for a self-attention given torch's mask, padding mask and hint."""
    if is_causal and mask is None:
        raise RuntimeError(f"{op}: {names[2]} is a hint that {names[0]} is the causal mask; give {names[0]} too, as "
                           "PyTorch requires (nn.Transformer.generate_square_subsequent_mask(T) makes it)")
    causal = mask is not None and is_causal_mask(mask, t)  # the fused causal kernel instead of reading a mask
    return causal, torch_masks(op, names[:2], None if causal else mask, padding, batch, heads, t, t)


def _as_pytorch_layer(layer: Module, op: str, batch_first: bool, device: Any, dtype: Any,
                      attentions: tuple) -> None:
    """The rest of a torch.nn layer's construction: its attentions start as nn.MultiheadAttention does, and it
    keeps the options its forward reads."""
    check_device(device, op)
    for attention in attentions:
        init_as_pytorch(attention)
    layer.d_model, layer.nhead = attentions[0].embed_dim, attentions[0].num_heads
    layer.batch_first = bool(batch_first)
    if dtype is not None:
        layer.to(dtype)


def _layer_to_torch(state: dict[str, Any], attentions: dict[str, str]) -> dict[str, Any]:
    """A layer's state entries under torch.nn's names: each attention (our prefix -> torch's) packed, and the
    feed-forward's ff.linear1 / ff.linear2 as linear1 / linear2."""
    out = {}
    for ours, theirs in attentions.items():
        part = {k[len(ours):]: v for k, v in state.items() if k.startswith(ours)}
        out.update({theirs + k: v for k, v in to_torch_names(part).items()})
    for k, v in state.items():
        if not k.startswith(tuple(attentions)):
            out[k[len("ff."):] if k.startswith("ff.") else k] = v
    return out


def _layer_from_torch(state: dict[str, Any], attentions: dict[str, str]) -> dict[str, Any]:
    """The inverse of _layer_to_torch; entries already under this library's names pass unchanged."""
    out, prefixes = {}, tuple(attentions) + tuple(attentions.values())
    for ours, theirs in attentions.items():
        for prefix in dict.fromkeys((ours, theirs)):
            part = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
            out.update({ours + k: v for k, v in from_torch_names(part).items()})
    for k, v in state.items():
        if not k.startswith(prefixes):
            out["ff." + k if k.startswith(("linear1.", "linear2.")) else k] = v
    return out


class TransformerEncoderLayer(EncoderBlock):
    """torch.nn.TransformerEncoderLayer: self-attention then feed-forward, each with a residual and LayerNorm
    (post-norm unless norm_first=True)."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: Any = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device: Any = None, dtype: Any = None):
        super().__init__(d_model, nhead, dim_feedforward, dropout, norm_first=norm_first,
                         activation=_activation(activation, "TransformerEncoderLayer"),
                         layer_norm_eps=layer_norm_eps, bias=bias)
        _as_pytorch_layer(self, "TransformerEncoderLayer", batch_first, device, dtype, (self.self_attn,))

    linear1 = property(lambda self: self.ff.linear1)  # torch.nn's attribute names
    linear2 = property(lambda self: self.ff.linear2)

    def _state_to_saved(self, state: dict[str, Any]) -> dict[str, Any]:
        return _layer_to_torch(state, {"self_attn.": "self_attn."})

    def _state_from_saved(self, state: dict[str, Any]) -> dict[str, Any]:
        return _layer_from_torch(state, {"self_attn.": "self_attn."})

    def forward(self, src: Tensor, src_mask: Any = None, src_key_padding_mask: Any = None,
                is_causal: bool = False) -> Tensor:
        op = "TransformerEncoderLayer"
        _check_input(op, "src", src, self.d_model)
        x = _batch_first(src, self.batch_first)  # (B, T, E)
        causal, mask = _self_masks(op, ("src_mask", "src_key_padding_mask", "is_causal"), src_mask,
                                   src_key_padding_mask, is_causal, x.shape[0] if src.ndim == 3 else None,
                                   self.nhead, x.shape[1])
        return _back(super().forward(x, mask=mask, is_causal=causal), src.ndim == 3, self.batch_first)


class TransformerDecoderLayer(DecoderBlock):
    """torch.nn.TransformerDecoderLayer: self-attention (causal only through tgt_mask), cross-attention over
    the memory, then feed-forward."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: Any = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device: Any = None, dtype: Any = None):
        super().__init__(d_model, nhead, dim_feedforward, dropout, norm_first=norm_first,
                         activation=_activation(activation, "TransformerDecoderLayer"),
                         layer_norm_eps=layer_norm_eps, bias=bias)
        _as_pytorch_layer(self, "TransformerDecoderLayer", batch_first, device, dtype,
                          (self.self_attn, self.cross_attn))

    linear1 = property(lambda self: self.ff.linear1)  # torch.nn's attribute names
    linear2 = property(lambda self: self.ff.linear2)
    multihead_attn = property(lambda self: self.cross_attn)

    def _state_to_saved(self, state: dict[str, Any]) -> dict[str, Any]:
        return _layer_to_torch(state, {"self_attn.": "self_attn.", "cross_attn.": "multihead_attn."})

    def _state_from_saved(self, state: dict[str, Any]) -> dict[str, Any]:
        return _layer_from_torch(state, {"self_attn.": "self_attn.", "cross_attn.": "multihead_attn."})

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Any = None, memory_mask: Any = None,
                tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False) -> Tensor:
        op = "TransformerDecoderLayer"
        _check_input(op, "tgt", tgt, self.d_model)
        _check_input(op, "memory", memory, self.d_model, tgt.ndim == 3)
        x, m = _batch_first(tgt, self.batch_first), _batch_first(memory, self.batch_first)  # (B, T, E), (B, S, E)
        if x.shape[0] != m.shape[0]:
            raise ValueError(f"{op}: tgt and memory hold batches of {x.shape[0]} and {m.shape[0]} sequences "
                             f"(shapes {tgt.shape} and {memory.shape}, batch_first={self.batch_first})")
        batch = x.shape[0] if tgt.ndim == 3 else None
        causal, self_mask = _self_masks(op, ("tgt_mask", "tgt_key_padding_mask", "tgt_is_causal"), tgt_mask,
                                        tgt_key_padding_mask, tgt_is_causal, batch, self.nhead, x.shape[1])
        if memory_is_causal and memory_mask is None:
            raise RuntimeError(f"{op}: memory_is_causal is a hint that memory_mask is the causal mask; give "
                               "memory_mask too, as PyTorch requires")
        cross_mask = torch_masks(op, ("memory_mask", "memory_key_padding_mask"), memory_mask,
                                 memory_key_padding_mask, batch, self.nhead, x.shape[1], m.shape[1])
        out = super().forward(x, m, memory_mask=cross_mask, mask=self_mask, is_causal=causal)
        return _back(out, tgt.ndim == 3, self.batch_first)


def _clones(layer: Module, n: int, op: str) -> ModuleList:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"{op}: num_layers must be a non-negative int, got {n!r}")
    return ModuleList(copy.deepcopy(layer) for _ in range(n))  # independent weights, as torch.nn's clones


class TransformerEncoder(Module):
    """torch.nn.TransformerEncoder: num_layers copies of `encoder_layer`, then `norm` when given."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int, norm: Module | None = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True):
        if not isinstance(encoder_layer, TransformerEncoderLayer):
            raise TypeError(f"TransformerEncoder: encoder_layer must be an nn.TransformerEncoderLayer, got "
                            f"{type(encoder_layer).__name__}")
        self.layers = _clones(encoder_layer, num_layers, "TransformerEncoder")
        self.num_layers, self.norm = num_layers, norm  # enable_nested_tensor and mask_check: speed hints only

    def forward(self, src: Tensor, mask: Any = None, src_key_padding_mask: Any = None,
                is_causal: bool | None = None) -> Tensor:
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(Module):
    """torch.nn.TransformerDecoder: num_layers copies of `decoder_layer`, then `norm` when given."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm: Module | None = None):
        if not isinstance(decoder_layer, TransformerDecoderLayer):
            raise TypeError(f"TransformerDecoder: decoder_layer must be an nn.TransformerDecoderLayer, got "
                            f"{type(decoder_layer).__name__}")
        self.layers = _clones(decoder_layer, num_layers, "TransformerDecoder")
        self.num_layers, self.norm = num_layers, norm

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Any = None, memory_mask: Any = None,
                tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False) -> Tensor:
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return x if self.norm is None else self.norm(x)


class Transformer(Module):
    """torch.nn.Transformer: an encoder and a decoder of num_*_layers layers, each stack ending in LayerNorm;
    the weight matrices start Xavier-uniform, as PyTorch's (q, k and v as the one matrix PyTorch packs)."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6, num_decoder_layers: int = 6,
                 dim_feedforward: int = 2048, dropout: float = 0.1, activation: Any = "relu",
                 custom_encoder: Module | None = None, custom_decoder: Module | None = None,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False, norm_first: bool = False,
                 bias: bool = True, device: Any = None, dtype: Any = None):
        check_device(device, "Transformer")
        layer = dict(dim_feedforward=dim_feedforward, dropout=dropout, activation=activation,
                     layer_norm_eps=layer_norm_eps, batch_first=batch_first, norm_first=norm_first, bias=bias)
        self.encoder = custom_encoder if custom_encoder is not None else TransformerEncoder(
            TransformerEncoderLayer(d_model, nhead, **layer), num_encoder_layers,
            LayerNorm(d_model, layer_norm_eps, bias=bias))
        self.decoder = custom_decoder if custom_decoder is not None else TransformerDecoder(
            TransformerDecoderLayer(d_model, nhead, **layer), num_decoder_layers,
            LayerNorm(d_model, layer_norm_eps, bias=bias))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, bool(batch_first)
        for p in self.parameters():  # PyTorch's: every matrix Xavier-uniform, q, k, v as their packed (3E, E)
            if p.ndim > 1:
                init.xavier_uniform_(p)
        for module in self.modules():
            if hasattr(module, "q_proj"):
                init_as_pytorch(module, biases=False)
        if dtype is not None:
            self.to(dtype)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Any = None, tgt_mask: Any = None, memory_mask: Any = None,
                src_key_padding_mask: Any = None, tgt_key_padding_mask: Any = None,
                memory_key_padding_mask: Any = None, src_is_causal: bool | None = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False) -> Tensor:
        for name, x in (("src", src), ("tgt", tgt)):
            _check_input("Transformer", name, x, self.d_model)
        batch_dim = 0 if self.batch_first else 1
        if src.ndim != tgt.ndim or (src.ndim == 3 and src.shape[batch_dim] != tgt.shape[batch_dim]):
            raise RuntimeError(f"Transformer: the batch number of src and tgt must be equal, got shapes {src.shape} "
                               f"and {tgt.shape} (batch_first={self.batch_first})")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device: Any = None, dtype: Any = None) -> Tensor:
        """(sz, sz) float mask: -inf above the diagonal (the future), 0 elsewhere; float32 unless dtype."""
        check_device(device, "generate_square_subsequent_mask")
        if isinstance(sz, bool) or not isinstance(sz, (int, np.integer)) or sz < 0:
            raise ValueError(f"generate_square_subsequent_mask: sz must be a non-negative int, got {sz!r}")
        mask = Tensor(np.triu(np.full((sz, sz), -np.inf, np.float32), 1))
        return mask if dtype is None else mask.to(dtype)
