"""Attention maps kept while a run trains (`train --snapshots N`), for the explorer's slider.

`Snapshots(n)` is a training callback (see train.py). It takes the maps of one prompt (the task's sample
prompt unless another is given) in eval mode, without touching the training's random generator: at every
step at first, then, each time it holds more than 2n, it keeps every other one and takes half as often. So
however early the run stops (a reached target), the n it writes at the end are spread over the steps
actually run, the first and the last included. The maps are those of the model's last attention kind
(cross-attention for the encoder-decoder task, self-attention otherwise), pooled beyond MAX_TOKENS
positions; the file's format is runs.py's (`write_snapshots`, `read_snapshots`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import rng
from ..runs import read_snapshots, write_snapshots
from .collect import MAX_TOKENS, pool, pooled_labels


class Snapshots:
    """A training callback keeping `n` snapshots of the attention maps of `prompt` (default: the task's
    sample prompt) spread over the steps the run takes."""

    def __init__(self, n: int, prompt: str | None = None):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"Snapshots: n must be an int >= 1, got {n!r}")
        self.n, self.prompt, self.every = n, prompt, 1
        self.taken: dict[str, list] = {"steps": [], "loss": [], "maps": []}

    def on_train_start(self, run: Any) -> None:
        self.task, self.out = run.task, run.config.out
        self.prompt = self.task.sample_prompt() if self.prompt is None else self.prompt
        saved = read_snapshots(self.out) if run.config.resume else None
        if saved is not None and saved["prompt"] == self.prompt:  # a resumed run goes on with its snapshots
            self.taken = {"steps": saved["steps"], "loss": saved["loss"], "maps": list(saved["maps"])}
            self.labels = saved["labels"]
        while run.step // self.every > 2 * self.n:  # as often as the run has come to take them
            self.every *= 2
        self.take(run)

    def on_step_end(self, run: Any) -> None:
        if run.step % self.every == 0:
            self.take(run)
            if run.step % run.config.checkpoint_every == 0:
                self.write(self.taken)

    def on_train_end(self, run: Any) -> None:
        self.take(run)
        last, m = len(self.taken["steps"]) - 1, min(self.n, len(self.taken["steps"]))
        keep = sorted({round(i * last / (m - 1)) for i in range(m)}) if m > 1 else [last]  # the last one kept
        self.write({key: [values[i] for i in keep] for key, values in self.taken.items()})

    def take(self, run: Any) -> None:
        if run.step in self.taken["steps"]:
            return
        model = run.model
        state = rng.state()  # the training's generator: untouched by the snapshot
        was_training = model.training
        try:
            _, batch = self.task.answer(model, self.prompt)
            maps = self.task.attention_maps(model, batch)
        finally:
            model.train(was_training)
            rng.set_state(state)
        kind = "cross" if "cross" in maps else list(maps)[-1]
        layers = np.stack([pool(layer, (1, 2), summed=(2,)) for layer in maps[kind]])  # (L, H, Tq, Tk)
        q_labels, k_labels = (list(map(str, x)) if x is not None else None
                              for x in self.task.labels(batch).get(kind, (None, None)))
        self.labels = {"kind": kind, "q": q_labels, "k": k_labels}
        self.taken["steps"].append(run.step)
        self.taken["loss"].append(run.loss)
        self.taken["maps"].append(layers.astype(np.float16))
        if len(self.taken["steps"]) > 2 * self.n:  # every other one, the first kept; then half as often
            self.taken = {key: values[::2] for key, values in self.taken.items()}
            self.every *= 2

    def write(self, taken: dict[str, list]) -> None:
        write_snapshots(self.out, taken["steps"], taken["loss"], taken["maps"], self.prompt, self.labels)


def load_snapshots(run: str) -> dict | None:
    """A run's snapshots as the explorer page takes them, or None when the run kept none."""
    saved = read_snapshots(run)
    if saved is None:
        return None
    maps, labels = saved["maps"], saved["labels"]
    tq, tk = maps.shape[-2:]
    q = labels.get("q") or [str(i) for i in range(tq)]
    k = labels.get("k") or [str(i) for i in range(tk)]
    q, k = (pooled_labels(x) if len(x) > MAX_TOKENS else x for x in (q, k))
    if (len(q), len(k)) != (tq, tk):
        raise ValueError(f"{run}: snapshots.npz has {len(q)} x {len(k)} labels for maps of {tq} x {tk} positions")
    return {"steps": saved["steps"],
            "loss": [None if not np.isfinite(v) else float(f"{v:.4g}") for v in saved["loss"]],
            "maps": np.round(maps, 3).tolist(), "prompt": saved["prompt"], "kind": labels["kind"],
            "q_labels": q, "k_labels": k}
