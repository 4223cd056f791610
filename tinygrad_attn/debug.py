"""Watching gradients flow: a per-node trace of the backward pass, and NaN / inf detection.

Both use the engine's hooks (`tensor._forward_hooks`, `tensor._backward_hooks`),
so they see every op, built-in or user-defined.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import engine


@dataclass
class BackwardTrace:
    """Rows of (op, output shape, |dL/d output|, |dL/d input| per input, module), in the order backward ran.
    `module` names the module whose forward made the node: its path in `names` (a model) when given, else
    its class (`MultiHeadAttention`), or "" for a node made outside any module."""

    rows: list[tuple[str, tuple, float, list[float | None], str]] = field(default_factory=list)

    def table(self) -> str:
        width = max([len(r[4]) for r in self.rows] + [6]) + 2
        lines = [f"{'module':<{width}}{'op':<22}{'output shape':<20}{'grad norm out':>15}   grad norms in"]
        for op, shape, out_norm, in_norms, module in self.rows:
            ins = ", ".join("-" if n is None else f"{n:.3g}" for n in in_norms)
            lines.append(f"{module:<{width}}{op:<22}{str(shape):<20}{out_norm:>15.4g}   {ins}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


@contextlib.contextmanager
def trace_backward(print_table: bool = True, names: Any = None) -> Iterator[BackwardTrace]:
    """Record each node of the backward passes run inside the block; print the table at the end. With
    `names` (the model), each row names the layer that made it by its path (`layers.0.self_attn.q_proj`).

    >>> with ta.trace_backward(names=model) as trace:
    ...     loss.backward()
    """
    trace = BackwardTrace()
    paths = {} if names is None else {id(m): n or type(m).__name__ for n, m in names.named_modules()}

    def where(scope: Any) -> str:
        if scope is None:
            return ""
        return paths.get(id(scope), type(scope).__name__)

    def record(ctx, grad_output, input_grads):
        norms = [None if g is None else float(np.linalg.norm(np.asarray(g))) for g in input_grads]
        trace.rows.append((ctx.function.__name__, grad_output.shape, float(np.linalg.norm(grad_output)), norms,
                           where(ctx.scope)))

    engine._backward_hooks.append(record)
    try:
        yield trace
    finally:
        engine._backward_hooks.remove(record)
        if print_table:
            print(trace.table())


class AnomalyError(RuntimeError):
    pass


@contextlib.contextmanager
def detect_anomaly() -> Iterator[None]:
    """Raise AnomalyError at the first op whose forward output or backward gradients hold NaN or inf.

    -inf is allowed in a forward output, where it is how a masked score or
    log-probability is written; NaN and +inf are not.
    """

    def shapes(ctx) -> str:
        return ", ".join(str(t.shape) for t in ctx.inputs)

    def check_forward(ctx, result):
        data = result._data
        if data.dtype.kind == "f" and (np.isnan(data).any() or np.isposinf(data).any()):
            raise AnomalyError(f"{ctx.function.__name__} forward produced NaN or inf (input shapes {shapes(ctx)})")

    def check_backward(ctx, grad_output, input_grads):
        for i, g in enumerate(input_grads):
            if g is not None and not np.all(np.isfinite(g)):
                raise AnomalyError(
                    f"{ctx.function.__name__} backward produced NaN or inf in the gradient of input {i} "
                    f"(input shapes {shapes(ctx)})"
                )

    engine._forward_hooks.append(check_forward)
    engine._backward_hooks.append(check_backward)
    try:
        yield
    finally:
        engine._forward_hooks.remove(check_forward)
        engine._backward_hooks.remove(check_backward)
