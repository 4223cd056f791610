"""The rest of PyTorch's surface that ported programs use: einsum, prod and the cumulative ops, fmod, copysign,
diagonal, meshgrid, std_mean, pad modes, F.embedding, mixed int and tensor indexing, `axis=`, `sum(dtype=)`,
the schedulers, `Tensor.type(ByteTensor)`, bfloat16, and PyTorch's module paths. Gradients against finite
differences (twice), and everything against PyTorch when it is installed."""

import math
import warnings

import numpy as np
import pytest
from conftest import arrays, shapes
from hypothesis import given, settings
from hypothesis import strategies as st

import tinygrad_attn as ta

F = ta.nn.functional
few = settings(max_examples=10, deadline=None)


def leaf(a):
    return ta.tensor(np.asarray(a, np.float64), requires_grad=True)


@few
@given(data=st.data(), shape=shapes(min_dims=1, max_dims=3, min_side=0, max_side=4))
def test_prod_and_the_cumulative_ops_against_finite_differences(data, shape):
    x = data.draw(arrays(shape))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    with_zero = x.copy()
    if with_zero.size:
        with_zero.flat[0] = 0.0  # a zero: where exp(sum(log)) and "product / x" forms break
    for a in (x, with_zero):
        np.testing.assert_allclose(leaf(a).prod(dim).detach().numpy(), np.prod(a, axis=dim), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(leaf(a).cumprod(dim).detach().numpy(), np.cumprod(a, axis=dim), rtol=1e-12,
                                   atol=1e-12)
        assert ta.gradcheck(lambda t: t.prod(dim, keepdim=True) * t.cumprod(dim), [leaf(a)])
    assert ta.gradgradcheck(lambda t: t.prod(dim) + t.cumprod(dim).sum(dim), [leaf(with_zero)])
    shifted = np.log(np.cumsum(np.exp(x - x.max()), axis=dim)) + x.max() if x.size else x
    np.testing.assert_allclose(leaf(x).logcumsumexp(dim).detach().numpy(), shifted, rtol=1e-10, atol=1e-10)
    assert ta.gradgradcheck(lambda t: t.logcumsumexp(dim) ** 2, [leaf(x)])
    distinct = x + np.arange(x.size).reshape(x.shape) * 1e-3  # no ties: a finite-difference step keeps the order
    assert ta.gradcheck(lambda t: t.cummax(dim).values * t.cummin(dim).values, [leaf(distinct)])


@few
@given(seed=st.integers(0, 2**16))
def test_einsum_is_twice_differentiable(seed):
    rng = np.random.default_rng(seed)
    a, b, c = leaf(rng.normal(size=(2, 3, 4))), leaf(rng.normal(size=(4, 5))), leaf(rng.normal(size=(3,)))
    for equation, operands in (("bij,jk->bik", (a, b)), ("bij,jk,i->bk", (a, b, c)), ("...j,jk", (a, b)),
                               ("bij->", (a,)), ("bij,k->bik", (a, c)), ("i,i", (c, c))):
        assert ta.gradgradcheck(lambda *xs, e=equation: ta.einsum(e, *xs) ** 2, list(operands)), equation


def test_einsum_refuses_what_it_cannot_do_with_one_clear_error():
    x = ta.ones(3, 3)
    for equation, operands, error, message in (
            ("ii->i", (x,), NotImplementedError, "repeated in 'ii'"),
            ("ij,jk->ik", (x,), ValueError, "names 2 operands, got 1"),
            ("ij->ik", (x,), ValueError, "appear in no operand"),
            ("ijk->i", (x,), ValueError, "names 3 dims"),
            ("ij,jk->ik", (x, ta.ones(4, 2)), RuntimeError, "'j' is 3 in one operand and 4"),
            ("i1->i", (x,), ValueError, "subscripts are letters")):
        with pytest.raises(error, match=message):
            ta.einsum(equation, *operands)


@few
@given(data=st.data())
def test_fmod_copysign_diagonal_and_pad_modes_against_finite_differences(data):
    x = data.draw(arrays((3, 4)))
    divisor = np.abs(data.draw(arrays((3, 4)))) + 0.7
    ratio = x * 3 / divisor
    x = np.where(np.abs(ratio - np.round(ratio)) < 1e-3, x + 0.01, x)  # away from fmod's jumps
    np.testing.assert_allclose(ta.fmod(leaf(x * 3), leaf(divisor)).detach().numpy(), np.fmod(x * 3, divisor))
    assert ta.gradgradcheck(lambda a, b: ta.fmod(a * 3, b) ** 2, [leaf(x), leaf(divisor)])
    away = np.where(np.abs(x) < 1e-3, 0.5, x)
    assert ta.gradgradcheck(lambda a: ta.copysign(a, ta.tensor(-x)) ** 2, [leaf(away)])
    for offset in (-2, 0, 1, 5):
        assert ta.gradgradcheck(lambda a, o=offset: a.diagonal(o) ** 2, [leaf(x)])
    for mode in ("reflect", "replicate", "circular"):
        assert ta.gradgradcheck(lambda a, m=mode: F.pad(a.reshape(1, 3, 4), (2, 1), mode=m) ** 2, [leaf(x)])


def test_pad_modes_refuse_what_pytorch_refuses():
    x = ta.ones(1, 3, 4)
    with pytest.raises(ValueError, match="reflect padding \\(4, 0\\) must be less than the dim's size 4"):
        F.pad(x, (4, 0), mode="reflect")
    with pytest.raises(NotImplementedError, match="takes a 2-D or 3-D input"):
        F.pad(ta.ones(1, 1, 3, 4), (1, 1), mode="replicate")
    with pytest.raises(ValueError, match='mode must be "constant", "reflect"'):
        F.pad(x, (1, 1), mode="edge")


@few
@given(data=st.data())
def test_mixed_int_and_tensor_indexing_places_dims_as_pytorch_does(data):
    """An int selects first, so the tensor index's dims stay where the tensor index stands."""
    shape = (3, 4, 5, 2)
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    index = np.array([[0, 1], [1, 0]])
    template = data.draw(st.lists(st.sampled_from(["int", "slice", "tensor", "step"]), min_size=2, max_size=4))
    items = []
    for kind, n in zip(template, shape):
        items.append({"int": 1, "slice": slice(None), "tensor": index, "step": slice(0, n, 2)}[kind])
    items = tuple(items)
    got = ta.tensor(x)[tuple(ta.tensor(i) if isinstance(i, np.ndarray) else i for i in items)].numpy()
    expected = _torch_index(x, items)
    if expected is not None:
        assert got.shape == expected.shape and np.array_equal(got, expected)
    assert got.size == np.asarray(x[items]).size  # the same entries as numpy's, perhaps placed otherwise
    t = leaf(x)
    picked = t[tuple(ta.tensor(i) if isinstance(i, np.ndarray) else i for i in items)]
    (picked * ta.tensor(np.arange(picked.numel(), dtype=np.float64).reshape(picked.shape))).sum().backward()
    assert t.grad.shape == x.shape


def _torch_index(x, items):
    try:
        import torch
    except ImportError:
        return None
    return torch.tensor(x)[tuple(torch.tensor(i) if isinstance(i, np.ndarray) else i for i in items)].numpy()


def test_axis_alias_sum_dtype_type_and_bfloat16():
    x = ta.tensor(np.arange(6.0).reshape(2, 3))
    assert x.sum(axis=1).tolist() == [3.0, 12.0] and x.amax(axis=0).tolist() == [3.0, 4.0, 5.0]
    assert ta.argmax(x, axis=1).tolist() == [2, 2] and x.mean(axis=0).tolist() == [1.5, 2.5, 3.5]
    with pytest.raises(TypeError, match="both dim and its alias axis"):
        x.sum(1, axis=1)
    assert ta.ones(3, dtype=ta.int32).sum(dtype=ta.float64).dtype == ta.float64
    assert x.type(ta.ByteTensor).dtype == ta.uint8 and x.type("torch.LongTensor").dtype == ta.int64
    table = {"float32": ta.float32, "bfloat16": ta.bfloat16}  # nanoGPT's table of dtypes builds
    assert repr(table["bfloat16"]) == "ta.bfloat16" and not ta.cuda.is_bf16_supported()
    for make in (lambda: ta.ones(2, dtype=ta.bfloat16), lambda: x.to(ta.bfloat16), lambda: ta.tensor([1.0],
                                                                                                    dtype=ta.bfloat16)):
        with pytest.raises(TypeError, match="bfloat16 is not supported here"):
            make()


def test_pytorch_module_paths_and_data_parallel():
    from tinygrad_attn.nn.parallel import DataParallel, DistributedDataParallel
    from tinygrad_attn.utils.data.dataloader import DataLoader, default_collate
    from tinygrad_attn.utils.data.dataset import TensorDataset
    from tinygrad_attn.utils.data.sampler import SequentialSampler

    loader = DataLoader(TensorDataset(ta.arange(5)), batch_size=2, sampler=SequentialSampler(range(5)))
    assert [b[0].tolist() for b in loader] == [[0, 1], [2, 3], [4]] and default_collate([1, 2]).tolist() == [1, 2]
    model = ta.nn.Linear(2, 3)
    wrapped = DataParallel(model)
    assert wrapped.module is model and sorted(wrapped.state_dict()) == ["module.bias", "module.weight"]
    np.testing.assert_array_equal(wrapped(ta.ones(1, 2)).detach().numpy(), model(ta.ones(1, 2)).detach().numpy())
    with pytest.raises(RuntimeError, match="Default process group has not been initialized"):
        DistributedDataParallel(model)


def test_meshgrid_std_mean_and_embedding():
    grid_x, grid_y = ta.meshgrid(ta.arange(3), ta.arange(4), indexing="xy")
    assert grid_x.shape == (4, 3) and grid_x[0].tolist() == [0, 1, 2] and grid_y[:, 0].tolist() == [0, 1, 2, 3]
    rows, cols = ta.meshgrid(ta.arange(3), ta.arange(4))
    assert rows.shape == (3, 4) and rows[:, 0].tolist() == [0, 1, 2]
    x = np.random.default_rng(0).normal(size=(3, 5))
    std, mean = ta.std_mean(ta.tensor(x), 1)
    np.testing.assert_allclose(std.numpy(), x.std(1, ddof=1))
    np.testing.assert_allclose(mean.numpy(), x.mean(1))
    weight = leaf(np.random.default_rng(1).normal(size=(5, 3)))
    out = F.embedding(ta.tensor([[0, 2, 2], [4, 1, 0]]), weight, padding_idx=2)
    out.sum().backward()
    assert weight.grad.numpy()[2].tolist() == [0.0, 0.0, 0.0] and weight.grad.numpy()[0].tolist() == [2.0] * 3
    assert ta.gradgradcheck(lambda w: F.embedding(ta.tensor([1, 3, 3]), w) ** 2, [leaf(weight.detach().numpy())])


@pytest.mark.torch_parity
@pytest.mark.parametrize("name", ["prod", "prod_all", "prod_int", "cumprod", "logcumsumexp", "cummax", "cummin",
                                  "fmod", "fmod_int", "copysign", "diagonal", "einsum", "einsum_ellipsis",
                                  "std_mean", "var_mean", "pad_reflect", "pad_replicate", "pad_circular",
                                  "embedding", "meshgrid_xy", "sum_dtype"])
def test_values_dtypes_shapes_and_gradients_equal_pytorchs(name):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 4))
    x[1, 2] = 0.0
    cases = {
        "prod": lambda m, a: a.prod(1), "prod_all": lambda m, a: a.prod(),
        "prod_int": lambda m, a: m.tensor([[1, 2], [3, 4]], dtype=m.int32).prod(0),
        "cumprod": lambda m, a: a.cumprod(0), "logcumsumexp": lambda m, a: a.logcumsumexp(1),
        "cummax": lambda m, a: m.cummax(a, 1).values + m.cummax(a, 1).indices,
        "cummin": lambda m, a: a.cummin(0).values * m.cummin(a, 0).indices,
        "fmod": lambda m, a: m.fmod(a * 3, 1.3), "fmod_int": lambda m, a: m.fmod(m.tensor([5, -5, 7]), 3),
        "copysign": lambda m, a: m.copysign(a, -a.flip(0)), "diagonal": lambda m, a: m.diagonal(a, 1),
        "einsum": lambda m, a: m.einsum("ij,kj->ik", a, a * 2),
        "einsum_ellipsis": lambda m, a: m.einsum("...j,j", a, a[0]),
        "std_mean": lambda m, a: m.std_mean(a, 1)[0] * m.std_mean(a, 1)[1],
        "var_mean": lambda m, a: m.var_mean(a, 0)[0] + m.var_mean(a, 0)[1],
        "pad_reflect": lambda m, a: m.nn.functional.pad(a.reshape(1, 3, 4), (2, 3), mode="reflect"),
        "pad_replicate": lambda m, a: m.nn.functional.pad(a.reshape(1, 1, 3, 4), (1, 2, 2, 0), mode="replicate"),
        "pad_circular": lambda m, a: m.nn.functional.pad(a.reshape(1, 3, 4), (3, 1), mode="circular"),
        "embedding": lambda m, a: m.nn.functional.embedding(m.tensor([[0, 2], [1, 2]]), a, padding_idx=1),
        "meshgrid_xy": lambda m, a: m.meshgrid(a[0], a[1], indexing="xy")[0] * m.meshgrid(a[0], a[1])[1].sum(),
        "sum_dtype": lambda m, a: m.tensor([1, 2, 3], dtype=m.int32).sum(dtype=m.float64),
    }
    results = []
    for m in (ta, torch):
        a = (ta.tensor(x, requires_grad=True) if m is ta else torch.tensor(x, requires_grad=True))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = cases[name](m, a)
        if out.dtype.kind == "f" if m is ta else out.dtype.is_floating_point:
            g = np.random.default_rng(4).normal(size=tuple(out.shape))
            if out.requires_grad:
                (out * (ta.tensor(g) if m is ta else torch.tensor(g))).sum().backward()
        grad = None if a.grad is None else a.grad.numpy()
        results.append((out.detach().numpy(), str(out.dtype).split(".")[-1], tuple(out.shape), grad))
    (ours, our_dtype, our_shape, our_grad), (theirs, their_dtype, their_shape, their_grad) = results
    assert our_shape == their_shape and our_dtype == their_dtype
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)
    assert (our_grad is None) == (their_grad is None)
    if our_grad is not None:
        np.testing.assert_allclose(our_grad, their_grad, rtol=1e-10, atol=1e-12)


@pytest.mark.torch_parity
def test_the_schedulers_set_pytorchs_learning_rates_and_momenta():
    torch = pytest.importorskip("torch")
    cases = {
        "StepLR": lambda s, o: s.StepLR(o, 3, 0.5), "MultiStepLR": lambda s, o: s.MultiStepLR(o, [2, 5, 9], 0.3),
        "ExponentialLR": lambda s, o: s.ExponentialLR(o, 0.9), "ConstantLR": lambda s, o: s.ConstantLR(o, 0.5, 4),
        "LinearLR": lambda s, o: s.LinearLR(o, 0.2, 1.0, 6), "PolynomialLR": lambda s, o: s.PolynomialLR(o, 10, 2.0),
        "WarmRestarts": lambda s, o: s.CosineAnnealingWarmRestarts(o, 3, 2, 0.001),
        "OneCycleLR": lambda s, o: s.OneCycleLR(o, 0.1, total_steps=20),
        "OneCycleLR_3": lambda s, o: s.OneCycleLR(o, 0.1, total_steps=20, three_phase=True, anneal_strategy="linear"),
        "SequentialLR": lambda s, o: s.SequentialLR(o, [s.LinearLR(o, 0.1, 1.0, 4), s.ExponentialLR(o, 0.8)], [4]),
    }
    for name, make in cases.items():
        seen = []
        for m in (ta, torch):
            p = torch.nn.Parameter(torch.zeros(3)) if m is torch else ta.nn.Parameter(np.zeros(3, np.float32))
            optimizer = m.optim.Adam([p], lr=0.05)
            scheduler = make(m.optim.lr_scheduler, optimizer)
            trace = []
            for _ in range(19):
                optimizer.step()
                scheduler.step()
                trace.append((optimizer.param_groups[0]["lr"], optimizer.param_groups[0]["betas"][0]))
            seen.append(np.array(trace))
        np.testing.assert_allclose(seen[0], seen[1], rtol=1e-12, atol=1e-15, err_msg=name)
    lrs = []
    for m in (ta, torch):
        p = torch.nn.Parameter(torch.zeros(3)) if m is torch else ta.nn.Parameter(np.zeros(3, np.float32))
        optimizer = m.optim.SGD([p], lr=1.0)
        plateau = m.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=2, factor=0.5, cooldown=1)
        trace = []
        for value in [5, 4, 4, 4, 4, 3.99999, 4, 4, 4, 4, 4, 2, 2, 2, 2]:
            plateau.step(value)
            trace.append(optimizer.param_groups[0]["lr"])
        lrs.append(trace)
    assert lrs[0] == lrs[1] and not math.isclose(lrs[0][-1], 1.0)


def test_one_functional_namespace():
    """tinygrad_attn.functional re-exports nn.functional's very functions (cross_entropy with PyTorch's
    signature: the third argument is weight)."""
    ours, public = ta.functional, ta.nn.functional
    shared = [n for n in ours.__all__ if hasattr(public, n)]
    assert "cross_entropy" in shared and all(getattr(ours, n) is getattr(public, n) for n in shared)
    logits, target = ta.tensor(np.random.default_rng(2).normal(size=(4, 3))), ta.tensor([0, 2, 1, 2])
    weight = ta.tensor([1.0, 2.0, 0.5], dtype=ta.float64)
    weighted = ours.cross_entropy(logits, target, weight).item()
    picked = -np.log(np.exp(logits.numpy()) / np.exp(logits.numpy()).sum(1, keepdims=True))[range(4), [0, 2, 1, 2]]
    w = weight.numpy()[[0, 2, 1, 2]]
    assert np.isclose(weighted, (picked * w).sum() / w.sum())


@few
@given(seed=st.integers(0, 2**16), include_self=st.booleans())
def test_scatter_reduce_sum_and_mean_are_twice_differentiable(seed, include_self):
    rng = np.random.default_rng(seed)
    x, src = leaf(rng.normal(size=(3, 5))), leaf(rng.normal(size=(3, 4)))
    index = ta.tensor(rng.integers(0, 5, (3, 4)))
    for reduce in ("sum", "mean"):
        assert ta.gradgradcheck(lambda a, b, r=reduce: a.scatter_reduce(1, index, b, r, include_self=include_self)
                                ** 2, [x, src])


@pytest.mark.torch_parity
@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin", "prod"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_equals_pytorchs(reduce, include_self):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    x, src = rng.normal(size=(3, 5)), rng.normal(size=(3, 4))
    src[0, 1] = src[0, 2]  # a tie, sent to one entry: the gradient is shared
    index = np.array([[0, 1, 1, 4], [2, 2, 0, 3], [4, 4, 4, 4]])
    results = []
    for m in (ta, torch):
        a, b = m.tensor(x, requires_grad=reduce != "prod"), m.tensor(src, requires_grad=reduce != "prod")
        out = a.scatter_reduce(1, m.tensor(index), b, reduce, include_self=include_self)
        if reduce != "prod":
            (out * m.tensor(np.arange(15.0).reshape(3, 5))).sum().backward()
        results.append((out.detach().numpy(), None if reduce == "prod" else (a.grad.numpy(), b.grad.numpy())))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-12, atol=1e-12)
    if reduce != "prod":
        for ours, theirs in zip(results[0][1], results[1][1]):
            np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for reduce_name in ("add", "multiply"):
            ours = ta.ones(5).scatter(0, ta.tensor([0, 0, 3]), ta.ones(3) * 2, reduce=reduce_name)
            theirs = torch.ones(5).scatter(0, torch.tensor([0, 0, 3]), torch.ones(3) * 2, reduce=reduce_name)
            assert ours.tolist() == theirs.tolist()
    y = ta.zeros(5)
    y.scatter_add_(0, ta.tensor([1, 1, 4]), ta.ones(3))
    assert y.tolist() == [0.0, 2.0, 0.0, 0.0, 1.0]
