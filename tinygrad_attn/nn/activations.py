"""PyTorch's activation modules (`nn.SiLU()`, `nn.Softmax(dim)`, ...): each holds its options and calls the
function of the same name."""

from __future__ import annotations

from typing import Any

from .. import activations as A
from ..fused import log_softmax, softmax
from ..tensor import Tensor
from .module import Module


class _Activation(Module):
    """An activation module: forward calls `function(x, **options)`."""

    function: Any = None

    def __init__(self, **options: Any):
        self.options = options

    def forward(self, x: Tensor) -> Tensor:
        return type(self).function(x, **self.options)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.options.items())


def _module(name: str, function: Any, *names: str, **defaults: Any) -> type:
    """A module class whose positional arguments are `names` (PyTorch's order) with PyTorch's defaults."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(names):
            raise TypeError(f"{name}: takes at most {len(names)} positional arguments, got {len(args)}")
        options = dict(defaults, **dict(zip(names, args)), **kwargs)
        options.pop("inplace", None)  # in-place activations compute the same out of place here
        unknown = set(options) - set(names)
        if unknown:
            raise TypeError(f"{name}: unexpected arguments {sorted(unknown)}")
        _Activation.__init__(self, **options)

    return type(name, (_Activation,), {"function": staticmethod(function), "__init__": __init__,
                                       "__doc__": f"PyTorch's nn.{name}."})


SiLU = _module("SiLU", A.silu, "inplace")
Tanh = _module("Tanh", lambda x: x.tanh())
Sigmoid = _module("Sigmoid", lambda x: x.sigmoid())
Softmax = _module("Softmax", lambda x, dim=None: softmax(x, -1 if dim is None else dim), "dim")
LogSoftmax = _module("LogSoftmax", lambda x, dim=None: log_softmax(x, -1 if dim is None else dim), "dim")
Softplus = _module("Softplus", A.softplus, "beta", "threshold")
ELU = _module("ELU", A.elu, "alpha", "inplace")
CELU = _module("CELU", A.celu, "alpha", "inplace")
SELU = _module("SELU", A.selu, "inplace")
LeakyReLU = _module("LeakyReLU", A.leaky_relu, "negative_slope", "inplace")
Hardtanh = _module("Hardtanh", A.hardtanh, "min_val", "max_val", "inplace")
ReLU6 = _module("ReLU6", A.relu6, "inplace")
Hardsigmoid = _module("Hardsigmoid", A.hardsigmoid, "inplace")
Hardswish = _module("Hardswish", A.hardswish, "inplace")
Mish = _module("Mish", A.mish, "inplace")
LogSigmoid = _module("LogSigmoid", A.logsigmoid)
Softsign = _module("Softsign", A.softsign)
Tanhshrink = _module("Tanhshrink", A.tanhshrink)
Identity = _module("Identity", lambda x: x)

__all__ = ["CELU", "ELU", "Hardsigmoid", "Hardswish", "Hardtanh", "Identity", "LeakyReLU", "LogSigmoid", "LogSoftmax",
           "Mish", "ReLU6", "SELU", "SiLU", "Sigmoid", "Softmax", "Softplus", "Softsign", "Tanh", "Tanhshrink"]
