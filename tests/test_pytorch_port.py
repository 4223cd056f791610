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
    np.testing.assert_array_equal(other.state_dict()["state.0.exp_avg"], saved["state.0.exp_avg"])
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


# A GPT-2 block in the idioms of a widely used model library (Conv1D through addmm, finfo's minimum as the
# mask value, a bool causal buffer through torch.where, size()[:-1] + (n,) shapes, split / permute / view),
# run by renaming imports, against PyTorch from the same weights.
GPT2_BLOCK = '''
class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)
    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)

class NewGELUActivation(nn.Module):
    def forward(self, input):
        inner = math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))
        return 0.5 * input * (1.0 + torch.tanh(inner))

class GPT2Attention(nn.Module):
    def __init__(self, embed_dim, num_heads, max_positions=16):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool)).view(
            1, 1, max_positions, max_positions), persistent=False)
        self.register_buffer("masked_bias", torch.tensor(-1e4), persistent=False)
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.split_size = embed_dim
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)
        self.attn_dropout = nn.Dropout(0.0)
        self.resid_dropout = nn.Dropout(0.0)
    def _attn(self, query, key, value, attention_mask=None):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.full([], value.size(-1) ** 0.5, dtype=attn_weights.dtype,
                                                 device=attn_weights.device)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.full([], mask_value, dtype=attn_weights.dtype, device=attn_weights.device)
        attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = attn_weights.type(value.dtype)
        attn_weights = self.attn_dropout(attn_weights)
        attn_output = torch.matmul(attn_weights, value)
        return attn_output, attn_weights
    def _split_heads(self, tensor, num_heads, attn_head_size):
        new_shape = tensor.size()[:-1] + (num_heads, attn_head_size)
        tensor = tensor.view(new_shape)
        return tensor.permute(0, 2, 1, 3)
    def _merge_heads(self, tensor, num_heads, attn_head_size):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        new_shape = tensor.size()[:-2] + (num_heads * attn_head_size,)
        return tensor.view(new_shape)
    def forward(self, hidden_states, attention_mask=None):
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        query = self._split_heads(query, self.num_heads, self.head_dim)
        key = self._split_heads(key, self.num_heads, self.head_dim)
        value = self._split_heads(value, self.num_heads, self.head_dim)
        attn_output, attn_weights = self._attn(query, key, value, attention_mask)
        attn_output = self._merge_heads(attn_output, self.num_heads, self.head_dim)
        attn_output = self.c_proj(attn_output)
        return self.resid_dropout(attn_output)

class GPT2MLP(nn.Module):
    def __init__(self, intermediate_size, embed_dim):
        super().__init__()
        self.c_fc = Conv1D(intermediate_size, embed_dim)
        self.c_proj = Conv1D(embed_dim, intermediate_size)
        self.act = NewGELUActivation()
        self.dropout = nn.Dropout(0.0)
    def forward(self, hidden_states):
        return self.dropout(self.c_proj(self.act(self.c_fc(hidden_states))))

class GPT2Block(nn.Module):
    def __init__(self, hidden_size, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden_size, eps=1e-5)
        self.attn = GPT2Attention(hidden_size, heads)
        self.ln_2 = nn.LayerNorm(hidden_size, eps=1e-5)
        self.mlp = GPT2MLP(4 * hidden_size, hidden_size)
    def forward(self, hidden_states, attention_mask=None):
        residual = hidden_states
        hidden_states = self.attn(self.ln_1(hidden_states), attention_mask=attention_mask) + residual
        residual = hidden_states
        return residual + self.mlp(self.ln_2(hidden_states))

def extended_mask(attention_mask, dtype):
    extended = attention_mask[:, None, None, :].to(dtype=dtype)
    return (1.0 - extended) * torch.finfo(dtype).min
'''


@pytest.mark.torch_parity
def test_a_library_style_gpt2_block_matches_pytorch():
    torch = pytest.importorskip("torch")
    spaces = []
    for lib in (ta, torch):
        namespace = dict(torch=lib, nn=lib.nn, math=math)
        exec(GPT2_BLOCK, namespace)
        spaces.append(namespace)
    ta.manual_seed(0)
    ours, theirs = spaces[0]["GPT2Block"](16, 4), spaces[1]["GPT2Block"](16, 4)
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()})
    x = np.random.default_rng(0).normal(size=(2, 6, 16)).astype(np.float32)
    keep = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    a, b = ta.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    with np.errstate(over="ignore"):  # finfo.min + finfo.min is -inf, as PyTorch's (which does not warn)
        out = ours(a, spaces[0]["extended_mask"](ta.tensor(keep), ta.float32))
    expected = theirs(b, spaces[1]["extended_mask"](torch.tensor(keep), torch.float32))
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-6)
    g = np.random.default_rng(1).normal(size=x.shape).astype(np.float32)
    out.backward(g)
    expected.backward(torch.tensor(g))
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-6)
    for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


# A vision-transformer block in the idioms of a widely used image-model library (qkv unbound from one
# permuted projection, scaled_dot_product_attention, LayerScale, DropPath drawn with bernoulli_, a class token),
# run by renaming imports, against PyTorch from the same weights; then trained a few steps with DropPath on.
VIT_BLOCKS = '''
def drop_path(x, drop_prob=0.0, training=False, scale_by_keep=True):
    if drop_prob == 0. or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    if keep_prob > 0.0 and scale_by_keep:
        random_tensor.div_(keep_prob)
    return x * random_tensor

class DropPath(nn.Module):
    def __init__(self, drop_prob=0., scale_by_keep=True):
        super(DropPath, self).__init__()
        self.drop_prob = drop_prob
        self.scale_by_keep = scale_by_keep
    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training, self.scale_by_keep)

class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5, inplace=False):
        super().__init__()
        self.inplace = inplace
        self.gamma = nn.Parameter(init_values * torch.ones(dim))
    def forward(self, x):
        return x.mul_(self.gamma) if self.inplace else x * self.gamma

class Attention(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=False, qk_norm=False, attn_drop=0., proj_drop=0.,
                 norm_layer=nn.LayerNorm):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.q_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.k_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        x = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop.p if self.training else 0.)
        x = x.transpose(1, 2).reshape(B, N, C)
        x = self.proj(x)
        return self.proj_drop(x)

class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, act_layer=nn.GELU, drop=0.):
        super().__init__()
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden_features, in_features)
        self.drop2 = nn.Dropout(drop)
    def forward(self, x):
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))

class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4., qkv_bias=True, qk_norm=True, init_values=0.1, drop_path=0.1):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads=num_heads, qkv_bias=qkv_bias, qk_norm=qk_norm)
        self.ls1 = LayerScale(dim, init_values=init_values)
        self.drop_path1 = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=lambda: nn.GELU(approximate="tanh"))
        self.ls2 = LayerScale(dim, init_values=init_values)
        self.drop_path2 = DropPath(drop_path)
    def forward(self, x):
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x))))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))

class Tiny(nn.Module):
    def __init__(self, dim=16, depth=2, heads=4, n=7, classes=5):
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, dim) * .02)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)
        nn.init.trunc_normal_(self.pos_embed, std=.02)
        nn.init.normal_(self.cls_token, std=1e-6)
    def forward(self, x):
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])
'''


@pytest.mark.torch_parity
def test_a_library_style_vision_transformer_matches_pytorch():
    torch = pytest.importorskip("torch")
    spaces = []
    for lib in (ta, torch):
        namespace = dict(torch=lib, nn=lib.nn, F=lib.nn.functional, math=math)
        exec(VIT_BLOCKS, namespace)
        spaces.append(namespace)
    ta.manual_seed(0)
    ours, theirs = spaces[0]["Tiny"](), spaces[1]["Tiny"]()
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()})
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
    ours.train()  # DropPath and its bernoulli_ draws on
    optimizer = ta.optim.AdamW(ours.parameters(), lr=1e-2)
    losses = []
    for _ in range(8):
        loss = ta.nn.functional.cross_entropy(ours(ta.tensor(x)), ta.tensor([0, 1, 2]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    assert losses[-1] < losses[0]


# minGPT's way of sorting parameters into decay / no-decay groups: named_modules, then each module's own
# named_parameters, matched against the whole model's names.
MINGPT_GROUPS = '''
def groups(model):
    decay, no_decay = set(), set()
    whitelist, blacklist = (torch.nn.Linear,), (torch.nn.LayerNorm, torch.nn.Embedding)
    for mn, m in model.named_modules():
        for pn, p in m.named_parameters(recurse=False):
            fpn = "%s.%s" % (mn, pn) if mn else pn
            if pn.endswith("bias"):
                no_decay.add(fpn)
            elif pn.endswith("weight") and isinstance(m, whitelist):
                decay.add(fpn)
            elif pn.endswith("weight") and isinstance(m, blacklist):
                no_decay.add(fpn)
    param_dict = {pn: p for pn, p in model.named_parameters()}
    assert len(decay & no_decay) == 0 and len(param_dict.keys() - (decay | no_decay)) == 0
    return sorted(decay), sorted(no_decay)


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


def test_mingpt_parameter_groups_and_recurse():
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


# A Llama decoder layer in the idioms of a widely used model library (rotate_half rotary embeddings under
# autocast(enabled=False), repeat_kv through expand, RMSNorm in float32, a float causal mask built with in-place
# products, expand, clone and a masked slice assignment, left padding), against PyTorch from the same weights.
LLAMA_LAYER = '''
class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps
    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)

class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        with torch.autocast(device_type="cpu", enabled=False):
            freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos = emb.cos()
            sin = emb.sin()
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)

def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)

def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)

def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)

class LlamaMLP(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)
        self.act_fn = nn.SiLU()
    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))

class LlamaSdpaAttention(nn.Module):
    def __init__(self, hidden, heads, kv_heads):
        super().__init__()
        self.num_heads, self.head_dim, self.num_key_value_heads = heads, hidden // heads, kv_heads
        self.num_key_value_groups = heads // kv_heads
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(self.head_dim)
    def forward(self, hidden_states, attention_mask, position_ids):
        bsz, q_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        kv_shape = (bsz, q_len, self.num_key_value_heads, self.head_dim)
        key_states = self.k_proj(hidden_states).view(kv_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(kv_shape).transpose(1, 2)
        cos, sin = self.rotary_emb(value_states, position_ids)
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)
        causal_mask = attention_mask
        if attention_mask is not None:
            causal_mask = causal_mask[:, :, :, : key_states.shape[-2]]
        query_states = query_states.contiguous()
        key_states = key_states.contiguous()
        value_states = value_states.contiguous()
        attn_output = torch.nn.functional.scaled_dot_product_attention(
            query_states, key_states, value_states, attn_mask=causal_mask, dropout_p=0.0,
            is_causal=causal_mask is None and q_len > 1)
        attn_output = attn_output.transpose(1, 2).contiguous().view(bsz, q_len, -1)
        return self.o_proj(attn_output)

def update_causal_mask(attention_mask, input_tensor, cache_position):
    dtype = input_tensor.dtype
    min_dtype = torch.finfo(dtype).min
    sequence_length = input_tensor.shape[1]
    target_length = attention_mask.shape[-1]
    causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype, dtype=dtype)
    if sequence_length != 1:
        causal_mask = torch.triu(causal_mask, diagonal=1)
    causal_mask *= torch.arange(target_length) > cache_position.reshape(-1, 1)
    causal_mask = causal_mask[None, None, :, :].expand(input_tensor.shape[0], 1, -1, -1)
    causal_mask = causal_mask.clone()
    mask_length = attention_mask.shape[-1]
    padding_mask = causal_mask[:, :, :, :mask_length] + attention_mask[:, None, None, :]
    padding_mask = padding_mask == 0
    causal_mask[:, :, :, :mask_length] = causal_mask[:, :, :, :mask_length].masked_fill(padding_mask, min_dtype)
    return causal_mask

class Layer(nn.Module):
    def __init__(self, hidden=16, heads=4, kv_heads=2, inter=24):
        super().__init__()
        self.self_attn = LlamaSdpaAttention(hidden, heads, kv_heads)
        self.mlp = LlamaMLP(hidden, inter)
        self.input_layernorm = LlamaRMSNorm(hidden)
        self.post_attention_layernorm = LlamaRMSNorm(hidden)
    def forward(self, x, attention_mask, position_ids):
        h = x + self.self_attn(self.input_layernorm(x), attention_mask, position_ids)
        return h + self.mlp(self.post_attention_layernorm(h))
'''


@pytest.mark.torch_parity
def test_a_library_style_llama_layer_with_left_padding_matches_pytorch():
    torch = pytest.importorskip("torch")
    spaces = []
    for lib in (ta, torch):
        namespace = dict(torch=lib, nn=lib.nn, math=math)
        exec(LLAMA_LAYER, namespace)
        spaces.append(namespace)
    ta.manual_seed(0)
    ours, theirs = spaces[0]["Layer"](), spaces[1]["Layer"]()
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()})
    x = np.random.default_rng(0).normal(size=(2, 5, 16)).astype(np.float32)
    keep = np.array([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])  # the second sequence padded on the left
    positions = np.array([[0, 1, 2, 3, 4], [0, 0, 0, 1, 2]])
    results = []
    for lib, model, namespace in ((ta, ours, spaces[0]), (torch, theirs, spaces[1])):
        given = lib.tensor(x, requires_grad=True)
        with np.errstate(over="ignore"):  # finfo.min + finfo.min is -inf, as PyTorch's (which does not warn)
            mask = namespace["update_causal_mask"](lib.tensor(keep), given, lib.arange(5))
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
