"""Scaled dot-product attention from scratch on Q, K, V of shape (1, 3, 256), checked against plain numpy."""

import numpy as np

import tinygrad_attn as ta
from tinygrad_attn import functional as F

rng = np.random.default_rng(0)
q_np, k_np, v_np = (rng.normal(size=(1, 3, 256)) for _ in range(3))  # (batch, tokens, d)
q, k, v = (ta.Tensor(a, requires_grad=True) for a in (q_np, k_np, v_np))

d = q.shape[-1]
scores = q @ k.transpose(-2, -1) / np.sqrt(d)  # (1, 3, 3): how much each query matches each key
weights = scores.softmax(-1)  # (1, 3, 3): each row sums to 1
out = weights @ v  # (1, 3, 256): weighted average of the values

# the same in plain numpy
s = q_np @ k_np.transpose(0, 2, 1) / np.sqrt(d)
p = np.exp(s - s.max(-1, keepdims=True))
p /= p.sum(-1, keepdims=True)
np.testing.assert_allclose(out.detach().numpy(), p @ v_np, rtol=1e-12)
np.testing.assert_allclose(F.scaled_dot_product_attention(q, k, v).detach().numpy(), out.detach().numpy(), rtol=1e-12)

out.sum().backward()  # and the gradients flow back to q, k and v
print("weights:\n", np.round(weights.detach().numpy()[0], 3))
print("output", out.shape, "matches numpy; grad of q", q.grad.shape)
