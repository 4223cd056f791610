"""PyTorch's semantics where they are not numpy's: .data, type promotion, (values, indices) reductions, in-place
ops with version counters, hooks, grad mode per thread, losses, and the namespace. Closed forms and gradcheck
here; the same checked against PyTorch in test_pytorch_parity.py."""

import threading

import numpy as np
import pytest
from conftest import arrays, shapes
from hypothesis import given
from hypothesis import strategies as st

import tinygrad_attn as ta
import tinygrad_attn.nn.functional as F
from tinygrad_attn import nn
from tinygrad_attn.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset, random_split


def T(x, grad=True):
    return ta.Tensor(np.array(x, dtype=np.float64), requires_grad=grad)


# --- .data and the constructor ---------------------------------------------------------------------------------


def test_data_is_a_detached_tensor_sharing_memory():
    x = T([1.0, 2.0])
    d = x.data
    assert isinstance(d, ta.Tensor) and not d.requires_grad and d.is_leaf
    d[0] = 5.0  # writes through .data reach x, and are not tracked (PyTorch's meaning)
    assert x.detach().numpy()[0] == 5.0 and x._version == 0
    assert isinstance(x.data.clone(), ta.Tensor) and x.data.sum().dtype == np.float64
    x.data = ta.tensor([7.0, 8.0], dtype=ta.float64)
    assert x.tolist() == [7.0, 8.0] and x.requires_grad


def test_constructor_follows_torch_tensor():
    assert ta.Tensor([1, 2]).dtype == ta.float32 and ta.tensor([1, 2]).dtype == ta.long
    assert ta.Tensor(2, 3).shape == (2, 3) and ta.Tensor().shape == (0,)
    assert ta.LongTensor([1, 2]).dtype == ta.int64 and ta.FloatTensor(3).shape == (3,)
    assert ta.tensor([True]).dtype == ta.bool and ta.full((2,), 3).dtype == ta.long


# --- type promotion ------------------------------------------------------------------------------------------

PROMOTION = [  # (a, b, result) with PyTorch's rule, written out
    (("float32", 1), 0.5, "float32"), (("int64", 1), 0.5, "float32"), (("int32", 1), 2, "int32"),
    (("float32", 1), np.float64(2.0), "float32"), (("int32", 1), np.float64(2.0), "float32"),
    (("int32", 1), ("float64", 0), "float64"), (("float32", 1), ("float64", 0), "float32"),
    (("uint8", 1), ("int64", 0), "uint8"), (("bool", 1), 3, "int64"), (("bool", 1), True, "bool"),
    (("float32", 1), ("float64", 1), "float64"), (("int8", 1), ("uint8", 1), "int16"),
    (("float16", 1), ("int64", 1), "float16"), (("int64", 0), 2.5, "float32"),
]


def _operand(spec):
    if isinstance(spec, tuple):
        dtype, ndim = spec
        return ta.tensor(np.ones((2,) * ndim, dtype))
    return spec


@pytest.mark.parametrize("a, b, want", PROMOTION)
def test_promotion_follows_pytorch(a, b, want):
    x, y = _operand(a), _operand(b)
    assert (x + y).dtype == np.dtype(want) and (y * x).dtype == np.dtype(want)
    assert ta.dtypes.result_type(x, y) == np.dtype(want)


def test_division_of_integers_is_float32_and_matmul_refuses_mixed_dtypes():
    assert (ta.tensor([1, 2]) / ta.tensor([2, 2])).dtype == ta.float32
    assert (ta.arange(4) * 0.5).dtype == ta.float32
    with pytest.raises(RuntimeError, match="same dtype, got float32 and int64"):
        ta.ones(2, 2) @ ta.tensor([[1, 2], [3, 4]])
    with pytest.raises(RuntimeError, match="same dtype"):
        nn.Linear(2, 2)(ta.tensor([[1, 2]]))


def test_a_float32_model_stays_float32_under_numpy_scalars():
    x = ta.randn(3, 4)
    y = (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True, unbiased=False) + np.float64(1e-5)).sqrt()
    assert y.dtype == ta.float32 and (x * np.int64(3)).dtype == ta.float32


# --- reductions that return (values, indices) ------------------------------------------------------------------


@given(data=st.data(), shape=shapes(1, 3, 4, min_side=1))
def test_max_min_sort_topk_kthvalue_median_match_numpy(data, shape):
    x = data.draw(arrays(shape))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    for name, arg, pick in (("max", np.argmax, np.max), ("min", np.argmin, np.min)):
        values, indices = getattr(T(x, False), name)(dim)
        np.testing.assert_array_equal(values.numpy(), pick(x, dim))
        np.testing.assert_array_equal(indices.numpy(), arg(x, dim))
        assert getattr(T(x, False), name)(dim, keepdim=True).values.shape == pick(x, dim, keepdims=True).shape
        assert ta.gradcheck(lambda t, name=name: getattr(t, name)(dim).values, [T(x)])
    s = T(x, False).sort(dim, descending=data.draw(st.booleans()))
    np.testing.assert_array_equal(np.take_along_axis(x, s.indices.numpy(), dim), s.values.numpy())
    k = data.draw(st.integers(1, shape[dim]))
    kth = T(x, False).kthvalue(k, dim)
    np.testing.assert_array_equal(kth.values.numpy(), np.take(np.sort(x, dim), k - 1, dim))
    med = T(x, False).median(dim)
    np.testing.assert_array_equal(med.values.numpy(), np.take(np.sort(x, dim), (shape[dim] - 1) // 2, dim))
    picked = np.take_along_axis(x, np.expand_dims(med.indices.numpy(), dim), dim)
    np.testing.assert_array_equal(picked, np.expand_dims(med.values.numpy(), dim))
    assert ta.gradcheck(lambda t: t.sort(dim).values * t.kthvalue(k, dim, keepdim=True).values, [T(x)])


def test_unpacking_max_dim_at_batch_one_and_nan():
    _, idx = ta.tensor([[0.1, 0.7, 0.2]]).max(dim=1)
    assert idx.tolist() == [1]
    values, indices = ta.tensor([1.0, np.nan, 3.0]).max(0)
    assert np.isnan(values.item()) and indices.item() == 1  # NaN wins, as in PyTorch
    assert np.isnan(ta.tensor([1.0, np.nan, 3.0, 0.0]).median().item())


# --- in-place ops and the version counter ----------------------------------------------------------------------

IN_PLACE = [  # (in-place call, the same out of place)
    (lambda t: t.add_(2.0), lambda t: t + 2.0),
    (lambda t: t.add_(T([1.0, 2.0, 3.0], False), alpha=2), lambda t: t + 2 * T([1.0, 2.0, 3.0], False)),
    (lambda t: t.sub_(1.0), lambda t: t - 1.0),
    (lambda t: t.mul_(3.0), lambda t: t * 3.0),
    (lambda t: t.div_(4.0), lambda t: t / 4.0),
    (lambda t: t.clamp_(-0.5, 0.5), lambda t: t.clamp(-0.5, 0.5)),
    (lambda t: t.masked_fill_(np.array([True, False, True]), 0.0),
     lambda t: t.masked_fill(np.array([True, False, True]), 0.0)),
    (lambda t: t.fill_(1.5), lambda t: t * 0 + 1.5),
    (lambda t: t.zero_(), lambda t: t * 0),
    (lambda t: t.index_fill_(0, ta.tensor([1]), -1.0), lambda t: t.masked_fill(np.array([False, True, False]), -1.0)),
    (lambda t: t.scatter_(0, ta.tensor([2, 0]), value=9.0), lambda t: t.masked_fill(np.array([1, 0, 1], bool), 9.0)),
    (lambda t: t.copy_(T([4.0, 5.0, 6.0], False)), lambda t: t * 0 + T([4.0, 5.0, 6.0], False)),
    (lambda t: t.__iadd__(1.0), lambda t: t + 1.0),
    (lambda t: t.__imul__(2.0), lambda t: t * 2.0),
]


@pytest.mark.parametrize("in_place, out_of_place", IN_PLACE)
def test_in_place_ops_equal_their_out_of_place_forms_with_gradients(in_place, out_of_place):
    x = [0.3, -1.2, 0.8]
    a, b = T(x), T(x)
    y = a * 1.0  # a non-leaf: in-place changes are recorded in the graph
    version = y._version
    assert in_place(y) is y and y._version == version + 1
    z = out_of_place(b * 1.0)
    np.testing.assert_allclose(y.detach().numpy(), z.detach().numpy())
    w = np.array([1.0, 2.0, 3.0])
    (y * T(w, False)).sum().backward()
    (z * T(w, False)).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy())


def test_in_place_on_a_leaf_that_requires_grad_raises_outside_no_grad():
    p = T([1.0, 2.0])
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        p.add_(1.0)
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        p[0] = 3.0
    with ta.no_grad():
        p -= 0.5 * ta.ones(2, dtype=ta.float64)  # a hand-written SGD step updates p itself
    assert p.tolist() == [0.5, 1.5] and p.requires_grad


def test_setitem_on_a_non_leaf_routes_the_gradient_to_the_value():
    x, v = T([1.0, 2.0, 3.0]), T([10.0])
    y = x * 2
    y[1] = v * 3
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 0.0, 2.0] and v.grad.tolist() == [3.0]


SAVES = [  # ops whose backward needs an input or output an in-place op can change: the error, never a wrong gradient
    lambda a, b: a * b, lambda a, b: a / b, lambda a, b: a @ b, lambda a, b: a.exp(), lambda a, b: a.sqrt(),
    lambda a, b: a.tanh(), lambda a, b: a.log(), lambda a, b: a ** 3, lambda a, b: a.sin(),
    lambda a, b: F.softmax(a, -1), lambda a, b: F.layer_norm(a, 2), lambda a, b: a.sigmoid(),
    lambda a, b: F.gelu(a), lambda a, b: F.log_softmax(a, -1),
]


@pytest.mark.parametrize("op", SAVES)
def test_backward_refuses_values_changed_in_place_after_they_were_saved(op):
    a0, b0 = T([[1.0, 2.0], [3.0, 4.0]]), T([[0.5, 1.5], [2.5, 3.5]])
    a, b = a0 * 1, b0 * 1
    out = op(a, b)
    for t in (a, b, out):
        t.data.add_(0)  # through .data: not counted, as in PyTorch
    out.sum().backward(retain_graph=True)
    with ta.no_grad():
        for t in (a, b, out):
            t.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_in_place_on_a_tensor_no_op_saved_is_accepted_as_in_pytorch():
    x = T([1.0, 2.0])
    y = x * 2
    z = y + 1  # Add saves nothing, so changing y afterwards changes no gradient: PyTorch accepts it
    y.add_(1.0)
    z.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]
    assert y.tolist() == [3.0, 5.0] and z.tolist() == [3.0, 5.0]


def test_views_share_the_version_counter():
    x = ta.zeros(2, 3)
    v = x[0]
    x.add_(1.0)
    assert v._version == x._version == 1 and v.tolist() == [1.0, 1.0, 1.0]
    v.fill_(5.0)
    assert x._version == 2 and x.numpy()[0].tolist() == [5.0] * 3


# --- hooks ---------------------------------------------------------------------------------------------------


def test_tensor_hooks_and_retain_grad():
    x = T([1.0, 2.0, 3.0])
    y = x * x  # dy/dx = 2x
    y.retain_grad()
    seen = []
    handle = y.register_hook(lambda g: seen.append(g.numpy().copy()))
    doubled = x.register_hook(lambda g: g * 2)  # a hook may replace the gradient
    y.sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [1, 1, 1])
    np.testing.assert_allclose(seen[0], [1, 1, 1])
    np.testing.assert_allclose(x.grad.numpy(), 2 * 2 * np.array([1.0, 2.0, 3.0]))
    handle.remove()
    doubled.remove()
    x.grad = None
    (x * x).sum().backward()
    assert len(seen) == 1 and x.grad.tolist() == [2.0, 4.0, 6.0]
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        ta.ones(2).register_hook(print)


def test_module_hooks_see_inputs_outputs_and_gradients():
    ta.manual_seed(0)
    lin = nn.Linear(3, 2).to(ta.float64)
    calls = []
    pre = lin.register_forward_pre_hook(lambda m, args: (args[0] * 2,))
    fwd = lin.register_forward_hook(lambda m, args, out: calls.append(("forward", out.shape)))
    bwd = lin.register_full_backward_hook(lambda m, gi, go: calls.append(("backward", gi[0].numpy(), go[0].numpy())))
    x = T(np.arange(6.0).reshape(2, 3))
    y = lin(x)
    np.testing.assert_allclose(y.detach().numpy(),
                               (2 * x.detach().numpy()) @ lin.weight.detach().numpy().T + lin.bias.detach().numpy())
    g = np.array([[1.0, -1.0], [0.5, 2.0]])
    y.backward(g)
    assert calls[0] == ("forward", (2, 2))
    np.testing.assert_allclose(calls[1][2], g)  # grad_output
    np.testing.assert_allclose(calls[1][1], g @ lin.weight.detach().numpy())  # grad_input: of the hooked input (2x)
    np.testing.assert_allclose(x.grad.detach().numpy(), 2 * g @ lin.weight.detach().numpy())
    for h in (pre, fwd, bwd):
        h.remove()
    lin(x)
    assert len(calls) == 2


# --- grad mode is per thread and nests ---------------------------------------------------------------------------


def test_no_grad_in_one_thread_leaves_another_thread_recording():
    entered, done = threading.Event(), threading.Event()
    results = {}

    def evaluate():
        with ta.no_grad():
            entered.set()
            done.wait(10)
            results["eval"] = (T([1.0]) * 2).requires_grad

    def train():
        entered.wait(10)
        results["train"] = (T([1.0]) * 2).requires_grad
        done.set()

    threads = [threading.Thread(target=evaluate), threading.Thread(target=train)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert results == {"eval": False, "train": True}


def test_one_no_grad_instance_nests_and_misuse_is_clear():
    guard = ta.no_grad()
    with guard:
        with guard:
            assert not ta.is_grad_enabled()
        assert not ta.is_grad_enabled()
    assert ta.is_grad_enabled()
    with ta.no_grad(), ta.enable_grad():
        assert ta.is_grad_enabled()
    ta.set_grad_enabled(False)
    assert not ta.is_grad_enabled()
    ta.set_grad_enabled(True)
    with ta.inference_mode():
        assert not (T([1.0]) * 2).requires_grad
    with pytest.raises(RuntimeError, match="without a matching __enter__"):
        ta.no_grad().__exit__(None, None, None)


# --- losses and statistics: closed forms and gradcheck in float64 -----------------------------------------------


@given(data=st.data(), shape=shapes(1, 3, 3, min_side=1))
def test_regression_losses_and_std_var(data, shape):
    x, y = data.draw(arrays(shape)), data.draw(arrays(shape))
    for red in ("mean", "sum", "none"):
        reduce = {"mean": np.mean, "sum": np.sum, "none": lambda a: a}[red]
        np.testing.assert_allclose(F.mse_loss(T(x), T(y, False), red).detach().numpy(), reduce((x - y) ** 2))
        np.testing.assert_allclose(F.l1_loss(T(x), T(y, False), red).detach().numpy(), reduce(np.abs(x - y)))
        sig = 1 / (1 + np.exp(-x))
        t = (y > 0).astype(float)
        bce = -(t * np.log(sig) + (1 - t) * np.log(1 - sig))
        with_logits = F.binary_cross_entropy_with_logits(T(x), T(t, False), reduction=red)
        np.testing.assert_allclose(with_logits.detach().numpy(), reduce(bce), rtol=1e-10)
        plain = F.binary_cross_entropy(T(sig), T(t, False), reduction=red)
        np.testing.assert_allclose(plain.detach().numpy(), reduce(bce), rtol=1e-8)
    assert ta.gradcheck(lambda a, b: F.mse_loss(a, b) + F.l1_loss(a, b + 0.01), [T(x), T(y)])
    assert ta.gradcheck(lambda a: F.binary_cross_entropy_with_logits(a, T((y > 0) * 1.0, False),
                                                                      pos_weight=2.0), [T(x)])
    dim = data.draw(st.integers(0, len(shape) - 1))
    if shape[dim] > 1:
        np.testing.assert_allclose(T(x, False).std(dim).numpy(), np.std(x, dim, ddof=1))
        np.testing.assert_allclose(T(x, False).var(dim, correction=0).numpy(), np.var(x, dim))
        np.testing.assert_allclose(T(x, False).var(dim, unbiased=False).numpy(), np.var(x, dim))
        assert ta.gradcheck(lambda a: a.std(dim) + a.var(dim, keepdim=True).sum(), [T(x)])


@given(data=st.data(), n=st.integers(1, 4), classes=st.integers(1, 4), extra=st.sampled_from([(), (2,)]))
def test_classification_losses_match_closed_forms(data, n, classes, extra):
    x = data.draw(arrays((n, classes) + extra))
    target = np.asarray(data.draw(st.lists(st.sampled_from(list(range(classes)) + [-100]),
                                           min_size=n * int(np.prod(extra)), max_size=n * int(np.prod(extra)))),
                        np.int64).reshape((n,) + extra)
    w = data.draw(arrays((classes,), 0.1, 2.0))
    logp = x - np.log(np.exp(x).sum(1, keepdims=True))  # log-softmax over the class dim (1)
    counted = target != -100
    safe = np.where(counted, target, 0)
    picked = np.take_along_axis(logp, safe[:, None], 1)[:, 0]
    wy = np.where(counted, w[safe], 0)
    nll = -picked * wy
    expected_mean = nll.sum() / wy.sum() if wy.sum() else np.nan
    np.testing.assert_allclose(F.nll_loss(T(logp, False), target, ta.tensor(w)).numpy(), expected_mean, rtol=1e-10,
                               atol=1e-12)
    np.testing.assert_allclose(F.cross_entropy(T(x, False), target, ta.tensor(w), reduction="none").numpy(), nll,
                               rtol=1e-10, atol=1e-12)
    e = 0.2
    smooth = -(logp * w.reshape((classes,) + (1,) * len(extra))).sum(1) * counted / classes
    ls = (1 - e) * nll + e * smooth
    got = F.cross_entropy(T(x, False), target, ta.tensor(w), label_smoothing=e, reduction="sum")
    np.testing.assert_allclose(got.numpy(), ls.sum(), rtol=1e-10, atol=1e-12)
    probs = np.exp(data.draw(arrays(x.shape)))
    probs /= probs.sum(1, keepdims=True)
    np.testing.assert_allclose(F.cross_entropy(T(x, False), T(probs, False)).numpy(),
                               (-(probs * logp).sum(1)).mean(), rtol=1e-10, atol=1e-12)
    if counted.any():
        assert ta.gradcheck(lambda a: F.cross_entropy(a, target, ta.tensor(w), label_smoothing=e), [T(x)])
    assert ta.gradcheck(lambda a: F.cross_entropy(a, T(probs, False), label_smoothing=e), [T(x)])


def test_kl_div_pad_one_hot():
    x = np.log(np.array([[0.2, 0.3, 0.5], [0.6, 0.4, 0.0 + 1e-9]]))
    t = np.array([[0.1, 0.0, 0.9], [0.5, 0.5, 0.0]])
    point = np.where(t > 0, t * (np.log(np.where(t > 0, t, 1)) - x), 0)
    np.testing.assert_allclose(F.kl_div(T(x), T(t, False), reduction="sum").detach().numpy(), point.sum())
    np.testing.assert_allclose(F.kl_div(T(x), T(t, False), reduction="batchmean").detach().numpy(), point.sum() / 2)
    logged = F.kl_div(T(x), T(np.log(t + 1e-3), False), log_target=True, reduction="none")
    np.testing.assert_allclose(logged.detach().numpy(), (t + 1e-3) * (np.log(t + 1e-3) - x))
    assert ta.gradcheck(lambda a, b: F.kl_div(a, b.abs()), [T(x), T(t + 0.1)])
    a = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(F.pad(T(a, False), (1, 2)).numpy(), np.pad(a, ((0, 0), (1, 2))))
    np.testing.assert_array_equal(F.pad(T(a, False), (0, 0, 1, 0), value=-1.0).numpy(),
                                  np.pad(a, ((1, 0), (0, 0)), constant_values=-1))
    np.testing.assert_array_equal(F.pad(T(a, False), (-1, 1)).numpy(), np.pad(a[:, 1:], ((0, 0), (0, 1))))
    assert ta.gradcheck(lambda z: F.pad(z, (2, 1, 0, 1)), [T(a)])
    np.testing.assert_array_equal(F.one_hot(ta.tensor([0, 2, 1])).numpy(), np.eye(3, dtype=np.int64)[[0, 2, 1]])
    with pytest.raises(IndexError, match="class values must be in"):
        F.one_hot(ta.tensor([3]), 2)


# --- data loading ---------------------------------------------------------------------------------------------


def test_dataloader_batches_shuffles_reproducibly_and_collates():
    xs, ys = ta.arange(10).float().reshape(10, 1), ta.arange(10)
    loader = DataLoader(TensorDataset(xs, ys), batch_size=4)
    batches = list(loader)
    assert len(loader) == 3 and [b[0].shape for b in batches] == [(4, 1), (4, 1), (2, 1)]
    assert batches[2][1].tolist() == [8, 9] and batches[0][1].dtype == ta.long
    assert len(DataLoader(TensorDataset(xs, ys), batch_size=4, drop_last=True)) == 2
    ta.manual_seed(3)
    first = [b[1].tolist() for b in DataLoader(TensorDataset(xs, ys), batch_size=5, shuffle=True)]
    ta.manual_seed(3)
    again = [b[1].tolist() for b in DataLoader(TensorDataset(xs, ys), batch_size=5, shuffle=True)]
    assert first == again and sorted(sum(first, [])) == list(range(10)) and sum(first, []) != list(range(10))

    class Pairs(Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return {"x": np.full(2, i, np.float32), "n": i, "w": 0.5 * i, "name": f"s{i}"}

    batch = next(iter(DataLoader(Pairs(), batch_size=3)))
    assert batch["x"].shape == (3, 2) and batch["n"].dtype == ta.long and batch["w"].dtype == ta.float64
    assert batch["name"] == ["s0", "s1", "s2"]

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(5))

    assert [b.tolist() for b in DataLoader(Stream(), batch_size=2)] == [[0, 1], [2, 3], [4]]
    parts = random_split(TensorDataset(xs, ys), [0.7, 0.3], generator=1)
    assert [len(p) for p in parts] == [7, 3]
    assert sorted(int(p[i][1]) for p in parts for i in range(len(p))) == list(range(10))
    same = [b[0].tolist() for b in DataLoader(TensorDataset(xs), batch_size=3, num_workers=2, persistent_workers=True,
                                              prefetch_factor=2, pin_memory=True)]
    assert same == [b[0].tolist() for b in DataLoader(TensorDataset(xs), batch_size=3)]  # workers: the same batches
    with pytest.raises(ValueError, match="num_workers=2 with an IterableDataset is not supported"):
        DataLoader(Stream(), num_workers=2)
    with pytest.raises(ValueError, match="num_workers=1 with a worker_init_fn is not supported"):
        DataLoader(TensorDataset(xs), num_workers=1, worker_init_fn=print)
    with pytest.raises(ValueError, match="num_workers must be a non-negative int"):
        DataLoader(TensorDataset(xs), num_workers=-1)


# --- the namespace ----------------------------------------------------------------------------------------------


def test_module_level_functions_are_the_methods():
    x = ta.randn(3, 4)
    assert ta.matmul(x, x.T).shape == (3, 3) and ta.equal(ta.exp(x), x.exp()) and ta.equal(ta.sum(x, 1), x.sum(1))
    assert ta.max(x, 1).indices.tolist() == x.max(1).indices.tolist() and ta.equal(ta.softmax(x, -1), x.softmax(-1))
    assert ta.equal(ta.cat([x, x]), ta.cat([x, x], 0)) and ta.equal(ta.transpose(x, 0, 1), x.T)
    assert ta.randint(0, 5, (3,)).dtype == ta.long and ta.empty(2, 3).shape == (2, 3)
    assert x.dtype == ta.float and x.long().dtype == ta.long and x.type() == "torch.FloatTensor"
    assert x.to("cpu") is x and x.cpu() is x and x.device == ta.device("cpu") and str(x.device) == "cpu"
    assert not ta.cuda.is_available() and x.to(ta.float64).dtype == ta.float64 and x.to(x.double()).dtype == ta.double
    assert ta.zeros(2, device="cpu").shape == (2,)
    with pytest.raises(RuntimeError, match="CPU only"):
        x.to("cuda")
    with pytest.raises(RuntimeError, match="CPU only"):
        ta.zeros(2, device="cuda:0")
    with pytest.raises(AttributeError, match="torch.tensordot is not supported here.*use reshape and matmul"):
        ta.tensordot  # noqa: B018
    causal, padding = ta.causal_mask(3), ta.tensor([True, True, False])
    assert (causal & padding).tolist() == np.logical_and(causal.numpy(), padding.numpy()).tolist()
    assert (~padding).tolist() == [False, False, True] and (causal | padding).dtype == ta.bool
    from tinygrad_attn.optim.lr_scheduler import LambdaLR  # an importable module, as torch.optim.lr_scheduler

    assert LambdaLR is ta.optim.LambdaLR


def test_a_complex_number_is_refused_not_truncated():
    x = ta.ones(2)
    for op in (lambda: x + 1j, lambda: 1j * x, lambda: x * np.complex64(2)):
        with pytest.raises(TypeError, match="complex numbers are not supported"):
            op()


def test_state_dict_values_are_detached_tensors_sharing_memory():
    lin = ta.nn.Linear(2, 3)
    state = lin.state_dict()
    assert isinstance(state["weight"], ta.Tensor) and not state["weight"].requires_grad
    snapshot = state["weight"].clone()
    with ta.no_grad():
        lin.weight.add_(1.0)
    np.testing.assert_array_equal(state["weight"].numpy(), snapshot.numpy() + 1)  # shares memory, as PyTorch


# --- the graph as PyTorch shows it: grad_fn's name and next_functions -------------------------------------------


def _walk(fn):
    """The nodes' names depth-first, as a program drawing the graph reads them ('None' for no gradient)."""
    if fn is None:
        return ["None"]
    names = [fn.name()]
    for parent, index in fn.next_functions:
        assert index == 0
        names += _walk(parent)
    return names


def _graph(lib):
    x = lib.tensor(np.array([0.5, 1.5, 2.0]), requires_grad=True)
    c = lib.tensor(np.array([1.0, 2.0, 3.0]))
    return x, ((x * 2 + c - x / 3).exp().log().tanh().sigmoid().relu() ** 2).neg().sum()


def test_grad_fn_names_and_next_functions():
    x, y = _graph(ta)
    names = _walk(y.grad_fn)
    assert names[:3] == ["SumBackward0", "NegBackward0", "PowBackward0"] and names.count("None") == 3
    assert repr(y.grad_fn).startswith("<SumBackward0 object at 0x") and "grad_fn=<SumBackward0>" in repr(y)
    node = y.grad_fn
    while node.name() != "SubBackward0":  # down the first inputs: Neg, Pow, Relu, ..., Exp, Sub
        node = node.next_functions[0][0]
    add, div = (f for f, _ in node.next_functions)
    assert (add.name(), div.name()) == ("AddBackward0", "DivBackward0")
    accumulate = div.next_functions[0][0]
    assert accumulate.name() == "torch::autograd::AccumulateGrad" and accumulate.variable is x
    assert accumulate.next_functions == () and div.next_functions[1] == (None, 0)  # the 3: no gradient


@pytest.mark.torch_parity
def test_grad_fn_graph_matches_pytorchs():
    torch = pytest.importorskip("torch")
    assert _walk(_graph(ta)[1].grad_fn) == _walk(_graph(torch)[1].grad_fn)


@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_keeps_its_own_targets(weighted):
    """The caller's target array may be refilled (the next batch) before backward: the gradient is the
    targets' at the forward."""
    logits = np.random.default_rng(0).normal(size=(3, 4))
    weight = np.array([1.0, 2.0, 0.5, 1.5]) if weighted else None
    expected = T(logits)
    F.cross_entropy(expected, np.array([0, 2, 1]), weight=weight).backward()
    x, target = T(logits), np.array([0, 2, 1])
    loss = F.cross_entropy(x, target, weight=weight)
    target[:] = [3, 3, 3]
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), expected.grad.numpy())
