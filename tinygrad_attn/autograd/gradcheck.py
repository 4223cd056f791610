"""Check analytic gradients against central finite differences.

How: the outputs y of `fn` are projected onto fixed random directions w
(standard normal, seeded), giving the scalar L = sum(y * w). One backward pass
gives the analytic dL/dx; for each element x_i of each input that requires
grad, the numeric derivative is (L(x_i + eps) - L(x_i - eps)) / (2 eps).
Checking one random projection of the output detects a wrong Jacobian with
probability 1; inputs with more than `max_elements` entries are checked on a
random subset of that many elements.

Everything runs in float64: float inputs are promoted for the duration of the
check, perturbed in place (so views keep their strides, and parameters that
`fn` reads through a module are perturbed too), and restored afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..engine import enable_grad, no_grad
from ..tensor import Tensor, where
from .backward import grad


class GradcheckError(RuntimeError):
    pass


def _outputs(result: Any) -> list[Tensor]:
    items = result if isinstance(result, (tuple, list)) else (result,)
    return [t for t in items if isinstance(t, Tensor) and t.dtype.kind == "f"]


def gradcheck(
    fn: Callable[..., Any],
    inputs: Tensor | Sequence[Tensor],
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    max_elements: int = 2048,
    seed: int = 0,
) -> bool:
    """True if every input's analytic gradient matches finite differences.

    `fn(*inputs)` returns a tensor of any shape (or a tuple of them). An
    element fails when |analytic - numeric| > atol + rtol * |numeric|. On
    failure raises GradcheckError ("gradient mismatch ...") naming the input,
    the worst index and both values, or returns False with raise_exception=False.
    A numeric or analytic derivative that is not finite counts as a mismatch.
    """
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise TypeError(f"gradcheck: inputs[{i}] is a {type(t).__name__}, not a Tensor; wrap it as "
                            "ta.Tensor(array, requires_grad=True)")
    saved = [(t._data, t.grad) for t in inputs]
    rng = np.random.default_rng(seed)
    try:
        for t in inputs:
            if t.dtype.kind == "f" and t.dtype != np.float64:
                t._data = t._data.astype(np.float64)
            t.grad = None
        outputs = _outputs(fn(*inputs))
        # outputs that are not finite (a masked log-probability is -inf) are constants: weight 0
        directions = [np.where(np.isfinite(y._data), rng.standard_normal(y.shape), 0.0) for y in outputs]

        def projected() -> float:
            with no_grad():
                ys = _outputs(fn(*inputs))
                return sum(float((np.where(w != 0, y._data, 0) * w).sum()) for y, w in zip(ys, directions))

        differentiable = [
            (where(Tensor(w != 0), y, 0.0) * Tensor(w)).sum() for y, w in zip(outputs, directions) if y.requires_grad
        ]
        if differentiable:
            total = differentiable[0]
            for term in differentiable[1:]:
                total = total + term
            total.backward()

        for position, t in enumerate(inputs):
            if not t.requires_grad:
                continue
            analytic = np.zeros(t.shape) if t.grad is None else t.grad._data
            flat = np.arange(t.numel())
            if t.numel() > max_elements:
                flat = np.sort(rng.choice(t.numel(), max_elements, replace=False))
            numeric = np.empty(len(flat))
            for n, i in enumerate(flat):
                index = np.unravel_index(i, t.shape)
                original = t._data[index]
                t._data[index] = original + eps
                plus = projected()
                t._data[index] = original - eps
                minus = projected()
                t._data[index] = original
                numeric[n] = (plus - minus) / (2 * eps)
            picked = analytic.reshape(-1)[flat] if t.shape else analytic.reshape(1)
            excess = np.abs(picked - numeric) - (atol + rtol * np.abs(numeric))
            excess = np.where(np.isfinite(picked) & np.isfinite(numeric), excess, np.inf)
            if np.any(excess > 0):
                worst = int(np.argmax(excess))
                index = tuple(int(j) for j in np.unravel_index(flat[worst], t.shape))
                a, num = picked[worst], numeric[worst]
                message = (
                    f"gradient mismatch for input {position} (shape {t.shape}) at index {index}: "
                    f"analytic {a:.8g}, numeric {num:.8g}, abs error {abs(a - num):.3g}, "
                    f"rel error {abs(a - num) / max(abs(num), 1e-300):.3g} (atol {atol}, rtol {rtol}); "
                    f"{int(np.sum(excess > 0))} of {len(flat)} checked elements fail"
                )
                if raise_exception:
                    raise GradcheckError(message)
                return False
        return True
    finally:
        for t, (data, grad) in zip(inputs, saved):
            t._data, t.grad = data, grad


def gradgradcheck(
    fn: Callable[..., Any],
    inputs: Tensor | Sequence[Tensor],
    grad_outputs: Tensor | Sequence[Tensor] | None = None,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    max_elements: int = 2048,
    seed: int = 0,
) -> bool:
    """True if the second derivatives of `fn` match finite differences of its first derivatives, as PyTorch's
    gradgradcheck: `gradcheck` of x, v -> d(sum(fn(x) * v))/dx computed with `create_graph=True`, so both
    the dependence on x (the Hessian) and on the vector v (the Jacobian again) are checked. `grad_outputs`
    (one per float output) are drawn at random (seeded) when not given."""
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    outputs = _outputs(fn(*inputs))
    if grad_outputs is None:
        rng = np.random.default_rng(seed + 1)
        grad_outputs = [Tensor(rng.standard_normal(y.shape).astype(np.float64), requires_grad=True) for y in outputs]
    else:
        grad_outputs = [grad_outputs] if isinstance(grad_outputs, Tensor) else list(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"gradgradcheck: {len(grad_outputs)} grad_outputs for {len(outputs)} float outputs")
    n = len(inputs)

    def first_derivative(*args: Tensor) -> tuple[Tensor, ...]:
        xs, vs = args[:n], args[n:]
        with enable_grad():
            ys = _outputs(fn(*xs))
            pairs = [(y, v) for y, v in zip(ys, vs) if y.requires_grad]
            wanted = [x for x in xs if isinstance(x, Tensor) and x.requires_grad]
            if not pairs or not wanted:
                return tuple(Tensor(np.zeros(x.shape)) for x in wanted)
            found = grad([y for y, _ in pairs], wanted, [v.astype(y.dtype) for y, v in pairs], create_graph=True,
                         allow_unused=True)
        return tuple(Tensor(np.zeros(x.shape, x.dtype)) if g is None else g for x, g in zip(wanted, found))

    return gradcheck(first_derivative, inputs + grad_outputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception, max_elements=max_elements, seed=seed)
