"""Module, Parameter, Sequential and ModuleList: how layers hold and name their weights.

A Module finds its parameters and submodules by walking its attributes in
the order they were set, so names are deterministic and dotted like
PyTorch's (`q_proj.weight`, `layers.0.self_attn.out_proj.bias`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ..engine import Tensor


class Parameter(Tensor):
    """A Tensor that requires grad and that a Module counts as one of its weights."""

    def __init__(self, data: Any, requires_grad: bool = True):
        super().__init__(data, requires_grad=requires_grad)


class Module:
    """Base class of every layer: `__call__` runs `forward`."""

    training = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def named_children(self) -> Iterator[tuple[str, Module]]:
        for name, value in vars(self).items():
            if isinstance(value, Module):
                yield name, value

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        """(dotted name, parameter) pairs, depth first, in the order attributes were set."""
        for name, value in vars(self).items():
            if isinstance(value, Parameter):
                yield prefix + name, value
            elif isinstance(value, Module):
                yield from value.named_parameters(prefix + name + ".")

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def modules(self) -> Iterator[Module]:
        yield self
        for _, child in self.named_children():
            yield from child.modules()

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def state_dict(self) -> dict[str, np.ndarray]:
        """Parameter name -> a copy of its array."""
        return {name: p.data.copy() for name, p in self.named_parameters()}

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> None:
        """Copy arrays into the existing parameters, cast to each parameter's dtype.

        Missing or unexpected names raise KeyError (only with strict=True); a
        wrongly shaped array always raises ValueError naming the key.
        """
        params = dict(self.named_parameters())
        missing = sorted(set(params) - set(state))
        unexpected = sorted(set(state) - set(params))
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
        for name in params.keys() & state.keys():
            value = np.asarray(state[name])
            if value.shape != params[name].shape:
                raise ValueError(
                    f"load_state_dict: {name!r} has shape {value.shape}, the parameter has shape {params[name].shape}"
                )
        for name in params.keys() & state.keys():
            np.copyto(params[name].data, np.asarray(state[name]), casting="unsafe")

    def train(self, mode: bool = True) -> Module:
        for m in self.modules():
            m.training = mode
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None

    def to(self, dtype: Any) -> Module:
        """Cast every parameter to `dtype` in place (np.float64 for gradient checks); returns self."""
        for p in self.parameters():
            p.data = p.data.astype(dtype)
            p.grad = None
        return self

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"({name}): " + repr(child).replace("\n", "\n  ") for name, child in self.named_children()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        return head + ")" if not lines else head + "\n  " + "\n  ".join(lines) + "\n)"


class ModuleList(Module):
    """A list of modules whose parameters are named by position: `layers.0.weight`."""

    def __init__(self, modules: Any = ()):
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def __len__(self) -> int:
        return sum(1 for _ in self.named_children())

    def __getitem__(self, i: int) -> Module:
        return getattr(self, str(range(len(self))[i]))

    def __iter__(self) -> Iterator[Module]:
        return (m for _, m in self.named_children())

    def append(self, module: Module) -> ModuleList:
        setattr(self, str(len(self)), module)
        return self


class Sequential(ModuleList):
    """Modules applied one after the other."""

    def __init__(self, *modules: Module):
        super().__init__(modules)

    def forward(self, x: Any) -> Any:
        for m in self:
            x = m(x)
        return x
