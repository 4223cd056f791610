"""What a port of PyTorch code needs: tied weights counted once, buffers, ModuleDict, apply, to, nn.init,
parameter groups, schedulers, label smoothing. Closed forms here; PyTorch itself when installed."""

import math

import numpy as np
import pytest

import tinygrad_attn as ta
from tinygrad_attn import functional as F
from tinygrad_attn import nn, optim


class Tied(nn.Module):
    def __init__(self, vocab=7, dim=4):
        self.wte = nn.Embedding(vocab, dim)
        self.ln = nn.LayerNorm(dim, bias=False)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying, nanoGPT's way
        self.register_buffer("mask", np.tril(np.ones((3, 3), bool)), persistent=False)
        self.register_buffer("scale", np.ones(dim, np.float32))

    def forward(self, idx):
        return self.lm_head(self.ln(self.wte(idx)) * self.scale)


def test_tied_weight_is_listed_once_and_saved_under_both_names():
    model = Tied()
    names = [n for n, _ in model.named_parameters()]
    assert names == ["wte.weight", "ln.weight"]  # lm_head.weight is the same object: first name wins
    assert model.num_parameters() == 7 * 4 + 4
    state = model.state_dict()
    assert {"wte.weight", "lm_head.weight", "ln.weight", "scale"} == set(state)  # the mask is not persistent
    state["wte.weight"] = state["wte.weight"] + 1
    state["lm_head.weight"] = state["wte.weight"]
    model.load_state_dict(state)
    assert model.wte.weight is model.lm_head.weight
    np.testing.assert_array_equal(model.lm_head.weight.detach().numpy(), state["wte.weight"])
    assert model.ln.bias is None and [b.shape for b in model.buffers()] == [(3, 3), (4,)]


def test_tied_weight_is_updated_and_clipped_once():
    model = Tied()
    before = model.lm_head.weight.detach().numpy().copy()
    logits = model(np.array([[1, 2, 3]]))
    F.cross_entropy(logits.reshape(-1, logits.shape[-1]), np.array([2, 3, 4])).backward()
    grad = model.lm_head.weight.grad.numpy().copy()
    norm = optim.clip_grad_norm_([p for _, p in model._named_members()], 1e9)  # the tied weight listed twice
    total = math.sqrt(sum(float((p.grad.numpy() ** 2).sum()) for p in model.parameters()))
    assert math.isclose(norm, total, rel_tol=1e-6)
    opt = optim.SGD(model.parameters(), lr=0.1)
    opt.step()
    np.testing.assert_allclose(model.lm_head.weight.detach().numpy(), before - 0.1 * grad, rtol=1e-6)


def test_load_state_dict_validates_everything_before_assigning():
    model = Tied()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    bad = dict(before)
    bad["wte.weight"] = before["wte.weight"] + 1
    bad["scale"] = np.ones(5)  # wrong shape, checked after wte.weight in order
    with pytest.raises(ValueError, match=r"'scale' has shape \(5,\)"):
        model.load_state_dict(bad)
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[key])
    with pytest.raises(ValueError, match="complex"):
        model.load_state_dict({**before, "scale": before["scale"].numpy() + 0j})


def test_module_dict_apply_named_modules_to_and_zero_grad():
    blocks = nn.ModuleDict({"a": nn.Linear(2, 3), "b": nn.LayerNorm(3)})
    assert list(blocks) == ["a", "b"] and "a" in blocks and len(blocks) == 2
    assert [n for n, _ in blocks.named_parameters()] == ["a.weight", "a.bias", "b.weight", "b.bias"]
    with pytest.raises(KeyError, match="no module 'c'"):
        blocks["c"]
    seen = []
    blocks.apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Linear", "LayerNorm", "ModuleDict"]
    assert [n for n, _ in blocks.named_modules()] == ["", "a", "b"]
    blocks.apply(lambda m: nn.init.zeros_(m.bias) if isinstance(m, nn.Linear) else None)
    assert np.all(blocks["a"].bias.detach().numpy() == 0)
    assert blocks.to("cpu") is blocks and blocks.to(np.float64)["a"].weight.dtype == np.float64
    with pytest.raises(RuntimeError, match="CPU only"):
        blocks.to("cuda")
    out = blocks["b"](blocks["a"](ta.ones(1, 2, dtype=np.float64)))
    out.sum().backward()
    blocks.zero_grad(set_to_none=False)
    assert np.all(blocks["a"].weight.grad.numpy() == 0)
    blocks.zero_grad()
    assert blocks["a"].weight.grad is None


def test_init_functions_draw_from_the_seeded_generator_with_pytorch_bounds():
    w = nn.Parameter(np.zeros((300, 200), np.float32))
    ta.manual_seed(1)
    nn.init.xavier_uniform_(w)
    bound = math.sqrt(6 / 500)
    assert np.abs(w.detach().numpy()).max() <= bound and np.abs(w.detach().numpy()).max() > 0.95 * bound
    first = w.detach().numpy().copy()
    ta.manual_seed(1)
    np.testing.assert_array_equal(nn.init.xavier_uniform_(w).detach().numpy(), first)
    nn.init.xavier_normal_(w)
    assert abs(w.detach().numpy().std() - math.sqrt(2 / 500)) < 0.002
    nn.init.kaiming_uniform_(w, a=math.sqrt(5))  # nn.Linear's default
    assert np.abs(w.detach().numpy()).max() <= 1 / math.sqrt(200) + 1e-7
    nn.init.trunc_normal_(w, std=0.02, a=-0.04, b=0.04)
    assert np.abs(w.detach().numpy()).max() <= 0.04 and abs(w.detach().numpy().std() - 0.0176) < 0.001
    nn.init.normal_(w, 1.0, 0.5)
    assert abs(w.detach().numpy().mean() - 1) < 0.01
    nn.init.constant_(w, 3.0)
    nn.init.uniform_(w, -1, 1)
    assert w.detach().numpy().min() >= -1 and w.detach().numpy().max() < 1
    assert np.all(nn.init.ones_(nn.Parameter(np.zeros(3))).detach().numpy() == 1)
    with pytest.raises(ValueError, match="at least 2 dims"):
        nn.init.xavier_uniform_(nn.Parameter(np.zeros(3)))


def test_param_groups_have_their_own_options_and_round_trip():
    a, b = ta.tensor([1.0, 2.0], requires_grad=True), ta.tensor([3.0], requires_grad=True)
    opt = optim.AdamW([{"params": [a], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0, "lr": 0.5}], lr=0.01)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0] and opt.param_groups[1]["lr"] == 0.5
    a.grad, b.grad = ta.tensor([0.1, -0.2]), ta.tensor([0.3])
    opt.step()
    np.testing.assert_allclose(b.detach().numpy(), [3.0 - 0.5], rtol=1e-6)  # Adam's first step moves by lr * sign(g)
    np.testing.assert_allclose(a.detach().numpy(), np.array([1.0, 2.0]) * (1 - 0.01 * 0.1) - 0.01 * np.array([1, -1]),
                               rtol=1e-5)
    opt.param_groups[0]["lr"] = 0.02
    saved = opt.state_dict()
    other = optim.AdamW([{"params": [ta.tensor([0.0, 0.0], requires_grad=True)], "weight_decay": 0.1},
                         {"params": [ta.tensor([0.0], requires_grad=True)]}], lr=0.01)
    other.load_state_dict(saved)
    assert other.param_groups[0]["lr"] == 0.02 and other.param_groups[1]["lr"] == 0.5
    np.testing.assert_array_equal(other.state_dict()["state"][0]["exp_avg"], saved["state"][0]["exp_avg"])
    with pytest.raises(ValueError, match="more than one group"):
        optim.SGD([{"params": [a]}, {"params": [a]}], lr=0.1)
    with pytest.raises(ValueError, match="unknown option"):
        optim.SGD([{"params": [a], "betas": (0.9, 0.99)}], lr=0.1)


@pytest.mark.parametrize("bad, message", [
    (dict(lr=float("nan")), "lr must be a finite number"), (dict(lr=-1.0), "lr must be"),
    (dict(betas=(0.9, 1.0)), r"betas\[1\] must be a finite number in \[0.0, 1.0\)"),
    (dict(eps=-1e-8), "eps must be"), (dict(weight_decay=-0.1), "weight_decay must be"),
    (dict(lr="0.1"), "lr must be a number"),
])
def test_optimizer_options_pytorch_rejects_are_rejected(bad, message):
    with pytest.raises((ValueError, TypeError), match=message):
        optim.Adam([ta.tensor([1.0], requires_grad=True)], **bad)


def test_optimizer_params_errors():
    with pytest.raises(TypeError, match="got a Tensor"):
        optim.SGD(ta.tensor([1.0], requires_grad=True), lr=0.1)
    with pytest.raises(TypeError, match="pass model.parameters"):
        optim.SGD(nn.Linear(2, 2), lr=0.1)
    with pytest.raises(TypeError, match="NoneType"):
        optim.Adam([None])
    with pytest.raises(ValueError, match="momentum must be"):
        optim.SGD([ta.tensor([1.0], requires_grad=True)], lr=0.1, momentum=-0.5)


def test_schedulers_follow_pytorch_closed_forms():
    p = ta.tensor([1.0], requires_grad=True)
    opt = optim.SGD([p], lr=0.1)
    sched = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10, eta_min=0.01)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(10):
        opt.step()
        sched.step()
        lrs.append(sched.get_last_lr()[0])
    want = [0.01 + 0.09 * (1 + math.cos(math.pi * t / 10)) / 2 for t in range(11)]
    np.testing.assert_allclose(lrs, want)
    opt2 = optim.SGD([ta.tensor([1.0], requires_grad=True)], lr=0.2)
    warm = optim.lr_scheduler.LambdaLR(opt2, lambda step: min(1.0, (step + 1) / 4))
    seen = []
    for _ in range(5):
        seen.append(opt2.lr)
        warm.step()
    np.testing.assert_allclose(seen, [0.05, 0.1, 0.15, 0.2, 0.2])


def test_label_smoothing_closed_form_and_gradcheck():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 4))
    t = np.array([0, 3, -100, 1, 2])
    got = F.cross_entropy(ta.Tensor(x), t, label_smoothing=0.2, reduction="none").numpy()
    logp = x - np.log(np.exp(x).sum(-1, keepdims=True))
    keep = t != -100
    want = np.where(keep, 0.8 * -logp[np.arange(5), np.where(keep, t, 0)] + 0.2 * -logp.mean(-1), 0)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert ta.gradcheck(lambda z: F.cross_entropy(z, t, label_smoothing=0.2), [ta.Tensor(x, requires_grad=True)])
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(ta.Tensor(x), t, label_smoothing=1.5)


@pytest.mark.torch_parity
def test_tied_model_trains_like_pytorch():
    """The same tied model, weights, batches, AdamW with decay on 2-D weights only, clipping and a cosine
    schedule, in both frameworks: the losses agree step after step."""
    torch = pytest.importorskip("torch")
    ta.manual_seed(0)
    ours = Tied()
    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, 7, (2, 3)), rng.integers(0, 7, (2, 3))) for _ in range(6)]

    class TorchTied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = torch.nn.Embedding(7, 4)
            self.ln = torch.nn.LayerNorm(4, bias=False)
            self.lm_head = torch.nn.Linear(4, 7, bias=False)
            self.wte.weight = self.lm_head.weight
            self.register_buffer("scale", torch.ones(4))

        def forward(self, idx):
            return self.lm_head(self.ln(self.wte(idx)) * self.scale)

    theirs = TorchTied()
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()})
    groups = lambda named: [{"params": [p for _, p in named if p.ndim >= 2], "weight_decay": 0.1},  # noqa: E731
                            {"params": [p for _, p in named if p.ndim < 2], "weight_decay": 0.0}]
    opt = optim.AdamW(groups(list(ours.named_parameters())), lr=0.05, betas=(0.9, 0.95))
    topt = torch.optim.AdamW(groups(list(theirs.named_parameters())), lr=0.05, betas=(0.9, 0.95))
    sched = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=6)
    tsched = torch.optim.lr_scheduler.CosineAnnealingLR(topt, T_max=6)
    for x, y in batches:
        loss = F.cross_entropy(ours(x).reshape(-1, 7), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        norm = optim.clip_grad_norm_(ours.parameters(), 0.5)
        opt.step()
        sched.step()
        tloss = torch.nn.functional.cross_entropy(theirs(torch.tensor(x)).reshape(-1, 7), torch.tensor(y).reshape(-1))
        topt.zero_grad()
        tloss.backward()
        tnorm = torch.nn.utils.clip_grad_norm_(theirs.parameters(), 0.5)
        topt.step()
        tsched.step()
        assert math.isclose(float(loss), tloss.item(), rel_tol=1e-5)
        assert math.isclose(norm.item(), float(tnorm), rel_tol=1e-5)
        assert norm.shape == () and str(norm.dtype) == str(tnorm.dtype).split(".")[-1]  # a 0-d tensor, as PyTorch's
    np.testing.assert_allclose(ours.lm_head.weight.detach().numpy(), theirs.lm_head.weight.detach().numpy(), rtol=1e-4,
                               atol=1e-6)


@pytest.mark.torch_parity
def test_sgd_momentum_groups_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    w0, b0 = rng.normal(size=(3, 2)), rng.normal(size=3)
    ours = [ta.tensor(w0, requires_grad=True), ta.tensor(b0, requires_grad=True)]
    theirs = [torch.tensor(w0, requires_grad=True), torch.tensor(b0, requires_grad=True)]
    make = lambda ps, lib: lib.SGD([{"params": [ps[0]], "momentum": 0.9, "nesterov": True},  # noqa: E731
                                    {"params": [ps[1]], "weight_decay": 0.1}], lr=0.05)
    opt, topt = make(ours, optim), make(theirs, torch.optim)
    for _ in range(4):
        grads = [rng.normal(size=w0.shape), rng.normal(size=b0.shape)]
        for p, tp, g in zip(ours, theirs, grads):
            p.grad, tp.grad = ta.tensor(g), torch.tensor(g)
        opt.step()
        topt.step()
    for p, tp in zip(ours, theirs):
        np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=1e-12)


def test_parameter_list_and_dict_name_and_train_their_parameters():
    class Biases(nn.Module):
        def __init__(self, lib):
            super().__init__()
            self.bs = lib.nn.ParameterList([lib.nn.Parameter(lib.ones(2) * i) for i in range(3)])
            self.bs.append(lib.nn.Parameter(lib.zeros(2)))
            self.d = lib.nn.ParameterDict({"scale": lib.nn.Parameter(lib.ones(1) * 2)})

        def forward(self, x):
            return (x + self.bs[1] + self.bs[-1]) * self.d["scale"] + sum(b.sum() for b in self.bs)

    Biases.__bases__ = (ta.nn.Module,)
    model = Biases(ta)
    assert [n for n, _ in model.named_parameters()] == ["bs.0", "bs.1", "bs.2", "bs.3", "d.scale"]
    assert len(model.bs) == 4 and "scale" in model.d and list(model.d.keys()) == ["scale"]
    model(ta.ones(2)).sum().backward()
    np.testing.assert_allclose(model.d["scale"].grad.numpy(), [2 * (1 + 1 + 0)])
    np.testing.assert_allclose(model.bs[1].grad.numpy(), [4.0, 4.0])  # 2 (scale) + 2 (the sum, added to both outputs)
    with pytest.raises(TypeError, match="must be a Parameter or a tensor"):
        model.bs.append(3.0)
    model.load_state_dict({k: v.numpy() + 1 for k, v in model.state_dict().items()})
    np.testing.assert_allclose(model.d["scale"].detach().numpy(), [3.0])
    torch = pytest.importorskip("torch")
    Biases.__bases__ = (torch.nn.Module,)
    assert [n for n, _ in Biases(torch).named_parameters()] == ["bs.0", "bs.1", "bs.2", "bs.3", "d.scale"]


def _twins(source, torch, name, *args):
    """`source` run under this library and under PyTorch (the same text), and its model `name`(*args) built in
    each, PyTorch's loaded with ours's weights: (our namespace, PyTorch's, our model, PyTorch's)."""
    spaces = []
    for lib in (ta, torch):
        namespace = dict(torch=lib, nn=lib.nn, F=lib.nn.functional, math=math)
        exec(source, namespace)
        spaces.append(namespace)
    ta.manual_seed(0)
    ours, theirs = spaces[0][name](*args), spaces[1][name](*args)
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()})
    return spaces[0], spaces[1], ours, theirs


# A GPT-2-style block in the idioms of model libraries, in this project's own words ((in, out) weights through
# addmm, finfo's minimum as the mask value, a bool causal buffer through torch.where, size()[:-1] + (n,)
# shapes, split / permute / view), run by renaming imports, against PyTorch from the same weights.
GPT2_BLOCK = '''
class FlatProjection(nn.Module):  # a (in, out) weight applied through addmm, as some model libraries store it
    def __init__(self, width_out, width_in):
        super().__init__()
        self.width_out = width_out
        self.weight = nn.Parameter(torch.empty(width_in, width_out))
        self.bias = nn.Parameter(torch.zeros(width_out))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        shape = x.size()[:-1] + (self.width_out,)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(shape)


class TanhGelu(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class CausalAttention(nn.Module):
    def __init__(self, width, heads, longest=16):
        super().__init__()
        lower = torch.tril(torch.ones((longest, longest), dtype=torch.bool))
        self.register_buffer("visible", lower.view(1, 1, longest, longest), persistent=False)
        self.width, self.heads, self.size = width, heads, width // heads
        self.packed = FlatProjection(3 * width, width)
        self.mix = FlatProjection(width, width)

    def heads_apart(self, x):  # (B, T, E) -> (B, H, T, d)
        return x.view(x.size()[:-1] + (self.heads, self.size)).permute(0, 2, 1, 3)

    def forward(self, x, extra=None):
        q, k, v = (self.heads_apart(t) for t in self.packed(x).split(self.width, dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2))
        scores = scores / torch.full([], v.size(-1) ** 0.5, dtype=scores.dtype, device=scores.device)
        tq, tk = q.size(-2), k.size(-2)
        lowest = torch.full([], torch.finfo(scores.dtype).min, dtype=scores.dtype, device=scores.device)
        scores = torch.where(self.visible[:, :, tk - tq : tk, :tk], scores.to(scores.dtype), lowest)
        if extra is not None:
            scores = scores + extra
        weights = nn.functional.softmax(scores, dim=-1).type(v.dtype)
        merged = torch.matmul(weights, v).permute(0, 2, 1, 3).contiguous()
        return self.mix(merged.view(merged.size()[:-2] + (self.width,)))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.before_attention = nn.LayerNorm(width, eps=1e-5)
        self.attention = CausalAttention(width, heads)
        self.before_mlp = nn.LayerNorm(width, eps=1e-5)
        self.grow, self.act = FlatProjection(4 * width, width), TanhGelu()
        self.shrink = FlatProjection(width, 4 * width)

    def forward(self, x, extra=None):
        x = x + self.attention(self.before_attention(x), extra)
        return x + self.shrink(self.act(self.grow(self.before_mlp(x))))


def additive_padding(keep, dtype):  # (B, S) of 1 / 0 -> (B, 1, 1, S) of 0 / the dtype's lowest
    return (1.0 - keep[:, None, None, :].to(dtype=dtype)) * torch.finfo(dtype).min
'''


@pytest.mark.torch_parity
def test_a_library_style_gpt2_block_matches_pytorch():
    torch = pytest.importorskip("torch")
    mine, yours, ours, theirs = _twins(GPT2_BLOCK, torch, "Block", 16, 4)
    x = np.random.default_rng(0).normal(size=(2, 6, 16)).astype(np.float32)
    keep = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    a, b = ta.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    with np.errstate(over="ignore"):  # finfo.min + finfo.min is -inf, as PyTorch's (which does not warn)
        out = ours(a, mine["additive_padding"](ta.tensor(keep), ta.float32))
    expected = theirs(b, yours["additive_padding"](torch.tensor(keep), torch.float32))
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-6)
    g = np.random.default_rng(1).normal(size=x.shape).astype(np.float32)
    out.backward(g)
    expected.backward(torch.tensor(g))
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-6)
    for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


# A vision-transformer in the idioms of image-model libraries, in this project's own words (q, k, v unbound from
# one permuted projection, scaled_dot_product_attention, a learned per-channel scale, per-sample branch dropping
# drawn with bernoulli_, a summary token), run by renaming imports, against PyTorch from the same weights; then
# trained a few steps with the dropping on.
VIT_BLOCKS = '''
def skip_sample(x, rate, training):  # keep each sample's branch with probability 1 - rate, rescaled
    if rate == 0.0 or not training:
        return x
    keep = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(1 - rate)
    return x * keep.div_(1 - rate)


class Skip(nn.Module):
    def __init__(self, rate=0.0):
        super().__init__()
        self.rate = rate

    def forward(self, x):
        return skip_sample(x, self.rate, self.training)


class Scale(nn.Module):
    def __init__(self, width, start=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(start * torch.ones(width))

    def forward(self, x):
        return x * self.gamma


class FusedAttention(nn.Module):
    def __init__(self, width, heads, normed=True):
        super().__init__()
        self.heads, self.size = heads, width // heads
        self.qkv = nn.Linear(width, 3 * width, bias=True)
        self.q_norm = nn.LayerNorm(self.size) if normed else nn.Identity()
        self.k_norm = nn.LayerNorm(self.size) if normed else nn.Identity()
        self.drop = nn.Dropout(0.0)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, self.size).permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(self.q_norm(q), self.k_norm(k), v,
                                             dropout_p=self.drop.p if self.training else 0.0)
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, width, heads, rate=0.1):
        super().__init__()
        self.pre_attention, self.pre_mlp = nn.LayerNorm(width, eps=1e-6), nn.LayerNorm(width, eps=1e-6)
        self.attention, self.scale1, self.skip1 = FusedAttention(width, heads), Scale(width, 0.1), Skip(rate)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"), nn.Linear(4 * width, width))
        self.scale2, self.skip2 = Scale(width, 0.1), Skip(rate)

    def forward(self, x):
        x = x + self.skip1(self.scale1(self.attention(self.pre_attention(x))))
        return x + self.skip2(self.scale2(self.mlp(self.pre_mlp(x))))


class Tiny(nn.Module):
    def __init__(self, width=16, depth=2, heads=4, patches=7, classes=5):
        super().__init__()
        self.summary = nn.Parameter(torch.zeros(1, 1, width))
        self.where = nn.Parameter(torch.zeros(1, patches + 1, width))
        self.blocks = nn.Sequential(*[Block(width, heads) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(width, eps=1e-6), nn.Linear(width, classes)
        nn.init.trunc_normal_(self.where, std=0.02)
        nn.init.normal_(self.summary, std=1e-6)

    def forward(self, patches):  # (B, P, E) -> class scores (B, classes) from the summary token
        x = torch.cat((self.summary.expand(patches.shape[0], -1, -1), patches), dim=1) + self.where
        return self.head(self.norm(self.blocks(x))[:, 0])
'''


@pytest.mark.torch_parity
def test_a_library_style_vision_transformer_matches_pytorch():
    torch = pytest.importorskip("torch")
    _, _, ours, theirs = _twins(VIT_BLOCKS, torch, "Tiny")
    ours.eval()
    theirs.eval()
    x = np.random.default_rng(0).normal(size=(3, 7, 16)).astype(np.float32)
    a, b = ta.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, expected = ours(a), theirs(b)
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-6)
    out.sum().backward()
    expected.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-6)
    for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
    ours.train()  # the branch dropping and its bernoulli_ draws on
    optimizer = ta.optim.AdamW(ours.parameters(), lr=1e-2)
    losses = []
    for _ in range(8):
        loss = ta.nn.functional.cross_entropy(ours(ta.tensor(x)), ta.tensor([0, 1, 2]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    assert losses[-1] < losses[0]


# Sorting parameters into weight-decay groups as small GPT trainers do: named_modules, then each module's own
# named_parameters(recurse=False), matched against the whole model's names.
MINGPT_GROUPS = '''
def groups(model):
    decayed, plain = set(), set()
    for module_name, module in model.named_modules():
        for name, _ in module.named_parameters(recurse=False):
            full = f"{module_name}.{name}" if module_name else name
            if name.endswith("bias") or isinstance(module, (torch.nn.LayerNorm, torch.nn.Embedding)):
                plain.add(full)
            elif isinstance(module, torch.nn.Linear):
                decayed.add(full)
    everything = {name for name, _ in model.named_parameters()}
    assert not decayed & plain and not everything - (decayed | plain)
    return sorted(decayed), sorted(plain)


def model():
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = torch.nn.Embedding(5, 4)
            self.ln = torch.nn.LayerNorm(4)
            self.head = torch.nn.Linear(4, 5, bias=False)
            self.wte.weight = self.head.weight
            self.register_buffer("mask", torch.ones(2))
    return Tied()
'''


def test_weight_decay_groups_and_recurse():
    spaces = []
    libs = [ta]
    try:
        import torch

        libs.append(torch)
    except ImportError:
        pass
    for lib in libs:
        namespace = dict(torch=lib)
        exec(MINGPT_GROUPS, namespace)
        m = namespace["model"]()
        spaces.append((namespace["groups"](m), [n for n, _ in m.named_parameters(remove_duplicate=False)],
                       [n for n, _ in m.ln.named_parameters(prefix="ln", recurse=False)],
                       len(m.parameters(recurse=False) if lib is ta else list(m.parameters(recurse=False))),
                       [n for n, _ in m.named_buffers(recurse=False)]))
    ours = spaces[0]
    assert ours[0] == (["head.weight"], ["ln.bias", "ln.weight", "wte.weight"])
    assert ours[1] == ["wte.weight", "ln.weight", "ln.bias", "head.weight"]  # the tied weight under both names
    assert ours[2] == ["ln.weight", "ln.bias"] and ours[3] == 0 and ours[4] == ["mask"]
    if len(spaces) == 2:
        assert ours == spaces[1]


# A Llama-style decoder layer in the idioms of model libraries, in this project's own words (rotary angles under
# autocast(enabled=False) and a half-turn rotation, kv heads shared through expand, RMS norm in float32, a float
# causal mask built with in-place products, expand, clone and a masked slice assignment, left padding), against
# PyTorch from the same weights.
LLAMA_LAYER = '''
class RootMeanSquareNorm(nn.Module):
    def __init__(self, width, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(width)), eps

    def forward(self, x):
        given = x.dtype
        x = x.to(torch.float32)
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)).to(given)


class Angles(nn.Module):
    def __init__(self, size, base=10000):
        super().__init__()
        rates = 1.0 / (base ** (torch.arange(0, size, 2, dtype=torch.int64).float() / size))
        self.register_buffer("rates", rates, persistent=False)

    @torch.no_grad()
    def forward(self, like, positions):  # -> cos, sin (B, T, size)
        rates = self.rates[None, :, None].float().expand(positions.shape[0], -1, 1)
        with torch.autocast(device_type="cpu", enabled=False):
            turns = (rates.float() @ positions[:, None, :].float()).transpose(1, 2)
            both = torch.cat((turns, turns), dim=-1)
            return both.cos().to(dtype=like.dtype), both.sin().to(dtype=like.dtype)


def half_turn(x):
    first, second = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-second, first), dim=-1)


def share_heads(x, times):  # (B, Hkv, T, d) -> (B, Hkv * times, T, d)
    b, kv, t, d = x.shape
    return x if times == 1 else x[:, :, None, :, :].expand(b, kv, times, t, d).reshape(b, kv * times, t, d)


class GroupedAttention(nn.Module):
    def __init__(self, width, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.size = heads, kv_heads, width // heads
        self.q = nn.Linear(width, heads * self.size, bias=False)
        self.k = nn.Linear(width, kv_heads * self.size, bias=False)
        self.v = nn.Linear(width, kv_heads * self.size, bias=False)
        self.o = nn.Linear(width, width, bias=False)
        self.angles = Angles(self.size)

    def forward(self, x, mask, positions):
        b, t, _ = x.size()
        q = self.q(x).view(b, t, self.heads, self.size).transpose(1, 2)
        k = self.k(x).view(b, t, self.kv_heads, self.size).transpose(1, 2)
        v = self.v(x).view(b, t, self.kv_heads, self.size).transpose(1, 2)
        cos, sin = (c.unsqueeze(1) for c in self.angles(v, positions))
        q, k = q * cos + half_turn(q) * sin, k * cos + half_turn(k) * sin
        times = self.heads // self.kv_heads
        k, v = share_heads(k, times).contiguous(), share_heads(v, times).contiguous()
        mask = None if mask is None else mask[:, :, :, : k.shape[-2]]
        out = torch.nn.functional.scaled_dot_product_attention(q.contiguous(), k, v, attn_mask=mask, dropout_p=0.0,
                                                               is_causal=mask is None and t > 1)
        return self.o(out.transpose(1, 2).contiguous().view(b, t, -1))


def build_mask(keep, like, steps):  # (B, S) 1 / 0 -> (B, 1, T, S) additive: the future and padding at the lowest
    lowest = torch.finfo(like.dtype).min
    t, s = like.shape[1], keep.shape[-1]
    mask = torch.full((t, s), fill_value=lowest, dtype=like.dtype)
    if t != 1:
        mask = torch.triu(mask, diagonal=1)
    mask *= torch.arange(s) > steps.reshape(-1, 1)
    mask = mask[None, None, :, :].expand(like.shape[0], 1, -1, -1).clone()
    hidden = (mask[:, :, :, :s] + keep[:, None, None, :]) == 0
    mask[:, :, :, :s] = mask[:, :, :, :s].masked_fill(hidden, lowest)
    return mask


class Layer(nn.Module):
    def __init__(self, width=16, heads=4, kv_heads=2, hidden=24):
        super().__init__()
        self.attention = GroupedAttention(width, heads, kv_heads)
        self.gate, self.up = nn.Linear(width, hidden, bias=False), nn.Linear(width, hidden, bias=False)
        self.down, self.act = nn.Linear(hidden, width, bias=False), nn.SiLU()
        self.norm1, self.norm2 = RootMeanSquareNorm(width), RootMeanSquareNorm(width)

    def forward(self, x, mask, positions):
        h = x + self.attention(self.norm1(x), mask, positions)
        y = self.norm2(h)
        return h + self.down(self.act(self.gate(y)) * self.up(y))
'''


@pytest.mark.torch_parity
def test_a_library_style_llama_layer_with_left_padding_matches_pytorch():
    torch = pytest.importorskip("torch")
    mine, yours, ours, theirs = _twins(LLAMA_LAYER, torch, "Layer")
    x = np.random.default_rng(0).normal(size=(2, 5, 16)).astype(np.float32)
    keep = np.array([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])  # the second sequence padded on the left
    positions = np.array([[0, 1, 2, 3, 4], [0, 0, 0, 1, 2]])
    results = []
    for lib, model, namespace in ((ta, ours, mine), (torch, theirs, yours)):
        given = lib.tensor(x, requires_grad=True)
        with np.errstate(over="ignore"):  # finfo.min + finfo.min is -inf, as PyTorch's (which does not warn)
            mask = namespace["build_mask"](lib.tensor(keep), given, lib.arange(5))
            out = model(given, mask, lib.tensor(positions))
        out.backward(lib.tensor(np.random.default_rng(1).normal(size=out.shape).astype(np.float32)))
        results.append((mask.numpy(), out.detach().numpy(), given.grad.numpy(),
                        [p.grad.numpy() for p in model.parameters()]))
    (mask, out, grad, grads), (tmask, tout, tgrad, tgrads) = results
    np.testing.assert_array_equal(mask, tmask)
    np.testing.assert_allclose(out, tout, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, tgrad, rtol=1e-4, atol=1e-6)
    for g, tg in zip(grads, tgrads):
        np.testing.assert_allclose(g, tg, rtol=1e-4, atol=1e-6)
