"""tinygrad_attn.functional: forward against plain numpy, backward against finite differences."""

import math

import numpy as np
import pytest
from conftest import arrays, shapes
from hypothesis import given
from hypothesis import strategies as st

import tinygrad_attn as ta
from tinygrad_attn import functional as F
from tinygrad_attn.kernels.flash import attention_reference
from tinygrad_attn.kernels.softmax import softmax_reference


def T(a, grad=True):
    return ta.Tensor(a, requires_grad=grad)


@pytest.mark.parametrize("log", [False, True])
@given(data=st.data(), shape=shapes(1, 3, 4))
def test_softmax_any_dim_with_mask(log, data, shape):
    x = data.draw(arrays(shape))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    mask = data.draw(arrays(shape)) > -1.0 if data.draw(st.booleans()) else None
    fn = F.log_softmax if log else F.softmax
    keep = None if mask is None else np.moveaxis(mask, dim, -1)
    expected = np.moveaxis(softmax_reference(np.moveaxis(x, dim, -1), keep, log), -1, dim)
    out = fn(T(x, False), dim, mask=mask)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-10, atol=1e-12)
    assert not np.isnan(out.numpy()).any()
    assert ta.gradcheck(lambda t: fn(t, dim, mask=mask), [T(x)])


def test_softmax_fully_masked_row_is_zero_with_zero_gradient():
    x = T(np.random.default_rng(0).normal(size=(2, 4)))
    mask = np.array([[True, False, True, False], [False] * 4])
    p = F.softmax(x, -1, mask=mask)
    np.testing.assert_allclose(p.detach().numpy().sum(-1), [1.0, 0.0])
    assert p.detach().numpy()[0, 1] == 0 and p.detach().numpy()[0, 3] == 0
    (p * ta.Tensor(np.arange(8.0).reshape(2, 4))).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[1], 0)
    np.testing.assert_array_equal(x.grad.numpy()[0, [1, 3]], 0)
    lp = F.log_softmax(ta.Tensor(x.detach().numpy()), -1, mask=mask)
    assert np.isneginf(lp.numpy()[0, 1]) and np.all(lp.numpy()[1] == 0)


@given(data=st.data(), lead=shapes(0, 2), n=st.integers(1, 5), affine=st.booleans())
def test_layer_norm(data, lead, n, affine):
    x = data.draw(arrays(lead + (n,)))
    w, b = data.draw(arrays((n,))), data.draw(arrays((n,)))
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    expected = (x - mean) / np.sqrt(var + 1e-5)
    if affine:
        expected = expected * w + b
        out = F.layer_norm(T(x), n, T(w), T(b))
        assert ta.gradcheck(lambda x_, w_, b_: F.layer_norm(x_, n, w_, b_), [T(x), T(w), T(b)])
    else:
        out = F.layer_norm(T(x), (n,))
        assert ta.gradcheck(lambda x_: F.layer_norm(x_, (n,)), [T(x)])
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-10, atol=1e-12)


@given(data=st.data(), lead=shapes(0, 2), n=st.integers(1, 5), affine=st.booleans())
def test_rms_norm(data, lead, n, affine):
    x, w = data.draw(arrays(lead + (n,))), data.draw(arrays((n,)))
    expected = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-3) * (w if affine else 1.0)
    if affine:
        out = F.rms_norm(T(x), n, T(w), eps=1e-3)
        assert ta.gradcheck(lambda x_, w_: F.rms_norm(x_, n, w_, 1e-3), [T(x), T(w)])
    else:
        out = ta.nn.RMSNorm(n, eps=1e-3, elementwise_affine=False)(T(x))
        assert ta.gradcheck(lambda x_: F.rms_norm(x_, (n,), eps=1e-3), [T(x)])
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match=r"rms_norm: weight has shape"):
        F.rms_norm(T(x), n, T(np.ones(n + 1)))


def test_layer_norm_over_two_trailing_dims_and_bad_shape():
    x = np.random.default_rng(1).normal(size=(2, 3, 4))
    out = F.layer_norm(T(x, False), (3, 4))
    flat = x.reshape(2, 12)
    np.testing.assert_allclose(out.numpy().reshape(2, 12), (flat - flat.mean(1, keepdims=True))
                               / np.sqrt(flat.var(1, keepdims=True) + 1e-5))
    with pytest.raises(ValueError, match=r"normalized_shape \(5,\).*\(2, 3, 4\)"):
        F.layer_norm(T(x), 5)


@given(data=st.data(), shape=shapes())
def test_gelu_and_relu(data, shape):
    x = data.draw(arrays(shape, -3, 3))
    erf = np.vectorize(math.erf, otypes=[float])
    np.testing.assert_allclose(F.gelu(T(x)).detach().numpy(), x * 0.5 * (1 + erf(x / math.sqrt(2))), rtol=1e-12)
    assert ta.gradcheck(F.gelu, [T(x)])
    np.testing.assert_array_equal(F.relu(T(x)).detach().numpy(), np.maximum(x, 0))


def test_dropout_scales_kept_entries_and_is_identity_in_eval():
    x = T(np.ones((200, 50)))
    ta.manual_seed(3)
    y = F.dropout(x, 0.25)
    kept = y.detach().numpy() != 0
    assert 0.7 < kept.mean() < 0.8
    np.testing.assert_allclose(y.detach().numpy()[kept], 1 / 0.75)
    assert F.dropout(x, 0.25, training=False) is x
    ta.manual_seed(3)
    np.testing.assert_array_equal(F.dropout(x, 0.25).detach().numpy(), y.detach().numpy())

    def reseeded(t):
        ta.manual_seed(5)
        return F.dropout(t, 0.5)

    assert ta.gradcheck(reseeded, [T(np.random.default_rng(0).normal(size=(3, 4)))])
    with pytest.raises(ValueError, match="p must be in"):
        F.dropout(x, 1.5)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@given(data=st.data(), lead=shapes(1, 2, 3), classes=st.integers(1, 5))
def test_cross_entropy(reduction, data, lead, classes):
    logits = data.draw(arrays(lead + (classes,)))
    target = np.array(data.draw(st.lists(st.integers(0, classes - 1), min_size=int(np.prod(lead)),
                                         max_size=int(np.prod(lead)))), np.int64).reshape(lead)
    ignore = data.draw(arrays(lead)) > 1.0
    target = np.where(ignore, -100, target)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    per = np.where(ignore, 0, -np.take_along_axis(log_p, np.where(ignore, 0, target)[..., None], -1)[..., 0])
    counted = int((~ignore).sum())
    expected = {"none": per, "sum": per.sum(), "mean": per.sum() / counted if counted else np.nan}[reduction]
    scores = np.moveaxis(logits, -1, 1)  # PyTorch's layout: (N, C) or (N, C, d1)
    out = F.cross_entropy(T(scores), target, reduction=reduction)
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-10,
                               atol=1e-12)  # NaN when every target is ignored
    if counted or reduction != "mean":
        assert ta.gradcheck(lambda x: F.cross_entropy(x, target, reduction=reduction), [T(scores)])


def test_cross_entropy_errors_name_the_problem():
    x = T(np.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"targets of shape \(3,\), got \(2,\)"):
        F.cross_entropy(x, np.array([0, 1]))
    with pytest.raises(IndexError, match=r"\[4, 7\].*\[0, 4\)"):
        F.cross_entropy(x, np.array([0, 4, 7]))
    with pytest.raises(TypeError, match="integer"):
        F.cross_entropy(x, np.array([0.0, 1.0, 2.0]))
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(x, np.array([0, 1, 2]), reduction="avg")


def _mask(data, lead, tq, tk, kind):
    if kind == "none":
        return None
    shape = data.draw(st.sampled_from([(tq, tk), (1, tk), lead[:1] + (1,) * (len(lead) - 1) + (1, tk),
                                       lead + (tq, tk)]))
    keep = data.draw(arrays(shape)) > -1.0
    return keep if kind == "bool" else np.where(keep, data.draw(arrays(shape)), -np.inf)


@pytest.mark.parametrize("path", ["flash", "math", "weights"])
@given(data=st.data(), lead=shapes(1, 3), tq=st.integers(0, 5), tk=st.integers(0, 5),
       d=st.integers(1, 3), causal=st.booleans(), kind=st.sampled_from(["none", "bool", "float"]))
def test_scaled_dot_product_attention(path, data, lead, tq, tk, d, causal, kind):
    """Forward against dense numpy and a float64 gradcheck, on each kernel (weights: the math path's weights)."""
    q, k, v = data.draw(arrays(lead + (tq, d))), data.draw(arrays(lead + (tk, d))), data.draw(arrays(lead + (tk, 2)))
    mask = _mask(data, lead, tq, tk, kind)
    bias = None if mask is None else np.where(mask, 0.0, -np.inf) if mask.dtype == bool else mask
    expected = attention_reference(q, k, v, 1 / math.sqrt(d), causal, bias)

    def attend(q_, k_, v_):
        out = F.scaled_dot_product_attention(q_, k_, v_, mask=mask, is_causal=causal,
                                             return_weights=path == "weights")
        return out[0] if path == "weights" else out

    with ta.sdpa_kernel("math" if path == "weights" else path):
        out = attend(T(q, False), T(k, False), T(v, False))
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-10, atol=1e-12)
        assert not np.isnan(out.numpy()).any()
        assert ta.gradcheck(attend, [T(q), T(k), T(v)])


def test_attention_weights_rows_sum_to_one_and_causal_never_looks_ahead():
    rng = np.random.default_rng(0)
    q, k, v = (T(rng.normal(size=(2, 3, 6, 4))) for _ in range(3))
    out, w = F.scaled_dot_product_attention(q, k, v, is_causal=True, return_weights=True)
    np.testing.assert_allclose(w.detach().numpy().sum(-1), 1.0)
    assert np.all(np.triu(w.detach().numpy(), 1) == 0)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True).detach().numpy()
    np.testing.assert_allclose(out.detach().numpy(), expected)


def test_fully_masked_attention_row_gives_zeros_and_zero_gradient_on_both_paths(sdpa_path):
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(1, 2, 3, 4)) for _ in range(3))
    mask = np.ones((3, 3), dtype=bool)
    mask[1] = False
    for weights in (False, True) if sdpa_path == "math" else (False,):
        qt, kt, vt = T(q), T(k), T(v)
        out = F.scaled_dot_product_attention(qt, kt, vt, mask=mask, return_weights=weights)
        out = out[0] if weights else out
        out.sum().backward()
        np.testing.assert_array_equal(out.detach().numpy()[..., 1, :], 0)
        np.testing.assert_array_equal(qt.grad.numpy()[..., 1, :], 0)
        assert all(np.isfinite(t.grad.numpy()).all() for t in (qt, kt, vt))


def test_sdpa_mask_errors():
    q = T(np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match=r"mask: shape \(5, 5\).*\(2, 3, 3\)"):
        F.scaled_dot_product_attention(q, q, q, mask=np.ones((5, 5), dtype=bool))
    with pytest.raises(TypeError, match="mask"):
        F.scaled_dot_product_attention(q, q, q, mask=np.ones((3, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="same last dim"):
        F.scaled_dot_product_attention(q, T(np.zeros((2, 3, 5))), q)


def test_mask_helpers():
    np.testing.assert_array_equal(ta.causal_mask(3).numpy(), np.tril(np.ones((3, 3), dtype=bool)))
    np.testing.assert_array_equal(ta.causal_mask(2, 4).numpy(), [[1, 0, 0, 0], [1, 1, 0, 0]])
    pm = ta.padding_mask([2, 3], 4)
    assert pm.shape == (2, 1, 1, 4)
    np.testing.assert_array_equal(pm.numpy()[:, 0, 0], [[1, 1, 0, 0], [1, 1, 1, 0]])
    with pytest.raises(ValueError, match="lengths"):
        ta.padding_mask([5], 4)
