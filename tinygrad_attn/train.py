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

import hashlib
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
from .tasks import Task, TextTask, get_task

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
    target: float | None = None  # stop once the task's metric reaches it (default: the task's)
    progress: bool = True
    plot: bool = True
    data: str | None = None  # the text task's file (default: the standard library's docstrings)
    block_size: int | None = None  # the text task's window
    d_model: int | None = None  # model size overrides (default: the task's)
    nhead: int | None = None
    num_layers: int | None = None
    dim_feedforward: int | None = None
    dropout: float | None = None
    task_state: dict[str, Any] | None = None  # what rebuilds the task without its file (saved with the run)
    data_sha256: str | None = None  # the --data file's content, so that --resume refuses an edited file
    snapshots: int = 0  # keep the sample prompt's attention maps at this many steps (the explorer's slider)

    def model_sizes(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("d_model", "nhead", "num_layers", "dim_feedforward", "dropout")}

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
            out=self.out or os.path.join("runs", task.name),
            checkpoint_every=self.checkpoint_every,
            resume=self.resume,
            target=d.target if self.target is None else self.target,
            progress=self.progress,
            plot=self.plot,
            snapshots=self.snapshots,
        )


def file_sha256(path: str) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB pieces."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for piece in iter(lambda: f.read(1 << 20), b""):
            digest.update(piece)
    return digest.hexdigest()


_SIZE_FLAGS = {"block_size": "--block-size", "d_model": "--d-model", "nhead": "--heads", "num_layers": "--layers",
               "dim_feedforward": "--dim-feedforward", "dropout": "--dropout"}


def check_config_against_weights(config: dict[str, Any], weights: dict[str, Any], path: str) -> None:
    """A run's saved sizes must be the ones its weights have: checked before a model is built, so a tampered
    config (d_model 10**6) is one clear error, not an allocation the machine cannot hold."""
    def shape(suffix: str) -> tuple[int, ...] | None:
        found = [np.shape(v) for k, v in weights.items() if k.endswith(suffix)]
        return found[0] if found else None

    checks = []
    embed = shape("embed.weight")
    if embed is not None and len(embed) == 2:
        checks.append(("d_model", embed[1]))
    ff = shape("ff.linear1.weight")
    if ff is not None and len(ff) == 2:
        checks.append(("dim_feedforward", ff[0]))
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
    if heads is not None and (isinstance(heads, bool) or not isinstance(heads, int) or heads < 1
                              or (isinstance(width, int) and width % heads)):
        raise ValueError(f"{path}: the run's config says nhead {heads!r}, which does not divide d_model {width!r}")


def save_checkpoint(path: str, model: Module, optimizer: AdamW, step: int, config: TrainConfig,
                    loss: float = float("nan"), accuracy: float = 0.0, history: list | None = None) -> None:
    """Everything a resumed run needs to continue exactly: weights, optimizer state, the step, the
    generator's state, the config, and the last loss and evaluated accuracy (so that a resumed run stops
    where an uninterrupted one would)."""
    state: dict[str, Any] = dict(model.state_dict())
    state.update({f"optimizer/{k}": v for k, v in optimizer.state_dict().items()})
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
    try:
        parts["trainer"]["config"] = json.loads(str(parts["trainer"]["config"]))
    except json.JSONDecodeError:
        raise ValueError(f"{path}: trainer/config is not valid JSON") from None
    if not isinstance(parts["trainer"]["config"], dict) or "task" not in parts["trainer"]["config"]:
        raise ValueError(f"{path}: trainer/config names no task")
    check_config_against_weights(parts["trainer"]["config"], parts["model"], path)  # before any model is built
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
    sizes = {k: config.get(k) for k in ("d_model", "nhead", "num_layers", "dim_feedforward", "dropout")}
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


class _Progress:
    """tqdm when it is installed, otherwise a line every few evaluations."""

    def __init__(self, total: int, initial: int, enabled: bool, task: str, metric: str = "accuracy"):
        self.bar, self.metric = None, metric
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
            if accuracy is not None and self.metric == "val_loss":
                fields["val_loss"] = f"{accuracy:.3f}"
                fields["bpc"] = f"{accuracy / math.log(2):.3f}"  # bits per character
            elif accuracy is not None:
                fields[self.metric] = f"{accuracy:.3f}"
            self.bar.set_postfix(fields, refresh=False)
            self.bar.update(1)

    def report(self, step: int, loss: float, value: float, metric: str = "accuracy") -> None:
        if self.enabled and self.bar is None:
            bpc = f" ({value / math.log(2):.3f} bits per character)" if metric == "val_loss" else ""
            print(f"step {step}: loss {loss:.4f}, held-out {metric} {value:.4f}{bpc}", flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def train(config: TrainConfig) -> dict[str, Any]:
    """Train as `config` says; returns the metrics also written to <out>/metrics.json."""
    out = config.out or os.path.join("runs", config.task)
    path = os.path.join(out, CHECKPOINT)
    parts = None
    if config.resume:
        if not os.path.exists(path):
            raise FileNotFoundError(f"--resume: no checkpoint in {out} (expected {path})")
        parts = load_checkpoint(path)
        saved = parts["trainer"]["config"]
        if saved["task"] != config.task:
            raise ValueError(f"--resume: {path} is a {saved['task']!r} run, not {config.task!r}")
        for key, flag in _SIZE_FLAGS.items():
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
    step = 0
    history: list[dict[str, Any]] = []
    unreached = 0.0 if task.higher_is_better else math.inf  # before any evaluation: accuracy 0, loss infinite
    loss_value, value = float("nan"), unreached  # value: the last scheduled evaluation, which decides the stop
    if parts is not None:
        try:
            model.load_state_dict(parts["model"])
            optimizer.load_state_dict(parts["optimizer"])
        except KeyError as err:
            raise ValueError(f"--resume: {path} does not match this run: {err.args[0]}") from None
        rng.set_state(str(parts["trainer"]["rng"]))
        step = int(parts["trainer"]["step"])
        loss_value = float(parts["trainer"].get("loss", np.nan))  # as at the checkpoint: the run goes on
        value = float(parts["trainer"].get("accuracy", unreached))  # as if it had never stopped
        history = json.loads(str(parts["trainer"].get("history", "[]")))
        every = task.defaults.eval_every
        last = history[-1] if history else {}
        if last.get("step") == step and step % every and not _curve_step(step, every):  # the final report of the
            if _logged_step(step, every):  # stopped run: an uninterrupted one has an entry here, unevaluated,
                last[task.metric] = None
            else:  # or none at all
                history.pop()

    snapshots = None
    if config.snapshots:
        from .explorer.snapshots import Snapshots, snapshot_steps

        snapshots = Snapshots(task, config.out, snapshot_steps(config.steps, config.snapshots), config.resume)
        snapshots.take(step, loss_value, model)
    start = time.perf_counter()
    progress = _Progress(config.steps, min(step, config.steps), config.progress, task.name, task.metric)
    reported = task.evaluate(model) if step else None
    model.train()
    while step < config.steps and not task.reached(value, config.target):
        batch = task.batch(np.random.default_rng([config.seed, step]), config.batch_size)
        optimizer.lr = schedule(step)
        optimizer.zero_grad()
        loss, _ = task.loss(model, batch)
        loss.backward()
        clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        loss_value = loss.item()
        every = task.defaults.eval_every
        scheduled, final = step % every == 0, step == config.steps
        evaluated = scheduled or final or _curve_step(step, every)  # a curve point: drawn, never a reason to stop
        if evaluated:
            reported = task.evaluate(model)
            value = reported if scheduled else value
            if scheduled or final:
                progress.report(step, loss_value, reported, task.metric)
        if evaluated or _logged_step(step, every):
            history.append({"step": step, "loss": _finite(loss_value),
                            task.metric: _finite(reported) if evaluated else None,
                            "lr": optimizer.lr, "seconds": round(time.perf_counter() - start, 3)})
        if snapshots is not None:
            snapshots.take(step, loss_value, model)
        if step % config.checkpoint_every == 0:
            save_checkpoint(path, model, optimizer, step, config, loss_value, value, history)
        progress.update(loss_value, reported if scheduled or step == config.steps else None,
                        step / (time.perf_counter() - start))
    progress.close()
    if snapshots is not None:  # the last step too, when the run stops before the steps planned
        snapshots.steps.add(step)
        snapshots.take(step, loss_value, model)
    if reported is None:  # no step was taken: report the model as it is
        reported = task.evaluate(model)
    save_checkpoint(path, model, optimizer, step, config, loss_value, value, history)

    metrics = {
        "task": task.name,
        "steps": step,
        "seconds": round(time.perf_counter() - start, 3),
        "final_loss": _finite(loss_value),  # strict JSON: no NaN
        "metric": task.metric,
        task.metric: _finite(reported),
        "target": config.target,
        "reached_target": reported is not None and task.reached(reported, config.target),
        "seed": config.seed,
        "batch_size": config.batch_size,
        "lr": config.lr,
        "model": {k: getattr(config, k) for k in ("d_model", "nhead", "num_layers", "dim_feedforward", "dropout")},
        "history": history,
    }
    if task.metric == "val_loss" and metrics["val_loss"] is not None:
        metrics["val_bits_per_char"] = round(TextTask.bits_per_character(metrics["val_loss"]), 4)
    with open(os.path.join(config.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2, allow_nan=False)
    if config.plot:
        from .viz import plot_attention, plot_curves

        plot_curves(history, task.metric, os.path.join(config.out, "curves.png"))
        prompt = task.sample_prompt()
        answer, batch = task.answer(model, prompt)
        plot_attention(task, model, batch, os.path.join(config.out, "attention.png"),
                       title=f"input: {prompt!r:.60}  answer: {answer!r:.60}")
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
