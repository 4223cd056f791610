"""Exercise 1: layer norm's backward as your own Function, checked by gradcheck."""

import numpy as np

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
        # dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
        return rstd * (grad - grad.mean(-1, keepdims=True) - xhat * (grad * xhat).mean(-1, keepdims=True))


class BrokenLayerNorm(MyLayerNorm):
    """The usual slip: forgetting that the mean depends on x (the mean(g) term)."""

    @staticmethod
    def backward(ctx, grad):
        xhat, rstd = ctx.saved_tensors
        return rstd * (grad - xhat * (grad * xhat).mean(-1, keepdims=True))


def check(function=MyLayerNorm) -> bool:
    x = ta.Tensor(np.random.default_rng(0).normal(size=(3, 5)), requires_grad=True)
    return ta.gradcheck(lambda t: function.apply(t), [x], raise_exception=False)


if __name__ == "__main__":
    print("mine:", check(MyLayerNorm), " broken:", check(BrokenLayerNorm))
