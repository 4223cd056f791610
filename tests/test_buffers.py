"""kernels/buffers.py: the memory of the kernels' large arrays is reused, and never while an array uses it."""

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinygrad_attn as ta
from tinygrad_attn.kernels import buffers

LARGE = (buffers.MIN_BYTES // 4 + 1,)  # float32 elements just past the pooled size


def test_memory_is_reused_once_no_array_refers_to_it():
    a = buffers.empty((4, LARGE[0]), np.float32)
    address = a.ctypes.data
    del a
    b = buffers.empty((2, LARGE[0] * 2), np.float32)  # the same bytes, another shape
    assert b.ctypes.data == address
    assert b.shape == (2, LARGE[0] * 2) and b.dtype == np.float32 and b.flags.c_contiguous


@pytest.mark.parametrize("how", ["contiguous", "transposed", "strided", "small"])
def test_contiguous_copies_into_reused_memory(how):
    """buffers.contiguous: the array itself when C-contiguous, else an equal C-contiguous copy, in pooled
    memory when large (handed out again once the copy is dropped)."""
    rng = np.random.default_rng(0)
    base = rng.normal(size=(2, 3, LARGE[0] if how != "small" else 5)).astype(np.float32)
    a = {"contiguous": base, "transposed": base.transpose(0, 2, 1), "strided": base[:, ::2],
         "small": base.transpose(0, 2, 1)}[how]
    got = buffers.contiguous(a)
    np.testing.assert_array_equal(got, a)
    assert got.flags.c_contiguous and got.dtype == a.dtype
    assert (got is a) == (how == "contiguous")
    if how in ("transposed", "strided"):
        address = got.ctypes.data
        del got
        assert buffers.contiguous(a).ctypes.data == address


def test_small_and_object_arrays_are_numpys_own():
    a, b = buffers.empty((3, 4), np.float64), buffers.zeros(LARGE, object)
    assert a.flags.owndata and a.shape == (3, 4) and b.flags.owndata and b.shape == LARGE and (b == 0).all()


@settings(deadline=None, max_examples=40)
@given(steps=st.lists(st.tuples(st.sampled_from(["new", "zeros", "drop", "view"]), st.integers(0, 7),
                                st.sampled_from([np.float32, np.float64])), min_size=1, max_size=30))
def test_an_array_in_use_is_never_handed_out_again(steps):
    """Arrays kept alive (themselves, or only a slice or reshape of them) keep their memory and contents
    while others of the same byte size come and go."""
    live: dict[int, tuple[np.ndarray, float]] = {}
    for n, (what, key, dtype) in enumerate(steps):
        if what == "drop":
            live.pop(key, None)
        elif what == "view" and key in live:
            a, value = live[key]
            live[key] = (a.reshape(-1)[1:], value)  # only a view keeps the buffer now
        elif what in ("new", "zeros"):
            a = (buffers.zeros if what == "zeros" else buffers.empty)((LARGE[0] * 2 // np.dtype(dtype).itemsize,),
                                                                    dtype)
            if what == "zeros":
                assert not a.any()
            a[...] = n
            live[key] = (a, n)
        for a, value in live.values():
            assert (a == value).all()
    arrays = [a for a, _ in live.values()]
    for i, a in enumerate(arrays):
        for b in arrays[i + 1:]:
            assert not np.shares_memory(a, b)


def test_the_pool_stays_under_its_limit(monkeypatch):
    buffers.release()
    monkeypatch.setattr(buffers, "LIMIT_BYTES", buffers.held_bytes() + 3 * buffers.MIN_BYTES)
    kept = [buffers.empty((buffers.MIN_BYTES,), np.uint8) for _ in range(6)]  # past the limit: numpy's own
    for i, a in enumerate(kept):
        a[...] = i
    assert buffers.held_bytes() <= buffers.LIMIT_BYTES
    assert all((a == i).all() for i, a in enumerate(kept))
    assert len({a.ctypes.data for a in kept}) == len(kept)


def test_empty_cache_gives_back_unused_memory_only():
    buffers.release()
    before = buffers.held_bytes()
    kept, dropped = buffers.empty((LARGE[0] * 3,), np.float32), buffers.empty((LARGE[0] * 5,), np.float32)
    kept[...] = 7
    assert buffers.held_bytes() == before + kept.nbytes + dropped.nbytes
    del dropped
    ta.runtime.empty_cache()
    assert buffers.held_bytes() == before + kept.nbytes
    assert (kept == 7).all()


def test_threads_never_share_an_array():
    """Several threads take, fill, check and drop arrays of the same sizes at once."""
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        held = []
        for step in range(300):
            a = buffers.empty((LARGE[0] * int(rng.integers(1, 4)),), np.float32)
            a[...] = seed * 1000 + step
            held.append((a, seed * 1000 + step))
            if len(held) > 3:
                held.pop(int(rng.integers(0, len(held))))
            if not all((b == v).all() for b, v in held):
                errors.append(seed)
                return

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and not errors


@pytest.mark.parametrize("shape", [(8, 64, 64, 4), (2, 300, 32, 2)])
def test_attention_blocks_in_reused_memory_give_the_same_results(shape):
    """Two steps of a block, the second in memory the first gave back, against a fresh model's."""
    b, t, e, h = shape
    rng = np.random.default_rng(0)
    x_np = rng.normal(size=(b, t, e)).astype(np.float32)
    results = []
    for _ in range(3):
        ta.manual_seed(0)
        mha = ta.nn.MultiHeadAttention(e, h)
        x = ta.Tensor(x_np, requires_grad=True)
        out, _ = mha(x, is_causal=True, need_weights=False)
        out.backward(np.ones_like(x_np))
        results.append([out.detach().numpy().copy(), x.grad.numpy().copy()] + [p.grad.numpy().copy()
                                                                             for p in mha.parameters()])
    for later in results[1:]:
        for got, want in zip(later, results[0]):
            np.testing.assert_array_equal(got, want)
