"""Weights of torch.nn.MultiheadAttention <-> this framework's MultiHeadAttention, as numpy dicts.

PyTorch packs the three input projections into `in_proj_weight` (3E, E) and
`in_proj_bias` (3E,) when query, key and value have the same width, and keeps
`q_proj_weight`, `k_proj_weight`, `v_proj_weight` apart otherwise (kdim/vdim);
`out_proj.weight` / `out_proj.bias` are shared. Here each projection is its
own Linear: `q_proj.weight`, `q_proj.bias`, ... No torch import is needed:
values may be torch tensors or arrays and come back as numpy arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

_PROJECTIONS = ("q", "k", "v")


def _state(state: Any, op: str) -> dict[str, np.ndarray]:
    """state as {name: numeric array}: a mapping of string keys to tensors or arrays, checked."""
    if not isinstance(state, Mapping):
        raise TypeError(f"{op}: state must be a dict of name -> tensor (a state_dict()), got {type(state).__name__}")
    out = {}
    for key, value in state.items():
        if not isinstance(key, str):
            raise TypeError(f"{op}: state keys must be strings, got {key!r}")
        array = np.array(value.detach().cpu().numpy() if hasattr(value, "detach") else value)
        if array.dtype.kind not in "biuf":
            raise TypeError(f"{op}: {key!r} must be a tensor or array of numbers, got {type(value).__name__} "
                            f"({array.dtype})")
        out[key] = array
    return out


def _split3(state: dict[str, np.ndarray], key: str, op: str) -> list[np.ndarray]:
    """PyTorch's packed (3E, ...) projection -> its q, k, v parts."""
    packed = state.pop(key)
    if packed.ndim not in (1, 2) or packed.shape[0] % 3:
        raise ValueError(f"{op}: {key!r} must have 3 * embed_dim rows (q, k and v stacked), got shape {packed.shape}")
    return np.split(packed, 3)


def _take(state: dict[str, np.ndarray], key: str, op: str, expected: str) -> np.ndarray:
    if key not in state:
        raise ValueError(f"{op}: {key!r} is missing (expected {expected}); keys given: {sorted(state)}")
    return state.pop(key)


def mha_from_torch(state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A torch.nn.MultiheadAttention state dict -> a MultiHeadAttention state dict; keys it does not know
    are kept as they are, so that a strict `load_state_dict` reports them."""
    op, state = "mha_from_torch", _state(state, "mha_from_torch")
    if "bias_k" in state or "bias_v" in state:
        raise ValueError(f"{op}: add_bias_kv=True has no counterpart here")
    if any(f"{name}_proj.weight" in state for name in _PROJECTIONS):
        raise ValueError(f"{op}: the state is already in this framework's layout (q_proj.weight, ...): "
                         "from_torch applied twice?")
    separate = [f"{name}_proj_weight" for name in _PROJECTIONS if f"{name}_proj_weight" in state]
    if "in_proj_weight" in state and separate:
        raise ValueError(f"{op}: both 'in_proj_weight' and {separate} given; torch.nn.MultiheadAttention "
                         "has one or the other")
    out: dict[str, np.ndarray] = {}
    if "in_proj_weight" in state:
        weights = _split3(state, "in_proj_weight", op)
    else:
        weights = [_take(state, f"{name}_proj_weight", op, "'in_proj_weight' or q/k/v_proj_weight")
                   for name in _PROJECTIONS]
    for name, w in zip(_PROJECTIONS, weights):
        out[f"{name}_proj.weight"] = w
    if "in_proj_bias" in state:
        for name, b in zip(_PROJECTIONS, _split3(state, "in_proj_bias", op)):
            out[f"{name}_proj.bias"] = b
    out["out_proj.weight"] = _take(state, "out_proj.weight", op, "the output projection")
    return out | state  # out_proj.bias and any key not known here, unchanged


def mha_to_torch(state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A MultiHeadAttention state dict -> torch.nn.MultiheadAttention's layout (packed when widths agree);
    keys it does not know are kept as they are."""
    op, state = "mha_to_torch", _state(state, "mha_to_torch")
    if "in_proj_weight" in state or any(f"{name}_proj_weight" in state for name in _PROJECTIONS):
        raise ValueError(f"{op}: the state is already in torch.nn's layout (in_proj_weight): to_torch applied twice?")
    weights = [_take(state, f"{name}_proj.weight", op, "the q, k and v projections") for name in _PROJECTIONS]
    out: dict[str, np.ndarray] = {}
    if len({w.shape for w in weights}) == 1 and weights[0].ndim == 2 and weights[0].shape[0] == weights[0].shape[1]:
        out["in_proj_weight"] = np.concatenate(weights)
    else:
        for name, w in zip(_PROJECTIONS, weights):
            out[f"{name}_proj_weight"] = w
    biases = [f"{name}_proj.bias" for name in _PROJECTIONS]
    present = [b for b in biases if b in state]
    if present and len(present) < 3:
        raise ValueError(f"{op}: {present} given without {sorted(set(biases) - set(present))}: torch packs the three "
                         "biases into one in_proj_bias")
    if present:
        out["in_proj_bias"] = np.concatenate([state.pop(b) for b in biases])
    out["out_proj.weight"] = _take(state, "out_proj.weight", op, "the output projection")
    return out | state  # out_proj.bias and any key not known here, unchanged


# --- whole models: the attention layers of a state dict in torch.nn's layout ---------------------------------

_TORCH_ATTENTION = {"self_attn.": "self_attn.", "cross_attn.": "multihead_attn."}  # our name -> torch.nn's


def _attention_prefixes(state: Mapping[str, Any], marker: str) -> list[str]:
    """The prefixes P of every attention module in `state`, found by its key P + marker."""
    return sorted({k[: -len(marker)] for k in state if k.endswith(marker)})


def to_torch(state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A model's state dict -> the names torch.nn's layers use, as numpy arrays.

    Each MultiHeadAttention goes through `mha_to_torch` (q/k/v packed into `in_proj_weight`), a decoder
    layer's `cross_attn` becomes `multihead_attn`, and a Transformer layer's `ff.linear1`/`ff.linear2` become
    `linear1`/`linear2`; every other name is kept. So a PyTorch twin that builds the same model from
    torch.nn.TransformerEncoderLayer / TransformerDecoderLayer (batch_first=True) loads the result with
    `load_state_dict`.
    """
    state = _state(state, "to_torch")
    out: dict[str, np.ndarray] = {}
    for prefix in _attention_prefixes(state, "q_proj.weight"):
        group = {k[len(prefix):]: state.pop(k) for k in list(state) if k.startswith(prefix)}
        renamed = prefix
        for ours, theirs in _TORCH_ATTENTION.items():
            if prefix.endswith(ours):
                renamed = prefix[: -len(ours)] + theirs
        out.update({renamed + k: v for k, v in mha_to_torch(group).items()})
    for key, value in state.items():
        out[key.replace("ff.linear1.", "linear1.").replace("ff.linear2.", "linear2.")] = value
    return out


def from_torch(state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The inverse of `to_torch`: a state dict in torch.nn's layer names -> this framework's names."""
    state = _state(state, "from_torch")
    out: dict[str, np.ndarray] = {}
    for prefix in _attention_prefixes(state, "out_proj.weight"):
        group = {k[len(prefix):]: state.pop(k) for k in list(state) if k.startswith(prefix)}
        renamed = prefix
        for ours, theirs in _TORCH_ATTENTION.items():
            if prefix.endswith(theirs):
                renamed = prefix[: -len(theirs)] + ours
        out.update({renamed + k: v for k, v in mha_from_torch(group).items()})
    for key, value in state.items():
        parts = key.split(".")
        if len(parts) >= 2 and parts[-2] in ("linear1", "linear2") and (len(parts) < 3 or parts[-3] != "ff"):
            key = ".".join(parts[:-2] + ["ff"] + parts[-2:])
        out[key] = value
    return out
