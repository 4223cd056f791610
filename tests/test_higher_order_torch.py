"""Second derivatives against PyTorch's (float64): every op's Hessian-vector product and its dependence on the
vector, and Hessian-vector products of a whole attention block and a small transformer's loss, on both
attention paths. Skipped when torch is not installed."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinygrad_attn as ta
import tinygrad_attn.nn.functional as F
from tinygrad_attn.interop import mha_to_torch

torch = pytest.importorskip("torch")
TF = torch.nn.functional
pytestmark = pytest.mark.torch_parity


def second_order(lib, fn, arrays, v, u):
    """(d/dx <d fn/dx . v, u>, d/dv <...>) for fn(x...) weighted by v, in lib (tinygrad_attn or torch)."""
    xs = [lib.tensor(a, requires_grad=True) for a in arrays]
    vt = lib.tensor(v, requires_grad=True)
    out = fn(lib, *xs)
    firsts = lib.autograd.grad(out, xs, vt, create_graph=True, allow_unused=True)
    total = sum((g * lib.tensor(w)).sum() for g, w in zip(firsts, u) if g is not None)
    if not isinstance(total, (ta.Tensor, torch.Tensor)) or not total.requires_grad:
        return [np.zeros_like(a) for a in arrays] + [np.zeros_like(v)]
    seconds = lib.autograd.grad(total, xs + [vt], allow_unused=True)
    return [np.zeros_like(a) if g is None else g.detach().numpy() for g, a in zip(seconds, arrays + [v])]


def F_of(lib):
    return F if lib is ta else TF


OPS = {
    "exp_sin": (lambda m, x: x.exp() * x.sin(), 1, None),
    "tanh_sigmoid": (lambda m, x: x.tanh() * x.sigmoid(), 1, None),
    "log_sqrt": (lambda m, x: (x * x + 1).log() * (x * x + 0.5).sqrt(), 1, None),
    "cos_pow": (lambda m, x: x.cos() * x**3, 1, None),
    "div": (lambda m, a, b: a / (b * b + 1), 2, None),
    "matmul": (lambda m, a, b: (a @ b.transpose(-2, -1)) ** 2, 2, "square"),
    "sum_mean": (lambda m, x: x.sum(-1, keepdim=True) * x.mean(0), 1, None),
    "amax": (lambda m, x: x.amax(-1) * x.sum(), 1, None),
    "softmax": (lambda m, x: F_of(m).softmax(x, -1) * x, 1, None),
    "log_softmax": (lambda m, x: F_of(m).log_softmax(x, 0) ** 2, 1, None),
    "gelu": (lambda m, x: F_of(m).gelu(x) * x, 1, None),
    "gelu_tanh": (lambda m, x: F_of(m).gelu(x, approximate="tanh") ** 2, 1, None),
    "layer_norm": (lambda m, x, w: F_of(m).layer_norm(x, (x.shape[-1],), w[0], w[1]) ** 2, 2, "affine"),
    "rms_norm": (lambda m, x, w: F_of(m).rms_norm(x, (x.shape[-1],), w[0], 1e-3) ** 2, 2, "affine"),
    "relu_abs": (lambda m, x: x.relu() * x.abs() * x, 1, None),
    "getitem_cat": (lambda m, x: m.cat([x[:, :1] ** 2, x[:, 1:] * x[:, :-1]], 1), 1, None),
    "cumsum_where": (lambda m, x: m.where(x > 0, x.cumsum(0) ** 2, x * 3), 1, None),
    "cross_entropy": (lambda m, x: F_of(m).cross_entropy(x * x, m.tensor([1, 0, 2]), label_smoothing=0.1), 1, None),
    "mse_l1": (lambda m, a, b: F_of(m).mse_loss(a, b) + F_of(m).l1_loss(a * a, b), 2, None),
    "bce": (lambda m, a, b: F_of(m).binary_cross_entropy_with_logits(a, b.sigmoid())
            + F_of(m).binary_cross_entropy(a.sigmoid(), b.sigmoid()), 2, None),
    "kl_nll": (lambda m, a, b: F_of(m).kl_div(F_of(m).log_softmax(a, -1), F_of(m).softmax(b, -1), reduction="batchmean")
               + F_of(m).nll_loss(F_of(m).log_softmax(a * b, -1), m.tensor([0, 2, 1])), 2, None),
    "var_std_norm": (lambda m, a: a.var(-1).sum() * a.std(0).sum() + a.norm(), 1, None),
    "topk_sort_max": (lambda m, a: a.topk(2, dim=-1).values ** 2 + a.sort(dim=-1).values[:, :2] * a.max(dim=-1,
                      keepdim=True).values, 1, None),
    "clamp_sqrt_rsqrt": (lambda m, a: (a.clamp(-1.0, 1.0) * (a * a + 1).rsqrt()) ** 2, 1, None),
    "trig_hyperbolic": (lambda m, a: (a * 0.5).tan() * a.asinh() + a.atan() * a.sinh() + (a * 0.5).cosh(), 1, None),
    "expm1_log1p_logsumexp": (lambda m, a: a.expm1() * (a * a).log1p() + a.logsumexp(1, keepdim=True), 1, None),
    "activations": (lambda m, a: F_of(m).silu(a) * F_of(m).softplus(a, 2.0) + F_of(m).elu(a) * F_of(m).mish(a)
                    + F_of(m).logsigmoid(a) * F_of(m).selu(a), 1, None),
    "powers_gather_lerp": (lambda m, a, b: 2.0 ** a * (a * a + 0.5) ** b
                           + a.gather(1, m.tensor([[0, 0, 2, 1]] * 3)) * a.lerp(b, 0.25), 2, None),
    "einsum_prod_cumprod": (lambda m, a, b: m.einsum("ij,kj->ik", a, b) ** 2 * a.prod(1, keepdim=True)
                            + a.cumprod(0)[:, :3].sum() * b.logcumsumexp(1)[:, 1:], 2, None),
    "fmod_copysign_diagonal": (lambda m, a, b: m.fmod(a * 3, b.abs() + 0.7) ** 2 + m.copysign(a, b) * a
                               + m.diagonal(a[:, :3] * b[:, :3], 0).sum(), 2, None),
    "scatter_reduce_pad": (lambda m, a, b: a.scatter_reduce(1, m.tensor([[0, 1, 1, 3]] * 3), b * b, "sum")
                           * a + F_of(m).pad(a.reshape(1, 3, 4), (2, 1), mode="reflect")[0].sum() * a, 2, None),
}


@pytest.mark.parametrize("name", sorted(OPS))
@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**16))
def test_second_derivatives_match_pytorch(name, seed):
    fn, arity, kind = OPS[name]
    rng = np.random.default_rng(seed)
    if kind == "square":
        arrays = [rng.normal(size=(2, 3, 4)), rng.normal(size=(3, 4))]
    elif kind == "affine":
        arrays = [rng.normal(size=(3, 4)), rng.normal(size=(2, 4))]
    else:
        arrays = [rng.normal(size=(3, 4)) for _ in range(arity)]
    out_shape = fn(torch, *(torch.tensor(a) for a in arrays)).shape
    v = rng.normal(size=tuple(out_shape))
    u = [rng.normal(size=a.shape) for a in arrays]
    ours, theirs = second_order(ta, fn, arrays, v, u), second_order(torch, fn, arrays, v, u)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_second_derivatives_match_pytorchs_math_backend(sdpa_path, causal):
    rng = np.random.default_rng(3)
    arrays = [rng.normal(size=(2, 2, 3, 4)) for _ in range(3)]
    v, u = rng.normal(size=(2, 2, 3, 4)), [rng.normal(size=(2, 2, 3, 4)) for _ in range(3)]
    fn = lambda m, q, k, vv: F_of(m).scaled_dot_product_attention(q, k, vv, is_causal=causal)  # noqa: E731
    ours = second_order(ta, fn, arrays, v, u)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        theirs = second_order(torch, fn, arrays, v, u)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)


def _hvp(lib, loss, params, directions):
    ps = [lib.tensor(p, requires_grad=True) for p in params]
    grads = lib.autograd.grad(loss(lib, *ps), ps, create_graph=True)
    dot = sum((g * lib.tensor(d)).sum() for g, d in zip(grads, directions))
    return [h.detach().numpy() for h in lib.autograd.grad(dot, ps)]


def test_hessian_vector_product_of_a_multi_head_attention_block_matches_pytorch(sdpa_path):
    ta.manual_seed(0)
    ours_mha = ta.nn.MultiHeadAttention(8, 2).double()
    theirs_mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).double()
    theirs_mha.load_state_dict({k: torch.tensor(v) for k, v in mha_to_torch(ours_mha.state_dict()).items()})
    rng = np.random.default_rng(5)
    x0, d0 = rng.normal(size=(2, 5, 8)), rng.normal(size=(2, 5, 8))
    causal = np.triu(np.ones((5, 5), bool), 1)  # PyTorch's bool attn_mask: True = blocked

    def ours(t):
        return (ours_mha(t, t, t, is_causal=True, need_weights=False)[0] ** 2).sum()

    def theirs(t):
        return (theirs_mha(t, t, t, attn_mask=torch.tensor(causal), need_weights=False)[0] ** 2).sum()

    x = ta.tensor(x0, requires_grad=True)
    (g,) = ta.autograd.grad(ours(x), x, create_graph=True)
    (h,) = ta.autograd.grad((g * ta.tensor(d0)).sum(), x)
    xt = torch.tensor(x0, requires_grad=True)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        (gt,) = torch.autograd.grad(theirs(xt), xt, create_graph=True)
        (ht,) = torch.autograd.grad((gt * torch.tensor(d0)).sum(), xt)
    np.testing.assert_allclose(h.numpy(), ht.numpy(), rtol=1e-6, atol=1e-8)


def _tiny_transformer_loss(lib, emb, wqkv, wo, w1, w2, ln):
    """Embedding, one pre-norm attention block (causal) and a GELU feed-forward, cross-entropy of the next token."""
    fn = F_of(lib)
    tokens = lib.tensor([[1, 4, 2, 0, 3], [2, 2, 1, 4, 0]])
    x = emb[tokens]  # (B, T, E)
    h = fn.layer_norm(x, (8,), ln[0], ln[1])
    q, k, v = (h @ wqkv.transpose(0, 1)).reshape(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)  # 3 x (B, H, T, d)
    att = fn.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 5, 8)
    x = x + att @ wo
    x = x + fn.gelu(fn.layer_norm(x, (8,)) @ w1) @ w2
    logits = x @ emb.transpose(0, 1)  # tied output layer
    return fn.cross_entropy(logits[:, :-1].reshape(-1, 5), tokens[:, 1:].reshape(-1))


def test_hessian_vector_product_of_a_small_transformers_loss_matches_pytorch(sdpa_path):
    rng = np.random.default_rng(11)
    shapes = [(5, 8), (24, 8), (8, 8), (8, 16), (16, 8), (2, 8)]
    params = [rng.normal(size=s) * 0.5 for s in shapes]
    params[-1][0] += 1.0  # layer norm's weight near 1
    directions = [rng.normal(size=s) for s in shapes]
    ours = _hvp(ta, _tiny_transformer_loss, params, directions)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        theirs = _hvp(torch, _tiny_transformer_loss, params, directions)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)


def _micrograd_style(lib):
    """A scalar graph in micrograd's style: intermediates updated with +=, relu, powers and reciprocals."""
    a = lib.tensor(-4.0, requires_grad=True, dtype=lib.float64)
    b = lib.tensor(2.0, requires_grad=True, dtype=lib.float64)
    c = a + b
    d = a * b + b**3
    c += c + 1
    c += 1 + c + (-a)
    d += d * 2 + (b + a).relu()
    d += 3 * d + (b - a).relu()
    e = c - d
    f = e**2
    g = f / 2.0
    g += 10.0 / f
    g.backward(retain_graph=True)
    (ga, gb) = lib.autograd.grad(g, [a, b], create_graph=True)
    (hab,) = lib.autograd.grad(ga, b)  # a mixed second derivative through the += updates
    return [g.item(), a.grad.item(), b.grad.item(), ga.item(), gb.item(), hab.item()]


def test_micrograd_style_scalar_graphs_match_pytorch():
    np.testing.assert_allclose(_micrograd_style(ta), _micrograd_style(torch), rtol=1e-12)
