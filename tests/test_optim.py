"""Optimizers against their closed-form update rules (and torch.optim when installed)."""

import math

import numpy as np
import pytest

import tinygrad_attn as ta
from tinygrad_attn import optim


def run(opt_cls, grads, **kw):
    """Apply `opt_cls` to one parameter with a fixed sequence of gradients; returns the parameter's history."""
    p = ta.Tensor(np.array([1.0, -2.0]), requires_grad=True)
    opt = opt_cls([p], **kw)
    history = []
    for g in grads:
        p.grad = ta.Tensor(np.array(g))
        opt.step()
        history.append(p.detach().numpy().copy())
    return history


GRADS = [[0.5, -1.0], [0.1, 0.3], [-0.4, 0.2], [0.2, 0.2]]


def test_sgd_plain_momentum_nesterov_weight_decay():
    lr, mu, wd = 0.1, 0.9, 0.01
    for nesterov in (False, True):
        p, buf = np.array([1.0, -2.0]), None
        for got, g in zip(run(optim.SGD, GRADS, lr=lr, momentum=mu, weight_decay=wd, nesterov=nesterov), GRADS):
            d = np.array(g) + wd * p
            buf = d if buf is None else mu * buf + d
            p = p - lr * (d + mu * buf if nesterov else buf)
            np.testing.assert_allclose(got, p, rtol=1e-12)
    plain = run(optim.SGD, GRADS[:1], lr=lr)
    np.testing.assert_allclose(plain[0], np.array([1.0, -2.0]) - lr * np.array(GRADS[0]))


@pytest.mark.parametrize("cls", [optim.Adam, optim.AdamW])
def test_adam_and_adamw_closed_form(cls):
    lr, b1, b2, eps, wd = 0.01, 0.9, 0.999, 1e-8, 0.1
    p, m, v = np.array([1.0, -2.0]), np.zeros(2), np.zeros(2)
    for t, (got, g) in enumerate(zip(run(cls, GRADS, lr=lr, weight_decay=wd), GRADS), start=1):
        g = np.array(g)
        if cls is optim.AdamW:
            p = p * (1 - lr * wd)
        else:
            g = g + wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        np.testing.assert_allclose(got, p, rtol=1e-12)


def test_optimizer_state_round_trip():
    p = ta.Tensor(np.array([1.0, 2.0]), requires_grad=True)
    opt = optim.Adam([p], lr=0.1)
    p.grad = ta.Tensor(np.array([0.3, -0.3]))
    opt.step()
    state = opt.state_dict()
    q = ta.Tensor(p.detach().numpy().copy(), requires_grad=True)
    other = optim.Adam([q], lr=0.5)
    other.load_state_dict(state)
    for opt_, t in ((opt, p), (other, q)):
        t.grad = ta.Tensor(np.array([0.1, 0.2]))
        opt_.step()
    np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())


@pytest.mark.parametrize("key, value, error", [
    ("state.1.step", np.inf, "state.1.step must be a whole number >= 0, got inf"),
    ("state.1.step", -1, "must be a whole number >= 0"),
    ("state.1.step", 2.5, "must be a whole number >= 0"),
    ("state.1.exp_avg", np.array(["a", "b"]), "state.1.exp_avg has dtype <U1, expected numbers"),
    ("group.0.size", "2", "group.0.size has dtype <U1"),
])
def test_optimizer_state_is_checked_before_anything_is_assigned(key, value, error):
    params = [ta.Tensor(np.array([1.0, 2.0]), requires_grad=True) for _ in range(2)]
    opt = optim.Adam(params, lr=0.1)
    for p in params:
        p.grad = ta.Tensor(np.array([0.3, -0.3]))
    opt.step()
    state = optim.flat_state(opt.state_dict())  # the flat form a checkpoint holds, which load_state_dict takes too
    fresh = optim.Adam(params, lr=0.5)
    before = optim.flat_state(fresh.state_dict())
    with pytest.raises((ValueError, TypeError), match=error):
        fresh.load_state_dict({**state, key: np.asarray(value)})
    after = optim.flat_state(fresh.state_dict())
    assert after.keys() == before.keys() and all(np.array_equal(after[k], before[k]) for k in before)


def test_clip_grad_norm():
    a, b = ta.Tensor(np.zeros(2), requires_grad=True), ta.Tensor(np.zeros(1), requires_grad=True)
    a.grad, b.grad = ta.Tensor(np.array([3.0, 0.0])), ta.Tensor(np.array([4.0]))
    assert optim.clip_grad_norm_([a, b], 1.0) == pytest.approx(5.0)
    np.testing.assert_allclose(np.concatenate([a.grad.numpy(), b.grad.numpy()]), [0.6, 0, 0.8], rtol=1e-5)
    assert optim.clip_grad_norm_([a, b], 10.0) == pytest.approx(1.0, rel=1e-5)  # under the limit: untouched
    a.grad = ta.Tensor(np.array([np.inf, 0.0], a.dtype))
    with pytest.raises(RuntimeError, match="total norm of the gradients is inf"):
        optim.clip_grad_norm_([a], 1.0, error_if_nonfinite=True)


def test_schedules():
    s = optim.warmup_cosine(1.0, warmup_steps=10, total_steps=110, min_lr=0.1)
    assert s(0) == pytest.approx(0.1) and s(9) == pytest.approx(1.0)
    assert s(60) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * 0.5)))
    assert s(110) == pytest.approx(0.1) and s(500) == pytest.approx(0.1)
    assert optim.constant(0.3)(1234) == 0.3


def test_errors():
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="lr must be"):
        optim.Adam([ta.Tensor([1.0], requires_grad=True)], lr=-1)


@pytest.mark.torch_parity
@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_matches_torch_optim(name):
    torch = pytest.importorskip("torch")
    kw = {"SGD": dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
          "Adam": dict(lr=0.01, weight_decay=0.1), "AdamW": dict(lr=0.01, weight_decay=0.1)}[name]
    against_torch(torch, name, GRADS, kw)


def against_torch(torch, name, grads, kw):
    """Ours and torch.optim's optimizer `name` step by step from the same parameter; returns torch's (p, opt)."""
    ours = run(getattr(optim, name), grads, **kw)
    p = torch.tensor([1.0, -2.0], dtype=torch.float64, requires_grad=True)
    opt = getattr(torch.optim, name)([p], **kw)
    for got, g in zip(ours, grads):
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
        np.testing.assert_allclose(got, p.detach().numpy(), rtol=1e-10)
    return p, opt


def test_state_dict_has_pytorchs_layout():
    params = [ta.Tensor(np.ones((2, 2)), requires_grad=True), ta.Tensor(np.ones(3), requires_grad=True)]
    opt = optim.AdamW([{"params": params[:1]}, {"params": params[1:], "lr": 0.5}], lr=0.1, weight_decay=0.01)
    for p in params:
        p.grad = ta.Tensor(np.full(p.shape, 0.5))
    opt.step()
    state = opt.state_dict()
    assert sorted(state) == ["param_groups", "state"] and sorted(state["state"]) == [0, 1]
    assert [g["params"] for g in state["param_groups"]] == [[0], [1]]
    assert [g["lr"] for g in state["param_groups"]] == [0.1, 0.5] and state["param_groups"][0]["betas"] == (0.9, 0.999)
    assert int(state["state"][1]["step"]) == 1 and state["state"][0]["exp_avg"].shape == (2, 2)
    state["state"][0]["exp_avg"][...] = 7.0  # a copy: the optimizer's own state is untouched
    assert not np.any(opt.state_dict()["state"][0]["exp_avg"] == 7.0)
    fresh = optim.AdamW([{"params": params[:1]}, {"params": params[1:]}], lr=0.3)
    fresh.load_state_dict(state)
    np.testing.assert_array_equal(fresh.state_dict()["state"][0]["exp_avg"], 7.0)
    assert [g["lr"] for g in fresh.param_groups] == [0.1, 0.5]
    with pytest.raises(TypeError, match='expected {"state"'):
        fresh.load_state_dict({"state": [], "param_groups": []})
    torch = pytest.importorskip("torch")
    tparams = [torch.ones((2, 2), requires_grad=True), torch.ones(3, requires_grad=True)]
    topt = torch.optim.AdamW([{"params": tparams[:1]}, {"params": tparams[1:], "lr": 0.5}], lr=0.1,
                             weight_decay=0.01)
    for p in tparams:
        p.grad = torch.full(p.shape, 0.5)
    topt.step()
    theirs = topt.state_dict()
    assert sorted(theirs) == sorted(opt.state_dict()) and sorted(theirs["state"]) == [0, 1]
    assert sorted(theirs["state"][0]) == sorted(opt.state_dict()["state"][0])
    for ours_group, their_group in zip(opt.state_dict()["param_groups"], theirs["param_groups"]):
        assert set(ours_group) <= set(their_group)
        assert all(ours_group[k] == their_group[k] for k in ours_group)
    np.testing.assert_allclose(opt.state_dict()["state"][0]["exp_avg_sq"], theirs["state"][0]["exp_avg_sq"].numpy())


# --- PyTorch's other options: dampening, maximize, amsgrad, decoupled weight decay, and the run flags ---------

OPTIONS = [
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True, foreach=False)),
    ("SGD", dict(lr=0.1, maximize=True, weight_decay=0.1, differentiable=False)),
    ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.1)),
    ("Adam", dict(lr=0.01, maximize=True, decoupled_weight_decay=True, weight_decay=0.1, foreach=True)),
    ("AdamW", dict(lr=0.01, amsgrad=True, maximize=True, weight_decay=0.1, capturable=False)),
]
AMSGRAD_GRADS = GRADS + [[3.0, -0.01], [0.01, 0.01], [0.02, -0.03]]  # a large gradient, then small ones


def test_amsgrad_and_maximize_closed_form():
    lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-8
    p, m, v, v_max = np.array([1.0, -2.0]), np.zeros(2), np.zeros(2), np.zeros(2)
    history = run(optim.Adam, AMSGRAD_GRADS, lr=lr, amsgrad=True, maximize=True)
    for t, (got, g) in enumerate(zip(history, AMSGRAD_GRADS), start=1):
        g = -np.array(g)
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        v_max = np.maximum(v_max, v)  # the largest v so far: below it after the large gradient
        p = p - lr * (m / (1 - b1**t)) / (np.sqrt(v_max / (1 - b2**t)) + eps)
        np.testing.assert_allclose(got, p, rtol=1e-12)
    p, buf = np.array([1.0, -2.0]), None
    for got, g in zip(run(optim.SGD, GRADS, lr=0.1, momentum=0.9, dampening=0.3), GRADS):
        buf = np.array(g) if buf is None else 0.9 * buf + 0.7 * np.array(g)
        p = p - 0.1 * buf
        np.testing.assert_allclose(got, p, rtol=1e-12)


@pytest.mark.torch_parity
@pytest.mark.parametrize("name, kw", OPTIONS)
def test_options_match_torch_and_state_dicts_move_both_ways(name, kw):
    torch = pytest.importorskip("torch")
    p, theirs = against_torch(torch, name, AMSGRAD_GRADS, kw)
    # PyTorch's state dict (tensors made arrays) loads here and the next steps agree; ours has its keys
    q = ta.Tensor(p.detach().numpy().copy(), requires_grad=True)
    mine = getattr(optim, name)([q], **kw)
    saved = theirs.state_dict()
    mine.load_state_dict({"state": {i: {k: np.asarray(v) for k, v in s.items()} for i, s in saved["state"].items()},
                          "param_groups": saved["param_groups"]})
    mine_groups, their_groups = mine.state_dict()["param_groups"], saved["param_groups"]
    assert [sorted(g) for g in mine_groups] == [sorted(g) for g in their_groups]
    assert all(mine_groups[0][k] == their_groups[0][k] for k in their_groups[0])
    for g in ([0.3, -0.7], [-0.2, 0.1]):
        q.grad, p.grad = ta.Tensor(np.array(g)), torch.tensor(g, dtype=torch.float64)
        mine.step()
        theirs.step()
        np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), rtol=1e-10)
    for key in theirs.state_dict()["state"].get(0, {}):  # none for an SGD without momentum
        assert key in mine.state_dict()["state"][0]


def test_run_flags_and_option_errors():
    p = ta.Tensor(np.ones(2), requires_grad=True)
    with pytest.raises(NotImplementedError, match="differentiable=True"):
        optim.Adam([p], differentiable=True)
    with pytest.raises(RuntimeError, match="`fused` and `foreach` cannot be `True` together"):
        optim.AdamW([p], foreach=True, fused=True)
    with pytest.raises(ValueError, match="Nesterov momentum requires a momentum and zero dampening"):
        optim.SGD([p], lr=0.1, momentum=0.9, dampening=0.1, nesterov=True)
    with pytest.raises(TypeError, match="maximize must be a bool"):
        optim.SGD([p], lr=0.1, maximize="yes")
    with pytest.raises(ValueError, match="dampening must be"):
        optim.SGD([p], lr=0.1, dampening=-1.0)
    with pytest.raises(ValueError, match="decoupled_weight_decay is always True"):
        optim.AdamW([{"params": [p], "decoupled_weight_decay": False}])
    opt = optim.Adam([p], fused=True, amsgrad=True)  # a speed flag: kept in the group, not in checkpoints
    assert opt.param_groups[0]["fused"] is True and "max_exp_avg_sq" in opt.state_dict()["state"][0]
    assert not any(k.endswith(".fused") for k in optim.flat_state(opt.state_dict()))


def test_a_checkpoint_from_before_the_new_options_loads_with_their_defaults():
    p = ta.Tensor(np.ones(2), requires_grad=True)
    p.grad = ta.Tensor(np.full(2, 0.5))
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    opt.step()
    old = {k: v for k, v in optim.flat_state(opt.state_dict()).items() if not k.endswith((".dampening", ".maximize"))}
    fresh = optim.SGD([ta.Tensor(np.ones(2), requires_grad=True)], lr=0.1, momentum=0.9)
    fresh.load_state_dict(old)
    assert fresh.param_groups[0]["dampening"] == 0 and fresh.param_groups[0]["maximize"] is False
    np.testing.assert_array_equal(fresh.state_dict()["state"][0]["momentum_buffer"], 0.5)
    with pytest.raises(KeyError, match="missing keys"):  # an option that always existed is still required
        fresh.load_state_dict({k: v for k, v in old.items() if not k.endswith(".lr")})
