"""Generation with a key/value cache: the same tokens and logits as full forward passes, on both attention paths."""

import numpy as np
import pytest

import tinygrad_attn as ta
from tinygrad_attn import nn


def small_lm(max_len=12, seed=0):
    ta.manual_seed(seed)
    return nn.CausalLM(vocab_size=11, max_len=max_len, d_model=16, nhead=4, num_layers=2, dim_feedforward=32).to(
        np.float64)


def greedy_without_cache(model, tokens, n):
    for _ in range(n):
        logits = model(tokens[:, -model.config["max_len"]:]).detach().numpy()[:, -1]
        tokens = np.concatenate([tokens, logits.argmax(-1)[:, None]], axis=1)
    return tokens


def test_cached_logits_equal_full_forward_logits(sdpa_path):
    model = small_lm()
    tokens = np.random.default_rng(0).integers(0, 11, (2, 9))
    full = model(tokens).detach().numpy()
    cache = nn.KVCache()
    pieces = [model(tokens[:, :4], kv_cache=cache).detach().numpy()]
    pieces += [model(tokens[:, i:i + 1], kv_cache=cache).detach().numpy() for i in range(4, 9)]
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), full, rtol=1e-10, atol=1e-12)
    assert cache.length == 9


@pytest.mark.parametrize("prompt_len, n", [(1, 6), (4, 5), (5, 15)])  # the last runs past max_len
def test_greedy_generation_equals_argmax_over_full_passes(prompt_len, n):
    model = small_lm()
    prompt = np.random.default_rng(1).integers(0, 11, (3, prompt_len))
    want = greedy_without_cache(model, prompt, n)
    got = model.generate(prompt, n, top_k=1)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(model.generate(prompt, n, top_k=1, use_cache=False), want)
    assert got.shape == (3, prompt_len + n) and got.dtype == np.int64
    np.testing.assert_array_equal(got[:, :prompt_len], prompt)


def test_sampling_is_seeded_and_the_same_with_and_without_cache():
    model = small_lm()
    prompt = np.array([[1, 2, 3]])
    ta.manual_seed(7)
    a = model.generate(prompt, 8, temperature=0.8, top_k=5)
    ta.manual_seed(7)
    b = model.generate(prompt, 8, temperature=0.8, top_k=5, use_cache=False)
    np.testing.assert_array_equal(a, b)
    assert a.min() >= 0 and a.max() < 11


def test_generation_errors():
    model = small_lm()
    with pytest.raises(ValueError, match="temperature must be a positive number"):
        model.generate([[1]], 2, temperature=0)
    with pytest.raises(ValueError, match="top_k must be a positive int"):
        model.generate([[1]], 2, top_k=0)
    with pytest.raises(IndexError, match=r"tokens must lie in \[0, 11\)"):
        model.generate([[1, 11]], 2)
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate([[1]], -1)


def test_seq2seq_generation_runs_the_encoder_once_and_matches_full_decoding():
    ta.manual_seed(0)
    model = nn.Seq2SeqTransformer(9, 10, max_len=8, d_model=16, nhead=2, num_encoder_layers=1,
                                  num_decoder_layers=2, dim_feedforward=32).to(np.float64)
    src = np.random.default_rng(2).integers(0, 9, (2, 5))
    lengths = np.array([5, 3])
    calls = []
    encode = model.encode
    model.encode = lambda *a, **k: calls.append(1) or encode(*a, **k)
    got = model.generate(src, 6, bos=1, src_lengths=lengths, top_k=1)
    assert calls == [1]
    memory = encode(src, lengths)
    tokens = np.ones((2, 1), np.int64)
    for _ in range(6):
        logits = model.decode(tokens, memory, lengths).detach().numpy()[:, -1]
        tokens = np.concatenate([tokens, logits.argmax(-1)[:, None]], axis=1)
    np.testing.assert_array_equal(got, tokens)
    stopped = model.translate(src, 6, bos=1, eos=int(tokens[0, 2]), src_lengths=lengths, top_k=1)
    assert stopped[0, 2] == tokens[0, 2] and np.all(stopped[0, 2:] == tokens[0, 2])


# --- a cache that cannot serve the wrong keys ---------------------------------------------------------------

def test_a_refused_call_leaves_the_cache_as_it_was():
    model = small_lm()
    tokens = np.random.default_rng(3).integers(0, 11, (2, 6))
    cache = nn.KVCache()
    model(tokens[:, :3], kv_cache=cache)
    for bad in (tokens[:1, 3:4], np.concatenate([tokens, tokens[:1]])[:, 3:4]):  # batch 2 -> 1, 2 -> 3
        with pytest.raises(ValueError, match="holds a batch of 2 sequences"):
            model(bad, kv_cache=cache)
    with pytest.raises(ValueError, match="exceed max_len"):  # fails inside the model, after the checks
        model(np.zeros((2, 10), np.int64), kv_cache=cache)
    assert cache.length == 3
    rest = [model(tokens[:, i:i + 1], kv_cache=cache).detach().numpy() for i in range(3, 6)]
    np.testing.assert_allclose(np.concatenate(rest, axis=1), model(tokens).detach().numpy()[:, 3:], rtol=1e-10,
                               atol=1e-12)


def test_a_cache_belongs_to_one_model():
    first, second = small_lm(seed=0), small_lm(seed=1)
    cache = nn.KVCache()
    first(np.array([[1, 2, 3]]), kv_cache=cache)
    with pytest.raises(ValueError, match="holds the keys of another CausalLM"):
        second(np.array([[4]]), kv_cache=cache)
    cache.reset()
    np.testing.assert_allclose(second(np.array([[4]]), kv_cache=cache).detach().numpy(),
                               second(np.array([[4]])).detach().numpy())


def test_a_new_module_never_reads_a_dead_modules_keys():
    cache = nn.KVCache()
    x = ta.randn(1, 3, 8)
    nn.MultiHeadAttention(8, 2)(x, kv_cache=cache)
    for _ in range(20):  # new modules, some of which may get the dead one's id()
        with pytest.raises(ValueError, match="holds the keys of another MultiHeadAttention"):
            nn.MultiHeadAttention(8, 2)(x, kv_cache=cache)


def test_cross_attention_cache_refuses_another_memory():
    ta.manual_seed(0)
    mha = nn.MultiHeadAttention(8, 2)
    query, memory = ta.randn(2, 1, 8), ta.randn(2, 5, 8)
    cache = nn.KVCache()
    mha(query, memory, kv_cache=cache)
    same = ta.tensor(memory.numpy().copy())  # equal values in a new tensor: the same memory
    np.testing.assert_allclose(mha(query, same, kv_cache=cache)[0].detach().numpy(),
                               mha(query, memory)[0].detach().numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="computed from another memory"):
        mha(query, memory * 2, kv_cache=cache)


def test_gradients_reach_every_projection_through_the_cache():
    model = small_lm()
    tokens = np.random.default_rng(4).integers(0, 11, (2, 5))
    model(tokens).sum().backward()
    want = {name: p.grad.numpy().copy() for name, p in model.named_parameters()}
    model.zero_grad()
    cache = nn.KVCache()
    pieces = [model(tokens[:, :2], kv_cache=cache), model(tokens[:, 2:4], kv_cache=cache),
              model(tokens[:, 4:], kv_cache=cache)]
    ta.cat(pieces, dim=1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        np.testing.assert_allclose(p.grad.numpy(), want[name], rtol=1e-8, atol=1e-10, err_msg=name)
