"""One self-contained HTML page of a model's attention: forward, backward, graph, training and a check.

    page = ta.viz.explore(model, tokens)          # in Jupyter, the page shows itself
    page.save("explain.html")                      # one file: no network, no external program

or, for a trained run: `tinygrad-attn explain --run runs/reverse --input "3 1 4 1 5" --out explain.html`.
collect.py gathers the numbers, page.html draws them (inline SVG and JavaScript), snapshots.py keeps the
maps a training run saw. docs/see-it.md says what each panel shows.
"""

from __future__ import annotations

import html
import json
import os
import time
from collections.abc import Callable
from importlib import resources
from typing import Any

import numpy as np

from ..nn.module import Module
from ..runs import CHECKPOINT, load_run, read_history
from ..tensor import Tensor
from .collect import MAX_TOKENS, collect
from .snapshots import load_snapshots

LANGUAGES = ("en", "fr")


def page_language(lang: str | None) -> str:
    """"en" or "fr": the one given, else the user's locale (LC_ALL, LC_MESSAGES, LANG: fr_FR.UTF-8 -> "fr"),
    else English."""
    if lang is None:
        for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
            value = os.environ.get(name, "")
            if value:
                return "fr" if value.lower().startswith("fr") else "en"
        return "en"
    if lang not in LANGUAGES:
        raise ValueError(f"explore: lang must be one of {', '.join(LANGUAGES)}, got {lang!r}")
    return lang


class Explorer:
    """The page: `.html` (the text), `.save(path)`, shown inline by Jupyter; `.stats` gives its size and
    build time."""

    def __init__(self, data: dict, title: str):
        self.data, self.title = data, title
        payload = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")  # once
        template = resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8")
        self.html = (template.replace("__TITLE__", html.escape(title)).replace("__LANG__", data["lang"])
                     .replace("__DATA__", payload))
        self.stats = {"bytes": len(self.html.encode("utf-8")), "data_bytes": len(payload),
                      "build_seconds": data["seconds"]}

    def _repr_html_(self) -> str:
        """For Jupyter, VS Code and other notebook front ends: the page inside an iframe (srcdoc), so its
        ids, styles and scripts stay its own, whatever else the notebook shows."""
        return (f'<iframe srcdoc="{html.escape(self.html, quote=True)}" title="{html.escape(self.title)}" '
                'style="width: 100%; height: 900px; border: 1px solid #ddd"></iframe>')

    def save(self, path: str | os.PathLike) -> str:
        """Write the page to `path` (atomically: a temporary file renamed over it); returns the path."""
        path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"explore: cannot write {path}: the folder {folder} does not exist")
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(self.html)
        os.replace(tmp, path)
        return path


def _default_loss(model: Module, inputs: Any, targets: Any, loss: Callable | None) -> Callable[[], Tensor]:
    from ..nn import functional as F

    def run() -> Tensor:
        output = model(*inputs) if isinstance(inputs, tuple) else model(inputs)
        logits = output[0] if isinstance(output, tuple) else output
        if loss is not None:
            return loss(logits, targets)
        if targets is not None:
            t = np.asarray(targets._data if isinstance(targets, Tensor) else targets)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), Tensor(t.reshape(-1).astype(np.int64)))
        if isinstance(inputs, tuple) or logits.ndim != 3 or logits.shape[1] < 2:
            raise ValueError("explore: give targets (or a loss) for this model")
        tokens = np.asarray(inputs._data if isinstance(inputs, Tensor) else inputs)  # next-token prediction
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), Tensor(tokens[:, 1:].reshape(-1)))

    return run


def explore(model: Module, inputs: Any, targets: Any = None, loss: Callable | None = None,
            labels: dict | None = None, title: str | None = None, snapshots: dict | None = None,
            curve: list | None = None, check: bool = True, lang: str | None = None) -> Explorer:
    """The explorer page of `model` on `inputs` (token ids (B, T), or a tuple of the model's arguments),
    for the first example of the batch.

    The loss: `loss(logits, targets)` when given; else cross-entropy against `targets`; else, for a
    language model, next-token cross-entropy on the inputs themselves. `labels` maps an attention kind
    ("self-attention", "encoder", "decoder_self", "cross") to (query labels, key labels); token ids are
    shown otherwise. `snapshots` (from `explorer.load_snapshots(run)`) adds the training slider, `curve`
    ([[step, loss], ...]) the loss curve beside it. `lang` ("en" or "fr") is the page's language, by
    default the user's locale's.
    """
    if not isinstance(model, Module):
        raise TypeError(f"explore: model must be a Module, got {type(model).__name__}")
    lang = page_language(lang)
    for given in inputs if isinstance(inputs, tuple) else (inputs,):
        shape = np.shape(given._data if isinstance(given, Tensor) else given)
        if 0 in shape:
            raise ValueError(f"explore: inputs of shape {shape} are empty; give at least one position")
    data = collect(model, _default_loss(model, inputs, targets, loss), labels, check=check)
    data["snapshots"], data["curve"], data["lang"] = snapshots, curve or [], lang
    return Explorer(data, title or f"{type(model).__name__}: attention forward and backward")


def explore_run(run: str, text: str, check: bool = True, lang: str | None = None) -> Explorer:
    """The page of a trained run folder on one input (a task's prompt, or text for the text task), in
    `lang` ("en" or "fr"; by default the user's locale's)."""
    started = time.perf_counter()
    lang = page_language(lang)
    task, model, parts = load_run(run)
    answer, batch = task.answer(model, text)
    data = collect(model, lambda: task.loss(model, batch)[0], task.labels(batch), check=check)
    for panel in data["attention"]:  # a task labels a decoder's row with the token it predicts
        panel["rows_predict"] = panel["kind"] != "encoder"
    data["lang"], data["input_text"] = lang, text
    snapshots = load_snapshots(run)
    history = read_history(parts, os.path.join(run, CHECKPOINT))
    data["snapshots"] = snapshots
    data["curve"] = [[h["step"], h["loss"]] for h in history if h.get("loss") is not None]
    data["seconds"] = round(time.perf_counter() - started, 3)
    return Explorer(data, f"{task.name}: {text!r:.60} -> {answer!r:.60}")


__all__ = ["MAX_TOKENS", "Explorer", "explore", "explore_run", "load_snapshots"]
