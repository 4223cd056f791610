"""`autograd.grad` and `autograd.backward`, PyTorch's two ways to run the backward pass, and `Variable`.

`backward(tensors)` is `tensors.backward()` for several roots at once: gradients accumulate into the
leaves' `.grad`. `grad(outputs, inputs)` returns the gradients of `inputs` and touches no `.grad`; with
`create_graph=True` they are tensors with their own graph, so they can be differentiated again
(gradient penalties, Hessian-vector products).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..engine import run_backward
from ..tensor import Tensor, initial_gradient


def _tensors(value: Any, name: str, op: str) -> list[Tensor]:
    items = [value] if isinstance(value, Tensor) else list(value) if isinstance(value, (list, tuple)) else None
    if items is None or not all(isinstance(t, Tensor) for t in items):
        raise TypeError(f"{op}: {name} must be a Tensor or a sequence of Tensors, got {type(value).__name__}")
    return items


def _start(outputs: list[Tensor], grad_outputs: Any, create_graph: bool, op: str) -> list[Any]:
    """dL/d(output) for each output: given (a tensor, or None for a one-element output), checked."""
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    elif isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs]
    grad_outputs = list(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise RuntimeError(f"{op}: got {len(grad_outputs)} grad_outputs for {len(outputs)} outputs")
    for i, t in enumerate(outputs):
        if not t.requires_grad:
            raise RuntimeError(f"{op}: element {i} of tensors does not require grad and does not have a grad_fn")
    return [initial_gradient(t, g, op, create_graph) for t, g in zip(outputs, grad_outputs)]


def grad(outputs: Any, inputs: Any, grad_outputs: Any = None, retain_graph: bool | None = None,
         create_graph: bool = False, allow_unused: bool | None = None, is_grads_batched: bool = False,
         materialize_grads: bool = False) -> tuple[Tensor | None, ...]:
    """The sum of the gradients of `outputs` (weighted by `grad_outputs`) with respect to each of `inputs`,
    as PyTorch's torch.autograd.grad. Inputs the outputs do not depend on are an error unless
    `allow_unused` (then None, or zeros with `materialize_grads`)."""
    if is_grads_batched:
        raise NotImplementedError("autograd.grad: is_grads_batched (vmap over grad_outputs) is not supported "
                                  "here; loop over the grad_outputs")
    outputs = _tensors(outputs, "outputs", "autograd.grad")
    inputs = _tensors(inputs, "inputs", "autograd.grad")
    for i, t in enumerate(inputs):
        if not t.requires_grad:
            raise RuntimeError(f"autograd.grad: one of the differentiated Tensors (inputs[{i}], shape {t.shape}) "
                               "does not require grad")
    allow_unused = materialize_grads if allow_unused is None else allow_unused
    if materialize_grads and not allow_unused:
        raise ValueError("autograd.grad: materialize_grads=True needs allow_unused=True (or None)")
    starts = _start(outputs, grad_outputs, create_graph, "autograd.grad")
    keep = create_graph if retain_graph is None else bool(retain_graph)
    found = run_backward(outputs, starts, keep, bool(create_graph), inputs=inputs)
    result = []
    for i, (t, g) in enumerate(zip(inputs, found)):
        if g is None:
            if not allow_unused:
                raise RuntimeError(f"autograd.grad: one of the differentiated Tensors (inputs[{i}], shape {t.shape}) "
                                   "appears to not have been used in the graph. Set allow_unused=True if this is "
                                   "the desired behavior.")
            result.append(Tensor._result(np.zeros(t.shape, t.dtype), None) if materialize_grads else None)
        else:
            result.append(g if isinstance(g, Tensor) else Tensor._result(np.array(g, dtype=t.dtype), None))
    return tuple(result)


def backward(tensors: Any, grad_tensors: Any = None, retain_graph: bool | None = None, create_graph: bool = False,
             inputs: Sequence[Tensor] | Tensor | None = None, grad_variables: Any = None) -> None:
    """Accumulate the gradients of `tensors` (weighted by `grad_tensors`) into the leaves' `.grad` (or only into
    `inputs`'), as PyTorch's torch.autograd.backward."""
    roots = _tensors(tensors, "tensors", "autograd.backward")
    starts = _start(roots, grad_tensors if grad_tensors is not None else grad_variables, create_graph,
                    "autograd.backward")
    if inputs is not None:
        inputs = _tensors(inputs, "inputs", "autograd.backward")
    run_backward(roots, starts, create_graph if retain_graph is None else bool(retain_graph), bool(create_graph),
                 accumulate_into=inputs)


class _VariableType(type):
    def __instancecheck__(cls, value: Any) -> bool:
        return isinstance(value, Tensor)


class Variable(metaclass=_VariableType):
    """The deprecated `Variable(tensor, requires_grad=False)` of old PyTorch tutorials: it makes a tensor (the
    same memory, a leaf), as PyTorch's does today. `isinstance(t, Variable)` is True for every tensor."""

    def __new__(cls, data: Any, requires_grad: bool = False, volatile: bool = False) -> Tensor:  # noqa: ARG003
        t = data.detach() if isinstance(data, Tensor) else Tensor(data)
        return t.requires_grad_(bool(requires_grad)) if requires_grad else t
