"""Exercise 4 (starter): dV, dP and dS for one head, by hand in numpy, against the framework's gradients.

Run `python exercises/one_head_by_hand.py` until it prints `by hand: True  without the row sum: False`.
"""

import numpy as np
from todo import todo

import tinygrad_attn as ta
from tinygrad_attn import functional as F


def by_hand(q, k, v, g):
    """Gradients of sum(O * g), O = softmax(q k^T / sqrt(d)) v, for one head (T, d)."""
    s = q @ k.T / np.sqrt(q.shape[-1])                 # S (T, T)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)                      # P
    # TODO: dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dP * P)), then dQ and dK (mind the 1 / sqrt(d)).
    raise todo("by_hand", 4)


def wrong_by_hand(q, k, v, g):
    """The slip: dS = P * dP, forgetting the row sum the softmax subtracts (dV stays right)."""
    s = q @ k.T / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ds = p * (g @ v.T)
    return ds @ k / np.sqrt(q.shape[-1]), ds.T @ q / np.sqrt(q.shape[-1]), p.T @ g


def matches(gradients=by_hand) -> bool:
    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=(6, 4)) for _ in range(3)]
    g = rng.normal(size=(6, 4))
    tensors = [ta.Tensor(a, requires_grad=True) for a in arrays]
    F.scaled_dot_product_attention(*tensors).backward(g)
    return all(np.allclose(mine, t.grad.numpy()) for mine, t in zip(gradients(*arrays, g), tensors))


if __name__ == "__main__":
    print("by hand:", matches(by_hand), " without the row sum:", matches(wrong_by_hand))
