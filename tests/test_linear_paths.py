"""F.linear and addmm: a layer's operands run nn.Linear's one fused node (LinearFunction), any others the
composite of a product and a sum. Both paths checked against finite differences (twice) and PyTorch."""

import numpy as np
import pytest
from conftest import arrays, shapes
from hypothesis import given
from hypothesis import strategies as st

import tinygrad_attn as ta
from tinygrad_attn.nn import functional as F


def leaf(a):
    return ta.Tensor(a, requires_grad=True)


def val(t):
    return t.detach().numpy()


def node_name(t):
    return t.grad_fn.function.__name__


@given(data=st.data(), lead=shapes(0, 2), n_in=st.integers(0, 3), n_out=st.integers(0, 3), bias=st.booleans())
def test_linear_of_a_layers_operands_is_one_node_and_twice_differentiable(data, lead, n_in, n_out, bias):
    x = leaf(data.draw(arrays(lead + (n_in,))))  # 1-D when lead is (), sometimes a transposed view
    w = leaf(data.draw(arrays((n_out, n_in))))
    b = leaf(data.draw(arrays((n_out,)))) if bias else None
    inputs = [x, w] + ([b] if bias else [])
    assert node_name(F.linear(x, w, b)) == "LinearFunction"
    np.testing.assert_allclose(val(F.linear(x, w, b)), val(x) @ val(w).T + (val(b) if bias else 0), atol=1e-12)
    assert ta.gradcheck(lambda *t: F.linear(*t), inputs)
    assert ta.gradgradcheck(lambda *t: F.linear(*t), inputs, max_elements=24)


@given(data=st.data(), n=st.integers(0, 3), k=st.integers(0, 3), m=st.integers(0, 3))
def test_addmm_of_a_layers_operands_is_one_node_and_twice_differentiable(data, n, k, m):
    bias, a, w = leaf(data.draw(arrays((m,)))), leaf(data.draw(arrays((n, k)))), leaf(data.draw(arrays((k, m))))
    assert node_name(ta.addmm(bias, a, w)) == "LinearFunction"
    np.testing.assert_allclose(val(ta.addmm(bias, a, w)), val(a) @ val(w) + val(bias), atol=1e-12)
    assert ta.gradcheck(lambda *t: ta.addmm(*t), [bias, a, w])
    assert ta.gradgradcheck(lambda *t: ta.addmm(*t), [bias, a, w], max_elements=24)


def test_other_operands_take_the_composite():
    x, w1 = leaf(np.ones((2, 3))), leaf(np.ones(3))
    assert node_name(F.linear(x, w1)) != "LinearFunction"  # a 1-D weight: a dot product per row
    w, scalar_bias = leaf(np.ones((4, 3))), leaf(np.ones(1))
    assert node_name(F.linear(x, w, scalar_bias)) != "LinearFunction"  # a broadcast bias
    assert node_name(ta.addmm(leaf(np.ones((2, 4))), x, w.t())) != "LinearFunction"  # a full input matrix
    assert node_name(ta.addmm(leaf(np.ones(4)), x, w.t(), beta=0.5)) != "LinearFunction"
    with pytest.raises((ValueError, RuntimeError)):  # mismatched sizes: the composite's clear error
        F.linear(x, leaf(np.ones((4, 2))))


CASES = {  # name: (x shape, weight shape, bias shape or None)
    "rows": ((5, 3), (4, 3), (4,)),
    "batched": ((2, 5, 3), (4, 3), (4,)),
    "vector": ((3,), (4, 3), (4,)),
    "no_bias": ((2, 5, 3), (4, 3), None),
    "empty_rows": ((0, 3), (4, 3), (4,)),
    "broadcast_bias": ((5, 3), (4, 3), (1,)),
    "vector_weight": ((5, 3), (3,), None),
}


@pytest.mark.torch_parity
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_linear_and_addmm_match_pytorch(case, dtype):
    torch = pytest.importorskip("torch")
    x_shape, w_shape, b_shape = CASES[case]
    rng = np.random.default_rng(0)
    arrays_ = [rng.normal(size=s).astype(dtype) for s in (x_shape, w_shape) + ((b_shape,) if b_shape else ())]
    ours = [leaf(a) for a in arrays_]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays_]
    y, y_t = F.linear(*ours), torch.nn.functional.linear(*theirs)
    assert y.shape == tuple(y_t.shape) and str(y.dtype) == str(y_t.dtype).removeprefix("torch.")
    np.testing.assert_allclose(val(y), y_t.detach().numpy(), rtol=1e-5, atol=1e-5)
    g = rng.normal(size=y.shape).astype(dtype)
    y.backward(g)
    y_t.backward(torch.tensor(g))
    for a, a_t in zip(ours, theirs):
        np.testing.assert_allclose(val(a.grad), a_t.grad.numpy(), rtol=1e-5, atol=1e-5)
    if len(x_shape) == 2 and len(w_shape) == 2 and b_shape is not None:  # addmm(b, x, W^T) is the same layer
        ours_m = [leaf(a) for a in arrays_]
        theirs_m = [torch.tensor(a, requires_grad=True) for a in arrays_]
        out = ta.addmm(ours_m[2], ours_m[0], ours_m[1].t())
        out_t = torch.addmm(theirs_m[2], theirs_m[0], theirs_m[1].t())
        np.testing.assert_allclose(val(out), out_t.detach().numpy(), rtol=1e-5, atol=1e-5)
        out.sum().backward()
        out_t.sum().backward()
        for a, a_t in zip(ours_m, theirs_m):
            np.testing.assert_allclose(val(a.grad), a_t.grad.numpy(), rtol=1e-5, atol=1e-5)
