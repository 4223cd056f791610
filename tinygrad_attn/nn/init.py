"""Weight initialisation with PyTorch's names, in place on a Parameter (or Tensor), from `ta.manual_seed`'s generator.

Fans: a weight (out, in, *kernel) has fan_in = in * prod(kernel) and fan_out = out * prod(kernel); a 1-D
tensor has fan_in = fan_out = its length (PyTorch refuses fans of tensors below 2 dims; so do these).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import rng
from ..checks import check_number
from ..tensor import Tensor

_GAINS = {"linear": 1.0, "sigmoid": 1.0, "tanh": 5.0 / 3, "relu": math.sqrt(2.0)}


def _target(tensor: Tensor, op: str) -> np.ndarray:
    if tensor.dtype.kind != "f":
        raise TypeError(f"init.{op}: the tensor must be floating point, got {tensor.dtype}")
    return tensor._data


def _checked(tensor: Tensor, op: str) -> Tensor:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"init.{op}: expected a Tensor or Parameter, got {type(tensor).__name__}")
    return tensor


def _fill(tensor: Tensor, values: np.ndarray, op: str) -> Tensor:
    _target(_checked(tensor, op), op)[...] = values
    tensor.bump_version()
    return tensor


def _fans(tensor: Tensor, op: str) -> tuple[int, int]:
    if _checked(tensor, op).ndim < 2:
        raise ValueError(f"init.{op}: fan in and fan out need a tensor of at least 2 dims, got shape {tensor.shape}")
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity not in _GAINS:
        raise ValueError(f"calculate_gain: unknown nonlinearity {nonlinearity!r}; choose from "
                         f"{sorted([*_GAINS, 'leaky_relu'])}")
    return _GAINS[nonlinearity]


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator: Any = None) -> Tensor:
    a, b = check_number(a, "a", "init.uniform_"), check_number(b, "b", "init.uniform_")
    return _fill(tensor, rng.generator(generator).uniform(a, b, _checked(tensor, "uniform_").shape), "uniform_")


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator: Any = None) -> Tensor:
    mean, std = check_number(mean, "mean", "init.normal_"), check_number(std, "std", "init.normal_", 0.0)
    return _fill(tensor, rng.generator(generator).normal(mean, std, _checked(tensor, "normal_").shape), "normal_")


def constant_(tensor: Tensor, val: float) -> Tensor:
    return _fill(tensor, check_number(val, "val", "init.constant_"), "constant_")


def zeros_(tensor: Tensor) -> Tensor:
    return _fill(tensor, 0.0, "zeros_")


def ones_(tensor: Tensor) -> Tensor:
    return _fill(tensor, 1.0, "ones_")


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    fan_in, fan_out = _fans(tensor, "xavier_uniform_")
    bound = check_number(gain, "gain", "init.xavier_uniform_") * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    fan_in, fan_out = _fans(tensor, "xavier_normal_")
    std = check_number(gain, "gain", "init.xavier_normal_") * math.sqrt(2.0 / (fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def _kaiming_std(tensor: Tensor, a: float, mode: str, nonlinearity: str, op: str) -> float:
    """gain / sqrt(fan): the standard deviation both Kaiming initialisations aim at."""
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f'init.{op}: mode must be "fan_in" or "fan_out", got {mode!r}')
    fan_in, fan_out = _fans(tensor, op)
    fan = fan_in if mode == "fan_in" else fan_out
    gain = calculate_gain(nonlinearity, check_number(a, "a", f"init.{op}"))
    return gain / math.sqrt(fan) if fan else 0.0


def kaiming_uniform_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                     generator: Any = None) -> Tensor:
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity, "kaiming_uniform_")
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    generator: Any = None) -> Tensor:
    """N(0, std^2) with std = gain / sqrt(fan), as PyTorch's."""
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity, "kaiming_normal_"), generator)


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0,
                  generator: Any = None) -> Tensor:
    """N(mean, std) restricted to [a, b] (absolute bounds, as PyTorch), drawn by resampling what falls outside.

    Refused when [a, b] holds under 1% of the distribution: resampling would then take too long."""
    given = {"mean": mean, "std": std, "a": a, "b": b}
    mean, std, a, b = (check_number(v, n, "init.trunc_normal_") for n, v in given.items())
    if std <= 0 or not a < b:
        raise ValueError(f"init.trunc_normal_: need std > 0 and a < b, got std={std}, a={a}, b={b}")
    mass = (math.erf((b - mean) / (std * math.sqrt(2))) - math.erf((a - mean) / (std * math.sqrt(2)))) / 2
    if mass < 0.01:
        raise ValueError(f"init.trunc_normal_: [a, b] = [{a}, {b}] holds only {mass:.2g} of N({mean}, {std}^2); "
                         "resampling into it would take too long")
    draw = rng.generator(generator)
    values = draw.normal(mean, std, _checked(tensor, "trunc_normal_").shape)
    outside = (values < a) | (values > b)
    while outside.any():
        values[outside] = draw.normal(mean, std, int(outside.sum()))
        outside = (values < a) | (values > b)
    return _fill(tensor, values, "trunc_normal_")


__all__ = ["constant", "kaiming_uniform", "normal", "uniform", "xavier_normal", "xavier_uniform", "calculate_gain",
           "constant_", "kaiming_normal_", "kaiming_uniform_", "normal_", "ones_", "trunc_normal_", "uniform_",
           "xavier_normal_", "xavier_uniform_", "zeros_"]


def _deprecated(function: Any, name: str) -> Any:
    """PyTorch's deprecated spelling without the trailing underscore (nn.init.normal), doing the same."""

    def alias(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    alias.__name__ = alias.__qualname__ = name
    alias.__doc__ = f"Deprecated alias of {function.__name__} (PyTorch keeps it too)."
    return alias


uniform = _deprecated(uniform_, "uniform")
normal = _deprecated(normal_, "normal")
constant = _deprecated(constant_, "constant")
xavier_uniform = _deprecated(xavier_uniform_, "xavier_uniform")
xavier_normal = _deprecated(xavier_normal_, "xavier_normal")
kaiming_uniform = _deprecated(kaiming_uniform_, "kaiming_uniform")
