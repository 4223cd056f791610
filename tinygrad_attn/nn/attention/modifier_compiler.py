"""Flex attention's score_mod and mask_mod compiled into the flash kernel, with their derivatives.

How: the modifier is traced. It is called once on stand-ins (`Traced`) for score, b, h, q_idx and kv_idx
that record what is done to them: arithmetic, comparisons, `ta.where`, `ta.tanh` and the other functions
of one value, and reads of the tensors it captures (`bias[h]`, `table[q_idx - kv_idx]`). The record is
an expression of one score (a small graph); from it this module writes one Python function in numba's
subset, the kernel's modifier (kernels/modifiers.py: one call per tile, a loop over its entries), and
compiles it as a C function, so the flash kernels, compiled once, call any modifier without compiling
again. Its derivative is written from the same graph by reverse accumulation, one rule per operation
(`_RULES`, as the engine's rules but on one number): d score_mod / d score scales the score's gradient,
and d score_mod / d value adds into the gradient of each captured value read, so a learnable ALiBi slope
or bias table learns. Compiled modifiers are kept per source (a second call with the same modifier, or
an equal one, compiles nothing); `compile_seconds` says what a first call cost.

On the math path (sdpa_kernel("math")) the modifier is not traced: it runs on whole tensors, as written.
A modifier that cannot be traced (Python `if` on a score, a function this module does not know, a
reduction) runs on the math path too, with one warning naming it and what stopped the trace.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...kernels import modifiers
from ...kernels.vector import exp_vectorizable
from ...tensor import Tensor, maximum, minimum, where

_FLOAT, _INT, _BOOL = "f", "i", "b"


class TraceError(TypeError):
    """A modifier did something the compiler cannot follow."""


class Trace:
    """The record of one or more modifiers: nodes (op, args, kind), args being node ids or constants, and
    the tensors they read (by identity)."""

    def __init__(self):
        self.nodes: list[tuple[str, tuple, str]] = []
        self.captured: list[Tensor] = []

    def add(self, op: str, args: tuple, kind: str) -> Traced:
        self.nodes.append((op, args, kind))
        return Traced(self, len(self.nodes) - 1)

    def constant(self, value: Any) -> Traced:
        if isinstance(value, Traced):
            return value
        if isinstance(value, Tensor):
            return self.read(value, ())
        if isinstance(value, (bool, np.bool_)):
            return self.add("const", (bool(value),), _BOOL)
        if isinstance(value, (int, np.integer)):
            return self.add("const", (int(value),), _INT)
        if isinstance(value, (float, np.floating)):
            return self.add("const", (float(value),), _FLOAT)
        raise TraceError(f"a value of type {type(value).__name__}")

    def read(self, tensor: Tensor, index: tuple) -> Traced:
        if tensor.dtype.kind not in "fiub":
            raise TraceError(f"a captured tensor of dtype {tensor.dtype}")
        if len(index) != tensor.ndim:
            raise TraceError(f"a captured tensor of shape {tensor.shape} read with {len(index)} index(es): the "
                             "modifier must read one value of it (as many indices as dims)")
        for i, t in enumerate(self.captured):
            if t is tensor:
                slot = i
                break
        else:
            self.captured.append(tensor)
            slot = len(self.captured) - 1
        ids = []
        for item in index:
            if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, np.integer, Traced)):
                raise TraceError(f"an index of type {type(item).__name__} into a captured tensor (ints only)")
            node = self.constant(item)
            if self.nodes[node.node][2] == _FLOAT:
                raise TraceError("a float index into a captured tensor")
            ids.append(node.node)
        kind = _FLOAT if tensor.dtype.kind == "f" else _BOOL if tensor.dtype.kind == "b" else _INT
        return self.add("read", (slot, tuple(ids)), kind)


def _kind(*kinds: str) -> str:
    return _FLOAT if _FLOAT in kinds else _INT


class Traced:
    """A stand-in for one value of a modifier: what is done to it is recorded in its Trace."""

    __slots__ = ("trace", "node")

    def __init__(self, trace: Trace, node: int):
        self.trace, self.node = trace, node

    @property
    def kind(self) -> str:
        return self.trace.nodes[self.node][2]

    @classmethod
    def __ta_function__(cls, name: str, args: tuple) -> Traced:
        trace = next(a.trace for a in _flat_args(args) if isinstance(a, Traced))
        if name == "getitem":
            tensor, index = args
            return trace.read(tensor, index if type(index) is tuple else (index,))
        if name == "where":
            cond, a, b = (trace.constant(x) for x in args)
            if cond.kind != _BOOL:
                raise TraceError("where's condition must be a comparison (bool)")
            return trace.add("where", (cond.node, a.node, b.node), _kind(a.kind, b.kind))
        if name in ("maximum", "minimum"):
            return trace.constant(args[0])._binary(name, args[1])
        raise TraceError(f"ta.{name}")

    def _binary(self, op: str, other: Any, reverse: bool = False) -> Traced:
        other = self.trace.constant(other)
        a, b = (other, self) if reverse else (self, other)
        if op in ("lt", "le", "gt", "ge", "eq", "ne"):
            kind = _BOOL
        elif op in ("and", "or", "xor"):
            kind = _BOOL if a.kind == b.kind == _BOOL else _INT
            if _FLOAT in (a.kind, b.kind):
                raise TraceError(f"'{op}' of a float")
        elif op == "truediv":
            kind = _FLOAT
        else:
            kind = _kind(a.kind, b.kind)
        return self.trace.add(op, (a.node, b.node), kind)

    def _unary(self, op: str) -> Traced:
        kind = _FLOAT if op in _FLOAT_RESULT else _BOOL if op == "not" else self.kind
        if op == "not" and self.kind != _BOOL:
            op = "invert"
        return self.trace.add(op, (self.node,), kind)

    def __add__(self, o): return self._binary("add", o)
    def __radd__(self, o): return self._binary("add", o, True)
    def __sub__(self, o): return self._binary("sub", o)
    def __rsub__(self, o): return self._binary("sub", o, True)
    def __mul__(self, o): return self._binary("mul", o)
    def __rmul__(self, o): return self._binary("mul", o, True)
    def __truediv__(self, o): return self._binary("truediv", o)
    def __rtruediv__(self, o): return self._binary("truediv", o, True)
    def __floordiv__(self, o): return self._binary("floordiv", o)
    def __rfloordiv__(self, o): return self._binary("floordiv", o, True)
    def __mod__(self, o): return self._binary("mod", o)
    def __rmod__(self, o): return self._binary("mod", o, True)
    def __pow__(self, o): return self._binary("pow", o)
    def __rpow__(self, o): return self._binary("pow", o, True)
    def __lt__(self, o): return self._binary("lt", o)
    def __le__(self, o): return self._binary("le", o)
    def __gt__(self, o): return self._binary("gt", o)
    def __ge__(self, o): return self._binary("ge", o)
    def __eq__(self, o): return self._binary("eq", o)  # type: ignore[override]
    def __ne__(self, o): return self._binary("ne", o)  # type: ignore[override]
    def __and__(self, o): return self._binary("and", o)
    def __rand__(self, o): return self._binary("and", o, True)
    def __or__(self, o): return self._binary("or", o)
    def __ror__(self, o): return self._binary("or", o, True)
    def __xor__(self, o): return self._binary("xor", o)
    def __rxor__(self, o): return self._binary("xor", o, True)
    def __neg__(self): return self._unary("neg")
    def __pos__(self): return self
    def __abs__(self): return self._unary("abs")
    def __invert__(self): return self._unary("not")
    __hash__ = None  # type: ignore[assignment]

    def __bool__(self):
        raise TraceError("Python's if/and/or/bool() on a value of the modifier (use ta.where, &, |)")

    def __index__(self):
        raise TraceError("a value of the modifier used as a Python index (index a captured tensor instead)")

    __int__ = __float__ = __index__

    def abs(self): return self._unary("abs")
    def neg(self): return self._unary("neg")
    def exp(self): return self._unary("exp")
    def exp2(self): return self.trace.constant(2.0) ** self
    def expm1(self): return self._unary("expm1")
    def log(self): return self._unary("log")
    def log2(self): return self._unary("log") / math.log(2.0)
    def log1p(self): return self._unary("log1p")
    def tanh(self): return self._unary("tanh")
    def sigmoid(self): return self._unary("sigmoid")
    def sqrt(self): return self._unary("sqrt")
    def rsqrt(self): return 1.0 / self._unary("sqrt")
    def sin(self): return self._unary("sin")
    def cos(self): return self._unary("cos")
    def floor(self): return self._unary("floor")
    def ceil(self): return self._unary("ceil")
    def round(self): return self._unary("round")
    def trunc(self): return self._unary("trunc")
    def sign(self): return self._unary("sign")
    def square(self): return self * self
    def relu(self): return self._binary("maximum", 0)
    def pow(self, e): return self ** e
    def logical_not(self): return self._unary("not")
    def logical_and(self, o): return self._binary("and", o)
    def logical_or(self, o): return self._binary("or", o)
    def float(self): return self._unary("float")
    def double(self): return self._unary("float")
    def long(self): return self.trace.add("int", (self.node,), _INT)
    def int(self): return self.long()
    def bool(self): return self != 0
    def maximum(self, o): return self._binary("maximum", o)
    def minimum(self, o): return self._binary("minimum", o)

    def where(self, cond, other):
        return Traced.__ta_function__("where", (cond, self, other))

    def clamp(self, min=None, max=None):  # noqa: A002  (PyTorch's names)
        out = self if min is None else self._binary("maximum", min)
        return out if max is None else out._binary("minimum", max)

    clip = clamp

    def clamp_min(self, m): return self._binary("maximum", m)
    def clamp_max(self, m): return self._binary("minimum", m)

    def to(self, dtype: Any = None, *args: Any, **kwargs: Any):
        kind = np.dtype(getattr(dtype, "_numpy", dtype) if not isinstance(dtype, str) else dtype).kind
        return self._unary("float") if kind == "f" else self.long() if kind in "iu" else self.bool()

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise TraceError(f"the method .{name}()")


_FLOAT_RESULT = {"exp", "expm1", "log", "log1p", "tanh", "sigmoid", "sqrt", "sin", "cos", "float"}


def _flat_args(args: tuple):
    for a in args:
        if type(a) is tuple:
            yield from a
        else:
            yield a


# ---- writing the modifier: value and derivative of each op, on one number --------------------------------

_VALUE = {  # op -> the expression of its value from its arguments' names
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "truediv": "({0} / {1})",
    "floordiv": "({0} // {1})", "mod": "({0} % {1})", "pow": "({0} ** {1})",
    "lt": "({0} < {1})", "le": "({0} <= {1})", "gt": "({0} > {1})", "ge": "({0} >= {1})",
    "eq": "({0} == {1})", "ne": "({0} != {1})", "and": "({0} & {1})", "or": "({0} | {1})", "xor": "({0} ^ {1})",
    "maximum": "_maximum({0}, {1})", "minimum": "_minimum({0}, {1})", "where": "({1} if {0} else {2})",
    "neg": "(-{0})", "abs": "abs({0})", "exp": "np.exp({0})", "expm1": "np.expm1({0})", "log": "np.log({0})",
    "log1p": "np.log1p({0})", "tanh": "_tanh({0})", "sigmoid": "_sigmoid({0})",
    "sqrt": "np.sqrt({0})", "sin": "np.sin({0})", "cos": "np.cos({0})", "floor": "np.floor({0})",
    "ceil": "np.ceil({0})", "round": "np.round({0})", "trunc": "np.trunc({0})", "sign": "np.sign({0})",
    "not": "(not {0})", "invert": "(~{0})", "float": "DTYPE({0})", "int": "np.int64({0})",
}

# op -> for each argument, its adjoint's increment from g (the result's adjoint), the arguments' names
# and the result's name `y`: the chain rule on one number. Ops absent here pass no gradient.
_RULES = {
    "add": ("{g}", "{g}"), "sub": ("{g}", "-{g}"),
    "mul": ("{g} * {1}", "{g} * {0}"),
    "truediv": ("{g} / {1}", "-{g} * {0} / ({1} * {1})"),
    "pow": ("{g} * {1} * {0} ** ({1} - 1.0)", "{g} * {y} * np.log({0}) if {g} != 0 else 0.0"),
    "maximum": ("{g} * ((0.5 if {0} == {1} else 1.0) if {0} >= {1} else 0.0)",
                "{g} * ((0.5 if {0} == {1} else 1.0) if {1} >= {0} else 0.0)"),
    "minimum": ("{g} * ((0.5 if {0} == {1} else 1.0) if {0} <= {1} else 0.0)",
                "{g} * ((0.5 if {0} == {1} else 1.0) if {1} <= {0} else 0.0)"),
    "where": (None, "({g} if {0} else 0.0)", "(0.0 if {0} else {g})"),
    "neg": ("-{g}",), "abs": ("{g} * np.sign({0})",), "exp": ("{g} * {y}",), "expm1": ("{g} * ({y} + 1.0)",),
    "log": ("{g} / {0}",), "log1p": ("{g} / (1.0 + {0})",), "tanh": ("{g} * (1.0 - {y} * {y})",),
    "sigmoid": ("{g} * {y} * (1.0 - {y})",), "sqrt": ("{g} * 0.5 / {y}",), "sin": ("{g} * np.cos({0})",),
    "cos": ("-{g} * np.sin({0})",), "float": ("{g}",),
}


def _differentiable(trace: Trace, out: int) -> set[int]:
    """The float nodes the output depends on through ops with a rule, that depend on the score or a float
    captured value: those that carry an adjoint."""
    live: set[int] = set()
    for i, (op, args, kind) in enumerate(trace.nodes[:out + 1]):
        if kind != _FLOAT:
            continue
        if op == "score" or op == "read":
            live.add(i)
        elif op in _RULES and any(isinstance(a, int) and a in live for a in _node_args(op, args)):
            live.add(i)
    return live


def _node_args(op: str, args: tuple) -> tuple:
    if op in ("const", "read", "score", "b", "h", "q", "kv"):
        return ()
    return args


def _name(i: int) -> str:
    return f"v{i}"


def _per_entry(trace: Trace) -> set[int]:
    """The nodes that depend on the score or the key index: computed for each entry of a tile; the others
    (depending on b, h and q_idx only) once per row."""
    inner: set[int] = set()
    for i, (op, args, _) in enumerate(trace.nodes):
        if op in ("score", "kv") or (op == "read" and any(a in inner for a in args[1])) or any(
                isinstance(a, int) and a in inner for a in _node_args(op, args)):
            inner.add(i)
    return inner


_LEAVES = {"score": "score", "b": "b", "h": "h", "q": "q_idx", "kv": "kv_idx"}


def _value_lines(trace: Trace, nodes: list[int], n_captured: int, offsets: list[int]) -> list[str]:
    """Lines computing the given nodes, in order (reads included)."""
    lines = []
    for i in nodes:
        op, args, kind = trace.nodes[i]
        if op in _LEAVES:
            lines.append(f"{_name(i)} = {_LEAVES[op]}")
            continue
        if op == "const":
            value = args[0]
            text = repr(value) if not isinstance(value, float) or math.isfinite(value) else (
                "np.nan" if value != value else ("np.inf" if value > 0 else "-np.inf"))
            lines.append(f"{_name(i)} = DTYPE({text})" if kind == _FLOAT else f"{_name(i)} = {text}")
        elif op == "read":
            slot, ids = args
            tensor = trace.captured[slot]
            flat = []
            for axis, node in enumerate(ids):
                dim, stride = tensor.shape[axis], math.prod(tensor.shape[axis + 1:])
                at = f"x{i}_{axis}"
                lines.append(f"{at} = {_name(node)}")
                lines.append(f"if {at} < 0: {at} += {dim}")
                lines.append(f"if {at} < 0 or {at} >= {dim}:")  # flagged, read nowhere outside
                lines.append("    bad = True")
                lines.append(f"    {at} = 0")
                flat.append(f"{at} * {stride}")
            lines.append(f"at{i} = {offsets[slot]}" + "".join(f" + {f}" for f in flat))
            cast = {"f": "DTYPE", "i": "np.int64", "b": "bool"}[kind]
            lines.append(f"{_name(i)} = {cast}(cap[at{i}])")
        else:
            names = [_name(a) for a in args]
            if kind == _FLOAT or op in ("lt", "le", "gt", "ge", "eq", "ne", "maximum", "minimum", "where"):
                kinds = [trace.nodes[a][2] for a in args]
                if _FLOAT in kinds:  # an int beside a float: cast to the tile's dtype, not numba's float64
                    names = [f"DTYPE({n})" if k == _INT else n for n, k in zip(names, kinds)]
            lines.append(f"{_name(i)} = " + _VALUE[op].format(*names))
    return lines


def _adjoint_lines(trace: Trace, out: int, offsets: list[int]) -> list[str]:
    """Lines accumulating d out / d node into a{node} for the live nodes, backwards from out; then the
    captured values' gradients and d out / d score in `d_score`."""
    live = _differentiable(trace, out)
    if out not in live:
        return ["d_score = 0.0"]
    lines = [f"a{i} = 0.0" for i in sorted(live) if i != out] + [f"a{out} = 1.0"]
    for i in range(out, -1, -1):
        op, args, _ = trace.nodes[i]
        if i not in live or op not in _RULES:
            continue
        for arg, rule in zip(args, _RULES[op]):
            if rule is None or not isinstance(arg, int) or arg not in live:
                continue
            step = rule.format(*(_name(a) for a in args), g=f"a{i}", y=_name(i))
            lines.append(f"a{arg} += {step}")
    score = [i for i, (op, _, _) in enumerate(trace.nodes) if op == "score" and i in live]
    lines.append("d_score = " + (" + ".join(f"a{i}" for i in score) if score else "0.0"))
    for i, (op, args, _) in enumerate(trace.nodes[:out + 1]):
        if op == "read" and i in live and trace.captured[args[0]].requires_grad:
            lines.append(f"grads[at{i}] += g * a{i}")
    return lines


_TEMPLATE = '''
def modifier(mode, sp, rp, rows, width, n, b, h, q_start, k_start, cp, gp, scale):
    s = view(sp, (rows, width), DTYPE)
    raw = view(rp, (rows, width), DTYPE)
    cap = view(cp, ({n_values},), np.float64)
    grads = view(gp, ({n_grads},), np.float64)
    bad = False
    if mode == SCORES:
        for i in range(rows):
            q_idx = q_start + i
{row}
            for j in range(n):
                kv_idx = k_start + j
                score = s[i, j]
{forward}
                s[i, j] = {result}
    elif mode == MASKED_SCORES:
        for i in range(rows):
            q_idx = q_start + i
{row}
{mask_row}
            for j in range(n):
                kv_idx = k_start + j
                score = s[i, j]
{forward}
{mask}
                s[i, j] = {result} if {kept} else -np.inf
    else:
        for i in range(rows):
            q_idx = q_start + i
{row}
            for j in range(n):
                g = np.float64(s[i, j])
{skip}
                kv_idx = k_start + j
                score = raw[i, j]
{forward}
{adjoint}
                s[i, j] = scale * g * d_score if g != 0 else 0.0
    if bad:
        grads[{n_captured}] = 1.0
'''


def _indent(lines: list[str], depth: int) -> str:
    return "\n".join(" " * depth + line for line in lines) if lines else " " * depth + "pass"


def write_source(trace: Trace, score_out: int | None, mask_out: int | None) -> str:
    """The modifier's Python source (numba's subset) for the trace's score output and mask output."""
    offsets = list(np.cumsum([0] + [t._data.size for t in trace.captured]))
    n_captured = int(offsets[-1])
    inner = _per_entry(trace)
    leaves = [i for i, (op, _, _) in enumerate(trace.nodes) if op in _LEAVES]  # nodes 0..4, traced first
    score_nodes = sorted(set(leaves) | set(range(score_out + 1 if score_out is not None else 0)))
    first = 0 if score_out is None else score_out + 1  # the mask's own nodes, traced after the score's
    mask_nodes = [i for i in range(first, mask_out + 1) if i not in leaves] if mask_out is not None else []

    def split(nodes: list[int]) -> tuple[str, str]:  # (once per row, for each entry)
        row = _value_lines(trace, [i for i in nodes if i not in inner], n_captured, offsets)
        entry = _value_lines(trace, [i for i in nodes if i in inner], n_captured, offsets)
        return _indent(row, 12), _indent(entry, 16)

    row, forward = split(score_nodes)
    mask_row, mask = split(mask_nodes)
    result = _name(score_out) if score_out is not None else "score"
    kept = _name(mask_out) if mask_out is not None else "True"
    adjoint = _adjoint_lines(trace, score_out, offsets) if score_out is not None else ["d_score = 1.0"]
    learns = any(line.startswith("grads[at") for line in adjoint)  # a scatter: only where the gradient is not 0
    return _TEMPLATE.format(n_values=max(n_captured, 1), n_grads=n_captured + 1, n_captured=n_captured,
                            row=row, forward=forward, mask_row=mask_row, mask=mask, kept=kept, result=result,
                            adjoint=_indent(adjoint, 16), skip=_indent(["if g == 0:", "    continue"] if learns else [],
                                                                       16))


def _maximum(a, b):
    return a if a >= b or a != a else b


def _minimum(a, b):
    return a if a <= b or a != a else b


def _tanh(x):
    """tanh from e = exp(-2|x|) <= 1: no overflow, and the loop over a tile vectorises."""
    e = exp_vectorizable(-2 * abs(x))
    t = (1 - e) / (1 + e)
    return t if x >= 0 else -t


def _sigmoid(x):
    """1 / (1 + exp(-x)) from e = exp(-|x|) <= 1."""
    e = exp_vectorizable(-abs(x))
    return 1 / (1 + e) if x >= 0 else e / (1 + e)


def _view_python(pointer, shape, dtype):
    return modifiers.python_view(pointer, shape, dtype)


_FASTMATH = {"contract", "nsz", "arcp"}  # no reassociation: exp_vectorizable's reduction needs its order
_compiled: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()


def _compile(source: str, dtype: np.dtype, name: str) -> tuple[Any, float]:
    """The modifier of that source compiled for tiles of dtype (kept per source and dtype), and the seconds
    this call spent compiling it (0 when it was kept)."""
    key = (source, np.dtype(dtype).str)
    with _lock:
        if key in _compiled:
            return _compiled[key], 0.0
        start = time.perf_counter()
        from numba import carray, config, njit

        namespace = {"np": np, "SCORES": modifiers.SCORES, "MASKED_SCORES": modifiers.MASKED_SCORES,
                     "DTYPE": np.dtype(dtype).type}
        helpers = {"_maximum": _maximum, "_minimum": _minimum, "_tanh": _tanh, "_sigmoid": _sigmoid}
        if config.DISABLE_JIT:
            namespace.update(view=_view_python, **helpers)
        else:
            compiled_helpers = {k: njit(inline="always", fastmath=_FASTMATH)(f) for k, f in helpers.items()}
            namespace.update(view=carray, **compiled_helpers)
        digest = hashlib.sha1(source.encode()).hexdigest()[:12]
        code = compile(source, f"<flex modifier {name} {digest}>", "exec")
        exec(code, namespace)  # noqa: S102  (source written by write_source from the trace, not user text)
        fn = namespace["modifier"]
        if not config.DISABLE_JIT:
            from numba import cfunc

            fn = cfunc(modifiers.signature(dtype), error_model="numpy", fastmath=_FASTMATH)(fn)
        _compiled[key] = fn
        return fn, time.perf_counter() - start


@dataclass
class Compiled:
    """A traced modifier: the compiled function for the kernels, the tensors it reads, its source, the
    trace (for the math of its higher derivatives) and what compiling it cost."""

    modify: Any
    captured: tuple[Tensor, ...]
    source: str
    trace: Trace
    score_out: int | None
    mask_out: int | None
    compile_seconds: float


def _leaves(trace: Trace) -> tuple[Traced, ...]:
    return tuple(trace.add(op, (), _INT) for op in ("b", "h", "q", "kv"))


def trace_modifiers(score_mod: Callable | None, mask_mod: Callable | None) -> tuple[Trace, int | None, int | None]:
    """Both modifiers traced into one record: (trace, score output node, mask output node)."""
    trace = Trace()
    score = trace.add("score", (), _FLOAT)
    b, h, q, kv = _leaves(trace)
    score_out = mask_out = None
    if score_mod is not None:
        result = trace.constant(score_mod(score, b, h, q, kv))
        if result.kind == _BOOL:
            raise TraceError("a score_mod that returns a bool (a mask_mod belongs in create_block_mask)")
        score_out = result.node if result.kind == _FLOAT else (result._unary("float")).node
    if mask_mod is not None:
        kept = trace.constant(mask_mod(b, h, q, kv))
        if kept.kind != _BOOL:
            raise TraceError("a mask_mod that does not return a bool")
        mask_out = kept.node
    return trace, score_out, mask_out


def compile_modifiers(score_mod: Callable | None, mask_mod: Callable | None, dtype: np.dtype) -> Compiled:
    """score_mod and mask_mod (either may be None) traced, written and compiled for tiles of dtype. Raises
    TraceError (naming what stopped the trace) when the modifier cannot be traced."""
    trace, score_out, mask_out = trace_modifiers(score_mod, mask_mod)
    source = write_source(trace, score_out, mask_out)
    name = "+".join(getattr(f, "__name__", type(f).__name__) for f in (score_mod, mask_mod) if f is not None)
    modify, seconds = _compile(source, dtype, name)
    return Compiled(modify, tuple(trace.captured), source, trace, score_out, mask_out, seconds)


# ---- the same record on whole tensors: the math of the fused op's higher derivatives ----------------------

_TENSOR_OPS: dict[str, Callable] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "truediv": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b,
    "pow": lambda a, b: a ** b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
    "maximum": maximum, "minimum": minimum,
    "where": lambda c, a, b: where(_tensor(c), a, b), "neg": lambda a: -a, "abs": lambda a: _tensor(a).abs(),
    "not": lambda a: ~_tensor(a), "invert": lambda a: ~_tensor(a),
    "float": lambda a: _tensor(a).double() if _tensor(a).dtype.kind != "f" else a,
    "int": lambda a: _tensor(a).long(),
}


def _tensor(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(np.asarray(x))


def evaluate(trace: Trace, out: int, scores: Tensor, captured: tuple, shape: tuple[int, int, int, int]) -> Tensor:
    """The traced expression on whole tensors: scores (B, H, L, S), the indices as broadcasting int64
    tensors, the captured values read from `captured` (the same tensors, or the engine's stand-ins)."""
    b, h, q_len, kv_len = shape
    leaves = {"b": np.arange(b).reshape(b, 1, 1, 1), "h": np.arange(h).reshape(1, h, 1, 1),
              "q": np.arange(q_len).reshape(1, 1, q_len, 1), "kv": np.arange(kv_len).reshape(1, 1, 1, kv_len)}
    values: list[Any] = []
    for op, args, _ in trace.nodes[:out + 1]:
        if op == "score":
            values.append(scores)
        elif op in leaves:
            values.append(Tensor(leaves[op]))
        elif op == "const":
            values.append(args[0])
        elif op == "read":
            slot, ids = args
            index = tuple(values[i] for i in ids)
            values.append(captured[slot][index] if index else captured[slot])
        elif op in _TENSOR_OPS:
            values.append(_TENSOR_OPS[op](*(values[a] for a in args)))
        else:
            values.append(getattr(_tensor(values[args[0]]), op)())
    return _tensor(values[out])


def warn_fallback(name: str, err: Exception) -> None:
    warnings.warn(f"flex_attention: the modifier {name!r} cannot be compiled into the fused kernel ({err}); "
                  "it runs on the math path, which builds the (L, S) scores", stacklevel=3)
