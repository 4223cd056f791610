"""The PyTorch names added for ported programs, against PyTorch itself: promotion, reductions with indices,
in-place ops, losses, statistics, pad and one_hot, values and gradients."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tinygrad_attn as ta
import tinygrad_attn.nn.functional as F

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch_parity
TF = torch.nn.functional

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]
SCALARS = [None, True, 3, 2.5, np.int64(2), np.float64(0.5), np.float32(1.5)]


@given(a=st.sampled_from(DTYPES), b=st.sampled_from(DTYPES), a_dims=st.integers(0, 1), b_dims=st.integers(0, 1),
       scalar=st.sampled_from(SCALARS))
def test_result_type_matches_torch(a, b, a_dims, b_dims, scalar):
    x = np.ones((2,) * a_dims, a)
    y = np.ones((2,) * b_dims, b)
    ours = [ta.tensor(x), ta.tensor(y)] + ([] if scalar is None else [scalar])
    theirs = [torch.tensor(x), torch.tensor(y)] + ([] if scalar is None else [scalar])
    want = torch.result_type(theirs[0], theirs[1])
    if scalar is not None:
        want = torch.result_type(torch.zeros((2,) * max(a_dims, b_dims), dtype=want) if max(a_dims, b_dims) else
                                 torch.tensor(0, dtype=want), scalar)
        ours = [ta.zeros((2,) * max(a_dims, b_dims), dtype=ta.dtypes.result_type(ours[0], ours[1])), scalar]
    assert str(ta.dtypes.result_type(*ours)) == str(want).replace("torch.", "")
    if scalar is None and a != "bool" and b != "bool":
        assert str((ta.tensor(x) + ta.tensor(y)).dtype) == str((torch.tensor(x) + torch.tensor(y)).dtype)[6:]
    if scalar is not None and not isinstance(scalar, (bool, np.bool_)) and a != "bool":
        assert str((ta.tensor(x) * scalar).dtype) == str((torch.tensor(x) * scalar).dtype)[6:]


def _compare(ours, theirs, x, grad=True, atol=1e-10):
    a, b = ta.tensor(x, requires_grad=grad), torch.tensor(x, requires_grad=grad)
    out, tout = ours(a), theirs(b)
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), atol=atol, rtol=1e-9)
    if grad:
        g = np.random.default_rng(1).normal(size=out.shape)
        out.backward(g)
        tout.backward(torch.tensor(g))
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), atol=atol, rtol=1e-9)


def test_values_indices_and_statistics_match_torch():
    x = np.random.default_rng(0).normal(size=(3, 5, 4))
    for name in ("max", "min", "median"):
        _compare(lambda t, n=name: getattr(t, n)(1).values, lambda t, n=name: getattr(t, n)(1).values, x)
        assert getattr(ta.tensor(x), name)(2).indices.tolist() == getattr(torch.tensor(x), name)(2).indices.tolist()
    _compare(lambda t: t.sort(1, descending=True).values, lambda t: t.sort(1, descending=True).values, x)
    _compare(lambda t: t.kthvalue(2, -1, keepdim=True).values, lambda t: t.kthvalue(2, -1, keepdim=True).values, x)
    _compare(lambda t: t.topk(2, 1).values, lambda t: t.topk(2, 1).values, x)
    _compare(lambda t: t.std(1) + t.var(-1, keepdim=True).sum(), lambda t: t.std(1) + t.var(-1, keepdim=True).sum(), x)
    _compare(lambda t: t.std(unbiased=False), lambda t: t.std(unbiased=False), x)
    _compare(lambda t: t.var(1, correction=0), lambda t: t.var(1, correction=0), x)
    _compare(lambda t: t.cumsum(1) * t.sin() + t.cos(), lambda t: t.cumsum(1) * t.sin() + t.cos(), x)
    _compare(lambda t: ta.maximum(t, t * 0.5), lambda t: torch.maximum(t, t * 0.5), x)
    _compare(lambda t: F.pad(t, (1, 2, 0, 1), value=0.5), lambda t: TF.pad(t, (1, 2, 0, 1), value=0.5), x)
    idx = np.array([[0, 2, 1], [1, 0, 0]])
    np.testing.assert_array_equal(F.one_hot(ta.tensor(idx), 4).numpy(), TF.one_hot(torch.tensor(idx), 4).numpy())


def test_in_place_ops_match_torch_with_gradients():
    x = np.random.default_rng(2).normal(size=(3, 4))
    src = np.random.default_rng(3).normal(size=(1, 4))
    index = np.array([[0, 1, 2, 0]])
    cases = [
        (lambda t, m: m(t).add_(m(t).detach() * 0 + 2.0, alpha=3)),
        (lambda t, m: m(t).mul_(m(t).detach() * 0 + 1.5).sub_(0.5).div_(2.0)),
        (lambda t, m: m(t).masked_fill_(m(t).detach() > 0, -1.0)),
        (lambda t, m: m(t).clamp_(-0.3, 0.3)),
        (lambda t, m: m(t).index_fill_(1, (ta if isinstance(t, ta.Tensor) else torch).tensor([0, 2]), 7.0)),
    ]
    for case in cases:
        a, b = ta.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        out, tout = case(a, lambda t: t * 1.0), case(b, lambda t: t * 1.0)
        np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy())
        out.sum().backward()
        tout.sum().backward()
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy())
    a, b = ta.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    s, ts = ta.tensor(src, requires_grad=True), torch.tensor(src, requires_grad=True)
    out = (a * 1.0).scatter_(0, ta.tensor(index), s)
    tout = (b * 1.0).scatter_(0, torch.tensor(index), ts)
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy())
    (out * out).sum().backward()
    (tout * tout).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy())
    np.testing.assert_allclose(s.grad.numpy(), ts.grad.numpy())


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses_match_torch(reduction):
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(4, 5)), rng.normal(size=(4, 5))
    t = np.array([1, 0, 4, -100])
    w = rng.uniform(0.5, 2, 5)
    probs = np.exp(rng.normal(size=(4, 5)))
    probs /= probs.sum(1, keepdims=True)
    cases = [
        (lambda a: F.mse_loss(a, ta.tensor(y), reduction),
         lambda a: TF.mse_loss(a, torch.tensor(y), reduction=reduction)),
        (lambda a: F.l1_loss(a, ta.tensor(y), reduction),
         lambda a: TF.l1_loss(a, torch.tensor(y), reduction=reduction)),
        (lambda a: F.nll_loss(F.log_softmax(a, 1), ta.tensor(t), ta.tensor(w), reduction=reduction),
         lambda a: TF.nll_loss(TF.log_softmax(a, 1), torch.tensor(t), torch.tensor(w), reduction=reduction)),
        (lambda a: F.cross_entropy(a, ta.tensor(t), ta.tensor(w), reduction=reduction, label_smoothing=0.1),
         lambda a: TF.cross_entropy(a, torch.tensor(t), torch.tensor(w), reduction=reduction, label_smoothing=0.1)),
        (lambda a: F.cross_entropy(a, ta.tensor(probs), reduction=reduction, label_smoothing=0.2),
         lambda a: TF.cross_entropy(a, torch.tensor(probs), reduction=reduction, label_smoothing=0.2)),
        (lambda a: F.cross_entropy(a.reshape(2, 2, 5).transpose(1, 2), ta.tensor(t.reshape(2, 2)), reduction=reduction),
         lambda a: TF.cross_entropy(a.reshape(2, 2, 5).transpose(1, 2), torch.tensor(t.reshape(2, 2)),
                                    reduction=reduction)),
        (lambda a: F.binary_cross_entropy_with_logits(a, ta.tensor(probs), reduction=reduction,
                                                      pos_weight=ta.tensor(w)),
         lambda a: TF.binary_cross_entropy_with_logits(a, torch.tensor(probs), reduction=reduction,
                                                       pos_weight=torch.tensor(w))),
        (lambda a: F.binary_cross_entropy(a.sigmoid(), ta.tensor(probs), reduction=reduction),
         lambda a: TF.binary_cross_entropy(a.sigmoid(), torch.tensor(probs), reduction=reduction)),
        (lambda a: F.kl_div(F.log_softmax(a, 1), ta.tensor(probs), reduction=reduction),
         lambda a: TF.kl_div(TF.log_softmax(a, 1), torch.tensor(probs), reduction=reduction)),
        (lambda a: F.kl_div(F.log_softmax(a, 1), ta.tensor(np.log(probs)), reduction=reduction, log_target=True),
         lambda a: TF.kl_div(TF.log_softmax(a, 1), torch.tensor(np.log(probs)), reduction=reduction, log_target=True)),
    ]
    for ours, theirs in cases:
        _compare(ours, theirs, x)
    modules = [(ta.nn.CrossEntropyLoss(label_smoothing=0.1), torch.nn.CrossEntropyLoss(label_smoothing=0.1)),
               (ta.nn.KLDivLoss(reduction="batchmean"), torch.nn.KLDivLoss(reduction="batchmean"))]
    for (ours, theirs), target in zip(modules, [t, probs]):
        np.testing.assert_allclose(ours(F.log_softmax(ta.tensor(x), 1), ta.tensor(target)).numpy(),
                                   theirs(TF.log_softmax(torch.tensor(x), 1), torch.tensor(target)).numpy())


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "eq", "ne", "lt", "le", "gt", "ge"])
def test_named_arithmetic_and_comparisons_match_torch(name):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(3, 4)), rng.normal(size=(4,))
    y[1] = x[0, 1]  # one tie for the comparisons
    a, b = ta.tensor(x, requires_grad=True), ta.tensor(y)
    ta_, tb = torch.tensor(x, requires_grad=True), torch.tensor(y)
    kwargs = {"alpha": 2.5} if name in ("add", "sub") else {}
    ours, theirs = getattr(ta, name)(a, b, **kwargs), getattr(torch, name)(ta_, tb, **kwargs)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), atol=1e-12)
    assert np.array_equal(getattr(a, name)(b, **kwargs).detach().numpy(), ours.detach().numpy())
    if ours.dtype.kind == "f":
        ours.sum().backward()
        theirs.sum().backward()
        np.testing.assert_allclose(a.grad.numpy(), ta_.grad.numpy(), atol=1e-12)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("masks", ["none", "bool", "float", "padding", "both", "per_head"])
def test_multihead_attention_has_pytorchs_interface(batch_first, masks):
    rng = np.random.default_rng(1)
    e, h, b, t, s = 8, 2, 3, 4, 5
    ours = ta.nn.MultiheadAttention(e, h, batch_first=batch_first).to(ta.float64)
    theirs = torch.nn.MultiheadAttention(e, h, batch_first=batch_first, dtype=torch.float64)
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()})  # PyTorch's names
    shape_q, shape_kv = ((b, t, e), (b, s, e)) if batch_first else ((t, b, e), (s, b, e))
    q, k, v = rng.normal(size=shape_q), rng.normal(size=shape_kv), rng.normal(size=shape_kv)
    blocked = rng.random((t, s)) > 0.6
    blocked[:, 0] = False
    padding = np.zeros((b, s), bool)
    padding[1, 3:] = True
    kw = {}
    if masks in ("bool", "both"):
        kw["attn_mask"] = blocked
    if masks == "float":
        kw["attn_mask"] = np.where(blocked, -np.inf, rng.normal(size=(t, s)))
    if masks in ("padding", "both"):
        kw["key_padding_mask"] = padding
    if masks == "per_head":
        kw["attn_mask"] = rng.random((b * h, t, s)) > 0.7
        kw["attn_mask"][:, :, 0] = False
    tq, tk, tv = (ta.tensor(a, requires_grad=True) for a in (q, k, v))
    pq, pk, pv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    out, weights = ours(tq, tk, tv, **kw)
    want, want_weights = theirs(pq, pk, pv, **{n: torch.tensor(m) for n, m in kw.items()})
    np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), atol=1e-10)
    np.testing.assert_allclose(weights.detach().numpy(), want_weights.detach().numpy(), atol=1e-10)
    out.sum().backward()
    want.sum().backward()
    for mine, theirs_t in ((tq, pq), (tk, pk), (tv, pv)):
        np.testing.assert_allclose(mine.grad.numpy(), theirs_t.grad.numpy(), atol=1e-10)


def test_multihead_attention_refuses_what_pytorch_refuses():
    mha = ta.nn.MultiheadAttention(4, 2)
    x = ta.zeros(3, 1, 4)
    with pytest.raises(RuntimeError, match="is_causal is a hint"):
        mha(x, x, x, is_causal=True)
    with pytest.raises(ValueError, match="add_bias_kv"):
        ta.nn.MultiheadAttention(4, 2, add_bias_kv=True)
