"""gradcheck itself: passes on correct ops, catches a backward that is 1% off."""

import numpy as np
import pytest

import tinygrad_attn as ta


def make_scaled_exp(factor):
    class ScaledExp(ta.Function):
        @staticmethod
        def forward(ctx, x):
            out = np.exp(x)
            ctx.save_for_backward(out)
            return out

        @staticmethod
        def backward(ctx, grad):
            (out,) = ctx.saved_tensors
            return grad * out * factor

    return ScaledExp


def test_passes_on_correct_backward():
    x = ta.Tensor(np.random.default_rng(0).normal(size=(3, 4)), requires_grad=True)
    assert ta.gradcheck(make_scaled_exp(1.0).apply, [x])


def test_fails_on_backward_off_by_one_percent():
    x = ta.Tensor(np.random.default_rng(0).normal(size=(3, 4)), requires_grad=True)
    bad = make_scaled_exp(1.01)
    with pytest.raises(ta.GradcheckError, match=r"gradient mismatch for input 0 \(shape \(3, 4\)\) at index"):
        ta.gradcheck(bad.apply, [x])
    assert ta.gradcheck(bad.apply, [x], raise_exception=False) is False


def test_message_names_analytic_and_numeric_values_and_the_right_input():
    a = ta.Tensor(np.ones(2), requires_grad=True)
    b = ta.Tensor(np.ones(2) * 0.5, requires_grad=True)
    with pytest.raises(ta.GradcheckError, match=r"input 1 .*analytic .*numeric .*abs error"):
        ta.gradcheck(lambda x, y: x + make_scaled_exp(0.9).apply(y), [a, b])


def test_float32_inputs_are_checked_in_float64_and_restored():
    x = ta.Tensor(np.array([0.1, 0.2], dtype=np.float32), requires_grad=True)
    data = x.detach().numpy()
    assert ta.gradcheck(lambda t: (t * t).sum(), [x])
    assert x.detach().numpy() is data and x.detach().numpy().dtype == np.float32 and x.grad is None


def test_large_inputs_are_sampled():
    x = ta.Tensor(np.random.default_rng(0).normal(size=(50, 50)), requires_grad=True)
    assert ta.gradcheck(lambda t: t.tanh(), [x], max_elements=30)
    with pytest.raises(ta.GradcheckError, match="of 30 checked elements"):
        ta.gradcheck(make_scaled_exp(1.01).apply, [x], max_elements=30)
