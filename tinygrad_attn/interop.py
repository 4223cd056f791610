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


def _array(value: Any) -> np.ndarray:
    return np.array(value.detach().cpu().numpy() if hasattr(value, "detach") else value)


def mha_from_torch(state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A torch.nn.MultiheadAttention state dict -> a MultiHeadAttention state dict."""
    state = {k: _array(v) for k, v in state.items()}
    if "bias_k" in state or "bias_v" in state:
        raise ValueError("mha_from_torch: add_bias_kv=True has no counterpart here")
    out: dict[str, np.ndarray] = {}
    if "in_proj_weight" in state:
        for name, w in zip(_PROJECTIONS, np.split(state["in_proj_weight"], 3)):
            out[f"{name}_proj.weight"] = w
    else:
        for name in _PROJECTIONS:
            out[f"{name}_proj.weight"] = state[f"{name}_proj_weight"]
    if "in_proj_bias" in state:
        for name, b in zip(_PROJECTIONS, np.split(state["in_proj_bias"], 3)):
            out[f"{name}_proj.bias"] = b
    out["out_proj.weight"] = state["out_proj.weight"]
    if "out_proj.bias" in state:
        out["out_proj.bias"] = state["out_proj.bias"]
    return out


def mha_to_torch(state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A MultiHeadAttention state dict -> torch.nn.MultiheadAttention's layout (packed when widths agree)."""
    state = {k: _array(v) for k, v in state.items()}
    weights = [state[f"{name}_proj.weight"] for name in _PROJECTIONS]
    out: dict[str, np.ndarray] = {}
    if len({w.shape for w in weights}) == 1 and weights[0].shape[0] == weights[0].shape[1]:
        out["in_proj_weight"] = np.concatenate(weights)
    else:
        for name, w in zip(_PROJECTIONS, weights):
            out[f"{name}_proj_weight"] = w
    if "q_proj.bias" in state:
        out["in_proj_bias"] = np.concatenate([state[f"{name}_proj.bias"] for name in _PROJECTIONS])
    out["out_proj.weight"] = state["out_proj.weight"]
    if "out_proj.bias" in state:
        out["out_proj.bias"] = state["out_proj.bias"]
    return out


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
    state = {k: _array(v) for k, v in state.items()}
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
    state = {k: _array(v) for k, v in state.items()}
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
