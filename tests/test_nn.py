"""nn: the Module system, every layer and both models gradchecked in float64, and closed-form checks."""

import numpy as np
import pytest
from conftest import arrays, products_on_numba_threads, shapes
from hypothesis import given
from hypothesis import strategies as st

import tinygrad_attn as ta
from tinygrad_attn import nn
from tinygrad_attn.fused import PackedLinearFunction
from tinygrad_attn.kernels import parallel


def double(module):
    return module.to(np.float64)


def check_module(module, inputs, fn=None):
    """gradcheck a module's output with respect to its inputs and every parameter."""
    fn = fn or (lambda *xs: module(*xs[: len(inputs)]))
    return ta.gradcheck(fn, list(inputs) + module.parameters(), max_elements=64)


@pytest.fixture(params=["one thread", "numba threads"])
def products(request, monkeypatch):
    """Linear's products on the calling thread, or (as after ta.set_num_threads(3)) cut into row blocks on
    numba's threads however small they are, each block a call to numpy's BLAS; gives the list of calls
    made so (None on one thread)."""
    return None if request.param == "one thread" else products_on_numba_threads(monkeypatch)


def _check_products_ran(products, rows):
    """With numba's threads in use, a product of several rows went through them (not without a JIT); the
    record is emptied after, since the fixture lives across hypothesis's examples."""
    threads = parallel._safe_numba_layer() and parallel.kernel_gemm(np.dtype(np.float64))[0] is not None
    if products is not None and rows > 1 and threads:
        assert products
    if products is not None:
        products.clear()


@given(data=st.data(), lead=shapes(0, 2), n_in=st.integers(0, 4), n_out=st.integers(0, 4), bias=st.booleans())
def test_linear(products, data, lead, n_in, n_out, bias):
    layer = double(nn.Linear(n_in, n_out, bias))
    x = data.draw(arrays(lead + (n_in,)))
    expected = x @ layer.weight.detach().numpy().T + (layer.bias.detach().numpy() if bias else 0)
    np.testing.assert_allclose(layer(ta.Tensor(x)).detach().numpy(), expected)
    _check_products_ran(products, int(np.prod(lead)) if n_in and n_out else 0)  # no product with an empty side
    assert check_module(layer, [ta.Tensor(x, requires_grad=True)])


@given(data=st.data(), lead=shapes(0, 2), n_in=st.integers(1, 4), outs=st.lists(st.integers(1, 3), min_size=1,
       max_size=3), bias=st.booleans())
def test_packed_linear_is_the_layers_side_by_side(products, data, lead, n_in, outs, bias):
    layers = [double(nn.Linear(n_in, n, bias)) for n in outs]
    x = ta.Tensor(data.draw(arrays(lead + (n_in,))), requires_grad=True)
    params = [layer.weight for layer in layers] + ([layer.bias for layer in layers] if bias else [])
    packed = lambda x_, *ps: PackedLinearFunction.apply(x_, *ps, count=len(outs))  # noqa: E731
    expected = np.concatenate([layer(x).detach().numpy() for layer in layers], axis=-1)
    np.testing.assert_allclose(packed(x, *params).detach().numpy(), expected, rtol=1e-12, atol=1e-12)
    _check_products_ran(products, int(np.prod(lead)))
    assert ta.gradcheck(packed, [x] + params, max_elements=64)


def test_linear_init_matches_pytorch_bounds():
    ta.manual_seed(0)
    layer = nn.Linear(400, 300)
    bound = 1 / np.sqrt(400)
    assert layer.weight.shape == (300, 400) and layer.weight.dtype == np.float32
    largest = np.abs(layer.weight.detach().numpy()).max()
    assert 0.99 * bound < largest <= bound
    assert abs(layer.weight.detach().numpy().std() - bound / np.sqrt(3)) < 0.01 * bound


@given(data=st.data(), lead=shapes(1, 2), n=st.integers(2, 5), affine=st.booleans())
def test_layer_norm_module_normalises(data, lead, n, affine):
    layer = double(nn.LayerNorm(n, elementwise_affine=affine))
    x = data.draw(arrays(lead + (n,)))
    y = layer(ta.Tensor(x)).detach().numpy()
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-12)
    np.testing.assert_allclose(y.var(-1), x.var(-1) / (x.var(-1) + 1e-5), rtol=1e-9)  # var 1 up to eps
    if affine:
        layer.weight.detach().numpy()[:] = data.draw(arrays((n,)))
    assert check_module(layer, [ta.Tensor(x, requires_grad=True)])


@given(data=st.data(), shape=shapes(1, 2), padding=st.booleans())
def test_embedding_gather_and_scatter_add(data, shape, padding):
    emb = double(nn.Embedding(5, 3, padding_idx=0 if padding else None))
    idx = np.array(data.draw(st.lists(st.integers(0, 4), min_size=int(np.prod(shape)),
                                      max_size=int(np.prod(shape)))), np.int64).reshape(shape)
    out = emb(idx)
    np.testing.assert_array_equal(out.detach().numpy(), emb.weight.detach().numpy()[idx])
    out.sum().backward()
    counts = np.bincount(idx.reshape(-1), minlength=5).astype(float)
    if padding:
        counts[0] = 0
        assert np.all(emb.weight.detach().numpy()[0] == 0)
    np.testing.assert_array_equal(emb.weight.grad.numpy(), np.repeat(counts[:, None], 3, 1))
    if not padding:  # the padding row's gradient is zero by design, not the true derivative
        assert ta.gradcheck(lambda w: emb(idx), [emb.weight])


def test_embedding_rejects_out_of_range_and_float_indices():
    emb = nn.Embedding(5, 3)
    with pytest.raises(IndexError, match=r"\[0, 5\).*7"):
        emb(np.array([1, 7]))
    with pytest.raises(TypeError, match="integers"):
        emb(np.array([1.0]))


def test_positional_encodings():
    table = nn.sinusoidal_table(10, 6)
    np.testing.assert_allclose(table[3, 2], np.sin(3 / 10000 ** (2 / 6)))
    np.testing.assert_allclose(table[3, 3], np.cos(3 / 10000 ** (2 / 6)))
    x = ta.Tensor(np.zeros((2, 4, 6)), requires_grad=True)
    np.testing.assert_allclose(nn.PositionalEncoding(6, 10)(x).detach().numpy()[1], table[:4])
    learned = double(nn.LearnedPositionalEncoding(6, 10))
    assert check_module(learned, [ta.Tensor(np.random.default_rng(0).normal(size=(2, 4, 6)), requires_grad=True)])
    with pytest.raises(ValueError, match="positions up to 4 exceed max_len 3"):
        nn.PositionalEncoding(6, 3)(x)


def test_dropout_module_is_off_in_eval():
    layer = nn.Dropout(0.5)
    x = ta.Tensor(np.ones((10, 10)))
    assert (layer(x).numpy() == 0).any()
    layer.eval()
    assert layer(x) is x


def mha_inputs(rng, b, tq, tk, e, kdim=None, vdim=None):
    q = ta.Tensor(rng.normal(size=(b, tq, e)), requires_grad=True)
    k = ta.Tensor(rng.normal(size=(b, tk, kdim or e)), requires_grad=True)
    v = ta.Tensor(rng.normal(size=(b, tk, vdim or e)), requires_grad=True)
    return q, k, v


@pytest.mark.parametrize("need_weights", [True, False])
@given(b=st.integers(0, 2), tq=st.integers(0, 4), tk=st.integers(0, 4), heads=st.sampled_from([1, 2]),
       causal=st.booleans(), padded=st.booleans(), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_multi_head_attention_gradcheck(sdpa_path, need_weights, b, tq, tk, heads, causal, padded, bias, seed):
    if need_weights and sdpa_path == "flash":
        pytest.skip("the weights come from the math kernel only")
    rng = np.random.default_rng(seed)
    mha = double(nn.MultiHeadAttention(4, heads, bias=bias, kdim=3, vdim=5))
    q, k, v = mha_inputs(rng, b, tq, tk, 4, 3, 5)
    mask = ta.padding_mask(rng.integers(min(1, tk), tk + 1, b), tk) if padded else None

    def attend(q_, k_, v_, *params):
        out, w = mha(q_, k_, v_, mask=mask, is_causal=causal, need_weights=need_weights)
        return (out, w) if need_weights else out

    assert check_module(mha, [q, k, v], attend)


@pytest.mark.parametrize("unbatched", [False, True])
@given(b=st.integers(0, 2), t=st.integers(0, 4), heads=st.sampled_from([1, 2]), causal=st.booleans(),
       padded=st.booleans(), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_self_attention_packed_path_has_the_same_maths(sdpa_path, unbatched, b, t, heads, causal, padded, bias,
                                                       seed):
    """mha(x) runs the packed projection and packed attention; mha(x, x', x') with x' a copy of x runs the
    separate ones. Same output, same gradients (x's is the sum of the three), and a float64 gradcheck."""
    rng = np.random.default_rng(seed)
    mha = double(nn.MultiHeadAttention(4, heads, bias=bias))
    data = rng.normal(size=(t, 4) if unbatched else (b, t, 4))
    mask = ta.padding_mask(rng.integers(min(1, t), t + 1, b), t) if padded and not unbatched else None
    grad = rng.normal(size=data.shape)
    seen = []
    ta.engine._forward_hooks.append(lambda ctx, out: seen.append((ctx.function.__name__, len(ctx.inputs))))
    try:
        x = ta.Tensor(data, requires_grad=True)
        packed, _ = mha(x, mask=mask, is_causal=causal, need_weights=False)
    finally:
        ta.engine._forward_hooks.pop()
    assert ("PackedLinearFunction", 4 + 3 * bias) in seen
    assert (("FlashAttention", 1) in seen) == (sdpa_path == "flash")  # one packed input
    assert ("LinearFunction", 2 + bias) in seen
    packed.backward(grad)
    packed_grads = [x.grad.numpy()] + [p.grad.numpy() for p in mha.parameters()]

    mha.zero_grad()
    inputs = [ta.Tensor(data, requires_grad=True) for _ in range(3)]
    separate, _ = mha(*inputs, mask=mask, is_causal=causal, need_weights=False)
    separate.backward(grad)
    np.testing.assert_allclose(packed.detach().numpy(), separate.detach().numpy(), rtol=1e-12, atol=1e-12)
    separate_grads = [sum(i.grad.numpy() for i in inputs)] + [p.grad.numpy() for p in mha.parameters()]
    for got, want in zip(packed_grads, separate_grads):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)

    x = ta.Tensor(data, requires_grad=True)
    assert check_module(mha, [x], lambda x_, *ps: mha(x_, mask=mask, is_causal=causal, need_weights=False)[0])


def test_multi_head_attention_shapes_rows_and_causality():
    rng = np.random.default_rng(0)
    mha = nn.MultiHeadAttention(64, 4)
    x = ta.Tensor(rng.normal(size=(1, 5, 64)).astype(np.float32))
    out, w = mha(x, is_causal=True)
    assert out.shape == (1, 5, 64) and w.shape == (1, 4, 5, 5)
    np.testing.assert_allclose(w.detach().numpy().sum(-1), 1, rtol=1e-6)
    assert np.all(np.triu(w.detach().numpy(), 1) == 0)
    out2, none = mha(x, is_causal=True, need_weights=False)
    assert none is None
    np.testing.assert_allclose(out2.detach().numpy(), out.detach().numpy(), rtol=1e-5, atol=1e-6)
    avg = mha(x, average_attn_weights=True)[1]
    assert avg.shape == (1, 5, 5)
    single, w1 = mha(ta.Tensor(x.numpy()[0]))  # unbatched (T, E)
    assert single.shape == (5, 64) and w1.shape == (4, 5, 5)


def test_head_split_keeps_positions_apart():
    """Changing one position's input changes no other position's projected head vectors."""
    mha = nn.MultiHeadAttention(8, 2)
    x = np.random.default_rng(0).normal(size=(1, 3, 8)).astype(np.float32)
    heads = mha._split_heads(mha.q_proj(ta.Tensor(x))).detach().numpy()
    x[0, 1] += 1
    changed = mha._split_heads(mha.q_proj(ta.Tensor(x))).detach().numpy()
    assert np.all(heads[:, :, [0, 2]] == changed[:, :, [0, 2]]) and np.any(heads[:, :, 1] != changed[:, :, 1])


def test_multi_head_attention_errors():
    with pytest.raises(ValueError, match="embed_dim 10 is not divisible by num_heads 3"):
        nn.MultiHeadAttention(10, 3)
    mha = nn.MultiHeadAttention(8, 2)
    x = ta.Tensor(np.zeros((2, 5, 8), np.float32))
    with pytest.raises(ValueError, match=r"mask: shape \(4, 4\).*\(2, 2, 5, 5\)"):
        mha(x, mask=np.ones((4, 4), dtype=bool))
    with pytest.raises(ValueError, match=r"query must be .*got \(2, 5, 7\)"):
        mha(ta.Tensor(np.zeros((2, 5, 7), np.float32)))


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_layers_gradcheck(sdpa_path, norm_first):
    rng = np.random.default_rng(1)
    enc = double(nn.EncoderBlock(4, 2, 6, dropout=0.0, norm_first=norm_first, activation="gelu"))
    x = ta.Tensor(rng.normal(size=(2, 3, 4)), requires_grad=True)
    assert check_module(enc, [x], lambda x_, *ps: enc(x_, is_causal=True))
    dec = double(nn.DecoderBlock(4, 2, 6, dropout=0.0, norm_first=norm_first))
    memory = ta.Tensor(rng.normal(size=(2, 5, 4)), requires_grad=True)
    mask = ta.padding_mask([5, 2], 5)
    assert check_module(dec, [x, memory], lambda x_, m_, *ps: dec(x_, m_, memory_mask=mask))


def test_post_norm_is_layer_norm_of_residual():
    ta.manual_seed(0)  # the weights must not depend on what earlier tests drew
    layer = nn.EncoderBlock(8, 2, 16, dropout=0.0)
    x = ta.Tensor(np.random.default_rng(2).normal(size=(1, 4, 8)).astype(np.float32))
    attended = layer.self_attn(x)[0]
    expected = layer.norm1(x + attended)
    expected = layer.norm2(expected + layer.ff(expected))
    np.testing.assert_allclose(layer(x).detach().numpy(), expected.detach().numpy(), rtol=1e-5,
                               atol=1e-6)  # float32 rounding


def test_models_gradcheck_and_expose_attention():
    rng = np.random.default_rng(3)
    lm = double(nn.CausalLM(vocab_size=5, max_len=6, d_model=4, nhead=2, num_layers=1, dim_feedforward=6))
    tokens = rng.integers(0, 5, (2, 4))
    assert ta.gradcheck(lambda *ps: lm(tokens), lm.parameters(), max_elements=16)
    logits, attn = lm(tokens, return_attention=True)
    assert logits.shape == (2, 4, 5) and attn[0].shape == (2, 2, 4, 4)
    assert np.all(np.triu(attn[0].detach().numpy(), 1) == 0)

    s2s = double(nn.Seq2SeqTransformer(6, 5, max_len=6, d_model=4, nhead=2, num_encoder_layers=1,
                                       num_decoder_layers=1, dim_feedforward=6))
    src, tgt, lengths = rng.integers(0, 6, (2, 5)), rng.integers(0, 5, (2, 3)), np.array([5, 3])
    assert ta.gradcheck(lambda *ps: s2s(src, tgt, lengths), s2s.parameters(), max_elements=16)
    logits, attn = s2s(src, tgt, lengths, return_attention=True)
    assert logits.shape == (2, 3, 5) and attn["cross"][0].shape == (2, 2, 3, 5)
    assert np.all(attn["cross"][0].detach().numpy()[1, :, :, 3:] == 0)  # padding is never attended


def test_module_system():
    ta.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    names = [n for n, _ in model.named_parameters()]
    assert names == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert model.num_parameters() == 3 * 4 + 4 + 4 * 2 + 2
    assert "(0): Linear(in_features=3, out_features=4, bias=True)" in repr(model)
    state = model.state_dict()
    other = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).to(np.float64)
    other.load_state_dict(state)
    assert other[0].weight.dtype == np.float64
    np.testing.assert_allclose(other[0].weight.detach().numpy(), state["0.weight"])
    x = ta.Tensor(np.ones((1, 3), np.float32))
    model(x).sum().backward()
    assert model[0].weight.grad is not None
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    model.eval()
    assert not model[1].training
    with pytest.raises(KeyError, match=r"missing keys \['2.bias'\].*unexpected keys \['extra'\]"):
        model.load_state_dict({**{k: v for k, v in state.items() if k != "2.bias"}, "extra": np.zeros(1)})
    with pytest.raises(ValueError, match=r"'0.weight' has shape \(2, 2\)"):
        model.load_state_dict({**state, "0.weight": np.zeros((2, 2))})
    model.load_state_dict({"0.bias": np.zeros(4)}, strict=False)
    assert np.all(model[0].bias.detach().numpy() == 0)
