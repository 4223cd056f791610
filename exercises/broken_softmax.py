"""Exercise 2 (starter): break the softmax backward by 1% and watch gradcheck name the worst index.

Run `python exercises/broken_softmax.py` until gradcheck's message names the index you broke.
"""

import numpy as np
from todo import todo

import tinygrad_attn as ta


class OnePercentOff(ta.Function):
    """softmax over the last axis whose backward is 1% too large at one entry, (1, 2)."""

    @staticmethod
    def forward(ctx, x):
        p = np.exp(x - x.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx, grad):
        (p,) = ctx.saved_tensors
        # TODO: the softmax's backward dx = p * (grad - rowsum(grad * p)), then make entry (1, 2) 1% too large.
        raise todo("OnePercentOff.backward", 2)


def message() -> str:
    """gradcheck's error message for the broken backward."""
    x = ta.Tensor(np.random.default_rng(0).normal(size=(3, 4)), requires_grad=True)
    try:
        ta.gradcheck(lambda t: OnePercentOff.apply(t), [x])
    except ta.GradcheckError as err:
        return str(err)
    return "no error"


if __name__ == "__main__":
    print(message())
