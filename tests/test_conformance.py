"""The conformance suite: every name of docs/api.md's `torch` row, run against PyTorch.

Elementwise functions (one and two operands) and reductions are run here over hypothesis-generated inputs
(0-d, empty, size-1 and broadcast shapes, non-contiguous views, float32, float64 and integer dtypes where
PyTorch takes them), comparing values, dtypes, shapes and gradients with PyTorch's. Every other name of
the row must be named in CHECKED_ELSEWHERE with the test file that compares it (the file is checked to
mention it), so a name added to the table without a test fails here the day it is listed.
"""

import pathlib
import warnings

import numpy as np
import pytest
from conftest import shapes
from hypothesis import given, settings
from hypothesis import strategies as st
from test_docs import _supported_names

import tinygrad_attn as ta

TESTS = pathlib.Path(__file__).resolve().parent
suite = settings(max_examples=int(__import__("os").environ.get("TA_CONFORMANCE_EXAMPLES", 60)), deadline=None)

# name -> the input domain it is defined on (applied to standard normal draws), for both libraries alike
UNARY = {
    "abs": None, "acos": "unit", "acosh": "above_one", "asin": "unit", "asinh": None, "atan": None,
    "atanh": "unit", "ceil": None, "cos": None, "cosh": None, "erf": None, "exp": None, "exp2": None,
    "expm1": None, "floor": None, "isfinite": None, "isinf": None, "isnan": None, "log": "positive",
    "log10": "positive", "log1p": "positive", "log2": "positive", "neg": None, "relu": None, "round": None,
    "rsqrt": "positive", "sigmoid": None, "sign": None, "sin": None, "sinh": None, "sqrt": "positive",
    "square": None, "tan": "unit", "tanh": None, "trunc": None,
}
BINARY = {
    "add": None, "sub": None, "mul": None, "div": "nonzero", "maximum": None, "minimum": None,
    "pow": "positive_base", "fmod": "nonzero", "copysign": None, "eq": None, "ne": None, "lt": None, "le": None,
    "gt": None, "ge": None, "logical_and": None, "logical_or": None, "isclose": None,
}
REDUCTIONS = {  # name -> does it take keepdim; returns a (values, indices) pair
    "sum": (True, False), "mean": (True, False), "amax": (True, False), "amin": (True, False),
    "prod": (True, False), "logsumexp": (True, False), "std": (True, False), "var": (True, False),
    "argmax": (True, False), "argmin": (True, False), "all": (True, False), "any": (True, False),
    "max": (True, True), "min": (True, True), "median": (True, True), "cumsum": (False, False),
    "cumprod": (False, False), "logcumsumexp": (False, False), "cummax": (False, True),
    "cummin": (False, True), "softmax": (False, False), "log_softmax": (False, False),
}
SHAPED = {  # name -> f(library, a) on a (3, 4) float64 tensor a; values, dtypes, shapes and gradients compared
    "lerp": lambda m, a: m.lerp(a, a.flip(0), 0.3), "unflatten": lambda m, a: a.unflatten(1, (2, 2)),
    "masked_select": lambda m, a: m.masked_select(a, a > 0), "repeat_interleave": lambda m, a: m.repeat_interleave(
        a, 2, dim=0), "roll": lambda m, a: m.roll(a, 1, 1), "flip": lambda m, a: m.flip(a, [0]),
    "outer": lambda m, a: m.outer(a[0], a[1]), "unbind": lambda m, a: m.unbind(a, 1)[2],
    "gather": lambda m, a: m.gather(a, 1, m.tensor([[0, 0], [3, 1], [2, 2]])),
    "kthvalue": lambda m, a: m.kthvalue(a, 2, 1).values, "cat": lambda m, a: m.cat([a, a * 2], 1),
    "chunk": lambda m, a: m.chunk(a, 2, 1)[1], "split": lambda m, a: m.split(a, [1, 3], 1)[1],
    "stack": lambda m, a: m.stack([a, -a], 0), "where": lambda m, a: m.where(a > 0, a, a * 3),
    "clamp": lambda m, a: m.clamp(a, -0.5, 0.5), "clip": lambda m, a: m.clip(a, min=-0.2),
    "norm": lambda m, a: m.norm(a), "sort": lambda m, a: m.sort(a, 1).values,
    "argsort": lambda m, a: m.argsort(a, 1), "topk": lambda m, a: m.topk(a, 2).values,
    "nonzero": lambda m, a: m.nonzero(a > 0), "unique": lambda m, a: m.unique(m.tensor([3, 1, 3, 2])),
    "tril": lambda m, a: m.tril(a), "triu": lambda m, a: m.triu(a, 1),
    "masked_fill": lambda m, a: m.masked_fill(a, a < 0, 0.0), "matmul": lambda m, a: m.matmul(a, a.T),
    "bmm": lambda m, a: m.bmm(a[None], a.T[None]), "transpose": lambda m, a: m.transpose(a, 0, 1),
    "t": lambda m, a: m.t(a) + a.t().t().t(),
    "swapaxes": lambda m, a: m.swapaxes(a[None], 0, 2)[:, :, 0] + a.mT, "swapdims": lambda m, a: m.swapdims(a, 1, 0),
    "movedim": lambda m, a: m.movedim(a[None], (0, 1), (2, 0)) * 2 + a.flip(dims=(1,))[:, :, None],
    "narrow": lambda m, a: m.narrow(a, 1, -3, 2), "select": lambda m, a: m.select(a, 1, -1),
    "index_select": lambda m, a: m.index_select(a, 1, m.tensor([3, 0, 3])),
    "clamp_min": lambda m, a: m.clamp_min(a, 0.1), "clamp_max": lambda m, a: m.clamp_max(a, -0.1),
    "addmm": lambda m, a: m.addmm(a[:, :3], a, a.T[:, :3], beta=0.5, alpha=2.0),
    "baddbmm": lambda m, a: m.baddbmm(a[None, :, :3] * np.nan, a[None], a.T[None, :, :3], beta=0.0),
    "dot": lambda m, a: m.dot(a[0], a[1]), "tile": lambda m, a: m.tile(a, (2,)) + m.tile(a[0], (2,))[None],
    "count_nonzero": lambda m, a: m.count_nonzero(m.relu(a), dim=1),
    "take_along_dim": lambda m, a: m.take_along_dim(a, m.argsort(a, 1)[:1], 1) + m.take_along_dim(
        a, m.tensor([[5], [2]]))[0],
    "permute": lambda m, a: m.permute(a[None], (2, 0, 1)), "reshape": lambda m, a: m.reshape(a, (6, 2)),
    "squeeze": lambda m, a: m.squeeze(a[None]), "unsqueeze": lambda m, a: m.unsqueeze(a, 1),
    "flatten": lambda m, a: m.flatten(a), "numel": lambda m, a: m.tensor(m.numel(a)),
    "logical_not": lambda m, a: m.logical_not(a > 0), "allclose": lambda m, a: m.tensor(m.allclose(a, a + 1e-9)),
    "equal": lambda m, a: m.tensor(m.equal(a, a)), "arange": lambda m, a: m.arange(1, 7, 2),
    "linspace": lambda m, a: m.linspace(0, 1, 5), "eye": lambda m, a: m.eye(3, 4),
    "full": lambda m, a: m.full((2, 3), 1.5), "full_like": lambda m, a: m.full_like(a, 7),
    "zeros": lambda m, a: m.zeros(2, 3), "zeros_like": lambda m, a: m.zeros_like(a),
    "ones": lambda m, a: m.ones(2, dtype=m.int32), "ones_like": lambda m, a: m.ones_like(a),
    "empty": lambda m, a: m.empty(2, 3).fill_(0.0), "empty_like": lambda m, a: m.empty_like(a).fill_(0),  # NaN * 0: NaN
    "tensor": lambda m, a: m.tensor([1, 2.5]), "as_tensor": lambda m, a: m.as_tensor([[1, 2]]),
    "from_numpy": lambda m, a: m.from_numpy(np.arange(3, dtype=np.int32)),
    "BoolTensor": lambda m, a: m.BoolTensor([True, False]), "ByteTensor": lambda m, a: m.ByteTensor([1, 2]),
    "DoubleTensor": lambda m, a: m.DoubleTensor([1, 2]), "FloatTensor": lambda m, a: m.FloatTensor([1, 2]),
    "IntTensor": lambda m, a: m.IntTensor([1, 2]), "LongTensor": lambda m, a: m.LongTensor([1, 2]),
    "is_tensor": lambda m, a: m.tensor(m.is_tensor(a)), "is_floating_point": lambda m, a: m.tensor(
        m.is_floating_point(a)), "get_default_dtype": lambda m, a: m.zeros(1, dtype=m.get_default_dtype()),
}
RANDOM = {  # name -> f(library): shape, dtype and range compared (the draws themselves differ by design)
    "seed": lambda m: m.tensor(m.seed() % 1000),
    "rand": lambda m: m.rand(3, 4), "rand_like": lambda m: m.rand_like(m.zeros(2, 2)),
    "randn": lambda m: m.randn(5), "randn_like": lambda m: m.randn_like(m.zeros(3)),
    "randint": lambda m: m.randint(0, 5, (4,)), "randperm": lambda m: m.randperm(6),
    "multinomial": lambda m: m.multinomial(m.tensor([0.2, 0.8]), 3, replacement=True),
    "bernoulli": lambda m: m.bernoulli(m.full((3, 4), 0.5)) + m.zeros(2, 1).bernoulli_(0.5)[:, :, None],
}
CHECKED_ELSEWHERE = {  # test files that compare these with PyTorch themselves
    "test_tensor_surface.py": ["finfo", "iinfo", "Generator", "default_generator", "initial_seed", "autocast", "Size",
                               "set_float32_matmul_precision", "get_float32_matmul_precision",
                               "use_deterministic_algorithms", "are_deterministic_algorithms_enabled",
                               "set_num_interop_threads", "get_num_interop_threads"],
    "test_ops_breadth.py": ["einsum", "diagonal", "meshgrid", "std_mean", "var_mean"],
    "test_serialization.py": ["save", "load"],
    "test_attention_core.py": ["set_num_threads", "get_num_threads"],
    "test_pytorch_semantics.py": ["manual_seed", "no_grad", "enable_grad", "set_grad_enabled",
                                  "is_grad_enabled", "inference_mode", "device", "cuda"],
    "test_pytorch_breadth.py": ["compile", "backends"],
    "test_complex_rope.py": ["polar", "view_as_complex", "view_as_real", "complex"],
}


def _domain(x: np.ndarray, kind: str | None) -> np.ndarray:
    if kind == "unit":
        return np.tanh(x) * 0.9
    if kind == "above_one":
        return 1.1 + np.abs(x)
    if kind in ("positive", "positive_base"):
        return 0.1 + np.abs(x)
    if kind == "nonzero":
        return np.where(np.abs(x) < 0.1, 0.5, x)
    return x


def test_every_name_of_the_torch_row_is_checked_against_pytorch_somewhere():
    names = set(_supported_names()["torch"])
    here = set(UNARY) | set(BINARY) | set(REDUCTIONS) | set(SHAPED) | set(RANDOM)
    elsewhere = {n: f for f, listed in CHECKED_ELSEWHERE.items() for n in listed}
    unchecked = names - here - set(elsewhere)
    assert not unchecked, f"docs/api.md lists names no test compares with PyTorch: {sorted(unchecked)}"
    for name, file in elsewhere.items():
        assert name in (TESTS / file).read_text(), f"{file} is said to check {name} but never names it"


def _pair(torch, array: np.ndarray, transpose: bool):
    """The same values as this library's tensor and PyTorch's, transposed views when asked (non-contiguous)."""
    ours, theirs = ta.tensor(array), torch.tensor(array)
    if transpose and array.ndim >= 2:
        ours, theirs = ours.transpose(0, -1), theirs.transpose(0, -1)
    return ours, theirs


def _same(ours, theirs, name: str) -> None:
    o = np.asarray(ours.detach().numpy() if hasattr(ours, "detach") else ours)
    t = np.asarray(theirs.detach().numpy() if hasattr(theirs, "detach") else theirs)
    assert o.shape == t.shape, (name, o.shape, t.shape)
    assert str(o.dtype) == str(t.dtype), (name, o.dtype, t.dtype)
    tol = 1e-5 if o.dtype == np.float32 else 1e-10
    np.testing.assert_allclose(o, t, rtol=tol, atol=tol, equal_nan=True, err_msg=name)


def _gradients_agree(torch, fn_ours, fn_theirs, arrays, name):
    ours = [ta.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out_o, out_t = fn_ours(*ours), fn_theirs(*theirs)
    if not out_t.dtype.is_floating_point or out_t.numel() == 0:
        return
    g = np.random.default_rng(0).normal(size=tuple(out_t.shape)).astype(arrays[0].dtype)
    (out_o * ta.tensor(g)).sum().backward()
    (out_t * torch.tensor(g)).sum().backward()
    for a, b in zip(ours, theirs):
        if b.grad is None or a.grad is None:  # PyTorch's zeros and this library's None both mean "no gradient"
            for side in (a.grad, b.grad):
                assert side is None or not np.any(side.numpy()), name
            continue
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-8, atol=1e-10, equal_nan=True,
                                   err_msg=f"{name}: gradient")


@pytest.mark.torch_parity
@suite
@given(data=st.data(), name=st.sampled_from(sorted(UNARY)), shape=shapes(max_dims=3),
       dtype=st.sampled_from(["float32", "float64", "int64", "int32"]), transpose=st.booleans())
def test_elementwise_functions_equal_pytorchs(data, name, shape, dtype, transpose):
    torch = pytest.importorskip("torch")
    x = _domain(np.random.default_rng(data.draw(st.integers(0, 2**16))).normal(size=shape) * 2, UNARY[name])
    array = (np.round(x) if dtype.startswith("int") else x).astype(dtype)
    if dtype.startswith("int") and name in ("acosh", "atanh", "log", "log10", "log2", "rsqrt", "sqrt", "log1p"):
        array = np.abs(array) + 2 if name != "atanh" else np.zeros_like(array)
    ours, theirs = _pair(torch, array, transpose)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected = getattr(torch, name)(theirs)
        except (RuntimeError, TypeError):  # PyTorch refuses this dtype: so must this library
            with pytest.raises((RuntimeError, TypeError)):
                getattr(ta, name)(ours)
            return
        _same(getattr(ta, name)(ours), expected, name)
    if dtype == "float64":
        view = (lambda t: t.transpose(0, -1)) if transpose and array.ndim >= 2 else (lambda t: t)
        _gradients_agree(torch, lambda a: getattr(ta, name)(view(a)), lambda a: getattr(torch, name)(view(a)),
                         [array], name)


@pytest.mark.torch_parity
@suite
@given(data=st.data(), name=st.sampled_from(sorted(BINARY)), dtype=st.sampled_from(["float32", "float64",
                                                                                     "int64", "bool"]))
def test_two_operand_functions_broadcast_and_equal_pytorchs(data, name, dtype):
    torch = pytest.importorskip("torch")
    shape = data.draw(shapes(max_dims=3))
    other_shape = tuple(data.draw(st.sampled_from([n, 1])) for n in shape[data.draw(st.integers(0, len(shape))):])
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    a = _domain(rng.normal(size=shape) * 2, BINARY[name] if BINARY[name] != "nonzero" else None)
    b = _domain(rng.normal(size=other_shape) * 2, "nonzero" if BINARY[name] == "nonzero" else None)
    if dtype == "bool":
        a, b = a > 0, b > 0
    a, b = (np.round(v).astype(dtype) if dtype == "int64" else v.astype(dtype) for v in (a, b))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected = getattr(torch, name)(torch.tensor(a), torch.tensor(b))
        except (RuntimeError, TypeError):
            with pytest.raises((RuntimeError, TypeError, ZeroDivisionError)):
                getattr(ta, name)(ta.tensor(a), ta.tensor(b))
            return
        _same(getattr(ta, name)(ta.tensor(a), ta.tensor(b)), expected, name)
    if dtype == "float64" and name not in ("isclose",):
        _gradients_agree(torch, lambda x, y: getattr(ta, name)(x, y), lambda x, y: getattr(torch, name)(x, y),
                         [a, b], name)


@pytest.mark.torch_parity
@suite
@given(data=st.data(), name=st.sampled_from(sorted(REDUCTIONS)), shape=shapes(min_dims=1, max_dims=3),
       dtype=st.sampled_from(["float32", "float64", "int64"]), transpose=st.booleans())
def test_reductions_and_scans_equal_pytorchs(data, name, shape, dtype, transpose):
    torch = pytest.importorskip("torch")
    keepdim_taken, pair = REDUCTIONS[name]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rng.normal(size=shape) * 2 + np.arange(int(np.prod(shape))).reshape(shape) * 1e-3  # no exact ties
    array = np.round(x).astype(dtype) if dtype == "int64" else x.astype(dtype)
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    keepdim = data.draw(st.booleans()) if keepdim_taken else None
    kwargs = {} if keepdim is None else {"keepdim": keepdim}
    ours, theirs = _pair(torch, array, transpose)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected = getattr(torch, name)(theirs, dim, **kwargs)
        except (RuntimeError, TypeError, IndexError):
            with pytest.raises((RuntimeError, TypeError, IndexError, ValueError)):
                getattr(ta, name)(ours, dim, **kwargs)
            return
        if name in ("softmax", "log_softmax") and dtype == "int64" and expected.numel() == 0:
            with pytest.raises(TypeError, match="float32 or float64"):  # PyTorch runs no kernel on nothing: its
                getattr(ta, name)(ours, dim, **kwargs)  # dtype check is skipped; this library checks first
            return
        got = getattr(ta, name)(ours, dim, **kwargs)
    if pair:
        _same(got[0], expected[0], name)
        if name not in ("median",) or not np.isnan(array).any():
            _same(got[1], expected[1], f"{name} indices")
    else:
        _same(got, expected, name)
    if dtype == "float64" and name not in ("argmax", "argmin", "all", "any"):
        first = (lambda r: r[0]) if pair else (lambda r: r)
        view = (lambda t: t.transpose(0, -1)) if transpose and array.ndim >= 2 else (lambda t: t)
        _gradients_agree(torch, lambda a: first(getattr(ta, name)(view(a), dim, **kwargs)),
                         lambda a: first(getattr(torch, name)(view(a), dim, **kwargs)), [array], name)


@pytest.mark.torch_parity
@pytest.mark.parametrize("name", sorted(SHAPED))
def test_the_other_functions_equal_pytorchs(name):
    torch = pytest.importorskip("torch")
    array = np.random.default_rng(5).normal(size=(3, 4))
    results = []
    for m in (ta, torch):
        a = m.tensor(array, requires_grad=True)
        out = SHAPED[name](m, a)
        grad = None
        if out.requires_grad and out.numel():
            (out * m.tensor(np.arange(out.numel(), dtype=np.float64).reshape(tuple(out.shape)))).sum().backward()
            grad = a.grad.numpy()
        results.append((out, grad))
    (ours, our_grad), (theirs, their_grad) = results
    _same(ours, theirs, name)
    assert (our_grad is None) == (their_grad is None), name
    if our_grad is not None:
        np.testing.assert_allclose(our_grad, their_grad, rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.mark.torch_parity
@pytest.mark.parametrize("name", sorted(RANDOM))
def test_random_draws_have_pytorchs_shapes_dtypes_and_ranges(name):
    torch = pytest.importorskip("torch")
    ours, theirs = RANDOM[name](ta), RANDOM[name](torch)
    assert tuple(ours.shape) == tuple(theirs.shape) and str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(
        ".")[-1], name
    values = ours.numpy()
    if name in ("rand", "rand_like"):
        assert values.min() >= 0 and values.max() < 1
    if name == "randperm":
        assert sorted(values.tolist()) == list(range(6))
    if name == "bernoulli":
        assert set(np.unique(values)) <= {0.0, 1.0, 2.0}  # two 0/1 draws added
    if name in ("randint", "multinomial"):
        assert values.min() >= 0 and values.max() < (5 if name == "randint" else 2)


def _parity_texts() -> str:
    """The test files that compare with PyTorch (they import it)."""
    files = [p for p in TESTS.glob("test_*.py") if "torch_parity" in p.read_text()]
    return "\n".join(p.read_text() for p in files)


def test_every_name_of_every_row_appears_in_a_test_that_compares_with_pytorch():
    """The table's other rows: each name must appear in a test file that compares with PyTorch (a name listed
    without one fails here, the day it is listed)."""
    import re

    text = _parity_texts()
    missing = [f"{row}: {name}" for row, names in _supported_names().items() if row != "this library's own"
               for name in names if not re.search(r"\b" + re.escape(name.split(".")[-1]) + r"\b", text)]
    assert not missing, f"listed in docs/api.md but compared with PyTorch nowhere: {missing}"


@pytest.mark.torch_parity
def test_autograd_and_func_names_equal_pytorchs():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(7).normal(size=3)
    v = np.random.default_rng(8).normal(size=3)

    def fn(lib):  # the same code for both libraries
        return lambda t: (t.exp() * t.sin()).sum()

    for name in ("jacobian", "hessian"):
        ours = getattr(ta.autograd.functional, name)(fn(ta), ta.tensor(x))
        theirs = getattr(torch.autograd.functional, name)(fn(torch), torch.tensor(x))
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10, err_msg=name)
    for name in ("vjp", "jvp", "hvp", "vhp"):
        needs_scalar_v = name in ("vjp",)
        v_ours = ta.tensor(1.0, dtype=ta.float64) if needs_scalar_v else ta.tensor(v)
        v_theirs = torch.tensor(1.0, dtype=torch.float64) if needs_scalar_v else torch.tensor(v)
        ours = getattr(ta.autograd.functional, name)(fn(ta), ta.tensor(x), v_ours)
        theirs = getattr(torch.autograd.functional, name)(fn(torch), torch.tensor(x), v_theirs)
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(np.asarray(a.numpy()), np.asarray(b.numpy()), rtol=1e-10, err_msg=name)
    g_ours, value_ours = ta.func.grad_and_value(fn(ta))(ta.tensor(x))
    g_theirs, value_theirs = torch.func.grad_and_value(fn(torch))(torch.tensor(x))
    np.testing.assert_allclose(g_ours.numpy(), g_theirs.numpy(), rtol=1e-12)
    assert np.isclose(value_ours.item(), value_theirs.item())
    out_ours, back_ours = ta.func.vjp(lambda t: t * t, ta.tensor(x))
    out_theirs, back_theirs = torch.func.vjp(lambda t: t * t, torch.tensor(x))
    np.testing.assert_allclose(back_ours(ta.tensor(v))[0].numpy(), back_theirs(torch.tensor(v))[0].numpy())

    results = []
    for lib in (ta, torch):
        class Cube(lib.autograd.Function):  # a user's Function, once_differentiable, a Variable, a hook handle
            @staticmethod
            @lib.autograd.function.once_differentiable
            def backward(ctx, grad):
                (t,) = ctx.saved_tensors
                return grad * 3 * t * t

            @staticmethod
            def forward(ctx, t):
                ctx.save_for_backward(t)
                return t * t * t

        t = lib.autograd.Variable(lib.tensor(x), requires_grad=True)
        seen = []
        handle = t.register_hook(lambda g, seen=seen: seen.append(1))
        with lib.autograd.detect_anomaly():
            Cube.apply(t).sum().backward()
        handle.remove()
        Cube.apply(t).sum().backward()
        results.append((t.grad.numpy().copy(), len(seen), Cube.apply(t).grad_fn is not None))
    np.testing.assert_allclose(results[0][0], results[1][0])
    assert results[0][1:] == results[1][1:] == (1, True)  # the hook ran once: removed before the second
    from torch.autograd.gradcheck import GradcheckError

    assert issubclass(ta.autograd.GradcheckError, Exception) and issubclass(GradcheckError, Exception)
    assert hasattr(ta.autograd.function, "FunctionCtx") and hasattr(torch.autograd.function, "FunctionCtx")
    assert ta.Context is not None and ta.RemovableHandle is not None  # this library's names of the same objects


TENSOR_METHODS = {
    "scatter_add": lambda m, a: a.scatter_add(1, m.tensor([[0, 0], [1, 3], [2, 2]]), a[:, :2] * 2),
    "detach_": lambda m, a: a.clone().detach_() * 2, "element_size": lambda m, a: m.tensor(a.element_size()),
    "exp_": lambda m, a: a.clone().exp_(), "neg_": lambda m, a: a.clone().neg_(),
    "pow_": lambda m, a: a.clone().pow_(2), "sqrt_": lambda m, a: a.abs().clone().sqrt_(),
    "relu_": lambda m, a: a.clone().relu_(), "reciprocal": lambda m, a: (a + 3).reciprocal(),
    "index_fill": lambda m, a: a.index_fill(1, m.tensor([0, 2]), -1.0), "nelement": lambda m, a: m.tensor(
        a.nelement()), "type_as": lambda m, a: m.tensor([1, 2]).type_as(a),
    "is_cuda": lambda m, a: m.tensor(a.is_cuda), "grad_fn": lambda m, a: m.tensor((a * 2).grad_fn is not None),
    "requires_grad_": lambda m, a: m.tensor(a.detach().requires_grad_().requires_grad),
    "retains_grad": lambda m, a: m.tensor(a.retains_grad),
}
MODULES = {
    "Dropout": lambda m, a: m.nn.Dropout(0.5).eval()(a), "ReLU": lambda m, a: m.nn.ReLU()(a),
    "NLLLoss": lambda m, a: m.nn.NLLLoss()(m.log_softmax(a, 1), m.tensor([0, 3, 1])),
    "MSELoss": lambda m, a: m.nn.MSELoss()(a, a.flip(0)), "L1Loss": lambda m, a: m.nn.L1Loss()(a, a * 0.5),
    "BCELoss": lambda m, a: m.nn.BCELoss()(a.sigmoid(), (a > 0).to(a.dtype)),
    "BCEWithLogitsLoss": lambda m, a: m.nn.BCEWithLogitsLoss()(a, (a > 0).to(a.dtype)),
    "normalize": lambda m, a: m.nn.functional.normalize(a, dim=1),
    "calculate_gain": lambda m, a: m.tensor(m.nn.init.calculate_gain("leaky_relu", 0.2)),
}


@pytest.mark.torch_parity
@pytest.mark.parametrize("name", sorted(TENSOR_METHODS) + sorted(MODULES))
def test_tensor_methods_modules_and_helpers_equal_pytorchs(name):
    torch = pytest.importorskip("torch")
    array = np.random.default_rng(9).normal(size=(3, 4))
    fn = TENSOR_METHODS.get(name) or MODULES[name]
    results = []
    for m in (ta, torch):
        a = m.tensor(array, requires_grad=name not in ("detach_", "exp_", "neg_", "pow_", "sqrt_", "relu_"))
        out = fn(m, a)
        grad = None
        if out.requires_grad:
            (out * m.tensor(np.arange(out.numel(), dtype=np.float64).reshape(tuple(out.shape)))).sum().backward()
            grad = a.grad.numpy()
        results.append((out, grad))
    (ours, our_grad), (theirs, their_grad) = results
    _same(ours, theirs, name)
    if our_grad is not None or their_grad is not None:
        np.testing.assert_allclose(our_grad, their_grad, rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.mark.torch_parity
def test_init_base_classes_and_datasets_as_pytorchs():
    torch = pytest.importorskip("torch")
    for lib in (ta, torch):
        w = lib.empty(200, 300)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lib.nn.init.xavier_normal(w)  # the deprecated alias, as programs still call it
        assert abs(float(w.std()) - (2.0 / 500) ** 0.5) < 0.005
        lib.nn.init.kaiming_uniform(w, a=0.0)
        bound = (6.0 / 300) ** 0.5
        assert float(w.abs().max()) <= bound and float(w.abs().max()) > 0.9 * bound
        parameter = lib.nn.Parameter(lib.zeros(2))
        sgd = lib.optim.SGD([parameter], lr=0.1)
        assert isinstance(sgd, lib.optim.Optimizer)
        assert isinstance(lib.optim.lr_scheduler.StepLR(sgd, 2), lib.optim.lr_scheduler.LRScheduler)
        data = lib.utils.data
        joined = data.ConcatDataset([data.TensorDataset(lib.arange(3)), data.TensorDataset(lib.arange(10, 12))])
        assert len(joined) == 5 and int(joined[3][0]) == 10 and int(joined[-1][0]) == 11
        assert isinstance(data.SequentialSampler(range(3)), data.Sampler)
        assert [int(x[0]) for x in data.Subset(joined, [4, 0])] == [11, 0]
        assert list(data.BatchSampler(range(5), 2, drop_last=False)) == [[0, 1], [2, 3], [4]]
        model = lib.nn.Sequential(lib.nn.Linear(2, 3), lib.nn.ReLU())
        assert [k for k, _ in model.named_parameters()] == ["0.weight", "0.bias"]
        assert str(lib.zeros(1, dtype=lib.short).dtype).split(".")[-1] == "int16"
    from torch.nn.attention.flex_attention import BlockMask as TorchBlockMask
    from torch.nn.attention.flex_attention import create_block_mask as torch_block_mask
    from torch.nn.attention.flex_attention import noop_mask as torch_noop

    from tinygrad_attn.nn.attention.flex_attention import BlockMask, create_block_mask, noop_mask

    ours, theirs = create_block_mask(noop_mask, None, None, 4, 4), torch_block_mask(torch_noop, None, None, 4, 4,
                                                                                    device="cpu")
    assert isinstance(ours, BlockMask) and isinstance(theirs, TorchBlockMask)
    assert ours.to_dense().numpy().tolist() == theirs.to_dense().numpy().tolist() == [[[[1]]]]
