"""Elementwise math, shape ops and activations that PyTorch programs use: values and dtypes against numpy or
closed forms, first and second derivatives against finite differences over hypothesis shapes, and every one
against PyTorch itself (values, dtypes, shapes, gradients) when it is installed."""

import numpy as np
import pytest
from conftest import arrays, shapes
from hypothesis import given, settings
from hypothesis import strategies as st

import tinygrad_attn as ta
import tinygrad_attn.nn.functional as F

few = settings(max_examples=8, deadline=None)

UNARY = {  # name: (numpy's function, the domain drawn from)
    "tan": (np.tan, (-1.2, 1.2)), "asin": (np.arcsin, (-0.9, 0.9)), "acos": (np.arccos, (-0.9, 0.9)),
    "atan": (np.arctan, (-3, 3)), "sinh": (np.sinh, (-2, 2)), "cosh": (np.cosh, (-2, 2)),
    "asinh": (np.arcsinh, (-3, 3)), "acosh": (np.arccosh, (1.2, 3)), "atanh": (np.arctanh, (-0.9, 0.9)),
    "expm1": (np.expm1, (-2, 2)), "log1p": (np.log1p, (-0.5, 2)), "log2": (np.log2, (0.3, 3)),
    "log10": (np.log10, (0.3, 3)), "exp2": (np.exp2, (-2, 2)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@few
@given(data=st.data(), shape=shapes())
def test_elementwise_math_matches_numpy_and_is_twice_differentiable(name, data, shape):
    reference, (low, high) = UNARY[name]
    x = data.draw(arrays(shape, low, high))
    np.testing.assert_allclose(getattr(ta.tensor(x), name)().numpy(), reference(x), rtol=1e-12)
    assert ta.gradgradcheck(lambda t: getattr(t, name)(), [ta.tensor(x, requires_grad=True)])


@pytest.mark.parametrize("name", ["floor", "ceil", "trunc", "round", "sign"])
def test_steps_have_zero_gradient_and_keep_integer_inputs(name):
    x = ta.tensor([-1.5, -0.5, 0.5, 2.5], requires_grad=True, dtype=ta.float64)
    getattr(x, name)().sum().backward()
    assert x.grad.tolist() == [0.0] * 4
    np.testing.assert_array_equal(getattr(ta.tensor([3, -2]), name)().numpy(),
                                  getattr(np, name)(np.array([3, -2])))


@few
@given(data=st.data(), shape=shapes(min_dims=1, min_side=1), keepdim=st.booleans())
def test_logsumexp_is_stable_and_twice_differentiable(data, shape, keepdim):
    x = data.draw(arrays(shape)) * 300  # exp would overflow without the shift
    out = ta.tensor(x).logsumexp(-1, keepdim=keepdim).numpy()
    top = x.max(-1, keepdims=True)
    np.testing.assert_allclose(out, (np.log(np.exp(x - top).sum(-1, keepdims=True)) + top).reshape(out.shape))
    assert ta.gradgradcheck(lambda t: t.logsumexp(-1, keepdim), [ta.tensor(x / 300, requires_grad=True)])


SHAPE_OPS = {
    "flip": lambda t: t.flip(0) * t,
    "roll": lambda t: t.roll(1, 0) * t,
    "repeat": lambda t: t.repeat(2, 1, 1).sum(0) * t,
    "repeat_interleave": lambda t: t.repeat_interleave(2, 0)[::2] * t,
    "unbind": lambda t: ta.stack(t.unbind(0)) ** 2,
    "gather": lambda t: t.gather(0, ta.tensor(np.zeros(t.shape, np.int64))) * t,
    "masked_select": lambda t: t.masked_select(t > 0) ** 3,
    "tril_triu": lambda t: t.reshape(t.shape[0], -1).tril() * 2 + t.reshape(t.shape[0], -1).triu(1) ** 2,
    "lerp": lambda t: t.lerp(t * t, 0.3),
    "rpow": lambda t: 2.0 ** t,
    "tensor_pow": lambda t: (t * t + 0.5) ** (t * 0.5),
    "outer": lambda t: t.reshape(-1).outer(t.reshape(-1) * 2),
}


@pytest.mark.parametrize("name", sorted(SHAPE_OPS))
@few
@given(data=st.data(), shape=shapes(min_dims=1, min_side=1))
def test_shape_ops_are_twice_differentiable(name, data, shape):
    assert ta.gradgradcheck(SHAPE_OPS[name], [ta.tensor(data.draw(arrays(shape)), requires_grad=True)])


ACTIVATIONS = ["silu", "softplus", "elu", "celu", "selu", "leaky_relu", "hardtanh", "relu6", "hardsigmoid",
               "hardswish", "mish", "logsigmoid", "softsign", "tanhshrink"]


@pytest.mark.parametrize("name", ACTIVATIONS)
@few
@given(data=st.data(), shape=shapes())
def test_activations_are_twice_differentiable(name, data, shape):
    x = data.draw(arrays(shape, -4, 4))
    x = np.where(np.abs(x) < 0.05, 0.3, x)  # away from kinks at 0
    x = np.where(np.abs(np.abs(x) - 3) < 0.05, 2.5, x)  # and at +-3 (hardsigmoid, hardswish)
    x = np.where(np.abs(x - 1) < 0.05, 0.7, x)
    assert ta.gradgradcheck(getattr(F, name), [ta.tensor(x, requires_grad=True)])


@pytest.mark.torch_parity
@pytest.mark.parametrize("name", sorted(UNARY) + ["floor", "ceil", "trunc", "round", "sign", "isnan", "isinf",
                                                  "isfinite", "logsumexp", "flip", "roll", "repeat",
                                                  "repeat_interleave", "gather", "masked_select", "tril", "triu",
                                                  "rpow", "tensor_pow", "outer", "unbind", "unflatten", "erf",
                                                  "lerp", "where", "isclose", "div_floor"]
                         + ACTIVATIONS)
def test_against_pytorch(name):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    low, high = UNARY.get(name, (None, (-0.9, 0.9)))[1]
    x = rng.uniform(low, high, (3, 4))
    x[0, 0] = 0.3 if name in ACTIVATIONS else x[0, 0]
    calls = {
        "logsumexp": lambda m, t: t.logsumexp(1), "flip": lambda m, t: t.flip(1), "roll": lambda m, t: t.roll(2, 1),
        "repeat": lambda m, t: t.repeat(2, 1), "repeat_interleave": lambda m, t: t.repeat_interleave(2, dim=1),
        "gather": lambda m, t: t.gather(1, m.tensor([[0, 0], [3, 1], [2, 2]])),
        "masked_select": lambda m, t: t.masked_select(t > 0), "tril": lambda m, t: t.tril(-1),
        "triu": lambda m, t: t.triu(1), "rpow": lambda m, t: 3.0 ** t, "tensor_pow": lambda m, t: (t * t) ** t,
        "outer": lambda m, t: t[0].outer(t[1]), "unbind": lambda m, t: m.stack(t.unbind(1)),
        "unflatten": lambda m, t: t.unflatten(1, (2, 2)),
        "lerp": lambda m, t: t.lerp(t * t, 0.3), "where": lambda m, t: t.where(t > 0, t * 3),
        "isclose": lambda m, t: t.isclose(t + 1e-9), "div_floor": lambda m, t: (t * 7).div(2, rounding_mode="floor"),
    }
    if name in ACTIVATIONS:
        call = lambda m, t: getattr(F if m is ta else torch.nn.functional, name)(t * 4)  # noqa: E731
    else:
        call = calls.get(name, lambda m, t: getattr(t, name)())
    ours_in, theirs_in = ta.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ours, theirs = call(ta, ours_in), call(torch, theirs_in)
    assert ours.shape == tuple(theirs.shape) and str(ours.dtype) == str(theirs.dtype).split(".")[-1]
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12, atol=1e-14)
    if ours.dtype.kind == "f":
        w = rng.normal(size=ours.shape)
        (ours * ta.tensor(w)).sum().backward()
        (theirs * torch.tensor(w)).sum().backward()
        # PyTorch's hardsigmoid backward multiplies by 1/6 rounded to float32, even in float64
        rtol = 1e-7 if name in ("hardsigmoid", "hardswish") else 1e-10
        np.testing.assert_allclose(ours_in.grad.numpy(), theirs_in.grad.numpy(), rtol=rtol, atol=1e-12)


@pytest.mark.torch_parity
def test_activation_modules_against_pytorch():
    torch = pytest.importorskip("torch")
    x = np.linspace(-5, 5, 21)
    pairs = [("SiLU", ()), ("Tanh", ()), ("Sigmoid", ()), ("Softplus", (2.0,)), ("ELU", (0.5,)), ("CELU", (2.0,)),
             ("SELU", ()), ("LeakyReLU", (0.2,)), ("Hardtanh", (-2.0, 3.0)), ("ReLU6", ()), ("Hardsigmoid", ()),
             ("Hardswish", ()), ("Mish", ()), ("LogSigmoid", ()), ("Softsign", ()), ("Tanhshrink", ()),
             ("Identity", ()), ("Softmax", (0,)), ("LogSoftmax", (0,))]
    for name, args in pairs:
        ours = getattr(ta.nn, name)(*args)(ta.tensor(x)).numpy()
        theirs = getattr(torch.nn, name)(*args)(torch.tensor(x)).numpy()
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-14, err_msg=name)


@pytest.mark.parametrize("p", [2, 3, 2.0, 3.0, 0.5, -1, -1.0, -2.0, -0.5, 1.5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_powers_computed_as_products_and_roots_match_numpys_pow(p, dtype):
    x = np.random.default_rng(0).uniform(0.1, 3.0, 1000).astype(dtype)
    ours = (ta.tensor(x) ** p).numpy()
    assert ours.dtype == dtype
    np.testing.assert_allclose(ours, x.astype(np.float64) ** p, rtol=4 * np.finfo(dtype).eps)
    assert ta.gradgradcheck(lambda t: t**p, [ta.tensor(x[:5].astype(np.float64), requires_grad=True)])
