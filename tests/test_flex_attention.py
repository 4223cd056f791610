"""FlexAttention's API: the forward against PyTorch's flex_attention (which runs on CPU, forward only), the
gradients against finite differences (gradcheck, gradgradcheck) including those of tensors a score_mod
captures, the masks against scaled_dot_product_attention with the same dense mask on both its paths, and
one clear error for each bad input."""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinygrad_attn as ta
from tinygrad_attn.nn.attention import SDPBackend, sdpa_kernel
from tinygrad_attn.nn.attention import flex_attention as flex

few = settings(max_examples=8, deadline=None)


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def window(b, h, q_idx, kv_idx):
    return (q_idx - kv_idx).abs() <= 2


def document(b, h, q_idx, kv_idx):  # two packed documents: the first 5 positions, then the rest
    return (q_idx < 5) == (kv_idx < 5)


def softcap(score, b, h, q_idx, kv_idx):
    return (score / 2).tanh() * 2


MASKS = {"none": None, "causal": causal, "sliding_window": flex.and_masks(causal, window),
         "document": flex.and_masks(causal, document),
         "window_or_first": flex.or_masks(window, lambda b, h, q, k: k == 0)}


def _arrays(seed, b=2, h=2, hkv=2, q_len=9, kv_len=9, e=4, ev=3):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(b, h, q_len, e)), rng.normal(size=(b, hkv, kv_len, e)),
            rng.normal(size=(b, hkv, kv_len, ev)))


def _dense_reference(q, k, v, keep, scores_of=lambda s: s):
    """Plain numpy: softmax over the kept scores, 0 for a row that keeps nothing."""
    s = scores_of(q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1]))
    s = np.where(keep, s, -np.inf) if keep is not None else s
    m = np.max(s, -1, keepdims=True)
    e = np.where(np.isfinite(m), np.exp(s - np.where(np.isfinite(m), m, 0)), 0)
    total = e.sum(-1, keepdims=True)
    return np.where(total > 0, e / np.where(total > 0, total, 1), 0) @ v


@pytest.mark.parametrize("name", list(MASKS))
def test_masks_equal_the_dense_reference_and_sdpa_with_that_mask_on_both_paths(name):
    q, k, v = _arrays(0)
    block = None if MASKS[name] is None else flex.create_block_mask(MASKS[name], None, None, 9, 9, BLOCK_SIZE=4)
    out = flex.flex_attention(ta.tensor(q), ta.tensor(k), ta.tensor(v), block_mask=block).numpy()
    keep = None if block is None else block.dense
    np.testing.assert_allclose(out, _dense_reference(q, k, v, keep), atol=1e-12)
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):
        with sdpa_kernel(backend):
            sdpa = ta.nn.functional.scaled_dot_product_attention(ta.tensor(q), ta.tensor(k), ta.tensor(v), mask=keep)
        np.testing.assert_allclose(out, sdpa.numpy(), atol=1e-12)


def test_score_mods_equal_the_dense_reference():
    q, k, v = _arrays(1)
    slopes = np.array([0.5, 0.25])
    cases = {
        softcap: lambda s: np.tanh(s / 2) * 2,
        (lambda s, b, h, qi, ki: s - ta.tensor(slopes)[h] * (qi - ki).abs()):
            lambda s: s - slopes[None, :, None, None] * np.abs(np.arange(9)[:, None] - np.arange(9)[None, :]),
    }
    for mod, reference in cases.items():
        out = flex.flex_attention(ta.tensor(q), ta.tensor(k), ta.tensor(v), score_mod=mod).numpy()
        np.testing.assert_allclose(out, _dense_reference(q, k, v, None, reference), atol=1e-12)


@few
@given(seed=st.integers(0, 2**16), q_len=st.integers(1, 6), kv_len=st.integers(1, 6), gqa=st.booleans(),
       mask=st.sampled_from(list(MASKS)), mod=st.sampled_from(["none", "softcap", "alibi", "relative_bias"]))
def test_gradients_and_second_derivatives_against_finite_differences(seed, q_len, kv_len, gqa, mask, mod):
    """Every input's gradient, the captured slopes' and bias table's too, in float64 over generated sizes."""
    q, k, v = _arrays(seed, b=1, h=2, hkv=1 if gqa else 2, q_len=q_len, kv_len=kv_len, e=2, ev=2)
    rng = np.random.default_rng(seed + 1)
    slopes, table = ta.tensor(rng.random(2), requires_grad=True), ta.tensor(rng.normal(size=(13,)), requires_grad=True)
    mods = {"none": None, "softcap": softcap,
            "alibi": lambda s, b, h, qi, ki: s - slopes[h] * (qi - ki).abs(),
            "relative_bias": lambda s, b, h, qi, ki: s + table[qi - ki + 6]}
    block = None if MASKS[mask] is None else flex.create_block_mask(MASKS[mask], None, None, q_len, kv_len)

    def run(a, b_, c, s, t):
        nonlocal slopes, table
        slopes, table = s, t
        return flex.flex_attention(a, b_, c, score_mod=mods[mod], block_mask=block, enable_gqa=gqa)

    inputs = [ta.tensor(x, requires_grad=True) for x in (q, k, v)] + [slopes, table]
    assert ta.gradcheck(run, inputs)
    assert ta.gradgradcheck(lambda *xs: run(*xs) ** 2, inputs)


def test_grouped_query_heads_equal_sdpa_with_enable_gqa():
    q, k, v = _arrays(2, h=4, hkv=2)
    out = flex.flex_attention(ta.tensor(q), ta.tensor(k), ta.tensor(v), enable_gqa=True,
                              block_mask=flex.create_block_mask(causal, None, None, 9, 9))
    sdpa = ta.nn.functional.scaled_dot_product_attention(ta.tensor(q), ta.tensor(k), ta.tensor(v), is_causal=True,
                                                         enable_gqa=True)
    np.testing.assert_allclose(out.numpy(), sdpa.numpy(), atol=1e-12)
    with pytest.raises(ValueError, match="pass enable_gqa=True"):
        flex.flex_attention(ta.tensor(q), ta.tensor(k), ta.tensor(v))


def test_a_row_that_sees_no_key_gives_zero_and_an_lse_of_minus_infinity():
    q, k, v = _arrays(3)
    block = flex.create_block_mask(lambda b, h, qi, ki: (qi != 0) & (ki <= qi), None, None, 9, 9)
    out, lse = flex.flex_attention(ta.tensor(q), ta.tensor(k), ta.tensor(v), block_mask=block, return_lse=True)
    assert np.all(out.numpy()[:, :, 0] == 0) and np.all(np.isneginf(lse.numpy()[:, :, 0]))
    assert np.all(np.isfinite(lse.numpy()[:, :, 1:]))


def test_block_mask_counts_the_blocks_it_skips():
    block = flex.create_block_mask(causal, None, None, 12, 12, BLOCK_SIZE=4)
    assert block.shape == (1, 1, 12, 12) and block.blocks.shape == (1, 1, 3, 3)
    assert block.blocks[0, 0].tolist() == [[1, 0, 0], [2, 1, 0], [2, 2, 1]]  # partial diagonal, full below
    assert math.isclose(block.sparsity(), 100 * 3 / 9) and "sparsity=33.33%" in repr(block)
    assert block.to_dense().numpy()[0, 0].tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]


@pytest.mark.parametrize("call, error, message", [
    (lambda q: flex.create_block_mask(lambda b, h, qi, ki: qi - ki, None, None, 4, 4), TypeError, "must return bool"),
    (lambda q: flex.create_block_mask(lambda b, h, qi, ki: qi.no_such_method(), None, None, 4, 4), TypeError,
     "mask_mod '<lambda>' failed on tinygrad_attn tensors"),
    (lambda q: flex.create_block_mask(causal, 0, None, 4, 4), ValueError, "B must be an int >= 1"),
    (lambda q: flex.create_block_mask(causal, None, None, 4, 4, device="cuda"), ValueError, "CPU only"),
    (lambda q: flex.flex_attention(q, q, q, block_mask=flex.create_block_mask(causal, None, None, 5, 5)), ValueError,
     "block_mask was made for"),
    (lambda q: flex.flex_attention(q, q, q, score_mod=lambda s, b, h, qi, ki: s.sum()), ValueError,
     "must return a tensor shaped like the scores"),
    (lambda q: flex.flex_attention(q, q, q, score_mod=lambda s, b, h, qi, ki: undefined_name), TypeError,  # noqa: F821
     "score_mod '<lambda>' failed on tinygrad_attn tensors \\(NameError"),
    (lambda q: flex.flex_attention(q[0], q[0], q[0]), ValueError, "must be 4-D"),
])
def test_bad_inputs_are_one_clear_error(call, error, message):
    q = ta.tensor(np.ones((1, 2, 4, 3)))
    with pytest.raises(error, match=message):
        call(q)


@pytest.mark.torch_parity
@pytest.mark.parametrize("variant", ["plain", "causal", "sliding_window", "document", "softcap", "alibi",
                                     "relative_bias", "gqa", "fully_masked_row"])
def test_the_forward_and_lse_equal_pytorchs_flex_attention(variant):
    torch = pytest.importorskip("torch")
    from torch.nn.attention import flex_attention as torch_flex

    q, k, v = _arrays(4, h=4, hkv=2 if variant == "gqa" else 4)
    slopes, table = np.random.default_rng(5).random(4), np.random.default_rng(6).normal(size=(17,))
    results = []
    for lib, fx, tensor in ((ta, flex, ta.tensor), (torch, torch_flex, torch.tensor)):
        mask_mods = {"causal": causal, "sliding_window": fx.and_masks(causal, window),
                     "document": fx.and_masks(causal, document), "gqa": causal,
                     "fully_masked_row": lambda b, h, qi, ki: (qi != 0) & (ki <= qi)}
        mods = {"softcap": lambda s, b, h, qi, ki, lib=lib: lib.tanh(s / 2) * 2,
                "alibi": lambda s, b, h, qi, ki, t=tensor: s - t(slopes)[h] * (qi - ki).abs(),
                "relative_bias": lambda s, b, h, qi, ki, t=tensor: s + t(table)[qi - ki + 8]}
        block = (fx.create_block_mask(mask_mods[variant], None, None, 9, 9, device="cpu")
                 if variant in mask_mods else None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out, lse = fx.flex_attention(tensor(q), tensor(k), tensor(v), score_mod=mods.get(variant),
                                         block_mask=block, enable_gqa=variant == "gqa", return_lse=True)
        results.append((np.asarray(out.numpy()), np.asarray(lse.numpy()), str(out.dtype), tuple(out.shape)))
    (ours, our_lse, our_dtype, our_shape), (theirs, their_lse, their_dtype, their_shape) = results
    assert our_shape == their_shape and our_dtype.split(".")[-1] == their_dtype.split(".")[-1]
    np.testing.assert_allclose(ours, theirs, atol=1e-12)
    np.testing.assert_allclose(our_lse, their_lse, atol=1e-12)


@few
@given(seed=st.integers(0, 2**16), group=st.sampled_from([1, 2, 4]), causal_=st.booleans(), t=st.integers(1, 5))
def test_sdpa_enable_gqa_is_gradchecked_on_both_paths(seed, group, causal_, t):
    q, k, v = _arrays(seed, b=1, h=4, hkv=4 // group, q_len=t, kv_len=t, e=2, ev=2)
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):
        with sdpa_kernel(backend):
            assert ta.gradcheck(lambda a, b, c: ta.nn.functional.scaled_dot_product_attention(
                a, b, c, is_causal=causal_, enable_gqa=True), [ta.tensor(x, requires_grad=True) for x in (q, k, v)])
    with pytest.raises(ValueError, match="a divisor of q's"):
        three = ta.tensor(np.ones((1, 3, t, 2)))
        ta.nn.functional.scaled_dot_product_attention(ta.tensor(q), three, three, enable_gqa=True)


@pytest.mark.torch_parity
@pytest.mark.parametrize("backend", [SDPBackend.FLASH_ATTENTION, SDPBackend.MATH])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sdpa_enable_gqa_equals_pytorchs(backend, dtype):
    torch = pytest.importorskip("torch")
    q, k, v = (a.astype(dtype) for a in _arrays(7, b=2, h=8, hkv=2, q_len=10, kv_len=10, e=4, ev=3))
    g = np.random.default_rng(8).normal(size=(2, 8, 10, 3)).astype(dtype)
    ours = [ta.tensor(a, requires_grad=True) for a in (q, k, v)]
    with sdpa_kernel(backend):
        out = ta.nn.functional.scaled_dot_product_attention(*ours, is_causal=True, enable_gqa=True)
    (out * ta.tensor(g)).sum().backward()
    theirs = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    ref = torch.nn.functional.scaled_dot_product_attention(*theirs, is_causal=True, enable_gqa=True)
    (ref * torch.tensor(g)).sum().backward()
    tol = 2e-6 if dtype == np.float32 else 1e-12
    assert out.dtype == ta.float32 if dtype == np.float32 else out.dtype == ta.float64
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), atol=tol)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), atol=tol * 5)
