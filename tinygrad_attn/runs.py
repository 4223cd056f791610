"""A run folder: what `train` writes and `explain`, `attend`, `generate` and `--resume` read, and the checks
that come before any model is built.

<run>/checkpoint.npz holds the model weights under their state_dict names, and the optimizer and trainer
state under "optimizer/..." and "trainer/...", names no parameter can have (a parameter name never contains
"/"); <run>/metrics.json the run's summary and history; <run>/snapshots.npz the attention maps kept while it
trained (`Snapshots`); curves.png and attention.png its pictures. Every file is written atomically (see
serialization.py) and read back whole and checked: a tampered or foreign file is one clear error naming it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import rng
from .nn import Module
from .optim import Optimizer, flat_state
from .serialization import load, save
from .tasks import Task, TextTask, get_task

CHECKPOINT = "checkpoint.npz"
METRICS = "metrics.json"
MODEL_SIZES = ("d_model", "nhead", "num_layers", "dim_feedforward", "dropout")  # what `Task.with_model` takes


def default_out(task: str) -> str:
    """The run folder when --out is not given: runs/<task>."""
    return os.path.join("runs", task)


@dataclass
class TrainConfig:
    task: str = "reverse"
    steps: int | None = None  # default: the task's
    batch_size: int | None = None
    lr: float | None = None
    seed: int = 0
    out: str | None = None  # default: runs/<task>
    checkpoint_every: int = 200
    resume: bool = False
    target: float | None = None  # stop once the task's metric reaches it (default: the task's)
    progress: bool = True
    data: str | None = None  # the text task's file (default: the standard library's docstrings)
    block_size: int | None = None  # the text task's window
    d_model: int | None = None  # model size overrides (default: the task's)
    nhead: int | None = None
    num_layers: int | None = None
    dim_feedforward: int | None = None
    dropout: float | None = None
    task_state: dict[str, Any] | None = None  # what rebuilds the task without its file (saved with the run)
    data_sha256: str | None = None  # the --data file's content, so that --resume refuses an edited file

    def model_sizes(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in MODEL_SIZES}

    def resolved(self, task: Task) -> TrainConfig:
        d = task.defaults
        return TrainConfig(
            data=self.data,
            block_size=getattr(task, "block_size", None),
            d_model=d.d_model, nhead=d.nhead, num_layers=d.num_layers, dim_feedforward=d.dim_feedforward,
            dropout=d.dropout,
            task_state=task.state(),
            data_sha256=file_sha256(self.data) if self.data else None,
            task=task.name,
            steps=d.steps if self.steps is None else self.steps,
            batch_size=d.batch_size if self.batch_size is None else self.batch_size,
            lr=d.lr if self.lr is None else self.lr,
            seed=self.seed,
            out=self.out or default_out(task.name),
            checkpoint_every=self.checkpoint_every,
            resume=self.resume,
            target=d.target if self.target is None else self.target,
            progress=self.progress,
        )


def file_sha256(path: str) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB pieces."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for piece in iter(lambda: f.read(1 << 20), b""):
            digest.update(piece)
    return digest.hexdigest()


SIZE_FLAGS = {"block_size": "--block-size", "d_model": "--d-model", "nhead": "--heads", "num_layers": "--layers",
               "dim_feedforward": "--dim-feedforward", "dropout": "--dropout"}


def check_config_against_weights(config: dict[str, Any], weights: dict[str, Any], path: str) -> None:
    """A run's saved sizes must be the ones its weights have, each an int >= 1: checked before a model is built,
    so a tampered config (d_model 10**6, num_layers 100000, block_size 10**9) is one clear error, not an
    allocation the machine cannot hold. The weights bound every size: they were read whole from the file."""
    def shape(suffix: str) -> tuple[int, ...] | None:
        found = [np.shape(v) for k, v in weights.items() if k.endswith(suffix)]
        return found[0] if found else None

    for key in ("block_size", "d_model", "nhead", "num_layers", "dim_feedforward"):
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{path}: the run's config says {key} {value!r}; expected an int >= 1")
    dropout = config.get("dropout")
    if dropout is not None and (isinstance(dropout, bool) or not isinstance(dropout, (int, float))
                                or not 0 <= dropout < 1):
        raise ValueError(f"{path}: the run's config says dropout {dropout!r}; expected a number in [0, 1)")
    checks = []
    embed = shape("embed.weight")
    if embed is not None and len(embed) == 2:
        checks.append(("d_model", embed[1]))
    ff = shape("ff.linear1.weight")
    if ff is not None and len(ff) == 2:
        checks.append(("dim_feedforward", ff[0]))
    position = shape("position.embedding.weight")  # the text task's learned positions: one per window place
    if config.get("task") == "text" and position is not None and len(position) == 2:
        checks.append(("block_size", position[0]))
    groups: dict[str, set[int]] = {}  # layers.N. (a causal LM), encoder.N. and decoder.N. (a seq2seq model)
    for key in weights:
        parts = key.split(".")
        if len(parts) > 2 and parts[0] in ("layers", "encoder", "decoder") and parts[1].isdigit():
            groups.setdefault(parts[0], set()).add(int(parts[1]))
    for layers in groups.values():
        checks.append(("num_layers", len(layers)))
    for key, expected in checks:
        value = config.get(key)
        if value is not None and value != expected:
            raise ValueError(f"{path}: the run's config says {key} {value!r} but its weights have {expected}; "
                             "the config was changed after training")
    heads, width = config.get("nhead"), config.get("d_model")
    if heads is not None and isinstance(width, int) and width % heads:
        raise ValueError(f"{path}: the run's config says nhead {heads!r}, which does not divide d_model {width!r}")
    state = config.get("task_state")
    if config.get("task") == "text" and state is not None:
        vocab = state.get("vocab") if isinstance(state, dict) else None
        if not isinstance(vocab, str) or not vocab or (embed is not None and len(vocab) != embed[0]):
            raise ValueError(f"{path}: the run's saved vocabulary does not match its weights "
                             f"({len(vocab) if isinstance(vocab, str) else vocab!r} characters for "
                             f"{embed[0] if embed else '?'} embeddings)")


def read_json(text: Any, path: str, what: str) -> Any:
    """A JSON document kept in a run's file, or one clear error naming the file and the field."""
    try:
        return json.loads(str(text))
    except (json.JSONDecodeError, RecursionError):
        raise ValueError(f"{path}: {what} is not valid JSON (or is nested too deeply)") from None


def read_history(parts: dict[str, Any], path: str, metric: str | None = None) -> list[dict[str, Any]]:
    """The history a checkpoint keeps: a list of {"step": int >= 0, "loss": number or null, ...}, checked."""
    history = read_json(parts["trainer"].get("history", "[]"), path, "trainer/history")
    if not isinstance(history, list):
        raise ValueError(f"{path}: trainer/history must be a list of entries, got {type(history).__name__}")
    for i, entry in enumerate(history):
        ok = isinstance(entry, dict) and isinstance(entry.get("step"), int) and not isinstance(entry["step"], bool)
        ok = ok and entry["step"] >= 0 and all(
            v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for k, v in entry.items())
        if not ok:
            raise ValueError(f"{path}: trainer/history entry {i} is not a {{step, loss, ...}} record of numbers: "
                             f"{str(entry)[:80]}")
    return history


def save_checkpoint(path: str, model: Module, optimizer: Optimizer, step: int, config: TrainConfig,
                    loss: float = float("nan"), accuracy: float = 0.0, history: list | None = None) -> None:
    """Everything a resumed run needs to continue exactly: weights, optimizer state, the step, the
    generator's state, the config, and the last loss and evaluated accuracy (so that a resumed run stops
    where an uninterrupted one would)."""
    state: dict[str, Any] = dict(model.state_dict())
    state.update({f"optimizer/{k}": v for k, v in flat_state(optimizer.state_dict()).items()})
    state["trainer/step"] = np.asarray(step)
    state["trainer/loss"] = np.asarray(loss)
    state["trainer/accuracy"] = np.asarray(accuracy)
    state["trainer/history"] = np.asarray(json.dumps(history or []))
    state["trainer/rng"] = np.asarray(rng.state())
    state["trainer/config"] = np.asarray(json.dumps(vars(config)))
    save(state, path)


def load_checkpoint(path: str) -> dict[str, Any]:
    """Split a checkpoint into model weights, optimizer state and trainer fields."""
    flat = load(path)
    parts: dict[str, Any] = {"model": {}, "optimizer": {}, "trainer": {}}
    for key, value in flat.items():
        section, _, name = key.partition("/") if "/" in key else ("model", "", key)
        parts[section][name] = value
    missing = [f"trainer/{k}" for k in ("step", "rng", "config") if k not in parts["trainer"]]
    if missing or not parts["model"]:
        raise ValueError(f"{path} is not a training checkpoint: it lacks {missing or ['model weights']}")
    parts["trainer"]["config"] = read_json(parts["trainer"]["config"], path, "trainer/config")
    if not isinstance(parts["trainer"]["config"], dict) or "task" not in parts["trainer"]["config"]:
        raise ValueError(f"{path}: trainer/config names no task")
    check_config_against_weights(parts["trainer"]["config"], parts["model"], path)  # before any model is built
    read_history(parts, path)
    return parts


def build_task(config: dict[str, Any], data: str | None = None) -> Task:
    """A run's task from its config: the text task from its file (`data`) or from the saved vocabulary,
    with the model size the config gives."""
    if config.get("task") == "text":
        if data is not None or not config.get("task_state"):
            task = TextTask(data=data, block_size=config.get("block_size"))
        else:
            task = TextTask(**config["task_state"])
    else:
        task = get_task(config["task"], data)
    sizes = {k: config.get(k) for k in MODEL_SIZES}
    return task.with_model(**sizes)


def load_run(out: str) -> tuple[Task, Module, dict[str, Any]]:
    """The task and trained model of a run folder."""
    path = os.path.join(out, CHECKPOINT)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint in {out} (expected {path})")
    parts = load_checkpoint(path)
    try:
        task = build_task(parts["trainer"]["config"])
    except (ValueError, TypeError, KeyError) as err:  # the saved config, not a flag of this command
        message = str(err.args[0]) if err.args else type(err).__name__
        raise ValueError(f"{path}: the run's saved config is not valid ({message})") from None
    model = task.build_model()
    try:
        model.load_state_dict(parts["model"])
    except KeyError as err:
        raise ValueError(f"{path} does not hold this task's model: {err.args[0]}") from None
    return task, model, parts




def write_metrics(out: str, metrics: dict[str, Any]) -> None:
    """<out>/metrics.json, strict JSON (no NaN), written atomically."""
    path = os.path.join(out, METRICS)
    with open(path + ".tmp", "w") as f:
        json.dump(metrics, f, indent=2, allow_nan=False)
    os.replace(path + ".tmp", path)


SNAPSHOTS = "snapshots.npz"


def write_snapshots(out: str, steps: list[int], loss: list[float], maps: list[np.ndarray], prompt: str,
                    labels: dict[str, Any]) -> None:
    """<out>/snapshots.npz: steps (N,), loss (N,), maps (N, layers, H, Tq, Tk) float16, the prompt, and the
    labels {"kind", "q", "k"} as JSON; atomically, no pickle."""
    save({"steps": np.asarray(steps, np.int64), "loss": np.asarray(loss, np.float64),
          "maps": np.stack(maps).astype(np.float16), "prompt": np.asarray(prompt),
          "labels": np.asarray(json.dumps(labels))}, os.path.join(out, SNAPSHOTS))


def read_snapshots(run: str) -> dict[str, Any] | None:
    """A run's snapshots.npz, checked whole (None when the run kept none): a file another program wrote or
    changed is one clear error naming it and what is wrong, never a page of wrong maps."""
    path = os.path.join(run, SNAPSHOTS)
    if not os.path.exists(path):
        return None
    saved = load(path)
    missing = [k for k in ("steps", "loss", "maps", "prompt", "labels") if k not in saved]
    if missing:
        raise ValueError(f"{path}: not a snapshots file: it lacks {missing}")
    steps, loss, maps = (np.asarray(saved[k]) for k in ("steps", "loss", "maps"))
    labels = read_json(saved["labels"], path, "labels")
    if steps.ndim != 1 or steps.dtype.kind not in "iu" or (steps < 0).any():
        raise ValueError(f"{path}: steps must be a list of step numbers, got {steps.dtype} of shape {steps.shape}")
    if maps.ndim != 5 or maps.dtype.kind != "f" or loss.shape != steps.shape or len(maps) != len(steps):
        raise ValueError(f"{path}: expected maps (steps, layers, heads, Tq, Tk) and a loss per step for its "
                         f"{len(steps)} steps, got maps {maps.shape} and loss {loss.shape}")
    if not np.isfinite(maps).all() or (maps < 0).any() or (maps > 1.001).any():
        raise ValueError(f"{path}: the maps hold values that are not attention weights (NaN, negative or above 1): "
                         "the run diverged or the file was changed")
    tq, tk = maps.shape[-2:]
    ok = isinstance(labels, dict) and isinstance(labels.get("kind"), str)
    for key, n in (("q", tq), ("k", tk)):
        given = labels.get(key) if ok else None
        ok = ok and (given is None or (isinstance(given, list) and all(isinstance(x, str) for x in given)
                                       and len(given) >= n))  # more: positions the explorer pooled
    if not ok:
        raise ValueError(f"{path}: labels must be {{kind, q, k}} with {tq} query and {tk} key labels, got "
                         f"{str(labels)[:120]}")
    return {"steps": steps.tolist(), "loss": loss.tolist(), "maps": maps.astype(np.float64),
            "prompt": str(saved["prompt"]), "labels": labels}

