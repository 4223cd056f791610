"""Gradients of gradients: every differentiable op, fused op and attention path gradgradchecked in float64 over
hypothesis shapes (broadcast, size-1, 0-d, empty, non-contiguous), and the autograd API around them."""

import math

import numpy as np
import pytest
from conftest import arrays, shapes
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import tinygrad_attn as ta
import tinygrad_attn.nn.functional as F
from tinygrad_attn import autograd
from tinygrad_attn.autograd import functional as AF

few = settings(max_examples=6, deadline=None)


def leaf(a):
    return ta.Tensor(np.asarray(a, dtype=np.float64), requires_grad=True)


UNARY = {
    "exp": (lambda t: t.exp(), (-2, 2)),
    "log": (lambda t: t.log(), (0.5, 3)),
    "sqrt": (lambda t: t.sqrt(), (0.5, 3)),
    "tanh": (lambda t: t.tanh(), (-2, 2)),
    "sigmoid": (lambda t: t.sigmoid(), (-3, 3)),
    "relu": (lambda t: t.relu() * t, (0.1, 2)),
    "sin": (lambda t: t.sin(), (-3, 3)),
    "cos": (lambda t: t.cos(), (-3, 3)),
    "abs": (lambda t: t.abs() * t, (0.1, 2)),
    "pow3": (lambda t: t**3, (-2, 2)),
    "pow_half": (lambda t: t**0.5, (0.5, 3)),
    "reciprocal": (lambda t: 1.0 / t, (0.5, 3)),
    "gelu": (lambda t: F.gelu(t), (-3, 3)),
    "gelu_tanh": (lambda t: F.gelu(t, approximate="tanh"), (-3, 3)),
    "clamp": (lambda t: t.clamp(-1.0, 1.0) * t, (-2, 2)),
    "square_sum": (lambda t: (t * t).sum(), (-2, 2)),
    "mean_keepdim": (lambda t: (t * t).mean(-1, keepdim=True) if t.ndim and t.shape[-1] else t * t, (-2, 2)),
    "cumsum": (lambda t: (t.cumsum(-1) ** 2) if t.ndim else t * t, (-2, 2)),
    "amax": (lambda t: t.amax(-1) * t.sum() if t.ndim and t.shape[-1] else t * t, (-2, 2)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@few
@given(data=st.data(), shape=shapes())
def test_unary_ops_are_twice_differentiable(name, data, shape):
    op, (low, high) = UNARY[name]
    x = data.draw(arrays(shape, low, high))
    if name in ("relu", "abs"):
        x = x * data.draw(st.sampled_from([1.0, -1.0]))  # away from the kink at 0
    assert ta.gradgradcheck(op, [leaf(x)])


BINARY = {
    "add": lambda a, b: (a + b) * a,
    "sub": lambda a, b: (a - b) * b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "where": lambda a, b: ta.where(a > 0, a * b, b * b),
    "maximum": lambda a, b: ta.maximum(a, b) * a,
}


@pytest.mark.parametrize("name", sorted(BINARY))
@few
@given(data=st.data(), pair=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3))
def test_binary_ops_with_broadcasting_are_twice_differentiable(name, data, pair):
    a = data.draw(arrays(pair.input_shapes[0]))
    b = data.draw(arrays(pair.input_shapes[1], 0.5, 2.0))
    assert ta.gradgradcheck(BINARY[name], [leaf(a), leaf(b)])


@few
@given(data=st.data(), n=st.integers(1, 3), k=st.integers(1, 3), m=st.integers(1, 3),
       batch=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2, max_side=2),
       kind=st.sampled_from(["nd", "vec_left", "vec_right", "vec_both", "linear"]))
def test_matmul_is_twice_differentiable(data, n, k, m, batch, kind):
    shape_a = (k,) if kind in ("vec_left", "vec_both") else batch.input_shapes[0] + (n, k)
    shape_b = ((k,) if kind in ("vec_right", "vec_both") else (k, m) if kind == "linear"
               else batch.input_shapes[1] + (k, m))
    a, b = data.draw(arrays(shape_a)), data.draw(arrays(shape_b))
    assert ta.gradgradcheck(lambda x, y: (x @ y) * (x @ y), [leaf(a), leaf(b)])


SHAPE_OPS = {
    "reshape": lambda t: (t.reshape(-1) ** 2).reshape(t.shape),
    "transpose": lambda t: t.transpose(0, -1) ** 2 if t.ndim else t * t,
    "expand": lambda t: t.unsqueeze(0).expand(2, *t.shape) ** 2,
    "clone": lambda t: t.clone() * t,
    "slice": lambda t: t[..., ::-1] * t if t.ndim else t * t,
    "int_index_with_repeats": lambda t: (t.reshape(-1)[ta.tensor([0, 0, -1])] ** 3) if t.numel() else t * t,
    "bool_index": lambda t: t[t > 0] ** 3,
    "cat": lambda t: ta.cat([t * t, t], 0) if t.ndim else t * t,
    "stack": lambda t: ta.stack([t, t * t], -1),
    "masked_fill": lambda t: t.masked_fill(t > 1, 0.0) * t,
    "float32_roundtrip": lambda t: t.float().double() * t,
}


@pytest.mark.parametrize("name", sorted(SHAPE_OPS))
@few
@given(data=st.data(), shape=shapes())
def test_shape_and_index_ops_are_twice_differentiable(name, data, shape):
    x = leaf(data.draw(arrays(shape)))
    eps = 1e-2 if name == "float32_roundtrip" else 1e-6
    assert ta.gradgradcheck(SHAPE_OPS[name], [x], eps=eps, atol=1e-4 if eps > 1e-6 else 1e-5)


@few
@given(data=st.data(), rows=st.integers(1, 3), cols=st.integers(1, 4))
def test_scatter_topk_sort_and_pad_are_twice_differentiable(data, rows, cols):
    x = leaf(data.draw(arrays((rows, cols))))
    index = ta.tensor(np.argsort(data.draw(arrays((rows, cols))), axis=1)[:, :1])
    assert ta.gradgradcheck(lambda t: t.scatter(1, index, t[:, :1] ** 2) * t, [x])
    assert ta.gradgradcheck(lambda t: t.topk(1, dim=1).values ** 3, [x])
    assert ta.gradgradcheck(lambda t: t.sort(dim=1).values ** 2 * t, [x])
    assert ta.gradgradcheck(lambda t: F.pad(t * t, (1, 2)) ** 2, [x])
    assert ta.gradgradcheck(lambda t: t.max(dim=1).values ** 3, [x])


@pytest.mark.parametrize("dim", [-1, 0])
@few
@given(data=st.data(), shape=shapes(min_dims=1, min_side=1), masked=st.booleans())
def test_softmax_and_log_softmax_are_twice_differentiable(dim, data, shape, masked):
    x = leaf(data.draw(arrays(shape)))
    mask = data.draw(arrays(shape)) > -1 if masked else None
    assert ta.gradgradcheck(lambda t: F.softmax(t, dim) if mask is None else ta.functional.softmax(t, dim, mask), [x])
    assert ta.gradgradcheck(lambda t: F.log_softmax(t, dim) * F.softmax(t, dim), [x])


@few
@given(data=st.data(), lead=shapes(max_dims=2, min_side=1), n=st.integers(1, 4))
def test_rms_norm_is_twice_differentiable(data, lead, n):
    x, w = leaf(data.draw(arrays(lead + (n,)))), leaf(data.draw(arrays((n,))))
    assert ta.gradgradcheck(lambda x_, w_: F.rms_norm(x_, (n,), w_, 1e-3) ** 2, [x, w])


@few
@given(data=st.data(), lead=shapes(max_dims=2, min_side=1), n=st.integers(1, 4))
def test_layer_norm_is_twice_differentiable(data, lead, n):
    x, w, b = leaf(data.draw(arrays(lead + (n,)))), leaf(data.draw(arrays((n,)))), leaf(data.draw(arrays((n,))))
    assert ta.gradgradcheck(lambda x_, w_, b_: F.layer_norm(x_, (n,), w_, b_) ** 2, [x, w, b])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@few
@given(data=st.data(), n=st.integers(1, 4), c=st.integers(1, 4), smoothing=st.sampled_from([0.0, 0.2]))
def test_cross_entropy_is_twice_differentiable(reduction, data, n, c, smoothing):
    logits = leaf(data.draw(arrays((n, c))))
    target = ta.tensor(data.draw(st.lists(st.integers(0, c - 1), min_size=n, max_size=n)))
    target[0] = -100  # an ignored row
    if reduction == "mean" and n == 1:
        target[0] = 0
    assert ta.gradgradcheck(lambda t: F.cross_entropy(t, target, reduction=reduction, label_smoothing=smoothing),
                            [logits])


@few
@given(data=st.data(), lead=shapes(max_dims=2, min_side=1), bias=st.booleans())
def test_linear_and_embedding_are_twice_differentiable(data, lead, bias):
    layer = ta.nn.Linear(3, 2, bias=bias).double()
    x = leaf(data.draw(arrays(lead + (3,))))
    assert ta.gradgradcheck(lambda x_, w_: layer(x_) ** 2 + (w_ * w_).sum(), [x, layer.weight])
    table = ta.nn.Embedding(5, 3, padding_idx=1).double()
    idx = ta.tensor(np.array(data.draw(st.lists(st.integers(0, 4), min_size=3, max_size=3))))
    assert ta.gradgradcheck(lambda w_: table(idx) ** 3 * 1.0, [table.weight])


@pytest.mark.parametrize("variant", ["plain", "causal", "bool_mask", "float_mask", "packed"])
@few
@given(data=st.data(), b=st.integers(1, 2), h=st.integers(1, 2), tq=st.integers(1, 3), d=st.integers(1, 3))
def test_attention_is_twice_differentiable_on_both_paths(sdpa_path, variant, data, b, h, tq, d):
    tk = tq if variant in ("causal", "packed") else data.draw(st.integers(1, 3))
    if variant == "packed":
        qkv = leaf(data.draw(arrays((b, tq, 3, h, d))))
        assert ta.gradgradcheck(lambda t: F.packed_self_attention(t, is_causal=True) ** 2, [qkv], atol=1e-4)
        return
    q, k, v = (leaf(data.draw(arrays((b, h, n, d)))) for n in (tq, tk, tk))
    mask = None
    if variant == "bool_mask":
        mask = ta.tensor(data.draw(arrays((tq, tk))) > -1.5)
    elif variant == "float_mask":
        mask = ta.tensor(data.draw(arrays((tq, tk))))
    fn = lambda q_, k_, v_: F.scaled_dot_product_attention(q_, k_, v_, attn_mask=mask,  # noqa: E731
                                                           is_causal=variant == "causal") ** 2
    assert ta.gradgradcheck(fn, [q, k, v], atol=1e-4)


def test_attention_of_a_tensor_with_itself_counts_each_place(sdpa_path):
    """q, k and v are one tensor: the fused op's higher-order backward differentiates per place, not thrice."""
    x = leaf(np.random.default_rng(0).normal(size=(1, 1, 3, 2)))
    assert ta.gradgradcheck(lambda t: F.scaled_dot_product_attention(t, t, t, is_causal=True), [x], atol=1e-4)


def test_multi_head_attention_block_hessian_vector_product_matches_finite_differences(sdpa_path):
    ta.manual_seed(0)
    mha = ta.nn.MultiHeadAttention(4, 2).double()
    x = leaf(np.random.default_rng(1).normal(size=(2, 3, 4)))
    v = ta.tensor(np.random.default_rng(2).normal(size=(2, 3, 4)))

    def loss(t):
        return (mha(t, t, t, mask=ta.causal_mask(3), need_weights=False)[0] ** 2).sum()

    _, hv = AF.hvp(loss, x, v)
    eps = 1e-5
    g = lambda t: autograd.grad(loss(t), t)[0].numpy()  # noqa: E731
    x0 = x.detach().numpy()
    numeric = (g(leaf(x0 + eps * v.numpy())) - g(leaf(x0 - eps * v.numpy()))) / (2 * eps)
    np.testing.assert_allclose(hv.numpy(), numeric, rtol=1e-5, atol=1e-7)


# --- micrograd-style scalar graphs -------------------------------------------------------------------------


def test_scalar_graph_with_in_place_accumulation_matches_the_hand_derivative():
    """Intermediates updated with += (no op saved them), relu, powers and reciprocals, derived by hand."""
    a, b = leaf(-4.0), leaf(2.0)
    c = a + b
    d = a * b + b**3
    c += c + 1  # c = 2(a + b) + 1
    c += 1 + c + (-a)  # c = 2c_prev + 1 - a
    d += d * 2 + (b + a).relu()  # (b + a) < 0: relu gives 0
    d += 3 * d + (b - a).relu()  # b - a = 6 > 0
    e = c - d
    f = e**2
    g = f / 2.0
    g += 10.0 / f
    g.backward()
    av, bv = -4.0, 2.0
    cv = 4 * (av + bv) + 3 - av  # c = 2(2(a + b) + 1) + 1 - a
    dv = 12 * (av * bv + bv**3) + (bv - av)  # d = 4 (3 (a b + b^3) + 0) + (b - a)
    ev = cv - dv
    dg_de = ev - 20.0 / ev**3  # g = e^2/2 + 10/e^2
    dc_da, dc_db = 4 - 1, 4
    dd_da, dd_db = 12 * bv - 1, 12 * (av + 3 * bv**2) + 1
    assert math.isclose(g.item(), ev**2 / 2 + 10 / ev**2, rel_tol=1e-12)
    assert math.isclose(a.grad.item(), dg_de * (dc_da - dd_da), rel_tol=1e-12)
    assert math.isclose(b.grad.item(), dg_de * (dc_db - dd_db), rel_tol=1e-12)


def test_second_derivative_of_a_scalar_chain_matches_the_closed_form():
    x = leaf(0.7)
    y = x.sin() * x.exp() + 1.0 / x
    (dy,) = autograd.grad(y, x, create_graph=True)
    (d2y,) = autograd.grad(dy, x)
    xv = 0.7
    assert math.isclose(dy.item(), math.exp(xv) * (math.sin(xv) + math.cos(xv)) - 1 / xv**2, rel_tol=1e-12)
    assert math.isclose(d2y.item(), 2 * math.exp(xv) * math.cos(xv) + 2 / xv**3, rel_tol=1e-12)


# --- the autograd API ------------------------------------------------------------------------------------


def test_grad_returns_gradients_without_touching_dot_grad_and_names_unused_inputs():
    x, y = leaf([1.0, 2.0]), leaf([3.0])
    (gx,) = autograd.grad((x * x).sum(), x)
    assert gx.tolist() == [2.0, 4.0] and x.grad is None
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        autograd.grad((x * x).sum(), [x, y])
    gx, gy = autograd.grad((x * x).sum(), [x, y], allow_unused=True)
    assert gy is None
    _, gy = autograd.grad((x * x).sum(), [x, y], materialize_grads=True)
    assert gy.tolist() == [0.0]
    with pytest.raises(RuntimeError, match="does not require grad"):
        autograd.grad((x * x).sum(), ta.tensor([1.0]))
    with pytest.raises(RuntimeError, match="only for scalar outputs"):
        autograd.grad(x * x, x)


def test_backward_create_graph_gives_a_differentiable_grad_and_backward_inputs_limits_accumulation():
    x, w = leaf([1.0, -2.0]), leaf([0.5, 3.0])
    (w * x**3).sum().backward(create_graph=True)
    assert x.grad.requires_grad and x.grad.grad_fn is not None
    penalty = (x.grad**2).sum()  # sum (3 w x^2)^2: a gradient penalty
    x.grad, w.grad = None, None
    penalty.backward()
    np.testing.assert_allclose(x.grad.numpy(), 4 * 9 * np.array([0.5, 3.0]) ** 2 * np.array([1.0, -2.0]) ** 3)
    x.grad = w.grad = None
    autograd.backward([(w * x).sum()], inputs=[w])
    assert x.grad is None and w.grad.tolist() == [1.0, -2.0]


def test_a_function_that_is_once_differentiable_refuses_a_second_derivative():
    class Cube(ta.Function):  # the library's own array Function: no differentiable backward, no math
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a**3

        @staticmethod
        def backward(ctx, grad):
            (a,) = ctx.saved_tensors
            return grad * 3 * a**2

    x = leaf([2.0])
    (g,) = autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
    assert g.tolist() == [12.0]
    with pytest.raises(RuntimeError, match="differentiate twice a function that was marked with @once_differentiable"):
        autograd.grad(g.sum(), x)


def test_pytorch_style_function_with_ctx_is_differentiable_twice():
    class Cube(autograd.Function):
        @staticmethod
        def forward(ctx, x, scale):
            ctx.save_for_backward(x)
            ctx.scale = scale
            return x**3 * scale, (x > 0).long()

        @staticmethod
        def backward(ctx, grad, _):
            (x,) = ctx.saved_tensors
            assert ctx.needs_input_grad == (True, False)
            return grad * 3 * x**2 * ctx.scale, None

    x = leaf([1.0, -2.0])
    y, positive = Cube.apply(x, 2.0)
    assert positive.dtype == np.int64 and not positive.requires_grad
    (g,) = autograd.grad(y.sum(), x, create_graph=True)
    (h,) = autograd.grad(g.sum(), x)
    np.testing.assert_allclose(g.detach().numpy(), [6.0, 24.0])
    np.testing.assert_allclose(h.numpy(), [12.0, -24.0])
    assert ta.gradgradcheck(lambda t: Cube.apply(t, 2.0)[0], [x])


def test_once_differentiable_decorator_and_non_differentiable_outputs():
    class Square(autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            out = x * x
            ctx.mark_non_differentiable(out)
            return out, x * 2

        @staticmethod
        @autograd.once_differentiable
        def backward(ctx, grad_square, grad_double):
            (x,) = ctx.saved_tensors
            return ta.tensor(grad_double.numpy() * 2)

    x = leaf([3.0])
    square, double = Square.apply(x)
    assert not square.requires_grad and double.requires_grad
    (g,) = autograd.grad(double.sum(), x, create_graph=True)
    assert g.tolist() == [2.0]
    with pytest.raises(RuntimeError, match="once_differentiable"):
        autograd.grad(g.sum(), x)


def test_saved_tensor_modified_in_place_is_refused_in_a_pytorch_style_function():
    class Twice(autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * 2

    base = leaf([1.0])
    x = base * 1
    y = Twice.apply(x)
    x.mul_(3)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_variable_is_the_deprecated_alias_of_a_tensor():
    v = autograd.Variable(ta.tensor([1.0, 2.0]), requires_grad=True)
    assert isinstance(v, ta.Tensor) and isinstance(v, autograd.Variable) and v.requires_grad and v.is_leaf
    (v * v).sum().backward()
    assert v.grad.tolist() == [2.0, 4.0]


def test_functional_jacobian_hessian_and_products_match_closed_forms():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 3))
    x0, v0 = rng.normal(size=3), rng.normal(size=3)
    A = ta.tensor(a)

    def f(x):
        return (A @ x).tanh()

    def loss(x):
        return (x * (A @ x)).sum() + (x**3).sum()

    jac = AF.jacobian(f, ta.tensor(x0)).numpy()
    np.testing.assert_allclose(jac, (1 - np.tanh(a @ x0) ** 2)[:, None] * a, rtol=1e-12)
    hess = AF.hessian(loss, ta.tensor(x0)).numpy()
    np.testing.assert_allclose(hess, a + a.T + np.diag(6 * x0), rtol=1e-12)
    _, vj = AF.vjp(f, ta.tensor(x0), ta.tensor(v0))
    np.testing.assert_allclose(vj.numpy(), v0 @ jac, rtol=1e-12)
    _, jv = AF.jvp(f, ta.tensor(x0), ta.tensor(v0))
    np.testing.assert_allclose(jv.numpy(), jac @ v0, rtol=1e-12)
    _, hv = AF.hvp(loss, ta.tensor(x0), ta.tensor(v0))
    _, vh = AF.vhp(loss, ta.tensor(x0), ta.tensor(v0))
    np.testing.assert_allclose(hv.numpy(), hess @ v0, rtol=1e-12)
    np.testing.assert_allclose(vh.numpy(), v0 @ hess, rtol=1e-12)
    two = AF.jacobian(lambda x, y: x * y, (ta.tensor(x0), ta.tensor(v0)))
    np.testing.assert_allclose(two[0].numpy(), np.diag(v0))
    np.testing.assert_allclose(two[1].numpy(), np.diag(x0))


def test_func_transforms_nest():
    f = lambda x: (x**3).sum()  # noqa: E731
    x = ta.tensor([1.0, -2.0], dtype=ta.float64)
    np.testing.assert_allclose(ta.func.grad(f)(x).numpy(), 3 * x.numpy() ** 2)
    second = ta.func.grad(lambda t: ta.func.grad(f)(t).sum())(x)
    np.testing.assert_allclose(second.numpy(), 6 * x.numpy())
    grads, value = ta.func.grad_and_value(f)(x)
    assert value.item() == -7.0 and not value.requires_grad
    out, vjp_fn = ta.func.vjp(lambda t: t * t, x)
    np.testing.assert_allclose(vjp_fn(ta.tensor([1.0, 1.0], dtype=ta.float64))[0].numpy(), 2 * x.numpy())


def test_gradgradcheck_catches_a_wrong_second_derivative():
    class Wrong(autograd.Function):  # the right first derivative, written so its own derivative is wrong
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**3

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * 3 * x * x.detach()  # detach hides half of d(3x^2)/dx

    x = leaf([0.5, 1.5])
    assert ta.gradcheck(Wrong.apply, [x])
    with pytest.raises(ta.GradcheckError):
        ta.gradgradcheck(Wrong.apply, [x])


# --- modules, and the backward as a graph a learner can trace and draw -------------------------------------


@pytest.mark.parametrize("name", ["encoder_layer", "causal_lm", "layer_norm", "feed_forward"])
def test_modules_are_twice_differentiable(sdpa_path, name):
    ta.manual_seed(0)
    rng = np.random.default_rng(0)
    if name == "encoder_layer":
        module = ta.nn.TransformerEncoderLayer(4, 2, dim_feedforward=6, dropout=0.0).double()
        x = leaf(rng.normal(size=(2, 3, 4)))
        fn = lambda t: module(t)  # noqa: E731
    elif name == "causal_lm":
        module = ta.nn.CausalLM(vocab_size=5, d_model=4, nhead=2, num_layers=1, dim_feedforward=6,
                                max_len=8).double()
        tokens = ta.tensor([[1, 3, 0, 2]])
        x = module.lm_head.weight if hasattr(module, "lm_head") else next(iter(module.parameters()))
        fn = lambda w: module(tokens) * 1.0  # noqa: E731
    elif name == "layer_norm":
        module = ta.nn.LayerNorm(4).double()
        x = leaf(rng.normal(size=(3, 4)))
        fn = lambda t: module(t) ** 2  # noqa: E731
    else:
        module = ta.nn.FeedForward(4, 6, activation="gelu").double()
        x = leaf(rng.normal(size=(2, 4)))
        fn = lambda t: module(t)  # noqa: E731
    assert ta.gradgradcheck(fn, [x], atol=1e-4, max_elements=24)


def test_the_backward_of_attention_is_a_graph_to_trace_and_draw(sdpa_path):
    q = leaf(np.random.default_rng(0).normal(size=(1, 1, 3, 2)))
    out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    (g,) = autograd.grad(out.sum(), q, create_graph=True)
    dot = ta.viz.to_dot(g)
    assert dot.startswith("digraph") and "MatMul" in dot and "Softmax" in dot
    with ta.trace_backward(print_table=False) as trace:
        g.sum().backward()
    ops = [row[0] for row in trace.rows]
    assert "MatMul" in ops and "Softmax" in ops and len(ops) > 10
    np.testing.assert_allclose(q.grad.numpy(), autograd.functional.hvp(
        lambda t: F.scaled_dot_product_attention(t, t, t, is_causal=True).sum(), q.detach(),
        ta.tensor(np.ones((1, 1, 3, 2))))[1].numpy(), rtol=1e-8, atol=1e-12)


LOSSES_AND_STATISTICS = {
    "mse": lambda a, b: F.mse_loss(a, b),
    "l1": lambda a, b: F.l1_loss(a * a, b),
    "bce_with_logits": lambda a, b: F.binary_cross_entropy_with_logits(a, b.sigmoid()),
    "bce": lambda a, b: F.binary_cross_entropy(a.sigmoid(), b.sigmoid()),
    "kl_div": lambda a, b: F.kl_div(F.log_softmax(a, -1), F.softmax(b, -1), reduction="batchmean"),
    "nll": lambda a, b: F.nll_loss(F.log_softmax(a * b, -1), ta.tensor([0, 2, 1])),
    "var_std": lambda a, b: a.var(-1) * b.std(0).sum(),
    "norm": lambda a, b: (a * b).norm(),
    "median_kthvalue": lambda a, b: a.median(-1).values * b.kthvalue(2, -1).values,
}


@pytest.mark.parametrize("name", sorted(LOSSES_AND_STATISTICS))
@few
@given(data=st.data())
def test_losses_and_statistics_are_twice_differentiable(name, data):
    a, b = leaf(data.draw(arrays((3, 3)))), leaf(data.draw(arrays((3, 3), 0.5, 2.0)))
    assert ta.gradgradcheck(LOSSES_AND_STATISTICS[name], [a, b])


@few
@given(data=st.data(), rows=st.integers(1, 4), cols=st.integers(1, 3))
def test_split_chunk_index_fill_and_the_decoder_layer_are_twice_differentiable(data, rows, cols):
    x = leaf(data.draw(arrays((rows, cols))))
    assert ta.gradgradcheck(lambda t: ta.cat([p * p for p in t.split(1, 0)] + [c * 2 for c in t.chunk(2, 0)]), [x])
    assert ta.gradgradcheck(lambda t: t.index_fill(0, ta.tensor([0]), 0.5) * t, [x])
    ta.manual_seed(0)
    layer = ta.nn.TransformerDecoderLayer(4, 2, dim_feedforward=6, dropout=0.0, batch_first=True).double()
    memory = leaf(np.random.default_rng(rows).normal(size=(1, 3, 4)))
    target = leaf(np.random.default_rng(cols).normal(size=(1, 2, 4)))
    assert ta.gradgradcheck(lambda t, m: layer(t, m), [target, memory], atol=1e-4, max_elements=12)


@few
@given(data=st.data(), rows=st.integers(1, 3), cols=st.integers(1, 4))
def test_the_pytorch_spellings_are_twice_differentiable(data, rows, cols):
    """The views and composites ported programs reach for (movedim, narrow, select, index_select,
    take_along_dim, tile, addmm, baddbmm, dot, glu, cosine_similarity, clamp_min, mT), on strided inputs."""
    x = leaf(data.draw(arrays((rows, cols))))
    idx = ta.tensor(np.arange(cols)[::-1].copy())
    cases = [
        lambda t: t.movedim(0, 1) * t.mT + t.swapaxes(0, 1),
        lambda t: t.narrow(1, cols - 1, 1) * t.select(0, -1),
        lambda t: t.index_select(1, idx) * t,
        lambda t: ta.take_along_dim(t, ta.tensor(np.zeros((rows, 1), np.int64)), 1) * t,
        lambda t: ta.tile(t, (2,)) * ta.tile(t, (2,)),
        lambda t: ta.addmm(t, t, t.mT @ t, beta=0.5, alpha=2.0),
        lambda t: ta.baddbmm(t[None], t[None], (t.mT @ t)[None], beta=0.0),
        lambda t: ta.dot(t[0], t[-1]) * t,
        lambda t: ta.nn.functional.cosine_similarity(t, t * t + 1, dim=-1),
        lambda t: t.clamp_min(0.3) * t.clamp_max(-0.3),
        lambda t: ta.nn.functional.glu(ta.cat([t, t * t], 1), dim=1),
    ]
    for fn in cases:
        assert ta.gradgradcheck(fn, [x], atol=1e-4, max_elements=12)
