"""The numbers the explorer page shows, taken from one forward and backward pass of a model.

For every call of a MultiHeadAttention inside `run()` (which computes a scalar loss), per head:

    P   = softmax(q k^T * s + mask)                  (Tq, Tk)   the attention weights
    dP  = dO V^T                                     (Tq, Tk)   what the loss says about each weight
    dS  = P * (dP - rowsum(dO * O))                  (Tq, Tk)   the gradient of the scores
    dQ  = s dS K,  dK = s dS^T Q,  dV = P^T dO                   shown as one norm per token

P and dP are the library's own (the weights' tensor and its gradient, kept with `retain_grad`); Q, K, V
and dO = dL/d(heads' output) too; dS and dQ, dK, dV follow from them by the formulas, and `check`
compares those formulas with finite differences. Each attention module's forward is wrapped only while
`run()` runs, and put back after.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..autograd.backward import grad as gradients_of
from ..functional import sdpa_kernel
from ..kernels.layout import tile_shape
from ..kernels.visibility import band, tile_grid
from ..nn.attention import MultiHeadAttention
from ..nn.layers import Embedding
from ..nn.module import Module
from ..tensor import Tensor

MAX_TOKENS = 64  # longer sequences are shown pooled into 64 equal runs of positions (see `pool`)
DIGITS = 4  # significant digits kept in the page


def _heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(T, E) -> (H, T, d): the split into heads, as MultiHeadAttention does it."""
    t, e = x.shape
    return x.reshape(t, heads, e // heads).transpose(1, 0, 2)


def _bias(mask: Any, is_causal: bool, tq: int, tk: int, batch_index: int, heads: int,
          window: int | None = None) -> np.ndarray:
    """The additive (H, Tq, Tk) mask a call attended with: 0 where allowed, -inf where hidden (by the mask,
    the causal rule, a sliding window)."""
    bias = np.zeros((heads, tq, tk))
    if mask is not None:
        m = np.asarray(mask._data if isinstance(mask, Tensor) else mask)
        m = np.broadcast_to(m, m.shape[:-2] + (tq, tk)) if m.ndim >= 2 else np.broadcast_to(m, (tq, tk))
        if m.ndim == 4:
            m = m[batch_index if m.shape[0] > 1 else 0]
        bias = bias + (np.where(m, 0.0, -np.inf) if m.dtype == np.bool_ else m)
    past = tk - tq if is_causal else 0  # a cached call's queries come after the keys already there
    lo, hi = band(is_causal, past, window)
    offset = np.arange(tk)[None, :] - np.arange(tq)[:, None]  # key - query
    bias = bias + np.where((offset >= lo) & (offset <= hi), 0.0, -np.inf)
    return np.broadcast_to(bias, (heads, tq, tk))


def kernel_tiles(tq: int, tk: int, head_dim: int, is_causal: bool, window: int | None) -> dict:
    """The flash kernel's tiles for this attention: their size and the state of each (0 skipped: no query of
    the block sees a key of the tile; 1 partly seen; 2 all seen), as kernels/visibility.py computes them."""
    tile = tile_shape(tq, tk, head_dim)
    grid = tile_grid(*band(is_causal, tk - tq if is_causal else 0, window), tq, tk, tile)[0, 0]
    rows, keys = _cells(tq), _cells(tk)  # position -> the map's cell (pooled maps have fewer cells)
    rects = [[int(rows[t * tile[0]]), int(rows[min(t * tile[0] + tile[0], tq) - 1]) + 1,
              int(keys[u * tile[1]]), int(keys[min(u * tile[1] + tile[1], tk) - 1]) + 1, int(grid[t, u])]
             for t in range(grid.shape[0]) for u in range(grid.shape[1])]
    return {"rows": int(tile[0]), "keys": int(tile[1]), "rects": rects}


def _cells(n: int) -> np.ndarray:
    """Each of n positions' cell in a map pooled as `pool` pools it."""
    if n <= MAX_TOKENS:
        return np.arange(n)
    return np.concatenate([np.full(len(p), i) for i, p in enumerate(np.array_split(np.arange(n), MAX_TOKENS))])


def _softmax(s: np.ndarray) -> np.ndarray:
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    total = e.sum(-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def attention_of(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray, scale: float) -> np.ndarray:
    """softmax(q k^T * scale + bias) v for (H, T, d) heads, in numpy: what `check` differentiates."""
    return _softmax(q @ k.transpose(0, 2, 1) * scale + bias) @ v


class _Call:
    """One call of an attention module: its inputs, outputs and (after backward) gradients."""

    def __init__(self, name: str, module: MultiHeadAttention, args: tuple, kwargs: dict):
        self.name, self.module = name, module
        self.query = args[0] if args else kwargs.get("query")
        key = args[1] if len(args) > 1 else kwargs.get("key")
        value = args[2] if len(args) > 2 else kwargs.get("value")
        self.key = self.query if key is None else key
        self.value = self.key if value is None else value
        self.mask = args[3] if len(args) > 3 else kwargs.get("mask")
        self.is_causal = bool(args[4] if len(args) > 4 else kwargs.get("is_causal", False))
        self.out = self.weights = self.merged = None


class _Recorder:
    """Wraps each attention module's forward (and its out_proj's, to keep dO) while the loss is computed."""

    def __init__(self, model: Module):
        self.calls: list[_Call] = []
        self.embeddings: list[tuple[str, Tensor, np.ndarray]] = []
        self.model = model
        self.patched: list[Module] = []

    def __enter__(self) -> _Recorder:
        for name, module in self.model.named_modules():
            if isinstance(module, MultiHeadAttention):
                self._wrap_attention(name or "attention", module)
            elif isinstance(module, Embedding) and not name.endswith("position.embedding"):
                self._wrap_embedding(name or "embedding", module)
        return self

    def __exit__(self, *exc: object) -> None:
        for module in self.patched:
            del module.__dict__["forward"]  # the class's forward again

    def _patch(self, module: Module, forward: Callable) -> None:
        module.__dict__["forward"] = forward  # an instance attribute: found before the class's forward
        self.patched.append(module)

    def _wrap_attention(self, name: str, module: MultiHeadAttention) -> None:
        original, out_proj = type(module).forward, module.out_proj
        recorder = self

        def forward(*args: Any, **kwargs: Any):
            call = _Call(name, module, args, kwargs)
            kwargs = {k: v for k, v in kwargs.items() if k not in ("need_weights", "average_attn_weights")}
            out, weights = original(module, *args, need_weights=True, average_attn_weights=False, **kwargs)
            call.out, call.weights, call.merged = out, weights, recorder._last_merged
            for t in (out, weights, call.merged):
                if t is not None and t.requires_grad:
                    t.retain_grad()
            recorder.calls.append(call)
            return out, weights

        projection = type(out_proj).forward

        def out_forward(x: Tensor):
            recorder._last_merged = x  # the heads' outputs side by side (B, Tq, E): O
            return projection(out_proj, x)

        self._last_merged = None
        self._patch(module, forward)
        self._patch(out_proj, out_forward)

    def _wrap_embedding(self, name: str, module: Embedding) -> None:
        original, recorder = type(module).forward, self

        def forward(indices: Any):
            out = original(module, indices)
            if out.requires_grad:
                out.retain_grad()
            recorder.embeddings.append((name, out, np.asarray(indices._data if isinstance(indices, Tensor)
                                                              else indices)))
            return out

        self._patch(module, forward)


def _round(a: np.ndarray) -> list:
    """Nested lists with DIGITS significant digits; NaN and inf as None (strict JSON)."""
    a = np.asarray(a, dtype=np.float64)
    flat = [None if not math.isfinite(v) else float(f"{v:.{DIGITS}g}") for v in a.ravel().tolist()]
    return np.array(flat, dtype=object).reshape(a.shape).tolist() if a.ndim else flat[0]


def pool(a: np.ndarray, axes: tuple[int, ...], summed: tuple[int, ...] = ()) -> np.ndarray:
    """Equal runs of positions along `axes` pooled into MAX_TOKENS: the mean, or the sum along `summed`
    (the keys of P: each pooled row still sums to 1)."""
    for axis in axes:
        n = a.shape[axis]
        if n > MAX_TOKENS:
            parts = np.array_split(np.arange(n), MAX_TOKENS)
            reduce = np.sum if axis in summed else np.mean
            a = np.stack([reduce(np.take(a, p, axis=axis), axis=axis) for p in parts], axis=axis)
    return a


def pooled_labels(labels: list[str]) -> list[str]:
    if len(labels) <= MAX_TOKENS:
        return labels
    return [f"{p[0]}-{p[-1]}" for p in np.array_split(np.arange(len(labels)), MAX_TOKENS)]


def _labels(given: dict | None, kind: str, n: int, tokens: np.ndarray | None) -> list[str]:
    if given and kind in given and given[kind] is not None and len(given[kind]) == n:
        return [str(x) for x in given[kind]]
    if tokens is not None and len(tokens) == n:
        return [str(int(t)) for t in tokens]
    return [str(i) for i in range(n)]


def _kind(name: str) -> str:
    if "cross" in name:
        return "cross"
    if "decoder" in name:
        return "decoder_self"
    if "encoder" in name:
        return "encoder"
    return "self-attention"


def attention_panel(call: _Call, index: int, labels: dict | None,
                    tokens: dict[int, np.ndarray]) -> tuple[dict, dict]:
    """One attention call's maps and per-token norms for example `index` of the batch (the page's panel), and the
    exact arrays they came from (for the finite-difference check)."""
    m = call.module
    h, scale = m.num_heads, 1.0 / math.sqrt(m.head_dim)
    p = call.weights._data[index].astype(np.float64)  # (H, Tq, Tk)
    d_p = call.weights.grad._data[index].astype(np.float64) if call.weights.grad is not None else np.zeros_like(p)
    q_in, k_in, v_in = (t._data[index].astype(np.float64) for t in (call.query, call.key, call.value))
    weights = {n: getattr(m, n).weight._data.astype(np.float64) for n in ("q_proj", "k_proj", "v_proj")}
    biases = {n: (getattr(m, n).bias._data.astype(np.float64) if getattr(m, n).bias is not None else 0.0)
              for n in ("q_proj", "k_proj", "v_proj")}
    group = h // m.n_kv_heads  # grouped-query: each kv head serves `group` query heads
    q = _heads(q_in @ weights["q_proj"].T + biases["q_proj"], h)  # (H, Tq, d)
    k = np.repeat(_heads(k_in @ weights["k_proj"].T + biases["k_proj"], m.n_kv_heads), group, axis=0)  # (H, Tk, d)
    v = np.repeat(_heads(v_in @ weights["v_proj"].T + biases["v_proj"], m.n_kv_heads), group, axis=0)
    if m.rotary is not None and call.key is call.query:  # positions rotate q and k, as the layer does
        q, k = (m.rotary(Tensor(a), 0).numpy().astype(np.float64) for a in (q, k))
    merged_grad = call.merged.grad if call.merged is not None else None
    d_o = _heads(merged_grad._data[index].astype(np.float64), h) if merged_grad is not None else np.zeros_like(q)
    o = p @ v  # (H, Tq, d)
    d_s = p * (d_p - (d_o * o).sum(-1, keepdims=True))  # the softmax's backward
    d_q, d_k, d_v = scale * d_s @ k, scale * d_s.transpose(0, 2, 1) @ q, p.transpose(0, 2, 1) @ d_o
    kind = _kind(call.name)
    tq, tk = p.shape[1:]
    query_tokens, key_tokens = tokens.get(tq), tokens.get(tk)
    given = None if labels is None else labels.get(kind)
    for names, n, what in ((given or (None, None))[0], tq, "query"), ((given or (None, None))[1], tk, "key"):
        if names is not None and len(names) != n:
            raise ValueError(f"explore: labels[{kind!r}] gives {len(names)} {what} labels for {n} {what} positions")
    q_labels = _labels({"q": given[0]} if given else None, "q", tq, query_tokens)
    k_labels = _labels({"k": given[1]} if given else None, "k", tk, key_tokens)
    panel = {
        "name": call.name, "kind": kind, "heads": h, "tq": int(tq), "tk": int(tk),
        "q_labels": pooled_labels(q_labels), "k_labels": pooled_labels(k_labels),
        "pooled": bool(tq > MAX_TOKENS or tk > MAX_TOKENS),
        "causal": bool(tq == tk and tq > 1 and not np.triu(p, 1).any()),  # nothing seen above the diagonal
        "rows_predict": False,  # rows labelled with their own token (explore_run: with the one they predict)
        "P": _round(pool(p, (1, 2), summed=(2,))), "dP": _round(pool(d_p, (1, 2))), "dS": _round(pool(d_s, (1, 2))),
        "dQ": _round(pool(np.linalg.norm(d_q, axis=-1), (1,))), "dK": _round(pool(np.linalg.norm(d_k, axis=-1), (1,))),
        "dV": _round(pool(np.linalg.norm(d_v, axis=-1), (1,))),
        "window": m.window, "kv_heads": int(m.n_kv_heads), "rotary": m.rotary is not None,
    }
    bias = _bias(call.mask, call.is_causal, tq, tk, index, h, m.window)
    panel["seen"] = _round(pool(np.isfinite(bias[0]).astype(np.float64), (0, 1)))  # which keys each query sees
    panel["tiles"] = kernel_tiles(int(tq), int(tk), m.head_dim, call.is_causal, m.window)
    exact = {"q": q, "k": k, "v": v, "dO": d_o, "P": p, "dQ": d_q, "dK": d_k, "dV": d_v, "scale": scale,
             "bias": bias}
    return panel, exact


def finite_difference_check(exact: dict, head: int = 0, step: float = 1e-6, limit: int = 48) -> dict:
    """dQ, dK, dV of one head by the formulas against central differences of sum(dO * attention(Q, K, V)),
    entry by entry (at most `limit` entries each, spread evenly); the worst entry of each is named."""
    q, k, v, d_o = (exact[n][head:head + 1] for n in ("q", "k", "v", "dO"))
    bias, scale = exact["bias"][head:head + 1], exact["scale"]

    def f(q_, k_, v_):
        out = attention_of(q_, k_, v_, bias, scale)
        return float(np.nansum(d_o * out))

    rows = []
    for name, which in (("dQ", 0), ("dK", 1), ("dV", 2)):
        analytic = exact[name][head]
        flat = np.arange(analytic.size)
        picked = flat if flat.size <= limit else np.linspace(0, flat.size - 1, limit).astype(int)
        numeric = np.full(analytic.size, np.nan)
        for i in picked:
            args = [q.copy(), k.copy(), v.copy()]
            idx = np.unravel_index(i, analytic.shape)
            args[which][(0,) + idx] += step
            plus = f(*args)
            args[which][(0,) + idx] -= 2 * step
            minus = f(*args)
            numeric[i] = (plus - minus) / (2 * step)
        errors = np.abs(numeric[picked] - analytic.ravel()[picked])
        worst = int(picked[int(np.nanargmax(errors))]) if errors.size else 0
        rows.append({"what": name, "entries": int(picked.size), "of": int(analytic.size),
                     "max_abs_err": float(f"{np.nanmax(errors):.3g}") if errors.size else 0.0,
                     "worst": [int(x) for x in np.unravel_index(worst, analytic.shape)],
                     "analytic": float(f"{analytic.ravel()[worst]:.6g}"),
                     "numeric": float(f"{numeric[worst]:.6g}")})
    return {"head": head, "step": step, "rows": rows}


def _summary(a: np.ndarray | None) -> dict | None:
    if a is None:
        return None
    a = np.asarray(a, np.float64)
    finite = a[np.isfinite(a)]
    if finite.size == 0:
        return {"min": None, "max": None, "mean": None, "norm": None}
    return {"min": _round(finite.min()), "max": _round(finite.max()), "mean": _round(finite.mean()),
            "norm": _round(np.linalg.norm(finite))}


def _replay(call: _Call, index: int, kernel: str) -> tuple:
    """One attention block run again on this call's inputs (item `index`), under sdpa_kernel(kernel): the
    module's parameter names, the inputs as new leaves, the output, and the model's dL/d(block output)."""
    module, names = call.module, {id(p): n for n, p in call.module.named_parameters()}
    inputs = {}
    for label, t in (("query", call.query), ("key", call.key), ("value", call.value)):
        if id(t) not in inputs:
            inputs[id(t)] = (label, Tensor(t._data[index:index + 1].copy(), requires_grad=True))
    leaf = {label: x for label, x in inputs.values()}
    query = leaf["query"]
    key = leaf.get("key", query)
    value = leaf.get("value", key)
    mask = call.mask
    if mask is not None:
        m = np.asarray(mask._data if isinstance(mask, Tensor) else mask)
        mask = m[index:index + 1] if m.ndim == 4 and m.shape[0] > 1 else m
    with sdpa_kernel(kernel):
        out, _ = type(module).forward(module, query, key if key is not query else None,
                                      value if value is not key else None, mask=mask, is_causal=call.is_causal,
                                      need_weights=False)
    grad_out = call.out.grad._data[index:index + 1] if call.out is not None and call.out.grad is not None else None
    return names, inputs, out, Tensor(grad_out if grad_out is not None else np.ones_like(out._data))


def _tensors_behind(roots: list[Tensor], expand: Callable[[Tensor], bool],
                    keep: Callable[[Tensor], bool] = lambda t: t.requires_grad) -> list[Tensor]:
    """The tensors of the graph behind `roots`, outputs first: `expand(t)` says whether to go past t, `keep(x)`
    whether an op's input x is shown."""
    order, stack, seen = [], list(roots), set()
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        order.append(t)
        if t._ctx is not None and expand(t):
            stack.extend(x for x in t._ctx.inputs if keep(x))
    return order


def _graph(order: list[Tensor], label: Callable[[Tensor], str], inner: Callable[[Tensor], bool],
           kernel: str) -> dict:
    """Nodes (op, shape, value and gradient summaries) and edges (input -> op) of the tensors in `order`."""
    ids = {id(t): i for i, t in enumerate(order)}
    nodes, edges = [], []
    for t in order:
        nodes.append({"id": ids[id(t)], "op": label(t), "leaf": not inner(t), "shape": list(t.shape),
                      "value": _summary(t._data), "grad": _summary(None if t.grad is None else t.grad._data)})
        if inner(t):
            edges.extend([ids[id(x)], ids[id(t)]] for x in t._ctx.inputs if id(x) in ids)
    return {"kernel": kernel, "nodes": nodes, "edges": edges}


def block_graph(call: _Call, index: int, kernel: str) -> dict:
    """The graph one attention block records (its projections, the attention, out_proj) on this call's
    inputs, under sdpa_kernel(kernel), with each node's value and gradient summarised. The gradient
    flowing in is the model's own dL/d(block output)."""
    saved = {id(p): (p, p.grad) for p in call.module.parameters()}  # the replay's gradients are its own
    for p, _ in saved.values():
        p.grad = None
    names, inputs, out, grad_out = _replay(call, index, kernel)
    order = _tensors_behind([out], lambda t: True)  # every tensor of the block's graph, output to leaves
    for t in order:
        if t._ctx is not None:
            t.retain_grad()
    (out * grad_out).sum().backward()

    def label(t: Tensor) -> str:
        if t._ctx is not None:
            return t._ctx.function.__name__
        return names.get(id(t)) or next((name for name, x in inputs.values() if x is t), "input")

    graph = _graph(order, label, lambda t: t._ctx is not None, kernel)
    for p, grad in saved.values():
        p.grad = grad
    return graph


def backward_graph(call: _Call, index: int) -> dict:
    """The math path's backward of one attention block as a graph of its own: the block's input gradients
    computed with create_graph=True, so each step of the backward (dV = P^T dO, dP = dO V^T, the softmax's
    dS, dQ, dK, the projections') is a node. The forward values it reads, the weights and dO are its
    inputs; each is labelled with what it is (a forward op's output is "Softmax (forward)")."""
    names, inputs, out, grad_out = _replay(call, index, "math")
    forward = {id(t._ctx) for t in _tensors_behind([out], lambda t: True) if t._ctx is not None}
    wanted = [x for _, x in inputs.values()]
    found = gradients_of(out, wanted, grad_out, create_graph=True)

    def made_by_backward(t: Tensor) -> bool:
        return t._ctx is not None and id(t._ctx) not in forward

    def label(t: Tensor) -> str:
        if made_by_backward(t):
            return t._ctx.function.__name__
        if t._ctx is not None:
            return f"{t._ctx.function.__name__} (forward)"
        if t is grad_out:
            return "dO"
        return names.get(id(t)) or next((name for name, x in inputs.values() if x is t), "constant")

    order = _tensors_behind([g for g in found if g is not None], made_by_backward,
                            lambda x: x.requires_grad or x is grad_out)
    return _graph(order, label, made_by_backward, "backward")


def collect(model: Module, run: Callable[[], Tensor], labels: dict | None = None, index: int = 0,
            check: bool = True) -> dict:
    """Run `run()` (the loss) with attention recorded, backward from it, and gather the page's data."""
    started = time.perf_counter()
    was_training = model.training
    grads = [(p, p.grad) for p in model.parameters()]  # put back at the end: exploring changes nothing
    model.eval()  # no dropout: the maps are the model's, deterministic
    try:
        with _Recorder(model) as recorder:
            loss = run()
            if not isinstance(loss, Tensor) or loss.numel() != 1:
                raise TypeError(f"explore: the loss must be a scalar Tensor, got {type(loss).__name__}")
            if not np.isfinite(loss.item()):
                raise ValueError(f"explore: the loss is {loss.item()}: the model's weights or inputs hold NaN or "
                                 "inf (a diverged run?), so there are no attention maps or gradients to show")
            model.zero_grad()
            loss.backward()
    finally:
        model.train(was_training)
    if not recorder.calls:
        raise ValueError("explore: the model called no MultiHeadAttention; nothing to show")
    tokens = {}
    inputs = []
    for name, out, ids in recorder.embeddings:
        row = ids[index] if ids.ndim == 2 else ids
        tokens.setdefault(len(row), row)
        if out.grad is not None:
            norms = np.linalg.norm(out.grad._data[index].astype(np.float64), axis=-1)
            known = [keys for _, keys in (labels or {}).values() if keys is not None and len(keys) == len(row)]
            in_labels = [str(x) for x in known[0]] if known else [str(int(t)) for t in row]
            inputs.append({"name": name, "labels": pooled_labels(in_labels), "norm": _round(pool(norms, (0,))),
                           "pooled": len(in_labels) > MAX_TOKENS})
    panels, exacts = [], []
    for call in recorder.calls:
        panel, exact = attention_panel(call, index, labels, tokens)
        panels.append(panel)
        exacts.append(exact)
    data = {
        "loss": _round(loss.item()),
        "attention": panels,
        "input_grad": inputs,
        "graph": {**{kernel: block_graph(recorder.calls[0], index, kernel) for kernel in ("math", "flash")},
                  "backward": backward_graph(recorder.calls[0], index)},
        "check": (dict(finite_difference_check(exacts[0]), name=recorder.calls[0].name) if check else None),
        "max_tokens": MAX_TOKENS,
    }
    for p, grad in grads:
        p.grad = grad
    data["seconds"] = round(time.perf_counter() - started, 3)
    return data
