"""Flex attention's modifiers compiled into the flash kernel (nn/attention/modifier_compiler.py): the fused
path against the math path (which runs the modifier as written on whole tensors) in values and gradients,
the captured tensors' gradients against finite differences, the tiles nothing sees never read, the
compiled modifiers kept, and one clear answer for what cannot be compiled."""

import math
import time
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinygrad_attn as ta
from tinygrad_attn.kernels import layout
from tinygrad_attn.nn.attention import flex_attention as flex
from tinygrad_attn.nn.attention import sdpa_kernel
from tinygrad_attn.nn.attention.modifier_compiler import compile_modifiers

few = settings(max_examples=5, deadline=None)
H, T = 2, 11


def _captured(rng):
    return {"slopes": ta.tensor(rng.random(H) + 0.1, requires_grad=True),
            "table": ta.tensor(rng.normal(size=(2 * T - 1,)), requires_grad=True),
            "heads": ta.tensor(rng.normal(size=(H, 3)), requires_grad=True),
            "docs": ta.tensor(np.repeat(np.arange(3), 4)[:T]),
            "prefix": ta.tensor(np.array([3, 6]))}


def _modifiers(c):
    """score_mods as PyTorch users write them, each reading what it captures."""
    return {
        "none": None,
        "alibi": lambda s, b, h, q, k: s + c["slopes"][h] * (k - q),
        "softcap": lambda s, b, h, q, k: 2.5 * ta.tanh(s / 2.5),
        "relative_bias": lambda s, b, h, q, k: s + c["table"][q - k + T - 1],
        "bucketed": lambda s, b, h, q, k: s + c["heads"][h, ta.clamp(ta.log((q - k).abs().float() + 1).floor().long(),
                                                                  0, 2)],
        "leaky": lambda s, b, h, q, k: ta.where(s > 0, s, s * 0.1) - ta.maximum(s, ta.tensor(0.5)) * 0.2,
        "sigmoid_mix": lambda s, b, h, q, k: s * ta.sigmoid(c["slopes"][h]) + (s ** 2).exp().log() * 0.1,
    }


def _masks(c):
    return {
        "none": None,
        "causal": lambda b, h, q, k: q >= k,
        "sliding_window": lambda b, h, q, k: (q >= k) & (q - k < 3),
        "document": lambda b, h, q, k: (c["docs"][q] == c["docs"][k]) & (q >= k),
        "prefix_lm": lambda b, h, q, k: (k <= c["prefix"][b]) | (q >= k),
    }


def _run(path, q, k, v, mod, mask, block, gqa=False):
    with sdpa_kernel(path):
        block_mask = None if mask is None else flex.create_block_mask(mask, 2, None, q.shape[2], k.shape[2],
                                                                      BLOCK_SIZE=block)
        return flex.flex_attention(q, k, v, score_mod=mod, block_mask=block_mask, enable_gqa=gqa)


PAIRS = ([(mod, "none") for mod in _modifiers({})] + [("none", mask) for mask in list(_masks({}))[1:]]
         + [("alibi", "document"), ("bucketed", "prefix_lm"), ("leaky", "sliding_window"), ("sigmoid_mix", "causal"),
            ("relative_bias", "prefix_lm"), ("softcap", "sliding_window")])


@pytest.mark.kernels
@pytest.mark.parametrize("mod, mask", PAIRS)
def test_fused_path_equals_the_math_path_in_values_and_gradients(monkeypatch, mod, mask):
    """Every modifier alone, every mask alone, and modifiers with masks (each a compile of its own), tiles of
    4 x 3 so a sequence crosses many tile borders: the compiled modifier and its derivative against the
    modifier run as written, the captured tensors' gradients too."""
    monkeypatch.setattr(layout, "MAX_ROWS", 4)
    monkeypatch.setattr(layout, "MAX_KEYS", 3)
    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=(2, H, T, 4)) for _ in range(3)]
    results = []
    for path in ("flash", "math"):
        c = _captured(np.random.default_rng(1))
        q, k, v = (ta.tensor(a, requires_grad=True) for a in arrays)
        out = _run(path, q, k, v, _modifiers(c)[mod], _masks(c)[mask], 5)
        (out * ta.tensor(np.cos(np.arange(out.numel())).reshape(out.shape))).sum().backward()
        grads = [t.grad.numpy() for t in (q, k, v)] + [c[n].grad.numpy() if c[n].grad is not None else 0.0
                                                       for n in ("slopes", "table", "heads")]
        results.append([out.detach().numpy(), *grads])
    for fused, math_path in zip(*results):
        np.testing.assert_allclose(fused, math_path, rtol=1e-10, atol=1e-12)


@few
@given(seed=st.integers(0, 2**16), q_len=st.integers(1, 7), kv_len=st.integers(1, 7), gqa=st.booleans(),
       mod=st.sampled_from(["alibi", "relative_bias", "bucketed", "softcap"]),
       mask=st.sampled_from(["none", "sliding_window", "prefix_lm"]))
def test_fused_gradients_of_inputs_and_captured_tensors_against_finite_differences(seed, q_len, kv_len, gqa, mod,
                                                                                    mask):
    """gradcheck and gradgradcheck (the second derivative through the traced modifier on whole tensors) in
    float64, on the fused path, over generated lengths, with grouped kv heads."""
    rng = np.random.default_rng(seed)
    c = _captured(rng)
    q = ta.tensor(rng.normal(size=(2, H, q_len, 3)), requires_grad=True)
    k, v = (ta.tensor(rng.normal(size=(2, 1 if gqa else H, kv_len, 3)), requires_grad=True) for _ in range(2))
    captured = [c["slopes"], c["table"], c["heads"]]

    def run(q_, k_, v_, slopes, table, heads):
        c.update(slopes=slopes, table=table, heads=heads)
        mask_mod = _masks(c)[mask]
        if mask_mod is not None and q_len != kv_len:
            mask_mod = _masks(c)["none"]
        return _run("flash", q_, k_, v_, _modifiers(c)[mod], mask_mod, 2, gqa)

    inputs = [q, k, v, *captured]
    assert ta.gradcheck(run, inputs)
    assert ta.gradgradcheck(lambda *xs: run(*xs) ** 2, inputs)


@settings(max_examples=40, deadline=None)
@given(q_len=st.integers(1, 12), kv_len=st.integers(1, 12), lo=st.integers(-12, 3), width=st.integers(0, 12),
       block=st.tuples(st.integers(1, 5), st.integers(1, 5)), holes=st.integers(0, 2**16), seed=st.integers(0, 9))
def test_a_block_mask_knows_its_band_and_the_blocks_the_band_explains(q_len, kv_len, lo, width, block, holes, seed):
    """BlockMask.band is the narrowest lo <= kv - q <= hi holding every key the mask keeps; kernel_blocks
    is PyTorch's block classes but 2 where the mask inside the block is exactly that band (the kernel then
    applies the band alone, without mask_mod), against the dense mask entry by entry: a band, and a band
    with some keys removed at random."""
    rng = np.random.default_rng(seed)
    removed = ta.tensor(rng.random((q_len, kv_len)) < (holes % 3) * 0.2)

    def mask(b, h, q, k):
        return (k - q >= lo) & (k - q <= lo + width) & ~removed[q, k]

    block_mask = flex.create_block_mask(mask, None, None, q_len, kv_len, BLOCK_SIZE=block)
    dense = block_mask.dense[0, 0]
    i, j = np.nonzero(dense)
    if len(i):
        assert block_mask.band == ((j - i).min(), (j - i).max())
    lo_b, hi_b = block_mask.band
    in_band = (np.arange(kv_len)[None] - np.arange(q_len)[:, None] >= lo_b) & (
        np.arange(kv_len)[None] - np.arange(q_len)[:, None] <= hi_b)
    for t in range(-(-q_len // block[0])):
        for u in range(-(-kv_len // block[1])):
            cell = (slice(t * block[0], (t + 1) * block[0]), slice(u * block[1], (u + 1) * block[1]))
            kept = dense[cell]
            want = 0 if not kept.any() else 2 if kept.all() else 1
            assert block_mask.blocks[0, 0, t, u] == want
            explained = want == 1 and (kept == in_band[cell]).all()
            assert block_mask.kernel_blocks[0, 0, t, u] == (2 if explained else want)


def test_tiles_nobody_sees_are_never_read(monkeypatch):
    """A NaN in a value no query's window reaches: the math path multiplies it by a weight 0 (NaN), the
    fused path never reads its tile, for a band (MultiHeadAttention's window) and for a block mask."""
    monkeypatch.setattr(layout, "MAX_ROWS", 4)
    monkeypatch.setattr(layout, "MAX_KEYS", 4)
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(1, 1, 32, 4)) for _ in range(3))
    v[0, 0, 1, 0] = np.nan  # key 1: seen by queries 1..3 only (a causal window of 3)
    hide = lambda b, h, qi, ki: (qi >= ki) & (qi - ki < 3)  # noqa: E731
    block = flex.create_block_mask(hide, None, None, 32, 32, BLOCK_SIZE=4)
    out = flex.flex_attention(ta.tensor(q), ta.tensor(k), ta.tensor(v), block_mask=block).numpy()
    assert np.isnan(out[0, 0, 1:4]).any() and np.isfinite(out[0, 0, 8:]).all()
    with sdpa_kernel("math"):
        dense = flex.flex_attention(ta.tensor(q), ta.tensor(k), ta.tensor(v), block_mask=block).numpy()
    assert np.isnan(dense[0, 0, 8:, 0]).all()  # what reading the whole row would have done
    from tinygrad_attn import functional as F
    from tinygrad_attn.kernels.flash import Variant
    from tinygrad_attn.kernels.visibility import band

    lo, hi = band(True, 0, 3)
    banded = F.attention(ta.tensor(q), ta.tensor(k), ta.tensor(v), Variant(lo=lo, hi=hi)).numpy()
    assert np.isfinite(banded[0, 0, 8:]).all()
    np.testing.assert_allclose(banded[0, 0, 8:], out[0, 0, 8:], rtol=1e-12)


def test_a_compiled_modifier_is_kept_and_its_first_compile_is_reported():
    """A new modifier compiles in under 3 s (numba's C function alone: the kernels are not compiled again);
    the same source again compiles nothing."""
    offset = float(time.time() % 1.0)  # a constant no earlier test used: a new source

    def shifted(score, b, h, q_idx, kv_idx):
        return score + offset * (kv_idx - q_idx)

    first = compile_modifiers(shifted, None, np.dtype(np.float64))
    again = compile_modifiers(shifted, None, np.dtype(np.float64))
    assert 0 < first.compile_seconds < 3.0
    assert again.compile_seconds == 0.0 and again.modify is first.modify


def test_a_modifier_that_cannot_be_compiled_runs_on_the_math_path_with_one_warning():
    def branchy(score, b, h, q_idx, kv_idx):
        return score * 2 if q_idx > kv_idx else score  # Python's `if` on a traced index

    q = ta.tensor(np.random.default_rng(0).normal(size=(1, 1, 4, 2)))
    with pytest.warns(UserWarning, match=r"'branchy' cannot be compiled.*Python's if"):
        with pytest.raises(TypeError, match="branchy"):  # and the math path names it too (a tensor in an `if`)
            flex.flex_attention(q, q, q, score_mod=branchy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = flex.flex_attention(q, q, q, score_mod=lambda s, b, h, qi, ki: s * 2)  # compiled: no warning
    with sdpa_kernel("math"):
        np.testing.assert_allclose(out.numpy(), flex.flex_attention(q, q, q, score_mod=lambda s, b, h, qi, ki: s * 2)
                                   .numpy(), rtol=1e-12)


def test_a_captured_index_outside_its_tensor_is_one_clear_error():
    table = ta.tensor(np.zeros(3))
    q = ta.tensor(np.zeros((1, 1, 5, 2)))
    with pytest.raises(IndexError, match="outside"):
        flex.flex_attention(q, q, q, score_mod=lambda s, b, h, qi, ki: s + table[qi])


def test_float32_modifiers_match_float64():
    rng = np.random.default_rng(3)
    c = _captured(rng)
    arrays = [rng.normal(size=(2, H, T, 4)) for _ in range(3)]
    outs = [_run("flash", *(ta.tensor(a.astype(dt)) for a in arrays), _modifiers(c)["alibi"],
                 _masks(c)["document"], 4).detach().numpy() for dt in (np.float32, np.float64)]
    assert outs[0].dtype == np.float32
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-4, atol=1e-5)
    assert math.isfinite(float(outs[0].sum()))
