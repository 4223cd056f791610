"""Pictures: attention heatmaps (matplotlib, optional), the computation graph as Graphviz DOT, and
`explore`: one self-contained HTML page of a model's forward, backward, graph and training (explorer/)."""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from typing import Any

import numpy as np

from .checks import check_tensor
from .engine import Context
from .tensor import Tensor

_warned = False
DPI = 100
MIN_POINTS = 7  # no text in a picture smaller than this (7 pt at 100 dpi: about 10 pixels)


def _figure(**options: Any) -> Any:
    """A matplotlib Figure drawn off screen, or None (said once) when matplotlib is missing. A Figure of its
    own, not pyplot's: the process's matplotlib backend and pyplot's figures are left as they are."""
    global _warned
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        if not _warned:
            print("matplotlib is not installed (pip install matplotlib): attention pictures are skipped")
            _warned = True
        return None
    figure = Figure(dpi=DPI, **options)
    FigureCanvasAgg(figure)  # drawn by Agg, whatever backend pyplot uses
    return figure


def attention_maps(task: Any, model: Any, batch: Any) -> dict[str, list[np.ndarray]]:
    """Every layer's attention weights for the first example of `batch`: name -> [layer (H, Tq, Tk)]."""
    if not callable(getattr(task, "logits", None)):
        raise TypeError(f"attention_maps: task must be a task (ta.tasks.get_task(...)), got {type(task).__name__}")
    return task.attention_maps(model, batch)


def plot_attention(task: Any, model: Any, batch: Any, path: str, head: str | None = None,
                   title: str = "") -> str | None:
    """Attention heatmaps of the first example of `batch`, queries as rows and keys as columns, labelled
    with the tokens (a decoder's row with the token it predicts), with a colour bar; one row of pictures
    per layer (and attention kind), one column per head. head="L.H" draws that one head large with the
    weight in each cell. Returns the path."""
    fig = attention_figure(task, model, batch, head, title)
    if fig is None:
        return None
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    return path


def attention_figure(task: Any, model: Any, batch: Any, head: str | None = None, title: str = "") -> Any:
    """The Figure `plot_attention` saves (None without matplotlib). Every text is at least MIN_POINTS: each
    panel is as large as its tokens need, tick labels are thinned where they would overlap, and the weights
    are written in the cells only where the cells are large enough to hold them."""
    maps = attention_maps(task, model, batch)
    labels = task.labels(batch)
    rows = [(name, i, w) for name, layers in maps.items() for i, w in enumerate(layers)]
    caption = (f"{task.name}: rows are queries (a decoder's row is labelled with the token it predicts), "
               "columns are keys")
    if head is not None:
        layer, h = _parse_head(head, len(maps[next(iter(maps))]), rows[0][2].shape[0])
        name = next(iter(maps)) if len(maps) == 1 else ("cross" if "cross" in maps else next(iter(maps)))
        weights = maps[name][layer][h]
        queries, keys = labels.get(name, (None, None))
        cell = 0.45  # inches: room for "0.00" at 8 pt
        fig = _figure(figsize=(1.5 + cell * weights.shape[1], 1.5 + cell * weights.shape[0]), layout="constrained")
        if fig is None:
            return None
        ax = fig.add_subplot()
        image = ax.imshow(weights, cmap="viridis", vmin=0, vmax=1)
        _values(ax, weights, cell)
        _ticks(ax, queries, keys, cell, cell)
        ax.set_title(f"{name} layer {layer} head {h}", fontsize=9)
        fig.colorbar(image, ax=ax, shrink=0.8)
        width = 1.5 + cell * weights.shape[1]
    else:
        heads = rows[0][2].shape[0]
        tq, tk = max(w.shape[1] for _, _, w in rows), max(w.shape[2] for _, _, w in rows)
        side = min(max(2.4, 0.32 * max(tq, tk)), 6.0)  # a panel's side in inches: room for its labels
        width = side * heads + 1.2
        fig = _figure(figsize=(width, (side + 0.9) * len(rows) + 0.8), layout="constrained")
        if fig is None:
            return None
        axes = fig.subplots(len(rows), heads, squeeze=False)
        for r, (name, layer, weights) in enumerate(rows):
            queries, keys = labels.get(name, (None, None))
            for h in range(heads):
                ax = axes[r][h]
                image = ax.imshow(weights[h], cmap="viridis", vmin=0, vmax=1, aspect="auto")
                ax.set_title(f"{name} L{layer} H{h}", fontsize=MIN_POINTS + 1)
                n_q, n_k = weights[h].shape
                _ticks(ax, queries if h == 0 else None, keys, side / n_k, side / n_q)
                if max(n_q, n_k) <= 12:  # a small map shows its numbers: a near-uniform (untrained) one then reads
                    _values(ax, weights[h], min(side / n_k, side / n_q))  # as numbers, not as one flat colour
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.6)
    chars = max(40, int(width * 72 / (0.6 * 9)))  # the title wrapped to the figure's width at 9 pt
    lines = [line for part in (title, caption) if part for line in textwrap.wrap(part, chars)]
    fig.suptitle("\n".join(lines), fontsize=9)
    return fig


def check_head(head: str, model: Any) -> tuple[int, int]:
    """--head LAYER.HEAD checked against the model's layers (its decoder's, for an encoder-decoder: the
    picture shows cross-attention) and heads, before any work."""
    stacks = [getattr(model, name) for name in ("decoder", "layers") if hasattr(model, name)]
    heads = [m.num_heads for m in model.modules() if hasattr(m, "num_heads")]
    if not stacks or not heads:
        raise ValueError("--head: the model has no attention layers to draw")
    return _parse_head(head, len(stacks[0]), heads[0])


def _parse_head(head: str, layers: int, heads: int) -> tuple[int, int]:
    try:
        layer, h = (int(part) for part in head.split("."))
    except ValueError:
        raise ValueError(f"--head must be LAYER.HEAD, such as 0.1, got {head!r}") from None
    if not (0 <= layer < layers and 0 <= h < heads):
        raise ValueError(f"--head {head}: the model has layers 0..{layers - 1} and heads 0..{heads - 1}")
    return layer, h


def _values(ax: Any, weights: np.ndarray, cell: float) -> None:
    """Each cell's weight written in it (dark on light cells, light on dark), when a cell of `cell` inches
    holds "0.00" at MIN_POINTS or more; otherwise none (the colour bar gives the scale)."""
    size = min(9.0, cell * 72 / 2.6)  # "0.00" is about 2.4 em wide
    if size < MIN_POINTS:
        return
    for i in range(weights.shape[0]):
        for j in range(weights.shape[1]):
            ax.text(j, i, f"{weights[i, j]:.2f}", ha="center", va="center", fontsize=size,
                    color="black" if weights[i, j] > 0.5 else "white")


def _ticks(ax: Any, queries: list[str] | None, keys: list[str] | None, column: float, row: float) -> None:
    """Token names as tick labels at MIN_POINTS + 1, every k-th where the columns (rows) are too narrow for
    each to have its own (`column`, `row`: a cell's size in inches); no ticks on an axis without names."""
    size = MIN_POINTS + 1
    for names, step_room, set_ticks, rotation in ((keys, column, ax.set_xticks, 90), (queries, row, ax.set_yticks, 0)):
        if names is None:
            set_ticks([])
            continue
        every = max(1, int(np.ceil(size * 1.3 / 72 / step_room)))  # a label's line height over a cell's size
        at = list(range(0, len(names), every))
        set_ticks(at, [names[i] for i in at], fontsize=size, rotation=rotation)


def plot_curves(history: list[dict], metric: str, path: str) -> str | None:
    """Training loss and the evaluation metric against step, side by side; returns the path."""
    fig = _figure(figsize=(8, 3), layout="constrained") if history else None
    if fig is None:
        return None
    steps = [h["step"] for h in history]
    left, right = fig.subplots(1, 2)
    left.plot(steps, [h["loss"] for h in history])
    left.set(xlabel="step", ylabel="training loss", title="training loss")
    evaluated = [h for h in history if h.get(metric) is not None]
    right.plot([h["step"] for h in evaluated], [h[metric] for h in evaluated], marker="o", color="C1")
    right.set(xlabel="step", ylabel=metric, title=f"held-out {metric}")
    fig.savefig(path, dpi=DPI)
    return path


class Pictures:
    """A training callback (see train.py) drawing <out>/curves.png and <out>/attention.png (the task's sample
    prompt) when the run ends; `written` lists the files it wrote (none without matplotlib)."""

    def __init__(self) -> None:
        self.written: list[str] = []

    def on_train_end(self, run: Any) -> None:
        out, task, model = run.config.out, run.task, run.model
        curves = plot_curves(run.history, task.metric, os.path.join(out, "curves.png"))
        prompt = task.sample_prompt()
        answer, batch = task.answer(model, prompt)
        picture = plot_attention(task, model, batch, os.path.join(out, "attention.png"),
                                 title=f"input: {prompt!r:.60}  answer: {answer!r:.60}")
        self.written = [os.path.basename(p) for p in (curves, picture) if p]


def heatmap_grid(weights: np.ndarray, path: str, title: str = "", queries: list[str] | None = None,
                 keys: list[str] | None = None) -> str | None:
    """Save (H, Tq, Tk) attention weights as one heatmap per head (queries as rows, keys as columns),
    labelled with `queries` and `keys` when given, with a colour bar; returns the path."""
    heads, tq, tk = weights.shape
    side = min(max(2.6, 0.32 * max(tq, tk)), 6.0)
    fig = _figure(figsize=(side * heads + 1.2, side + 1.2), layout="constrained")
    if fig is None:
        return None
    queries = queries or [f"q{i}" for i in range(tq)]
    keys = keys or [f"k{j}" for j in range(tk)]
    axes = fig.subplots(1, heads, squeeze=False)
    for h in range(heads):
        image = axes[0][h].imshow(weights[h], cmap="viridis", vmin=0, vmax=1)
        axes[0][h].set_title(f"head {h}", fontsize=MIN_POINTS + 1)
        _ticks(axes[0][h], queries if h == 0 else None, keys, side / tk, side / tq)
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8)
    fig.suptitle("\n".join(textwrap.wrap(title, max(40, int((side * heads + 1.2) * 72 / 5.4)))), fontsize=9)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    return path


def to_dot(tensor: Tensor, render: str | None = None, names: Any = None) -> str:
    """The graph behind `tensor` as Graphviz DOT: one box per op with its output shape, leaves as ellipses
    (with the gradient's norm once backward has run). `names` (a module, or a dict name -> tensor, such as
    `dict(model.named_parameters())`) labels the leaves with their names. With `render="graph.svg"` (or
    .png) the `dot` program, when installed (`apt-get install graphviz`, `brew install graphviz`), also
    draws it."""
    check_tensor(tensor, "to_dot", "tensor")
    if names is not None and hasattr(names, "named_parameters"):
        names = dict(names.named_parameters())
    if names is not None and not isinstance(names, dict):
        raise TypeError(f"to_dot: names must be a module or a dict of name -> tensor, got {type(names).__name__}")
    leaf_names = {id(t): name for name, t in (names or {}).items()}
    lines = ["digraph autograd {", "  rankdir=LR;", '  node [fontname="Helvetica", fontsize=10];']
    seen: set[int] = set()
    stack = [(tensor._ctx or tensor, tensor.shape)]  # the graph's nodes: Contexts, and leaf tensors
    while stack:
        node, shape = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if not isinstance(node, Context):
            grad = "" if node.grad is None else f"\\ngrad norm {float(np.linalg.norm(node.grad._data)):.3g}"
            label = leaf_names.get(id(node), "leaf")
            lines.append(f'  n{id(node)} [shape=ellipse, label="{label} {node.shape}{grad}"];')
            continue
        lines.append(f'  n{id(node)} [shape=box, label="{node.function.__name__}\\n{shape}"];')
        for parent, t, need in zip(node.parents, node.inputs, node.needs_input_grad):
            if need:  # an edge to the input's node when the op ran (an in-place change later gave it another)
                lines.append(f"  n{id(parent)} -> n{id(node)};")
                stack.append((parent, t.shape))
    lines.append("}")
    dot = "\n".join(lines)
    if render and shutil.which("dot"):
        fmt = os.path.splitext(render)[1].lstrip(".") or "svg"
        subprocess.run(["dot", f"-T{fmt}", "-o", render], input=dot, text=True, check=True)
    return dot


def explore(model: Any, inputs: Any, targets: Any = None, loss: Any = None, **options: Any) -> Any:
    """One self-contained HTML page of `model` on `inputs`: every head's weights, their gradients dP and dS,
    the gradient reaching each token, the graph of one attention block on both paths, a finite-difference
    check and, with snapshots, training; `lang="fr"` or `"en"` (default: the locale's). Shown inline in
    Jupyter; `.save("page.html")`. The explorer package (tinygrad_attn.explorer) holds the code; imported
    here on first use, since it builds on nn."""
    from .explorer import explore as build

    return build(model, inputs, targets, loss, **options)
