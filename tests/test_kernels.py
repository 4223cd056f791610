"""Each numba kernel against its plain-numpy reference, and its backward against finite differences.

Marked `kernels`: CI runs these again with NUMBA_DISABLE_JIT=1, so the Python
fallback of every kernel is checked too.
"""

import math
import re
import time

import numpy as np
import pytest
from conftest import ATTENTION_PRODUCTS, products_on_numba_threads, shapes, share_work_among_threads
from hypothesis import example, given
from hypothesis import strategies as st
from numba import njit

import tinygrad_attn as ta
from tinygrad_attn import functional as F
from tinygrad_attn.kernels import blas, flash, layout, parallel, tiles, vector, visibility
from tinygrad_attn.kernels import softmax as softmax_kernels
from tinygrad_attn.kernels.cross_entropy import cross_entropy_backward, cross_entropy_forward, cross_entropy_reference
from tinygrad_attn.kernels.embedding import scatter_add_rows, scatter_add_rows_reference
from tinygrad_attn.kernels.gelu import gelu_backward, gelu_forward, gelu_reference
from tinygrad_attn.kernels.layernorm import layer_norm_backward, layer_norm_forward, layer_norm_reference
from tinygrad_attn.kernels.relu import relu_backward, relu_forward, relu_reference
from tinygrad_attn.kernels.rmsnorm import rms_norm_backward, rms_norm_forward, rms_norm_reference
from tinygrad_attn.kernels.scratch import scratch
from tinygrad_attn.kernels.softmax import log_softmax_backward, softmax_backward, softmax_forward, softmax_reference
from tinygrad_attn.kernels.views import columns, rows

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
    without, no_lse = softmax_forward(x, np.zeros((0, 0), bool) if keep is None else keep, log, want_lse=False)
    np.testing.assert_array_equal(without, y)  # the same values without the log-sum-exp (softmax's backward)
    assert no_lse.shape == ((rows,) if log else (0,))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("log", [False, True])
@given(rows=st.integers(1, 7), n=st.integers(softmax_kernels.PAIRED_ROWS_FROM - 3, 140), seed=st.integers(0, 2**16),
       start=st.integers(0, 2))
def test_softmax_kernel_on_long_rows_two_at_a_time_matches_reference(dtype, log, rows, n, seed, start):
    """Unmasked rows from PAIRED_ROWS_FROM entries go two at a time (an odd last row alone), from any first row
    a part starts at: values and log-sum-exp as the reference's, a NaN row NaN, an all -inf row 0 beside them."""
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(rows + start, n)) * 5).astype(dtype)
    dead = rng.integers(0, rows)
    x[start + dead] = -np.inf  # a row with nothing to attend to: zeros, lse -inf
    if rows > 1:  # in another row, a NaN, which reaches its own row only
        x[start + (dead + 1 + rng.integers(0, rows - 1)) % rows, rng.integers(0, n)] = np.nan
    out, lse = np.full_like(x, 7.0), np.full(rows + start, 7.0, dtype)
    kernel = softmax_kernels._log_softmax_rows if log else softmax_kernels._softmax_rows
    kernel(x, np.zeros((0, 0), bool), out, lse, start, start + rows)
    np.testing.assert_allclose(out[start:], softmax_reference(x[start:], None, log), **tol(dtype))
    assert np.all(out[:start] == 7.0) and np.all(lse[:start] == 7.0)  # rows before the part untouched
    live = np.isfinite(x[start:]).any(axis=1) | np.isnan(x[start:]).any(axis=1)
    m = np.where(live, np.nanmax(np.where(np.isnan(x[start:]), -np.inf, x[start:]), axis=1), 0)
    with np.errstate(divide="ignore", invalid="ignore"):  # the dead row's log(0), the NaN row's -inf - -inf
        want = np.where(live, m + np.log(np.exp(x[start:] - m[:, None]).sum(axis=1)), -np.inf)
    np.testing.assert_allclose(lse[start:], want, **tol(dtype))


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
@given(rows=st.integers(1, 6), n=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_rms_norm_kernel_matches_reference_and_its_backward_the_finite_differences(dtype, rows, n, seed):
    rng = np.random.default_rng(seed)
    x, w, g = (rng.normal(size=s).astype(dtype) for s in ((rows, n), (n,), (rows, n)))
    y, rstd = rms_norm_forward(x, w, 1e-5)
    np.testing.assert_allclose(y, rms_norm_reference(x, w, 1e-5), **tol(dtype))
    np.testing.assert_allclose(rstd, 1 / np.sqrt((x * x).mean(-1) + 1e-5), rtol=1e-4 if dtype == np.float32 else 1e-10)
    if dtype == np.float64:  # the closed-form backward against central differences of sum(g * y)
        dx, dw = rms_norm_backward(g, x, w, rstd)
        h, loss = 1e-6, lambda x_, w_: (g * rms_norm_reference(x_, w_, 1e-5)).sum()
        for (i, j) in [(r, c) for r in range(rows) for c in range(n)][:12]:
            e = np.zeros_like(x)
            e[i, j] = h
            # relative too: near x = 0 with n = 1 the slope is large (about 1 / sqrt(eps)), and so is h^2 f'''
            np.testing.assert_allclose((loss(x + e, w) - loss(x - e, w)) / (2 * h), dx[i, j], rtol=1e-6, atol=1e-6)
        for j in range(n):
            e = np.zeros_like(w)
            e[j] = h
            np.testing.assert_allclose((loss(x, w + e) - loss(x, w - e)) / (2 * h), dw[j], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@given(rows=st.integers(1, 6), classes=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_cross_entropy_kernel_matches_reference(dtype, rows, classes, seed):
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(rows, classes)) * 4).astype(dtype)
    target = rng.integers(0, classes, rows)
    target[rng.random(rows) < 0.3] = -100
    loss, _, counted = cross_entropy_forward(x, target, -100)
    np.testing.assert_allclose(loss, cross_entropy_reference(x, target, -100), **tol(dtype))
    assert counted == np.count_nonzero(target != -100)


@pytest.mark.parametrize("dtype", DTYPES)
@given(rows=st.integers(1, 9), n=st.integers(1, 140), seed=st.integers(0, 2**16), start=st.integers(0, 2))
def test_cross_entropy_kernel_on_a_part_of_the_rows_matches_reference(dtype, rows, n, seed, start):
    """Counted rows between ignored rows and targets outside [0, C), in a part starting at any row with
    counted rows after it: losses, log-sum-exps and both counts as the reference's, a NaN row and an all
    -inf row beside them."""
    from tinygrad_attn.kernels.cross_entropy import _forward_rows

    rng = np.random.default_rng(seed)
    total, stop = start + rows + 2, start + rows  # two rows after the part, their targets counted
    x = (rng.normal(size=(total, n)) * 5).astype(dtype)
    target = rng.integers(0, n, total)
    kind = rng.integers(0, 4, rows)  # 0, 1: counted; 2: ignored; 3: outside [0, C)
    target[start:stop][kind == 2] = -100
    target[start:stop][kind == 3] = rng.choice([-1, n, n + 5], np.count_nonzero(kind == 3))
    x[start + rng.integers(0, rows)] = -np.inf  # lse -inf, loss NaN (-inf - -inf), as the reference
    x[start + rng.integers(0, rows), rng.integers(0, n)] = np.nan
    loss, lse = np.full(total, 7.0, dtype), np.full(total, 7.0, dtype)
    counted, outside = _forward_rows(x, target, -100, loss, lse, start, stop)
    part, x_part = target[start:stop], x[start:stop]
    good = (part >= 0) & (part < n)
    assert (counted, outside) == (np.count_nonzero(good), np.count_nonzero(~good & (part != -100)))
    with np.errstate(invalid="ignore"):  # the reference's -inf - -inf
        want = np.where(good, cross_entropy_reference(x_part, np.where(good, part, -100), -100), 0)
    np.testing.assert_allclose(loss[start:stop], want, **tol(dtype))
    m = np.max(x_part, axis=1, keepdims=True)  # NaN for the NaN row
    shift = np.where(m == -np.inf, 0, m)  # the all -inf row: exps 0, lse -inf
    with np.errstate(divide="ignore"):
        want_lse = np.where(good, (m + np.log(np.exp(x_part - shift).sum(axis=1, keepdims=True)))[:, 0], 0)
    np.testing.assert_allclose(lse[start:stop], want_lse, **tol(dtype))
    outside_part = np.r_[0:start, stop:total]
    assert np.all(loss[outside_part] == 7.0) and np.all(lse[outside_part] == 7.0)  # rows around the part untouched


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
    y, rstd = rms_norm_forward(x, w, 1e-5)
    results += [y, *rms_norm_backward(g, x, w, rstd)]
    loss, lse, _ = cross_entropy_forward(x, target, -100)
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


def _blas_can_read(x, how):
    """Whether BLAS reads a view made by _view where it lies: reversed rows only when there is one row,
    every other column only when there is one column or one row (then read as a transposed column)."""
    return how in ("row-major", "transposed") or (how == "reversed" and x.shape[0] <= 1) or (
        how == "strided" and min(x.shape) <= 1)


LAYOUTS = st.sampled_from(["row-major", "transposed", "reversed", "strided"])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("blas_threads, private", [(1, False), (2, False), (2, True)])
@given(n=st.integers(0, 9), k=st.integers(0, 20), m=st.integers(0, 6), a_how=LAYOUTS, b_how=LAYOUTS,
       seed=st.integers(0, 2**16), biased=st.booleans())
def test_products_on_numba_threads_equal_numpy(monkeypatch, dtype, blas_threads, private, n, k, m, a_how, b_how,
                                               seed, biased):
    """row_split_matmul's blocks, each a BLAS call from numba's threads (small blocks adding up chunks of the
    inner dimension when BLAS has threads of its own, whole blocks when it has one or when the private copy
    of OpenBLAS runs them), against numpy's a @ b, for every layout; a layout BLAS cannot be told about
    (reversed, strided, empty) takes numpy's path."""
    if private and blas.private_openblas() is None:
        pytest.skip("no private OpenBLAS copy here")
    rng = np.random.default_rng(seed)
    a, b = _view(rng, (n, k), dtype, a_how), _view(rng, (k, m), dtype, b_how)
    bias = rng.normal(size=m).astype(dtype) if biased else None  # a Linear's, added by the blocks
    with monkeypatch.context() as mp:  # per example: the record starts empty
        calls = products_on_numba_threads(mp, blas_threads, private)
        got = parallel.row_split_matmul(a, b, bias)
    np.testing.assert_allclose(got, a @ b + (0 if bias is None else bias), **tol(dtype))
    describable = all(_blas_can_read(x, h) for x, h in ((a, a_how), (b, b_how))) and min(n, k, m) > 0
    if n > 1 and describable and parallel._safe_numba_layer() and parallel.kernel_gemm(np.dtype(dtype))[0] is not None:
        assert calls
    if not describable:
        assert not calls


@pytest.mark.parametrize("dtype", DTYPES)
@given(n=st.integers(1, 9), k=st.integers(1, 9), m=st.integers(1, 9), rows=st.integers(1, 4), cols=st.integers(1, 4),
       depth=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_product_blocks_add_onto_what_the_output_holds(dtype, n, k, m, rows, cols, depth, seed):
    """matmul_blocks on blocks of every size, its products added in chunks of the inner dimension: with beta 1
    onto the bias the output was filled with, against numpy's a @ b + bias; with beta 0 the output is never
    read (NaN there stays out of the result); given the bias, each block writes it first (whole rows through
    the contiguous loop, blocks of some columns through their strides; a strided bias through its strides too)
    and the products add onto it."""
    gemm = parallel.kernel_gemm(np.dtype(dtype))[0]
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(n, k)).astype(dtype), rng.normal(size=(k, m)).astype(dtype)
    bias, none = rng.normal(size=m).astype(dtype), np.empty(0, dtype)
    strided = np.repeat(bias, 2)[::2]  # the same values, every other element of its memory
    blocks = -(-n // rows) * -(-m // cols)
    for beta, fill, start, expected in ((1.0, none, np.broadcast_to(bias, (n, m)), a @ b + bias),
                                        (0.0, none, np.nan, a @ b), (0.0, bias, np.nan, a @ b + bias),
                                        (0.0, strided, np.nan, a @ b + bias)):
        out = np.empty((n, m), dtype)
        out[...] = start
        parallel.any_layout(blas.matmul_blocks)(a, b, out, beta, fill, rows, cols, depth, gemm, 0, blocks)
        np.testing.assert_allclose(out, expected, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@given(n=st.integers(1, 9), m=st.integers(1, 9), extra=st.integers(0, 40), threads=st.integers(2, 3),
       a_how=st.sampled_from(["row-major", "transposed"]), seed=st.integers(0, 2**16))
def test_a_small_output_over_a_long_depth_splits_the_depth(monkeypatch, dtype, n, m, extra, threads, a_how, seed):
    """A product with a small output and a long inner dimension (a weight's gradient) on several threads: each
    thread multiplies a chunk of the inner dimension, the partial products are added, against numpy's a @ b."""
    if blas.private_openblas() is None or not parallel._safe_numba_layer():
        pytest.skip("no private OpenBLAS copy or no thread-safe numba layer here")
    rng = np.random.default_rng(seed)
    k = 4 * max(n, m) + extra
    a, b = _view(rng, (n, k), dtype, a_how), rng.normal(size=(k, m)).astype(dtype)
    with monkeypatch.context() as mp:
        calls = products_on_numba_threads(mp, 2, True)
        mp.setattr(parallel, "_num_threads", threads)
        split = []
        original = parallel._depth_split_matmul
        mp.setattr(parallel, "_depth_split_matmul", lambda *args: split.append(1) or original(*args))
        got = parallel.row_split_matmul(a, b)
    np.testing.assert_allclose(got, a @ b, **tol(dtype))
    if n > 1 and parallel.get_num_threads() > 1:
        assert split and calls


@pytest.mark.parametrize("dtype", DTYPES)
@given(n=st.integers(2, 9), k=st.integers(1, 6), m=st.integers(1, 6), limit=st.integers(1, 40), a_how=LAYOUTS,
       b_how=LAYOUTS, seed=st.integers(0, 2**16), biased=st.booleans())
def test_products_on_the_calling_thread_equal_numpy(monkeypatch, dtype, n, k, m, limit, a_how, b_how, seed, biased):
    """A product too small for numba's threads while BLAS has threads of its own: cut into blocks BLAS runs on
    the caller (rows by numpy's `@` when they fit a few blocks, the compiled blocks otherwise), against a @ b."""
    rng = np.random.default_rng(seed)
    a, b = _view(rng, (n, k), dtype, a_how), _view(rng, (k, m), dtype, b_how)
    with monkeypatch.context() as mp:
        mp.setattr(parallel, "ONE_THREAD_PRODUCT", limit)
        mp.setattr(blas, "ONE_THREAD_PRODUCT", limit)
        mp.setattr(parallel, "blas_threads", lambda: 2)
        mp.setattr(parallel, "_num_threads", 1)
        bias = rng.normal(size=m).astype(dtype) if biased else None
        got = parallel.row_split_matmul(a, b, bias)
    np.testing.assert_allclose(got, a @ b + (0 if bias is None else bias), **tol(dtype))


def _small_kernel_limits(mp) -> list:
    """As on an AVX-512 OpenBLAS, with the small-matrix limits scaled down to hypothesis's sizes: blocks of rows
    of at most 256 multiply-adds and 24 entries of a when k <= 12 and k n <= 48, k whole up to 8 and in
    chunks of at most 6 above; depth chunks of 4 for a transposed a when k >= 16 and its output has at most 48
    entries. Returns the list of the cuts made."""
    mp.setattr(blas, "small_kernels", lambda: True)
    mp.setattr(parallel, "small_kernels", lambda: True)
    mp.setattr(blas, "SMALL_KERNEL_WORK", 256)
    mp.setattr(blas, "SMALL_KERNEL_SIDES", (12, 48))
    mp.setattr(blas, "SMALL_KERNEL_ROWS", 24)
    mp.setattr(blas, "SMALL_KERNEL_DEPTH", (8, 6, 4))
    cuts, original = [], blas.small_kernel_blocks
    mp.setattr(parallel, "small_kernel_blocks", lambda *args: cuts.append((args, original(*args))) or cuts[-1][1])
    return cuts


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("threads", [1, 2])
@given(n=st.integers(1, 40), k=st.integers(1, 40), m=st.integers(1, 12), a_how=st.sampled_from(["row-major",
       "transposed"]), b_how=st.sampled_from(["row-major", "transposed"]), seed=st.integers(0, 2**16),
       biased=st.booleans())
@example(n=40, k=8, m=6, a_how="row-major", b_how="row-major", seed=0, biased=True)  # blocks of 3 rows
@example(n=40, k=11, m=4, a_how="row-major", b_how="row-major", seed=0, biased=False)  # and depth chunks of 6
@example(n=6, k=40, m=8, a_how="transposed", b_how="row-major", seed=0, biased=False)  # depth chunks of 4
@example(n=1, k=22, m=12, a_how="transposed", b_how="row-major", seed=0, biased=False)  # one row: numpy's `@`
def test_products_in_small_kernel_blocks_equal_numpy(monkeypatch, dtype, threads, n, k, m, a_how, b_how, seed,
                                                     biased):
    """Where OpenBLAS's small-matrix kernels beat its whole product (an AVX-512 core), a product is cut into
    blocks under their limit: rows for a narrow inner dimension, depth chunks for a transposed a over a long
    one. On one thread and on two, and as matmul_pair's two products at once, against numpy's."""
    if threads == 2 and (blas.private_openblas() is None or not parallel._safe_numba_layer()):
        pytest.skip("no private OpenBLAS copy or no thread-safe numba layer here")
    rng = np.random.default_rng(seed)
    a, b = _view(rng, (n, k), dtype, a_how), _view(rng, (k, m), dtype, b_how)
    bias = rng.normal(size=m).astype(dtype) if biased else None
    with monkeypatch.context() as mp:
        products_on_numba_threads(mp, 1 if threads == 1 else 2, private=threads == 2)
        mp.setattr(parallel, "_num_threads", threads)
        mp.setattr(parallel, "MIN_PRODUCT_WORK", 0 if threads == 2 else 1 << 40)
        cuts, used = _small_kernel_limits(mp), []  # used: the (rows, columns, depth) the product ran in
        for name in ("matmul_blocks", "matmul_blocks_parallel"):
            kernel = getattr(parallel, name)
            mp.setattr(parallel, name, lambda *args, kernel=kernel: used.append(args[5:8]) or
                       parallel.any_layout(kernel)(*args))
        got = parallel.row_split_matmul(a, b, bias)
        pair_cuts, pair_kernel = [], parallel.matmul_pair_parallel
        mp.setattr(parallel, "matmul_pair_parallel", lambda *args: pair_cuts.append((args[3], args[7])) or
                   parallel.any_layout(pair_kernel)(*args))
        pair = parallel.matmul_pair(b.T, a.T, a, b) if threads == 2 and bias is None else None
        wanted = [blas.small_kernel_blocks(*x.shape, y.shape[1], blas.blas_operand(x)[0], blas.blas_operand(y)[0])
                  or (x.shape[0], y.shape[1], x.shape[1]) for x, y in ((b.T, a.T), (a, b))]  # else whole
    np.testing.assert_allclose(got, a @ b + (0 if bias is None else bias), **tol(dtype))
    if pair is not None:
        np.testing.assert_allclose(pair[0], b.T @ a.T, **tol(dtype))
        np.testing.assert_allclose(pair[1], a @ b, **tol(dtype))
        assert pair_cuts == [tuple(wanted)] or not parallel._safe_numba_layer()  # each product in its own cut
    for (rows_, inner, cols_, a_flag, b_flag), cut in cuts:  # every cut under the limits, as described
        if cut is None:
            continue
        rows, cols, depth = cut
        assert cols == cols_ and rows * cols * depth <= 256 and 1 <= rows <= rows_
        if a_flag == b_flag == blas.NO_TRANS:
            chunks = -(-inner // depth)
            assert inner <= 12 and inner * cols_ <= 48 and rows * depth <= 24
            assert depth == inner if inner <= 8 else (depth <= 6 and depth * chunks >= inner > depth * (chunks - 1))
        else:
            assert a_flag == blas.TRANS and depth == 4 and rows == rows_ and inner >= 16
    cut = cuts[0][1] if cuts else None  # row_split_matmul's own, made first
    if a_how == b_how == "row-major" and n * k * m > 256 and k <= 12 and k * m <= 48:
        assert cut is not None and used[0] == cut  # a narrow product, cut into rows (and depth chunks past 8)
    if threads == 1 and a_how == "transposed" and n >= 2 and n * k * m > 256 and k >= 16 and n * m <= 48:
        assert cut is not None and used[0] == cut  # a weight's gradient, in depth chunks


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("blas_threads, private", [(1, False), (2, True), (2, False)])
@given(n=st.integers(0, 9), m=st.integers(0, 6), how=LAYOUTS, seed=st.integers(0, 2**16))
def test_column_sums_equal_numpy(monkeypatch, dtype, blas_threads, private, n, m, how, seed):
    """A Linear's bias gradient, sum over rows, by a BLAS product with ones (numpy's BLAS on one thread, or
    the private copy) or numpy's sum (neither), for every layout, empty included."""
    a = _view(np.random.default_rng(seed), (n, m), dtype, how)
    monkeypatch.setattr(parallel, "blas_threads", lambda: blas_threads)
    monkeypatch.setattr(parallel, "COLUMN_SUMS_BY_PRODUCT", 0)  # the product however small the array
    if blas_threads > 1:
        gemm = blas._private_gemm(np.dtype(dtype)) if private else None
        monkeypatch.setattr(parallel, "kernel_gemm", lambda d: (gemm, True) if gemm is not None else
                            (blas.gemm_for(d), False))
    got = parallel.column_sums(a)
    assert got.shape == (m,) and got.dtype == dtype
    np.testing.assert_allclose(got, a.sum(axis=0), **tol(dtype))


def test_the_private_openblas_copy_leaves_numpys_as_it_was():
    """By default the library's large products go to a private copy of numpy's OpenBLAS set to one thread: a
    whole product there runs on its caller alone (process CPU time about its wall time), and numpy's OpenBLAS
    keeps its own thread count."""
    import resource

    if blas.private_openblas() is None or blas.openblas() is None:
        pytest.skip("no OpenBLAS copy here")
    before = blas.blas_threads()
    gemm = blas._private_gemm(np.dtype(np.float32))
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(512, 256)).astype(np.float32), rng.normal(size=(256, 512)).astype(np.float32)
    out = np.empty((512, 512), np.float32)
    product = lambda: gemm(blas.ROW_MAJOR, blas.NO_TRANS, blas.NO_TRANS, 512, 512, 256, 1.0, a.ctypes.data,  # noqa: E731
                           256, b.ctypes.data, 512, 0.0, out.ctypes.data, 512)  # one whole product: 2^26 multiply-adds
    product()
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-3)
    usage = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])  # noqa: E731
    time.sleep(0.5)  # threads that spin after earlier work (numpy's OpenBLAS, numba's) go to sleep first
    wall, cpu = time.perf_counter(), usage()
    for _ in range(100):
        product()
    assert usage() - cpu < 1.5 * (time.perf_counter() - wall) + 0.05  # one thread at work, not two
    assert blas.blas_threads() == before


def test_products_on_numba_threads_refuse_mismatched_shapes(monkeypatch):
    """Shapes that do not chain never reach BLAS from numba's threads (it would read past the arrays)."""
    products_on_numba_threads(monkeypatch)
    a, b = np.ones((64, 8), np.float32), np.ones((16, 8), np.float32)
    with pytest.raises(ValueError, match="mismatch"):
        parallel.row_split_matmul(a, b)


@pytest.fixture(params=ATTENTION_PRODUCTS)
def small_blocks(monkeypatch, request):
    """Tiles of at most 4 queries x 3 keys, so short sequences cross many tile borders, with the work shared
    among 3 threads however small it is; the tile products through BLAS or the compiled loops."""
    share_work_among_threads(monkeypatch, 3, request.param)
    monkeypatch.setattr(layout, "MAX_ROWS", 4)
    monkeypatch.setattr(layout, "MAX_KEYS", 3)


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


@pytest.fixture(params=ATTENTION_PRODUCTS)
def default_tiles(monkeypatch, request):
    """The default tiles, so short sequences fit one tile (the toy tasks' case), with the groups shared
    among 3 threads however small the work; the tile products through BLAS or the compiled loops."""
    share_work_among_threads(monkeypatch, 3, request.param)


@pytest.mark.parametrize("kind", ["none", "bool", "float"])
@given(tq=st.integers(0, 20), tk=st.integers(0, 9), d=st.integers(1, 4), causal=st.booleans(), packed=st.booleans(),
       seed=st.integers(0, 2**16))
def test_one_tile_per_group_matches_reference_and_gradchecks(default_tiles, kind, tq, tk, d, causal, packed, seed):
    """Groups of one tile against the dense reference, and gradcheck in float64, with masks (a fully masked row
    among them), on separate q, k, v and on heads split from a packed qkv (strided groups, the gradient
    written into one packed array); under flash.FEW_ROWS query rows k^T is read in place, from it laid out."""
    rng = np.random.default_rng(seed)
    if packed:
        tk = tq
        qkv = ta.Tensor(rng.normal(size=(2, tq, 3, 3, d)), requires_grad=True)  # (B, T, 3, H, d)
        split = lambda a: [np.swapaxes(a[:, :, i], 1, 2) for i in range(3)]  # noqa: E731
        q, k, v = split(qkv.detach().numpy())
        inputs = [qkv]
        attend = lambda x: F.packed_self_attention(x, mask=mask, is_causal=causal)  # noqa: E731
    else:
        q, k, v = (rng.normal(size=(2, 3, t, d)) for t in (tq, tk, tk))
        inputs = [ta.Tensor(a, requires_grad=True) for a in (q, k, v)]
        attend = lambda *x: F.scaled_dot_product_attention(*x, mask=mask, is_causal=causal)  # noqa: E731
    mask = _random_mask(rng, kind, (2, 3), tq, tk, np.float64)
    bias = None if mask is None else np.where(mask, 0.0, -np.inf) if mask.dtype == bool else mask
    out = attend(*inputs).detach().numpy()
    expected = flash.attention_reference(q, k, v, 1 / math.sqrt(d), causal, bias)
    np.testing.assert_allclose(out.swapaxes(1, 2) if packed else out, expected, **tol(np.float64))
    assert ta.gradcheck(attend, inputs)


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_tile_per_group_carries_a_nan_to_the_rows_that_see_it(default_tiles, dtype):
    """As test_flash_attention_carries_a_nan_to_the_rows_that_see_it, with every group one tile."""
    rng = np.random.default_rng(0)
    tq = 7
    q, k, v = (rng.normal(size=(1, 2, tq, 4)).astype(dtype) for _ in range(3))
    q[0, 0, tq - 1, 1] = np.nan
    k[0, 1, 3, 2] = np.nan
    out = F.scaled_dot_product_attention(ta.Tensor(q), ta.Tensor(k), ta.Tensor(v), is_causal=True).numpy()
    rows_nan = np.isnan(out).any(axis=-1)
    np.testing.assert_array_equal(rows_nan[0, 0], np.arange(tq) == tq - 1)
    np.testing.assert_array_equal(rows_nan[0, 1], np.arange(tq) >= 3)


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
    dense = [np.ascontiguousarray(a.detach().numpy()) for a in split]
    bias = np.where(padding, 0.0, -np.inf)
    np.testing.assert_allclose(out.detach().numpy(), flash.attention_reference(*dense, 2**-0.5, causal, bias),
                               rtol=1e-12, atol=1e-12)
    merged = out.transpose(1, 2)
    assert merged.detach().numpy().flags.c_contiguous or heads == 1 or t == 1
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


@njit
def _read(view):
    """The view's elements read one by one in compiled code, which indexes as the view's type says it lies."""
    out = np.empty(view.shape)
    for i in range(view.shape[0]):
        for j in range(view.shape[1]):
            out[i, j] = view[i, j]
    return out


@njit  # not cached, like _exp_each below
def _doubled(x):
    return 2 * x


@njit
def _doubled_out_of_line(x):
    vector.never_inline()
    return 2 * x


@njit
def _both_doubled(x):
    return _doubled(x) + _doubled_out_of_line(x)


def test_never_inline_keeps_its_caller_a_call():
    """In the optimised code of a caller, a function marked never_inline is still called, where the same
    function unmarked is inlined (the control: LLVM inlines a function this small)."""
    assert _both_doubled(3) == 12
    if not hasattr(_both_doubled, "inspect_llvm"):
        pytest.skip("NUMBA_DISABLE_JIT: plain Python, nothing is inlined")
    called = re.findall(r"call [^@]*@\"?([\w.$]+)", _both_doubled.inspect_llvm(_both_doubled.signatures[0]))
    assert any("_doubled_out_of_line" in name for name in called), called
    assert not any(re.search(r"\d_doubledB", name) for name in called), called


@njit  # not cached, like _exp_each below
def _extrema(a, b):
    out = np.empty((2, a.size), a.dtype)
    for i in range(a.size):
        out[0, i], out[1, i] = vector.minimum(a[i], b[i]), vector.maximum(a[i], b[i])
    return out


@pytest.mark.parametrize("dtype", DTYPES + [np.int64, np.int32, np.uint8])
@given(seed=st.integers(0, 2**16))
def test_minimum_and_maximum_are_numpys(dtype, seed):
    """Compiled (LLVM's minimum, maximum, smin, smax, umin, umax): numpy's np.minimum and np.maximum, a NaN
    on either side giving NaN, and integers of either sign compared as numbers."""
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.floating):
        pool = np.array([0.0, -0.5, 1.5, -np.inf, np.inf, np.nan, 3.0, -2.0], dtype)
    else:
        info = np.iinfo(dtype)
        pool = np.array([info.min, info.max, 0, 1, info.min // 2 + 1, 7], dtype)
    a, b = rng.choice(pool, 40), rng.choice(pool, 40)
    got = _extrema(a, b)
    np.testing.assert_array_equal(got[0], np.minimum(a, b))
    np.testing.assert_array_equal(got[1], np.maximum(a, b))


@njit  # not cached, like _exp_each below
def _views(a, r0, r1, c0, c1):
    views = rows(a, r0, r1), columns(a, c0, c1), columns(rows(a, r0, r1), c0, c1)
    return views, (_read(views[0]), _read(views[1]), _read(views[2]))


@njit
def _rows_of_a_local_array(n, start, stop):
    return rows(np.arange(n * 3.0).reshape(n, 3), start, stop)  # the view must keep the array it views alive


@pytest.mark.parametrize("how", ["contiguous", "transposed", "every other row"])
@given(data=st.data(), shape=shapes(min_dims=2, max_dims=3, max_side=5), seed=st.integers(0, 2**16))
def test_row_and_column_views_are_numpys_slices(how, data, shape, seed):
    """views.rows and views.columns compiled: the same elements, shape and strides as numpy's slices, for
    every in-range bound (empty views too), on contiguous and strided arrays, and views that write through."""
    base = np.random.default_rng(seed).normal(size=shape[::-1] if how == "transposed" else shape)
    a = {"contiguous": base, "transposed": base.T, "every other row": np.repeat(base, 2, axis=0)[::2]}[how]
    r0 = data.draw(st.integers(0, a.shape[0]))
    r1 = data.draw(st.integers(r0, a.shape[0]))
    c0 = data.draw(st.integers(0, a.shape[1]))
    c1 = data.draw(st.integers(c0, a.shape[1]))
    got, read = _views(a, r0, r1, c0, c1)
    for view, values, want in zip(got, read, (a[r0:r1], a[:, c0:c1], a[r0:r1, c0:c1])):
        assert view.shape == want.shape and view.strides == want.strides
        np.testing.assert_array_equal(view, want)
        np.testing.assert_array_equal(values, want)
        assert view.size == 0 or np.shares_memory(view, a)
    assert got[0].flags.c_contiguous == a[r0:r1].flags.c_contiguous
    if got[2].size:
        got[2][...] = -7.0  # a view, not a copy: the write reaches a
        assert np.all(a[r0:r1, c0:c1] == -7.0)
    kept = _rows_of_a_local_array(6, 1, 4)
    np.testing.assert_array_equal(kept, np.arange(18.0).reshape(6, 3)[1:4])


@njit  # not cached, like _views
def _scratch_filled(n_rows, n_cols, like):
    a, b = scratch(n_rows, n_cols, like), scratch(n_rows, n_cols, like)  # two arrays: neither overlaps the other
    for i in range(n_rows):
        for j in range(n_cols):
            a[i, j], b[i, j] = (i * n_cols + j) % 100, -1
    return a, b


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8])
@given(n_rows=st.integers(0, 9), n_cols=st.integers(0, 70))
def test_scratch_is_a_new_c_array_in_the_dtype_asked(dtype, n_rows, n_cols):
    """scratch.scratch compiled: np.empty((n_rows, n_cols), like.dtype), C-contiguous, writable, its own memory
    (filled whole, the second array's writes leave the first's values), and alive after the kernel returns."""
    a, b = _scratch_filled(n_rows, n_cols, np.zeros(1, dtype))
    want = (np.arange(n_rows * n_cols) % 100).reshape(n_rows, n_cols).astype(dtype)
    for got in (a, b):
        assert got.shape == (n_rows, n_cols) and got.dtype == dtype and got.flags.c_contiguous and got.flags.writeable
        assert got.size == 0 or (got.strides == want.strides and got.ctypes.data % got.dtype.alignment == 0)
    np.testing.assert_array_equal(a, want)
    np.testing.assert_array_equal(b, np.full_like(want, -1))
    assert a.size == 0 or not np.shares_memory(a, b)


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
    scores = rng.normal(size=(3, bk)).astype(dtype)
    scores[rng.random(scores.shape) < 0.2] = -np.inf
    scores[1, rng.integers(bk)] = np.nan
    for i, first, limit in [(i, f, stop) for i in range(3) for stop in range(bk + 1) for f in (0, stop // 2)]:
        for start in (-np.inf, 0.5, np.nan):
            got = tiles.row_max(scores, i, first, limit, dtype(start))
            want = np.max(np.concatenate([[start], scores[i, first:limit]]).astype(dtype))
            np.testing.assert_array_equal(got, want)


U = visibility.UNBOUNDED
BANDS = [(-U, U), (-U, 0), (-2, 0), (-3, 1), (0, U)]  # full, causal, windows, the keys from the query on


def _tile_probs_reference(scores, q_start, k_start, band, shift=None):
    """Each row's visible keys (the band of visibility.py: key c seen by query q when q + lo <= c <= q + hi,
    written out here entry by entry): P = softmax, or exp(S - shift) given the row's lse; 0 where hidden or
    where nothing is seen. Returns P and each row's max."""
    bq, bk = scores.shape
    probs, maxima = np.zeros_like(scores), np.full(bq, -np.inf, scores.dtype)
    for i in range(bq):
        seen = np.array([q_start + i + band[0] <= k_start + j <= q_start + i + band[1] for j in range(bk)], bool)
        row = scores[i, seen]
        m = np.max(row, initial=-np.inf)
        s = m if shift is None else shift[i]
        maxima[i] = m
        if seen.any() and s != -np.inf:
            e = np.exp(row - s)
            probs[i, seen] = e if shift is not None else e / e.sum()
    return probs, maxima


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("keys", [(1, 20), (60, 140)])  # a tile's keys: few, and past a 512-bit vector's multiples
@given(data=st.data(), bq=st.integers(1, 5), starts=st.sampled_from([(0, 0), (3, 0), (0, 2), (70, 5)]),
       band=st.sampled_from(BANDS), seed=st.integers(0, 2**16))
def test_online_softmax_and_probs_match_numpy_on_short_and_long_rows(dtype, keys, data, bq, starts, band, seed):
    """online_softmax over a row's keys in one tile and in two, and exp_shifted by lse, against numpy on rows
    of few and of many keys (each row one vectorised loop over its keys), with masked (-inf)
    scores, a row with nothing visible, and a NaN."""
    bk = data.draw(st.integers(*keys))
    rng = np.random.default_rng(seed)
    scores = (3 * rng.normal(size=(bq, bk))).astype(dtype)
    scores[rng.random(scores.shape) < 0.2] = -np.inf
    scores[0] = -np.inf  # nothing to attend to
    scores[bq - 1, rng.integers(bk)] = np.nan  # NaN in the row when it is visible
    want, want_max = _tile_probs_reference(scores, *starts, band)
    got, m, l, alpha = scores.copy(), np.full(bq, -np.inf, dtype), np.zeros(bq, dtype), np.empty(bq, dtype)
    tiles.online_softmax(got, bk, m, l, alpha, *starts, *band)  # from nothing seen: P = exp(S - m), l its sum
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_allclose(np.where(got != 0, got / l[:, None], got), want, **tol(dtype))
        lse = np.where(l > 0, m + np.log(l), np.where(np.isnan(l), np.nan, -np.inf)).astype(dtype)
    np.testing.assert_array_equal(m, want_max)
    half = bk // 2  # the same row in two key tiles: the running max and sum end where one tile's do
    m2, l2 = np.full(bq, -np.inf, dtype), np.zeros(bq, dtype)
    first, second = scores[:, :half].copy(), scores[:, half:].copy()
    tiles.online_softmax(first, half, m2, l2, alpha, starts[0], starts[1], *band)
    tiles.online_softmax(second, bk - half, m2, l2, alpha, starts[0], starts[1] + half, *band)
    np.testing.assert_array_equal(m2, m)
    np.testing.assert_allclose(l2, l, **tol(dtype))
    seen = np.isfinite(m)  # (P alpha of the first tile, P of the second) / l: the softmax (NaN rows: NaN anyway)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_allclose((first * (alpha / l2)[:, None])[seen], want[seen, :half], **tol(dtype))
        np.testing.assert_allclose((second / l2[:, None])[seen], want[seen, half:], **tol(dtype))
    want_p, _ = _tile_probs_reference(scores, *starts, band, shift=lse)
    got_p = scores.copy()
    tiles.exp_shifted(got_p, bk, lse, *starts, *band)
    np.testing.assert_allclose(got_p, want_p, **tol(dtype))
    np.testing.assert_allclose(got_p, want, **tol(dtype))  # exp(S - lse) is the softmax again


@pytest.mark.parametrize("dtype", DTYPES)
@given(bq=st.integers(1, 5), n=st.integers(0, 20), extra=st.integers(1, 20), band=st.sampled_from(BANDS),
       seed=st.integers(0, 2**16))
def test_tile_kernels_read_and_write_only_the_tiles_columns(dtype, bq, n, extra, band, seed):
    """A tile in the first n columns of wider rows (the last, narrower key tile in the scratch buffer): the
    same results as on rows exactly n wide, and the columns past n, NaN here, neither read nor written."""
    rng = np.random.default_rng(seed)
    scores, grads = (3 * rng.normal(size=(bq, n))).astype(dtype), rng.normal(size=(bq, n)).astype(dtype)
    delta, scale = rng.normal(size=bq).astype(dtype), dtype(0.7)

    def run(width):
        s, dp = np.full((bq, width), np.nan, dtype), np.full((bq, width), np.nan, dtype)
        s[:, :n], dp[:, :n] = scores, grads
        p, m, l, alpha = s.copy(), np.full(bq, -np.inf, dtype), np.zeros(bq, dtype), np.empty(bq, dtype)
        tiles.online_softmax(s, n, m, l, alpha, 2, 0, *band)
        tiles.exp_shifted(p, n, m + np.log(l, where=l > 0, out=np.full(bq, -np.inf, dtype)), 2, 0, *band)
        tiles.score_gradient(s, dp, n, delta, scale)
        return s, p, dp, m, l, alpha

    exact, wide = run(n), run(n + extra)
    for got, want in zip(wide, exact):
        np.testing.assert_array_equal(got[..., :n] if got.ndim == 2 else got, want)
    for past in wide[:3]:
        assert np.isnan(past[:, n:]).all()


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
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-12, atol=1e-12)
    grad = rng.normal(size=out.shape)
    out.backward(grad)
    expected.backward(grad)
    np.testing.assert_allclose(qkv.grad.numpy(), split.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert ta.gradcheck(lambda x: F.packed_self_attention(x, mask=mask, is_causal=causal), [qkv])


def test_packed_self_attention_rejects_other_shapes():
    with pytest.raises(ValueError, match=r"qkv must be \(\.\.\., T, 3, H, d\), got shape \(2, 5, 2, 4\)"):
        F.packed_self_attention(ta.Tensor(np.zeros((2, 5, 2, 4))))


def _seen(tq, tk, band, r0, r1, c0, c1):
    """Whether some query of [r0, r1) sees some key of [c0, c1) under the band, entry by entry."""
    i, j = np.arange(r0, r1)[:, None], np.arange(c0, c1)[None, :]
    return bool(((j >= i + band[0]) & (j <= i + band[1])).any())


@given(tq=st.integers(0, 40), tk=st.integers(0, 40), bq=st.integers(1, 8), bk=st.integers(1, 8),
       band=st.sampled_from(BANDS), n=st.integers(1, 6))
def test_key_ranges_cover_the_keys_in_whole_tiles_with_about_equal_work(tq, tk, bq, bk, band, n):
    tile = (bq, bk)
    per_tile = np.array([_backward_work(tq, tk, band, tile, c, min(c + bk, tk)) for c in range(0, tk, bk)])
    edges = layout.key_ranges(per_tile, tk, bk, n)
    ranges = list(zip(edges[:-1], edges[1:]))
    assert 1 <= len(ranges) <= max(1, min(n, -(-tk // bk))) and edges[0] == 0 and edges[-1] == tk
    assert all(lo < hi for lo, hi in ranges) or tk == 0
    assert all(lo % bk == 0 for lo, _ in ranges)
    work = [_backward_work(tq, tk, band, tile, lo, hi) for lo, hi in ranges]
    heaviest_tile = max(per_tile, default=0)
    assert all(w <= sum(work) / len(ranges) + heaviest_tile for w in work)  # no range a tile over its share


@given(tq=st.integers(0, 30), tk=st.integers(0, 30), bq=st.integers(1, 7), bk=st.integers(1, 7),
       band=st.sampled_from(BANDS + [(-1, 1), (2, 5), (-9, -4)]), data=st.data())
def test_tile_grid_keeps_exactly_the_tiles_some_query_sees(tq, tk, bq, bk, band, data):
    """visibility.tile_grid against the band entry by entry: EMPTY where no query of the block sees a key of
    the tile, FULL where every query sees every key, PARTIAL otherwise; with a block mask's cells (blocks
    of other sizes than the tiles) an EMPTY cell hides its entries and a tile is FULL only if all its cells are."""
    grid = visibility.tile_grid(*band, tq, tk, (bq, bk))
    for t in range(-(-tq // bq)):
        for u in range(-(-tk // bk)):
            r0, r1, c0, c1 = t * bq, min(t * bq + bq, tq), u * bk, min(u * bk + bk, tk)
            i, j = np.arange(r0, r1)[:, None], np.arange(c0, c1)[None, :]
            inside = (j >= i + band[0]) & (j <= i + band[1])
            want = visibility.FULL if inside.all() else visibility.PARTIAL if inside.any() else visibility.EMPTY
            assert grid[0, 0, t, u] == want
            first, stop = visibility.block_columns(r0, r1, c0, c1, *band)  # the only keys the kernels multiply
            seen = np.flatnonzero(inside.any(axis=0)) + c0
            assert (first, stop) == ((seen[0], seen[-1] + 1) if len(seen) else (first, first))
            assert c0 <= first <= stop <= c1
    if tq == 0 or tk == 0:
        return
    sizes = data.draw(st.tuples(st.integers(1, 9), st.integers(1, 9)))
    cells = data.draw(st.lists(st.integers(0, 2), min_size=1, max_size=1))[0]
    nq, nk = -(-tq // sizes[0]), -(-tk // sizes[1])
    blocks = np.random.default_rng(cells).integers(0, 3, size=(1, 2, nq, nk)).astype(np.int8)
    masked = visibility.tile_grid(*band, tq, tk, (bq, bk), blocks, sizes)
    for h in range(2):
        for t in range(-(-tq // bq)):
            for u in range(-(-tk // bk)):
                covered = blocks[0, h, t * bq // sizes[0]:(min(t * bq + bq, tq) - 1) // sizes[0] + 1,
                                 u * bk // sizes[1]:(min(u * bk + bk, tk) - 1) // sizes[1] + 1]
                alone = grid[0, 0, t, u]
                want = (visibility.EMPTY if alone == visibility.EMPTY or (covered == 0).all() else
                        alone if (covered == 2).all() else visibility.PARTIAL)
                assert masked[0, h, t, u] == want


def _forward_work(tq, tk, band, tile, block):
    """Score entries the forward computes for one query block: its rows times the keys of every tile in
    which some row sees some key (the tiles attend_query_blocks does not skip), counted entry by entry."""
    r0, r1 = block * tile[0], min(block * tile[0] + tile[0], tq)
    return sum((r1 - r0) * (min(c0 + tile[1], tk) - c0) for c0 in range(0, tk, tile[1])
               if _seen(tq, tk, band, r0, r1, c0, min(c0 + tile[1], tk)))


def _backward_work(tq, tk, band, tile, lo, hi):
    """Score entries the backward computes for the keys [lo, hi): the (query block, key tile) pairs in which
    some query sees some key."""
    return sum((min(r0 + tile[0], tq) - r0) * (min(c0 + tile[1], tk) - c0)
               for c0 in range(lo, hi, tile[1]) for r0 in range(0, tq, tile[0])
               if _seen(tq, tk, band, r0, min(r0 + tile[0], tq), c0, min(c0 + tile[1], tk)))


# (groups = batch x heads, T, d): the four shapes of benchmarks/bench_attention.py, then the toy tasks'.
PLAN_SHAPES = [(32 * 4, 32, 16), (8 * 8, 256, 32), (4 * 8, 1024, 64), (1 * 8, 4096, 64),
               (64 * 4, 16, 16), (32 * 4, 32, 16), (8 * 8, 64, 32)]


@pytest.mark.parametrize("groups, t, d", PLAN_SHAPES)
@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32])
@pytest.mark.parametrize("band", [(-U, U), (-U, 0), (-255, 0)])  # full, causal, a sliding window of 256
def test_attention_work_is_shared_evenly_among_many_threads(groups, t, d, n, band):
    """The work plans for n threads: every item once, and no thread with more than 1.15 times the mean
    work, counted entry by entry from the band, in the forward and the backward."""
    tile = layout.tile_shape(t, t, d)
    grid = visibility.tile_grid(*band, t, t, tile)
    lead = (1, groups)
    bounds, items = layout.forward_plan(lead, grid, tile, t, t, n)
    assert sorted(items) == list(range(groups * -(-t // tile[0]))) and len(bounds) - 1 == min(n, len(items))
    blocks = -(-t // tile[0])
    per_block = [_forward_work(t, t, band, tile, b) for b in range(blocks)]
    loads = [sum(per_block[i % blocks] for i in items[a:b]) for a, b in zip(bounds, bounds[1:])]
    assert max(loads) <= 1.15 * np.mean(loads)
    edges, (bounds, items) = layout.backward_plan(lead, grid, tile, t, t, n)
    ranges = len(edges) - 1
    assert sorted(items) == list(range(groups * ranges))
    per_range = [_backward_work(t, t, band, tile, edges[r], edges[r + 1]) for r in range(ranges)]
    loads = [sum(per_range[i % ranges] for i in items[a:b]) for a, b in zip(bounds, bounds[1:])]
    assert max(loads) <= 1.15 * np.mean(loads)


@given(work=st.lists(st.integers(0, 100), max_size=60), n=st.integers(1, 40))
def test_share_out_gives_every_item_to_one_thread(work, n):
    bounds, items = layout.share_out(np.array(work, np.int64), n)
    assert sorted(items) == list(range(len(work))) and bounds[0] == 0 and bounds[-1] == len(work)
    assert len(bounds) - 1 == max(1, min(n, len(work))) and all(np.diff(bounds) >= 0)


@given(groups=st.integers(1, 64), blocks=st.integers(1, 8), n=st.integers(2, 16))
@example(groups=1, blocks=8, n=4)  # runs 1+2+3+4 | 5+6 | 7 | 8 would be 22% over a fair share: dealt out instead
@example(groups=3, blocks=1, n=2)  # equal items dealt out in order: 0 | 1 2
def test_share_out_keeps_whole_heads_together_when_that_shares_fairly(groups, blocks, n):
    """Equal heads (causal blocks within each): runs of consecutive items, each thread's heads its own, so no
    two threads write the rows of neighbouring heads; the work still within CONTIGUOUS_SLACK of a fair share."""
    work = np.tile(np.arange(1, blocks + 1), groups)  # (group, query block): a later block sees more keys
    bounds, items = layout.share_out(work, n)
    loads = [work[items[a:b]].sum() for a, b in zip(bounds, bounds[1:])]
    if list(items) == list(range(len(work))):  # in order: runs, kept only when fair ...
        fair = max(loads) <= work.sum() / len(loads) * (1 + layout.CONTIGUOUS_SLACK) + 1e-9
        # ... or equal items dealt out, which stay in order when there is at most one more than threads (0 | 1 2)
        assert fair or (blocks == 1 and len(work) <= n + 1)
    if groups % n == 0:  # whole heads share out exactly
        assert list(items) == list(range(len(work))) and all((b - a) % blocks == 0 for a, b in zip(bounds, bounds[1:]))


def test_flash_attention_keeps_memory_per_tile():
    """At T = 2048 a T x T float64 matrix would be 32 MiB per head; the tiles stay far smaller."""
    import tracemalloc

    rng = np.random.default_rng(0)
    warm = ta.Tensor(rng.normal(size=(1, 1, 4, 8)), requires_grad=True)  # numba's own first-call imports, not traced
    F.scaled_dot_product_attention(warm, warm, warm, is_causal=True).sum().backward()
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
@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("amsgrad", [False, True])
def test_adam_kernel_matches_reference(dtype, decoupled, maximize, amsgrad):
    from tinygrad_attn.kernels.adam import adam_reference, adam_update

    rng = np.random.default_rng(0)
    param, grad, m = (rng.normal(size=50).astype(dtype) for _ in range(3))
    v = rng.random(50).astype(dtype)
    v_max = (v + rng.random(50) * (rng.random(50) < 0.5)).astype(dtype) if amsgrad else None  # above v in half
    expected = adam_reference(param, grad, m, v, 0.01, 0.9, 0.999, 1e-8, 3, 0.1, decoupled, maximize, v_max)
    adam_update(param, grad, m, v, np.empty(0, dtype) if v_max is None else v_max, 0.01, 0.9, 0.999, 1e-8, 3, 0.1,
                decoupled, maximize)
    for got, want in zip((param, m, v) + (() if v_max is None else (v_max,)), expected):
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


@pytest.mark.parametrize("dtype", DTYPES)
@given(n=st.integers(1, 9), k=st.integers(1, 9), m=st.integers(1, 9), a_how=LAYOUTS, b_how=LAYOUTS,
       seed=st.integers(0, 2**16))
def test_two_products_at_once_equal_numpy(monkeypatch, dtype, n, k, m, a_how, b_how, seed):
    """matmul_pair: a layer's dX = g W and dW = g^T X, each whole on one of two threads, against numpy's; a
    layout BLAS cannot read in place takes row_split_matmul's path."""
    if blas.private_openblas() is None or not parallel._safe_numba_layer():
        pytest.skip("no private OpenBLAS copy or no thread-safe numba layer here")
    rng = np.random.default_rng(seed)
    g, w = _view(rng, (n, m), dtype, a_how), _view(rng, (m, k), dtype, b_how)
    x = rng.normal(size=(n, k)).astype(dtype)
    with monkeypatch.context() as mp:
        calls = products_on_numba_threads(mp, 2, True)
        mp.setattr(parallel, "_num_threads", 2)
        pairs = []
        kernel = parallel.any_layout(parallel.matmul_pair_parallel)  # the version the library calls
        mp.setattr(parallel, "matmul_pair_parallel", lambda *args: pairs.append(1) or kernel(*args))
        dx, dw = parallel.matmul_pair(g, w, g.T, x)
    np.testing.assert_allclose(dx, g @ w, **tol(dtype))
    np.testing.assert_allclose(dw, g.T @ x, **tol(dtype))
    assert bool(pairs) == all(blas.blas_operand(v) is not None for v in (g, w, g.T, x))  # BLAS reads each in place
    assert not (pairs and calls)  # the pair is one launch: no product cut into blocks besides


@pytest.mark.parametrize("dtype", DTYPES)
@given(size=st.integers(0, 3 * (1 << 15)), threads=st.integers(1, 3))
def test_zeros_filled_on_numba_threads_are_zeros(monkeypatch, dtype, size, threads):
    """parallel.zeros: memory reused from the pool (NaN-filled before, so a part left unwritten shows), zero
    everywhere, filled by numba's threads when large enough to share."""
    with monkeypatch.context() as mp:
        mp.setattr(parallel, "_num_threads", threads)
        fills = []
        kernel = parallel._zero_parallel
        mp.setattr(parallel, "_zero_parallel", lambda *args: fills.append(args[1]) or kernel(*args))
        parallel.buffers.empty((size // 3, 3), dtype).fill(np.nan)  # a pooled buffer, handed out again below
        got = parallel.zeros((size // 3, 3), dtype)
    assert got.shape == (size // 3, 3) and got.dtype == dtype and got.flags.c_contiguous
    np.testing.assert_array_equal(got, np.zeros((size // 3, 3), dtype))
    if parallel._safe_numba_layer() and threads > 1 and got.size >= parallel.MIN_ROWS_WORK:
        assert fills == [threads]
