"""Multi-head attention on one sentence of 5 tokens: d_model 64, 4 heads."""

import numpy as np

import tinygrad_attn as ta

ta.manual_seed(0)
x = ta.Tensor(np.random.default_rng(0).normal(size=(1, 5, 64)).astype(np.float32))  # (batch, tokens, d_model)
mha = ta.nn.MultiHeadAttention(embed_dim=64, num_heads=4)

out, weights = mha(x)  # self-attention: queries, keys and values all come from x
print(mha)
print("output", out.shape, "weights", weights.shape)  # (1, 5, 64) and (1, 4, 5, 5): one 5x5 map per head
assert out.shape == (1, 5, 64) and weights.shape == (1, 4, 5, 5)
assert np.allclose(weights.detach().numpy().sum(-1), 1, atol=1e-6)  # every row of every head is a distribution
print("row sums of head 0:", np.round(weights.detach().numpy()[0, 0].sum(-1), 6))
print(f"{mha.num_parameters()} parameters = 4 x (64 x 64 + 64)")
