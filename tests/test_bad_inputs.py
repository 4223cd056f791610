"""Bad input, class by class (as PyTorch's OpInfo error inputs): each case gets one clear exception whose
message names the argument and the offending value or shape, never a traceback from inside numpy or
numba, and the kernels that index with user data are safe whichever public path reaches them."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tinygrad_attn as ta
from tinygrad_attn import functional as F
from tinygrad_attn import nn, optim

x32 = ta.Tensor(np.zeros((2, 3), np.float32))


def _module():
    return nn.Linear(2, 2)


CASES = [
    # (name, call, exception, message pattern)
    ("ragged list", lambda: ta.Tensor([[1, 2], [3]]), ValueError, "rectangular nested list"),
    ("unknown dtype", lambda: ta.Tensor([1.0], dtype="banana"), TypeError, "'banana' is not a dtype"),
    ("complex dtype", lambda: ta.Tensor([1.0], dtype=np.complex64), TypeError, "unsupported dtype complex64"),
    ("string data", lambda: ta.Tensor(["a"]), TypeError, r"unsupported dtype <U1.*\['a'\]"),
    ("huge input echoed short", lambda: ta.Tensor([["a"] * 100_000]), TypeError, r"\.\.\.\)?$"),
    ("pow by a string", lambda: x32 ** "2", TypeError, "exponent must be a number or a tensor, got '2'"),
    ("reshape by a string", lambda: x32.reshape("a", 2), TypeError, "reshape: sizes must be ints"),
    ("reshape by a float", lambda: x32.reshape(3, 2.5), TypeError, r"sizes must be ints, got \(3, 2.5\)"),
    ("view needs a copy", lambda: x32.T.view(6), RuntimeError, r"contiguous\(\)"),
    ("view says view", lambda: x32.view(4), ValueError, r"view: cannot reshape .* \(2, 3\)"),
    ("reshape with -1 that cannot fit", lambda: x32.reshape(4, -1), ValueError, r"cannot reshape .* into \(4, -1\)"),
    ("reshape with two -1", lambda: x32.reshape(-1, -1), ValueError, "at most one -1"),
    ("int index out of range", lambda: x32[5], IndexError, r"index 5 is invalid for a tensor of shape \(2, 3\)"),
    ("too many indices", lambda: x32[0, 1, 2], IndexError, r"index \(0, 1, 2\) is invalid .* \(2, 3\)"),
    ("unbroadcastable operands", lambda: x32 + ta.ones(4, 3), ValueError, r"add: shapes \(2, 3\) and \(4, 3\)"),
    ("astype to a string", lambda: x32.astype(np.str_), TypeError, "astype: unsupported dtype <U0"),
    ("masked_fill value", lambda: x32.masked_fill(np.ones((2, 3), bool), "x"), TypeError, "value must be a number"),
    ("dropout p string", lambda: F.dropout(x32, "a"), ValueError, "dropout: p must be in"),
    ("softmax of ints", lambda: F.softmax(ta.tensor([[1, 2, 3]])), TypeError, "softmax: input must be float32 or "
                                                                            "float64, got int64"),
    ("log_softmax of bools", lambda: F.log_softmax(ta.tensor([[True]])), TypeError, "got bool"),
    ("layer_norm of ints", lambda: F.layer_norm(ta.tensor([[1, 2]]), 2), TypeError, "layer_norm: input"),
    ("gelu of ints", lambda: F.gelu(ta.tensor([1, 2])), TypeError, "gelu: input must be float32"),
    ("float16 softmax", lambda: F.softmax(ta.Tensor(np.zeros(3, np.float16))), TypeError, "got float16"),
    ("cross_entropy int logits", lambda: F.cross_entropy(ta.tensor([[1, 2]]), [0]), TypeError, "logits must be float"),
    ("softmax of 0-d", lambda: F.softmax(ta.Tensor(np.float32(1))), ValueError, "0-d tensor"),
    ("sdpa on lists", lambda: F.scaled_dot_product_attention([[1.0]], [[1.0]], [[1.0]]), TypeError,
     "q must be a Tensor, got list"),
    ("sdpa int q", lambda: F.scaled_dot_product_attention(*(ta.Tensor(np.ones((1, 2, 2), np.int64)),) * 3),
     TypeError, "q must be float32 or float64, got int64"),
    ("sdpa mixed dtypes", lambda: F.scaled_dot_product_attention(ta.Tensor(np.ones((1, 2, 2))), *(x32.reshape(1, 2, 3)[
        ..., :2],) * 2), TypeError, "share a dtype"),
    ("sdpa scale string", lambda: F.scaled_dot_product_attention(*(x32.reshape(1, 2, 3),) * 3, scale="x"),
     ValueError, "scale must be a finite number"),
    ("cross_entropy (B, T, C) logits", lambda: F.cross_entropy(ta.Tensor(np.ones((2, 3, 5), np.float32)),
                                                                np.zeros((2, 3), np.int64)), ValueError,
     r"logits \(B, T, C\) go as logits.reshape\(-1, C\)"),
    ("cross_entropy target range", lambda: F.cross_entropy(x32, [0, 7]), IndexError, r"\[7\] are outside \[0, 3\)"),
    ("stack dim", lambda: ta.stack([x32, x32], dim=3), IndexError, "stack: dim 3 is out of range"),
    ("Embedding padding_idx", lambda: nn.Embedding(10, 4, padding_idx=10), ValueError, "padding_idx must be"),
    ("Embedding negative size", lambda: nn.Embedding(-1, 4), ValueError, "num_embeddings must be an int >= 0"),
    ("Linear float size", lambda: nn.Linear(2.5, 3), ValueError, "in_features must be an int >= 0, got 2.5"),
    ("LayerNorm negative size", lambda: nn.LayerNorm(-3), ValueError, "normalized_shape must be an int >= 1, got -3"),
    ("MHA negative heads", lambda: nn.MultiHeadAttention(8, -2), ValueError, "num_heads must be a positive int"),
    ("Sequential of a number", lambda: nn.Sequential(nn.Linear(2, 2), 3), TypeError, "item 1 is a int"),
    ("Adam of None", lambda: optim.Adam([None]), TypeError, "NoneType"),
    ("SGD of a module", lambda: optim.SGD(_module(), lr=0.1), TypeError, "model.parameters"),
    ("SGD of one tensor", lambda: optim.SGD(ta.tensor([1.0], requires_grad=True), lr=0.1), TypeError, "got a Tensor"),
    ("Adam beta 1.0", lambda: optim.Adam(_module().parameters(), betas=(0.9, 1.0)), ValueError, r"betas\[1\]"),
    ("lr as a string", lambda: optim.SGD(_module().parameters(), lr="0.1"), TypeError, "lr must be a number"),
    ("Adam load {}", lambda: optim.Adam(_module().parameters()).load_state_dict({}), KeyError, "missing keys"),
    ("set_num_threads 1.5", lambda: ta.set_num_threads(1.5), TypeError, "n must be an int, got 1.5"),
    ("manual_seed -1", lambda: ta.manual_seed(-1), ValueError, "seed must be a non-negative int, got -1"),
    ("gradcheck on numpy", lambda: ta.gradcheck(lambda a: a, [np.ones(3)]), TypeError, r"inputs\[0\] is a ndarray"),
    ("causal_mask 2.5", lambda: ta.causal_mask(2.5), TypeError, "Tq must be an int, got 2.5"),
    ("to a device", lambda: _module().to("cuda"), RuntimeError,
     "device 'cuda' is not available: tinygrad_attn runs on the CPU only"),
    ("Seq2Seq negative length", lambda: nn.Seq2SeqTransformer(5, 5, 8, d_model=8, nhead=2)(
        np.zeros((2, 3), np.int64), np.zeros((2, 3), np.int64), [3, -1]), ValueError, r"lie in \[0, 3\]"),
    ("Seq2Seq lengths size", lambda: nn.Seq2SeqTransformer(5, 5, 8, d_model=8, nhead=2)(
        np.zeros((2, 3), np.int64), np.zeros((2, 3), np.int64), [3]), ValueError, "src_lengths must be 2 integers"),
    ("sum keepdim 1", lambda: x32.sum(0, keepdim=1), TypeError, "sum: keepdim must be a bool, got 1"),
    ("mean keepdim tuple", lambda: x32.mean(-1, ()), TypeError, r"mean: keepdim must be a bool, got \(\)"),
    ("argmax keepdim array", lambda: x32.argmax(1, np.zeros(0)), TypeError, "argmax: keepdim must be a bool"),
    ("min of empty", lambda: ta.zeros(0).min(), ValueError, r"min: the tensor of shape \(0,\) is empty along dim None"),
    ("ones too large", lambda: ta.ones(10**20), ValueError, "ones: size .* has more elements than an array can hold"),
    ("rand dim too large", lambda: ta.rand(0, 10**20), ValueError, "rand: size .* more elements"),
    ("full of an array", lambda: ta.full((2,), np.ones(3)), TypeError, "fill_value must be a number, got ndarray"),
    ("zeros_like of a list", lambda: ta.zeros_like([1.0]), TypeError, "zeros_like: input must be a Tensor, got list"),
    ("ones_like dtype", lambda: ta.ones_like(x32, dtype="x"), TypeError, "ones_like: dtype 'x' is not a dtype"),
    ("tril of 1-D", lambda: ta.tril(ta.ones(3)), RuntimeError,
     r"tril: input tensor must have at least 2 dimensions, got shape \(3,"),
    ("triu diagonal array", lambda: ta.triu(x32, np.ones(2)), TypeError, "triu: diagonal must be an int"),
    ("topk of an array", lambda: ta.topk(np.ones(3), 1), TypeError, "topk: input must be a Tensor, got ndarray"),
    ("causal_mask too large", lambda: ta.causal_mask(10**20), ValueError, "more elements than an array can hold"),
    ("relu of a tuple", lambda: F.relu((1.0,)), TypeError, "relu: input must be a Tensor, got tuple"),
    ("dropout of a list", lambda: F.dropout([1.0], 0.5), TypeError, "dropout: input must be a Tensor, got list"),
    ("packed attention of None", lambda: F.packed_self_attention(None), TypeError,
     "packed_self_attention: qkv must be a Tensor, got NoneType"),
    ("layer_norm eps", lambda: F.layer_norm(x32, 3, eps="a"), TypeError, "layer_norm: eps must be a number, got 'a'"),
    ("layer_norm eps < 0", lambda: F.layer_norm(x32, 3, eps=-1.0), ValueError, r"eps must be a finite number in \[0.0"),
    ("layer_norm weight list", lambda: F.layer_norm(x32, 3, weight=[1.0] * 3), TypeError,
     "layer_norm: weight must be a Tensor, got list"),
    ("layer_norm shape float", lambda: F.layer_norm(x32, 3.0), TypeError, "normalized_shape must be an int or a tuple"),
    ("arange to inf", lambda: ta.arange(0, float("inf")), ValueError, "arange: end must be a finite number, got inf"),
    ("arange of a string", lambda: ta.arange("a"), TypeError, "arange: end must be a number, got 'a'"),
    ("Linear of numpy", lambda: nn.Linear(3, 2)(np.ones((2, 3), np.float32)), TypeError,
     "Linear: input must be a Tensor, got ndarray"),
    ("MHA of numpy", lambda: nn.MultiHeadAttention(4, 2)(np.ones((1, 2, 4), np.float32)), TypeError,
     "MultiHeadAttention: query must be a Tensor, got ndarray"),
    ("MHA key list", lambda: nn.MultiHeadAttention(4, 2)(ta.ones(1, 2, 4), [[0.0] * 4] * 2), TypeError,
     "MultiHeadAttention: key must be a Tensor, got list"),
    ("MHA kv_cache tensor", lambda: nn.MultiHeadAttention(4, 2)(ta.ones(1, 2, 4), kv_cache=ta.ones(1)), TypeError,
     "kv_cache must be a KVCache or None, got Tensor"),
    ("CausalLM kv_cache", lambda: nn.CausalLM(5, 8, d_model=8, nhead=2, num_layers=1)(np.zeros((1, 2), np.int64),
                                                                                     False, 3), TypeError,
     "CausalLM: kv_cache must be a KVCache or None, got int"),
    ("positions before the first", lambda: nn.PositionalEncoding(4, 10)(ta.ones(1, 3, 4), offset=-5), ValueError,
     "PositionalEncoding: offset must be a non-negative int, got -5"),
    ("learned positions of a list", lambda: nn.LearnedPositionalEncoding(4, 10)([[1.0] * 4]), TypeError,
     "LearnedPositionalEncoding: input must be a Tensor, got list"),
    ("uniform_ bound tuple", lambda: nn.init.uniform_(ta.zeros(2, 2), (3,)), TypeError,
     r"init.uniform_: a must be a number, got \(3,\)"),
    ("xavier gain inf", lambda: nn.init.xavier_uniform_(ta.zeros(2, 2), float("inf")), ValueError,
     "init.xavier_uniform_: gain must be a finite number, got inf"),
    ("normal_ of a list", lambda: nn.init.normal_([1.0]), TypeError, "init.normal_: expected a Tensor or Parameter"),
    ("trunc_normal_ far tail", lambda: nn.init.trunc_normal_(ta.zeros(3), 0.0, 1.0, 100.0, 101.0), ValueError,
     r"holds only 0 of N\(0.0, 1.0\^2\); resampling into it would take too long"),
    ("LambdaLR of a dict", lambda: optim.LambdaLR({}, lambda s: 1.0), TypeError, "LambdaLR: expected an Optimizer"),
    ("clip_grad_norm_ of strings", lambda: optim.clip_grad_norm_("ab", 1.0), TypeError, "item 0 is a str"),
    ("to_dot of a number", lambda: ta.viz.to_dot(3), TypeError, "to_dot: tensor must be a Tensor, got int"),
    ("to_dot names list", lambda: ta.viz.to_dot(x32, names=[x32]), TypeError, "names must be a module or a dict"),
    ("attention_maps of a model", lambda: ta.viz.attention_maps(_module(), None, None), TypeError,
     "attention_maps: task must be a task"),
    ("tokenize a number", lambda: ta.tasks.tokenize(3), TypeError, "tokenize: sentence must be a str, got int"),
    ("load_state_dict complex", lambda: _module().load_state_dict(
        {k: v.numpy() + 0j for k, v in _module().state_dict().items()}), ValueError,
     "has dtype complex64; expected real"),
]


@pytest.mark.parametrize("name, call, exception, pattern", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_one_clear_error(name, call, exception, pattern):
    with pytest.raises(exception, match=pattern) as info:
        call()
    assert len(str(info.value)) < 400  # a huge input is not echoed whole
    frames = [str(f.path) for f in info.traceback]
    assert not any("/numpy/" in f or "/numba/" in f for f in frames[-1:]), frames[-1]


def test_empty_shapes_on_the_weights_path_and_in_multi_head_attention(sdpa_path):
    mha = nn.MultiHeadAttention(8, 2)
    for tq, tk in ((0, 3), (3, 0)):
        q, kv = ta.Tensor(np.zeros((2, tq, 8), np.float32)), ta.Tensor(np.zeros((2, tk, 8), np.float32))
        out, weights = mha(q, kv, kv, need_weights=sdpa_path == "math")
        assert out.shape == (2, tq, 8)
        if tk == 0:  # attention over no keys gives zeros, so the output is out_proj's bias
            np.testing.assert_array_equal(out.detach().numpy(),
                                          np.broadcast_to(mha.out_proj.bias.detach().numpy(), out.shape))
        if weights is not None:
            assert weights.shape == (2, 2, tq, tk)
    q = ta.Tensor(np.zeros((1, 2, 3, 0)))
    out = F.scaled_dot_product_attention(q, q, ta.Tensor(np.ones((1, 2, 3, 4))))  # d = 0: uniform weights
    np.testing.assert_allclose(out.numpy(), 1.0)
    y = F.layer_norm(ta.Tensor(np.zeros((0, 4))), 4)
    assert y.shape == (0, 4)
    with pytest.raises(ValueError, match="normalized_shape must hold positive ints"):
        F.layer_norm(ta.Tensor(np.zeros((2, 0))), 0)


def test_kernels_survive_out_of_range_indices_through_every_public_path():
    """In a subprocess, so that a segfault fails the test instead of the run: each path raises IndexError."""
    code = textwrap.dedent("""
        import numpy as np
        import tinygrad_attn as ta
        from tinygrad_attn import functional as F, fused, nn
        from tinygrad_attn.nn.layers import EmbeddingLookup
        logits = ta.Tensor(np.zeros((2, 5), np.float32), requires_grad=True)
        emb = nn.Embedding(4, 3)
        paths = {
            "CrossEntropy.apply": lambda t: fused.CrossEntropy.apply(logits, target=np.array([0, t]),
                                                                     ignore_index=-100),
            "cross_entropy": lambda t: F.cross_entropy(logits, np.array([0, t])),
            "EmbeddingLookup.apply": lambda t: EmbeddingLookup.apply(emb.weight, indices=np.array([t]),
                                                                     padding_idx=None),
            "Embedding": lambda t: emb(np.array([t])),
            "indexing": lambda t: logits[0, t],
        }
        for name, path in paths.items():
            for bad in (5, 1000, 10**11, -10**11):
                try:
                    path(bad)
                except IndexError as err:
                    assert str(bad) in str(err) or "out of" in str(err) or "outside" in str(err), (name, err)
                else:
                    raise SystemExit(f"{name} accepted {bad}")
        print("all refused")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "all refused" in proc.stdout
