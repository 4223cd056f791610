"""Seeing gradients flow: the DOT graph, the backward trace and anomaly detection."""

import shutil

import numpy as np
import pytest

import tinygrad_attn as ta
from tinygrad_attn import functional as F
from tinygrad_attn.viz import to_dot


def small_graph():
    x = ta.Tensor(np.array([[1.0, 2.0], [3.0, 4.0]]), requires_grad=True)
    w = ta.Tensor(np.array([[0.5, 1.0, 0.0], [-0.5, 0.2, 0.3]]), requires_grad=True)
    return x, w, (F.softmax(x @ w, dim=-1) * ta.Tensor(np.arange(6.0).reshape(2, 3))).sum()


def test_to_dot_lists_ops_shapes_and_leaf_gradients():
    x, w, loss = small_graph()
    dot = to_dot(loss)
    assert dot.startswith("digraph") and "MatMul" in dot and "Softmax" in dot and "(2, 3)" in dot
    assert dot.count("->") == 5 and "grad norm" not in dot
    loss.backward()
    assert f"grad norm {np.linalg.norm(x.grad.numpy()):.3g}" in to_dot(loss)


def test_trace_backward_records_every_node_with_gradient_norms(capsys):
    x, w, loss = small_graph()
    with ta.trace_backward() as trace:
        loss.backward()
    ops = [row[0] for row in trace.rows]
    assert ops == ["Sum", "Mul", "Softmax", "MatMul"]
    matmul = trace.rows[-1]
    assert matmul[3][0] == pytest.approx(np.linalg.norm(x.grad.numpy()))
    assert "Softmax" in capsys.readouterr().out


def test_trace_rows_name_the_layer_that_made_each_node():
    ta.manual_seed(0)
    model = ta.nn.CausalLM(11, 8, d_model=16, nhead=2, num_layers=2, dim_feedforward=32)
    with ta.sdpa_kernel("math"):
        logits = model(np.array([[1, 2, 3]]))
    with ta.trace_backward(print_table=False, names=model) as named:
        logits.sum().backward(retain_graph=True)
    with ta.trace_backward(print_table=False) as by_class:
        logits.sum().backward()
    rows = {(r[4], r[0]) for r in named.rows}
    assert ("layers.1.self_attn.out_proj", "LinearFunction") in rows and ("layers.0.self_attn", "Softmax") in rows
    assert ("head", "LinearFunction") in rows and ("", "Sum") in rows  # the sum was taken outside the model
    assert {(r[4], r[0]) for r in by_class.rows} >= {("MultiHeadAttention", "Softmax"), ("Linear", "LinearFunction")}
    assert "layers.0.ff.linear1" in named.table()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the NaN and inf are made on purpose
def test_detect_anomaly_names_the_op():
    x = ta.Tensor(np.array([-1.0, 2.0]), requires_grad=True)
    with ta.detect_anomaly(), pytest.raises(ta.debug.AnomalyError, match=r"Log forward .*\(2,\)"):
        x.log()
    y = ta.Tensor(np.array([0.0, 1.0]), requires_grad=True)
    out = y.sqrt().sum()  # forward fine, d sqrt / dy = inf at 0
    with ta.detect_anomaly(), pytest.raises(ta.debug.AnomalyError, match="Sqrt backward"):
        out.backward()
    mask = np.array([True, False])
    with ta.detect_anomaly():  # -inf in masked log-probabilities is not an anomaly
        F.log_softmax(ta.Tensor(np.array([1.0, 2.0]), requires_grad=True), mask=mask).sum()


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot program is not installed")
def test_to_dot_renders_svg_with_graphviz(tmp_path):
    _, _, loss = small_graph()
    path = tmp_path / "graph.svg"
    to_dot(loss, render=str(path))
    assert "<svg" in path.read_text() and "MatMul" in path.read_text()


def test_heatmap_grid_labels_queries_and_keys(tmp_path, monkeypatch):
    figure = pytest.importorskip("matplotlib.figure")
    from tinygrad_attn import viz

    figures, save = [], figure.Figure.savefig
    monkeypatch.setattr(figure.Figure, "savefig", lambda fig, *a, **k: (figures.append(fig), save(fig, *a, **k)))
    weights = np.random.default_rng(0).dirichlet(np.ones(3), size=(2, 4))  # (H=2, Tq=4, Tk=3)
    path = viz.heatmap_grid(weights, str(tmp_path / "h.png"), "title", queries=list("abcd"), keys=list("xyz"))
    assert path and (tmp_path / "h.png").stat().st_size > 1000
    axes = [a for a in figures[0].axes if a.get_title().startswith("head")]
    assert [a.get_title() for a in axes] == ["head 0", "head 1"]
    assert [t.get_text() for t in axes[0].get_yticklabels()] == list("abcd")
    assert [t.get_text() for t in axes[1].get_xticklabels()] == list("xyz")
    assert len(figures[0].axes) == 3  # the two heads and a colour bar


def _texts_and_overlaps(fig):
    """Every visible text of a drawn figure with its size in points, and the tick labels that overlap."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = [t for t in fig.findobj(lambda a: hasattr(a, "get_fontsize") and hasattr(a, "get_text"))
             if t.get_visible() and t.get_text().strip()]
    overlaps = []
    for ax in fig.axes:
        for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
            boxes = [t.get_window_extent(renderer) for t in labels if t.get_text().strip()]
            overlaps += [(a, b) for a, b in zip(boxes, boxes[1:]) if a.overlaps(b)]
    return texts, overlaps


@pytest.mark.parametrize("task_name, head", [("text", None), ("translate", None), ("translate", "1.2"),
                                             ("reverse", None)])
def test_attention_pictures_stay_readable_at_the_tasks_sizes(task_name, head, tmp_path):
    """No text under 7 pt (about 10 px at 100 dpi), no tick labels on top of each other, numbers in the cells
    only where they fit: the text task's 64 characters and the translation task's 6 panels of words."""
    pytest.importorskip("matplotlib")
    from tinygrad_attn import viz
    from tinygrad_attn.tasks import TextTask, get_task

    data = tmp_path / "t.txt"
    data.write_text("the quick brown fox jumps over the lazy dog. " * 40, encoding="utf-8")
    task = TextTask(data=str(data)) if task_name == "text" else get_task(task_name)
    model = task.build_model()
    _, batch = task.answer(model, task.sample_prompt())
    fig = viz.attention_figure(task, model, batch, head=head, title="input: 'a long enough title' " * 4)
    texts, overlaps = _texts_and_overlaps(fig)
    small = [(t.get_text(), t.get_fontsize()) for t in texts if t.get_fontsize() < viz.MIN_POINTS]
    assert not small and not overlaps, (small[:5], overlaps[:3])
    width, height = fig.get_size_inches() * fig.dpi
    title = fig._suptitle.get_window_extent(fig.canvas.get_renderer())
    assert title.x0 >= -1 and title.x1 <= width + 1, (title, width)  # the title inside the figure
    written = sum(len(ax.texts) for ax in fig.axes)  # weights written on small maps (translation's words, one
    assert (written > 0) == (task_name == "translate"), written  # head drawn large), not on 16 x 16 or 64 x 64
