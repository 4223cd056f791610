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
        logits = model(tokens[:, -model.config["max_len"]:]).numpy()[:, -1]
        tokens = np.concatenate([tokens, logits.argmax(-1)[:, None]], axis=1)
    return tokens


def test_cached_logits_equal_full_forward_logits(sdpa_path):
    model = small_lm()
    tokens = np.random.default_rng(0).integers(0, 11, (2, 9))
    full = model(tokens).numpy()
    cache = nn.KVCache()
    pieces = [model(tokens[:, :4], kv_cache=cache).numpy()] + [model(tokens[:, i:i + 1], kv_cache=cache).numpy()
                                                             for i in range(4, 9)]
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
        logits = model.decode(tokens, memory, lengths).numpy()[:, -1]
        tokens = np.concatenate([tokens, logits.argmax(-1)[:, None]], axis=1)
    np.testing.assert_array_equal(got, tokens)
    stopped = model.translate(src, 6, bos=1, eos=int(tokens[0, 2]), src_lengths=lengths, top_k=1)
    assert stopped[0, 2] == tokens[0, 2] and np.all(stopped[0, 2:] == tokens[0, 2])
