"""The attention core's seam (`sdpa_kernel`), its math path, empty and NaN inputs on both paths,
concurrent calls from several threads, and what importing the library leaves untouched."""

import inspect
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import ATTENTION_PRODUCTS, share_work_among_threads

import tinygrad_attn as ta
from tinygrad_attn import functional as F
from tinygrad_attn import nn
from tinygrad_attn.kernels import parallel


def T(a, grad=True):
    return ta.Tensor(a, requires_grad=grad)


def _nodes(fn):
    seen = []
    ta.engine._forward_hooks.append(lambda ctx, out: seen.append(ctx.function.__name__))
    try:
        fn()
    finally:
        ta.engine._forward_hooks.pop()
    return seen


def test_sdpa_kernel_chooses_the_path_and_the_math_path_is_made_of_primitives():
    rng = np.random.default_rng(0)
    q, k, v = (T(rng.normal(size=(2, 3, 5, 4))) for _ in range(3))
    mask = rng.random((5, 5)) > 0.3
    attend = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True)  # noqa: E731
    assert _nodes(attend) == ["FlashAttention"]
    with ta.sdpa_kernel("math"):
        math_nodes = _nodes(attend)
    assert math_nodes == ["Permute", "MatMul", "Mul", "Add", "Softmax", "MatMul"]
    with ta.sdpa_kernel(["flash"]):
        assert _nodes(attend) == ["FlashAttention"]
    assert _nodes(lambda: F.scaled_dot_product_attention(q, k, v, return_weights=True))[-1] == "MatMul"


def test_sdpa_kernel_as_decorator_nests_and_is_per_thread():
    @ta.sdpa_kernel("math")
    def inner():
        return F._allowed_kernels.value.get()

    assert inner() == ("math",)
    with ta.sdpa_kernel("flash"):
        assert F._allowed_kernels.value.get() == ("flash",)
        assert inner() == ("math",)
        assert F._allowed_kernels.value.get() == ("flash",)
        other = []
        thread = threading.Thread(target=lambda: other.append(F._allowed_kernels.value.get()))
        thread.start()
        thread.join()
        assert other == [("math", "flash")]  # another thread keeps the default
    assert F._allowed_kernels.value.get() == ("math", "flash")


def test_sdpa_kernel_errors():
    with pytest.raises(ValueError, match=r"unknown kernel name\(s\) \['fast'\]; choose from \('math', 'flash'\)"):
        ta.sdpa_kernel("fast")
    with pytest.raises(ValueError, match="choose from"):
        ta.sdpa_kernel()
    q = T(np.zeros((1, 2, 3)))
    needs_math = "weights, dropout and a mask that requires grad need the math kernel"
    with ta.sdpa_kernel("flash"), pytest.raises(RuntimeError, match=needs_math):
        F.scaled_dot_product_attention(q, q, q, return_weights=True)
    with pytest.raises(TypeError, match="not both"):
        F.scaled_dot_product_attention(q, q, q, mask=np.ones((2, 2), bool), attn_mask=np.ones((2, 2), bool))


def test_attn_mask_is_mask(sdpa_path):
    rng = np.random.default_rng(1)
    q, k, v = (T(rng.normal(size=(2, 4, 3)), False) for _ in range(3))
    mask = rng.random((4, 4)) > 0.4
    np.testing.assert_array_equal(F.scaled_dot_product_attention(q, k, v, attn_mask=mask).numpy(),
                                  F.scaled_dot_product_attention(q, k, v, mask=mask).numpy())


@pytest.mark.parametrize("tq, tk", [(0, 3), (3, 0), (0, 0)])
def test_empty_sequences_on_both_paths(sdpa_path, tq, tk):
    """No queries: an empty output; no keys: zeros, as PyTorch's flash path gives. Gradients have the inputs' shapes."""
    rng = np.random.default_rng(0)
    q, k, v = T(rng.normal(size=(2, tq, 4))), T(rng.normal(size=(2, tk, 4))), T(rng.normal(size=(2, tk, 5)))
    out = F.scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, tq, 5) and np.all(out.detach().numpy() == 0)
    out.backward(np.ones(out.shape))
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape


def test_flash_writes_every_output_row_whatever_its_buffer_held(monkeypatch):
    """The flash forward's output buffer is not zeroed first: a row no product wrote (no key at all) is set to
    0 by the kernel, not left as what the memory held (NaN here), and the other rows are the math path's."""
    from tinygrad_attn.kernels import buffers, flash

    new_like = flash.new_like

    def poisoned(a, last, fill=buffers.empty):
        out = new_like(a, last, fill)
        if fill is buffers.empty:
            out[...] = np.nan
        return out

    monkeypatch.setattr(flash, "new_like", poisoned)
    rng = np.random.default_rng(0)
    for tk in (0, 5):
        q, k, v = (T(rng.normal(size=(2, 3, t, 8)), False) for t in (4, tk, tk))
        with ta.sdpa_kernel("flash"):
            got = F.scaled_dot_product_attention(q, k, v).numpy()
        with ta.sdpa_kernel("math"):
            want = F.scaled_dot_product_attention(q, k, v).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_propagates_on_both_paths(sdpa_path, dtype):
    """A NaN query row gives a NaN output row (not zeros), on the math path as on the flash path, and a
    row masked by the mask still gives zeros next to it."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(1, 4, 3)).astype(dtype) for _ in range(3))
    q[0, 2, :] = np.nan
    mask = np.ones((4, 4), bool)
    mask[1] = False
    out = F.scaled_dot_product_attention(T(q, False), T(k, False), T(v, False), mask=mask).numpy()
    assert np.isnan(out[0, 2]).all()
    assert np.all(out[0, 1] == 0) and np.isfinite(out[0, [0, 3]]).all()


def test_softmax_of_an_all_nan_row_is_nan():
    x = np.array([[np.nan, np.nan], [np.nan, -np.inf], [0.0, 1.0]])
    for fn in (F.softmax, F.log_softmax):
        out = fn(T(x, False)).numpy()
        assert np.isnan(out[0]).all() and np.isnan(out[1, 0]) and np.isfinite(out[2]).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_of_a_row_holding_plus_inf_is_nan_as_in_pytorch(dtype):
    """exp(inf - inf) is NaN, and so is the sum it enters: the whole row is NaN, as in PyTorch, with or
    without a mask; the other rows are untouched."""
    x = np.array([[1.0, np.inf, 2.0, 0.0], [1.0, 2.0, 3.0, 4.0]], dtype)
    keep = np.array([[True, True, True, False], [True, True, False, True]])
    for fn in (F.softmax, F.log_softmax):
        for out in (fn(T(x, False)).numpy(), fn(T(x, False).masked_fill(~keep, -np.inf)).numpy()):
            assert np.isnan(out[0]).all() and not np.isnan(out[1]).any()
    try:
        import torch
    except ImportError:
        return
    np.testing.assert_allclose(F.softmax(T(x, False)).numpy(), torch.softmax(torch.tensor(x), -1).numpy(), rtol=1e-6)


def _run_threads(targets, timeout):
    threads = [threading.Thread(target=t, daemon=True) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"


@pytest.mark.parametrize("mode", ["default", *ATTENTION_PRODUCTS])
def test_attention_beside_numpy_matmuls_in_another_thread(monkeypatch, mode):
    if mode != "default":
        share_work_among_threads(monkeypatch, 2, mode)
    blas_before = parallel.blas_threads()
    rng = np.random.default_rng(0)
    q, k, v = (T(rng.normal(size=(1, 4, 1024, 32)).astype(np.float32)) for _ in range(3))
    g = rng.normal(size=(1, 4, 1024, 32)).astype(np.float32)
    single = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    single.backward(g)
    want = [single.detach().numpy().copy(), q.grad.detach().numpy().copy()]
    a = rng.normal(size=(400, 400))
    results, errors = [], []

    def attention():
        try:
            for _ in range(3):
                q.grad = None
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                out.backward(g)
                results.append((out.detach().numpy(), q.grad.detach().numpy()))
        except Exception as err:  # noqa: BLE001
            errors.append(err)

    def matmuls():
        for _ in range(60):
            a @ a

    _run_threads([attention, matmuls], timeout=120)
    assert not errors and len(results) == 3
    for out, grad in results:
        np.testing.assert_array_equal(out, want[0])
        np.testing.assert_array_equal(grad, want[1])
    assert parallel.blas_threads() == blas_before  # no op changed BLAS's thread count


@pytest.mark.parametrize("mode", ["default", *ATTENTION_PRODUCTS])
def test_two_threads_running_multi_head_attention(monkeypatch, mode):
    if mode != "default":
        share_work_among_threads(monkeypatch, 2, mode)
    blas_before = parallel.blas_threads()
    ta.manual_seed(0)
    mha = nn.MultiHeadAttention(32, 4)
    rng = np.random.default_rng(0)
    inputs = [rng.normal(size=(1, 2048, 32)).astype(np.float32) for _ in range(2)]
    want = [mha(T(x, False), is_causal=True, need_weights=False)[0].detach().numpy() for x in inputs]
    got, errors = [[], []], []

    def run(i):
        def body():
            try:
                for _ in range(2):
                    got[i].append(mha(T(inputs[i], False), is_causal=True, need_weights=False)[0].detach().numpy())
            except Exception as err:  # noqa: BLE001
                errors.append(err)
        return body

    _run_threads([run(0), run(1)], timeout=120)
    assert not errors
    for i in range(2):
        assert len(got[i]) == 2
        for out in got[i]:
            np.testing.assert_array_equal(out, want[i])
    assert parallel.blas_threads() == blas_before


def test_importing_changes_nothing_in_the_process():
    """No environment variable set, no allocator setting, BLAS's thread count as it was; the threads
    start with the first op that uses them, without any call."""
    code = """
import json, os
from tinygrad_attn.kernels import parallel as p0  # noqa
before_env = dict(os.environ)
import numpy as np
blas = p0.blas_threads()
import tinygrad_attn as ta
from tinygrad_attn import functional as F
pool_after_import = __import__("numba").np.ufunc.parallel._is_initialized
x = ta.Tensor(np.ones((1, 2, 300, 8), np.float32), requires_grad=True)
F.scaled_dot_product_attention(x, x, x, is_causal=True).sum().backward()
print(json.dumps({"env_same": dict(os.environ) == before_env, "blas": [blas, p0.blas_threads()],
                  "pool": [pool_after_import, __import__("numba").np.ufunc.parallel._is_initialized],
                  "cpus": len(os.sched_getaffinity(0)), "safe": p0._safe_numba_layer()}))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY",) and not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["env_same"] and result["blas"][0] == result["blas"][1]
    assert not result["pool"][0]  # importing starts no threads
    assert result["pool"][1] == (result["cpus"] > 1 and result["safe"])  # the op used the CPUs, unasked


def test_row_kernels_on_numba_threads_leave_openmp_nesting_as_it_was():
    """Starting numba's OpenMP threads raises the runtime's max-active-levels for the whole process (nested
    regions on), which slows any library sharing the runtime; the first parallel row op puts it back."""
    code = """
import json, os
import numpy as np
import tinygrad_attn as ta
from tinygrad_attn import functional as F
from tinygrad_attn.kernels import parallel
if not parallel._safe_numba_layer() or not hasattr(os, "RTLD_NOLOAD"):
    print(json.dumps(None)); raise SystemExit
runtime = parallel._loaded_openmp()
before = runtime.omp_get_max_active_levels()
ta.set_num_threads(2)
x = ta.Tensor(np.random.default_rng(0).normal(size=(256, 512)).astype(np.float32), requires_grad=True)
y = F.softmax(x, dim=-1)
y.backward(np.ones_like(y.detach().numpy()))
import numba
print(json.dumps({"layer": numba.threading_layer(), "levels": [before, runtime.omp_get_max_active_levels()],
                  "parts": parallel.row_parts(256, 256 * 512)}))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_THREADING_LAYER", "OMP_MAX_ACTIVE_LEVELS")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result is None:
        pytest.skip("numba has no OpenMP threading layer here")
    assert result["parts"] > 1  # the op did run on numba's threads
    if result["layer"] == "omp":
        assert result["levels"][0] == result["levels"][1]


def test_parallel_work_leaves_the_callers_numba_thread_count_as_it_was(monkeypatch):
    """numba's thread count is the calling thread's own setting: a row kernel, a product and attention's
    items on numba's threads set it for their launch and put it back, whatever it was."""
    import numba

    if not parallel._numba_ready():
        pytest.skip("numba has no threading layer that several Python threads may call here")
    share_work_among_threads(monkeypatch, 2)
    rng = np.random.default_rng(0)
    x = ta.Tensor(rng.normal(size=(64, 32)), requires_grad=True)
    qkv = ta.Tensor(rng.normal(size=(2, 8, 3, 2, 4)), requires_grad=True)
    original = numba.get_num_threads()
    try:
        for mine in sorted({1, numba.config.NUMBA_NUM_THREADS}):
            numba.set_num_threads(mine)
            F.softmax(x, -1).sum().backward()
            nn.Linear(32, 4).to(np.float64)(x).sum().backward()
            F.packed_self_attention(qkv, is_causal=True).sum().backward()
            assert numba.get_num_threads() == mine
    finally:
        numba.set_num_threads(original)


def test_configure_is_explicit_and_says_what_it_did(monkeypatch):
    calls = []
    monkeypatch.setattr(ta.runtime, "set_num_threads", lambda n: calls.append(n))
    monkeypatch.setattr(ta.runtime, "keep_freed_memory", lambda: True)
    assert ta.runtime.configure(3) == {"threads": 3, "allocator": True}
    assert calls == [3]
    assert ta.runtime.configure(allocator=False) == {"threads": None, "allocator": False}


def test_set_num_threads_errors():
    with pytest.raises(TypeError, match=r"n must be an int, got 1.5"):
        ta.set_num_threads(1.5)
    with pytest.raises(ValueError, match="at least 1, got 0"):
        ta.set_num_threads(0)


@pytest.mark.parametrize("cpus", [1, 2, 6])
def test_set_num_threads_uses_at_most_the_cpus_it_may_run_on(monkeypatch, cpus):
    monkeypatch.setattr(parallel, "_num_threads", parallel._num_threads)  # restored afterwards
    monkeypatch.setattr(parallel, "set_blas_threads", lambda n: None)  # leave this process's BLAS alone
    monkeypatch.setattr(parallel, "_numba_ready", lambda: True)
    monkeypatch.setattr(parallel, "_available_cpus", lambda: cpus)
    monkeypatch.setattr(parallel, "_num_threads", None)
    assert ta.get_num_threads() == cpus  # by default: every CPU the process may run on
    for n in (1, cpus, cpus + 1, 4 * cpus):
        ta.set_num_threads(n)
        assert ta.get_num_threads() == min(n, cpus)
        assert parallel.threads_for(float("inf")) == min(n, cpus)  # what numba's prange is given


def _nan_patterns(kernel, q, k, v, mask, causal):
    tq, tk, tv = (ta.tensor(a, requires_grad=True) for a in (q, k, v))
    with ta.sdpa_kernel(kernel):
        out = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=mask, is_causal=causal)
    out.sum().backward()
    return [np.isnan(a) for a in (out.detach().numpy(), tq.grad.numpy(), tk.grad.numpy(), tv.grad.numpy())]


@pytest.mark.parametrize("t", [1, 5, 16, 130])
@pytest.mark.parametrize("masking", ["none", "bool", "float", "causal"])
def test_nan_reaches_the_same_entries_on_both_paths(t, masking):
    """A NaN anywhere in q, k or v: within one tile both paths give NaN in exactly the same entries of the
    output and every gradient; beyond one tile the flash kernel skips the tiles the causal mask hides, so
    its NaN are a subset of the math path's. Never a finite value where NaN belongs on the math path."""
    rng = np.random.default_rng(t)
    for trial in range(6):
        q, k, v = (rng.normal(size=(2, 2, t, 8)) for _ in range(3))
        poisoned = (q, k, v)[trial % 3]
        poisoned[tuple(rng.integers(0, n) for n in poisoned.shape)] = np.nan
        mask = None
        if masking == "bool":
            mask = rng.random((2, 1, t, t)) > 0.3
        elif masking == "float":
            mask = np.where(rng.random((2, 1, t, t)) > 0.3, 0.0, -np.inf)
        math = _nan_patterns("math", q, k, v, mask, masking == "causal")
        flash = _nan_patterns("flash", q, k, v, mask, masking == "causal")
        for name, m, f in zip(("out", "dq", "dk", "dv"), math, flash):
            if t <= 16 or masking != "causal":
                np.testing.assert_array_equal(m, f, err_msg=f"{name}, NaN in {'qkv'[trial % 3]}")
            else:
                assert not (f & ~m).any(), f"{name}: the flash path has NaN where the math path has none"


def test_no_python_runs_inside_attentions_parallel_work(monkeypatch):
    """Attention's parts on numba's threads need no GIL once they run: as soon as they have started writing,
    the calling thread takes the GIL and keeps it (a long switch interval keeps it from being handed over)
    while the parts run to the end. A part that ran Python (a callback into the interpreter) would wait for
    the GIL until the deadline. numba's launcher itself takes the GIL for a moment at every launch (its
    gufunc wrapper), so the GIL is held only once the parts are under way; the worker thread makes one call
    first, in which numba sets up that thread's team."""
    from tinygrad_attn.kernels import flash, layout, visibility

    if not parallel._numba_ready():
        pytest.skip("numba has no threading layer that several Python threads may call here")
    share_work_among_threads(monkeypatch, 2)
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(1, 8, 2048, 32)).astype(np.float32) for _ in range(3))
    tile = layout.tile_shape(2048, 2048, 32)
    grid = visibility.tile_grid(*visibility.band(True), 2048, 2048, tile)
    plan = layout.forward_plan((1, 8), grid, tile, 2048, 2048, 2)
    out, lse = np.empty_like(q), np.full((1, 8, 2048), np.nan, np.float32)
    every_group = np.broadcast_to(grid, (1, 8) + grid.shape[2:])
    variant = flash._kernel_variant(flash.Variant.causal(True), q, 0.2, 2048, tile, every_group, None, None, 2)
    args = (q, k, v, variant, None, out, lse, flash.kernel_gemm(q.dtype)[0], *plan)
    kernel = parallel.any_layout(flash._forward_parallel)
    kernel(*args)  # compiled before the clock starts
    ready, go, done = threading.Event(), threading.Event(), []

    def work():
        kernel(*args)  # this thread's first parallel call sets up its own thread team
        ready.set()
        go.wait()
        kernel(*args)
        done.append(1)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    ready.wait()
    lse[...] = np.nan
    flat = lse.reshape(-1)
    go.set()
    deadline = time.perf_counter() + 20
    while np.isnan(lse).all() and time.perf_counter() < deadline:
        time.sleep(1e-4)  # the GIL is free for the launch until the parts write their first rows
    interval = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    try:
        left_when_held = int(np.isnan(flat).sum())  # at once (a Python loop over it let fast parts finish)
        while time.perf_counter() < deadline and any(flat[i] != flat[i] for i in range(flat.size)):
            pass  # this thread keeps the GIL
        filled = not any(flat[i] != flat[i] for i in range(flat.size))
    finally:
        sys.setswitchinterval(interval)
    worker.join(60)
    assert 0 < left_when_held < flat.size, "the parts must be under way, and not done, when the GIL is taken"
    assert filled and done
    np.testing.assert_allclose(out, flash.attention_reference(q, k, v, 0.2, True, None), rtol=1e-4, atol=1e-5)


def test_the_backward_reads_the_rows_the_forward_copied(monkeypatch):
    """q, k, v of a packed projection lie apart in memory; the forward copies them to contiguous rows for its
    tiles, and the backward reads those copies (only the output's gradient is copied again), with the same
    gradients as the math path."""
    from tinygrad_attn.kernels import buffers, layout

    rng = np.random.default_rng(0)
    qkv_np = rng.normal(size=(2, 256, 3, 2, 16))  # T 256: several query blocks read each row
    grads = []
    for path in ("flash", "math"):
        qkv = ta.Tensor(qkv_np, requires_grad=True)
        with ta.sdpa_kernel(path):
            out = F.packed_self_attention(qkv, is_causal=True)
            copies, real = [], buffers.contiguous
            monkeypatch.setattr(layout.buffers, "contiguous",
                                lambda a, copies=copies, real=real: copies.append(a.shape) or real(a))
            out.backward(np.ones(out.shape))
            monkeypatch.setattr(layout.buffers, "contiguous", real)
        if path == "flash":
            assert len(copies) == 1, copies  # the output's gradient alone
        grads.append(qkv.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-9, atol=1e-10)


def test_attention_parts_compile_once_for_the_calling_thread_and_numbas():
    """The parallel drivers call the attention parts with the version the calling thread runs: a part index
    of numba's unsigned prange type would compile each part a second time (seconds of a first run)."""
    from tinygrad_attn.kernels import flash

    if not hasattr(flash.attend_query_blocks, "signatures"):
        pytest.skip("numba's JIT is off")
    x = [ta.Tensor(np.random.default_rng(i).normal(size=(2, 3, 9, 4)), requires_grad=True) for i in range(3)]
    F.scaled_dot_product_attention(*x, is_causal=True).sum().backward()  # on the calling thread
    with pytest.MonkeyPatch.context() as mp:
        share_work_among_threads(mp, 2)
        F.scaled_dot_product_attention(*x, is_causal=True).sum().backward()  # on numba's threads
    for kernel in (flash.attend_query_blocks, flash.backward_key_ranges):
        part = list(inspect.signature(kernel.py_func).parameters).index("part")
        parts = {str(signature[part]) for signature in kernel.signatures}
        assert parts == {"int64"}, (kernel.__name__, parts)
