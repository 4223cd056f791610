"""The attention variants small models use (grouped-query heads, sliding windows, rotary positions, RMSNorm
and SwiGLU) in the layers: against plain-numpy references, finite differences on both attention paths, the
KV cache against a full recomputation, and a Llama-style model against the same model written in PyTorch."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinygrad_attn as ta
from tinygrad_attn.nn.attention import SDPBackend, sdpa_kernel
from tinygrad_attn.nn.rotary import RotaryEmbedding, apply_rotary, rotary_angles

few = settings(max_examples=6, deadline=None)
BACKENDS = (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH)


def _softmax(s):
    s = s - np.max(s, -1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(-1, keepdims=True)


def _reference(mha, x, window=None, rotary=False):
    """Plain numpy: the layer's projections, kv heads repeated to the query heads, causal (and window) mask,
    rotary (half-split) on q and k."""
    b, t, e = x.shape
    h, hkv, d = mha.num_heads, mha.n_kv_heads, mha.head_dim
    w = {n: getattr(mha, n).weight.detach().numpy() for n in ("q_proj", "k_proj", "v_proj", "out_proj")}
    bias = {n: getattr(mha, n).bias.detach().numpy() for n in ("q_proj", "k_proj", "v_proj", "out_proj")}
    q = (x @ w["q_proj"].T + bias["q_proj"]).reshape(b, t, h, d).transpose(0, 2, 1, 3)
    k = (x @ w["k_proj"].T + bias["k_proj"]).reshape(b, t, hkv, d).transpose(0, 2, 1, 3)
    v = (x @ w["v_proj"].T + bias["v_proj"]).reshape(b, t, hkv, d).transpose(0, 2, 1, 3)
    if rotary:
        angles = rotary_angles(np.arange(t), d)
        cos, sin = np.cos(np.concatenate([angles, angles], -1)), np.sin(np.concatenate([angles, angles], -1))
        half = lambda a: np.concatenate([-a[..., d // 2:], a[..., :d // 2]], -1)  # noqa: E731
        q, k = q * cos + half(q) * sin, k * cos + half(k) * sin
    k, v = np.repeat(k, h // hkv, axis=1), np.repeat(v, h // hkv, axis=1)
    distance = np.arange(t)[:, None] - np.arange(t)[None, :]
    keep = (distance >= 0) & ((distance < window) if window else True)
    s = np.where(keep, q @ k.transpose(0, 1, 3, 2) / math.sqrt(d), -np.inf)
    out = (_softmax(s) @ v).transpose(0, 2, 1, 3).reshape(b, t, e)
    return out @ w["out_proj"].T + bias["out_proj"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n_kv_heads, window, rotary", [(4, None, False), (2, None, False), (1, 3, False),
                                                         (4, 2, True), (2, 3, True)])
def test_layer_variants_equal_the_numpy_reference(backend, n_kv_heads, window, rotary):
    ta.manual_seed(0)
    mha = ta.nn.MultiHeadAttention(16, 4, n_kv_heads=n_kv_heads, window=window, rotary=rotary or None).to(ta.float64)
    x = np.random.default_rng(1).normal(size=(2, 7, 16))
    for need_weights in (False,) if backend == SDPBackend.FLASH_ATTENTION else (False, True):  # weights: math
        with sdpa_kernel(backend):
            out, _ = mha(ta.tensor(x), is_causal=True, need_weights=need_weights)
        np.testing.assert_allclose(out.detach().numpy(), _reference(mha, x, window, rotary), atol=1e-12)
    assert mha.k_proj.weight.shape == (n_kv_heads * 4, 16)  # kv heads only: fewer parameters


@few
@given(seed=st.integers(0, 2**16), t=st.integers(1, 5), n_kv=st.sampled_from([1, 2]), window=st.sampled_from(
    [None, 1, 2]), rotary=st.booleans())
def test_layer_variants_are_gradchecked_on_both_paths(seed, t, n_kv, window, rotary):
    ta.manual_seed(seed)
    mha = ta.nn.MultiHeadAttention(8, 2, n_kv_heads=n_kv, window=window, rotary=rotary or None).to(ta.float64)
    x = ta.tensor(np.random.default_rng(seed).normal(size=(1, t, 8)), requires_grad=True)
    params = [mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.bias]
    for backend in BACKENDS:
        with sdpa_kernel(backend):
            assert ta.gradcheck(lambda a, *p: mha(a, is_causal=True, need_weights=False)[0], [x, *params])
    assert ta.gradgradcheck(lambda a: mha(a, is_causal=True, need_weights=False)[0] ** 2, [x])


def test_rotary_scores_depend_on_the_distance_only_and_both_layouts_are_rotations():
    rng = np.random.default_rng(2)
    q, k = rng.normal(size=8), rng.normal(size=8)
    for interleaved in (False, True):
        rope = RotaryEmbedding(8, interleaved=interleaved)

        def at(vector, position, rope=rope):
            return rope(ta.tensor(vector[None, :]), offset=position).numpy()[0]

        assert np.isclose(at(q, 5) @ at(k, 2), at(q, 13) @ at(k, 10))  # m - n = 3 both times
        assert not np.isclose(at(q, 5) @ at(k, 2), at(q, 5) @ at(k, 4))
        assert np.isclose(np.linalg.norm(at(q, 7)), np.linalg.norm(q))  # a rotation keeps lengths
    x, angles = rng.normal(size=(5, 8)), rotary_angles(np.arange(5), 8)
    z = (x[:, 0::2] + 1j * x[:, 1::2]) * np.exp(1j * angles)  # the complex-number form (Meta's Llama)
    np.testing.assert_allclose(apply_rotary(ta.tensor(x), angles, interleaved=True).numpy(),
                               np.stack([z.real, z.imag], -1).reshape(5, 8), atol=1e-12)
    with pytest.raises(ValueError, match="head_dim must be an even int"):
        RotaryEmbedding(7)


def test_the_kv_cache_holds_kv_heads_and_continues_exactly_with_every_variant():
    ta.manual_seed(3)
    model = ta.nn.CausalLM(20, 16, d_model=16, nhead=4, num_layers=2, dim_feedforward=32, n_kv_heads=2,
                           window=[3, None], rotary=True, norm="rms", activation="swiglu")
    tokens = np.random.default_rng(4).integers(0, 20, (2, 10))
    with ta.no_grad():
        full = model(tokens).numpy()
        cache = ta.nn.KVCache()
        parts = [model(tokens[:, :6], kv_cache=cache).numpy()]
        parts += [model(tokens[:, i:i + 1], kv_cache=cache).numpy() for i in range(6, 10)]
    np.testing.assert_allclose(np.concatenate(parts, 1), full, atol=1e-5)
    stored = cache._store[model.layers[0].self_attn]["keys"]
    assert stored.shape[:2] == (2, 2)  # (B, kv heads): the cache stores kv heads, not query heads
    windowed, full_layer = (cache._store[layer.self_attn] for layer in model.layers)
    assert windowed["n"] == full_layer["n"] == 10  # positions seen: every one, for the rotary angles
    assert windowed["n"] - windowed["dropped"] == 3 and full_layer["dropped"] == 0  # held: a window's worth
    np.testing.assert_array_equal(model.generate(tokens[:, :3], 14, top_k=1),
                                  model.generate(tokens[:, :3], 14, top_k=1, use_cache=False))


def test_bad_variant_options_are_one_clear_error():
    for kwargs, message in (({"n_kv_heads": 3}, "n_kv_heads must be a positive divisor"),
                            ({"window": 0}, "window must be an int >= 1"),
                            ({"rotary": "yes"}, "rotary must be True, None or a RotaryEmbedding"),
                            ({"rotary": RotaryEmbedding(8)}, "rotary is for heads of 8")):
        with pytest.raises((ValueError, TypeError), match=message):
            ta.nn.MultiHeadAttention(16, 4, **kwargs)
    with pytest.raises(ValueError, match="window lists 1 entries for 2 layers"):
        ta.nn.CausalLM(10, 8, d_model=8, nhead=2, num_layers=2, window=[2])
    with pytest.raises(ValueError, match='norm must be "layer"'):
        ta.nn.CausalLM(10, 8, d_model=8, nhead=2, norm="batch")


@pytest.mark.torch_parity
def test_a_llama_style_model_equals_the_same_model_in_pytorch():
    """RMSNorm, SwiGLU, rotary (half-split), grouped-query and a sliding window, from the same weights:
    logits and every parameter's gradient."""
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    ta.manual_seed(5)
    model = ta.nn.CausalLM(30, 12, d_model=16, nhead=4, num_layers=2, dim_feedforward=24, n_kv_heads=2,
                           window=[3, None], rotary=True, norm="rms", activation="swiglu").to(ta.float64)
    tokens = np.random.default_rng(6).integers(0, 30, (2, 9))
    targets = np.random.default_rng(7).integers(0, 30, (2, 9))
    loss = ta.nn.functional.cross_entropy(model(tokens).reshape(-1, 30), ta.tensor(targets.reshape(-1)))
    loss.backward()
    weights = {n: torch.tensor(p.detach().numpy(), requires_grad=True) for n, p in model.named_parameters()}
    t, d, eps = 9, 4, float(np.finfo(np.float64).eps)
    angles = torch.tensor(rotary_angles(np.arange(t), d))
    cos, sin = torch.cat([angles.cos(), angles.cos()], -1), torch.cat([angles.sin(), angles.sin()], -1)

    def rope(a):
        return a * cos + torch.cat([-a[..., d // 2:], a[..., :d // 2]], -1) * sin

    def linear(x, name, bias=True):
        return tf.linear(x, weights[name + ".weight"], weights[name + ".bias"] if bias else None)

    x = weights["embed.weight"][torch.tensor(tokens)]
    for i, window in enumerate((3, None)):
        p = f"layers.{i}."
        h = tf.rms_norm(x, (16,), weights[p + "norm1.weight"], eps)
        q = linear(h, p + "self_attn.q_proj").reshape(2, t, 4, d).transpose(1, 2)
        k = linear(h, p + "self_attn.k_proj").reshape(2, t, 2, d).transpose(1, 2)
        v = linear(h, p + "self_attn.v_proj").reshape(2, t, 2, d).transpose(1, 2)
        distance = torch.arange(t)[:, None] - torch.arange(t)[None, :]
        keep = (distance >= 0) & ((distance < window) if window else True)
        a = tf.scaled_dot_product_attention(rope(q), rope(k), v, attn_mask=keep, enable_gqa=True)
        x = x + linear(a.transpose(1, 2).reshape(2, t, 16), p + "self_attn.out_proj")
        h = tf.rms_norm(x, (16,), weights[p + "norm2.weight"], eps)
        gated = tf.silu(linear(h, p + "ff.linear1", False)) * linear(h, p + "ff.linear3", False)
        x = x + linear(gated, p + "ff.linear2", False)
    logits = linear(tf.rms_norm(x, (16,), weights["norm.weight"], eps), "head")
    ref = tf.cross_entropy(logits.reshape(-1, 30), torch.tensor(targets.reshape(-1)))
    ref.backward()
    assert abs(loss.item() - ref.item()) < 1e-12
    for name, p in model.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), weights[name].grad.numpy(), atol=1e-12, err_msg=name)
