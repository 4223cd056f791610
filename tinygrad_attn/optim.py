"""Optimizers (SGD, Adam, AdamW), gradient clipping and learning-rate schedules.

Each optimizer updates its parameters' arrays in place, with PyTorch's update
rules, and keeps its state as flat numpy arrays so that a checkpoint can hold
it without pickle: `state_dict()` -> {"step": ..., "exp_avg.0": ..., ...}.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np

from .engine import Tensor
from .kernels.adam import adam_update


class Optimizer:
    """Holds the parameters, the learning rate `lr` (a schedule may change it) and per-parameter state."""

    state_names: tuple[str, ...] = ()

    def __init__(self, params: Iterable[Tensor], lr: float):
        self.params = list(params)
        if not self.params:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        if lr < 0:
            raise ValueError(f"{type(self).__name__}: lr must be >= 0, got {lr}")
        self.lr = lr
        self.step_count = 0
        self.state = {name: [np.zeros_like(p.data) for p in self.params] for name in self.state_names}

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        self.step_count += 1
        for i, p in enumerate(self.params):
            if p.grad is not None:
                self.update(i, p.data, p.grad.data)

    def update(self, i: int, param: np.ndarray, grad: np.ndarray) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, np.ndarray]:
        state = {"step": np.asarray(self.step_count), "lr": np.asarray(self.lr)}
        for name, arrays in self.state.items():
            state.update({f"{name}.{i}": a.copy() for i, a in enumerate(arrays)})
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.step_count, self.lr = int(state["step"]), float(state["lr"])
        for name, arrays in self.state.items():
            for i, a in enumerate(arrays):
                value = np.asarray(state[f"{name}.{i}"])
                if value.shape != a.shape:
                    raise ValueError(f"load_state_dict: {name}.{i} has shape {value.shape}, expected {a.shape}")
                a[...] = value


class SGD(Optimizer):
    """p -= lr * g, with g = grad + weight_decay * p, through a momentum buffer when momentum > 0."""

    state_names = ("momentum_buffer",)

    def __init__(self, params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False):
        super().__init__(params, lr)
        if nesterov and momentum <= 0:
            raise ValueError("SGD: nesterov momentum needs momentum > 0")
        self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov

    def update(self, i, param, grad):
        g = grad + self.weight_decay * param if self.weight_decay else grad
        if self.momentum:
            buf = self.state["momentum_buffer"][i]
            if self.step_count == 1:
                buf[...] = g  # the first step fills the buffer, as in PyTorch
            else:
                buf *= self.momentum
                buf += g
            g = g + self.momentum * buf if self.nesterov else buf
        param -= self.lr * g


class Adam(Optimizer):
    """Adam with bias correction; weight_decay adds weight_decay * p to the gradient (L2).

    The update (kernels/adam.py, one fused loop per parameter):
    m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2,
    p -= lr * m_hat / (sqrt(v_hat) + eps) with m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t).
    """

    state_names = ("exp_avg", "exp_avg_sq")
    decoupled = False

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0):
        super().__init__(params, lr)
        self.betas, self.eps, self.weight_decay = betas, eps, weight_decay

    def update(self, i, param, grad):
        m, v = self.state["exp_avg"][i], self.state["exp_avg_sq"][i]
        if not (param.flags.c_contiguous and grad.flags.c_contiguous):
            grad = np.ascontiguousarray(grad)
            if not param.flags.c_contiguous:
                raise ValueError("Adam: parameters must be C-contiguous arrays")
        adam_update(param.reshape(-1), grad.reshape(-1), m.reshape(-1), v.reshape(-1), self.lr, self.betas[0],
                    self.betas[1], self.eps, self.step_count, self.weight_decay, self.decoupled)


class AdamW(Adam):
    """Adam with decoupled weight decay: p *= 1 - lr * weight_decay before the Adam step."""

    decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2):
        super().__init__(params, lr, betas, eps, weight_decay)


def clip_grad_norm_(params: Iterable[Tensor], max_norm: float) -> float:
    """Scale all gradients so that their joint L2 norm is at most max_norm; returns the norm before clipping."""
    grads = [p.grad.data for p in params if p.grad is not None]
    total = math.sqrt(sum(float(np.dot(g.reshape(-1), g.reshape(-1))) for g in grads))
    scale = max_norm / (total + 1e-6)
    if scale < 1:
        for g in grads:
            g *= g.dtype.type(scale)
    return total


def constant(lr: float) -> Callable[[int], float]:
    """The same learning rate at every step."""
    return lambda step: lr


def warmup_cosine(lr: float, warmup_steps: int, total_steps: int, min_lr: float = 0.0) -> Callable[[int], float]:
    """Linear warm-up from 0 to lr over warmup_steps, then cosine decay to min_lr at total_steps (then min_lr).

    `step` counts from 0: the learning rate for the update that makes step + 1.
    """

    def schedule(step: int) -> float:
        if step < warmup_steps:
            return lr * (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))

    return schedule
