"""The explorer page's data: equal to the model's own forward, backward and snapshots, and within its sizes."""

import importlib
import json
import re

import numpy as np
import pytest

import tinygrad_attn as ta
from tinygrad_attn import cli
from tinygrad_attn.explorer import MAX_TOKENS, explore, explore_run, load_snapshots
from tinygrad_attn.explorer.collect import collect
from tinygrad_attn.explorer.snapshots import Snapshots
from tinygrad_attn.runs import TrainConfig, load_checkpoint
from tinygrad_attn.train import train


def small_lm(seed=0, max_len=12):
    ta.manual_seed(seed)
    return ta.nn.CausalLM(11, max_len, d_model=16, nhead=2, num_layers=2, dim_feedforward=32).to(np.float64)


def _loss(model, tokens):
    logits = model(tokens[:, :-1])
    return ta.nn.functional.cross_entropy(logits.reshape(-1, 11), ta.tensor(tokens[:, 1:].reshape(-1)))


def _model_attention(model, tokens):
    """Each layer's P and dP, by the model's own route: return_attention and retain_grad."""
    logits, weights = model(tokens[:, :-1], return_attention=True)
    for w in weights:
        w.retain_grad()
    ta.nn.functional.cross_entropy(logits.reshape(-1, 11), ta.tensor(tokens[:, 1:].reshape(-1))).backward()
    return [(w.detach().numpy()[0], w.grad.detach().numpy()[0]) for w in weights]


def test_maps_equal_the_models_own_weights_and_their_gradients():
    model, tokens = small_lm(), np.array([[1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1]])
    data = collect(model, lambda: _loss(model, tokens))
    want = _model_attention(small_lm(), tokens)
    assert [a["name"] for a in data["attention"]] == ["layers.0.self_attn", "layers.1.self_attn"]
    for panel, (p, d_p) in zip(data["attention"], want):
        np.testing.assert_allclose(np.array(panel["P"], float), p, rtol=1e-3, atol=1e-6)
        np.testing.assert_allclose(np.array(panel["dP"], float), d_p, rtol=1e-3, atol=1e-9)
        d_s = p * (d_p - (p * d_p).sum(-1, keepdims=True))  # the softmax's backward, from P and dP alone
        np.testing.assert_allclose(np.array(panel["dS"], float), d_s, rtol=1e-3, atol=1e-9)
    assert abs(data["loss"] - _loss(small_lm(), tokens).item()) < 1e-3


def test_token_norms_equal_autograd_on_the_heads(monkeypatch):
    """dQ, dK, dV norms from the formulas against autograd through the attention of the recorded heads."""
    model, tokens = small_lm(1), np.array([[3, 1, 4, 1, 5, 9]])
    collect_module = importlib.import_module("tinygrad_attn.explorer.collect")
    kept, original = {}, collect_module.attention_panel

    def keep(call, index, labels, toks):
        panel, exact = original(call, index, labels, toks)
        kept.setdefault("exact", exact)
        return panel, exact

    monkeypatch.setattr(collect_module, "attention_panel", keep)
    data = collect(model, lambda: _loss(model, tokens))
    exact = kept["exact"]
    q, k, v = (ta.tensor(exact[n], requires_grad=True) for n in ("q", "k", "v"))
    out = ta.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    (out * ta.tensor(exact["dO"])).sum().backward()
    first = data["attention"][0]
    for name, t in (("dQ", q), ("dK", k), ("dV", v)):  # atol: dQ of the first token is 0 up to float64 rounding
        np.testing.assert_allclose(np.array(first[name], float), np.linalg.norm(t.grad.numpy(), axis=-1), rtol=2e-3,
                                   atol=1e-12)
    np.testing.assert_allclose(np.array(first["P"], float), exact["P"], rtol=1e-3, atol=1e-6)


def test_the_check_agrees_and_the_input_gradient_is_the_embeddings():
    model, tokens = small_lm(2), np.array([[2, 7, 1, 8, 2, 8]])
    data = collect(model, lambda: _loss(model, tokens))
    assert [r["what"] for r in data["check"]["rows"]] == ["dQ", "dK", "dV"]
    assert all(r["max_abs_err"] < 1e-7 for r in data["check"]["rows"]), data["check"]
    embedded = {}
    model2 = small_lm(2)

    def keep(module, inputs, output):
        output.retain_grad()
        embedded["x"] = output

    handle = model2.embed.register_forward_hook(keep)
    _loss(model2, tokens).backward()
    handle.remove()
    want = np.linalg.norm(embedded["x"].grad.numpy()[0], axis=-1)
    (inputs,) = data["input_grad"]
    assert inputs["name"] == "embed" and inputs["labels"] == ["2", "7", "1", "8", "2"]
    np.testing.assert_allclose(np.array(inputs["norm"], float), want, rtol=1e-3)


def test_a_variant_shows_its_mask_and_the_kernels_skipped_tiles_and_its_check_agrees(monkeypatch):
    """Grouped kv heads, rotary positions and a sliding window of 3: the page's mask is the band, its tiles
    (2 x 2 here) are skipped exactly where no query of the tile sees a key of it, P is the model's own, and
    the formulas still agree with finite differences."""
    from tinygrad_attn.kernels import layout

    monkeypatch.setattr(layout, "MAX_ROWS", 2)
    monkeypatch.setattr(layout, "MAX_KEYS", 2)

    def model():
        ta.manual_seed(4)
        return ta.nn.CausalLM(11, 12, d_model=16, nhead=4, num_layers=1, dim_feedforward=32, n_kv_heads=2, window=3,
                              rotary=True).to(np.float64)

    tokens = np.array([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1]])
    lm = model()
    data = collect(lm, lambda: _loss(lm, tokens))
    (panel,) = data["attention"]
    t = 10
    i, j = np.arange(t)[:, None], np.arange(t)[None, :]
    seen = (j <= i) & (i - j < 3)
    np.testing.assert_array_equal(np.array(panel["seen"], float), seen.astype(float))
    assert panel["window"] == 3 and panel["kv_heads"] == 2 and panel["rotary"]
    for r0, r1, c0, c1, state in panel["tiles"]["rects"]:
        block = seen[r0:r1, c0:c1]
        assert state == (2 if block.all() else 1 if block.any() else 0), (r0, c0, state)
    assert len(panel["tiles"]["rects"]) == 25 and any(r[4] == 0 for r in panel["tiles"]["rects"])
    (p, _), = _model_attention(model(), tokens)
    np.testing.assert_allclose(np.array(panel["P"], float), p, rtol=1e-3, atol=1e-6)
    assert all(r["max_abs_err"] < 1e-7 for r in data["check"]["rows"]), data["check"]


def test_the_graph_shows_both_paths_with_the_models_gradient():
    model, tokens = small_lm(3), np.array([[1, 2, 3, 4]])
    data = collect(model, lambda: _loss(model, tokens))
    math_ops = [n["op"] for n in data["graph"]["math"]["nodes"]]
    flash_ops = [n["op"] for n in data["graph"]["flash"]["nodes"]]
    assert "FlashAttention" in flash_ops and "FlashAttention" not in math_ops
    assert "Softmax" in math_ops and math_ops.count("MatMul") == 2
    assert {"q_proj.weight", "k_proj.weight", "v_proj.weight", "out_proj.weight"} <= set(flash_ops)
    for kernel in ("math", "flash"):
        g = data["graph"][kernel]
        assert all(0 <= a < len(g["nodes"]) and 0 <= b < len(g["nodes"]) for a, b in g["edges"])
        weight = next(n for n in g["nodes"] if n["op"] == "q_proj.weight")
        assert weight["grad"] is not None and weight["grad"]["norm"] > 0
    norms = [next(n for n in data["graph"][k]["nodes"] if n["op"] == "q_proj.weight")["grad"]["norm"]
             for k in ("math", "flash")]
    assert abs(norms[0] - norms[1]) <= 1e-3 * norms[0]  # the two paths give the block the same gradients
    backward = data["graph"]["backward"]  # the math path's backward, recorded as a graph of its own
    ops = [n["op"] for n in backward["nodes"]]
    assert ops.count("MatMul") >= 4 and "Softmax (forward)" in ops and "dO" in ops and "q_proj.weight" in ops
    assert all(0 <= a < len(ops) and 0 <= b < len(ops) for a, b in backward["edges"])
    assert not any(n["leaf"] for n in backward["nodes"] if n["op"] in ("MatMul", "Mul", "Sum"))
    _loss(model, tokens).backward()  # and the model's own gradient is the same again: the page changed nothing
    assert abs(np.linalg.norm(model.layers[0].self_attn.q_proj.weight.grad.numpy()) - norms[0]) <= 1e-3 * norms[0]


def test_long_sequences_are_pooled_and_the_page_stays_small():
    model, tokens = small_lm(4, max_len=100), np.random.default_rng(0).integers(0, 11, (1, 91))
    page = explore(model, tokens)
    first = page.data["attention"][0]
    p = np.array(first["P"], float)
    assert first["pooled"] and p.shape == (2, MAX_TOKENS, MAX_TOKENS) and len(first["q_labels"]) == MAX_TOKENS
    np.testing.assert_allclose(p.sum(-1), 1.0, atol=2e-3)  # a mean of rows that each sum to 1
    assert page.stats["bytes"] < 600_000
    assert "http://" not in page.html.replace("http://www.w3.org/2000/svg", "") and "https://" not in page.html
    data = json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', page.html,
                                re.S).group(1).replace("<\\/", "</"))
    assert data["attention"][0]["P"] == first["P"]


def test_explore_errors():
    with pytest.raises(TypeError, match="model must be a Module"):
        explore(lambda x: x, np.array([[1, 2]]))
    lin = ta.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="called no MultiHeadAttention"):
        explore(lin, ta.ones(1, 2), loss=lambda out, t: out.sum())


def _run(tmp_path, name, snapshots, steps=40, task="reverse", target=2.0, resume=False):
    return train(TrainConfig(task=task, steps=steps, out=str(tmp_path / name), progress=False,
                             checkpoint_every=15, target=target, resume=resume),
                 [Snapshots(snapshots)] if snapshots else [])


def test_snapshots_leave_training_exactly_as_without(tmp_path):
    _run(tmp_path, "plain", 0)
    _run(tmp_path, "snap", 4)
    a, b = (load_checkpoint(str(tmp_path / n / "checkpoint.npz")) for n in ("plain", "snap"))
    for name in a["model"]:
        assert np.array_equal(a["model"][name], b["model"][name]), name
    snaps = load_snapshots(str(tmp_path / "snap"))
    steps = snaps["steps"]
    assert len(steps) == 4 and steps[0] == 0 and steps[-1] == 40 and max(np.diff(steps)) <= 20, steps
    assert snaps["loss"][0] is None and snaps["loss"][-1] > 0
    assert np.array(snaps["maps"]).shape[:3] == (4, 2, 4)  # snapshots, layers, heads
    from tinygrad_attn.runs import load_run
    from tinygrad_attn.viz import attention_maps

    task, model, _ = load_run(str(tmp_path / "snap"))
    _, batch = task.answer(model, snaps["prompt"])
    final = attention_maps(task, model, batch)["self-attention"]
    np.testing.assert_allclose(np.array(snaps["maps"][-1][0]), final[0], atol=2e-3)


def test_snapshots_of_a_resumed_run_continue(tmp_path):
    _run(tmp_path, "r", 4, steps=20)
    _run(tmp_path, "r", 4, steps=40, resume=True)
    steps = load_snapshots(str(tmp_path / "r"))["steps"]
    assert steps[0] == 0 and steps[-1] == 40 and len(steps) == 4 and any(20 < s < 40 for s in steps), steps


def test_snapshots_are_spread_over_the_steps_a_run_takes_when_it_stops_early(tmp_path):
    """The run stops at its target long before its step budget: the snapshots still span it, all N kept."""
    metrics = _run(tmp_path, "early", 8, steps=1500, target=0.0)
    assert metrics["stopped_early"] and metrics["steps"] < 1500
    steps = load_snapshots(str(tmp_path / "early"))["steps"]
    assert steps[0] == 0 and steps[-1] == metrics["steps"] and len(steps) == min(8, metrics["steps"] + 1), steps


def test_explain_writes_a_page_for_a_run_and_the_translation_task(tmp_path, capsys):
    _run(tmp_path, "rev", 3, steps=10)
    out = tmp_path / "rev.html"
    assert cli.main(["explain", "--run", str(tmp_path / "rev"), "--input", "3 1 4 1 5 9 2 6", "--out", str(out)]) == 0
    assert "bytes, built in" in capsys.readouterr().out and out.stat().st_size > 10_000
    page = explore_run(str(tmp_path / "rev"), "3 1 4 1 5 9 2 6")
    assert page.data["snapshots"]["steps"][-1] == 10 and page.data["curve"]
    _run(tmp_path, "tr", 0, steps=3, task="translate")
    page = explore_run(str(tmp_path / "tr"), "le chat dort")
    kinds = [a["kind"] for a in page.data["attention"]]
    assert "cross" in kinds and "encoder" in kinds
    cross = page.data["attention"][kinds.index("cross")]
    assert cross["k_labels"][:3] == ["le", "chat", "dort"]
    code = cli.main(["explain", "--run", str(tmp_path / "none"), "--input", "1", "--out", str(out)])
    assert code == 2 and "no checkpoint" in capsys.readouterr().err


def test_explain_a_text_run(tmp_path):
    data = tmp_path / "fox.txt"
    data.write_text("the quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    train(TrainConfig(task="text", data=str(data), steps=3, batch_size=4, block_size=16, d_model=16, nhead=2,
                      num_layers=1, dim_feedforward=32, out=str(tmp_path / "t"), progress=False),
          [Snapshots(2)])
    page = explore_run(str(tmp_path / "t"), "the quick")
    first = page.data["attention"][0]
    # keys are the input characters; each row is labelled with the character it predicts
    assert first["k_labels"][:3] == ["t", "h", "e"] and first["q_labels"][:3] == ["h", "e", "␣"]
    assert page.data["snapshots"]["steps"] == [0, 3]
    assert page.data["loss"] > 0 and page.stats["bytes"] < 200_000


@pytest.mark.parametrize("change, message", [
    (lambda s: {**s, "maps": s["maps"][..., :3]}, "labels for maps of 16 x 3 positions"),
    (lambda s: {**s, "steps": s["steps"][:1]}, "a loss per step for its 1 steps"),
    (lambda s: {**s, "labels": np.asarray("not json")}, "labels is not valid JSON"),
    (lambda s: {k: v for k, v in s.items() if k != "maps"}, "it lacks ['maps']"),
    (lambda s: {**s, "maps": s["maps"] * np.float16("nan")}, "not attention weights (NaN"),
    (lambda s: {**s, "labels": np.asarray('{"kind": "self-attention", "q": [1], "k": null}')}, "labels must be"),
])
def test_a_tampered_snapshots_file_is_one_clear_error(tmp_path, change, message, capsys):
    from tinygrad_attn.serialization import load, save

    _run(tmp_path, "r", 3, steps=10)
    path = tmp_path / "r" / "snapshots.npz"
    save(change(dict(load(str(path)))), str(path))
    code = cli.main(["explain", "--run", str(tmp_path / "r"), "--input", "3 1 4 1 5 9 2 6",
                     "--out", str(tmp_path / "p.html")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "snapshots.npz" in err, err
    assert not (tmp_path / "p.html").exists()
