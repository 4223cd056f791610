"""Attention maps kept while a run trains (`train --snapshots N`), for the explorer's slider.

At N steps spread evenly over the run (step 0 included), the maps of the task's sample prompt are taken
in eval mode, without touching the training's random generator, and written to <run>/snapshots.npz
(atomically, no pickle): steps (N,), loss (N,), maps (N, layers, H, Tq, Tk) as float16, and the prompt
and labels as JSON. The maps are those of the model's last attention kind (cross-attention for the
encoder-decoder task, self-attention otherwise), pooled beyond MAX_TOKENS positions.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from .. import rng
from ..serialization import load, save
from .collect import pool, pooled_labels

FILE = "snapshots.npz"


def snapshot_steps(total: int, n: int) -> set[int]:
    """n steps spread evenly over 0..total, both ends included."""
    if n <= 0:
        return set()
    if n == 1:
        return {total}
    return {round(i * total / (n - 1)) for i in range(n)}


class Snapshots:
    """The maps of one prompt at chosen steps; `take(step, loss, model)` records one and rewrites the file."""

    def __init__(self, task: Any, out: str, steps: set[int], resume: bool):
        self.task, self.path, self.steps = task, os.path.join(out, FILE), steps
        self.prompt = task.sample_prompt()
        self.taken: dict[str, list] = {"steps": [], "loss": [], "maps": []}
        if resume and os.path.exists(self.path):
            saved = load(self.path)
            self.taken = {"steps": list(saved["steps"]), "loss": list(saved["loss"]), "maps": list(saved["maps"])}

    def take(self, step: int, loss: float, model: Any) -> None:
        if step not in self.steps or step in self.taken["steps"]:
            return
        from ..viz import attention_maps

        state = rng.state()  # the training's generator: untouched by the snapshot
        was_training = model.training
        try:
            _, batch = self.task.answer(model, self.prompt)
            maps = attention_maps(self.task, model, batch)
        finally:
            model.train(was_training)
            rng.set_state(state)
        kind = "cross" if "cross" in maps else list(maps)[-1]
        layers = np.stack([pool(layer, (1, 2), summed=(2,)) for layer in maps[kind]])  # (L, H, Tq, Tk)
        self.kind, self.labels = kind, self.task.labels(batch).get(kind, (None, None))
        self.taken["steps"].append(step)
        self.taken["loss"].append(loss)
        self.taken["maps"].append(layers.astype(np.float16))
        q_labels, k_labels = (list(map(str, x)) if x is not None else None for x in self.labels)
        save({"steps": np.asarray(self.taken["steps"]), "loss": np.asarray(self.taken["loss"], np.float64),
              "maps": np.stack(self.taken["maps"]), "prompt": np.asarray(self.prompt),
              "labels": np.asarray(json.dumps({"kind": kind, "q": q_labels, "k": k_labels}))}, self.path)


def load_snapshots(run: str) -> dict | None:
    """A run's snapshots as the explorer page takes them, or None when the run kept none."""
    path = os.path.join(run, FILE)
    if not os.path.exists(path):
        return None
    saved = load(path)
    labels = json.loads(str(saved["labels"]))
    maps = saved["maps"].astype(np.float64)
    tq, tk = maps.shape[-2:]
    q = labels.get("q") or [str(i) for i in range(tq)]
    k = labels.get("k") or [str(i) for i in range(tk)]
    return {"steps": [int(s) for s in saved["steps"]],
            "loss": [None if not np.isfinite(v) else float(f"{v:.4g}") for v in saved["loss"]],
            "maps": np.round(maps, 3).tolist(), "prompt": str(saved["prompt"]), "kind": labels["kind"],
            "q_labels": pooled_labels(q) if len(q) > tq else q, "k_labels": pooled_labels(k) if len(k) > tk else k}
