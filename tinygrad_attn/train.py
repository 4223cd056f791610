"""Train a model on a toy task: progress, evaluation, early stopping, checkpoints and attention maps.

Reproducibility: the model is initialised from `manual_seed(seed)`, the batch
of step s is drawn from its own generator default_rng([seed, s]), and the
learning rate follows a warm-up + cosine schedule over the task's default
step budget (not over --steps). So a run stopped at step 30 and resumed to
step 60 makes exactly the same updates as an uninterrupted 60-step run.

checkpoint.npz holds the model weights under their state_dict names, and
the optimizer and trainer state under "optimizer/..." and "trainer/...",
names no parameter can have (a parameter name never contains "/").
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import rng
from .nn import Module
from .optim import AdamW, clip_grad_norm_, warmup_cosine
from .serialization import load, save
from .tasks import Task, get_task

CHECKPOINT = "checkpoint.npz"


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
    target: float | None = None  # stop once held-out exact match reaches it (default: the task's)
    progress: bool = True
    plot: bool = True

    def resolved(self, task: Task) -> TrainConfig:
        d = task.defaults
        return TrainConfig(
            task=task.name,
            steps=d.steps if self.steps is None else self.steps,
            batch_size=d.batch_size if self.batch_size is None else self.batch_size,
            lr=d.lr if self.lr is None else self.lr,
            seed=self.seed,
            out=self.out or os.path.join("runs", task.name),
            checkpoint_every=self.checkpoint_every,
            resume=self.resume,
            target=d.target if self.target is None else self.target,
            progress=self.progress,
            plot=self.plot,
        )


def save_checkpoint(path: str, model: Module, optimizer: AdamW, step: int, config: TrainConfig,
                    loss: float = float("nan"), accuracy: float = 0.0) -> None:
    """Everything a resumed run needs to continue exactly: weights, optimizer state, the step, the
    generator's state, the config, and the last loss and evaluated accuracy (so that a resumed run stops
    where an uninterrupted one would)."""
    state: dict[str, Any] = dict(model.state_dict())
    state.update({f"optimizer/{k}": v for k, v in optimizer.state_dict().items()})
    state["trainer/step"] = np.asarray(step)
    state["trainer/loss"] = np.asarray(loss)
    state["trainer/accuracy"] = np.asarray(accuracy)
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
    try:
        parts["trainer"]["config"] = json.loads(str(parts["trainer"]["config"]))
    except json.JSONDecodeError:
        raise ValueError(f"{path}: trainer/config is not valid JSON") from None
    if not isinstance(parts["trainer"]["config"], dict) or "task" not in parts["trainer"]["config"]:
        raise ValueError(f"{path}: trainer/config names no task")
    return parts


def load_run(out: str) -> tuple[Task, Module, dict[str, Any]]:
    """The task and trained model of a run folder."""
    path = os.path.join(out, CHECKPOINT)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint in {out} (expected {path})")
    parts = load_checkpoint(path)
    task = get_task(parts["trainer"]["config"]["task"])
    model = task.build_model()
    try:
        model.load_state_dict(parts["model"])
    except KeyError as err:
        raise ValueError(f"{path} does not hold this task's model: {err.args[0]}") from None
    return task, model, parts


class _Progress:
    """tqdm when it is installed, otherwise a line every few evaluations."""

    def __init__(self, total: int, initial: int, enabled: bool, task: str):
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, initial=initial, desc=task, unit="step", dynamic_ncols=True)
            except ImportError:
                print("tqdm is not installed (pip install tqdm): progress is printed at each evaluation")
        self.enabled = enabled

    def update(self, loss: float, accuracy: float | None, rate: float) -> None:
        if self.bar is not None:
            fields = {"loss": f"{loss:.4f}", "steps/s": f"{rate:.1f}"}
            if accuracy is not None:
                fields["acc"] = f"{accuracy:.3f}"
            self.bar.set_postfix(fields, refresh=False)
            self.bar.update(1)

    def report(self, step: int, loss: float, accuracy: float) -> None:
        if self.enabled and self.bar is None:
            print(f"step {step}: loss {loss:.4f}, held-out exact match {accuracy:.3f}", flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def train(config: TrainConfig) -> dict[str, Any]:
    """Train as `config` says; returns the metrics also written to <out>/metrics.json."""
    task = get_task(config.task)
    config = config.resolved(task)
    if config.steps < 0 or config.batch_size <= 0 or config.lr <= 0 or config.checkpoint_every <= 0:
        raise ValueError("steps must be >= 0 and batch size, learning rate and checkpoint interval > 0")
    os.makedirs(config.out, exist_ok=True)
    path = os.path.join(config.out, CHECKPOINT)

    rng.manual_seed(config.seed)
    model = task.build_model()
    optimizer = AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    schedule = warmup_cosine(config.lr, task.defaults.warmup, task.defaults.steps, min_lr=config.lr * 0.05)
    step = 0
    if config.resume:
        if not os.path.exists(path):
            raise FileNotFoundError(f"--resume: no checkpoint in {config.out} (expected {path})")
        parts = load_checkpoint(path)
        if parts["trainer"]["config"]["task"] != task.name:
            raise ValueError(f"--resume: {path} is a {parts['trainer']['config']['task']!r} run, not {task.name!r}")
        try:
            model.load_state_dict(parts["model"])
            optimizer.load_state_dict(parts["optimizer"])
        except KeyError as err:
            raise ValueError(f"--resume: {path} does not match this run: {err.args[0]}") from None
        rng.set_state(str(parts["trainer"]["rng"]))
        step = int(parts["trainer"]["step"])

    start = time.perf_counter()
    progress = _Progress(config.steps, min(step, config.steps), config.progress, task.name)
    loss_value, accuracy = float("nan"), 0.0  # accuracy: of the last scheduled evaluation, which decides the stop
    if config.resume:  # as they were at the checkpoint: the run goes on as if never stopped
        loss_value = float(parts["trainer"].get("loss", np.nan))
        accuracy = float(parts["trainer"].get("accuracy", 0.0))
    reported = task.evaluate(model) if step else 0.0
    model.train()
    while step < config.steps and accuracy < config.target:
        batch = task.batch(np.random.default_rng([config.seed, step]), config.batch_size)
        optimizer.lr = schedule(step)
        optimizer.zero_grad()
        loss, _ = task.loss(model, batch)
        loss.backward()
        clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        loss_value = loss.item()
        scheduled = step % task.defaults.eval_every == 0
        if scheduled or step == config.steps:  # the last step is evaluated for the report, not for stopping
            reported = task.evaluate(model)
            accuracy = reported if scheduled else accuracy
            progress.report(step, loss_value, reported)
        if step % config.checkpoint_every == 0:
            save_checkpoint(path, model, optimizer, step, config, loss_value, accuracy)
        progress.update(loss_value, reported if scheduled or step == config.steps else None,
                        step / (time.perf_counter() - start))
    progress.close()
    save_checkpoint(path, model, optimizer, step, config, loss_value, accuracy)

    metrics = {
        "task": task.name,
        "steps": step,
        "seconds": round(time.perf_counter() - start, 3),
        "final_loss": loss_value if math.isfinite(loss_value) else None,  # strict JSON: no NaN
        "accuracy": reported,
        "target": config.target,
        "reached_target": reported >= config.target,
        "seed": config.seed,
        "batch_size": config.batch_size,
        "lr": config.lr,
    }
    with open(os.path.join(config.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2, allow_nan=False)
    if config.plot:
        from .viz import plot_attention

        _, batch = task.answer(model, task.sample_prompt())
        plot_attention(task, model, batch, os.path.join(config.out, "attention.png"))
    return metrics
