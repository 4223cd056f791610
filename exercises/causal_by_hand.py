"""Exercise 3 (starter): causal masking by hand, compared with is_causal on both attention paths.

Run `python exercises/causal_by_hand.py` until it prints `by hand: True  anti-causal: False`.
"""

import numpy as np
from todo import todo

import tinygrad_attn as ta
from tinygrad_attn import functional as F


def causal_attention(q, k, v):
    """softmax(q k^T / sqrt(d) with -inf above the diagonal) v, from primitive ops."""
    t, d = q.shape[-2], q.shape[-1]  # noqa: F841  (yours to use below)
    scores = q @ k.transpose(-2, -1) * (1 / np.sqrt(d))  # noqa: F841  (..., T, T), yours to mask below
    # TODO: a bool (T, T) array, True where key j comes after query i; masked_fill those scores with -inf,
    # then softmax over the keys and multiply by v.
    raise todo("causal_attention", 3)


def anti_causal_attention(q, k, v):
    """The slip: keeping the future instead of hiding it (np.tril where np.triu(.., 1) was meant)."""
    t, d = q.shape[-2], q.shape[-1]  # noqa: F841  (yours to use below)
    scores = q @ k.transpose(-2, -1) * (1 / np.sqrt(d))
    return F.softmax(scores.masked_fill(np.tril(np.ones((t, t), dtype=bool), -1), -np.inf), -1) @ v


def matches(attention=causal_attention) -> bool:
    rng = np.random.default_rng(0)
    q, k, v = (ta.Tensor(rng.normal(size=(2, 3, 5, 4))) for _ in range(3))
    mine = attention(q, k, v).numpy()
    return all(np.allclose(mine, _reference(kernel, q, k, v)) for kernel in ("math", "flash"))


def _reference(kernel, q, k, v):
    with ta.sdpa_kernel(kernel):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).numpy()


if __name__ == "__main__":
    print("by hand:", matches(causal_attention), " anti-causal:", matches(anti_causal_attention))
