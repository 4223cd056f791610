"""The autograd engine: graph walking, accumulation, no_grad, retain_graph, dtypes and errors."""

import numpy as np
import pytest

import tinygrad_attn as ta
from tinygrad_attn.engine import Function  # the array-level Function: its backward returns arrays


def test_leaf_gradient_accumulates_over_backward_calls():
    x = ta.Tensor([1.0, 2.0], requires_grad=True)
    (x * 3.0).sum().backward()
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3 + 2, 3 + 4])


def test_shared_subexpression_sums_both_paths():
    x = ta.tensor(2.0, requires_grad=True)
    y = x * x  # used twice below
    z = y * 3.0 + y.exp()
    z.backward()
    expected = 3 * 2 * 2.0 + np.exp(4.0) * 2 * 2.0  # dz/dy * dy/dx
    np.testing.assert_allclose(x.grad.item(), expected, rtol=1e-6)


def test_intermediates_keep_no_grad_and_leaves_are_leaves():
    x = ta.Tensor([1.0, 2.0], requires_grad=True)
    y = x * 2.0
    y.sum().backward()
    assert y.grad is None and not y.is_leaf and x.is_leaf
    assert x.grad.grad is None and not x.grad.requires_grad


def test_no_grad_context_and_decorator():
    x = ta.Tensor([1.0], requires_grad=True)
    with ta.no_grad():
        assert not (x * 2).requires_grad and not ta.is_grad_enabled()
    assert ta.is_grad_enabled() and (x * 2).requires_grad

    @ta.no_grad()
    def double(t):
        return t * 2

    assert not double(x).requires_grad


def test_detach_cuts_the_graph():
    x = ta.Tensor([3.0], requires_grad=True)
    y = x * x.detach()  # d/dx = x.detach() only
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0])


def test_retain_graph_and_second_backward_error():
    x = ta.Tensor([1.0, 2.0], requires_grad=True)
    loss = (x.exp() * x).sum()
    loss.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first)
    with pytest.raises(RuntimeError, match="second time.*retain_graph=True"):
        loss.backward()


def test_chain_of_20000_ops_has_no_recursion_limit():
    x = ta.tensor(1.0, requires_grad=True)
    y = x
    for _ in range(20_000):
        y = y + 1.0
    y.backward()
    assert x.grad.item() == 1.0


def test_backward_errors():
    x = ta.Tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"only for scalar outputs.*\(2,\)"):
        (x * 2).backward()
    with pytest.raises(RuntimeError, match="does not require grad"):
        ta.Tensor([1.0]).backward()
    with pytest.raises(ValueError, match=r"grad has shape \(3,\)"):
        (x * 2).backward(np.ones(3))
    (x * 2).backward(np.array([1.0, 10.0]))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 20.0])


def test_construction_and_dtypes():
    assert ta.tensor(1.5).dtype == np.float32
    assert ta.Tensor([[1.0, 2.0]]).dtype == np.float32
    assert ta.Tensor(np.zeros(2, np.float64)).dtype == np.float64
    assert ta.Tensor([1, 2]).dtype == np.float32 and ta.tensor([1, 2]).dtype == np.int64  # as torch.Tensor / tensor
    assert ta.Tensor(2, 3).shape == (2, 3) and ta.Tensor(2, 3).dtype == np.float32  # sizes, as torch.Tensor(2, 3)
    assert ta.Tensor(np.array([True])).dtype == np.bool_
    assert ta.Tensor([1.0], dtype=np.float64).dtype == np.float64
    with pytest.raises(TypeError, match="for a 0-d tensor use ta.tensor"):
        ta.Tensor(1.5)
    with pytest.raises(TypeError, match="only floating-point tensors can require grad.*int"):
        ta.tensor([1, 2], requires_grad=True)
    with pytest.raises(TypeError, match="unsupported dtype"):
        ta.Tensor(["a"])


def test_type_promotion_and_grads_keep_dtype():
    a = ta.Tensor(np.ones(2, np.float32), requires_grad=True)
    b = ta.Tensor(np.ones(2, np.float64), requires_grad=True)
    c = a * b
    assert c.dtype == np.float64
    c.sum().backward()
    assert a.grad.dtype == np.float32 and b.grad.dtype == np.float64
    assert (a * 2).dtype == np.float32 and (2.0 - a).dtype == np.float32


def test_attributes_and_conversions():
    x = ta.Tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    assert x.shape == (2, 3) and x.ndim == 2 and x.size() == (2, 3) and x.size(-1) == 3
    assert x.numel() == 6 and len(x) == 2
    assert np.asarray(x) is x.detach().numpy() and x.detach().numpy() is x.detach().numpy()
    assert ta.tensor(4.0).item() == 4.0
    assert "requires_grad=True" in repr(x) and "grad_fn=<MulBackward0>" in repr(x * 2)
    assert isinstance(np.ones((2, 3)) + x, ta.Tensor)  # ndarray + Tensor calls Tensor.__radd__
    np.testing.assert_array_equal((np.ones((2, 3)) + x).detach().numpy(), 1 + x.detach().numpy())
    with pytest.raises(ValueError, match="one element"):
        x.item()


def test_shape_errors_name_the_shapes():
    a, b = ta.Tensor(np.zeros((2, 3))), ta.Tensor(np.zeros((4, 5)))
    with pytest.raises(ValueError, match=r"matmul: shapes \(2, 3\) and \(4, 5\) are not aligned"):
        a @ b
    with pytest.raises(ValueError, match=r"cannot reshape a tensor of shape \(2, 3\) \(size 6\) into \(4, 2\)"):
        a.reshape(4, 2)
    with pytest.raises(IndexError, match="dim 2 is out of range for a tensor with 2 dims"):
        a.transpose(0, 2)
    with pytest.raises(IndexError, match="dim 5"):
        a.sum(dim=5)
    with pytest.raises(ValueError, match=r"add: shapes \(2, 3\) and \(4, 5\) cannot be broadcast"):
        a + b
    with pytest.raises(ValueError, match="cat: shapes"):
        ta.cat([a, b], 0)
    with pytest.raises(IndexError, match=r"shape \(2, 3\)"):
        a[5]


def test_custom_function_uses_the_same_pattern():
    class Cube(ta.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**3

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 3 * x**2 * grad

    x = ta.Tensor(np.array([1.0, -2.0]), requires_grad=True)
    Cube.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 12.0])
    assert ta.gradcheck(lambda t: Cube.apply(t), [ta.Tensor(np.array([0.3, -1.2]), requires_grad=True)])


# A leaf's first gradient is the backward's own array when nothing else holds it (PyTorch's AccumulateGrad
# steals it too), else a copy: never memory that anything else can see or change.

class _Handing(Function):
    """y = x, whose backward hands out `made[0]` (an array the test may or may not keep a reference to)."""

    made: list = []

    @staticmethod
    def forward(ctx, x):
        return x.copy()

    @staticmethod
    def backward(ctx, grad):
        return _Handing.made.pop()


@pytest.mark.parametrize("size", [3, 1 << 16])  # numpy's own array, and one in the library's pooled memory
def test_a_gradient_nobody_else_holds_becomes_grad_as_it_is(size):
    from tinygrad_attn.kernels import buffers

    x = ta.Tensor(np.ones(size, np.float32), requires_grad=True)
    out = np.full(size, 2.0, np.float32) if size < 100 else buffers.empty((size,), np.float32)
    out[...] = 2.0
    address = out.__array_interface__["data"][0]
    _Handing.made = [out]
    del out  # the backward's array is now held by the engine alone
    _Handing.apply(x).backward(np.ones(size, np.float32))
    assert x.grad._data.__array_interface__["data"][0] == address  # kept, not copied
    np.testing.assert_array_equal(x.grad.numpy(), 2.0)


def test_a_gradient_held_elsewhere_is_copied():
    x = ta.Tensor(np.ones(5, np.float32), requires_grad=True)
    kept = np.full(5, 2.0, np.float32)
    _Handing.made = [kept]
    _Handing.apply(x).backward(np.ones(5, np.float32))
    kept[...] = 7.0  # the caller's array changes later: the gradient does not
    np.testing.assert_array_equal(x.grad.numpy(), 2.0)


@pytest.mark.parametrize("size", [4, 1 << 16])
def test_leaves_never_share_a_gradient_or_the_callers(size):
    a, b = (ta.Tensor(np.ones(size, np.float32), requires_grad=True) for _ in range(2))
    g = np.ones(size, np.float32)
    ta.functional.relu(a + b).backward(g)  # Add hands one array to both leaves
    assert not np.shares_memory(a.grad._data, b.grad._data)
    c = ta.Tensor(np.ones(size, np.float32), requires_grad=True)
    c.clone().backward(g)  # Clone's backward passes the caller's gradient on as it is
    assert not np.shares_memory(c.grad._data, g)
    c.grad = None
    c.backward(g)
    assert not np.shares_memory(c.grad._data, g)
    views = []
    d = ta.Tensor(np.ones(size, np.float32), requires_grad=True)
    d.register_hook(lambda grad: views.append(grad))  # a hook that keeps the gradient it saw
    (d * 2.0).backward(g)
    assert not np.shares_memory(d.grad._data, views[0]._data)


def test_a_view_of_pooled_memory_seen_elsewhere_is_copied():
    from tinygrad_attn.kernels import buffers

    n = 1 << 15
    x = ta.Tensor(np.ones(n, np.float32), requires_grad=True)
    both = buffers.empty((2, n), np.float32)
    both[...] = 2.0
    kept = [both]  # the whole buffer stays visible here
    _Handing.made = [both[0]]
    del both
    _Handing.apply(x).backward(np.ones(n, np.float32))
    kept[0][...] = 5.0
    np.testing.assert_array_equal(x.grad.numpy(), 2.0)


def test_a_view_of_the_callers_bytes_is_copied():
    n = 1 << 15
    x = ta.Tensor(np.ones(n, np.float32), requires_grad=True)
    raw = [np.zeros(4 * n, np.uint8)]  # bytes the caller keeps (held as a pooled buffer would be: by a list)
    raw[0].view(np.float32)[...] = 2.0
    _Handing.made = [raw[0].view(np.float32)]
    _Handing.apply(x).backward(np.ones(n, np.float32))
    raw[0][...] = 0
    np.testing.assert_array_equal(x.grad.numpy(), 2.0)


def test_a_number_made_into_an_operand_cannot_be_changed_in_place():
    x = ta.Tensor(np.ones(3, np.float32), requires_grad=True)
    y = x * 0.5
    constant = y.grad_fn.inputs[1]  # the 0.5, as the op holds it
    with pytest.raises(RuntimeError, match="cannot be changed in place"):
        constant.mul_(2.0)
    with pytest.raises(RuntimeError, match="cannot be changed in place"):
        constant[...] = 3.0
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 0.5)


_GRAPHS = {  # ops that save their output, their input, a view of either, or several arrays
    "sigmoid": lambda x: x.sigmoid(), "tanh": lambda x: x.tanh(), "exp": lambda x: x.exp(),
    "sqrt": lambda x: (x * x + 1.0).sqrt(), "softmax": lambda x: x.softmax(-1),
    "log_softmax": lambda x: ta.nn.functional.log_softmax(x, -1), "mul": lambda x: x * x,
    "layer_norm": lambda x: ta.nn.functional.layer_norm(x, (4,)),
    "rms_norm": lambda x: ta.nn.functional.rms_norm(x, (4,)),
    "gelu": lambda x: ta.nn.functional.gelu(x), "relu": lambda x: ta.nn.functional.relu(x),
    "views": lambda x: x.reshape(3, 2, 4).transpose(0, 1)[0].unbind(0)[1] * 2.0,
    "stack": lambda x: ta.stack([x, x], -1), "linear": lambda x: ta.nn.functional.linear(x, x[:3]),
    "attention": lambda x: ta.nn.functional.scaled_dot_product_attention(*(x.reshape(1, 2, 3, 4),) * 3, is_causal=True),
    "cross_entropy": lambda x: ta.nn.functional.cross_entropy(x, ta.tensor([0, 1, 2, 3, 0, 1])),
}


@pytest.mark.parametrize("op", sorted(_GRAPHS))
def test_a_graph_is_freed_by_reference_counts_alone(op):
    """Nothing an op records (its saved arrays, their versions, its inputs) holds its own output: dropping the
    output frees the graph at once, without the garbage collector (as in PyTorch, whose saved outputs do not
    hold their node). A cycle would keep every graph until a collection, which walks all of them."""
    import gc
    import weakref

    x = ta.Tensor(np.random.default_rng(0).standard_normal((6, 4)), requires_grad=True)
    enabled = gc.isenabled()
    gc.disable()
    try:
        y = _GRAPHS[op](x)
        output, node = weakref.ref(y), y.grad_fn
        assert node is not None
        del y, node
        assert output() is None
    finally:
        if enabled:
            gc.enable()
