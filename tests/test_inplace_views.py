"""Views and in-place ops exactly as PyTorch's: writes through views join the graph (CopySlices), a value an op
saved and then changed is refused at backward, and random programs of ops, views and in-place writes give
PyTorch's gradients or PyTorch's error."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinygrad_attn as ta


def leaf(a):
    return ta.tensor(np.asarray(a, dtype=np.float64), requires_grad=True)


# --- writes of a grad-requiring value into a buffer that does not require grad -------------------------------


@pytest.mark.parametrize("write", ["copy_", "add_", "mul_", "setitem", "scatter_", "transpose_copy",
                                   "unsqueeze_add", "view_then_slice"])
def test_a_write_through_a_view_joins_the_graph(write):
    w = leaf([1.0, 2.0])
    buf = ta.ones(4, dtype=ta.float64)
    if write == "copy_":
        buf[1:3].copy_(w * 1)
        expected = [2.0, 3.0]
    elif write == "add_":
        buf[1:3].add_(w * w)
        expected = [2 * 2.0, 2 * 2 * 3.0]
    elif write == "mul_":
        buf[1:3].mul_(w)
        expected = [2.0, 3.0]
    elif write == "setitem":
        buf[2] = w.sum()
        expected = [3.0, 3.0]
    elif write == "scatter_":
        buf.scatter_(0, ta.tensor([0, 3]), w)
        expected = [1.0, 4.0]
    elif write == "transpose_copy":
        grid = ta.zeros(2, 2, dtype=ta.float64)
        grid.T[0].copy_(w)  # column 0 of grid
        loss = (grid * ta.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=ta.float64)).sum()
        loss.backward()
        np.testing.assert_allclose(w.grad.numpy(), [1.0, 3.0])
        return
    elif write == "unsqueeze_add":
        buf.unsqueeze(0)[0, :2].add_(w)
        expected = [1.0, 2.0]
    else:
        buf.view(2, 2)[1].copy_(w * 3)
        expected = [3 * 3.0, 3 * 4.0]
    (buf * ta.tensor([1.0, 2.0, 3.0, 4.0], dtype=ta.float64)).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), expected)


def test_rnn_style_outputs_written_column_by_column():
    w = leaf([[0.5, -1.0], [2.0, 0.25]])
    h = leaf([1.0, -1.0])
    out = ta.zeros(2, 3, dtype=ta.float64)
    for t in range(3):
        h = (w @ h).tanh()
        out[:, t] = h
    loss = (out * out).sum()
    loss.backward()
    assert ta.gradcheck(lambda w_, h0: _rnn(w_, h0), [leaf(w.detach().numpy()), leaf([1.0, -1.0])])


def _rnn(w, h):
    out = ta.zeros(2, 3, dtype=ta.float64)
    for t in range(3):
        h = (w @ h).tanh()
        out[:, t] = h
    return (out * out).sum()


def test_old_views_of_a_base_read_its_new_value_after_an_in_place_change():
    x = leaf([1.0, 2.0, 3.0])
    y = x * 1
    early = y[:2]  # made before the write
    y[2:].mul_(x[2:])
    (early * 10).sum().backward(retain_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), [10.0, 10.0, 0.0])
    x.grad = None
    (y * y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0, 4 * 27.0])  # y_2 = x_2^2: d(x_2^4)/dx_2 = 4 x_2^3


# --- refused as PyTorch refuses -------------------------------------------------------------------------------


def test_parameters_changed_between_forward_and_backward_are_refused():
    ta.manual_seed(0)
    layer = ta.nn.Linear(3, 2)
    x = ta.randn(4, 3)
    for change in ("step", "init", "load_state_dict"):
        loss = (layer(x) @ layer.weight).sum()  # MatMul saved the weight itself
        if change == "step":
            loss.backward(retain_graph=True)
            ta.optim.SGD(layer.parameters(), lr=0.1).step()
        elif change == "init":
            ta.nn.init.normal_(layer.weight)
        else:
            layer.load_state_dict({k: v.detach() * 2 for k, v in layer.state_dict().items()})
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()


@pytest.mark.parametrize("what", ["index", "mask", "scatter_index", "embedding_input", "target_rows"])
def test_index_and_mask_tensors_changed_after_use_are_refused(what):
    x = leaf(np.arange(6.0).reshape(2, 3))
    if what == "index":
        idx = ta.tensor([0, 2])
        y = x[:, idx]
        idx[0] = 1
    elif what == "mask":
        mask = ta.tensor([[True, False, False], [False, True, False]])
        y = x.masked_fill(mask, 0.0)
        mask[0, 1] = True
    elif what == "scatter_index":
        idx = ta.tensor([[0], [2]])
        y = x.scatter(1, idx, x * 2)
        idx[0, 0] = 1
    elif what == "embedding_input":
        emb = ta.nn.Embedding(5, 2)
        idx = ta.tensor([1, 2])
        y = emb(idx)
        idx[0] = 3
    else:
        rows = ta.tensor([1, 0])
        y = x[rows]
        rows.fill_(0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_numpy_of_a_tensor_that_requires_grad_is_refused():
    x = leaf([1.0])
    with pytest.raises(RuntimeError, match=r"Use tensor.detach\(\).numpy\(\) instead"):
        x.numpy()
    assert x.detach().numpy().tolist() == [1.0]
    assert (x * 2).detach().numpy().tolist() == [2.0]


def test_leaves_and_views_of_leaves_refuse_in_place_changes_while_recording():
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="a leaf tensor that requires grad"):
        x.add_(1)
    with pytest.raises(RuntimeError, match="a view of a leaf tensor that requires grad"):
        x[0:1].add_(1)
    with ta.no_grad():
        x[0:1].add_(1)
    assert x.tolist() == [2.0, 2.0]


def test_saved_value_changed_in_place_is_refused_naming_the_op():
    x = leaf([1.0, 2.0])
    y = x.exp()  # Exp saved its output
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation.*Exp"):
        y.sum().backward()


# --- random programs against PyTorch --------------------------------------------------------------------------

STEPS = st.lists(st.tuples(st.sampled_from(["mul", "exp", "sin", "slice", "transpose", "reshape", "unsqueeze",
                                            "iadd", "imul", "copy", "setitem", "zero", "detach_write"]),
                           st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=8)


def _run(lib, steps, w0, b0):
    """The program on `lib` (tinygrad_attn or torch): the pool's tensors after each step, then a loss of all of them
    and w's gradient; or the kind of error the library raised."""
    w = lib.tensor(w0, requires_grad=True)
    pool = [w, lib.tensor(b0), w * 1.5]
    try:
        for name, i, j in steps:
            a, b = pool[i % len(pool)], pool[j % len(pool)]
            # Both libraries make a view's grad_fn again from its base when it is read; whether an in-place op
            # on a view whose base joined the graph since is refused ("a leaf Variable ...") depends on that
            # read in PyTorch, along paths ours does not all follow. Reading it first, every time, compares
            # the two libraries' rules rather than that timing.
            _ = a.grad_fn
            if name == "mul":
                pool.append(a * b.sum())
            elif name == "exp":
                pool.append((a * 0.1).exp())
            elif name == "sin":
                pool.append(a.sin())
            elif name == "slice" and a.ndim >= 1 and a.shape[0] > 1:
                pool.append(a[1:])
            elif name == "transpose" and a.ndim == 2:
                pool.append(a.transpose(0, 1))
            elif name == "reshape":
                pool.append(a.reshape(-1))
            elif name == "unsqueeze":
                pool.append(a.unsqueeze(0))
            elif name == "iadd":
                a.add_(b.sum() * 0.5)
            elif name == "imul":
                a.mul_(b.mean())
            elif name == "copy":
                a.copy_(b.sum() + 0.25)
            elif name == "setitem" and a.ndim >= 1 and a.shape[0] > 0:
                a[0] = b.sum() * 0.5
            elif name == "zero":
                a.zero_()
            elif name == "detach_write":
                a.detach().mul_(0.5)
        loss = sum(((t * (k + 1)).sum() for k, t in enumerate(pool)), start=pool[0].sum() * 0)
        loss.backward()
    except RuntimeError:
        return "RuntimeError", None
    return [t.detach().numpy().copy() for t in pool], (None if w.grad is None else w.grad.numpy().copy())


@pytest.mark.torch_parity
@settings(max_examples=120, deadline=None)
@given(steps=STEPS, seed=st.integers(0, 2**16))
def test_random_programs_of_views_and_in_place_writes_match_pytorch(steps, seed):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    w0, b0 = rng.normal(size=(3, 2)), rng.normal(size=(3, 2))
    ours = _run(ta, steps, w0, b0)
    theirs = _run(torch, steps, w0, b0)
    if isinstance(theirs[0], str) or isinstance(ours[0], str):
        assert isinstance(ours[0], str) and ours[0] == theirs[0], (ours, theirs)
        return
    for a, b in zip(ours[0], theirs[0]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    if theirs[1] is None:
        assert ours[1] is None or not np.any(ours[1])
    else:
        np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-9, atol=1e-12)


def test_writes_through_views_are_gradchecked_to_second_order():
    """CopySlices (a write through a view) against finite differences, first and second derivatives."""
    weights = ta.tensor(np.arange(1.0, 7.0).reshape(2, 3), dtype=ta.float64)

    def written(w):
        buf = ta.zeros(2, 3, dtype=ta.float64)
        buf.T[1:].copy_((w * w).T)  # columns 1 and 2 of buf, through a transposed view
        buf[:, 0].add_(w.sum(1))  # column 0, through a strided view
        return (buf * weights).sum() * buf.sum()

    w = ta.tensor(np.random.default_rng(0).normal(size=(2, 2)), requires_grad=True)
    assert ta.gradcheck(written, [w]) and ta.gradgradcheck(written, [w])


@pytest.mark.torch_parity
def test_a_view_made_before_its_base_joined_the_graph_as_pytorch():
    """Written in place without being read, such a view is refused, as PyTorch refuses it; once its grad_fn
    is read (made again from the base), the write goes through and the gradients agree."""
    torch = pytest.importorskip("torch")
    grads = []
    for lib in (ta, torch):
        w = lib.tensor(np.arange(6.0).reshape(3, 2), requires_grad=True)
        base = lib.tensor(np.zeros((3, 2)))
        view = base[1:]
        base.add_(w.sum())
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            view.add_(1.0)
        base = lib.tensor(np.zeros((3, 2)))
        view = base[1:]
        base.add_(w.sum() * w[0, 1])
        assert view.grad_fn is not None  # read: the view is made again from its base
        view.mul_(w[2, 0])
        (base * lib.tensor(np.arange(6.0).reshape(3, 2))).sum().backward()
        grads.append(w.grad.numpy().copy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12)
