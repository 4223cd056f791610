"""Exercise 4: dV, dP and dS for one head, by hand in numpy, against the framework's gradients."""

import numpy as np

import tinygrad_attn as ta
from tinygrad_attn import functional as F


def by_hand(q, k, v, g):
    """Gradients of sum(O * g), O = softmax(q k^T / sqrt(d)) v, for one head (T, d)."""
    s = q @ k.T / np.sqrt(q.shape[-1])                 # S (T, T)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)                      # P
    dv = p.T @ g                                       # dV = P^T dO
    dp = g @ v.T                                       # dP = dO V^T
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))    # dS = P * (dP - rowsum(dP * P))
    dq = ds @ k / np.sqrt(q.shape[-1])                 # dQ = dS K / sqrt(d)
    dk = ds.T @ q / np.sqrt(q.shape[-1])               # dK = dS^T Q / sqrt(d)
    return dq, dk, dv


def wrong_by_hand(q, k, v, g):
    """The slip: dS = P * dP, forgetting the row sum the softmax subtracts."""
    dq, dk, dv = by_hand(q, k, v, g)
    s = q @ k.T / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ds = p * (g @ v.T)
    return ds @ k / np.sqrt(q.shape[-1]), ds.T @ q / np.sqrt(q.shape[-1]), dv


def matches(gradients=by_hand) -> bool:
    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=(6, 4)) for _ in range(3)]
    g = rng.normal(size=(6, 4))
    tensors = [ta.Tensor(a, requires_grad=True) for a in arrays]
    F.scaled_dot_product_attention(*tensors).backward(g)
    return all(np.allclose(mine, t.grad.numpy()) for mine, t in zip(gradients(*arrays, g), tensors))


if __name__ == "__main__":
    print("by hand:", matches(by_hand), " without the row sum:", matches(wrong_by_hand))
