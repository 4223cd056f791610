"""Heatmaps of every head of an untrained MultiHeadAttention, for 1, 2, 4 and 8 heads on the same input.

Splitting into more heads does not add parameters: each head works on d_model / heads features. The
weights are random, so the pictures show only the causal shape (nothing above the diagonal); for heads
that learned something, train a task (`tinygrad-attn train`) and look at its attention.png.
Writes heads_<n>.png (needs matplotlib) and prints what each picture holds.
"""

import numpy as np

import tinygrad_attn as ta
from tinygrad_attn.viz import heatmap_grid

x = ta.Tensor(np.random.default_rng(0).normal(size=(1, 6, 32)).astype(np.float32))  # 6 tokens, d_model 32
for heads in (1, 2, 4, 8):
    ta.manual_seed(0)
    mha = ta.nn.MultiHeadAttention(32, heads)
    _, weights = mha(x, is_causal=True)  # (1, heads, 6, 6)
    plural = "s" if heads > 1 else ""
    title = f"untrained, {heads} head{plural} of size {32 // heads} (rows: queries, columns: keys)"
    tokens = [f"t{i}" for i in range(6)]
    path = heatmap_grid(weights.detach().numpy()[0], f"heads_{heads}.png", title, queries=tokens, keys=tokens)
    print(f"{heads} heads x {32 // heads} dims: weights {weights.shape}, {mha.num_parameters()} parameters,"
          f" picture {path or 'skipped'}")
