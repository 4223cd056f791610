"""`torch.nn.attention` for tinygrad_attn: `sdpa_kernel` with PyTorch's `SDPBackend` names, and
`flex_attention` (its submodule, as in PyTorch); beside them this library's attention layers
(`MultiHeadAttention`, PyTorch's `MultiheadAttention` interface, the `KVCache`), in multi_head.py.
"""

from ...functional import SDPBackend, sdpa_kernel
from . import flex_attention
from .multi_head import KVCache, MultiHeadAttention, MultiheadAttention

__all__ = ["KVCache", "MultiHeadAttention", "MultiheadAttention", "SDPBackend", "flex_attention", "sdpa_kernel"]
