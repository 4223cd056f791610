"""The training loop: progress, evaluation, early stopping, checkpoints, and callbacks for the rest.

Reproducibility: the model is initialised from `manual_seed(seed)`, the batch
of step s is drawn from its own generator default_rng([seed, s]), and the
learning rate follows a warm-up + cosine schedule over the task's default
step budget (not over --steps). So a run stopped at step 30 and resumed to
step 60 makes exactly the same updates as an uninterrupted 60-step run.

What the run folder holds, and its checks, are runs.py's. Pictures and the explorer's snapshots are not
this module's either: they come as callbacks (`viz.Pictures`, `explorer.Snapshots`, or your own), objects
with any of `on_train_start(run)`, `on_step_end(run)` and `on_train_end(run)`, each given the `Run`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import rng
from .memory import check_fits
from .nn import Module
from .optim import AdamW, clip_grad_norm_, warmup_cosine
from .runs import (
    CHECKPOINT,
    MODEL_SIZES,
    SIZE_FLAGS,
    TrainConfig,
    build_task,
    default_out,
    load_checkpoint,
    read_history,
    save_checkpoint,
    write_metrics,
)
from .tasks import Task, TextTask


@dataclass
class Run:
    """What a callback sees: the task, the model (in train mode during the run), the resolved config, the
    step reached, the last training loss, the history so far and, at the end, the metrics."""

    task: Task
    model: Module
    config: TrainConfig
    step: int = 0
    loss: float = float("nan")
    history: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, Any] | None = None
    stopped_early: bool = False


def _call(callbacks: list, hook: str, run: Run) -> None:
    for callback in callbacks:
        method = getattr(callback, hook, None)
        if method is not None:
            method(run)


class _Progress:
    """tqdm when it is installed, otherwise a line every few evaluations. The bar starts after the first
    step, which says it is compiling (on a first run, numba compiles the kernels then): an ETA measured on
    it would read hours."""

    def __init__(self, total: int, initial: int, enabled: bool, task: str, metric: str = "accuracy"):
        self.bar, self.metric, self.total, self.task, self.enabled = None, metric, total, task, enabled
        self.tqdm = None
        self.first = enabled and initial < total
        if enabled:
            try:
                from tqdm import tqdm

                self.tqdm = tqdm
            except ImportError:
                print("tqdm is not installed (pip install tqdm): progress is printed at each evaluation")
        if self.first:
            print(f"{task}: step {initial + 1} (compiles the kernels on a first run) ...", end="", flush=True)
            self.started = time.perf_counter()

    def update(self, step: int, loss: float, accuracy: float | None, rate: float) -> None:
        if self.first:
            print(f" {time.perf_counter() - self.started:.1f} s", flush=True)
            self.first = False
            if self.tqdm is not None:
                self.bar = self.tqdm(total=self.total, initial=step, desc=self.task, unit="step", dynamic_ncols=True)
            return
        if self.bar is not None:
            fields = {"loss": f"{loss:.4f}", "steps/s": f"{rate:.1f}"}
            if accuracy is not None and self.metric == "val_loss":
                fields["val_loss"] = f"{accuracy:.3f}"
                fields["bpc"] = f"{accuracy / math.log(2):.3f}"  # bits per character
            elif accuracy is not None:
                fields[self.metric] = f"{accuracy:.3f}"
            self.bar.set_postfix(fields, refresh=False)
            self.bar.update(1)

    def report(self, step: int, loss: float, value: float, metric: str = "accuracy") -> None:
        if self.enabled and self.tqdm is None:
            bpc = f" ({value / math.log(2):.3f} bits per character)" if metric == "val_loss" else ""
            print(f"step {step}: loss {loss:.4f}, held-out {metric} {value:.4f}{bpc}", flush=True)

    def close(self, step: int, stopped_early: bool) -> None:
        if self.first:  # no step was taken after all
            print(flush=True)
        if self.bar is not None:
            if stopped_early:  # the bar ends full at the step the run stopped, and says why
                self.bar.total = step
                self.bar.set_description(f"{self.task} (target reached)")
            self.bar.close()


def train(config: TrainConfig, callbacks: Iterable[Any] = ()) -> dict[str, Any]:
    """Train as `config` says, calling each callback's hooks; returns the metrics also written to
    <out>/metrics.json (`stopped_early` says whether the target was reached before the last step)."""
    callbacks = list(callbacks)
    out = config.out or default_out(config.task)
    path = os.path.join(out, CHECKPOINT)
    parts = None
    if config.resume:
        if not os.path.exists(path):
            raise FileNotFoundError(f"--resume: no checkpoint in {out} (expected {path})")
        parts = load_checkpoint(path)
        saved = parts["trainer"]["config"]
        if saved["task"] != config.task:
            raise ValueError(f"--resume: {path} is a {saved['task']!r} run, not {config.task!r}")
        for key, flag in SIZE_FLAGS.items():
            if getattr(config, key) is None:  # the run's own size
                setattr(config, key, saved.get(key))
            elif saved.get(key) is not None and getattr(config, key) != saved.get(key):
                raise ValueError(f"--resume: the run was trained with {flag} {saved.get(key)}, got "
                                 f"{getattr(config, key)}; drop {flag} to continue it")
    task = build_task({**vars(config), "task_state": None}, config.data)
    if parts is not None and task.state() != (parts["trainer"]["config"].get("task_state") or {}):
        raise ValueError(f"--resume: the text gives another vocabulary than the run's ({path}); give the same --data")
    config = config.resolved(task)
    if parts is not None and parts["trainer"]["config"].get("data_sha256") != config.data_sha256:
        raise ValueError(f"--resume: {config.data or 'the default text'} is not the text the run was trained on "
                         f"(its content changed since, or it is another file); resume with the same --data")
    if config.steps < 0 or config.batch_size <= 0 or config.lr <= 0 or config.checkpoint_every <= 0:
        raise ValueError("steps must be >= 0 and batch size, learning rate and checkpoint interval > 0")
    os.makedirs(config.out, exist_ok=True)

    rng.manual_seed(config.seed)
    model = task.build_model()
    optimizer = AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    schedule = warmup_cosine(config.lr, task.defaults.warmup, task.defaults.steps, min_lr=config.lr * 0.05)
    run = Run(task, model, config)
    unreached = 0.0 if task.higher_is_better else math.inf  # before any evaluation: accuracy 0, loss infinite
    value = unreached  # the last scheduled evaluation, which decides the stop
    if parts is not None:
        try:
            model.load_state_dict(parts["model"])
            optimizer.load_state_dict(parts["optimizer"])
        except KeyError as err:
            raise ValueError(f"--resume: {path} does not match this run: {err.args[0]}") from None
        rng.set_state(str(parts["trainer"]["rng"]))
        run.step = int(parts["trainer"]["step"])
        run.loss = float(parts["trainer"].get("loss", np.nan))  # as at the checkpoint: the run goes on
        value = float(parts["trainer"].get("accuracy", unreached))  # as if it had never stopped
        run.history = read_history(parts, path)
        every = task.defaults.eval_every
        last = run.history[-1] if run.history else {}
        if last.get("step") == run.step and run.step % every and not _curve_step(run.step, every):  # the final
            if _logged_step(run.step, every):  # report of the stopped run: an uninterrupted one has an entry here,
                last[task.metric] = None  # unevaluated,
            else:  # or none at all
                run.history.pop()

    one = task.batch(np.random.default_rng([config.seed, run.step]), 1)  # the size of an example's arrays
    per_example = sum(np.size(x) for v in vars(one).values() for x in (v if isinstance(v, tuple) else (v,)))
    check_fits("train", "a batch's token arrays", (config.batch_size, per_example), 8, 1,
               "use a smaller --batch-size")  # before a batch the machine cannot hold is drawn
    _call(callbacks, "on_train_start", run)
    start = time.perf_counter()
    progress = _Progress(config.steps, min(run.step, config.steps), config.progress, task.name, task.metric)
    reported = task.evaluate(model) if run.step else None
    model.train()
    while run.step < config.steps and not task.reached(value, config.target):
        batch = task.batch(np.random.default_rng([config.seed, run.step]), config.batch_size)
        optimizer.lr = schedule(run.step)
        optimizer.zero_grad()
        loss, _ = task.loss(model, batch)
        loss.backward()
        clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        run.step += 1
        run.loss = step_loss = loss.item()
        step, every = run.step, task.defaults.eval_every
        scheduled, final = step % every == 0, step == config.steps
        evaluated = scheduled or final or _curve_step(step, every)  # a curve point: drawn, never a reason to stop
        if evaluated:
            reported = task.evaluate(model)
            value = reported if scheduled else value
            if scheduled or final:
                progress.report(step, step_loss, reported, task.metric)
        if evaluated or _logged_step(step, every):
            run.history.append({"step": step, "loss": _finite(step_loss),
                                task.metric: _finite(reported) if evaluated else None,
                                "lr": optimizer.lr, "seconds": round(time.perf_counter() - start, 3)})
        _call(callbacks, "on_step_end", run)
        if step % config.checkpoint_every == 0:
            save_checkpoint(path, model, optimizer, step, config, step_loss, value, run.history)
        progress.update(step, step_loss, reported if scheduled or final else None,
                        step / (time.perf_counter() - start))
    run.stopped_early = run.step < config.steps
    progress.close(run.step, run.stopped_early)
    if reported is None:  # no step was taken: report the model as it is
        reported = task.evaluate(model)
    save_checkpoint(path, model, optimizer, run.step, config, run.loss, value, run.history)

    metrics = {
        "task": task.name,
        "steps": run.step,
        "planned_steps": config.steps,
        "stopped_early": run.stopped_early,
        "seconds": round(time.perf_counter() - start, 3),
        "final_loss": _finite(run.loss),  # strict JSON: no NaN
        "metric": task.metric,
        task.metric: _finite(reported),
        "target": config.target,
        "reached_target": reported is not None and task.reached(reported, config.target),
        "seed": config.seed,
        "batch_size": config.batch_size,
        "lr": config.lr,
        "model": {k: getattr(config, k) for k in MODEL_SIZES},
        "history": run.history,
    }
    if task.metric == "val_loss" and metrics["val_loss"] is not None:
        metrics["val_bits_per_char"] = round(TextTask.bits_per_character(metrics["val_loss"]), 4)
    write_metrics(config.out, metrics)
    run.metrics = metrics
    model.eval()
    _call(callbacks, "on_train_end", run)
    return metrics


def _curve_step(step: int, every: int) -> bool:
    """Five held-out evaluations per evaluation period, so the metric is a curve even when the run stops at
    its first scheduled evaluation; only the scheduled ones decide when to stop."""
    return step % max(1, every // 5) == 0


def _logged_step(step: int, every: int) -> bool:
    """Ten history entries (loss and learning rate) per evaluation period."""
    return step % max(1, every // 10) == 0


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x
