"""Exercise 1 (starter): layer norm's backward as your own Function, checked by gradcheck.

Run `python exercises/layer_norm_function.py` until it prints `mine: True  broken: False`.
"""

import numpy as np
from todo import todo

import tinygrad_attn as ta


class MyLayerNorm(ta.Function):
    """y = (x - mean) * rstd over the last axis (no scale or shift), x (..., N)."""

    @staticmethod
    def forward(ctx, x, eps=1e-5):
        mean = x.mean(-1, keepdims=True)
        rstd = 1 / np.sqrt(x.var(-1, keepdims=True) + eps)
        xhat = (x - mean) * rstd
        ctx.save_for_backward(xhat, rstd)
        return xhat

    @staticmethod
    def backward(ctx, grad):
        xhat, rstd = ctx.saved_tensors
        # TODO: dL/dx from grad = dL/dy, xhat and rstd. Remember that the mean and the variance depend on x.
        raise todo("MyLayerNorm.backward", 1)


class BrokenLayerNorm(MyLayerNorm):
    """The usual slip, to see gradcheck catch it: forgetting that the mean depends on x (the mean(g) term)."""

    @staticmethod
    def backward(ctx, grad):
        xhat, rstd = ctx.saved_tensors
        return rstd * (grad - xhat * (grad * xhat).mean(-1, keepdims=True))


def check(function=MyLayerNorm) -> bool:
    x = ta.Tensor(np.random.default_rng(0).normal(size=(3, 5)), requires_grad=True)
    return ta.gradcheck(lambda t: function.apply(t), [x], raise_exception=False)


if __name__ == "__main__":
    print("mine:", check(MyLayerNorm), " broken:", check(BrokenLayerNorm))
