"""Optimizers (SGD, Adam, AdamW), gradient clipping and learning-rate schedules.

Each optimizer updates its parameters' arrays in place, with PyTorch's update
rules, and keeps its state as flat numpy arrays so that a checkpoint can hold
it without pickle: `state_dict()` -> {"step": ..., "exp_avg.0": ..., ...}.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..checks import check_number
from ..kernels.adam import adam_update
from ..tensor import Tensor


class Optimizer:
    """Parameters in groups, each group a dict of the parameters and their options (lr, weight decay, ...),
    as PyTorch's `param_groups`; a schedule may set a group's "lr" between steps.

    `params` is an iterable of tensors (one group) or of dicts {"params": [...], option: value, ...}
    whose options override the defaults given to the optimizer. Per-parameter state (moment estimates,
    momentum buffers, step counts) is kept as flat numpy arrays, so a checkpoint holds it without pickle.
    """

    state_names: tuple[str, ...] = ()
    # PyTorch's options that choose how a step runs (one loop per parameter or per list, on which device,
    # recorded for autograd or not), not what it computes: accepted and kept in param_groups, as PyTorch keeps
    # them, never written into a checkpoint's flat arrays (flat_state), so a PyTorch state dict loads with them.
    RUN_FLAGS = ("foreach", "capturable", "differentiable", "fused")
    # Options checkpoints written before they existed lack: such a checkpoint loads with their defaults, the
    # behaviour it was written with.
    LATER_OPTIONS = ("dampening", "maximize", "amsgrad", "decoupled_weight_decay")

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]):
        name = type(self).__name__
        if isinstance(params, Tensor) or hasattr(params, "named_parameters"):
            raise TypeError(f"{name}: params must be an iterable of tensors or of dicts, got a "
                            f"{type(params).__name__}; pass model.parameters() or [tensor]")
        try:
            items = list(params)
        except TypeError:
            raise TypeError(f"{name}: params must be an iterable of tensors or of dicts, got {params!r}") from None
        if not items:
            raise ValueError(f"{name}: got an empty parameter list")
        if all(isinstance(item, dict) for item in items):
            groups = items
        elif all(isinstance(item, Tensor) for item in items):
            groups = [{"params": items}]
        else:
            bad = next(item for item in items if not isinstance(item, (Tensor, dict)))
            raise TypeError(f"{name}: params must all be tensors or all be dicts, got a {type(bad).__name__} "
                            f"({bad!r:.60})")
        self.defaults = self._check_options(dict(defaults))
        self.param_groups: list[dict[str, Any]] = []
        self.params: list[Tensor] = []
        for group in groups:
            self.add_param_group(group)

    def _check_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """Validate a group's options (the subclasses add their own)."""
        name = type(self).__name__
        if "lr" in options:
            options["lr"] = check_number(options["lr"], "lr", name, 0.0)
        if "weight_decay" in options:
            options["weight_decay"] = check_number(options["weight_decay"], "weight_decay", name, 0.0)
        for flag in ("maximize", "amsgrad", "decoupled_weight_decay", "nesterov", "capturable", "differentiable"):
            if flag in options and not isinstance(options[flag], (bool, np.bool_)):
                raise TypeError(f"{name}: {flag} must be a bool, got {options[flag]!r}")
        for flag in ("foreach", "fused"):
            if options.get(flag) is not None and not isinstance(options[flag], (bool, np.bool_)):
                raise TypeError(f"{name}: {flag} must be None or a bool, got {options[flag]!r}")
        if options.get("foreach") and options.get("fused"):
            raise RuntimeError(f"{name}: `fused` and `foreach` cannot be `True` together.")
        if options.get("differentiable"):
            raise NotImplementedError(f"{name}: differentiable=True (a step autograd can differentiate through) is "
                                      "not supported here; the step updates the parameters in place, unrecorded")
        return options

    def add_param_group(self, group: dict[str, Any]) -> None:
        name = type(self).__name__
        if not isinstance(group, dict) or "params" not in group:
            raise TypeError(f"{name}: a parameter group is a dict with a 'params' list, got {group!r:.80}")
        params = [group["params"]] if isinstance(group["params"], Tensor) else list(group["params"])
        unknown = set(group) - set(self.defaults) - {"params"}
        if unknown:
            raise ValueError(f"{name}: unknown option(s) {sorted(unknown)} in a parameter group; "
                             f"options are {sorted(self.defaults)}")
        for p in params:
            if not isinstance(p, Tensor) or p.dtype.kind != "f":
                raise TypeError(f"{name}: parameters must be floating-point tensors, got {p!r:.60}")
            if any(p is q for q in self.params):
                raise ValueError(f"{name}: a parameter appears in more than one group (or twice)")
        options = self._check_options({k: v for k, v in group.items() if k != "params"})
        self.param_groups.append({"params": params, **self.defaults, **options})
        for p in params:
            self.params.append(p)
            names = self.state_names + (("max_exp_avg_sq",) if self.param_groups[-1].get("amsgrad") else ())
            self.state_arrays().append({n: np.zeros_like(p._data) for n in names} | {"step": 0})

    def state_arrays(self) -> list[dict[str, Any]]:
        if not hasattr(self, "_state"):
            self._state: list[dict[str, Any]] = []
        return self._state

    @property
    def lr(self) -> float:
        """The first group's learning rate; setting it sets every group's."""
        return self.param_groups[0]["lr"]

    @lr.setter
    def lr(self, value: float) -> None:
        value = check_number(value, "lr", type(self).__name__, 0.0)
        for group in self.param_groups:
            group["lr"] = value

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad._data[...] = 0

    def step(self) -> None:
        i = 0
        for group in self.param_groups:
            self._check_options({k: v for k, v in group.items() if k != "params"})  # a schedule may have set them
            for p in group["params"]:
                state = self._state[i]
                if p.grad is not None:
                    state["step"] += 1
                    self.update(state, p._data, p.grad._data, group)
                    p.bump_version()  # changed in place: a graph that saved the old value refuses to backward
                i += 1

    def update(self, state: dict[str, Any], param: np.ndarray, grad: np.ndarray, group: dict[str, Any]) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """PyTorch's layout: {"state": {i: {name: array}}, "param_groups": [{option: value, "params": [i, ...]}]},
        i counting the parameters in group order; the arrays are copies. `flat_state` turns it into the flat
        arrays a checkpoint file holds, and `load_state_dict` takes either."""
        state = {i: {name: np.array(value, copy=True) for name, value in s.items()} for i, s in enumerate(self._state)}
        groups, start = [], 0
        for group in self.param_groups:
            count = len(group["params"])
            groups.append({**{k: v for k, v in group.items() if k != "params"},
                           "params": list(range(start, start + count))})
            start += count
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned; everything is checked before anything is assigned."""
        name = type(self).__name__
        if not isinstance(state, dict):
            raise TypeError(f"{name}.load_state_dict: expected a dict of arrays, got {type(state).__name__}")
        expected = flat_state(self.state_dict())
        if "state" in state or "param_groups" in state:  # PyTorch's layout, as state_dict gives it
            state = self._fresh_where_absent(flat_state(state, f"{name}.load_state_dict"), expected)
        state = dict(state)
        for key in set(expected) - set(state):  # a checkpoint from before an option existed: its default
            option = key.split(".", 2)[-1]
            if key.startswith("group.") and option in self.LATER_OPTIONS:
                state[key] = np.asarray(self.defaults[option])
        missing, unexpected = sorted(set(expected) - set(state)), sorted(map(str, set(state) - set(expected)))
        if missing:
            raise KeyError(f"{name}.load_state_dict: missing keys {missing[:5]}{' ...' if len(missing) > 5 else ''}")
        if unexpected:  # a key this optimizer has no place for: another optimizer's state, or a tampered file
            raise KeyError(f"{name}.load_state_dict: unexpected keys {unexpected[:5]}"
                           f"{' ...' if len(unexpected) > 5 else ''}")
        values = {}
        for key, current in expected.items():
            value = np.asarray(state[key])
            if value.shape != current.shape:
                raise ValueError(f"{name}.load_state_dict: {key} has shape {value.shape}, expected {current.shape}")
            if value.dtype.kind not in "fiub" and current.dtype.kind in "fiub":
                raise TypeError(f"{name}.load_state_dict: {key} has dtype {value.dtype}, expected numbers")
            counted = key.endswith((".size", ".step"))
            if counted and not (np.isfinite(value) and value == np.floor(value) and value >= 0):
                raise ValueError(f"{name}.load_state_dict: {key} must be a whole number >= 0, got {value}")
            if key.endswith(".size") and int(value) != int(current):
                raise ValueError(f"{name}.load_state_dict: {key} is {int(value)}, this optimizer's group has "
                                 f"{int(current)} parameters")
            values[key] = value
        groups = [{k: (v if k == "params" or k in self.RUN_FLAGS else values[f"group.{g}.{k}"].tolist())
                   for k, v in group.items()} for g, group in enumerate(self.param_groups)]
        for group in groups:
            if "betas" in group:
                group["betas"] = tuple(group["betas"])
            self._check_options({k: v for k, v in group.items() if k != "params"})
        for i, s in enumerate(self._state):
            for key in s:
                value = values[f"state.{i}.{key}"]
                if key == "step":
                    s[key] = int(value)
                else:
                    s[key][...] = value
        for group, restored in zip(self.param_groups, groups):
            group.update(restored)

    def _fresh_where_absent(self, state: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> dict:
        """PyTorch's layout keeps no state for a parameter that never stepped (or an SGD without momentum) and
        no step count for SGD: such a parameter's state is this optimizer's fresh one, and a momentum buffer
        without a count has been through a step."""
        state = dict(state)
        for i in range(len(self._state)):
            ours = [key for key in expected if key.startswith(f"state.{i}.")]
            if not any(key in state for key in ours):
                state.update({key: np.zeros_like(expected[key]) for key in ours})
            elif f"state.{i}.step" not in state and f"state.{i}.momentum_buffer" in state:
                state[f"state.{i}.step"] = np.asarray(1)
        return state


def flat_state(state: dict[str, Any], op: str = "flat_state") -> dict[str, np.ndarray]:
    """An optimizer's state_dict() as flat arrays: "state.{i}.{name}" per parameter and "group.{g}.{option}"
    (with "group.{g}.size", its number of parameters) per group: the form a checkpoint file stores."""
    unexpected = sorted(map(str, set(state) - {"state", "param_groups"}))
    if unexpected:
        raise KeyError(f"{op}: unexpected keys {unexpected[:5]}")
    per_parameter, groups = state.get("state", {}), state.get("param_groups", [])
    if not isinstance(per_parameter, dict) or not isinstance(groups, (list, tuple)) or not all(
            isinstance(s, dict) for s in per_parameter.values()) or not all(
            isinstance(g, dict) and isinstance(g.get("params"), (list, tuple)) for g in groups):
        raise TypeError(f'{op}: expected {{"state": {{i: {{name: array}}}}, "param_groups": [{{..., "params": '
                        f"[i, ...]}}]}}, got a {type(per_parameter).__name__} and a {type(groups).__name__}")
    flat = {f"state.{i}.{key}": np.asarray(value) for i, s in per_parameter.items() for key, value in s.items()}
    for g, group in enumerate(groups):
        flat[f"group.{g}.size"] = np.asarray(len(group["params"]))
        flat.update({f"group.{g}.{k}": np.asarray(v) for k, v in group.items()
                     if k != "params" and k not in Optimizer.RUN_FLAGS})
    return flat


class SGD(Optimizer):
    """p -= lr * g, with g = grad + weight_decay * p (grad negated first with maximize), through a momentum
    buffer when momentum > 0: buf = momentum buf + (1 - dampening) g, the first step's buf = g."""

    state_names = ("momentum_buffer",)

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False, foreach: Any = None,
                 differentiable: bool = False, fused: Any = None):
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening, "weight_decay": weight_decay,
                                  "nesterov": nesterov, "maximize": maximize, "foreach": foreach,
                                  "differentiable": differentiable, "fused": fused})

    def _check_options(self, options):
        options = super()._check_options(options)
        defaults = getattr(self, "defaults", {})
        for option in ("momentum", "dampening"):
            if option in options:
                options[option] = check_number(options[option], option, "SGD", 0.0)
        if options.get("nesterov") and (options.get("momentum", defaults.get("momentum", 0)) <= 0
                                        or options.get("dampening", defaults.get("dampening", 0)) != 0):
            raise ValueError("SGD: Nesterov momentum requires a momentum and zero dampening")
        return options

    def update(self, state, param, grad, group):
        wd, mu = group["weight_decay"], group["momentum"]
        g = -grad if group["maximize"] else grad
        g = g + wd * param if wd else g
        if mu:
            buf = state["momentum_buffer"]
            if state["step"] == 1:
                buf[...] = g  # the first step fills the buffer, as in PyTorch
            else:
                buf *= mu
                buf += (1 - group["dampening"]) * g if group["dampening"] else g
            g = g + mu * buf if group["nesterov"] else buf
        param -= group["lr"] * g


class Adam(Optimizer):
    """Adam with bias correction; weight_decay adds weight_decay * p to the gradient (L2), or decays the weight
    itself with decoupled_weight_decay (AdamW's rule). amsgrad divides by the largest v seen so far.

    The update (kernels/adam.py, one fused loop per parameter):
    m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2,
    p -= lr * m_hat / (sqrt(v_hat) + eps) with m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t).
    """

    state_names = ("exp_avg", "exp_avg_sq")

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 amsgrad: bool = False, *, foreach: Any = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused: Any = None, decoupled_weight_decay: bool = False):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "amsgrad": amsgrad, "maximize": maximize, "foreach": foreach,
                                  "capturable": capturable, "differentiable": differentiable, "fused": fused,
                                  "decoupled_weight_decay": decoupled_weight_decay})

    def _check_options(self, options):
        name = type(self).__name__
        options = super()._check_options(options)
        if "betas" in options:
            betas = options["betas"]
            if not isinstance(betas, (tuple, list)) or len(betas) != 2:
                raise TypeError(f"{name}: betas must be a pair of numbers, got {betas!r}")
            options["betas"] = tuple(check_number(b, f"betas[{i}]", name, 0.0, 1.0, high_open=True)
                                     for i, b in enumerate(betas))
        if "eps" in options:
            options["eps"] = check_number(options["eps"], "eps", name, 0.0)
        return options

    def update(self, state, param, grad, group):
        if not param.flags.c_contiguous:
            raise ValueError(f"{type(self).__name__}: parameters must be C-contiguous arrays")
        grad = np.ascontiguousarray(grad)
        (b1, b2), m, v = group["betas"], state["exp_avg"], state["exp_avg_sq"]
        v_max = state["max_exp_avg_sq"].reshape(-1) if group["amsgrad"] else np.empty(0, param.dtype)
        adam_update(param.reshape(-1), grad.reshape(-1), m.reshape(-1), v.reshape(-1), v_max, group["lr"], b1, b2,
                    group["eps"], state["step"], group["weight_decay"], group["decoupled_weight_decay"],
                    group["maximize"])


class AdamW(Adam):
    """Adam with decoupled weight decay: p *= 1 - lr * weight_decay before the Adam step (PyTorch's AdamW keeps
    decoupled_weight_decay True in its groups)."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 amsgrad: bool = False, *, maximize: bool = False, foreach: Any = None, capturable: bool = False,
                 differentiable: bool = False, fused: Any = None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)

    def _check_options(self, options):
        if options.get("decoupled_weight_decay") is False:
            raise ValueError("AdamW: decoupled_weight_decay is always True (use Adam for the L2 form)")
        return super()._check_options(options)


def clip_grad_norm_(params: Iterable[Tensor] | Tensor, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach: Any = None) -> Tensor:
    """Scale all gradients so that their joint L2 norm is at most max_norm; returns the norm before clipping,
    a 0-d float32 tensor as PyTorch's (`float(norm)` and `norm.item()` read it). A tensor given twice (a tied
    weight listed under two names) counts once. error_if_nonfinite=True raises on a NaN or infinite norm;
    `foreach` changes nothing here."""
    if norm_type != 2.0:
        raise NotImplementedError(f"clip_grad_norm_: only norm_type=2 is supported here, got {norm_type!r}")
    params = [params] if isinstance(params, Tensor) else list(params) if isinstance(params, Iterable) else [params]
    bad = [i for i, p in enumerate(params) if not isinstance(p, Tensor)]
    if bad:
        raise TypeError(f"clip_grad_norm_: params must be a Tensor or an iterable of tensors; item {bad[0]} is a "
                        f"{type(params[bad[0]]).__name__}")
    max_norm = check_number(max_norm, "max_norm", "clip_grad_norm_", 0.0)
    unique = list({id(p): p for p in params}.values())
    grads = [p.grad._data for p in unique if p.grad is not None]
    total = math.sqrt(sum(float(np.dot(g.reshape(-1), g.reshape(-1))) for g in grads))
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(f"clip_grad_norm_: the total norm of the gradients is {total}; set "
                           "error_if_nonfinite=False to clip anyway")
    scale = max_norm / (total + 1e-6)
    if scale < 1:
        for g in grads:
            g *= g.dtype.type(scale)
    return Tensor(np.array(total, grads[0].dtype if grads else np.float32))


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

