"""`torch.func`'s gradient transforms in their functional form: `grad`, `grad_and_value` and `vjp`.

`grad(f)` is a new function returning df/dx of a one-element f at its argument; transforms nest
(`grad(grad(f))` is the second derivative), since each records its gradient's graph whenever its
argument is itself being differentiated. vmap is not provided.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .autograd.backward import grad as _grad
from .engine import Alias, enable_grad, is_grad_enabled
from .tensor import Tensor


def _track(x: Any, name: str) -> tuple[Tensor, bool]:
    """x as a tensor to differentiate with respect to, and whether an outer transform differentiates it too."""
    if not isinstance(x, Tensor) or x.dtype.kind != "f":
        raise TypeError(f"{name}: the argument to differentiate must be a float Tensor, got "
                        f"{getattr(x, 'dtype', type(x).__name__)}")
    nested = x.requires_grad and is_grad_enabled()
    return (Alias.apply(x) if nested else x.detach().requires_grad_(True)), nested


def _argnums(argnums: Any, count: int, name: str) -> tuple[int, ...]:
    numbers = argnums if isinstance(argnums, tuple) else (argnums,)
    if not numbers or any(isinstance(i, bool) or not isinstance(i, int) or not -count <= i < count for i in numbers):
        raise ValueError(f"{name}: argnums must be an int or a tuple of ints in [-{count}, {count}), got {argnums!r}")
    return tuple(i % count for i in numbers)


def grad_and_value(func: Callable, argnums: int | tuple[int, ...] = 0, has_aux: bool = False) -> Callable:
    """A function returning (d func / d args[argnums], func(*args)) for a func with one-element output
    (((grad, value), aux) with has_aux, func returning (value, aux))."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        chosen = _argnums(argnums, len(args), "grad")
        args, nested = list(args), False
        for i in chosen:
            args[i], inner = _track(args[i], "grad")
            nested |= inner
        with enable_grad():
            result = func(*args, **kwargs)
        value, aux = result if has_aux else (result, None)
        if not isinstance(value, Tensor) or value.numel() != 1:
            raise RuntimeError(f"grad: the function must return a tensor with one element, got "
                               f"{getattr(value, 'shape', type(value).__name__)}")
        found = _grad(value, [args[i] for i in chosen], create_graph=nested, allow_unused=True, materialize_grads=True)
        grads = found if isinstance(argnums, tuple) else found[0]
        value = value if nested else value.detach()
        return ((grads, value), aux) if has_aux else (grads, value)

    return wrapper


def grad(func: Callable, argnums: int | tuple[int, ...] = 0, has_aux: bool = False) -> Callable:
    """A function returning d func / d args[argnums] (with aux: (grad, aux)) for a func with one-element output."""
    both = grad_and_value(func, argnums, has_aux)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if has_aux:
            (grads, _), aux = both(*args, **kwargs)
            return grads, aux
        return both(*args, **kwargs)[0]

    return wrapper


def vjp(func: Callable, *primals: Tensor, has_aux: bool = False) -> tuple:
    """(func(*primals), vjp_fn): vjp_fn(v) gives v^T J for each primal, as a tuple (and aux with has_aux)."""
    tracked, nested = [], False
    for p in primals:
        t, inner = _track(p, "vjp")
        tracked.append(t)
        nested |= inner
    with enable_grad():
        result = func(*tracked)
    output, aux = result if has_aux else (result, None)
    outputs = output if isinstance(output, tuple) else (output,)

    def vjp_fn(*cotangents: Tensor) -> tuple:
        if len(cotangents) == 1 and isinstance(cotangents[0], tuple):
            cotangents = cotangents[0]
        keep = nested or is_grad_enabled() and any(c.requires_grad for c in cotangents if isinstance(c, Tensor))
        return _grad(list(outputs), tracked, list(cotangents), retain_graph=True, create_graph=keep,
                     allow_unused=True, materialize_grads=True)

    shown = output if nested else (tuple(o.detach() for o in outputs) if isinstance(output, tuple) else output.detach())
    return (shown, vjp_fn, aux) if has_aux else (shown, vjp_fn)


__all__ = ["grad", "grad_and_value", "vjp"]
