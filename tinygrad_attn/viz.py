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


def _pyplot():
    """matplotlib.pyplot on a file-only backend, or None (said once) when matplotlib is missing."""
    global _warned
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        return plt
    except ImportError:
        if not _warned:
            print("matplotlib is not installed (pip install matplotlib): attention pictures are skipped")
            _warned = True
        return None


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
    plt = _pyplot()
    if plt is None:
        return None
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
        fig, ax = plt.subplots(figsize=(1 + 0.6 * weights.shape[1], 1 + 0.5 * weights.shape[0]))
        image = ax.imshow(weights, cmap="viridis", vmin=0, vmax=1)
        _values(ax, weights, 7)
        _ticks(ax, queries, keys, 8)
        ax.set_title(f"{name} layer {layer} head {h}", fontsize=9)
        fig.colorbar(image, ax=ax, shrink=0.8)
    else:
        heads = rows[0][2].shape[0]
        # constrained layout keeps each row's key labels clear of the next row's titles (narrow cross maps too)
        fig, axes = plt.subplots(len(rows), heads, figsize=(2.8 * heads + 1, 3.0 * len(rows)), squeeze=False,
                                 layout="constrained")
        for r, (name, layer, weights) in enumerate(rows):
            queries, keys = labels.get(name, (None, None))
            for h in range(heads):
                ax = axes[r][h]
                image = ax.imshow(weights[h], cmap="viridis", vmin=0, vmax=1, aspect="auto")
                ax.set_title(f"{name} L{layer} H{h}", fontsize=8)
                _ticks(ax, queries if h == 0 else None, keys, 6)
                if max(weights[h].shape) <= 10:  # small maps show their values: a near-uniform (untrained) map
                    _values(ax, weights[h], 5)    # reads as numbers, not as one flat colour
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.6)
    fig.suptitle("\n".join(textwrap.wrap((title + "\n" if title else "") + caption, 90)), fontsize=9)
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)
    return path


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


def _values(ax: Any, weights: np.ndarray, size: int) -> None:
    """Each cell's weight written in it, dark on light cells and light on dark ones."""
    for i in range(weights.shape[0]):
        for j in range(weights.shape[1]):
            ax.text(j, i, f"{weights[i, j]:.2f}", ha="center", va="center", fontsize=size,
                    color="black" if weights[i, j] > 0.5 else "white")


def _ticks(ax: Any, queries: list[str] | None, keys: list[str] | None, size: int) -> None:
    """Token names as tick labels; no ticks on an axis without names."""
    if keys is not None:
        ax.set_xticks(range(len(keys)), keys, fontsize=size, rotation=90)
    else:
        ax.set_xticks([])
    if queries is not None:
        ax.set_yticks(range(len(queries)), queries, fontsize=size)
    else:
        ax.set_yticks([])


def plot_curves(history: list[dict], metric: str, path: str) -> str | None:
    """Training loss and the evaluation metric against step, side by side; returns the path."""
    plt = _pyplot()
    if plt is None or not history:
        return None
    steps = [h["step"] for h in history]
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3))
    left.plot(steps, [h["loss"] for h in history])
    left.set(xlabel="step", ylabel="training loss", title="training loss")
    evaluated = [h for h in history if h.get(metric) is not None]
    right.plot([h["step"] for h in evaluated], [h[metric] for h in evaluated], marker="o", color="C1")
    right.set(xlabel="step", ylabel=metric, title=f"held-out {metric}")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
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
    plt = _pyplot()
    if plt is None:
        return None
    heads, tq, tk = weights.shape
    queries = queries or [f"q{i}" for i in range(tq)]
    keys = keys or [f"k{j}" for j in range(tk)]
    fig, axes = plt.subplots(1, heads, figsize=(max(2.6 * heads, 4.5), 3.2), squeeze=False)
    for h in range(heads):
        image = axes[0][h].imshow(weights[h], cmap="viridis", vmin=0, vmax=1)
        axes[0][h].set_title(f"head {h}", fontsize=8)
        axes[0][h].set_xticks(range(tk), keys, fontsize=6, rotation=90)
        axes[0][h].set_yticks(range(tq), queries if h == 0 else [""] * tq, fontsize=6)
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8)
    fig.suptitle("\n".join(textwrap.wrap(title, 60)), fontsize=9)
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)
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
