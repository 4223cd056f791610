"""PyTorch's tensor idioms: factories, size()/dim(), split/chunk, topk, argmax, clamp, abs, min, expand, view,
item assignment, multinomial. Against numpy (and PyTorch when installed), gradients against finite differences."""

import numpy as np
import pytest
from conftest import arrays, shapes
from hypothesis import given
from hypothesis import strategies as st

import tinygrad_attn as ta


def T(a, grad=True):
    return ta.Tensor(a, requires_grad=grad)


def test_factories_are_float32_and_seeded():
    assert ta.zeros(2, 3).dtype == np.float32 and ta.zeros((2, 3)).shape == (2, 3)
    assert ta.ones(4).numpy().sum() == 4 and ta.full((2, 2), 7.0).numpy().tolist() == [[7, 7], [7, 7]]
    assert ta.arange(5).dtype == np.int64 and ta.arange(0, 1, 0.25).dtype == np.float32
    np.testing.assert_array_equal(ta.arange(2, 8, 2).numpy(), [2, 4, 6])
    assert ta.tensor([1, 2]).dtype == np.int64 and ta.tensor([1.0, 2.0]).dtype == np.float32
    t = ta.tensor([[1.0, 2.0]], requires_grad=True)
    assert t.requires_grad and ta.zeros_like(t).shape == (1, 2) and ta.ones_like(t).dtype == np.float32
    source = np.ones(3, np.float32)
    ta.tensor(source).numpy()[0] = 5
    assert source[0] == 1  # tensor() copies, Tensor() shares
    ta.manual_seed(3)
    a = ta.randn(2, 3).numpy()
    ta.manual_seed(3)
    np.testing.assert_array_equal(a, ta.randn(2, 3).numpy())
    assert ta.rand(100).numpy().min() >= 0 and ta.rand(100).numpy().max() < 1
    with pytest.raises(ValueError, match="non-negative ints"):
        ta.zeros(2, -1)


def test_tril_triu_match_numpy_and_gradcheck():
    x = np.random.default_rng(0).normal(size=(2, 4, 5))
    for fn, ref in ((ta.tril, np.tril), (ta.triu, np.triu)):
        for k in (-1, 0, 2):
            np.testing.assert_array_equal(fn(T(x, False), k).numpy(), ref(x, k))
            assert ta.gradcheck(lambda t, fn=fn, k=k: fn(t, k), [T(x)])
        for k in (-6, -4, 5, 7, -10**20, 10**20):  # at and beyond the matrix's edges (numpy overflows on huge k)
            np.testing.assert_array_equal(fn(T(x, False), k).numpy(), ref(x, max(min(k, 99), -99)))


def test_size_dim_and_conversions():
    t = ta.zeros(2, 3, 4)
    assert t.size() == (2, 3, 4) and t.size(-1) == 4 and t.size(0) == 2 and t.dim() == 3 and t.numel() == 24
    with pytest.raises(IndexError, match="dim 3 is out of range"):
        t.size(3)
    one = ta.tensor([[2.5]])
    assert float(one) == 2.5 and int(one) == 2 and bool(one) and one.tolist() == [[2.5]]
    with pytest.raises(ValueError, match="one element"):
        float(t)
    assert [0, 1, 2][ta.tensor(1)] == 1


def test_empty_dims_split_chunk_and_reduce_as_in_pytorch():
    x = ta.zeros(0, 3)
    assert [p.shape for p in x.split(2)] == [(0, 3)]  # one empty piece
    assert [p.shape for p in x.chunk(3)] == [(0, 3)] * 3  # `chunks` empty pieces
    assert np.isnan(x.mean().item()) and np.isnan(x.mean(0).numpy()).all() and x.mean(1).shape == (0,)
    assert x.max(1).values.shape == (0,) and x.argmin(1).shape == (0,)  # the reduced dim has 3 entries: fine
    with pytest.raises(ValueError, match=r"max: the tensor of shape \(0, 3\) is empty along dim 0"):
        x.max(0)
    torch = pytest.importorskip("torch")  # the same as PyTorch, where it is installed
    t = torch.zeros(0, 3)
    assert [p.shape for p in x.split(2)] == [tuple(p.shape) for p in t.split(2)]
    assert [p.shape for p in x.chunk(3)] == [tuple(p.shape) for p in t.chunk(3)]
    assert torch.isnan(t.mean()) and tuple(t.max(1).values.shape) == x.max(1).values.shape


@given(data=st.data(), shape=shapes(1, 3, 5))
def test_split_and_chunk_are_slices_and_carry_gradients(data, shape):
    x = data.draw(arrays(shape))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    size = data.draw(st.integers(1, 4))
    pieces = T(x, False).split(size, dim)
    np.testing.assert_array_equal(np.concatenate([p.numpy() for p in pieces], axis=dim), x)
    assert all(p.shape[dim] <= size for p in pieces)
    n = data.draw(st.integers(1, 4))
    chunks = T(x, False).chunk(n, dim)
    assert len(chunks) <= n and np.concatenate([c.numpy() for c in chunks], axis=dim).shape == x.shape
    assert ta.gradcheck(lambda t: ta.cat([p * (i + 1) for i, p in enumerate(t.split(size, dim))], dim), [T(x)])


def test_split_by_sizes_and_errors():
    x = T(np.arange(10.0), False)
    assert [p.shape[0] for p in x.split([3, 7])] == [3, 7]
    with pytest.raises(ValueError, match="do not add up"):
        x.split([3, 3])
    with pytest.raises(ValueError, match="positive"):
        x.chunk(0)


@given(data=st.data(), shape=shapes(1, 3, 5, min_side=1))  # argmax and min of an empty dim are errors
def test_topk_argmax_min_abs_clamp(data, shape):
    x = data.draw(arrays(shape))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    k = data.draw(st.integers(0, shape[dim]))
    for largest in (True, False):
        values, indices = T(x, False).topk(k, dim, largest=largest)
        order = np.sort(x, axis=dim)
        want = np.flip(order, axis=dim) if largest else order
        np.testing.assert_array_equal(values.numpy(), np.take(want, range(k), axis=dim))
        np.testing.assert_array_equal(np.take_along_axis(x, indices.numpy(), dim), values.numpy())
        assert indices.dtype == np.int64
        assert ta.gradcheck(lambda t, largest=largest: t.topk(k, dim, largest=largest)[0], [T(x)])
    np.testing.assert_array_equal(T(x, False).argmax(dim).numpy(), np.argmax(x, dim))
    np.testing.assert_array_equal(T(x, False).argmin(dim, keepdim=True).numpy(), np.argmin(x, dim, keepdims=True))
    assert T(x, False).argmax().item() == np.argmax(x)
    np.testing.assert_array_equal(T(x, False).min(dim).values.numpy(), x.min(dim))
    np.testing.assert_array_equal(T(x, False).min(dim).indices.numpy(), np.argmin(x, dim))
    np.testing.assert_array_equal(T(x, False).abs().numpy(), np.abs(x))
    np.testing.assert_array_equal(T(x, False).clamp(-0.5, 0.7).numpy(), np.clip(x, -0.5, 0.7))
    np.testing.assert_array_equal(T(x, False).clamp(min=0.1).numpy(), np.maximum(x, 0.1))
    assert ta.gradcheck(lambda t: t.abs() + t.clamp(-0.5, 0.7) + t.min(dim, keepdim=True).values, [T(x + 0.01)])


def test_expand_view_contiguous():
    x = T(np.arange(3.0).reshape(3, 1))
    e = x.expand(2, 3, 4)
    assert e.shape == (2, 3, 4) and x.expand(-1, 5).shape == (3, 5)
    e.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[8.0], [8.0], [8.0]])
    with pytest.raises(ValueError, match="cannot be expanded"):
        x.expand(2, 2)
    strided = T(np.arange(6.0).reshape(2, 3), False).transpose(0, 1)
    with pytest.raises(RuntimeError, match=r"contiguous\(\)"):
        strided.view(6)
    np.testing.assert_array_equal(strided.contiguous().view(6).numpy(), np.arange(6.0).reshape(2, 3).T.reshape(6))
    with pytest.raises(TypeError, match="sizes must be ints"):
        strided.reshape(3, 2.5)


def test_item_assignment_outside_the_graph():
    logits = ta.tensor([[1.0, 5.0, 3.0, 2.0]])
    v, _ = logits.topk(2)
    logits[logits < v[:, [-1]]] = -np.inf  # nanoGPT's top-k filter
    np.testing.assert_array_equal(logits.numpy(), [[-np.inf, 5.0, 3.0, -np.inf]])
    logits[0, 0] = ta.tensor(9.0)
    assert logits.numpy()[0, 0] == 9
    w = ta.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):
        w[0] = 3.0
    with ta.no_grad():
        w[0] = 3.0
    assert w.detach().numpy()[0] == 3
    with pytest.raises(RuntimeError, match="read-only"):
        ta.tensor([1.0]).expand(3)[0] = 2.0


def test_multinomial_draws_by_weight_from_the_seeded_generator():
    ta.manual_seed(0)
    probs = ta.tensor([[0.0, 0.2, 0.8], [1.0, 0.0, 0.0]])
    draws = ta.multinomial(probs, 1000, replacement=True).numpy()
    assert draws.shape == (2, 1000) and draws.dtype == np.int64
    assert not np.any(draws[0] == 0) and abs(np.mean(draws[0] == 2) - 0.8) < 0.05 and np.all(draws[1] == 0)
    once = ta.multinomial(ta.tensor([0.1, 0.2, 0.7]), 3).numpy()
    assert sorted(once.tolist()) == [0, 1, 2]
    ta.manual_seed(5)
    a = ta.multinomial(probs, 4, replacement=True).numpy()
    ta.manual_seed(5)
    np.testing.assert_array_equal(a, ta.multinomial(probs, 4, replacement=True).numpy())
    with pytest.raises(ValueError, match="without replacement"):
        ta.multinomial(probs, 2)
    with pytest.raises(ValueError, match="non-negative"):
        ta.multinomial(ta.tensor([-1.0, 2.0]), 1)


@pytest.mark.torch_parity
def test_tensor_idioms_match_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).normal(size=(3, 7)).astype(np.float32)
    t, tt = T(x), torch.tensor(x, requires_grad=True)
    values, indices = t.topk(3, dim=1)
    tv, ti = tt.topk(3, dim=1)
    np.testing.assert_array_equal(values.detach().numpy(), tv.detach().numpy())
    np.testing.assert_array_equal(indices.numpy(), ti.numpy())
    (values * 2).sum().backward()
    (tv * 2).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), tt.grad.numpy())
    for a, b in zip(T(x, False).chunk(3, 1), torch.tensor(x).chunk(3, 1)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(T(x, False).split([2, 5], 1), torch.tensor(x).split([2, 5], 1)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(T(x, False).clamp(-0.3, 0.4).numpy(), torch.tensor(x).clamp(-0.3, 0.4).numpy())
    np.testing.assert_array_equal(ta.tril(T(x, False), 1).numpy(), torch.tril(torch.tensor(x), 1).numpy())
    np.testing.assert_array_equal(T(x, False).flatten(0, 1).numpy(), torch.tensor(x).flatten(0, 1).numpy())
    assert T(x, False).size() == tuple(torch.tensor(x).size())


@pytest.mark.torch_parity
def test_functional_additions_match_torch_with_gradients():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 6)) * 2
    target = np.array([1, 5, -100, 0])
    cases = [
        (lambda t: ta.functional.gelu(t, approximate="tanh"),
         lambda t: torch.nn.functional.gelu(t, approximate="tanh")),
        (lambda t: ta.functional.cross_entropy(t, target, label_smoothing=0.1),
         lambda t: torch.nn.functional.cross_entropy(t, torch.tensor(target), label_smoothing=0.1)),
        (lambda t: t.abs() * t.clamp(-1, 1), lambda t: t.abs() * t.clamp(-1, 1)),
        (lambda t: t.min(1).values, lambda t: t.min(1).values),
        (lambda t: t[:, :1].expand(4, 6) * t, lambda t: t[:, :1].expand(4, 6) * t),
    ]
    for ours, theirs in cases:
        a, b = T(x), torch.tensor(x, requires_grad=True)
        out, tout = ours(a), theirs(b)
        np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-12, atol=1e-14)
        g = rng.normal(size=out.shape)
        out.backward(g)
        tout.backward(torch.tensor(g))
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(T(x, False).argmax(1).numpy(), torch.tensor(x).argmax(1).numpy())
    np.testing.assert_array_equal(T(x, False).argmin(0).numpy(), torch.tensor(x).argmin(0).numpy())
    ln, tln = ta.nn.LayerNorm(6, bias=False), torch.nn.LayerNorm(6, bias=False, dtype=torch.float32)
    np.testing.assert_allclose(ln(ta.Tensor(x.astype(np.float32))).detach().numpy(),
                               tln(torch.tensor(x, dtype=torch.float32)).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_t_transposes_two_dims_and_keeps_fewer():
    x = ta.Tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    np.testing.assert_array_equal(x.t().detach().numpy(), np.arange(6.0).reshape(2, 3).T)
    x.t().backward(np.arange(6.0).reshape(3, 2))
    np.testing.assert_array_equal(x.grad.numpy(), np.arange(6.0).reshape(3, 2).T)
    v = ta.tensor([1.0, 2.0])
    assert v.t().shape == (2,) and ta.t(ta.tensor(3.0)).shape == ()
    with pytest.raises(RuntimeError, match=r"t\(\) expects a tensor with <= 2 dimensions, but self is 3D"):
        ta.zeros(2, 3, 4).t()


@pytest.mark.torch_parity
def test_new_factories_views_limits_and_modules_match_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 3, 4))
    ours, theirs = ta.tensor(x), torch.tensor(x)
    for name, args, kwargs in [("new_zeros", (2, 3), {}), ("new_ones", ((3,),), {"dtype": "int32"}),
                               ("new_full", ((2,), 1.5), {}), ("new_tensor", ([1, 2],), {}),
                               ("new_empty", (0, 2), {})]:
        dtype = kwargs.get("dtype")
        a = getattr(ours, name)(*args, **({"dtype": getattr(ta, dtype)} if dtype else {}))
        b = getattr(theirs, name)(*args, **({"dtype": getattr(torch, dtype)} if dtype else {}))
        assert a.shape == tuple(b.shape) and str(a.dtype) == str(b.dtype).split(".")[-1], name
        if name != "new_empty":
            np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
    np.testing.assert_array_equal(ours.mT.numpy(), theirs.mT.numpy())
    for dtype in ("float32", "float64", "float16"):
        a, b = ta.finfo(getattr(ta, dtype)), torch.finfo(getattr(torch, dtype))
        assert (a.bits, a.eps, a.max, a.min, a.tiny, a.resolution) == (b.bits, b.eps, b.max, b.min, b.tiny,
                                                                        b.resolution), dtype
    assert ta.finfo().eps == torch.finfo().eps
    for dtype in ("int8", "int32", "int64", "uint8"):
        a, b = ta.iinfo(getattr(ta, dtype)), torch.iinfo(getattr(torch, dtype))
        assert (a.bits, a.max, a.min) == (b.bits, b.max, b.min), dtype
    with pytest.raises(TypeError, match="not a floating dtype"):
        ta.finfo(ta.int64)
    with pytest.raises(TypeError, match="not an integer dtype"):
        ta.iinfo(ta.float32)
    y = rng.normal(size=(2, 3, 6))
    for same in [
        lambda m, t: m.nn.GELU(approximate="tanh")(t), lambda m, t: m.nn.Flatten()(t),
        lambda m, t: m.nn.Unflatten(2, (2, 3))(t), lambda m, t: m.nn.functional.glu(t, dim=-1),
        lambda m, t: m.nn.functional.cosine_similarity(t, t.flip(0) + 1, dim=-1),
        lambda m, t: m.softmax(t, dim=1, dtype=m.float32), lambda m, t: t.log_softmax(0, dtype=m.float32),
        lambda m, t: m.tril(m.ones(3, 3, dtype=m.bool)) & m.triu(m.ones(3, 3, dtype=m.bool), -1),
    ]:
        a, b = T(y), torch.tensor(y, requires_grad=True)
        out, tout = same(ta, a), same(torch, b)
        assert out.shape == tuple(tout.shape) and str(out.dtype) == str(tout.dtype).split(".")[-1]
        np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-6, atol=1e-7)
        if out.requires_grad:
            g = rng.normal(size=out.shape)
            out.backward(g.astype(out.dtype))
            tout.backward(torch.tensor(g, dtype=tout.dtype))
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-6)
    ta.manual_seed(0)
    w = ta.nn.init.kaiming_normal_(ta.nn.Parameter(np.zeros((400, 300))), mode="fan_out", nonlinearity="relu")
    assert abs(float(w.detach().numpy().std()) - np.sqrt(2 / 400)) < 0.01 * np.sqrt(2 / 400) * 10


def test_generators_are_streams_of_their_own():
    g = ta.Generator().manual_seed(2147483647)
    assert isinstance(g.manual_seed(2147483647), ta.Generator) and g.initial_seed() == 2147483647
    ta.manual_seed(0)
    expected_default = ta.rand(4).numpy()
    def draws():
        return [ta.randn((3, 2), generator=g), ta.rand(2, generator=g), ta.randint(0, 9, (4,), generator=g),
                ta.randperm(5, generator=g), ta.multinomial(ta.tensor([0.3, 0.7]), 4, True, generator=g),
                ta.empty(2, 2).normal_(generator=g), ta.empty(3).uniform_(-1, 1, generator=g),
                ta.nn.init.xavier_uniform_(ta.empty(3, 3), generator=g),
                ta.nn.init.trunc_normal_(ta.empty(4), generator=g), ta.empty(5).bernoulli_(0.4, generator=g),
                ta.bernoulli(ta.full((2, 3), 0.7), generator=g)]

    ta.manual_seed(0)
    first = draws()
    np.testing.assert_array_equal(ta.rand(4).numpy(), expected_default)  # the default stream never moved
    g.manual_seed(2147483647)
    again = draws()
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    state = g.get_state()
    draw = ta.rand(3, generator=g).numpy()
    g.set_state(state)
    np.testing.assert_array_equal(ta.rand(3, generator=g).numpy(), draw)
    def order():
        return list(ta.utils.data.DataLoader(list(range(6)), shuffle=True, generator=ta.Generator().manual_seed(1)))
    assert order() == order()
    assert ta.manual_seed(5) is ta.default_generator and ta.initial_seed() == 5
    with pytest.raises(TypeError, match="generator must be"):
        ta.randn(2, generator=3.5)
    kept = ta.empty(20000).bernoulli_(0.3, generator=g).numpy()
    assert set(np.unique(kept)) <= {0.0, 1.0} and abs(kept.mean() - 0.3) < 0.02  # 5 standard deviations
    with pytest.raises(ValueError, match=r"bernoulli_: probabilities must lie in \[0, 1\]"):
        ta.empty(2).bernoulli_(1.5)
    with pytest.raises(ValueError, match="not a state from get_state"):
        g.set_state(np.zeros(3, np.uint8))


@pytest.mark.torch_parity
def test_generator_programs_run_as_in_pytorch():
    """makemore's way of drawing (a Generator seeded once, passed to every draw): the same shapes and dtypes,
    and the same interface; the numbers differ by design (numpy's PCG64, not PyTorch's Mersenne Twister)."""
    torch = pytest.importorskip("torch")
    for lib in (ta, torch):
        g = lib.Generator().manual_seed(2147483647)
        C = lib.randn((27, 10), generator=g)
        ix = lib.randint(0, 27, (32,), generator=g)
        p = lib.multinomial(lib.softmax(C[ix][:, :5], dim=1), num_samples=1, replacement=True, generator=g)
        assert tuple(p.shape) == (32, 1) and str(p.dtype).endswith("int64") and str(C.dtype).endswith("float32")
        assert isinstance(lib.manual_seed(1), lib.Generator) and lib.initial_seed() == 1
        assert lib.default_generator.initial_seed() == 1
        with lib.autocast(device_type="cpu", dtype=lib.bfloat16, enabled=False):  # nanoGPT's context, off on a CPU
            assert str(lib.ones(2).dtype).endswith("float32")


@pytest.mark.torch_parity
def test_layout_queries_shape_helpers_and_process_settings_match_pytorch():
    torch = pytest.importorskip("torch")
    x = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)
    for lib in (ta, torch):
        t = lib.tensor(x)
        views = [t, t.transpose(0, 2), t[1:, ::2], t[:, 1], t.permute(2, 0, 1)[1:]]
        facts = [(v.stride(), v.stride(-1), v.is_contiguous(), v.storage_offset(), v.nbytes, v.itemsize)
                 for v in views]
        shaped = [tuple(lib.ones(8).view_as(t[0, :2]).shape), tuple(lib.ones(12).reshape_as(t[0]).shape),
                  tuple(lib.ones(1, 4).expand_as(t[0]).shape), tuple(lib.ones(1, 3, 1).squeeze((0, 2)).shape),
                  tuple(lib.ones(1, 3, 1).squeeze((1,)).shape), str(lib.cumsum(lib.tensor([1, 2]), 0,
                                                                          dtype=lib.float32).dtype).split(".")[-1],
                  lib.pow(2, lib.tensor([1.0, 3.0])).tolist(), tuple(lib.Size([2, 3])), lib.Size([2, 3]).numel()]
        lib.set_float32_matmul_precision("high")
        lib.use_deterministic_algorithms(True)
        settings = (lib.get_float32_matmul_precision(), lib.are_deterministic_algorithms_enabled(),
                    type(lib.get_num_interop_threads()).__name__)
        lib.set_float32_matmul_precision("highest")
        lib.use_deterministic_algorithms(False)
        if lib is ta:
            ours = (facts, shaped, settings)
    assert ours == (facts, shaped, settings)
    with pytest.raises(ValueError, match="precision must be"):
        ta.set_float32_matmul_precision("fast")
    ta.set_num_interop_threads(2)  # PyTorch refuses it once its threads have started, so it is not called there
    assert ta.get_num_interop_threads() == 2
    ta.set_num_interop_threads(1)
