"""torch.nn's Transformer interface (TransformerEncoderLayer, TransformerDecoderLayer, TransformerEncoder,
TransformerDecoder, Transformer): gradients against finite differences on both attention paths, PyTorch's
mask conventions and errors, and, when torch is installed, the same values and gradients as PyTorch's
modules loaded with the same weights."""

import numpy as np
import pytest
from conftest import arrays
from hypothesis import given
from hypothesis import strategies as st

import tinygrad_attn as ta
from tinygrad_attn import nn
from tinygrad_attn.interop import to_torch
from tinygrad_attn.masks import is_causal_mask

try:
    import torch
except ImportError:
    torch = None


def leaf(a):
    return ta.Tensor(np.asarray(a, dtype=np.float64), requires_grad=True)


def causal(t):
    return nn.Transformer.generate_square_subsequent_mask(t, dtype=ta.float64)


# --- gradients against finite differences -----------------------------------------------------------------


@given(data=st.data(), t=st.integers(0, 3), b=st.integers(0, 2), batch_first=st.booleans(),
       norm_first=st.booleans(), padded=st.booleans())
def test_encoder_layer_gradcheck(sdpa_path, data, t, b, batch_first, norm_first, padded):
    ta.manual_seed(0)
    layer = nn.TransformerEncoderLayer(4, 2, 6, 0.0, "gelu", batch_first=batch_first, norm_first=norm_first,
                                       dtype=ta.float64)
    x = leaf(data.draw(arrays((b, t, 4) if batch_first else (t, b, 4))))  # sometimes a transposed view
    pad = np.zeros((b, t), bool)
    if padded and t > 1:
        pad[:, t - 1] = True  # the last position padded, never a whole row

    def run(x_, *params):
        return layer(x_, src_mask=causal(t), src_key_padding_mask=pad, is_causal=True)
    assert ta.gradcheck(run, [x] + layer.parameters(), max_elements=48)


def test_decoder_layer_and_stacks_are_twice_differentiable(sdpa_path):
    ta.manual_seed(0)
    rng = np.random.default_rng(0)
    layer = nn.TransformerDecoderLayer(4, 2, 6, 0.0, batch_first=False, dtype=ta.float64)
    tgt, memory = leaf(rng.normal(size=(3, 2, 4))), leaf(rng.normal(size=(5, 2, 4)))
    memory_pad = np.array([[False] * 5, [False] * 3 + [True] * 2])

    def run(t_, m_):
        return layer(t_, m_, tgt_mask=causal(3), memory_key_padding_mask=memory_pad, tgt_is_causal=True)
    assert ta.gradcheck(run, [tgt, memory])
    assert ta.gradgradcheck(run, [tgt, memory], atol=1e-4, max_elements=12)
    model = nn.Transformer(4, 2, 1, 1, 6, 0.0, dtype=ta.float64)
    assert ta.gradcheck(lambda s, t_: model(s, t_, tgt_mask=causal(3)), [memory, tgt], max_elements=24)


# --- PyTorch's conventions, checked without PyTorch ---------------------------------------------------------


def test_masks_follow_pytorch_conventions(sdpa_path):
    """True in src_mask blocks, a float mask adds, padding removes keys: each equals the same mask given another
    way, and the causal mask (fused kernel) equals the mask it is."""
    ta.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=True, dtype=ta.float64)
    x = ta.Tensor(np.random.default_rng(1).normal(size=(2, 5, 8)))
    blocked = np.triu(np.ones((5, 5), bool), 1)
    fused = layer(x, src_mask=causal(5), is_causal=True).detach().numpy()
    per_head = np.broadcast_to(blocked, (4, 5, 5)).copy()  # (B * H, T, T): never taken for the causal kernel
    np.testing.assert_allclose(layer(x, src_mask=per_head).detach().numpy(), fused, atol=1e-12)
    np.testing.assert_allclose(layer(x, src_mask=np.where(blocked, -np.inf, 0.0)).detach().numpy(), fused, atol=1e-12)
    unmasked = layer(x).detach().numpy()
    assert np.abs(unmasked - fused)[:, :-1].max() > 1e-3  # the mask changes every row but the last
    pad = np.zeros((2, 5), bool)
    pad[1, 3:] = True
    padded = layer(x, src_key_padding_mask=pad).detach().numpy()
    np.testing.assert_allclose(padded[0], unmasked[0], atol=1e-12)
    shorter = layer(ta.Tensor(x.numpy()[1:, :3])).detach().numpy()  # row 1's first 3 positions alone
    np.testing.assert_allclose(padded[1, :3], shorter[0], atol=1e-12)


def test_sequence_first_and_unbatched_inputs():
    ta.manual_seed(0)
    first = nn.TransformerEncoderLayer(8, 2, 16, 0.0, dtype=ta.float64)
    batch = nn.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=True, dtype=ta.float64)
    batch.load_state_dict(first.state_dict())
    x = np.random.default_rng(2).normal(size=(2, 5, 8))  # (B, T, E)
    out = batch(ta.Tensor(x)).detach().numpy()
    sequence_first = first(ta.Tensor(x.transpose(1, 0, 2))).detach().numpy()  # (T, B, E)
    np.testing.assert_allclose(sequence_first, out.transpose(1, 0, 2), atol=1e-12)
    np.testing.assert_allclose(first(ta.Tensor(x[1])).detach().numpy(), out[1], atol=1e-12)


def test_decoder_self_attention_is_causal_only_when_asked():
    ta.manual_seed(0)
    layer = nn.TransformerDecoderLayer(8, 2, 16, 0.0, batch_first=True, dtype=ta.float64)
    rng = np.random.default_rng(3)
    tgt, memory = ta.Tensor(rng.normal(size=(1, 4, 8))), ta.Tensor(rng.normal(size=(1, 6, 8)))
    full, masked = layer(tgt, memory).detach().numpy(), layer(tgt, memory, tgt_mask=causal(4)).detach().numpy()
    np.testing.assert_allclose(full[:, -1], masked[:, -1], atol=1e-12)  # the last query sees every key either way
    assert np.abs(full[:, 0] - masked[:, 0]).max() > 1e-3
    later = layer(ta.Tensor(tgt.numpy()[:, :2]), memory, tgt_mask=causal(2)).detach().numpy()
    np.testing.assert_allclose(masked[:, :2], later, atol=1e-12)  # causal: a query ignores what follows


def test_stacks_copy_the_layer():
    layer = nn.TransformerEncoderLayer(8, 2, 16, 0.0)
    encoder = nn.TransformerEncoder(layer, 3, norm=nn.LayerNorm(8))
    weights = [p for p in encoder.parameters()]
    assert len(weights) == 3 * len(layer.parameters()) + 2
    assert len({id(p) for p in weights}) == len(weights)  # independent copies, none shared with `layer`
    assert not any(p is q for p in weights for q in layer.parameters())
    first = encoder.layers[0].self_attn.q_proj.weight
    with ta.no_grad():
        first.zero_()
    assert np.abs(encoder.layers[1].self_attn.q_proj.weight.detach().numpy()).max() > 0
    model = nn.Transformer(16, 2, 1, 1, 32, 0.0)
    encoder, decoder = model.encoder.layers[0], model.decoder.layers[0]
    for module, fan_in, fan_out in [(encoder.self_attn.q_proj, 16, 48), (decoder.multihead_attn.v_proj, 16, 48),
                                    (encoder.linear1, 16, 32), (decoder.linear2, 32, 16)]:  # q, k, v packed (48, 16)
        bound, w = np.sqrt(6 / (fan_in + fan_out)), module.weight.detach().numpy()
        assert bound * 0.8 < np.abs(w).max() <= bound, (module, np.abs(w).max(), bound)
    layer = nn.TransformerEncoderLayer(16, 2, 32, 0.0)  # its self_attn starts as nn.MultiheadAttention does
    assert not any(np.any(m.bias.detach().numpy()) for m in (layer.self_attn.q_proj, layer.self_attn.out_proj))
    assert np.sqrt(6 / 64) * 0.8 < np.abs(layer.self_attn.k_proj.weight.detach().numpy()).max() <= np.sqrt(6 / 64)


def test_square_subsequent_mask_and_detection():
    m = nn.Transformer.generate_square_subsequent_mask(4).detach().numpy()
    assert m.dtype == np.float32 and m.shape == (4, 4)
    assert np.array_equal(m == -np.inf, np.triu(np.ones((4, 4), bool), 1)) and not m[np.tril_indices(4)].any()
    assert is_causal_mask(m, 4) and is_causal_mask(np.triu(np.ones((4, 4), bool), 1), 4)
    assert not is_causal_mask(m, 3) and not is_causal_mask(np.triu(np.ones((4, 4), bool), 2), 4)
    assert not is_causal_mask(np.where(m == 0, 0.5, m), 4)
    assert not is_causal_mask(np.triu(np.ones((4, 4), np.int64), 1), 4)


def test_bad_inputs_name_the_argument():
    layer = nn.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=True)
    x = ta.randn(2, 5, 8)
    with pytest.raises(RuntimeError, match=r"is_causal is a hint that src_mask"):
        layer(x, is_causal=True)
    with pytest.raises(ValueError, match=r"src_mask must be \(5, 5\) or \(4, 5, 5\).*got \(4, 4\)"):
        layer(x, src_mask=np.zeros((4, 4), bool))
    with pytest.raises(ValueError, match=r"src_key_padding_mask must be \(2, 5\).*got \(5, 2\)"):
        layer(x, src_key_padding_mask=np.zeros((5, 2), bool))
    with pytest.raises(TypeError, match=r"src_mask are supported, got an integer mask"):
        layer(x, src_mask=np.zeros((5, 5), np.int64))
    with pytest.raises(ValueError, match=r"src must be .* d_model = 8, got \(2, 5, 7\)"):
        layer(ta.randn(2, 5, 7))
    with pytest.raises(ValueError, match=r'activation must be "relu", "gelu" or a callable'):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")
    decoder = nn.TransformerDecoderLayer(8, 2, 16, 0.0)
    with pytest.raises(ValueError, match=r"tgt and memory hold batches of 2 and 3"):
        decoder(ta.randn(4, 2, 8), ta.randn(6, 3, 8))
    with pytest.raises(ValueError, match=r"memory_mask must be \(4, 6\)"):
        decoder(ta.randn(4, 2, 8), ta.randn(6, 2, 8), memory_mask=np.zeros((4, 4), bool))
    with pytest.raises(RuntimeError, match=r"batch number of src and tgt must be equal"):
        nn.Transformer(8, 2, 1, 1, 16)(ta.randn(5, 2, 8), ta.randn(4, 3, 8))
    with pytest.raises(TypeError, match=r"encoder_layer must be an nn.TransformerEncoderLayer"):
        nn.TransformerEncoder(nn.Linear(8, 8), 2)


def test_state_dicts_use_pytorchs_names_and_load_either():
    ta.manual_seed(0)
    layer = nn.TransformerDecoderLayer(8, 2, 16, 0.0)
    state = layer.state_dict()
    assert list(state)[:5] == ["self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                               "self_attn.out_proj.bias", "multihead_attn.in_proj_weight"]
    assert {"linear1.weight", "linear2.bias", "norm3.weight"} <= set(state) and not any("q_proj" in k for k in state)
    q, k, v = (getattr(layer.self_attn, f"{n}_proj").weight.detach().numpy() for n in "qkv")
    np.testing.assert_array_equal(state["self_attn.in_proj_weight"].numpy(), np.concatenate([q, k, v]))
    assert state["linear1.weight"].numpy() is not None and np.shares_memory(
        state["linear1.weight"].numpy(), layer.ff.linear1.weight.detach().numpy())  # unpacked entries: the parameter
    other = nn.TransformerDecoderLayer(8, 2, 16, 0.0)
    other.load_state_dict(state)  # PyTorch's names
    for (name, p), (_, p2) in zip(layer.named_parameters(), other.named_parameters()):
        np.testing.assert_array_equal(p.detach().numpy(), p2.detach().numpy(), err_msg=name)
    ours = {n: p.detach().numpy() + 1 for n, p in layer.named_parameters()}  # this library's names load too
    other.load_state_dict(ours)
    np.testing.assert_array_equal(other.cross_attn.k_proj.bias.detach().numpy(), ours["cross_attn.k_proj.bias"])
    bad = dict(state, **{"self_attn.in_proj_weight": np.zeros((23, 8), np.float32)})
    with pytest.raises(ValueError, match=r"load_state_dict: .*'in_proj_weight' must have 3 \* embed_dim rows"):
        other.load_state_dict(bad)
    mha = nn.MultiheadAttention(8, 2, kdim=5, vdim=3)
    assert list(mha.state_dict()) == ["q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
                                      "out_proj.weight", "out_proj.bias"]
    model = nn.Transformer(8, 2, 1, 1, 16, 0.0)
    assert "encoder.layers.0.self_attn.in_proj_weight" in model.state_dict()
    model.load_state_dict(model.state_dict())


# --- the same values and gradients as PyTorch's modules ------------------------------------------------------


def _to_torch(values):
    return {k: torch.tensor(np.asarray(v)) for k, v in to_torch(values).items()}


def _load(ours, theirs):
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()})  # PyTorch's names


def _compare(ours, theirs, inputs, kwargs):
    """Values, the inputs' gradients and every parameter's gradient, for a random weighting of the output."""
    mine = [leaf(a) for a in inputs]
    yours = [torch.tensor(a, requires_grad=True) for a in inputs]
    tkw = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    out, expected = ours(*mine, **kwargs), theirs(*yours, **tkw)
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), atol=1e-10)
    weight = np.random.default_rng(9).normal(size=out.shape)
    (out * ta.Tensor(weight)).sum().backward()
    (expected * torch.tensor(weight)).sum().backward()
    for m, y in zip(mine, yours):
        np.testing.assert_allclose(m.grad.numpy(), y.grad.numpy(), atol=1e-9)
    grads = _to_torch({n: p.grad.numpy() for n, p in ours.named_parameters()})
    theirs_grads = {n: p.grad for n, p in theirs.named_parameters()}
    assert grads.keys() == theirs_grads.keys()
    for name, g in grads.items():
        np.testing.assert_allclose(g.numpy(), theirs_grads[name].numpy(), atol=1e-9, err_msg=name)


def _mask_cases(b, t, heads, rng):
    blocked = rng.random((t, t)) < 0.3
    np.fill_diagonal(blocked, False)  # every query keeps a key
    pad = np.zeros((b, t), bool)
    pad[-1, t - 2:] = True
    return {
        "none": {},
        "causal": dict(src_mask=np.triu(np.full((t, t), -np.inf), 1), is_causal=True),
        "bool": dict(src_mask=blocked),
        "float_per_head": dict(src_mask=rng.normal(size=(b * heads, t, t))),
        "padding": dict(src_key_padding_mask=pad),
        "causal_and_padding": dict(src_mask=np.triu(np.ones((t, t), bool), 1), src_key_padding_mask=pad),
        "float_and_padding": dict(src_mask=rng.normal(size=(t, t)), src_key_padding_mask=pad),  # one additive mask
    }


@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float_per_head", "padding", "causal_and_padding",
                                  "float_and_padding"])
@pytest.mark.parametrize("batch_first,norm_first,activation", [(False, False, "relu"), (True, True, "gelu"),
                                                               (False, True, "callable")])
@pytest.mark.usefixtures("sdpa_path")
@pytest.mark.torch_parity
@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_encoder_layer_matches_torch(mask, batch_first, norm_first, activation):
    ta.manual_seed(0)
    rng = np.random.default_rng(4)
    ours_act, theirs_act = ((ta.nn.functional.gelu, torch.nn.functional.gelu) if activation == "callable"
                            else (activation, activation))
    kw = dict(batch_first=batch_first, norm_first=norm_first, layer_norm_eps=1e-3)
    ours = nn.TransformerEncoderLayer(8, 2, 16, 0.0, ours_act, dtype=ta.float64, **kw)
    theirs = torch.nn.TransformerEncoderLayer(8, 2, 16, 0.0, theirs_act, dtype=torch.float64, **kw)
    _load(ours, theirs)
    b, t = 3, 5
    x = rng.normal(size=(b, t, 8) if batch_first else (t, b, 8))
    _compare(ours, theirs, [x], _mask_cases(b, t, 2, rng)[mask])


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.usefixtures("sdpa_path")
@pytest.mark.torch_parity
@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_decoder_layer_matches_torch(batch_first):
    ta.manual_seed(0)
    rng = np.random.default_rng(5)
    ours = nn.TransformerDecoderLayer(8, 2, 16, 0.0, batch_first=batch_first, bias=False, dtype=ta.float64)
    theirs = torch.nn.TransformerDecoderLayer(8, 2, 16, 0.0, batch_first=batch_first, bias=False,
                                              dtype=torch.float64)
    _load(ours, theirs)
    b, t, s = 2, 4, 6
    tgt = rng.normal(size=(b, t, 8) if batch_first else (t, b, 8))
    memory = rng.normal(size=(b, s, 8) if batch_first else (s, b, 8))
    memory_pad = np.zeros((b, s), bool)
    memory_pad[0, 4:] = True
    blocked = rng.random((t, s)) < 0.3
    blocked[:, 0] = False
    for kwargs in ({}, dict(tgt_mask=np.triu(np.full((t, t), -np.inf), 1), tgt_is_causal=True,
                            memory_key_padding_mask=memory_pad), dict(memory_mask=blocked)):
        for p in ours.parameters():
            p.grad = None
        theirs.zero_grad(set_to_none=True)
        _compare(ours, theirs, [tgt, memory], kwargs)


@pytest.mark.torch_parity
@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_transformer_matches_torch():
    ta.manual_seed(0)
    rng = np.random.default_rng(6)
    ours = nn.Transformer(8, 2, 2, 2, 16, 0.0, "gelu", dtype=ta.float64)
    theirs = torch.nn.Transformer(8, 2, 2, 2, 16, 0.0, "gelu", dtype=torch.float64)
    _load(ours, theirs)
    src, tgt = rng.normal(size=(6, 2, 8)), rng.normal(size=(4, 2, 8))
    src_pad = np.zeros((2, 6), bool)
    src_pad[1, 5:] = True
    kwargs = dict(tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(4).numpy(),
                  src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad)
    _compare(ours, theirs, [src, tgt], kwargs)
    assert list(ours.state_dict()) == list(theirs.state_dict())  # the same names in the same order
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})  # a PyTorch checkpoint, as it is
    np.testing.assert_array_equal(nn.Transformer.generate_square_subsequent_mask(7).numpy(),
                                  torch.nn.Transformer.generate_square_subsequent_mask(7).numpy())
    with pytest.raises(RuntimeError, match="hint"):
        theirs.encoder.layers[0](torch.tensor(src), is_causal=True)
    with pytest.raises(RuntimeError, match="hint"):
        ours.encoder.layers[0](ta.Tensor(src), is_causal=True)


# A translation model in the idioms of PyTorch's translation tutorial, in this project's own words
# (nn.Transformer, pad_sequence, a float causal mask built by masked_fill, bool padding masks, the encoder and
# decoder called apart for greedy decoding), run by renaming imports.
TRANSLATION = '''
PAD, START, END = 1, 2, 3


class Positions(nn.Module):
    def __init__(self, width, length=64):
        super(Positions, self).__init__()
        rate = torch.exp(- torch.arange(0, width, 2) * math.log(10000) / width)
        where = torch.arange(0, length).reshape(length, 1)
        table = torch.zeros((length, width))
        table[:, 0::2] = torch.sin(where * rate)
        table[:, 1::2] = torch.cos(where * rate)
        self.register_buffer("table", table.unsqueeze(-2))  # (L, 1, E)

    def forward(self, x):  # (T, B, E)
        return x + self.table[:x.size(0), :]


class Translator(nn.Module):
    def __init__(self, depth, width, heads, vocab, hidden):
        super(Translator, self).__init__()
        self.core = nn.Transformer(d_model=width, nhead=heads, num_encoder_layers=depth,
                                   num_decoder_layers=depth, dim_feedforward=hidden, dropout=0.0)
        self.read, self.write = nn.Embedding(vocab, width), nn.Embedding(vocab, width)
        self.positions = Positions(width)
        self.head = nn.Linear(width, vocab)
        self.scale = math.sqrt(width)

    def embed(self, table, tokens):
        return self.positions(table(tokens.long()) * self.scale)

    def forward(self, src, tgt, src_mask, tgt_mask, src_pad, tgt_pad):
        out = self.core(self.embed(self.read, src), self.embed(self.write, tgt), src_mask, tgt_mask, None, src_pad,
                        tgt_pad, src_pad)
        return self.head(out)


def future_mask(n):
    allowed = (torch.triu(torch.ones((n, n))) == 1).transpose(0, 1)  # True on and below the diagonal
    return allowed.float().masked_fill(allowed == 0, float("-inf")).masked_fill(allowed == 1, float(0.0))


def fit(model, batches):
    criterion = torch.nn.CrossEntropyLoss(ignore_index=PAD)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001, betas=(0.9, 0.98), eps=1e-9)
    model.train()
    losses = []
    for batch in batches:
        src = pad_sequence([torch.tensor(s) for s, _ in batch], padding_value=PAD)  # (S, B)
        tgt = pad_sequence([torch.tensor(t) for _, t in batch], padding_value=PAD)  # (T + 1, B)
        given = tgt[:-1, :]
        src_mask = torch.zeros((src.shape[0], src.shape[0])).type(torch.bool)
        logits = model(src, given, src_mask, future_mask(given.shape[0]), (src == PAD).transpose(0, 1),
                       (given == PAD).transpose(0, 1))
        optimizer.zero_grad()
        loss = criterion(logits.reshape(-1, logits.shape[-1]), tgt[1:, :].reshape(-1))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def decode_greedy(model, src, limit):
    model.eval()
    memory = model.core.encoder(model.embed(model.read, src), torch.zeros(src.shape[0], src.shape[0]).type(torch.bool))
    out = torch.ones(1, 1).fill_(START).type(torch.long)
    for _ in range(limit - 1):
        hidden = model.core.decoder(model.embed(model.write, out), memory, future_mask(out.size(0)).type(torch.bool))
        _, best = torch.max(model.head(hidden.transpose(0, 1)[:, -1]), dim=1)
        out = torch.cat([out, torch.ones(1, 1).type_as(src.data).fill_(best.item())], dim=0)
        if best.item() == END:
            break
    return out.flatten().tolist()
'''


@pytest.mark.torch_parity
@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_pytorchs_translation_tutorial_trains_the_same_by_renaming_imports():
    import math

    programs = []
    for lib in (ta, torch):
        namespace = dict(torch=lib, nn=lib.nn, math=math, pad_sequence=lib.nn.utils.rnn.pad_sequence)
        exec(TRANSLATION, namespace)
        programs.append(namespace)
    ours, theirs = programs
    ta.manual_seed(0)
    model = ours["Translator"](2, 16, 2, 12, 32)
    twin = theirs["Translator"](2, 16, 2, 12, 32)
    twin.load_state_dict({k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()})
    rng = np.random.default_rng(8)
    pairs = []
    for _ in range(4):
        batch = []
        for _ in range(4):
            s = [int(v) for v in rng.integers(4, 12, int(rng.integers(2, 6)))]
            batch.append(([2] + s + [3], [2] + s[::-1] + [3]))
        pairs.append(batch)
    np.testing.assert_allclose(ours["fit"](model, pairs), theirs["fit"](twin, pairs), rtol=1e-4)
    src = [[2], [5], [6], [7], [3]]
    assert ours["decode_greedy"](model, ta.tensor(src), 8) == theirs["decode_greedy"](twin, torch.tensor(src), 8)


@pytest.mark.parametrize("batch_first,side", [(False, "right"), (True, "left")])
def test_pad_sequence(batch_first, side):
    pad_sequence = nn.utils.rnn.pad_sequence
    rng = np.random.default_rng(2)
    parts = [rng.normal(size=(n, 2)) for n in (3, 1, 2)]
    leaves = [leaf(p) for p in parts]
    out = pad_sequence(leaves, batch_first=batch_first, padding_value=-1.0, padding_side=side)
    expected = np.full((3, 3, 2), -1.0)  # (B, L, 2)
    for i, p in enumerate(parts):
        expected[i, :len(p)] = p if side == "right" else expected[i, :len(p)]
        if side == "left":
            expected[i, 3 - len(p):] = p
    np.testing.assert_array_equal(out.detach().numpy(), expected if batch_first else expected.transpose(1, 0, 2))
    assert ta.gradcheck(lambda *xs: pad_sequence(list(xs), batch_first, 0.5, side), leaves)
    ints = pad_sequence([ta.tensor([1, 2]), ta.tensor([3])], padding_value=7)
    assert ints.dtype == ta.int64 and ints.tolist() == [[1, 3], [2, 7]]
    with pytest.raises(ValueError, match=r"sequences\[1\] has shape \(2, 3\)"):
        pad_sequence([ta.zeros(2, 2), ta.zeros(2, 3)])
    with pytest.raises(TypeError, match="non-empty list of tensors"):
        pad_sequence([])
    if torch is not None:
        theirs = torch.nn.utils.rnn.pad_sequence([torch.tensor(p) for p in parts], batch_first=batch_first,
                                                 padding_value=-1.0, padding_side=side)
        np.testing.assert_array_equal(out.detach().numpy(), theirs.numpy())


@pytest.mark.torch_parity
@pytest.mark.skipif(torch is None, reason="torch is not installed")
@pytest.mark.usefixtures("sdpa_path")
def test_second_derivatives_match_pytorch():
    """d/dx of |d out / dx . g|^2 through an encoder layer with a padding mask, against PyTorch's math path."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    ta.manual_seed(0)
    ours = nn.TransformerEncoderLayer(8, 2, 16, 0.0, "gelu", dtype=ta.float64)
    theirs = torch.nn.TransformerEncoderLayer(8, 2, 16, 0.0, "gelu", dtype=torch.float64)
    _load(ours, theirs)
    rng = np.random.default_rng(11)
    x, g = rng.normal(size=(4, 2, 8)), rng.normal(size=(4, 2, 8))
    pad = np.array([[False, False, False, True], [False, False, False, False]])
    a = leaf(x)
    (first,) = ta.autograd.grad((ours(a, src_key_padding_mask=pad) * ta.Tensor(g)).sum(), [a], create_graph=True)
    (second,) = ta.autograd.grad((first * first).sum(), [a])
    b = torch.tensor(x, requires_grad=True)
    with sdpa_kernel(SDPBackend.MATH):
        (tfirst,) = torch.autograd.grad((theirs(b, src_key_padding_mask=torch.tensor(pad)) * torch.tensor(g)).sum(),
                                        [b], create_graph=True)
        (tsecond,) = torch.autograd.grad((tfirst * tfirst).sum(), [b])
    np.testing.assert_allclose(first.detach().numpy(), tfirst.detach().numpy(), atol=1e-10)
    np.testing.assert_allclose(second.numpy(), tsecond.numpy(), atol=1e-9)
