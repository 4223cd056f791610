"""A causal mask for 5 tokens, and proof that a causal head never looks ahead."""

import numpy as np

import tinygrad_attn as ta

T = 5
keep = ta.causal_mask(T)  # bool, True where a query may attend
additive = np.where(keep.numpy(), 0.0, -np.inf)  # the same mask as numbers added to the scores
print("causal mask (added to the scores):")
print(additive)

ta.manual_seed(0)
mha = ta.nn.MultiHeadAttention(16, 2)
x = ta.Tensor(np.random.default_rng(1).normal(size=(1, T, 16)).astype(np.float32))
_, w_bool = mha(x, mask=keep)
_, w_float = mha(x, mask=additive.astype(np.float32))
_, w_causal = mha(x, is_causal=True)
for w in (w_bool, w_float, w_causal):
    assert np.all(np.triu(w.detach().numpy(), k=1) == 0)  # nothing above the diagonal: no token sees the future
np.testing.assert_allclose(w_bool.detach().numpy(), w_causal.detach().numpy(), rtol=1e-6)
np.testing.assert_allclose(w_float.detach().numpy(), w_causal.detach().numpy(), rtol=1e-6)
print("attention of head 0 (row = query, column = key):")
print(np.round(w_causal.detach().numpy()[0, 0], 3))

# changing a later token does not change what earlier positions output
y = x.numpy().copy()
y[0, 3:] += 10.0
out_a, _ = mha(x, is_causal=True)
out_b, _ = mha(ta.Tensor(y), is_causal=True)
np.testing.assert_allclose(out_a.detach().numpy()[0, :3], out_b.detach().numpy()[0, :3], rtol=1e-5)
print("positions 0-2 are unchanged when tokens 3-4 change")
