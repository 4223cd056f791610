"""Learning-rate schedulers, PyTorch's `optim.lr_scheduler`: `from tinygrad_attn.optim.lr_scheduler import LambdaLR`."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..checks import check_number
from .optimizers import Optimizer


def _optimizer(optimizer: Any, scheduler: Any) -> Optimizer:
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"{type(scheduler).__name__}: expected an Optimizer, got {type(optimizer).__name__}")
    return optimizer


class LRScheduler:
    """Sets each group's "lr" from its initial lr and the epoch count (steps, for a per-step schedule).

    Call `step()` after `optimizer.step()`, as in PyTorch; `last_epoch` counts the calls, and the
    lr in force after k calls is `get_lr()` at epoch k.
    """

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1):
        self.optimizer = _optimizer(optimizer, self)
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def get_lr(self) -> list[float]:
        raise NotImplementedError

    def step(self) -> None:
        self.last_epoch += 1
        for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
            group["lr"] = lr

    def get_last_lr(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"last_epoch": np.asarray(self.last_epoch), "base_lrs": np.asarray(self.base_lrs)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.last_epoch = int(state["last_epoch"])
        self.base_lrs = [float(x) for x in np.asarray(state["base_lrs"])]


class LambdaLR(LRScheduler):
    """lr = initial lr * lr_lambda(epoch), one function for every group or one per group."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float] | list, last_epoch: int = -1):
        n = len(_optimizer(optimizer, self).param_groups)
        self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
        if len(self.lr_lambdas) != n:
            raise ValueError(f"LambdaLR: {len(self.lr_lambdas)} functions for {n} parameter groups")
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * fn(self.last_epoch) for base, fn in zip(self.base_lrs, self.lr_lambdas)]


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (initial lr - eta_min) (1 + cos(pi epoch / T_max)) / 2, PyTorch's closed form."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):  # noqa: N803
        if isinstance(T_max, bool) or not isinstance(T_max, (int, np.integer)) or T_max <= 0:
            raise ValueError(f"CosineAnnealingLR: T_max must be a positive int, got {T_max!r}")
        self.T_max, self.eta_min = int(T_max), check_number(eta_min, "eta_min", "CosineAnnealingLR", 0.0)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base in self.base_lrs]

def _positive_int(value: Any, name: str, op: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{op}: {name} must be an int >= {minimum}, got {value!r}")
    return int(value)


class StepLR(LRScheduler):
    """lr = initial lr * gamma ** (epoch // step_size)."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size = _positive_int(step_size, "step_size", "StepLR")
        self.gamma = check_number(gamma, "gamma", "StepLR", 0.0)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * self.gamma ** (self.last_epoch // self.step_size) for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """lr = initial lr * gamma ** (the number of milestones reached)."""

    def __init__(self, optimizer: Optimizer, milestones: Any, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones = sorted(_positive_int(m, "milestones", "MultiStepLR", 0) for m in milestones)
        self.gamma = check_number(gamma, "gamma", "MultiStepLR", 0.0)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        reached = sum(m <= self.last_epoch for m in self.milestones)
        return [base * self.gamma ** reached for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """lr = initial lr * gamma ** epoch."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = check_number(gamma, "gamma", "ExponentialLR", 0.0)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * self.gamma ** self.last_epoch for base in self.base_lrs]


class ConstantLR(LRScheduler):
    """lr = initial lr * factor for the first total_iters epochs, then the initial lr."""

    def __init__(self, optimizer: Optimizer, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1):
        self.factor = check_number(factor, "factor", "ConstantLR", 0.0, 1.0)
        self.total_iters = _positive_int(total_iters, "total_iters", "ConstantLR", 0)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * (self.factor if self.last_epoch < self.total_iters else 1.0) for base in self.base_lrs]


class LinearLR(LRScheduler):
    """lr = initial lr * a factor going linearly from start_factor to end_factor over total_iters epochs."""

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):
        self.start_factor = check_number(start_factor, "start_factor", "LinearLR", 0.0, 1.0)
        if self.start_factor == 0:
            raise ValueError("LinearLR: start_factor must be > 0 and <= 1")
        self.end_factor = check_number(end_factor, "end_factor", "LinearLR", 0.0, 1.0)
        self.total_iters = _positive_int(total_iters, "total_iters", "LinearLR", 0)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        done = min(self.last_epoch, self.total_iters) / self.total_iters if self.total_iters else 1.0
        return [base * (self.start_factor + (self.end_factor - self.start_factor) * done) for base in self.base_lrs]


class PolynomialLR(LRScheduler):
    """lr = initial lr * (1 - min(epoch, total_iters) / total_iters) ** power."""

    def __init__(self, optimizer: Optimizer, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1):
        self.total_iters = _positive_int(total_iters, "total_iters", "PolynomialLR")
        self.power = check_number(power, "power", "PolynomialLR")
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        left = 1.0 - min(self.last_epoch, self.total_iters) / self.total_iters
        return [base * left**self.power for base in self.base_lrs]


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing from the initial lr to eta_min over T_0 epochs, restarting, each period T_mult times
    the last."""

    def __init__(self, optimizer: Optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0,  # noqa: N803
                 last_epoch: int = -1):
        self.T_0 = _positive_int(T_0, "T_0", "CosineAnnealingWarmRestarts")
        self.T_mult = _positive_int(T_mult, "T_mult", "CosineAnnealingWarmRestarts")
        self.eta_min = check_number(eta_min, "eta_min", "CosineAnnealingWarmRestarts", 0.0)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        epoch, t0, mult = self.last_epoch, self.T_0, self.T_mult
        if mult == 1:
            t_cur, t_i = epoch % t0, t0
        else:
            n = int(math.log(epoch / t0 * (mult - 1) + 1, mult))
            t_cur, t_i = epoch - t0 * (mult**n - 1) / (mult - 1), t0 * mult**n
        return [self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * t_cur / t_i)) / 2
                for base in self.base_lrs]


class OneCycleLR(LRScheduler):
    """PyTorch's one-cycle policy: lr from max_lr / div_factor up to max_lr over pct_start of the steps, then
    down to that / final_div_factor (cosine or linear annealing); with cycle_momentum, Adam's beta1 (or SGD's
    momentum) goes the opposite way between max_momentum and base_momentum."""

    def __init__(self, optimizer: Optimizer, max_lr: Any, total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None, pct_start: float = 0.3,
                 anneal_strategy: str = "cos", cycle_momentum: bool = True, base_momentum: float = 0.85,
                 max_momentum: float = 0.95, div_factor: float = 25.0, final_div_factor: float = 1e4,
                 three_phase: bool = False, last_epoch: int = -1):
        optimizer = _optimizer(optimizer, self)
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("OneCycleLR: give total_steps, or epochs and steps_per_epoch")
            total_steps = _positive_int(epochs, "epochs", "OneCycleLR") * _positive_int(
                steps_per_epoch, "steps_per_epoch", "OneCycleLR")
        self.total_steps = _positive_int(total_steps, "total_steps", "OneCycleLR")
        pct_start = check_number(pct_start, "pct_start", "OneCycleLR", 0.0, 1.0)
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f'OneCycleLR: anneal_strategy must be "cos" or "linear", got {anneal_strategy!r}')
        self.anneal = anneal_strategy
        up = float(pct_start * self.total_steps) - 1
        self.phases = ([(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                        (float(2 * pct_start * self.total_steps) - 2, "max_lr", "initial_lr", "base_momentum",
                         "max_momentum"),
                        (self.total_steps - 1.0, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
                       if three_phase else
                       [(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                        (self.total_steps - 1.0, "max_lr", "min_lr", "base_momentum", "max_momentum")])
        max_lrs = list(max_lr) if isinstance(max_lr, (list, tuple)) else [max_lr] * len(optimizer.param_groups)
        self.cycle_momentum = bool(cycle_momentum)
        for group, top in zip(optimizer.param_groups, max_lrs):
            group["initial_lr"] = top / div_factor
            group["max_lr"], group["min_lr"] = top, top / div_factor / final_div_factor
            if self.cycle_momentum:
                if "betas" not in group and "momentum" not in group:
                    raise ValueError("OneCycleLR: cycle_momentum needs an optimizer with betas or momentum")
                group["max_momentum"], group["base_momentum"] = max_momentum, base_momentum
                if "betas" in group:
                    group["betas"] = (max_momentum, *group["betas"][1:])
                else:
                    group["momentum"] = max_momentum
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list[float]:
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"OneCycleLR: tried to step {step} times, beyond total_steps {self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start = 0.0
            for i, (end, lr_from, lr_to, m_from, m_to) in enumerate(self.phases):
                if step <= end or i == len(self.phases) - 1:
                    pct = (step - start) / (end - start)
                    lrs.append(self._anneal(group[lr_from], group[lr_to], pct))
                    if self.cycle_momentum:
                        momentum = self._anneal(group[m_from], group[m_to], pct)
                        if "betas" in group:
                            group["betas"] = (momentum, *group["betas"][1:])
                        else:
                            group["momentum"] = momentum
                    break
                start = end
        return lrs


class SequentialLR(LRScheduler):
    """schedulers[i] in force from milestones[i - 1] on, each counting its epochs from its milestone."""

    def __init__(self, optimizer: Optimizer, schedulers: list, milestones: list, last_epoch: int = -1):
        optimizer = _optimizer(optimizer, self)
        if len(milestones) != len(schedulers) - 1 or any(s.optimizer is not optimizer for s in schedulers):
            raise ValueError("SequentialLR: one scheduler more than milestones, all of the same optimizer")
        self.schedulers, self.milestones = list(schedulers), [int(m) for m in milestones]
        for group, base in zip(optimizer.param_groups, schedulers[0].base_lrs):
            group["lr"] = base  # the schedulers' constructors each set an lr: start from the first's
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        index = sum(m <= self.last_epoch for m in self.milestones)
        scheduler = self.schedulers[index]
        scheduler.last_epoch = self.last_epoch - (self.milestones[index - 1] if index else 0)
        return scheduler.get_lr()


class ReduceLROnPlateau:
    """Divide the lr by 1 / factor when the metric given to `step(metric)` has not improved for `patience`
    epochs (PyTorch's rule: relative or absolute threshold, cooldown, min_lr, eps)."""

    def __init__(self, optimizer: Optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0, min_lr: Any = 0.0,
                 eps: float = 1e-8):
        self.optimizer = _optimizer(optimizer, self)
        if mode not in ("min", "max") or threshold_mode not in ("rel", "abs"):
            raise ValueError(f'ReduceLROnPlateau: mode must be "min" or "max" and threshold_mode "rel" or "abs", '
                             f"got {mode!r}, {threshold_mode!r}")
        self.factor = check_number(factor, "factor", "ReduceLROnPlateau", 0.0)
        if self.factor >= 1.0:
            raise ValueError("ReduceLROnPlateau: factor should be < 1.0")
        self.mode, self.threshold, self.threshold_mode = mode, float(threshold), threshold_mode
        self.patience = _positive_int(patience, "patience", "ReduceLROnPlateau", 0)
        self.cooldown = _positive_int(cooldown, "cooldown", "ReduceLROnPlateau", 0)
        groups = optimizer.param_groups
        self.min_lrs = list(min_lr) if isinstance(min_lr, (list, tuple)) else [min_lr] * len(groups)
        self.eps = float(eps)
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs, self.cooldown_counter, self.last_epoch = 0, 0, 0

    def _better(self, value: float) -> bool:
        if self.mode == "min":
            return value < (self.best * (1 - self.threshold) if self.threshold_mode == "rel"
                            else self.best - self.threshold)
        return value > (self.best * (1 + self.threshold) if self.threshold_mode == "rel"
                        else self.best + self.threshold)

    def step(self, metrics: Any) -> None:
        value = float(metrics.item() if hasattr(metrics, "item") else metrics)
        self.last_epoch += 1
        if self._better(value):
            self.best, self.num_bad_epochs = value, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for group, low in zip(self.optimizer.param_groups, self.min_lrs):
                new = max(group["lr"] * self.factor, low)
                if group["lr"] - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0

    def get_last_lr(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]


__all__ = ["ConstantLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts", "ExponentialLR", "LRScheduler",
           "LambdaLR", "LinearLR", "MultiStepLR", "OneCycleLR", "PolynomialLR", "ReduceLROnPlateau", "SequentialLR",
           "StepLR"]
