"""PyTorch's `torch.autograd.Function`: a new op written with tensors, its backward too.

    class Cube(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * 3 * x ** 2

    y = Cube.apply(x)

The forward runs without recording (its ops are not part of the graph); the result is one node whose
backward calls yours. Because your backward is written with tensor ops, a gradient that must be
differentiated again (`create_graph=True`) records its graph as it runs, as in PyTorch; decorate the
backward with `@once_differentiable` when it is not differentiable (it uses `.numpy()`, say).

(`tinygrad_attn.Function`, the library's own, takes numpy arrays instead: see docs/autograd.md.)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..engine import Function as _EngineFunction
from ..engine import Node, _OnceDifferentiable, is_grad_enabled, no_grad
from ..tensor import Tensor


class FunctionCtx:
    """The `ctx` your forward and backward share: save_for_backward, saved_tensors, needs_input_grad,
    mark_non_differentiable, set_materialize_grads, and any attribute you set."""

    def __init__(self, needs_input_grad: tuple[bool, ...]):
        self.needs_input_grad = needs_input_grad
        self.to_save: tuple = ()
        self._versions: tuple = ()
        self.non_differentiable: set[int] = set()
        self.materialize_grads = True
        self.dirty: tuple = ()

    def save_for_backward(self, *tensors: Tensor | None) -> None:
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save tensors (or None), but argument {i} is a "
                                f"{type(t).__name__}; keep other values as attributes of ctx")
        self.to_save = tensors
        self._versions = tuple(None if t is None else (t._version_counter, t._version_counter[0]) for t in tensors)

    @property
    def saved_tensors(self) -> tuple:
        for t, record in zip(self.to_save, self._versions):
            if record is not None and record[0][0] != record[1]:
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation: [Tensor of shape {t.shape}, dtype {t.dtype}] saved by save_for_backward is at "
                    f"version {record[0][0]}; expected version {record[1]} instead")
        return self.to_save

    def mark_non_differentiable(self, *tensors: Tensor) -> None:
        self.non_differentiable |= {id(t) for t in tensors}

    def mark_dirty(self, *tensors: Tensor) -> None:
        self.dirty = tensors

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = bool(value)


class _UserFunction(_EngineFunction):
    """The graph node a user's Function leaves: its output is the user's differentiable outputs, flattened
    one after the other (one output: itself), and its backward calls the user's backward on tensors."""

    differentiable = True

    @staticmethod
    def forward(ctx, *arrays, packed, function, user_ctx, shapes, positions):
        return packed

    @staticmethod
    def backward(ctx, grad):
        kwargs = ctx.kwargs
        function, user_ctx, shapes = kwargs["function"], kwargs["user_ctx"], kwargs["shapes"]
        first_order = not isinstance(grad, Node)
        g = Tensor._result(grad, None) if first_order else grad
        grads, start = [], 0
        for shape in shapes:  # each output's slice of the flat gradient
            if shape is None:  # an output no gradient reaches (non-differentiable, or not a float tensor)
                grads.append(None)
                continue
            size = math.prod(shape)
            grads.append(g if len(shapes) == 1 else g[start:start + size].reshape(shape))
            start += size
        if user_ctx.materialize_grads:
            grads = [Tensor._result(np.zeros((), g.dtype), None) if x is None else x for x in grads]
        results = function.backward(user_ctx, *grads)
        results = results if isinstance(results, tuple) else (results,)
        n_args = len(user_ctx.needs_input_grad)
        if len(results) < n_args or any(r is not None for r in results[n_args:]):
            raise RuntimeError(f"function {function.__name__}Backward returned an incorrect number of gradients "
                               f"(expected {n_args}, got {len(results)})")
        out = []
        for position in kwargs["positions"]:  # the engine's inputs are the tensor arguments, in order
            r = results[position]
            if r is not None and not isinstance(r, Tensor):
                raise TypeError(f"{function.__name__}.backward: gradient {position} must be a Tensor or None, "
                                f"got {type(r).__name__}")
            out.append(None if r is None else r._data if first_order else r)
        return tuple(out)


class Function:
    """Base class of ops written with tensors, PyTorch's torch.autograd.Function (see the module's doc)."""

    @staticmethod
    def forward(ctx: FunctionCtx, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("a Function subclass must define forward(ctx, *args)")

    @staticmethod
    def backward(ctx: FunctionCtx, *grad_outputs: Any) -> Any:
        raise NotImplementedError("a Function subclass must define backward(ctx, *grad_outputs)")

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        needs = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        ctx = FunctionCtx(needs)
        with no_grad():
            result = cls.forward(ctx, *args, **kwargs)
        single = not isinstance(result, tuple)
        outputs = (result,) if single else result
        if not (is_grad_enabled() and any(needs)):
            return result
        differentiable = [isinstance(o, Tensor) and o.dtype.kind == "f" and id(o) not in ctx.non_differentiable
                          for o in outputs]
        if not any(differentiable):
            return result
        chosen = [o for o, d in zip(outputs, differentiable) if d]
        dtype = np.result_type(*(o.dtype for o in chosen))
        packed = chosen[0]._data if len(chosen) == 1 else np.concatenate([o._data.reshape(-1) for o in chosen])
        positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        node = _UserFunction.apply(*(args[i] for i in positions), packed=packed.astype(dtype, copy=False),
                                   function=cls, user_ctx=ctx, positions=positions,
                                   shapes=[o.shape if d else None for o, d in zip(outputs, differentiable)])
        made, start = [], 0
        for o, d in zip(outputs, differentiable):
            if not d:
                made.append(o)
                continue
            if len(chosen) == 1:
                made.append(node if node.dtype == o.dtype else node.astype(o.dtype))
                continue
            size = o._data.size
            part = node[start:start + size].reshape(o.shape)
            made.append(part if part.dtype == o.dtype else part.astype(o.dtype))
            start += size
        return made[0] if single else tuple(made)


def once_differentiable(backward: Callable) -> Callable:
    """Decorate a Function's backward that is not itself differentiable: it runs without recording, and a
    gradient it returns that would be differentiated again raises PyTorch's error instead of giving a
    silently wrong (zero) second derivative."""

    @functools.wraps(backward)
    def wrapper(ctx: FunctionCtx, *grad_outputs: Any) -> Any:
        with no_grad():
            results = backward(ctx, *grad_outputs)
        tracked = [g for g in grad_outputs if isinstance(g, Tensor) and g.requires_grad]
        tracked += [t for t in ctx.to_save if isinstance(t, Tensor) and t.requires_grad]
        if not is_grad_enabled() or not tracked:
            return results
        single = not isinstance(results, tuple)
        marked = tuple(r if not isinstance(r, Tensor) else
                       _OnceDifferentiable.apply(r.detach(), *tracked, name=backward.__qualname__)
                       for r in ((results,) if single else results))
        return marked[0] if single else marked

    return wrapper
