"""PyTorch's `torch.autograd.functional`: Jacobians, Hessians and their products with vectors, for a function
of tensors.

Each is a few calls of `autograd.grad`: a vector-Jacobian product is one backward pass, a Jacobian one
backward per output element, a Hessian-vector product the backward of a gradient computed with
`create_graph=True`, and a Jacobian-vector product the backward of a vector-Jacobian product with
respect to its vector (the "double backward" trick). Inputs and outputs are a Tensor or a tuple of them,
and results take the same form, as in PyTorch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..engine import enable_grad
from ..tensor import Tensor, stack
from .backward import grad


def _as_tuple(value: Any, name: str, op: str) -> tuple[bool, tuple[Tensor, ...]]:
    single = isinstance(value, Tensor)
    items = (value,) if single else tuple(value) if isinstance(value, (tuple, list)) else None
    if items is None or not all(isinstance(t, Tensor) for t in items):
        raise TypeError(f"{op}: {name} must be a Tensor or a tuple of Tensors, got {type(value).__name__}")
    return single, items


def _prepare(inputs: tuple[Tensor, ...], create_graph: bool) -> tuple[Tensor, ...]:
    """Inputs to differentiate with respect to: new leaves that require grad, or, to keep the graph back to
    the caller's tensors (create_graph), views of them."""
    return tuple(t.view(t.shape) if create_graph and t.requires_grad else t.detach().requires_grad_(t.dtype.kind == "f")
                 for t in inputs)


def _grads(outputs: Any, inputs: tuple[Tensor, ...], v: Any, create_graph: bool, strict: bool, op: str) -> tuple:
    """The gradients of `outputs` weighted by `v` for each input; zeros where an input is not used (an error
    when `strict`)."""
    outputs = [o for o in outputs if o.requires_grad]
    v = [w for w, o in zip(v, outputs)] if v is not None else None
    if not outputs:
        found: tuple = (None,) * len(inputs)
    else:
        found = grad(outputs, [t for t in inputs if t.requires_grad], v, retain_graph=True, create_graph=create_graph,
                     allow_unused=True)
        it = iter(found)
        found = tuple(next(it) if t.requires_grad else None for t in inputs)
    result = []
    for i, (t, g) in enumerate(zip(inputs, found)):
        if g is None:
            if strict:
                raise RuntimeError(f"{op}: the output is independent of input {i}; strict mode does not allow it")
            g = Tensor._result(np.zeros(t.shape, t.dtype), None)
        result.append(g if create_graph else g.detach())
    return tuple(result)


def _call(func: Callable, inputs: tuple[Tensor, ...], op: str) -> tuple[bool, tuple[Tensor, ...]]:
    with enable_grad():
        out = func(*inputs)
    return _as_tuple(out, "the function's output", op)


def _check_v(v: Any, like: tuple[Tensor, ...], op: str, single: bool) -> tuple[Tensor, ...]:
    _, vs = _as_tuple(v, "v", op)
    if len(vs) != len(like) or any(a.shape != b.shape for a, b in zip(vs, like)):
        raise RuntimeError(f"{op}: v has shapes {[w.shape for w in vs]}, expected {[t.shape for t in like]}")
    return vs


def vjp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False, strict: bool = False) -> tuple:
    """(func(inputs), v^T J): the vector-Jacobian product of func at inputs."""
    single_in, xs = _as_tuple(inputs, "inputs", "vjp")
    xs = _prepare(xs, create_graph)
    single_out, ys = _call(func, xs, "vjp")
    if v is None:
        if len(ys) != 1 or ys[0].numel() != 1:
            raise RuntimeError("vjp: v can be omitted only when the function returns one tensor with one element")
        v = Tensor._result(np.ones(ys[0].shape, ys[0].dtype), None)
    vs = _check_v(v, ys, "vjp", single_out)
    grads = _grads(ys, xs, [w for w, y in zip(vs, ys) if y.requires_grad], create_graph, strict, "vjp")
    outs = tuple(y if create_graph else y.detach() for y in ys)
    return (outs[0] if single_out else outs), (grads[0] if single_in else grads)


def jvp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False, strict: bool = False) -> tuple:
    """(func(inputs), J v): the Jacobian-vector product, by the double-backward trick."""
    single_in, xs = _as_tuple(inputs, "inputs", "jvp")
    if v is None:
        if len(xs) != 1 or xs[0].numel() != 1:
            raise RuntimeError("jvp: v can be omitted only for one input with one element")
        v = Tensor._result(np.ones(xs[0].shape, xs[0].dtype), None)
    vs = _check_v(v, xs, "jvp", single_in)
    xs = _prepare(xs, create_graph)
    single_out, ys = _call(func, xs, "jvp")
    with enable_grad():
        us = tuple(Tensor._result(np.zeros(y.shape, y.dtype), None).requires_grad_(y.dtype.kind == "f") for y in ys)
        vjps = _grads(ys, xs, [u for u, y in zip(us, ys) if y.requires_grad], True, strict, "jvp")
        tracked = [(g, w) for g, w in zip(vjps, vs) if g.requires_grad]
        jvps = _grads([g for g, _ in tracked], us, [w for _, w in tracked] if tracked else None, create_graph,
                      strict, "jvp")
    outs = tuple(y if create_graph else y.detach() for y in ys)
    return (outs[0] if single_out else outs), (jvps[0] if single_out else jvps)


def jacobian(func: Callable, inputs: Any, create_graph: bool = False, strict: bool = False, vectorize: bool = False,
             strategy: str = "reverse-mode") -> Any:
    """d func(inputs) / d inputs: for output i and input j, a tensor of shape output_i.shape + input_j.shape
    (one backward pass per output element). `vectorize` and forward-mode are accepted and compute the same."""
    if strategy not in ("reverse-mode", "forward-mode"):
        raise ValueError(f'jacobian: strategy must be "reverse-mode" or "forward-mode", got {strategy!r}')
    single_in, xs = _as_tuple(inputs, "inputs", "jacobian")
    xs = _prepare(xs, create_graph)
    single_out, ys = _call(func, xs, "jacobian")
    table = []
    for y in ys:
        rows = [[] for _ in xs]
        for k in range(y.numel()):
            pick = np.zeros(y.numel(), y.dtype)
            pick[k] = 1
            direction = Tensor._result(pick.reshape(y.shape), None)
            for j, g in enumerate(_grads([y], xs, [direction] if y.requires_grad else None, create_graph, strict,
                                         "jacobian")):
                rows[j].append(g.reshape(-1))
        blocks = []
        for j, x in enumerate(xs):
            if rows[j]:
                blocks.append(stack(rows[j]).reshape(y.shape + x.shape))
            else:
                blocks.append(Tensor._result(np.zeros(y.shape + x.shape, x.dtype), None))
        table.append(blocks[0] if single_in else tuple(blocks))
    return table[0] if single_out else tuple(table)


def hessian(func: Callable, inputs: Any, create_graph: bool = False, strict: bool = False, vectorize: bool = False,
            outer_jacobian_strategy: str = "reverse-mode") -> Any:
    """d^2 func(inputs) / d inputs^2 for a function returning one element: the Jacobian of its gradient."""
    single_in, xs = _as_tuple(inputs, "inputs", "hessian")

    def gradient(*args: Tensor) -> Any:
        single_out, ys = _call(func, args, "hessian")
        if len(ys) != 1 or ys[0].numel() != 1:
            raise RuntimeError("hessian: the function must return a single tensor with one element")
        grads = _grads(ys, args, None, True, strict, "hessian")
        return grads[0] if single_in else grads

    return jacobian(gradient, xs[0] if single_in else xs, create_graph, strict, vectorize, outer_jacobian_strategy)


def _hessian_product(func: Callable, inputs: Any, v: Any, create_graph: bool, strict: bool, op: str) -> tuple:
    single_in, xs = _as_tuple(inputs, "inputs", op)
    vs = _check_v(v, xs, op, single_in)
    xs = _prepare(xs, create_graph)
    single_out, ys = _call(func, xs, op)
    if len(ys) != 1 or ys[0].numel() != 1:
        raise RuntimeError(f"{op}: the function must return a single tensor with one element")
    with enable_grad():
        grads = _grads(ys, xs, None, True, strict, op)
        tracked = [(g, w) for g, w in zip(grads, vs) if g.requires_grad]
        products = _grads([g for g, _ in tracked], xs, [w for _, w in tracked] if tracked else None, create_graph,
                          strict, op)
    out = ys[0] if create_graph else ys[0].detach()
    return out, (products[0] if single_in else products)


def vhp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False, strict: bool = False) -> tuple:
    """(func(inputs), v^T H): a vector times the Hessian of a one-element function."""
    return _hessian_product(func, inputs, v, create_graph, strict, "vhp")


def hvp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False, strict: bool = False) -> tuple:
    """(func(inputs), H v): the Hessian of a one-element function times a vector (equal to v^T H, H being
    symmetric for a twice continuously differentiable function)."""
    return _hessian_product(func, inputs, v, create_graph, strict, "hvp")


__all__ = ["hessian", "hvp", "jacobian", "jvp", "vhp", "vjp"]
