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

__all__ = ["CosineAnnealingLR", "LRScheduler", "LambdaLR"]
