"""Module, Parameter, Sequential and ModuleList: how layers hold and name their weights.

A Module finds its parameters and submodules by walking its attributes in
the order they were set, so names are deterministic and dotted like
PyTorch's (`q_proj.weight`, `layers.0.self_attn.out_proj.bias`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..engine import Function, RemovableHandle, check_device, device, is_grad_enabled, module_scope
from ..tensor import Tensor


def _first_names(members: list[tuple[str, Parameter]]) -> list[tuple[str, Parameter]]:
    """Each parameter once, under its first name."""
    seen: set[int] = set()
    return [(name, p) for name, p in members if not (id(p) in seen or seen.add(id(p)))]


class Parameter(Tensor):
    """A Tensor that requires grad and that a Module counts as one of its weights."""

    def __init__(self, data: Any, requires_grad: bool = True):
        super().__init__(data, requires_grad=requires_grad)


class _HookPassage(Function):
    """Identity on one input or output of a module with a backward hook: its backward hands the gradient
    to `record` (which returns the gradient to pass on)."""

    @staticmethod
    def forward(ctx, x, record):
        ctx.record = record
        return x.view()

    @staticmethod
    def backward(ctx, grad):
        return ctx.record(grad)


class _BackwardHookState:
    """One call of a module with full backward hooks: collects dL/d(output), then dL/d(input), then calls them."""

    def __init__(self, module: Module, hooks: list, args: tuple):
        self.module, self.hooks = module, [h for h, _ in hooks]
        self.tensor_slots = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        self.grad_input: list = [None] * len(self.tensor_slots)
        self.waiting = 0
        self.grad_output: list = []

    def wrap_inputs(self, args: tuple) -> tuple:
        args = list(args)
        for k, i in enumerate(self.tensor_slots):
            if args[i].requires_grad:
                args[i] = _HookPassage.apply(args[i], record=functools.partial(self.input_gradient, k))
                self.waiting += 1
        return tuple(args)

    def wrap_outputs(self, output: Any) -> Any:
        outputs = output if isinstance(output, tuple) else (output,)
        self.grad_output = [None] * len(outputs)
        wrapped = tuple(_HookPassage.apply(o, record=functools.partial(self.output_gradient, k))
                        if isinstance(o, Tensor) and o.requires_grad
                        else o for k, o in enumerate(outputs))
        return wrapped if isinstance(output, tuple) else wrapped[0]

    def output_gradient(self, slot: int, grad: Any) -> Any:
        self.grad_output[slot] = Tensor._result(grad, None)
        if self.waiting == 0:  # no input needs a gradient: PyTorch calls the hooks with grad_input (None, ...)
            self._call(None)
        return grad

    def input_gradient(self, slot: int, grad: Any) -> Any:
        self.grad_input[slot] = Tensor._result(grad, None)
        self.waiting -= 1
        if self.waiting:
            return grad
        return self._call(slot, grad)

    def _call(self, slot: int | None, grad: Any = None) -> Any:
        for hook in self.hooks:
            result = hook(self.module, tuple(self.grad_input), tuple(self.grad_output))
            if result is not None:
                if len(self.grad_input) != 1 or slot is None:
                    raise RuntimeError("a full backward hook may replace grad_input only for a module of one "
                                       "tensor input that needs a gradient")
                new = result[0] if isinstance(result, (tuple, list)) else result
                grad = new.numpy() if isinstance(new, Tensor) else grad
                self.grad_input[0] = Tensor._result(grad, None)
        return grad


class Module:
    """Base class of every layer: `__call__` runs `forward`."""

    training = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        token = module_scope.set(self)  # the nodes made inside know their module (ta.trace_backward names them)
        try:
            hooks = vars(self).get("_hooks")
            if not hooks or not any(hooks.values()):
                return self.forward(*args, **kwargs)
            return self._call_with_hooks(hooks, args, kwargs)
        finally:
            module_scope.reset(token)

    # --- hooks, PyTorch's: each register_* returns a handle whose remove() takes the hook away -----------
    def _hook_table(self, kind: str) -> dict:
        hooks = vars(self).get("_hooks")
        if hooks is None:
            hooks = {"forward_pre": {}, "forward": {}, "backward": {}}
            object.__setattr__(self, "_hooks", hooks)
        return hooks[kind]

    def _register(self, kind: str, hook: Any, with_kwargs: bool = False) -> RemovableHandle:
        if not callable(hook):
            raise TypeError(f"register_{kind}_hook: hook must be callable, got {type(hook).__name__}")
        table = self._hook_table(kind)
        handle = RemovableHandle(table)
        table[handle.id] = (hook, bool(with_kwargs))
        return handle

    def register_forward_pre_hook(self, hook: Any, *, with_kwargs: bool = False) -> RemovableHandle:
        """hook(module, args) before forward (hook(module, args, kwargs) with_kwargs); returning a value
        replaces args (a tuple, or one value; with_kwargs, an (args, kwargs) pair)."""
        return self._register("forward_pre", hook, with_kwargs)

    def register_forward_hook(self, hook: Any, *, with_kwargs: bool = False) -> RemovableHandle:
        """hook(module, args, output) after forward (hook(module, args, kwargs, output) with_kwargs); returning
        a value replaces the output."""
        return self._register("forward", hook, with_kwargs)

    def register_full_backward_hook(self, hook: Any) -> RemovableHandle:
        """hook(module, grad_input, grad_output) once the gradients of the module's tensor inputs are computed:
        tuples of dL/d(input) (None for an input that needs none) and dL/d(output). Returning a tuple replaces
        grad_input (for a module of one tensor input)."""
        return self._register("backward", hook)

    def _call_with_hooks(self, hooks: dict, args: tuple, kwargs: dict) -> Any:
        for hook, with_kwargs in list(hooks["forward_pre"].values()):
            result = hook(self, args, kwargs) if with_kwargs else hook(self, args)
            if result is not None:
                if with_kwargs:
                    args, kwargs = result
                else:
                    args = result if isinstance(result, tuple) else (result,)
        state = None
        if hooks["backward"] and is_grad_enabled():
            state = _BackwardHookState(self, list(hooks["backward"].values()), args)
            args = state.wrap_inputs(args)
        output = self.forward(*args, **kwargs)
        for hook, with_kwargs in list(hooks["forward"].values()):
            result = hook(self, args, kwargs, output) if with_kwargs else hook(self, args, output)
            if result is not None:
                output = result
        return output if state is None else state.wrap_outputs(output)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    # --- what a module holds ------------------------------------------------------
    def named_children(self) -> Iterator[tuple[str, Module]]:
        for name, value in vars(self).items():
            if isinstance(value, Module):
                yield name, value

    def children(self) -> Iterator[Module]:
        return (m for _, m in self.named_children())

    def _named_members(self, prefix: str = "", found: list | None = None) -> list[tuple[str, Parameter]]:
        """Every (dotted name, parameter) pair, a parameter shared by several names under each of them (a list
        built in one walk: a training step asks for the parameters at least once)."""
        found = [] if found is None else found
        for name, value in vars(self).items():
            if isinstance(value, Parameter):
                found.append((prefix + name, value))
            elif isinstance(value, Module):
                value._named_members(prefix + name + ".", found)
        return found

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, parameter) pairs, depth first in the order attributes were set; a parameter shared
        by several modules (tied weights) comes once, under its first name, as in PyTorch (every time with
        remove_duplicate=False); recurse=False: this module's own parameters only."""
        prefix = prefix + "." if prefix else ""  # PyTorch's: a module's name, joined with a dot
        members = (self._named_members(prefix) if recurse else
                   [(prefix + k, v) for k, v in vars(self).items() if isinstance(v, Parameter)])
        return iter(_first_names(members) if remove_duplicate else members)

    def parameters(self, recurse: bool = True) -> list[Parameter]:
        return [p for _, p in self.named_parameters(recurse=recurse)]

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """(dotted name, module) for this module ("") and every submodule, each module once."""
        seen: set[int] = set()
        stack = [(prefix, self)]
        while stack:
            name, module = stack.pop(0)
            if id(module) in seen:
                continue
            seen.add(id(module))
            yield name, module
            stack[:0] = [((name + "." if name else "") + n, child) for n, child in module.named_children()]

    def modules(self) -> Iterator[Module]:
        return (m for _, m in self.named_modules())

    def apply(self, fn: Any) -> Module:
        """fn(module) on every submodule, children first, then on self (as PyTorch's `apply`); returns self."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def register_buffer(self, name: str, value: Any, persistent: bool = True) -> None:
        """A tensor the module keeps that is not a parameter (a mask, running statistics): in `state_dict`
        and loaded back when persistent, cast by `to`, never given to an optimizer."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"register_buffer: name must be an identifier, got {name!r}")
        if name in vars(self) and name not in self._buffers():
            raise KeyError(f"register_buffer: {name!r} is already an attribute of {type(self).__name__}")
        buffers = dict(self._buffers())
        buffers[name] = persistent
        object.__setattr__(self, "_buffer_names", buffers)
        setattr(self, name, None if value is None else value if isinstance(value, Tensor) else Tensor(value))

    def _buffers(self) -> dict[str, bool]:
        return vars(self).get("_buffer_names", {})

    def named_buffers(self, prefix: str = "", recurse: bool = True, persistent_only: bool = False
                      ) -> Iterator[tuple[str, Tensor]]:
        start = prefix + "." if prefix else ""  # PyTorch's: a module's name, joined with a dot
        for name, persistent in self._buffers().items():
            value = getattr(self, name)
            if value is not None and (persistent or not persistent_only):
                yield start + name, value
        if recurse:
            for child_name, child in self.named_children():
                yield from child.named_buffers(start + child_name, True, persistent_only)

    def buffers(self, recurse: bool = True) -> list[Tensor]:
        return [b for _, b in self.named_buffers(recurse=recurse)]

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # --- state ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Tensor]:
        """Every parameter name (both names of a tied weight, as PyTorch) and persistent buffer -> a detached
        Tensor sharing its memory, as in PyTorch: training on changes it, so snapshot with `.clone()`."""
        state = {name: Tensor(p._data) for name, p in self._named_members()}
        state.update({name: Tensor(b._data) for name, b in self.named_buffers(persistent_only=True)})
        return self._renamed(state, "_state_to_saved")

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> None:
        """Copy arrays into the existing parameters and buffers, cast to each one's dtype.

        Everything is checked before anything is assigned, so a load that fails changes nothing: missing
        or unexpected names raise KeyError (only with strict=True), a wrong shape or a dtype that is not a
        real number raises ValueError naming the key. A tied weight gets its value back under either name.
        """
        if not isinstance(state, dict):
            raise TypeError(f"load_state_dict: expected a dict of arrays, got {type(state).__name__}")
        try:
            state = self._renamed(dict(state), "_state_from_saved")
        except (TypeError, ValueError) as error:
            raise type(error)(f"load_state_dict: {error}") from None
        targets = dict(self._named_members())
        targets.update(self.named_buffers(persistent_only=True))
        missing = sorted(set(targets) - set(state))
        unexpected = sorted(set(state) - set(targets))
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
        values = {}
        for name in sorted(targets.keys() & state.keys()):
            value = state[name]
            value = value._data if isinstance(value, Tensor) else np.asarray(value)
            if value.dtype.kind not in "fiub":
                raise ValueError(f"load_state_dict: {name!r} has dtype {value.dtype}; expected real numbers")
            if value.shape != targets[name].shape:
                raise ValueError(
                    f"load_state_dict: {name!r} has shape {value.shape}, the model's has shape {targets[name].shape}"
                )
            values[name] = value
        for name, value in values.items():
            np.copyto(targets[name]._data, value, casting="unsafe")
            targets[name].bump_version()

    def _state_to_saved(self, state: dict[str, Any]) -> dict[str, Any]:
        """This module's entries of a state dict (names relative to it) as `state_dict` gives them. The modules
        with PyTorch's interface give PyTorch's names (a packed `in_proj_weight`, `linear1`); others keep theirs."""
        return state

    def _state_from_saved(self, state: dict[str, Any]) -> dict[str, Any]:
        """The inverse of _state_to_saved, for `load_state_dict` (names in this library's layout pass unchanged)."""
        return state

    def _renamed(self, state: dict[str, Any], hook: str) -> dict[str, Any]:
        """`state` with each module's own entries passed through its `hook`, innermost modules first."""
        for prefix, module in reversed(list(self.named_modules())):
            if getattr(type(module), hook) is getattr(Module, hook):
                continue
            start = prefix + "." if prefix else ""
            keys = [k for k in state if k.startswith(start)]
            if keys:  # the group's new entries where its first entry was: the order of the names is kept
                first = list(state).index(keys[0])
                items = list(state.items())
                converted = getattr(module, hook)({k[len(start):]: state[k] for k in keys})
                state = dict(items[:first]) | {start + k: v for k, v in converted.items()} | {
                    k: v for k, v in items[first:] if not k.startswith(start)}
        return state

    # --- modes and conversions ----------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        for m in self.modules():
            m.training = mode
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every parameter's gradient (set_to_none=True, PyTorch 2's default) or fill it with zeros."""
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad._data[...] = 0

    def to(self, dtype_or_device: Any) -> Module:
        """Cast every float parameter and buffer to a float dtype in place (np.float64 for gradient checks);
        "cpu" is accepted and changes nothing, any other device is refused. Returns self."""
        if isinstance(dtype_or_device, device) or (isinstance(dtype_or_device, str) and dtype_or_device.lower()
                                                   .split(":")[0] in ("cpu", "cuda", "mps")):
            check_device(dtype_or_device, "to")
            return self
        try:
            dtype = np.dtype(dtype_or_device)
        except TypeError:
            dtype = None
        if dtype is None or dtype.kind != "f":
            raise ValueError(f"to: {dtype_or_device!r} is neither a float dtype nor 'cpu' "
                             "(tinygrad_attn runs on the CPU only)")
        for p in self.parameters():
            p._data = p._data.astype(dtype)
            p.grad = None
        for b in self.buffers():
            if b.dtype.kind == "f":
                b._data = b._data.astype(dtype)
        return self

    def double(self) -> Module:
        """Every float parameter and buffer in float64 (PyTorch's Module.double())."""
        return self.to(np.float64)

    def float(self) -> Module:  # noqa: A003  (PyTorch's name)
        """Every float parameter and buffer in float32 (PyTorch's Module.float())."""
        return self.to(np.float32)

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
            if not isinstance(m, Module):
                raise TypeError(f"{type(self).__name__}: item {i} is a {type(m).__name__}, not a Module")
            setattr(self, str(i), m)

    def __len__(self) -> int:
        return sum(1 for _ in self.named_children())

    def __getitem__(self, i: int) -> Module:
        return getattr(self, str(range(len(self))[i]))

    def __iter__(self) -> Iterator[Module]:
        return (m for _, m in self.named_children())

    def append(self, module: Module) -> ModuleList:
        if not isinstance(module, Module):
            raise TypeError(f"{type(self).__name__}.append: expected a Module, got {type(module).__name__}")
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


class _Keyed(Module):
    """Members under string keys (named `key.weight`, or `key`, in parameters and state_dict), insertion order
    kept: the dict protocol ModuleDict and ParameterDict share."""

    _what = "member"

    def _member(self, key: str, value: Any) -> Any:
        raise NotImplementedError

    def _is_member(self, value: Any) -> bool:
        raise NotImplementedError

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str) or not key.isidentifier():
            raise KeyError(f"{type(self).__name__}: keys must be identifiers, got {key!r}")
        setattr(self, key, self._member(key, value))

    def __getitem__(self, key: str) -> Any:
        if key not in self:
            raise KeyError(f"{type(self).__name__}: no {self._what} {key!r}; keys are {self.keys()}")
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def __len__(self) -> int:
        return len(self.keys())

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def keys(self) -> list[str]:
        return [k for k, v in vars(self).items() if self._is_member(v)]

    def values(self) -> list[Any]:
        return [getattr(self, k) for k in self.keys()]

    def items(self) -> list[tuple[str, Any]]:
        return [(k, getattr(self, k)) for k in self.keys()]


class ModuleDict(_Keyed):
    """Modules under string keys, named `key.weight` in parameters and state_dict; insertion order kept."""

    _what = "module"

    def __init__(self, modules: Any = None):
        for key, module in dict(modules or {}).items():
            self[key] = module

    def _member(self, key: str, value: Any) -> Module:
        if not isinstance(value, Module):
            raise TypeError(f"ModuleDict: {key!r} must be a Module, got {type(value).__name__}")
        return value

    def _is_member(self, value: Any) -> bool:
        return isinstance(value, Module)


def _as_parameter(value: Any, op: str, where: str) -> Parameter:
    """A Parameter as it is; a tensor or array made a Parameter (as PyTorch's ParameterList wraps tensors)."""
    if isinstance(value, Parameter):
        return value
    if isinstance(value, (Tensor, np.ndarray)):
        return Parameter(value._data if isinstance(value, Tensor) else value)
    raise TypeError(f"{op}: {where} must be a Parameter or a tensor, got {type(value).__name__}")


class ParameterList(Module):
    """A list of parameters named by position (`biases.0`), as PyTorch's nn.ParameterList."""

    def __init__(self, values: Any = None):
        for value in values or ():
            self.append(value)

    def _items(self) -> list[Parameter]:
        return [v for v in vars(self).values() if isinstance(v, Parameter)]

    def __len__(self) -> int:
        return len(self._items())

    def __getitem__(self, i: int) -> Parameter:
        return getattr(self, str(range(len(self))[i]))

    def __setitem__(self, i: int, value: Any) -> None:
        setattr(self, str(range(len(self))[i]), _as_parameter(value, "ParameterList", f"item {i}"))

    def __iter__(self) -> Iterator[Parameter]:
        return iter(self._items())

    def append(self, value: Any) -> ParameterList:
        setattr(self, str(len(self)), _as_parameter(value, "ParameterList.append", "the value"))
        return self

    def extend(self, values: Any) -> ParameterList:
        for value in values:
            self.append(value)
        return self


class ParameterDict(_Keyed):
    """Parameters under string keys (`scales.head`), insertion order kept, as PyTorch's nn.ParameterDict."""

    _what = "parameter"

    def __init__(self, parameters: Any = None):
        for key, value in dict(parameters or {}).items():
            self[key] = value

    def _member(self, key: str, value: Any) -> Parameter:
        return _as_parameter(value, "ParameterDict", repr(key))

    def _is_member(self, value: Any) -> bool:
        return isinstance(value, Parameter)
