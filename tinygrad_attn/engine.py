"""The autograd core: `Function`, the graph it records, and the reverse-mode backward pass.

Every differentiable op is a `Function`: a `forward` on numpy arrays that may
save what its `backward` needs in `ctx`, and a `backward` that turns the
gradient of the output into one gradient per input. `Function.apply` runs the
forward and, when gradients are wanted, records a `Context` on the output: the
edges of the graph. `Tensor.backward` walks those edges once, in reverse
topological order, and hands each input its gradient.

The engine, not each op, sums broadcast gradients back to an input's shape
(`_unbroadcast`), so an op's backward may return a gradient of the output's
broadcast shape.

The engine knows a tensor only as a `Node` (tensor.py's Tensor is the one
kind): it reads `_data`, `_ctx`, `requires_grad`, `grad` and the hooks, and
makes new tensors of the inputs' own class. So this module imports nothing of
the package: the gradient rules (ops.py) import it, and tensor.py imports
both; imports go one way.
"""

from __future__ import annotations

import contextvars
import functools
import itertools
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np


class ScopedSetting:
    """A setting per thread and per async context that `with` blocks push and pop (grad mode, sdpa_kernel).

    Its value is the innermost active entry's, so blocks exited out of order (by hand) still leave the
    right value, and one thread's block never changes another thread's setting. `set` replaces the
    innermost entry's value (a plain call such as `set_grad_enabled(False)`), and returns what it was.
    """

    def __init__(self, name: str, default: Any):
        self.name, self.default = name, default
        self.value: contextvars.ContextVar = contextvars.ContextVar(name, default=default)  # read on every op
        self._entries: contextvars.ContextVar[tuple] = contextvars.ContextVar(name + "_entries", default=())

    def push(self, value: Any) -> object:
        entry = object()
        self._entries.set(self._entries.get() + ((entry, value),))
        self.value.set(value)
        return entry

    def pop(self, entry: object, who: str) -> None:
        entries = self._entries.get()
        for i in range(len(entries) - 1, -1, -1):
            if entries[i][0] is entry:
                break
        else:
            raise RuntimeError(f"{who}: __exit__ in another thread or context than its __enter__")
        entries = entries[:i] + entries[i + 1:]
        self._entries.set(entries)
        self.value.set(entries[-1][1] if entries else self.default)

    def set(self, value: Any) -> Any:
        entries, previous = self._entries.get(), self.value.get()
        if entries:
            self._entries.set(entries[:-1] + ((entries[-1][0], value),))
        else:  # outside every block: the thread's own value from now on
            self._entries.set(((None, value),))
        self.value.set(value)
        return previous


# The module whose forward is running (per thread): each Context records it, so a trace of the backward can
# say which layer a node belongs to. nn.Module.__call__ sets it; the engine only stores what it is given.
module_scope: contextvars.ContextVar = contextvars.ContextVar("tinygrad_attn_module_scope", default=None)

# Grad mode is per thread and per async context, as PyTorch's is per thread: one thread inside
# `no_grad` never stops another from recording its graph.
_grad_setting = ScopedSetting("tinygrad_attn_grad_mode", True)
_grad_mode = _grad_setting.value


def is_grad_enabled() -> bool:
    """Whether new ops record the graph in this thread (False inside `no_grad`)."""
    return _grad_mode.get()


class _GradMode:
    """Base of no_grad / enable_grad / inference_mode: a context manager and decorator that sets grad mode
    for this thread and restores it on exit. One instance may be entered again while it is active (nested
    or from several threads): each entry is its own, per thread."""

    enabled = True

    def __init__(self) -> None:
        self._entries = threading.local()

    def _stack(self) -> list:
        stack = getattr(self._entries, "stack", None)
        if stack is None:
            stack = self._entries.stack = []
        return stack

    def __enter__(self) -> None:
        self._stack().append(_grad_setting.push(self.enabled))

    def __exit__(self, *exc: object) -> None:
        stack = self._stack()
        if not stack:
            raise RuntimeError(f"{type(self).__name__}: __exit__ without a matching __enter__ in this thread")
        _grad_setting.pop(stack.pop(), type(self).__name__)

    def __call__(self, fn: Callable) -> Callable:
        mode = type(self)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with mode():
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_GradMode):
    """Context manager and decorator: ops inside record no graph (in this thread).

    >>> with no_grad(): y = x * 2          # y.requires_grad is False
    >>> @no_grad()
    ... def evaluate(model, x): ...
    """

    enabled = False


class enable_grad(_GradMode):
    """Ops inside record the graph again, even within `no_grad`."""

    enabled = True


class inference_mode(_GradMode):
    """PyTorch's inference_mode(mode=True): here the same as no_grad (mode=False: the same as enable_grad);
    tensors made inside are ordinary tensors."""

    def __init__(self, mode: bool = True) -> None:
        super().__init__()
        self.enabled = not bool(mode)

    def __call__(self, fn: Callable) -> Callable:
        enabled = self.enabled

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with inference_mode(not enabled):
                return fn(*args, **kwargs)

        return wrapper


class set_grad_enabled(_GradMode):
    """set_grad_enabled(mode): sets grad mode for this thread at once, as a function call; as a context
    manager, restores the previous mode on exit (PyTorch's behaviour)."""

    def __init__(self, mode: bool) -> None:
        super().__init__()
        if not isinstance(mode, (bool, np.bool_)):
            raise TypeError(f"set_grad_enabled: mode must be a bool, got {mode!r}")
        self.enabled = bool(mode)
        self._previous = _grad_setting.set(self.enabled)

    def __enter__(self) -> None:
        pass  # already set by the constructor

    def __exit__(self, *exc: object) -> None:
        _grad_setting.set(self._previous)

    def __call__(self, fn: Callable) -> Callable:
        self.__exit__()
        enabled = self.enabled

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with set_grad_enabled(enabled):
                return fn(*args, **kwargs)

        return wrapper

class Node:
    """What the engine needs of a tensor: `_data` (its array), `_ctx` (the Context that made it, or None),
    `requires_grad`, `grad`, `_hooks`, `_retains_grad`, its version counter, the class methods
    `_result(array, ctx)` and `_wrap(value)` that make new ones, `_private_view(array)` (whether a view's
    memory is seen through it alone, so a leaf may keep it as its gradient), and, for gradients that are tensors
    themselves (create_graph), the methods `sum`, `reshape` and `astype`. tensor.py's Tensor is the one
    subclass."""

    __slots__ = ()

    @staticmethod
    def _private_view(a: np.ndarray) -> bool:
        """Whether a view's memory is seen through it alone (tensor.py's Tensor knows the library's own buffers)."""
        return False


# needs_input_grad of one or two inputs: one tuple per pattern, shared by every node (no tuple kept per op)
_SHARED_NEEDS = {needs: needs for n in (1, 2) for needs in itertools.product((False, True), repeat=n)}

# The version counter of an operand an operator made from a number (x * 0.5): one shared tuple, as nothing can
# change such an operand in place (tensor.py refuses to), so its op records no version for it.
CONSTANT_VERSION = (0,)


class Context:
    """What one application of a Function leaves for its backward.

    `inputs` are the parent tensors (the graph's edges), `needs_input_grad` says which of them want a
    gradient, `saved_tensors` holds the arrays the forward chose to keep and `kwargs` its other
    arguments. Any other attribute (a shape, an axis) may be set on it freely. `output` is a weak
    reference to the tensor the op made, kept only when that tensor has hooks or retains its gradient.
    """

    # Fixed fields in slots (one is made per op: no dict to allocate unless a rule sets an attribute of its own):
    # saved_versions: tensor (the output: its array), counter, version, one after another, of each tensor whose
    # memory a saved array is; made: what forward returned, kept when it saved arrays (one may be it); parents:
    # the graph's edges, each input's node when the op ran (the Context that made it, or the leaf itself), so an
    # in-place change of an input later (which gives it a new Context) reroutes nothing recorded here. Rarely set,
    # so read from the class until then: watched, its tensor has hooks or retains its gradient, and output is then
    # a weak reference to it.
    __slots__ = ("function", "inputs", "kwargs", "needs_input_grad", "scope", "saved_tensors", "saved_versions",
                 "made", "parents", "__dict__")
    output, watched = None, False

    def __init__(self, function: type[Function], inputs: tuple[Node, ...], kwargs: dict):
        self.function, self.inputs, self.kwargs = function, inputs, kwargs
        n = len(inputs)  # one or two inputs written out: no list made for them on every op
        needs = ((inputs[0].requires_grad,) if n == 1 else (inputs[0].requires_grad, inputs[1].requires_grad) if n == 2
                 else tuple([t.requires_grad for t in inputs]))
        self.needs_input_grad = _SHARED_NEEDS.get(needs, needs)  # fewer objects for the garbage collector
        self.scope = module_scope.get()  # the module whose forward made this node (None outside modules)
        self.saved_tensors = self.saved_versions = self.parents = ()
        self.made = None

    def save_for_backward(self, *arrays: Any) -> None:
        self.saved_tensors = arrays

    def _record_saved(self, tensors: tuple[Node, ...], result: Node) -> None:
        """Remember the version of every tensor whose memory a saved array is (or views), so that backward can
        refuse values an in-place op changed since."""
        owners, memory = [], None  # flat: tensor, counter, version, tensor, ...
        for arr in self.saved_tensors:
            if arr is None or type(arr) is not np.ndarray:
                continue
            for t in tensors:
                if arr is t._data:
                    counter = t._version_counter
                    if counter is not CONSTANT_VERSION:  # an operand made from a number never changes
                        owners += (t, counter, counter[0])
                    break
            else:
                data, base = result._data, arr.base
                if result._base is None and (arr is data or arr is data.base or (base is not None and (
                        base is data or base is data.base))):  # the output's memory, which no input shares
                    owners += (data, result._version_counter, result._version_counter[0])
                    continue
                if memory is None:  # each tensor's array and its base, read once for all the saved arrays
                    memory = [(t, t, t._data, t._data.base) for t in tensors]
                    # the output by its array: the tensor itself here would hold its own node (a cycle, which
                    # only the garbage collector could free), as PyTorch's saved outputs do not hold theirs
                    memory.append((result, result._data, result._data, result._data.base))
                base = arr.base  # a view of an input or of the output (a reshaped row block, say)
                for t, named, data, own in memory:
                    if arr is data or own is arr or (base is not None and (base is data or base is own)):
                        owners += (named, t._version_counter, t._version_counter[0])
                        break
        if owners:
            self.saved_versions = tuple(owners)

    def saved_sources(self) -> list:
        """Which tensor each saved array is: the input's position, -1 for the output, None for another array
        (a mask, an index, a sign: a constant to a higher-order backward)."""
        sources = []
        for arr in self.saved_tensors:
            source = -1 if arr is self.made else None  # made: what forward returned (a numpy scalar for 0-d)
            if source is None:
                for i, t in enumerate(self.inputs):
                    if arr is t._data:
                        source = i
                        break
            sources.append(source)
        return sources

    def check_versions(self) -> None:
        versions = self.saved_versions
        for i in range(0, len(versions), 3):
            if versions[i + 1][0] != versions[i + 2]:  # counter[0] != the version saved
                t, counter, version = versions[i:i + 3]
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation: [Tensor of shape {t.shape}, dtype {t.dtype}], an input, output or argument of "
                    f"{self.function.__name__}, is at version {counter[0]}; expected version {version} instead. "
                    "Use an out-of-place op (x = x + y instead of x += y, or clone() before changing it)")

    def release(self) -> None:
        """Drop the saved arrays once the backward pass no longer needs them."""
        self.saved_tensors = None
        if self.saved_versions:
            self.saved_versions = ()

    @property
    def released(self) -> bool:
        return self.saved_tensors is None

    # PyTorch's view of a node, for programs that walk the graph (torchviz-style drawings, tutorials)
    def name(self) -> str:
        """The rule's name with PyTorch's suffix: MulBackward0."""
        return f"{self.function.__name__}Backward0"

    @property
    def next_functions(self) -> tuple:
        """One (node, 0) pair per input: the Context that made it, an AccumulateGrad for a leaf that requires
        grad, None for an input that needs no gradient."""
        parents = self.parents or (None,) * len(self.inputs)
        return tuple(((p if type(p) is Context else AccumulateGrad(p)) if need else None, 0)
                     for p, need in zip(parents, self.needs_input_grad))

    def __repr__(self) -> str:
        return f"<{self.name()} object at {id(self):#x}>"


class AccumulateGrad:
    """A leaf's place in next_functions (PyTorch's name): `variable` is the leaf whose .grad receives the sum."""

    next_functions = ()

    def __init__(self, variable: Node):
        self.variable = variable

    def name(self) -> str:
        return "torch::autograd::AccumulateGrad"

    def __repr__(self) -> str:
        return f"<AccumulateGrad object at {id(self):#x}>"


class _SavedAsTensors:
    """A Context as a higher-order backward sees it: each saved array is the tensor it came from (an input,
    the output), so the rule's ops record how the gradient depends on them; any other saved array (a
    mask, an index, a sign) is a constant."""

    def __init__(self, ctx: Context, kind: type):
        self._ctx = ctx
        saved = []
        for arr, source in zip(ctx.saved_tensors, ctx.saved_sources()):
            if source is None:
                saved.append(kind._result(arr, None) if isinstance(arr, np.ndarray) else arr)
            elif source >= 0:
                saved.append(ctx.inputs[source])
            else:
                saved.append(_output_of(ctx))
        self.saved_tensors = tuple(saved)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)


def _output_of(ctx: Context) -> Node:
    """The tensor ctx's op made, for a higher-order backward that saved it: the tensor itself when the node keeps
    a reference (a watched tensor), else the op applied again to the same inputs (the same values, and a node
    whose derivative is the same)."""
    out = ctx.output() if ctx.output is not None else None  # known when watched
    return out if out is not None else ctx.function.apply(*ctx.inputs, **ctx.kwargs)


def _read_constants(kwargs: dict) -> tuple[dict, tuple]:
    """Tensors passed as non-differentiable arguments (indices, masks, targets) as their arrays, and their
    versions: an in-place change of one before backward is refused, as PyTorch refuses it."""
    values, guards = {}, []
    for key, value in kwargs.items():
        items = value if type(value) is tuple else (value,)
        read = []
        for item in items:
            if isinstance(item, Node):
                guards += (item, item._version_counter, item._version_counter[0])
                item = item._data
            read.append(item)
        values[key] = tuple(read) if type(value) is tuple else read[0]
    return values, tuple(guards)


class Function:
    """Base class of every differentiable op, built-in or the user's own.

    Subclasses define two static methods:

        forward(ctx, *arrays, **kwargs) -> array
        backward(ctx, grad) -> one gradient per positional input
                               (a tuple, or a bare array for one input; None
                               where an input needs no gradient)

    and are called as `MyOp.apply(*tensors, **kwargs)`. A tensor given as a keyword argument (an index,
    a mask) reaches the forward as its array, and its version is checked before the backward runs.

    Higher order (`create_graph=True`): a rule whose class sets `differentiable = True` is written in
    operators and `ops.on(grad)`'s functions, so it runs on tensors and records its own graph; a fused
    op gives `math(*tensors, **kwargs)`, the same op composed of primitive ops, and its higher-order
    backward goes through that. Any other Function is differentiable once: a second derivative through
    it is an error (PyTorch's `once_differentiable`), never a silent zero.
    """

    differentiable = False  # the backward also runs on tensors (recording a graph)
    math: Callable | None = None  # the op composed of primitive ops, for fused kernels' higher order
    view = False  # its output is a view of its input (reshape, permute, slicing): writes through it are recorded

    @staticmethod
    def forward(ctx: Context, *arrays: np.ndarray, **kwargs: Any) -> np.ndarray:
        raise NotImplementedError

    @staticmethod
    def backward(ctx: Context, grad: np.ndarray) -> Any:
        raise NotImplementedError

    @classmethod
    def apply(cls, *inputs: Any, **kwargs: Any) -> Node:
        kind, others, grad_on = None, False, _grad_mode.get()  # kind: the class new tensors get (the first input's)
        for x in inputs:
            if not isinstance(x, Node):
                others = True
                continue
            if kind is None:
                kind = type(x)
            seen = x._view_of
            if seen is not None and grad_on and seen[3]._ctx is not seen[4]:
                refresh_view(x)  # its base was changed in place since: read it through the base's new node
        if kind is None:
            raise TypeError(f"{cls.__name__}.apply: give at least one Tensor input, got "
                            f"{', '.join(type(x).__name__ for x in inputs) or 'none'}")
        tensors = tuple([x if isinstance(x, Node) else kind._wrap(x) for x in inputs]) if others else inputs
        guards = ()
        if kwargs:
            for value in kwargs.values():  # a tensor passed as an argument (an index, a mask): read it, guard it
                if isinstance(value, Node) or (type(value) is tuple and _holds_node(value)):
                    kwargs, guards = _read_constants(kwargs)
                    break
        ctx = Context(cls, tensors, kwargs)
        n = len(tensors)  # the arrays, passed without a generator for the usual one or two inputs
        if n == 2:
            raw = cls.forward(ctx, tensors[0]._data, tensors[1]._data, **kwargs)
        elif n == 1:
            raw = cls.forward(ctx, tensors[0]._data, **kwargs)
        else:
            raw = cls.forward(ctx, *[t._data for t in tensors], **kwargs)
        out = raw if type(raw) is np.ndarray else np.asarray(raw)
        requires_grad = grad_on and True in ctx.needs_input_grad and out.dtype.kind == "f"
        result = kind._result(out, ctx if requires_grad else None)
        if out.base is not None:  # a view of an input (reshape, permute, slicing): one version counter
            for t in tensors:
                if np.may_share_memory(out, t._data):
                    result._version_counter, result._base = t._version_counter, t if t._base is None else t._base
                    if cls.view:  # how to make it again from its root: an in-place write through it rebases the root
                        root = t if t._view_of is None else t._view_of[3]
                        result._view_of = (t, cls, kwargs, root, root._ctx)
                    break
        if requires_grad:
            ctx.parents = ((tensors[0]._ctx or tensors[0],) if n == 1 else
                           (tensors[0]._ctx or tensors[0], tensors[1]._ctx or tensors[1]) if n == 2
                           else tuple([t._ctx or t for t in tensors]))
            if ctx.saved_tensors:
                ctx.made = raw
                ctx._record_saved(tensors, result)
            if guards:
                ctx.saved_versions += guards
        if _forward_hooks:
            for hook in _forward_hooks:
                hook(ctx, result)
        return result


def _holds_node(items: tuple) -> bool:
    """Whether a tuple argument holds a tensor (a loop: no generator made for each op's shape or dims)."""
    for item in items:
        if isinstance(item, Node):
            return True
    return False


def watch(t: Node) -> None:
    """Mark t's node so backward looks t up there (t has hooks, or retains its gradient)."""
    t._ctx.output, t._ctx.watched = weakref.ref(t), True


def view_chain(view: Node) -> tuple[Node, list[tuple[type, dict]]]:
    """The tensor a view was made from through view ops (its root), and those ops in order."""
    chain = []
    while view._view_of is not None:
        parent, cls, kwargs = view._view_of[:3]
        chain.append((cls, kwargs))
        view = parent
    return view, chain[::-1]


def refresh_view(view: Node) -> None:
    """Make a view's node again from its root's current node (PyTorch regenerates a view's grad_fn after its
    base was changed in place), so gradients through the view reach the base's newest version."""
    root, chain = view_chain(view)
    fresh = root
    with enable_grad():
        for cls, kwargs in chain:
            fresh = cls.apply(fresh, **kwargs)
    view._ctx, view.requires_grad = fresh._ctx, fresh.requires_grad
    if fresh._ctx is not None and (view._hooks or view._retains_grad):
        watch(view)
    view._view_of = view._view_of[:4] + (root._ctx,)


class Alias(Function):
    """The identity, as a node of its own: a fused op's higher-order backward differentiates its math with
    respect to these stand-ins, so an input given twice (attention of x with itself) is counted once per
    place."""

    differentiable = True
    view = True

    @staticmethod
    def forward(ctx, a):
        return a

    @staticmethod
    def backward(ctx, grad):
        return grad


class _OnceDifferentiable(Function):
    """Stands for a gradient computed by a backward that cannot record its own graph: differentiating
    through it again raises PyTorch's error instead of giving a silently wrong (zero) derivative."""

    differentiable = True

    @staticmethod
    def forward(ctx, grad, *inputs, name):
        ctx.name = name
        return grad

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError(f"trying to differentiate twice a function that was marked with @once_differentiable "
                           f"({ctx.name}): its backward is not written in differentiable ops; give the Function "
                           "`differentiable = True` with a backward on tensors, or a `math` form")


# Observers of the engine (used by tinygrad_attn.debug): called as
# hook(ctx, output) after each forward and hook(ctx, grad_output, input_grads)
# after each backward step.
_forward_hooks: list[Callable] = []
_backward_hooks: list[Callable] = []


def _unbroadcast(grad: Any, shape: tuple[int, ...]) -> Any:
    """Sum `grad` (an array, or a tensor under create_graph) over the axes broadcasting added or stretched to
    reach `shape`."""
    if grad.shape == shape:
        return grad
    extra = grad.ndim - len(shape)
    stretched = tuple(i + extra for i, n in enumerate(shape) if n == 1 and grad.shape[i + extra] != 1)
    axes = tuple(range(extra)) + stretched
    if isinstance(grad, Node):
        return (grad.sum(dim=axes, keepdim=True) if axes else grad).reshape(shape)
    return grad.sum(axis=axes, keepdims=True).reshape(shape)


def _node(t: Node) -> Any:
    """A tensor's place in the graph: the Context that made it (its current version), or itself for a leaf."""
    return t._ctx or t


def _topological_order(roots: Any) -> list[Any]:
    """The graph's nodes reachable from `roots` (Contexts, and leaf tensors), parents before children.

    Iterative depth-first search, so a chain of any length fits the Python stack.
    """
    order, visited, context = [], set(), Context
    stack: list[Any] = [_node(root) for root in reversed(roots)]  # a node, or (node,) once its parents are pushed
    while stack:
        node = stack.pop()
        if type(node) is tuple:  # its parents are all in order: it comes next
            order.append(node[0])
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        if type(node) is not context:  # a leaf
            order.append(node)
            continue
        stack.append((node,))
        for parent, need in zip(node.parents, node.needs_input_grad):
            if need and id(parent) not in visited:
                stack.append(parent)
    return order


def _as_gradient_tuple(grads: Any, n_inputs: int, function: type) -> tuple:
    grads = grads if type(grads) is tuple else (grads,)
    if len(grads) != n_inputs:
        raise RuntimeError(
            f"{function.__name__}.backward returned {len(grads)} gradients for {n_inputs} inputs"
        )
    return grads


def _run_hooks(node: Node, g: Any) -> Any:
    """node's tensor hooks, in the order registered: each sees the gradient and may return a new one."""
    kind = type(node)
    for hook in list(node._hooks.values()):
        new = hook(g if isinstance(g, Node) else kind._result(g, None))
        if new is not None:
            if not isinstance(g, Node):
                new = new._data if isinstance(new, Node) else np.asarray(new)
            elif not isinstance(new, Node):
                new = kind._wrap(np.asarray(new))
            if new.shape != g.shape:
                raise RuntimeError(f"a hook returned a gradient of shape {new.shape} for a tensor of shape "
                                   f"{node.shape}")
            g = new.astype(node.dtype) if new.dtype != node.dtype else new
    return g


def _higher_order_backward(ctx: Context, g: Node) -> tuple:
    """One node's backward with create_graph: the input gradients as tensors whose graph records how they
    depend on the inputs and on g."""
    fn, kind = ctx.function, type(g)
    if fn.math is not None:  # a fused kernel: differentiate its composition of primitive ops
        stand_ins = tuple(Alias.apply(t) if need else t for t, need in zip(ctx.inputs, ctx.needs_input_grad))
        out = fn.math(*stand_ins, **ctx.kwargs)
        wanted = [s for s, need in zip(stand_ins, ctx.needs_input_grad) if need]
        found = iter(run_backward([out], [g], True, True, inputs=wanted))
        return tuple(next(found) if need else None for need in ctx.needs_input_grad)
    if fn.differentiable:
        return _as_gradient_tuple(fn.backward(_SavedAsTensors(ctx, kind), g), len(ctx.inputs), fn)
    with no_grad():  # differentiable once: arrays in, arrays out, each marked so a second derivative raises
        grads = _as_gradient_tuple(fn.backward(ctx, g._data), len(ctx.inputs), fn)
    return tuple(None if x is None else _OnceDifferentiable.apply(kind._wrap(np.asarray(x)), *ctx.inputs,
                                                                   name=fn.__name__) for x in grads)


def run_backward(roots: list[Node], grads: list[Any], retain_graph: bool, create_graph: bool = False,
                 inputs: list[Node] | None = None, accumulate_into: Any = None) -> list | None:
    """Propagate `grads` (dL/droot for each root) back through the graph.

    Without `inputs` (Tensor.backward), every leaf that requires grad (or, given `accumulate_into`, each
    tensor listed there) accumulates its gradient into `.grad`. With `inputs` (autograd.grad), nothing is
    accumulated: the gradient of each input is returned (None where it was not reached), and only the
    part of the graph that leads to an input runs. With `create_graph`, gradients are tensors and every
    rule records the graph of its own computation, so they can be differentiated again.

    The graph's nodes are Contexts (and leaf tensors); an interior tensor's gradient is its Context's.
    Gradients of intermediate tensors live only in the local `pending` dict and are dropped as soon as
    they have been passed on (unless the tensor called `retain_grad()`).
    """
    order = _topological_order(roots)
    wanted: dict[int, list[int]] = {}
    upstream: set[int] = set()  # nodes with an input behind them (autograd.grad runs only those)
    if inputs is not None:
        for i, t in enumerate(inputs):
            wanted.setdefault(id(_node(t)), []).append(i)
        for node in order:  # parents come first, so each node's parents are known already
            if type(node) is Context and any(id(p) in wanted or id(p) in upstream for p in node.parents):
                upstream.add(id(node))
        found: list = [None] * len(inputs)
    only = None if accumulate_into is None else {id(_node(t)): t for t in accumulate_into}
    pending: dict[int, Any] = {}
    for root, g in zip(roots, grads):
        key = id(_node(root))
        pending[key] = g if key not in pending else pending[key] + g
    context, plain, array = Context, inputs is None and only is None, np.ndarray  # read once: this loop is hot
    entry = _grad_setting.push(bool(create_graph))  # grad mode on only to record the gradients' own graph
    try:
        for node in reversed(order):
            g = pending.pop(id(node), None)
            if g is None:
                continue
            if type(node) is not context:  # a leaf: it keeps its gradient (autograd.grad: returns it)
                if node._hooks:
                    g = _run_hooks(node, g)
                if inputs is not None:
                    for i in wanted.get(id(node), ()):
                        found[i] = g
                elif only is None or id(node) in only:
                    _accumulate(node, g, create_graph, last_use=True)
                continue
            ctx = node
            if not plain or ctx.watched:  # its tensor has hooks, retains its gradient, or was asked for
                tensor = only.get(id(node)) if only is not None else ctx.output() if ctx.watched else None
                if tensor is not None:
                    if tensor._hooks:
                        g = _run_hooks(tensor, g)
                    if inputs is None and (tensor._retains_grad if only is None else id(node) in only):
                        _accumulate(tensor, g, create_graph)
                if inputs is not None:
                    for i in wanted.get(id(node), ()):
                        found[i] = g
                    if id(node) not in upstream:
                        continue
            if ctx.saved_tensors is None:  # released
                raise RuntimeError(
                    f"backward through the graph a second time ({ctx.function.__name__}): its saved "
                    "arrays were freed after the first backward; pass retain_graph=True to the first call"
                )
            if ctx.saved_versions:
                ctx.check_versions()
            if create_graph:
                input_grads = _higher_order_backward(ctx, g)
            else:
                input_grads = ctx.function.backward(ctx, g)
                if type(input_grads) is not tuple and len(ctx.inputs) == 1:  # one input's gradient, returned alone
                    input_grads = (input_grads,)
                elif type(input_grads) is not tuple or len(input_grads) != len(ctx.inputs):
                    input_grads = _as_gradient_tuple(input_grads, len(ctx.inputs), ctx.function)
            for hook in _backward_hooks:
                hook(ctx, g, input_grads)
            for parent, t, need, pg in zip(ctx.parents, ctx.inputs, ctx.needs_input_grad, input_grads):
                if pg is None or not need:
                    continue
                if not create_graph and type(pg) is not array:
                    pg = np.asarray(pg._data if isinstance(pg, Node) else pg)
                own = t._data  # its shape and dtype, read once
                if pg.shape != own.shape:
                    pg = _unbroadcast(pg, own.shape)
                if pg.dtype != own.dtype:
                    pg = pg.astype(own.dtype)
                key = id(parent)
                pending[key] = pg if key not in pending else pending[key] + pg
            if not retain_graph:
                ctx.release()
            input_grads = pg = None  # what was passed on is held by `pending` alone (a leaf may then keep it)
    finally:
        _grad_setting.pop(entry, "backward")
    return found if inputs is not None else None


def _accumulate(node: Node, g: Any, create_graph: bool, last_use: bool = False) -> None:
    """node.grad += g: a new array each time (never written in place), a tensor with its graph under
    create_graph. A first gradient is g itself when g is no longer used (last_use) and nothing else holds it
    (PyTorch's AccumulateGrad steals it so too), else a copy."""
    if create_graph:
        node.grad = g if node.grad is None else node.grad + g
        return
    if node.grad is not None:
        node.grad = type(node)._result(node.grad._data + g.astype(node.dtype, copy=False), None)
        return
    if g.dtype != node._data.dtype:
        own = g.astype(node.dtype)  # a new array
    elif (last_use and g.flags.writeable and sys.getrefcount(g) <= _SOLE_OWNER
          and (g.base is None or type(node)._private_view(g))):
        own = g  # held only by the caller's variable and this call, its memory by nothing else: kept as it is
    else:
        own = g.copy()
    node.grad = type(node)._result(own, None)


def _references_of(a: Any) -> int:
    return sys.getrefcount(a)


def _sole_owner_references() -> int:
    """sys.getrefcount of an array held only by a caller's variable, read in the function it was passed to
    (as _accumulate reads it): this interpreter's count, measured once rather than assumed."""
    a = np.empty(1)
    return _references_of(a)


_SOLE_OWNER = _sole_owner_references()


def tensor_dtype(dtype: Any, op: str) -> np.dtype:
    """`dtype` as a numpy dtype a tensor may have (float, integer or bool), or one clear TypeError."""
    if type(dtype).__name__ == "UnsupportedDtype":  # ta.bfloat16: named so programs run, refused when used
        raise TypeError(f"{op}: {dtype!r} is not supported here (numpy has no such type); use {dtype.instead}")
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{op}: dtype {dtype!r} is not a dtype (use ta.float32, ta.int64, ta.bool, ...)") from None
    if dtype.kind not in "fiub":
        raise TypeError(f"{op}: unsupported dtype {dtype} (expected a float, integer or bool dtype)")
    return dtype


def _short(value: Any, limit: int = 80) -> str:
    """repr(value) cut to `limit` characters, for error messages that must not echo a huge input."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _float_default(arr: np.ndarray) -> np.ndarray:
    """Python floats (parsed by numpy as float64) become float32, the framework's default."""
    return arr.astype(np.float32) if arr.dtype == np.float64 else arr


class RemovableHandle:
    """What `register_hook` returns: `handle.remove()` takes the hook away again."""

    _next_id = 0

    def __init__(self, hooks: dict):
        self.hooks, self.id = hooks, RemovableHandle._next_id
        RemovableHandle._next_id += 1

    def remove(self) -> None:
        self.hooks.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


class device:
    """torch.device for the CPU alone: device("cpu") and device("cpu", 0); any other type is a clear error."""

    def __init__(self, type: str = "cpu", index: int | None = None):  # noqa: A002  (PyTorch's name)
        if isinstance(type, device):
            type, index = type.type, type.index
        if not isinstance(type, str):
            raise TypeError(f"device: expected a string such as 'cpu', got {_short(type)}")
        name, _, number = type.partition(":")
        if name != "cpu":
            raise RuntimeError(f"device {type!r} is not available: tinygrad_attn runs on the CPU only; use 'cpu'")
        self.type, self.index = "cpu", int(number) if number else index

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            other = device(other) if other.split(":")[0] == "cpu" else None
        return isinstance(other, device) and other.index == self.index

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return "device(type='cpu')"

    def __str__(self) -> str:
        return "cpu"


_CPU = device("cpu")


def check_device(value: Any, op: str) -> None:
    """None, "cpu" or a cpu device pass; anything else is one clear error (there is no other device here)."""
    if value is None:
        return
    if isinstance(value, device):
        return
    if isinstance(value, str):
        device(value)
        return
    if isinstance(value, int) and not isinstance(value, bool):
        raise RuntimeError(f"{op}: device {value} is a CUDA ordinal; tinygrad_attn runs on the CPU only")
    raise TypeError(f"{op}: device must be 'cpu' or ta.device('cpu'), got {_short(value)}")
