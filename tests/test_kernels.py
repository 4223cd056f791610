"""Each numba kernel against its plain-numpy reference, and its backward against finite differences.

Marked `kernels`: CI runs these again with NUMBA_DISABLE_JIT=1, so the Python
fallback of every kernel is checked too.
"""

import math

import numpy as np
import pytest
from conftest import WHERE_PARALLEL_WORK_RUNS, products_on_numba_threads, shapes, share_work_among_threads
from hypothesis import given
from hypothesis import strategies as st
from numba import njit

import tinygrad_attn as ta
from tinygrad_attn import functional as F
from tinygrad_attn.kernels import flash, layout, parallel, tiles
from tinygrad_attn.kernels.cross_entropy import cross_entropy_backward, cross_entropy_forward, cross_entropy_reference
from tinygrad_attn.kernels.embedding import scatter_add_rows, scatter_add_rows_reference
from tinygrad_attn.kernels.gelu import gelu_backward, gelu_forward, gelu_reference
from tinygrad_attn.kernels.layernorm import layer_norm_backward, layer_norm_forward, layer_norm_reference
from tinygrad_attn.kernels.relu import relu_backward, relu_forward, relu_reference
from tinygrad_attn.kernels.softmax import log_softmax_backward, softmax_backward, softmax_forward, softmax_reference

pytestmark = pytest.mark.kernels
DTYPES = [np.float32, np.float64]


def tol(dtype):
    return {"rtol": 2e-5, "atol": 2e-6} if dtype == np.float32 else {"rtol": 1e-11, "atol": 1e-12}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("log", [False, True])
@given(rows=st.integers(1, 6), n=st.integers(1, 9), seed=st.integers(0, 2**16), masked=st.booleans())
def test_softmax_kernel_matches_reference(dtype, log, rows, n, seed, masked):
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(rows, n)) * 5).astype(dtype)
    keep = rng.random((rows, n)) > 0.4 if masked else None
    if masked:
        keep[0] = False  # a fully masked row
    y, lse = softmax_forward(x, np.zeros((0, 0), bool) if keep is None else keep, log)
    np.testing.assert_allclose(y, softmax_reference(x, keep, log), **tol(dtype))
    assert y.dtype == dtype
    assert y.dtype == dtype and not np.isnan(y).any()
    if masked:
        assert np.all(y[0] == 0) and lse[0] == -np.inf


@pytest.mark.parametrize("dtype", DTYPES)
@given(rows=st.integers(1, 6), n=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_layer_norm_kernel_matches_reference(dtype, rows, n, seed):
    rng = np.random.default_rng(seed)
    x, w, b = (rng.normal(size=s).astype(dtype) for s in ((rows, n), (n,), (n,)))
    y, mean, rstd = layer_norm_forward(x, w, b, 1e-5)
    np.testing.assert_allclose(y, layer_norm_reference(x, w, b, 1e-5), **tol(dtype))
    np.testing.assert_allclose(mean, x.mean(-1), **tol(dtype))
    np.testing.assert_allclose(rstd, 1 / np.sqrt(x.var(-1) + 1e-5), rtol=1e-4 if dtype == np.float32 else 1e-10)


@pytest.mark.parametrize("dtype", DTYPES)
@given(rows=st.integers(1, 6), classes=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_cross_entropy_kernel_matches_reference(dtype, rows, classes, seed):
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(rows, classes)) * 4).astype(dtype)
    target = rng.integers(0, classes, rows)
    target[rng.random(rows) < 0.3] = -100
    loss, _ = cross_entropy_forward(x, target, -100)
    np.testing.assert_allclose(loss, cross_entropy_reference(x, target, -100), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_kernel_matches_reference(dtype, approximate):
    """Over [-10, 10], both tails included (gelu(-10) is -7.6e-23, not 0): float32 within 16 ulp on
    [-3, 4], a relative 1e-5 below, where the argument of the exp loses digits, and 2e-7 |x| everywhere."""
    x = np.concatenate([np.linspace(-10, 10, 20_001), [0.0, -1e-30, 1e-30]]).astype(dtype)
    got, want = gelu_forward(x, approximate), gelu_reference(x, approximate)
    assert got.dtype == dtype
    if dtype == np.float32 and approximate:  # 1 + tanh(u) cancels for negative x, as in PyTorch's
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    elif dtype == np.float32:
        core = (x >= -3) & (x <= 4)
        assert np.all(np.abs(got - want)[core] <= 16 * np.spacing(np.abs(want[core])))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=0)
        assert np.all(np.abs(got - want) <= 2e-7 * np.maximum(np.abs(x), 1))
    else:
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-300 if not approximate else 1e-15)


@pytest.mark.parametrize("dtype", DTYPES + [np.int64])
@given(shape=shapes(max_dims=3, max_side=5), transposed=st.booleans(), seed=st.integers(0, 2**16))
def test_relu_kernel_matches_reference(dtype, shape, transposed, seed):
    """Forward and backward, with NaN, infinities and zeros among the inputs (a NaN stays NaN; the
    subgradient at 0 is 0), on contiguous and transposed arrays and on other dtypes (numpy's way)."""
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=shape) * 3).astype(dtype)
    g = rng.normal(size=shape).astype(dtype)
    if x.size and dtype != np.int64:
        x.reshape(-1)[rng.integers(x.size, size=3)] = rng.choice([np.nan, np.inf, -np.inf, 0.0], size=3)
    if transposed:
        x, g = x.T, g.T
    got = relu_forward(x)
    assert got.shape == x.shape and got.dtype == dtype
    np.testing.assert_array_equal(got, relu_reference(x))
    np.testing.assert_array_equal(relu_backward(x, g), relu_reference(x, g))


@pytest.mark.parametrize("dtype", DTYPES)
@given(num_rows=st.integers(1, 6), n=st.integers(0, 30), dim=st.integers(0, 20), seed=st.integers(0, 2**16))
def test_scatter_add_rows_matches_numpy_and_refuses_indices_out_of_range(dtype, num_rows, n, dim, seed):
    """The embedding backward sums every row into its index's row (indices repeat), as np.add.at does; an
    index outside the table is an IndexError naming it, whichever path reaches the kernel."""
    rng = np.random.default_rng(seed)
    indices, rows = rng.integers(0, num_rows, n), rng.normal(size=(n, dim)).astype(dtype)
    np.testing.assert_allclose(scatter_add_rows(num_rows, indices, rows),
                               scatter_add_rows_reference(num_rows, indices, rows), **tol(dtype))
    for bad in (-1, num_rows, 2**40):
        with pytest.raises(IndexError, match=f"got {bad}"):
            scatter_add_rows(num_rows, np.append(indices, bad), np.vstack([rows, np.ones((1, dim), dtype)]))


def test_gelu_erfc_polynomial_is_within_its_stated_error():
    """gelu.py's erfc(z) = exp(-z^2) t q(t), t = 1 / (1 + 0.3 z), evaluated in float64 from the float32
    coefficients: relative error below 6e-8 on z in [0, 9.5], as its docstring states."""
    from tinygrad_attn.kernels import gelu

    z = np.linspace(0, 9.5, 5001)
    t = 1 / (1 + float(gelu._ERFCX_P) * z)
    q = np.polyval(np.array(gelu._ERFCX_COEFFICIENTS, dtype=np.float64), t)
    exact = np.array([math.erfc(v) for v in z])
    assert np.max(np.abs(np.exp(-z * z) * t * q / exact - 1)) < 6e-8


@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_backward_kernel_matches_finite_differences(approximate):
    x = np.linspace(-8, 8, 4001)
    grad = np.random.default_rng(0).normal(size=x.size)
    h = 1e-6
    numeric = (gelu_reference(x + h, approximate) - gelu_reference(x - h, approximate)) / (2 * h) * grad
    np.testing.assert_allclose(gelu_backward(x, grad, approximate), numeric, rtol=1e-7, atol=1e-9)
    got32 = gelu_backward(x.astype(np.float32), grad.astype(np.float32), approximate)
    np.testing.assert_allclose(got32, numeric, rtol=2e-5, atol=1e-5)  # float32 rounding, about 2^-17 of |grad|


def _row_kernel_results(rng_seed, rows, n, dtype):
    """Every row kernel's forward and backward outputs on one random input."""
    rng = np.random.default_rng(rng_seed)
    x, g = ((rng.normal(size=(rows, n)) * 3).astype(dtype) for _ in range(2))
    keep = rng.random((rows, n)) > 0.3
    target = rng.integers(0, n, rows)
    target[::3] = -100
    w, b = (rng.normal(size=n).astype(dtype) for _ in range(2))
    results = []
    for mask in (np.zeros((0, 0), bool), keep):
        y, _ = softmax_forward(x, mask, False)
        y_log, lse = softmax_forward(x, mask, True)
        results += [y, y_log, lse, softmax_backward(y, g), log_softmax_backward(y_log, g, lse)]
    y, mean, rstd = layer_norm_forward(x, w, b, 1e-5)
    results += [y, *layer_norm_backward(g, x, w, mean, rstd)]
    loss, lse = cross_entropy_forward(x, target, -100)
    results += [loss, cross_entropy_backward(x, target, lse, g[:, 0].copy(), -100)]
    flat, flat_g = x.reshape(-1), g.reshape(-1)
    for approximate in (False, True):
        results += [gelu_forward(flat, approximate), gelu_backward(flat, flat_g, approximate)]
    results += [relu_forward(x), relu_backward(x, g)]
    return results


@pytest.mark.parametrize("dtype", DTYPES)
@given(rows=st.integers(0, 40), n=st.integers(1, 70), seed=st.integers(0, 2**16))
def test_row_kernels_on_numba_threads_equal_the_serial_ones(monkeypatch, dtype, rows, n, seed):
    """The prange drivers (parts of rows on numba's threads) against the same kernels on one thread."""
    serial = _row_kernel_results(seed, rows, n, dtype)
    with monkeypatch.context() as m:  # as after ta.set_num_threads(3): row kernels run on numba's threads
        m.setattr(parallel, "MIN_ROWS_WORK", 0)
        m.setattr(parallel, "blas_threads", lambda: 1)
        m.setattr(parallel, "_num_threads", 3)
        assert parallel.row_parts(rows, 1.0) == max(1, min(rows, 12)) or not parallel._safe_numba_layer()
        threaded = _row_kernel_results(seed, rows, n, dtype)
    for got, want in zip(threaded, serial, strict=True):  # dw, db: sums over rows in another order
        slack = 4 * np.finfo(dtype).eps * rows * np.abs(want[np.isfinite(want)]).max(initial=0)
        np.testing.assert_allclose(got, want, rtol=tol(dtype)["rtol"], atol=tol(dtype)["atol"] + slack)


def _view(rng, shape, dtype, how):
    """A (rows, cols) array laid out as `how` says: row-major, transposed, reversed rows, or every other column."""
    rows, cols = shape
    if how == "transposed":
        return rng.normal(size=(cols, rows)).astype(dtype).T
    if how == "reversed":
        return rng.normal(size=shape).astype(dtype)[::-1]
    if how == "strided":
        return rng.normal(size=(rows, 2 * cols)).astype(dtype)[:, ::2]
    return rng.normal(size=shape).astype(dtype)


LAYOUTS = st.sampled_from(["row-major", "transposed", "reversed", "strided"])


@pytest.mark.parametrize("dtype", DTYPES)
@given(n=st.integers(0, 9), k=st.integers(0, 6), m=st.integers(0, 6), a_how=LAYOUTS, b_how=LAYOUTS,
       seed=st.integers(0, 2**16))
def test_products_on_numba_threads_equal_numpy(monkeypatch, dtype, n, k, m, a_how, b_how, seed):
    """row_split_matmul's row blocks, each a BLAS call from numba's threads, against numpy's a @ b, for every
    layout; a layout BLAS cannot be told about (reversed, strided, empty) takes numpy's path."""
    rng = np.random.default_rng(seed)
    a, b = _view(rng, (n, k), dtype, a_how), _view(rng, (k, m), dtype, b_how)
    with monkeypatch.context() as mp:  # per example: the record starts empty
        calls = products_on_numba_threads(mp)
        got = parallel.row_split_matmul(a, b)
    np.testing.assert_allclose(got, a @ b, **tol(dtype))
    describable = all(h in ("row-major", "transposed") for h in (a_how, b_how)) and min(n, k, m) > 0
    if n > 1 and describable and parallel._safe_numba_layer() and parallel.gemm_for(np.dtype(dtype)) is not None:
        assert calls
    if not describable:
        assert not calls


def test_products_on_numba_threads_refuse_mismatched_shapes(monkeypatch):
    """Shapes that do not chain never reach BLAS from numba's threads (it would read past the arrays)."""
    products_on_numba_threads(monkeypatch)
    a, b = np.ones((64, 8), np.float32), np.ones((16, 8), np.float32)
    with pytest.raises(ValueError, match="mismatch"):
        parallel.row_split_matmul(a, b)


@pytest.fixture(params=WHERE_PARALLEL_WORK_RUNS)
def small_blocks(monkeypatch, request):
    """Tiles of 4 queries (2 under the causal mask) x 3 keys, 4 x 6 from 6 queries on, 8 x 6 from 8, in chunks
    of 2 groups, so short sequences cross many tile borders, with the work shared among 3 threads however
    small it is (on each of the places parallel work runs)."""
    share_work_among_threads(monkeypatch, 3, request.param)
    monkeypatch.setattr(layout, "BLOCK_Q", 4)
    monkeypatch.setattr(layout, "BLOCK_K", 3)
    monkeypatch.setattr(layout, "SHORT_QUERIES", 6)
    monkeypatch.setattr(layout, "LONG_QUERIES", 8)
    monkeypatch.setattr(layout, "TILE_BYTES", 2 * 4 * 3 * 8)


def _random_mask(rng, kind, lead, tq, tk, dtype):
    if kind == "none":
        return None
    keep = rng.random((lead[0], 1, tq, tk)) > 0.3
    keep[0, 0, min(1, tq - 1) :][:1] = False  # a fully masked query row (when there are query rows)
    if kind == "bool":
        return keep
    return np.where(keep, rng.normal(size=keep.shape), -np.inf).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["none", "bool", "float"])
@given(tq=st.integers(0, 11), tk=st.integers(0, 11), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_flash_attention_matches_dense_reference(small_blocks, dtype, kind, tq, tk, causal, seed):
    rng = np.random.default_rng(seed)
    lead = (2, 3)
    q, k, v = (rng.normal(size=lead + (t, 4)).astype(dtype) for t in (tq, tk, tk))
    mask = _random_mask(rng, kind, lead, tq, tk, dtype)
    bias = None if mask is None else np.where(mask, 0.0, -np.inf) if mask.dtype == bool else mask
    expected = flash.attention_reference(q, k, v, 0.5, causal, bias)
    out = F.scaled_dot_product_attention(ta.Tensor(q), ta.Tensor(k), ta.Tensor(v), mask=mask,
                                         is_causal=causal, scale=0.5)
    assert out.dtype == dtype and not np.isnan(out.numpy()).any()
    np.testing.assert_allclose(out.numpy(), expected, **tol(dtype))


@pytest.mark.parametrize("kind", ["none", "bool", "float"])
@given(tq=st.integers(0, 9), tk=st.integers(0, 9), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_flash_attention_backward_gradcheck(small_blocks, kind, tq, tk, causal, seed):
    rng = np.random.default_rng(seed)
    lead = (2, 1)
    q, k, v = (ta.Tensor(rng.normal(size=lead + (t, 3)), requires_grad=True) for t in (tq, tk, tk))
    mask = _random_mask(rng, kind, lead, tq, tk, np.float64)
    attend = lambda q_, k_, v_: F.scaled_dot_product_attention(q_, k_, v_, mask=mask, is_causal=causal)  # noqa: E731
    assert ta.gradcheck(attend, [q, k, v])


@pytest.fixture(params=WHERE_PARALLEL_WORK_RUNS)
def one_tile_calls(monkeypatch, request):
    """Default tiles, so short sequences fit one tile and take small.py's compiled steps, with the groups
    shared among 3 threads (on each of the places parallel work runs); the list records each such call."""
    share_work_among_threads(monkeypatch, 3, request.param)
    calls, real = [], flash.one_tile_forward
    monkeypatch.setattr(flash, "one_tile_forward", lambda *args: calls.append(1) or real(*args))
    return calls


@pytest.mark.parametrize("kind", ["none", "bool", "float"])
@given(tq=st.integers(0, 9), tk=st.integers(0, 9), d=st.integers(1, 4), causal=st.booleans(), packed=st.booleans(),
       seed=st.integers(0, 2**16))
def test_one_tile_path_matches_reference_and_gradchecks(one_tile_calls, kind, tq, tk, d, causal, packed, seed):
    """small.py against the dense reference, and gradcheck in float64, with masks (a fully masked row
    among them), on separate q, k, v and on heads split from a packed qkv (strided groups, the gradient
    written into one packed array)."""
    rng = np.random.default_rng(seed)
    calls_before = len(one_tile_calls)
    if packed:
        tk = tq
        qkv = ta.Tensor(rng.normal(size=(2, tq, 3, 3, d)), requires_grad=True)  # (B, T, 3, H, d)
        split = lambda a: [np.swapaxes(a[:, :, i], 1, 2) for i in range(3)]  # noqa: E731
        q, k, v = split(qkv.numpy())
        inputs = [qkv]
        attend = lambda x: F.packed_self_attention(x, mask=mask, is_causal=causal)  # noqa: E731
    else:
        q, k, v = (rng.normal(size=(2, 3, t, d)) for t in (tq, tk, tk))
        inputs = [ta.Tensor(a, requires_grad=True) for a in (q, k, v)]
        attend = lambda *x: F.scaled_dot_product_attention(*x, mask=mask, is_causal=causal)  # noqa: E731
    mask = _random_mask(rng, kind, (2, 3), tq, tk, np.float64)
    bias = None if mask is None else np.where(mask, 0.0, -np.inf) if mask.dtype == bool else mask
    out = attend(*inputs).numpy()
    expected = flash.attention_reference(q, k, v, 1 / math.sqrt(d), causal, bias)
    np.testing.assert_allclose(out.swapaxes(1, 2) if packed else out, expected, **tol(np.float64))
    assert ta.gradcheck(attend, inputs)
    assert len(one_tile_calls) > calls_before or min(tq, tk) == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_tile_path_carries_a_nan_to_the_rows_that_see_it(one_tile_calls, dtype):
    """As test_flash_attention_carries_a_nan_to_the_rows_that_see_it, on small.py's path."""
    rng = np.random.default_rng(0)
    tq = 7
    q, k, v = (rng.normal(size=(1, 2, tq, 4)).astype(dtype) for _ in range(3))
    q[0, 0, tq - 1, 1] = np.nan
    k[0, 1, 3, 2] = np.nan
    out = F.scaled_dot_product_attention(ta.Tensor(q), ta.Tensor(k), ta.Tensor(v), is_causal=True).numpy()
    rows_nan = np.isnan(out).any(axis=-1)
    np.testing.assert_array_equal(rows_nan[0, 0], np.arange(tq) == tq - 1)
    np.testing.assert_array_equal(rows_nan[0, 1], np.arange(tq) >= 3)
    assert one_tile_calls


@given(t=st.integers(1, 12), seed=st.integers(0, 2**16))
def test_flash_and_weights_paths_agree_on_gradients_in_float32(small_blocks, t, seed):
    rng = np.random.default_rng(seed)
    arrays = [rng.normal(size=(2, 2, t, 4)).astype(np.float32) for _ in range(3)]
    grads = []
    for weights in (False, True):
        q, k, v = (ta.Tensor(a, requires_grad=True) for a in arrays)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, return_weights=weights)
        (out[0] if weights else out).sum().backward()
        grads.append([x.grad.numpy() for x in (q, k, v)])
    for flash_grad, dense_grad in zip(*grads):
        np.testing.assert_allclose(flash_grad, dense_grad, rtol=1e-4, atol=1e-5)


@given(b=st.integers(0, 3), t=st.integers(0, 9), heads=st.integers(1, 4), causal=st.booleans(),
       seed=st.integers(0, 2**16))
def test_flash_attention_on_head_split_views(small_blocks, b, t, heads, causal, seed):
    """q, k, v split into heads by reshape (B, T, H, d) + transpose are strided views; the kernel reads
    them in place and returns the output interleaved the same way, so merging the heads is free."""
    rng = np.random.default_rng(seed)
    x = [rng.normal(size=(b, t, heads * 2)) for _ in range(3)]
    q, k, v = (ta.Tensor(a, requires_grad=True) for a in x)
    split = [a.reshape(b, t, heads, 2).transpose(1, 2) for a in (q, k, v)]  # (B, H, T, 2), not contiguous
    padding = rng.random((b, 1, 1, t)) > 0.2
    out = F.scaled_dot_product_attention(*split, mask=padding, is_causal=causal)
    dense = [np.ascontiguousarray(a.numpy()) for a in split]
    bias = np.where(padding, 0.0, -np.inf)
    np.testing.assert_allclose(out.numpy(), flash.attention_reference(*dense, 2**-0.5, causal, bias),
                               rtol=1e-12, atol=1e-12)
    merged = out.transpose(1, 2)
    assert merged.numpy().flags.c_contiguous or heads == 1 or t == 1
    merged.reshape(b, t, heads * 2).sum().backward()
    reference = [ta.Tensor(a, requires_grad=True) for a in x]
    split_ref = [a.reshape(b, t, heads, 2).transpose(1, 2) for a in reference]
    out_ref, _ = F.scaled_dot_product_attention(*split_ref, mask=padding, is_causal=causal, return_weights=True)
    out_ref.sum().backward()
    for got, want in zip((q, k, v), reference):
        np.testing.assert_allclose(got.grad.numpy(), want.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("lead", [(), (5,), (2, 2, 3)])
def test_flash_attention_any_number_of_leading_dims(small_blocks, lead):
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=lead + (6, 3)) for _ in range(3))
    mask = rng.random(lead[:1] + (1,) * max(len(lead) - 1, 0) + (6, 6)) > 0.3 if lead else None
    bias = None if mask is None else np.where(mask, 0.0, -np.inf)
    out = F.scaled_dot_product_attention(ta.Tensor(q), ta.Tensor(k), ta.Tensor(v), mask=mask, is_causal=True)
    np.testing.assert_allclose(out.numpy(), flash.attention_reference(q, k, v, 3**-0.5, True, bias),
                               rtol=1e-12, atol=1e-12)


@njit  # not cached: a cache here would not see a change to the exp it calls in another file
def _exp_each(x):
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = tiles.exp_vectorizable(x[i])
    return out


@pytest.mark.parametrize("dtype", DTYPES)
def test_vectorizable_exp_matches_numpy_within_two_ulp(dtype):
    """Over the range the tile kernels use it on (s <= 0), down to where exp leaves the normal floats."""
    low = -87.0 if dtype == np.float32 else -708.0
    rng = np.random.default_rng(0)
    s = np.concatenate([np.linspace(low, 0, 100_001), -rng.exponential(3, 10_000), [0.0, -1e-30, -0.5, -np.log(2)]])
    s = s.astype(dtype)
    got, want = _exp_each(s), np.exp(s)
    assert got.dtype == dtype
    assert np.max(np.abs(got - want) / np.spacing(want)) <= 2
    assert _exp_each(np.array([-np.inf], dtype))[0] == 0  # a masked score: exactly zero probability
    assert np.all(_exp_each(np.array([low - 1, -1e4], dtype)) <= np.finfo(dtype).tiny)  # may flush to 0


@pytest.mark.parametrize("dtype", DTYPES)
@given(bk=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_row_max_is_numpy_max_of_the_prefix(dtype, bk, seed):
    """Every prefix length of rows holding -inf (masked scores) and NaN, from a start of -inf or a finite
    running max; a NaN anywhere in the prefix or the start makes the max NaN, as np.max does."""
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(2, 3, bk)).astype(dtype)
    scores[rng.random(scores.shape) < 0.2] = -np.inf
    scores[0, 1, rng.integers(bk)] = np.nan
    for g, i, limit in [(g, i, limit) for g in range(2) for i in range(3) for limit in range(bk + 1)]:
        for start in (-np.inf, 0.5, np.nan):
            got = tiles.row_max(scores, g, i, limit, dtype(start))
            want = np.max(np.concatenate([[start], scores[g, i, :limit]]).astype(dtype))
            np.testing.assert_array_equal(got, want)


def _tile_probs_reference(scores, q_start, k_start, causal, shift=None):
    """Each row's visible prefix (the causal rule of tiles.visible_keys): P = softmax, or exp(S - shift) given
    the row's lse; 0 where hidden or where nothing is seen. Returns P and each row's max."""
    groups, bq, bk = scores.shape
    probs, maxima = np.zeros_like(scores), np.full((groups, bq), -np.inf, scores.dtype)
    for g, i in np.ndindex(groups, bq):
        limit = max(min(bk, q_start + i - k_start + 1), 0) if causal else bk
        row = scores[g, i, :limit]
        m = np.max(row, initial=-np.inf)
        s = m if shift is None else shift[g, i]
        maxima[g, i] = m
        if limit and s != -np.inf:
            e = np.exp(row - s)
            probs[g, i, :limit] = e if shift is not None else e / e.sum()
    return probs, maxima


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("keys", [(1, tiles.SHORT_ROW), (tiles.SHORT_ROW + 1, tiles.SHORT_ROW + 20)])
@given(data=st.data(), bq=st.integers(1, 5), starts=st.sampled_from([(0, 0), (3, 0), (0, 2), (70, 5)]),
       causal=st.booleans(), seed=st.integers(0, 2**16))
def test_tile_softmax_and_probs_match_numpy_on_short_and_long_rows(dtype, keys, data, bq, starts, causal, seed):
    """softmax_tile and probs_from_lse against numpy on rows either side of SHORT_ROW (one exp over the whole
    tile below it, one per row above), with masked (-inf) scores, a row with nothing visible, and a NaN."""
    bk = data.draw(st.integers(*keys))
    rng = np.random.default_rng(seed)
    scores = (3 * rng.normal(size=(3, bq, bk))).astype(dtype)
    scores[rng.random(scores.shape) < 0.2] = -np.inf
    scores[1, 0] = -np.inf  # nothing to attend to
    scores[2, bq - 1, rng.integers(bk)] = np.nan  # NaN in the row when it is visible
    want, want_max = _tile_probs_reference(scores, *starts, causal)
    got, maxima, sums = scores.copy(), np.empty((3, bq), dtype), np.empty((3, bq), dtype)
    tiles.softmax_tile(got, maxima, sums, *starts, causal)
    np.testing.assert_allclose(got, want, **tol(dtype))
    np.testing.assert_array_equal(maxima, want_max)
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = np.where(sums > 0, maxima + np.log(sums), np.where(np.isnan(sums), np.nan, -np.inf)).astype(dtype)
    want_p, _ = _tile_probs_reference(scores, *starts, causal, shift=lse)
    got_p = scores.copy()
    tiles.probs_from_lse(got_p, lse, *starts, causal)
    np.testing.assert_allclose(got_p, want_p, **tol(dtype))
    np.testing.assert_allclose(got_p, want, **tol(dtype))  # exp(S - lse) is the softmax again


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tq", [3, 11])  # keys in one tile, and across tiles (online softmax)
def test_flash_attention_carries_a_nan_to_the_rows_that_see_it(small_blocks, dtype, tq):
    """A NaN in query row r or key c: NaN in output row r and in the rows that see key c (causal: from c
    on), finite everywhere else; nothing silently dropped, nothing spread to rows that never saw it."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(1, 2, tq, 4)).astype(dtype) for _ in range(3))
    r, c = tq - 1, tq // 2
    q[0, 0, r, 1] = np.nan
    k[0, 1, c, 2] = np.nan
    out = F.scaled_dot_product_attention(ta.Tensor(q), ta.Tensor(k), ta.Tensor(v), is_causal=True).numpy()
    rows_nan = np.isnan(out).any(axis=-1)  # (1, 2, tq)
    np.testing.assert_array_equal(rows_nan[0, 0], np.arange(tq) == r)
    np.testing.assert_array_equal(rows_nan[0, 1], np.arange(tq) >= c)


@pytest.mark.parametrize("lead", [(), (2,), (2, 3)])
@given(t=st.integers(0, 9), heads=st.integers(1, 3), causal=st.booleans(), masked=st.booleans(),
       strided=st.booleans(), seed=st.integers(0, 2**16))
def test_packed_self_attention_is_attention_on_the_split_heads(small_blocks, lead, t, heads, causal, masked,
                                                               strided, seed):
    """qkv (..., T, 3, H, d): the same output and gradients as scaled_dot_product_attention on q, k, v
    moved to (..., H, T, d), and a float64 gradcheck; `strided` makes qkv a non-contiguous view."""
    rng = np.random.default_rng(seed)
    shape = lead + (t, 3, heads, 2)
    data = rng.normal(size=shape[:-1] + (4,))[..., ::2] if strided else rng.normal(size=shape)
    mask = rng.random(lead[:1] + (1,) * (len(lead) > 1) + (1, t, t)) > 0.3 if masked else None
    qkv = ta.Tensor(data, requires_grad=True)
    out = F.packed_self_attention(qkv, mask=mask, is_causal=causal)
    assert out.shape == lead + (t, heads, 2)

    split = ta.Tensor(data, requires_grad=True)
    q, k, v = (split[..., i, :, :].transpose(-3, -2) for i in range(3))  # (..., H, T, d)
    expected = F.scaled_dot_product_attention(q, k, v, mask=mask, is_causal=causal).transpose(-3, -2)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-12, atol=1e-12)
    grad = rng.normal(size=out.shape)
    out.backward(grad)
    expected.backward(grad)
    np.testing.assert_allclose(qkv.grad.numpy(), split.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert ta.gradcheck(lambda x: F.packed_self_attention(x, mask=mask, is_causal=causal), [qkv])


def test_packed_self_attention_rejects_other_shapes():
    with pytest.raises(ValueError, match=r"qkv must be \(\.\.\., T, 3, H, d\), got shape \(2, 5, 2, 4\)"):
        F.packed_self_attention(ta.Tensor(np.zeros((2, 5, 2, 4))))


@pytest.mark.parametrize("copied_first", [False, True])
def test_transposed_heads_in_place_or_copied_first(monkeypatch, copied_first):
    """k split into heads, (B, H, T, d) strided, to scale * k^T contiguous, gathered in place or from a copy."""
    monkeypatch.setattr(layout, "STRIDED_TRANSPOSE_BYTES", 0 if copied_first else 1 << 30)
    k = np.random.default_rng(0).normal(size=(2, 7, 3, 5)).astype(np.float32).transpose(0, 2, 1, 3)
    got = layout.transposed(k, 0.5, np.empty((2, 3, 5, 7), np.float32))
    assert got.flags.c_contiguous and got.dtype == np.float32
    np.testing.assert_array_equal(got, np.float32(0.5) * k.swapaxes(-1, -2))


@given(n_outer=st.integers(1, 5), n_inner=st.integers(1, 6), tq=st.integers(1, 9), tk=st.integers(1, 9),
       tile_bytes=st.integers(1, 400), min_chunks=st.integers(1, 40))
def test_group_chunks_cover_each_group_once(monkeypatch, n_outer, n_inner, tq, tk, tile_bytes, min_chunks):
    monkeypatch.setattr(layout, "TILE_BYTES", tile_bytes)
    groups = n_outer * n_inner
    size = max(1, min(tile_bytes // (tq * tk * 4), -(-groups // min_chunks)))  # no chunk above a thread's share
    chunks = layout.group_chunks((n_outer, n_inner, tq, tk), (16, 16), 4, min_chunks)
    covered = []
    for ps, hs in chunks:
        assert (ps.stop - ps.start) * (hs.stop - hs.start) <= size
        covered += [p * n_inner + h for p in range(ps.start, ps.stop) for h in range(hs.start, hs.stop)]
    assert covered == list(range(groups))


def _key_range_work(tq, causal, tile, keys):
    """Score entries the backward computes for a key range: every query block's tiles within it."""
    return sum((rows.stop - rows.start) * (cols.stop - cols.start)
               for rows in layout.query_blocks(tq, tile) for cols, _ in layout.key_tiles(rows, keys.stop, causal, tile,
                                                                                          keys))


@given(tq=st.integers(0, 40), tk=st.integers(0, 40), bq=st.integers(1, 8), bk=st.integers(1, 8),
       causal=st.booleans(), n=st.integers(1, 6))
def test_key_ranges_cover_the_keys_in_whole_tiles_with_about_equal_work(tq, tk, bq, bk, causal, n):
    tile = (bq, bk)
    ranges = layout.key_ranges(tq, tk, causal, tile, n)
    assert len(ranges) <= n and [i for r in ranges for i in range(r.start, r.stop)] == list(range(tk))
    assert all(r.start % bk == 0 for r in ranges)
    assert len(ranges) == min(n, -(-tk // bk))  # as many ranges as threads, where there are tiles enough
    work = [_key_range_work(tq, causal, tile, r) for r in ranges]
    heaviest_tile = max((_key_range_work(tq, causal, tile, slice(c, min(c + bk, tk))) for c in range(0, tk, bk)),
                        default=0)
    assert all(w <= sum(work) / max(len(ranges), 1) + heaviest_tile for w in work)  # no range a tile over its share


def _busiest_thread_share(items: list[float], n: int) -> float:
    """Each item goes to whichever of n threads is free first, in order: the busiest one's work / an even share."""
    loads = [0.0] * n
    for work in items:
        loads[loads.index(min(loads))] += work
    return max(loads) * n / sum(items)


@pytest.mark.parametrize("b, t, heads", [(8, 256, 8), (4, 1024, 8), (1, 4096, 8)])
@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_attention_work_is_shared_evenly_among_many_threads(b, t, heads, n):
    """The items flash.py makes for n threads (chunks, query blocks, key ranges), with the tile areas each one
    computes under the causal mask: no thread carries more than 1.2 times an even share."""
    tile, grid = layout.tile_shape(t, True), (b, heads, t, t)
    size = lambda c: (c[0].stop - c[0].start) * (c[1].stop - c[1].start)  # noqa: E731  (groups in a chunk)
    _, items = layout.forward_items(grid, tile, 4, n)
    forward = [size(groups) * sum((rows.stop - rows.start) * (cols.stop - cols.start)
                                  for cols, _ in layout.key_tiles(rows, t, True, tile)) for groups, rows in items]
    _, ranges, items = layout.backward_items(grid, tile, 4, n, True)
    backward = [size(groups) * _key_range_work(t, True, tile, ranges[r]) for groups, r in items]
    assert _busiest_thread_share(forward, n) <= 1.2 and _busiest_thread_share(backward, n) <= 1.2


def test_attention_on_one_thread_keeps_chunks_as_the_cache_sizes_them():
    """Cutting chunks finer pays only for threads: on one, each numpy call keeps covering as many groups."""
    for grid in [(32, 4, 32, 32), (8, 8, 256, 256), (1, 8, 4096, 4096)]:
        tile = layout.tile_shape(grid[2], True)
        assert layout.forward_items(grid, tile, 4, 1)[0] == layout.group_chunks(grid, tile, 4)
        assert layout.backward_items(grid, tile, 4, 1, True)[0] == layout.group_chunks(grid, tile, 4)


def test_flash_attention_keeps_memory_per_tile():
    """At T = 2048 a T x T float64 matrix would be 32 MiB per head; the tiles stay far smaller."""
    import tracemalloc

    rng = np.random.default_rng(0)
    q, k, v = (ta.Tensor(rng.normal(size=(1, 1, 2048, 8)), requires_grad=True) for _ in range(3))
    tracemalloc.start()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.sum().backward()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2048 * 2048 * 8 / 4, f"peak {peak / 2**20:.1f} MiB"
    assert math.isfinite(float(q.grad.numpy().sum()))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("decoupled", [False, True])
def test_adam_kernel_matches_reference(dtype, decoupled):
    from tinygrad_attn.kernels.adam import adam_reference, adam_update

    rng = np.random.default_rng(0)
    param, grad, m = (rng.normal(size=50).astype(dtype) for _ in range(3))
    v = rng.random(50).astype(dtype)
    expected = adam_reference(param, grad, m, v, 0.01, 0.9, 0.999, 1e-8, 3, 0.1, decoupled)
    adam_update(param, grad, m, v, 0.01, 0.9, 0.999, 1e-8, 3, 0.1, decoupled)
    for got, want in zip((param, m, v), expected):
        np.testing.assert_allclose(got, want, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_parameter_gradients_match_reference(dtype):
    from tinygrad_attn.kernels.layernorm import layer_norm_backward

    rng = np.random.default_rng(0)
    x, g = rng.normal(size=(7, 5)).astype(dtype), rng.normal(size=(7, 5)).astype(dtype)
    mean, rstd = x.mean(-1), 1 / np.sqrt(x.var(-1) + 1e-5)
    _, dw, db = layer_norm_backward(g, x, np.ones(5, dtype), mean.astype(dtype), rstd.astype(dtype))
    np.testing.assert_allclose(dw, (g * (x - mean[:, None]) * rstd[:, None]).sum(0), **tol(dtype))
    np.testing.assert_allclose(db, g.sum(0), **tol(dtype))


@pytest.mark.parametrize("eps", [0.0, 1e-2])
def test_layer_norm_dx_has_zero_mean_and_is_orthogonal_to_xhat_only_when_eps_is_zero(eps):
    """The derivation page's claim: sum(dx) = 0 always; sum(dx * xhat) = mean(gw * xhat) N eps rstd^3."""
    from tinygrad_attn.kernels.layernorm import layer_norm_backward, layer_norm_forward

    rng = np.random.default_rng(0)
    x, g, w = rng.normal(size=(3, 6)), rng.normal(size=(3, 6)), rng.normal(size=6)
    _, mean, rstd = layer_norm_forward(x, w, np.zeros(6), eps)
    dx, _, _ = layer_norm_backward(g, x, w, mean, rstd)
    xhat = (x - mean[:, None]) * rstd[:, None]
    np.testing.assert_allclose(dx.sum(-1), 0, atol=1e-12)
    want = (g * w * xhat).mean(-1) * 6 * eps * rstd**3
    np.testing.assert_allclose((dx * xhat).sum(-1), want, atol=1e-12)
    assert (eps == 0) == np.allclose(want, 0)
