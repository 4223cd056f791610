"""Settings scoped to a thread and a block, and processes that fork or cannot load a threading layer."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import tinygrad_attn as ta
from tinygrad_attn.functional import _allowed_kernels

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_sdpa_kernel_blocks_exited_out_of_order_leave_the_default():
    outer, inner = ta.sdpa_kernel("math"), ta.sdpa_kernel("flash")
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)  # out of order: the inner block is still active
    assert _allowed_kernels.value.get() == ("flash",)
    inner.__exit__(None, None, None)
    assert _allowed_kernels.value.get() == ("math", "flash")


def test_grad_mode_blocks_exited_out_of_order_leave_grad_on():
    off, on = ta.no_grad(), ta.enable_grad()
    off.__enter__()
    on.__enter__()
    off.__exit__(None, None, None)
    assert ta.is_grad_enabled()
    on.__exit__(None, None, None)
    assert ta.is_grad_enabled()
    x = ta.ones(2, requires_grad=True)
    assert (x * 2).requires_grad


def test_set_grad_enabled_inside_no_grad_lasts_until_the_block_ends():
    with ta.no_grad():
        ta.set_grad_enabled(True)
        assert ta.is_grad_enabled()
    assert ta.is_grad_enabled()
    with ta.set_grad_enabled(False):
        assert not ta.is_grad_enabled()
    assert ta.is_grad_enabled()


@pytest.mark.parametrize("bad", [None, 1, ["math", 2]])
def test_sdpa_kernel_refuses_what_is_not_a_name(bad):
    with pytest.raises(TypeError, match="sdpa_kernel: kernels must be names"):
        ta.sdpa_kernel(bad)


def test_sdpa_kernel_exit_without_enter_and_from_another_thread():
    block = ta.sdpa_kernel("math")
    with pytest.raises(RuntimeError, match="without a matching __enter__"):
        block.__exit__(None, None, None)
    block.__enter__()
    errors = []

    def leave():
        try:
            block.__exit__(None, None, None)
        except RuntimeError as err:
            errors.append(str(err))

    thread = threading.Thread(target=leave)
    thread.start()
    thread.join(10)
    assert errors and "sdpa_kernel" in errors[0]
    block.__exit__(None, None, None)
    assert _allowed_kernels.value.get() == ("math", "flash")


def _run(code: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {}), "PYTHONPATH": PACKAGE_ROOT}, cwd=PACKAGE_ROOT)


FORK = """
import multiprocessing as mp
import numpy as np
import tinygrad_attn as ta
F = ta.nn.functional

def attention(seed):
    rng = np.random.default_rng(seed)
    q = ta.tensor(rng.normal(size=(8, 4, 256, 64)).astype(np.float32))
    rows = ta.tensor(rng.normal(size=(4096, 512)).astype(np.float32))
    return float(F.scaled_dot_product_attention(q, q, q).sum().item() + rows.softmax(-1).sum().item())

def child(queue):
    queue.put(attention(0))

if __name__ == "__main__":
    ta.set_num_threads(2)
    expected = attention(0)  # the parent starts its parallel threads
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    process = ctx.Process(target=child, args=(queue,))
    process.start()
    process.join(60)
    print("exit", process.exitcode, "equal", process.exitcode == 0 and queue.get(timeout=5) == expected)
"""


def test_a_forked_child_runs_attention_after_the_parent_used_parallel_threads():
    proc = _run(FORK)
    assert "exit 0 equal True" in proc.stdout, proc.stdout + proc.stderr[-2000:]


LAYER = """
import warnings
import numpy as np
import tinygrad_attn as ta
ta.set_num_threads(2)
x = ta.tensor(np.random.default_rng(0).normal(size=(4096, 512)).astype(np.float32))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    first, second = x.softmax(-1), x.softmax(-1)
    q = ta.randn(8, 4, 256, 64)
    ta.nn.functional.scaled_dot_product_attention(q, q, q)
print("warnings", len(caught), "sums", bool(np.allclose(second.numpy().sum(-1), 1)))
print(caught[0].message if caught else "")
"""


def test_a_threading_layer_that_cannot_load_gives_one_warning_and_the_work_still_runs():
    pytest.importorskip("numba.np.ufunc.omppool")  # another layer loads, so the missing one is only found late
    try:
        import numba.np.ufunc.tbbpool  # noqa: F401
        pytest.skip("TBB is installed here")
    except ImportError:
        pass
    proc = _run(LAYER, {"NUMBA_THREADING_LAYER": "tbb"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "warnings 1 sums True" in proc.stdout and "threading layer did not start" in proc.stdout, proc.stdout


def test_ctrl_c_inside_parallel_work_reaches_the_caller(monkeypatch):
    """SIGINT while attention's compiled items run on two threads: the KeyboardInterrupt reaches the caller
    once they return (compiled code runs no Python to interrupt), and the threads are free afterwards."""
    import signal

    from conftest import share_work_among_threads

    from tinygrad_attn import functional as F

    share_work_among_threads(monkeypatch, 2)
    q = ta.Tensor(np.random.default_rng(0).normal(size=(1, 4, 2048, 32)).astype(np.float32))
    timer = threading.Timer(0.05, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        for _ in range(200):  # far longer than the timer: the interrupt lands while items run
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
    timer.join()
    out = F.scaled_dot_product_attention(q[:, :, :64], q[:, :, :64], q[:, :, :64], is_causal=True)
    assert np.isfinite(out.numpy()).all()

