"""Every primitive and composite Tensor op: forward against numpy, backward against finite differences."""

import warnings

import numpy as np
import pytest
from conftest import arrays, shapes
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import tinygrad_attn as ta

UNARY = {
    "exp": (lambda t: t.exp(), np.exp, (-2, 2)),
    "log": (lambda t: t.log(), np.log, (0.5, 3)),
    "sqrt": (lambda t: t.sqrt(), np.sqrt, (0.5, 3)),
    "tanh": (lambda t: t.tanh(), np.tanh, (-2, 2)),
    "sigmoid": (lambda t: t.sigmoid(), lambda a: 1 / (1 + np.exp(-a)), (-3, 3)),
    "relu": (lambda t: t.relu(), lambda a: np.maximum(a, 0), (0.1, 2)),
    "neg": (lambda t: -t, np.negative, (-2, 2)),
    "pow3": (lambda t: t**3, lambda a: a**3, (-2, 2)),
    "pow_half": (lambda t: t**0.5, np.sqrt, (0.5, 3)),
    "rsub": (lambda t: 2.0 - t, lambda a: 2.0 - a, (-2, 2)),
    "rdiv": (lambda t: 1.0 / t, lambda a: 1.0 / a, (0.5, 3)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@given(data=st.data(), shape=shapes(), transposed=st.booleans())
def test_unary(name, data, shape, transposed):
    """Forward against numpy and gradcheck, on contiguous arrays and on transposed views of them."""
    op, reference, (low, high) = UNARY[name]
    x = data.draw(arrays(shape, low, high))
    if name == "relu":
        x = x * data.draw(st.sampled_from([1.0, -1.0]))  # away from the kink at 0
    if transposed:
        x = x.T  # a view: strides reversed, not contiguous when two dims exceed 1
    np.testing.assert_allclose(op(ta.Tensor(x)).numpy(), reference(x), rtol=1e-6)
    assert ta.gradcheck(op, [ta.Tensor(x, requires_grad=True)])


@given(data=st.data(), shape=shapes())
def test_cast_is_differentiable_and_grad_keeps_input_dtype(data, shape):
    x = ta.Tensor(data.draw(arrays(shape)), requires_grad=True)
    y = x.float()
    assert y.dtype == np.float32
    (y * 3.0).sum().backward()
    assert x.grad.dtype == np.float64
    np.testing.assert_allclose(x.grad.numpy(), 3.0)
    # eps large enough that float32 rounding (~1e-7) is negligible against it
    assert ta.gradcheck(lambda t: t.float().double() * 2.0, [x], eps=1e-2, atol=1e-4)


BINARY = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "div": (lambda a, b: a / b, np.divide),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@given(data=st.data(), pair=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3))
def test_binary_broadcasting(name, data, pair):
    op, reference = BINARY[name]
    a = data.draw(arrays(pair.input_shapes[0]))
    b = data.draw(arrays(pair.input_shapes[1], 0.5, 2.0))  # away from 0 for div
    out = op(ta.Tensor(a), ta.Tensor(b))
    assert out.shape == pair.result_shape
    np.testing.assert_allclose(out.numpy(), reference(a, b))
    assert ta.gradcheck(op, [ta.Tensor(a, requires_grad=True), ta.Tensor(b, requires_grad=True)])


@given(data=st.data(), n=st.integers(1, 3), k=st.integers(1, 3), m=st.integers(1, 3),
       batch=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2, max_side=2),
       kind=st.sampled_from(["nd", "vec_left", "vec_right", "vec_both"]))
def test_matmul(data, n, k, m, batch, kind):
    shape_a = (k,) if kind in ("vec_left", "vec_both") else batch.input_shapes[0] + (n, k)
    shape_b = (k,) if kind in ("vec_right", "vec_both") else batch.input_shapes[1] + (k, m)
    a, b = data.draw(arrays(shape_a)), data.draw(arrays(shape_b))
    np.testing.assert_allclose((ta.Tensor(a) @ ta.Tensor(b)).numpy(), a @ b)
    assert ta.gradcheck(lambda x, y: x @ y, [ta.Tensor(a, requires_grad=True), ta.Tensor(b, requires_grad=True)])


REDUCTIONS = {"sum": np.sum, "mean": np.mean, "amax": np.max, "amin": np.min}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@given(data=st.data(), shape=shapes(1, 3), keepdim=st.booleans())
def test_reductions(name, data, shape, keepdim):
    x = data.draw(arrays(shape))
    dims = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1),
                               st.sets(st.integers(0, len(shape) - 1), min_size=1).map(tuple)))
    op = lambda t: getattr(t, name)(dims, keepdim)  # noqa: E731
    reduced = range(len(shape)) if dims is None else [dims] if isinstance(dims, int) else dims
    if name in ("amax", "amin") and any(shape[d] == 0 for d in reduced):  # no max of nothing, as in numpy and PyTorch
        with pytest.raises(ValueError, match="is empty along dim"):
            op(ta.Tensor(x))
        return
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):  # numpy warns at a mean of nothing: NaN, as ours
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = REDUCTIONS[name](x, axis=dims, keepdims=keepdim)
    np.testing.assert_allclose(op(ta.Tensor(x)).numpy(), expected)
    assert ta.gradcheck(op, [ta.Tensor(x, requires_grad=True)])


def test_amax_splits_gradient_evenly_among_ties_and_max_dim_picks_one():
    x = ta.Tensor(np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]]), requires_grad=True)
    x.amax(dim=1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0.5, 0.5], [0.5, 0, 0.5]])
    x.grad = None
    values, indices = x.max(dim=1)  # PyTorch's (values, indices): the gradient goes to the index returned
    values.sum().backward()
    np.testing.assert_array_equal(indices.numpy(), [1, 0])
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1, 0], [1, 0, 0]])


@given(data=st.data(), shape=shapes(1, 4))
def test_shape_ops(data, shape):
    x = data.draw(arrays(shape))
    perm = data.draw(st.permutations(range(len(shape))))
    d0, d1 = data.draw(st.integers(0, len(shape) - 1)), data.draw(st.integers(-len(shape), len(shape) - 1))
    new_dim = data.draw(st.integers(-len(shape) - 1, len(shape)))
    cases = [
        (lambda t: t.reshape(-1), x.reshape(-1)),
        (lambda t: t.contiguous().view(*shape[::-1]), x.reshape(shape[::-1])),
        (lambda t: t.flatten(), x.reshape(-1)),
        (lambda t: t.clone(), x),
        (lambda t: t.expand(2, *shape), np.broadcast_to(x, (2, *shape))),
        (lambda t: t.permute(*perm), x.transpose(perm)),
        (lambda t: t.transpose(d0, d1), np.swapaxes(x, d0, d1)),
        (lambda t: t.unsqueeze(new_dim), np.expand_dims(x, new_dim)),
        (lambda t: t.squeeze(), np.squeeze(x)),
        (lambda t: t.squeeze(0), np.squeeze(x, 0) if shape[0] == 1 else x),
    ]
    for op, expected in cases:
        np.testing.assert_array_equal(op(ta.Tensor(x)).numpy(), expected)
        assert ta.gradcheck(op, [ta.Tensor(x, requires_grad=True)])


def test_T_is_2d_transpose():
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(ta.Tensor(x).T.numpy(), x.T)
    with pytest.raises(ValueError, match=r"\.T"):
        _ = ta.Tensor(np.zeros((2, 2, 2))).T


INDEXES = [
    (1,), (slice(None, None, 2),), (slice(None, None, -1), 0), (None, Ellipsis, 1),
    (np.array([0, 2, 0, 0]),), (slice(None), np.array([[1, 1], [0, 2]])), (np.array([True, False, True]),),
]


@pytest.mark.parametrize("index", INDEXES, ids=str)
@given(data=st.data())
def test_getitem(index, data):
    x = data.draw(arrays((3, 3)))
    np.testing.assert_array_equal(ta.Tensor(x)[index].numpy(), x[index])
    assert ta.gradcheck(lambda t: t[index], [ta.Tensor(x, requires_grad=True)])


def test_getitem_accumulates_repeated_indices():
    x = ta.Tensor(np.zeros(3), requires_grad=True)
    x[np.array([0, 0, 2, 0])].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 0.0, 1.0])


@given(data=st.data(), shape=shapes(1, 3), n=st.integers(1, 3))
def test_cat_and_stack(data, shape, n):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    parts = [data.draw(arrays(shape)) for _ in range(n)]
    tensors = [ta.Tensor(p, requires_grad=True) for p in parts]
    np.testing.assert_array_equal(ta.cat(tensors, dim).detach().numpy(), np.concatenate(parts, dim))
    np.testing.assert_array_equal(ta.stack(tensors, dim).detach().numpy(), np.stack(parts, dim))
    assert ta.gradcheck(lambda *ts: ta.cat(list(ts), dim), tensors)
    assert ta.gradcheck(lambda *ts: ta.stack(list(ts), dim), tensors)


@given(data=st.data(), shapes3=mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, max_side=3))
def test_where_and_masked_fill(data, shapes3):
    s_cond, s_a, s_b = shapes3.input_shapes
    cond = data.draw(arrays(s_cond)) > 0
    a, b = data.draw(arrays(s_a)), data.draw(arrays(s_b))
    np.testing.assert_array_equal(ta.where(cond, ta.Tensor(a), ta.Tensor(b)).numpy(), np.where(cond, a, b))
    assert ta.gradcheck(lambda x, y: ta.where(cond, x, y),
                        [ta.Tensor(a, requires_grad=True), ta.Tensor(b, requires_grad=True)])
    full = np.broadcast_shapes(s_cond, s_a)
    big = data.draw(arrays(full))
    mask = np.broadcast_to(cond, full)
    np.testing.assert_array_equal(ta.Tensor(big).masked_fill(mask, -7.0).numpy(), np.where(mask, -7.0, big))
    assert ta.gradcheck(lambda t: t.masked_fill(mask, -7.0), [ta.Tensor(big, requires_grad=True)])


def test_comparisons_are_bool_without_history():
    x = ta.Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    for result, expected in [(x < 2, [1, 0, 0]), (x <= 2, [1, 1, 0]), (x > 2, [0, 0, 1]),
                             (x >= 2, [0, 1, 1]), (x == 2, [0, 1, 0]), (x != 2, [1, 0, 1])]:
        assert result.dtype == np.bool_ and not result.requires_grad
        np.testing.assert_array_equal(result.numpy(), np.array(expected, dtype=bool))
