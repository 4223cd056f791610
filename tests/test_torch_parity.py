"""Parity with PyTorch (float64), skipped when torch is not installed."""

import numpy as np
import pytest

import tinygrad_attn as ta
from tinygrad_attn import functional as F
from tinygrad_attn import nn
from tinygrad_attn.interop import mha_from_torch, mha_to_torch

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch_parity


@pytest.fixture(autouse=True)
def _float64_default():
    """These comparisons run in float64; PyTorch's default dtype is restored after each test."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def t(a, grad=True):
    return torch.tensor(np.asarray(a), requires_grad=grad)


CASES = {
    "self": dict(kw={}, tk=6, causal=False, padded=False),
    "causal": dict(kw={}, tk=6, causal=True, padded=False),
    "padded_cross": dict(kw={}, tk=9, causal=False, padded=True),
    "kdim_vdim": dict(kw=dict(kdim=5, vdim=7), tk=4, causal=False, padded=True),
    "no_bias": dict(kw=dict(bias=False), tk=6, causal=True, padded=False),
}


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("case", sorted(CASES))
def test_multi_head_attention_matches_torch(case, need_weights):
    c = CASES[case]
    rng = np.random.default_rng(0)
    e, h, b, tq, tk = 8, 2, 3, 6, c["tk"]
    ours = nn.MultiHeadAttention(e, h, **c["kw"]).to(np.float64)
    theirs = torch.nn.MultiheadAttention(e, h, batch_first=True, **c["kw"])
    theirs.load_state_dict({k: torch.tensor(v) for k, v in mha_to_torch(ours.state_dict()).items()})

    q = rng.normal(size=(b, tq, e))
    k = q if tk == tq and not c["kw"] else rng.normal(size=(b, tk, c["kw"].get("kdim", e)))
    v = k if tk == tq and not c["kw"] else rng.normal(size=(b, tk, c["kw"].get("vdim", e)))
    lengths = np.array([tk, 2, tk - 1])
    mask = ta.padding_mask(lengths, tk) if c["padded"] else None
    if c["causal"]:
        causal = ta.causal_mask(tq, tk).numpy()
        mask = causal if mask is None else mask.numpy() & causal

    tq_, tk_, tv_ = t(q), t(k), t(v)
    torch_mask = None if mask is None else torch.tensor(~np.broadcast_to(mask, (b, h, tq, tk)).reshape(b * h, tq, tk))
    t_out, t_w = theirs(tq_, tk_, tv_, attn_mask=torch_mask, need_weights=True, average_attn_weights=False)
    qa, ka, va = (ta.Tensor(a, requires_grad=True) for a in (q, k, v))
    out, w = ours(qa, ka, va, mask=mask, need_weights=need_weights)

    np.testing.assert_allclose(out.detach().numpy(), t_out.detach().numpy(), atol=1e-8, rtol=0)
    if need_weights:
        np.testing.assert_allclose(w.detach().numpy(), t_w.detach().numpy(), atol=1e-8, rtol=0)
    direction = rng.normal(size=out.shape)
    (out * ta.Tensor(direction)).sum().backward()
    (t_out * torch.tensor(direction)).sum().backward()
    for ours_x, theirs_x in ((qa, tq_), (ka, tk_), (va, tv_)):
        np.testing.assert_allclose(ours_x.grad.numpy(), theirs_x.grad.numpy(), atol=1e-8, rtol=0)
    torch_grads = mha_from_torch({n: p.grad for n, p in theirs.named_parameters()})
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), torch_grads[name], atol=1e-8, rtol=0, err_msg=name)


@pytest.mark.parametrize("case", ["self", "causal", "no_bias"])
def test_self_attention_packed_path_matches_torch(case):
    """mha(x) alone takes the packed projection and attention; torch gets x as query, key and value."""
    c = CASES[case]
    rng = np.random.default_rng(1)
    e, h, b, t_ = 8, 2, 3, 6
    ours = nn.MultiHeadAttention(e, h, **c["kw"]).to(np.float64)
    theirs = torch.nn.MultiheadAttention(e, h, batch_first=True, **c["kw"])
    theirs.load_state_dict({k: torch.tensor(v) for k, v in mha_to_torch(ours.state_dict()).items()})
    x = rng.normal(size=(b, t_, e))
    torch_x = t(x)
    torch_mask = torch.tensor(~ta.causal_mask(t_, t_).numpy()) if c["causal"] else None
    t_out, _ = theirs(torch_x, torch_x, torch_x, attn_mask=torch_mask, need_weights=False)
    ours_x = ta.Tensor(x, requires_grad=True)
    out, _ = ours(ours_x, is_causal=c["causal"], need_weights=False)
    np.testing.assert_allclose(out.detach().numpy(), t_out.detach().numpy(), atol=1e-8, rtol=0)
    direction = rng.normal(size=out.shape)
    (out * ta.Tensor(direction)).sum().backward()
    (t_out * torch.tensor(direction)).sum().backward()
    np.testing.assert_allclose(ours_x.grad.numpy(), torch_x.grad.numpy(), atol=1e-8, rtol=0)
    torch_grads = mha_from_torch({n: p.grad for n, p in theirs.named_parameters()})
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), torch_grads[name], atol=1e-8, rtol=0, err_msg=name)


def test_interop_round_trip_and_packed_layout():
    ours = nn.MultiHeadAttention(8, 2)
    theirs = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    converted = mha_from_torch(theirs.state_dict())
    ours.load_state_dict(converted)
    back = mha_to_torch(ours.state_dict())
    assert set(back) == set(theirs.state_dict())
    for name, value in theirs.state_dict().items():
        np.testing.assert_allclose(back[name], value.numpy(), rtol=1e-6)


def test_functional_ops_match_torch():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 5, 6))
    target = rng.integers(0, 6, (4, 5))
    target[0, 0] = -100
    cases = [
        (lambda a: F.softmax(a, 1), lambda a: torch.softmax(a, 1)),
        (lambda a: F.log_softmax(a, -1), lambda a: torch.log_softmax(a, -1)),
        (lambda a: F.gelu(a), lambda a: torch.nn.functional.gelu(a)),
        (lambda a: F.layer_norm(a, 6), lambda a: torch.nn.functional.layer_norm(a, (6,))),
        (lambda a: F.cross_entropy(a.reshape(-1, 6), target.reshape(-1)),
         lambda a: torch.nn.functional.cross_entropy(a.reshape(-1, 6), torch.tensor(target.reshape(-1)))),
        (lambda a: a.amax(dim=1), lambda a: a.amax(dim=1)),
        (lambda a: a.max(dim=1).values, lambda a: a.max(dim=1).values),
        (lambda a: a[:, ::2, np.array([0, 0, 3])], lambda a: a[:, ::2, [0, 0, 3]]),
        (lambda a: (a @ a.transpose(-1, -2)).sigmoid().mean(dim=(0, 2)),
         lambda a: (a @ a.transpose(-1, -2)).sigmoid().mean(dim=(0, 2))),
    ]
    for ours, theirs in cases:
        xa, xt = ta.Tensor(x, requires_grad=True), t(x)
        ya, yt = ours(xa), theirs(xt)
        np.testing.assert_allclose(ya.detach().numpy(), yt.detach().numpy(), atol=1e-10)
        g = rng.normal(size=ya.shape)
        ya.backward(g)
        yt.backward(torch.tensor(g))
        np.testing.assert_allclose(xa.grad.numpy(), xt.grad.numpy(), atol=1e-10)


def test_sdpa_matches_torch_with_bool_and_float_masks():
    rng = np.random.default_rng(2)
    q, k, v = (rng.normal(size=(2, 3, 5, 4)) for _ in range(3))
    keep = rng.random((2, 1, 5, 5)) > 0.3
    keep[..., 0] = True  # torch gives NaN on fully masked rows; we give zeros (tested elsewhere)
    for mask in (keep, np.where(keep, rng.normal(size=keep.shape), -np.inf)):
        for causal in (False, True):
            if causal and mask.dtype == bool:
                expected_mask = torch.tensor(mask & np.tril(np.ones((5, 5), bool)))
            elif causal:
                expected_mask = torch.tensor(np.where(np.tril(np.ones((5, 5), bool)), mask, -np.inf))
            else:
                expected_mask = torch.tensor(mask)
            expected = torch.nn.functional.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=expected_mask)
            out = F.scaled_dot_product_attention(ta.Tensor(q), ta.Tensor(k), ta.Tensor(v), mask=mask, is_causal=causal)
            np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), atol=1e-10)


def test_encoder_block_matches_torch():
    rng = np.random.default_rng(3)
    for norm_first in (False, True):
        ours = nn.EncoderBlock(8, 2, 16, dropout=0.0, norm_first=norm_first).to(np.float64)
        theirs = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=norm_first)
        sd = ours.state_dict()
        mapped = {f"self_attn.{k}": torch.tensor(v) for k, v in
                  mha_to_torch({k[10:]: v for k, v in sd.items() if k.startswith("self_attn.")}).items()}
        for ours_name, theirs_name in [("ff.linear1", "linear1"), ("ff.linear2", "linear2"),
                                       ("norm1", "norm1"), ("norm2", "norm2")]:
            for p in ("weight", "bias"):
                mapped[f"{theirs_name}.{p}"] = torch.tensor(sd[f"{ours_name}.{p}"].numpy())
        theirs.load_state_dict(mapped)
        x = rng.normal(size=(2, 5, 8))
        expected = theirs(t(x, False), src_mask=torch.nn.Transformer.generate_square_subsequent_mask(5),
                          is_causal=True)
        np.testing.assert_allclose(ours(ta.Tensor(x), is_causal=True).detach().numpy(), expected.detach().numpy(),
                                   atol=1e-10)
