"""Exercise 5: a Hessian-vector product of attention, by differentiating a gradient (double backward)."""

import numpy as np

import tinygrad_attn as ta
from tinygrad_attn import autograd
from tinygrad_attn import functional as F


def hvp(f, x, v):
    """H v for a one-element f at x (H its Hessian): the gradient of <grad f(x), v>."""
    (g,) = autograd.grad(f(x), x, create_graph=True)  # grad f(x), with the graph of how it depends on x
    (hv,) = autograd.grad((g * v).sum(), x)  # d/dx <grad f(x), v> = H v
    return hv


def wrong_hvp(f, x, v):
    """The slip: differentiating the sum of the gradient, which gives H 1 (the row sums of H), not H v."""
    (g,) = autograd.grad(f(x), x, create_graph=True)
    (h1,) = autograd.grad(g.sum(), x)
    return h1


def matches(product=hvp) -> bool:
    """product(f, x, v) against central differences of the gradient along v, on both attention paths."""
    rng = np.random.default_rng(0)
    k, v_, x0, direction = (rng.normal(size=(1, 2, 4, 3)) for _ in range(4))
    ok = True
    for kernel in ("math", "flash"):
        with ta.sdpa_kernel(kernel):
            def f(q):
                return (F.scaled_dot_product_attention(q, ta.Tensor(k), ta.Tensor(v_), is_causal=True) ** 2).sum()

            def gradient(at):
                q = ta.Tensor(at, requires_grad=True)
                return autograd.grad(f(q), q)[0].numpy()

            eps = 1e-5
            numeric = (gradient(x0 + eps * direction) - gradient(x0 - eps * direction)) / (2 * eps)
            mine = product(f, ta.Tensor(x0, requires_grad=True), ta.Tensor(direction)).numpy()
            ok &= bool(np.allclose(mine, numeric, rtol=1e-5, atol=1e-8))
    return ok


if __name__ == "__main__":
    print("double backward:", matches(hvp), " sum of the gradient:", matches(wrong_hvp))
