"""Write a new op as a Function, gradcheck it, then break its backward and watch gradcheck catch it."""

import numpy as np

import tinygrad_attn as ta


class Swish(ta.Function):
    """swish(x) = x * sigmoid(x);  d/dx = s + x s (1 - s)."""

    @staticmethod
    def forward(ctx, x):
        s = 1 / (1 + np.exp(-x))
        ctx.save_for_backward(x, s)
        return x * s

    @staticmethod
    def backward(ctx, grad):
        x, s = ctx.saved_tensors
        return grad * (s + x * s * (1 - s))


class BrokenSwish(Swish):
    @staticmethod
    def backward(ctx, grad):
        x, s = ctx.saved_tensors
        return grad * (s + x * s * (1 - s)) * 1.01  # 1% too large


x = ta.Tensor(np.random.default_rng(0).normal(size=(4, 3)), requires_grad=True)
print("Swish passes gradcheck:", ta.gradcheck(Swish.apply, [x]))
try:
    ta.gradcheck(BrokenSwish.apply, [x])
    raise SystemExit("gradcheck missed the broken backward")
except ta.GradcheckError as err:
    print("BrokenSwish is caught:", err)
