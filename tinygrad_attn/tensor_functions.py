"""PyTorch's module-level functions of Tensor ops: `ta.exp(x)` is `x.exp()`, `ta.max(x, 1)` is `x.max(1)`.

Each function here calls the Tensor method of the same name, so there is one implementation per op (the
method, in tensor.py) and these are its PyTorch spellings.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from . import amp, dtypes
from .checks import check_tensor
from .engine import tensor_dtype
from .fused import LinearFunction, fits_linear
from .ops import Einsum
from .tensor import Tensor, maximum, minimum, where


def _method(name: str) -> Any:
    def function(input: Tensor, *args: Any, **kwargs: Any) -> Any:  # noqa: A002  (PyTorch's name)
        if not isinstance(input, Tensor) and hasattr(type(input), "__ta_function__"):  # a traced stand-in
            return getattr(input, name)(*args, **kwargs)
        return getattr(check_tensor(input, name), name)(*args, **kwargs)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"ta.{name}(input, ...) is input.{name}(...), as torch.{name}."
    return function


acos = _method("acos")
acosh = _method("acosh")
asin = _method("asin")
asinh = _method("asinh")
atan = _method("atan")
atanh = _method("atanh")
ceil = _method("ceil")
cosh = _method("cosh")
erf = _method("erf")
exp2 = _method("exp2")
expm1 = _method("expm1")
flip = _method("flip")
floor = _method("floor")
gather = _method("gather")
isclose = _method("isclose")
isfinite = _method("isfinite")
isinf = _method("isinf")
isnan = _method("isnan")
lerp = _method("lerp")
log10 = _method("log10")
log1p = _method("log1p")
log2 = _method("log2")
logsumexp = _method("logsumexp")
masked_select = _method("masked_select")
outer = _method("outer")
repeat_interleave = _method("repeat_interleave")
roll = _method("roll")
round = _method("round")  # noqa: A001
sign = _method("sign")
sinh = _method("sinh")
tan = _method("tan")
trunc = _method("trunc")
unbind = _method("unbind")
unflatten = _method("unflatten")
abs = _method("abs")  # noqa: A001
add = _method("add")
sub = _method("sub")
mul = _method("mul")
div = _method("div")
neg = _method("neg")
eq = _method("eq")
ne = _method("ne")
lt = _method("lt")
le = _method("le")
gt = _method("gt")
ge = _method("ge")
all = _method("all")  # noqa: A001
amax = _method("amax")
amin = _method("amin")
any = _method("any")  # noqa: A001
argmax = _method("argmax")
argmin = _method("argmin")
argsort = _method("argsort")
chunk = _method("chunk")
clamp = _method("clamp")
clip = _method("clamp")
cos = _method("cos")
cumsum = _method("cumsum")
exp = _method("exp")
flatten = _method("flatten")
kthvalue = _method("kthvalue")
log = _method("log")
log_softmax = _method("log_softmax")
logical_and = _method("logical_and")
logical_not = _method("logical_not")
logical_or = _method("logical_or")
masked_fill = _method("masked_fill")
max = _method("max")  # noqa: A001
mean = _method("mean")
median = _method("median")
min = _method("min")  # noqa: A001
nonzero = _method("nonzero")
norm = _method("norm")
numel = _method("numel")
permute = _method("permute")
relu = _method("relu")
reshape = _method("reshape")
rsqrt = _method("rsqrt")
sigmoid = _method("sigmoid")
sin = _method("sin")
softmax = _method("softmax")
sort = _method("sort")
split = _method("split")
sqrt = _method("sqrt")
square = _method("square")
squeeze = _method("squeeze")
std = _method("std")
sum = _method("sum")  # noqa: A001
tanh = _method("tanh")
transpose = _method("transpose")
t = _method("t")
unique = _method("unique")
unsqueeze = _method("unsqueeze")
var = _method("var")
prod = _method("prod")
cumprod = _method("cumprod")
cummax = _method("cummax")
cummin = _method("cummin")
logcumsumexp = _method("logcumsumexp")
fmod = _method("fmod")
copysign = _method("copysign")
diagonal = _method("diagonal")
swapaxes = _method("swapaxes")
swapdims = _method("swapdims")
movedim = _method("movedim")
narrow = _method("narrow")
select = _method("select")
index_select = _method("index_select")
clamp_min = _method("clamp_min")
clamp_max = _method("clamp_max")
bernoulli = _method("bernoulli")


def baddbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:  # noqa: A002
    """beta * input + alpha * (batch1 @ batch2) on (B, n, k) @ (B, k, m); beta=0 ignores input (NaN too)."""
    return _add_product("baddbmm", 3, input, batch1, batch2, beta, alpha)


def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:  # noqa: A002
    """beta * input + alpha * (mat1 @ mat2) on (n, k) @ (k, m); beta=0 ignores input (NaN too)."""
    return _add_product("addmm", 2, input, mat1, mat2, beta, alpha)


def _add_product(op: str, ndim: int, input: Tensor, a: Tensor, b: Tensor, beta: Any, alpha: Any) -> Tensor:  # noqa: A002
    check_tensor(input, op)
    names = ("batch1", "batch2") if ndim == 3 else ("mat1", "mat2")
    for name, t in zip(names, (a, b)):
        if check_tensor(t, op, name).ndim != ndim:
            raise RuntimeError(f"{op}: {name} must be {ndim}-D, got shape {t.shape}")
    if ndim == 2 and alpha == 1 and beta == 1 and isinstance(input, Tensor) and input.shape == b.shape[1:]:
        weight = b.t()  # (out, in): a layer's x W^T + b, one node
        if fits_linear(a, weight, input):
            return LinearFunction.apply(a, weight, input)
    product = a @ b
    product = product if alpha == 1 else product * alpha
    if beta == 0:  # PyTorch ignores input's values then (nan and inf do not propagate); its gradient is 0
        return product + where(np.zeros(input.shape, bool), input, 0.0)
    return product + (input if beta == 1 else input * beta)


def dot(input: Tensor, tensor: Tensor) -> Tensor:  # noqa: A002
    """The sum of products of two 1-D tensors of one length."""
    a, b = check_tensor(input, "dot"), check_tensor(tensor, "dot", "tensor")
    if a.ndim != 1 or b.ndim != 1 or a.shape != b.shape:
        raise RuntimeError(f"dot: expects two 1-D tensors of the same length, got shapes {a.shape} and {b.shape}")
    return (a * b).sum()


def tile(input: Tensor, dims: Any) -> Tensor:  # noqa: A002
    """input repeated `dims` times along each dim; fewer dims than input's are padded with 1s in front."""
    x = check_tensor(input, "tile")
    dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
    return x.repeat(*((1,) * (x.ndim - len(dims)) + dims))


def count_nonzero(input: Tensor, dim: Any = None) -> Tensor:  # noqa: A002
    """How many entries are not zero, in all (dim None) or along `dim` (int64)."""
    return (check_tensor(input, "count_nonzero") != 0).sum(dim)


def take_along_dim(input: Tensor, indices: Tensor, dim: int | None = None) -> Tensor:  # noqa: A002
    """input's entries at `indices` along `dim` (of the flattened input when dim is None), the other dims
    broadcast between the two, as torch.take_along_dim."""
    x, idx = check_tensor(input, "take_along_dim"), check_tensor(indices, "take_along_dim", "indices")
    if idx.dtype.kind not in "iu":
        raise TypeError(f"take_along_dim: indices must be integers, got dtype {idx.dtype}")
    if dim is None:
        return x.reshape(-1).gather(0, idx.reshape(-1))
    if x.ndim != idx.ndim:
        raise RuntimeError(f"take_along_dim: input and indices must have the same number of dims, got shapes "
                           f"{x.shape} and {idx.shape}")
    axis = dim % x.ndim if -x.ndim <= dim < x.ndim else dim
    shape = np.broadcast_shapes(tuple(1 if i == axis else n for i, n in enumerate(x.shape)),
                                tuple(1 if i == axis else n for i, n in enumerate(idx.shape)))
    x = x.expand(tuple(x.shape[i] if i == axis else n for i, n in enumerate(shape)))
    idx = idx.expand(tuple(idx.shape[i] if i == axis else n for i, n in enumerate(shape)))
    return x.gather(axis, idx)


def std_mean(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,  # noqa: A002
             correction: Any = None) -> tuple[Tensor, Tensor]:
    """(std, mean), as torch.std_mean."""
    x = check_tensor(input, "std_mean")
    return x.std(dim, unbiased, keepdim, correction=correction), x.mean(dim, keepdim)


def var_mean(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,  # noqa: A002
             correction: Any = None) -> tuple[Tensor, Tensor]:
    """(var, mean), as torch.var_mean."""
    x = check_tensor(input, "var_mean")
    return x.var(dim, unbiased, keepdim, correction=correction), x.mean(dim, keepdim)


def matmul(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    return check_tensor(input, "matmul") @ check_tensor(other, "matmul", "other")


def bmm(input: Tensor, mat2: Tensor) -> Tensor:  # noqa: A002
    """Batched (B, n, k) @ (B, k, m), as torch.bmm (both 3-D)."""
    if check_tensor(input, "bmm").ndim != 3 or check_tensor(mat2, "bmm", "mat2").ndim != 3:
        raise ValueError(f"bmm: both operands must be 3-D, got shapes {input.shape} and {mat2.shape}")
    return input @ mat2


def pow(input: Any, exponent: Any) -> Tensor:  # noqa: A001, A002
    """input ** exponent; a number raised to a tensor (torch.pow(2, t)) too."""
    if not isinstance(input, Tensor) and hasattr(type(input), "__ta_function__"):  # a traced stand-in
        return input ** exponent
    if isinstance(exponent, Tensor) and isinstance(input, (int, float, np.number)) and not isinstance(input, bool):
        return input ** exponent
    return check_tensor(input, "pow") ** exponent


class Size(tuple):
    """torch.Size: a tuple of dims (a tensor's .shape is a plain tuple here), with numel()."""

    def numel(self) -> int:
        return int(np.prod(self, dtype=np.int64))


_settings = {"float32_matmul_precision": "highest", "deterministic": False, "interop_threads": 1}


def set_float32_matmul_precision(precision: str) -> None:
    """Accepted and remembered: float32 products here always run in float32 ("highest")."""
    if precision not in ("highest", "high", "medium"):
        raise ValueError(f'set_float32_matmul_precision: precision must be "highest", "high" or "medium", got '
                         f"{precision!r}")
    _settings["float32_matmul_precision"] = precision


def get_float32_matmul_precision() -> str:
    return _settings["float32_matmul_precision"]


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """Accepted and remembered: every op here gives the same result for the same inputs and thread count."""
    _settings["deterministic"] = bool(mode)


def are_deterministic_algorithms_enabled() -> bool:
    return _settings["deterministic"]


def set_num_interop_threads(n: int) -> None:
    """Accepted and remembered: ops here do not run beside each other (set_num_threads sets the ops' threads)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"set_num_interop_threads: n must be a positive int, got {n!r}")
    _settings["interop_threads"] = int(n)


def get_num_interop_threads() -> int:
    return _settings["interop_threads"]


def einsum(equation: str, *operands: Any) -> Tensor:
    """torch.einsum: "ij,jk->ik", an implicit output (the letters seen once, in order), "..." for leading
    dims; operands as arguments or one list. Differentiable twice (ops.Einsum). A letter repeated within one
    operand (a diagonal, a trace) is refused: use `diagonal`."""
    if not isinstance(equation, str):
        raise TypeError(f"einsum: equation must be a string, got {type(equation).__name__}")
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    operands = tuple(check_tensor(t, "einsum", f"operand {i}") for i, t in enumerate(operands))
    if len({t.dtype for t in operands}) > 1:
        raise RuntimeError(f"einsum: operands must share a dtype, got {[str(t.dtype) for t in operands]}")
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(operands):
        raise ValueError(f"einsum: {equation!r} names {len(inputs)} operands, got {len(operands)}")
    free = iter(c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in equation)  # letters for "..."
    ellipsis, subscripts = "", []
    for sub, t in zip(inputs, operands):
        if sub.count("...") > 1 or (sub.replace("...", "") and not sub.replace("...", "").isalpha()):
            raise ValueError(f"einsum: {sub!r} in {equation!r}: subscripts are letters, with at most one '...'")
        if "..." in sub:
            n = t.ndim - (len(sub) - 3)
            if n < 0:
                raise ValueError(f"einsum: {sub!r} has more letters than operand dims {t.shape}")
            while len(ellipsis) < n:
                ellipsis = next(free) + ellipsis
            sub = sub.replace("...", ellipsis[len(ellipsis) - n:])
        if len(sub) != t.ndim:
            raise ValueError(f"einsum: {sub!r} names {len(sub)} dims, the operand has shape {t.shape}")
        if len(set(sub)) != len(sub):
            raise NotImplementedError(f"einsum: the letter repeated in {sub!r} (a diagonal or trace) is not "
                                      "supported here; take ta.diagonal first")
        subscripts.append(sub)
    if arrow:
        output = rhs.replace("...", ellipsis)
        if (output and not output.isalpha()) or len(set(output)) != len(output):
            raise ValueError(f"einsum: output {rhs!r} must be distinct letters (and '...')")
    else:
        counts = "".join(subscripts)
        output = ellipsis + "".join(sorted(c for c in set(counts) if counts.count(c) == 1 and c not in ellipsis))
    sizes: dict[str, int] = {}
    for sub, t in zip(subscripts, operands):
        for c, n in zip(sub, t.shape):
            if sizes.setdefault(c, n) != n and 1 not in (n, sizes[c]):
                raise RuntimeError(f"einsum: {c!r} is {sizes[c]} in one operand and {n} in another ({equation!r})")
            sizes[c] = n if sizes[c] == 1 else sizes[c]
    missing = set(output) - set("".join(subscripts))
    if missing:
        raise ValueError(f"einsum: output letters {sorted(missing)} appear in no operand ({equation!r})")
    return Einsum.apply(*operands, subscripts=tuple(subscripts), output=output)


def meshgrid(*tensors: Any, indexing: str = "ij") -> tuple[Tensor, ...]:
    """torch.meshgrid: 1-D tensors -> their grids, "ij" (matrix) or "xy" (Cartesian) indexing."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f'meshgrid: indexing must be "ij" or "xy", got {indexing!r}')
    tensors = tuple(check_tensor(t, "meshgrid") for t in tensors)
    if [t for t in tensors if t.ndim > 1]:  # (this module's `any` is torch.any)
        raise RuntimeError(f"meshgrid: expects 0-D or 1-D tensors, got shapes {[t.shape for t in tensors]}")
    flat = [t.reshape(-1) for t in tensors]
    if indexing == "xy" and len(flat) >= 2:
        flat[0], flat[1] = flat[1], flat[0]
    shape = tuple(t.shape[0] for t in flat)
    grids = [t.reshape(tuple(-1 if i == k else 1 for i in range(len(flat)))).expand(shape) for k, t in enumerate(flat)]
    if indexing == "xy" and len(grids) >= 2:
        grids[0], grids[1] = grids[1], grids[0]  # X varies along columns, Y along rows
    return tuple(grids)


def is_tensor(obj: Any) -> bool:
    return isinstance(obj, Tensor)


def is_floating_point(input: Tensor) -> bool:  # noqa: A002
    return check_tensor(input, "is_floating_point").dtype.kind == "f"


def allclose(input: Tensor, other: Tensor, rtol: float = 1e-5, atol: float = 1e-8,  # noqa: A002
             equal_nan: bool = False) -> bool:
    return bool(np.allclose(check_tensor(input, "allclose")._data, check_tensor(other, "allclose", "other")._data,
                            rtol, atol, equal_nan))  # tensors that require grad too, as PyTorch's


def equal(input: Tensor, other: Tensor) -> bool:  # noqa: A002
    a, b = check_tensor(input, "equal")._data, check_tensor(other, "equal", "other")._data
    return a.shape == b.shape and bool(np.array_equal(a, b))


class finfo:  # noqa: N801  (PyTorch's name)
    """A floating dtype's limits, as torch.finfo: bits, eps, max, min, tiny (smallest_normal), resolution."""

    def __init__(self, type: Any = None):  # noqa: A002
        dtype = dtypes.DEFAULT_FLOAT if type is None else np.dtype(tensor_dtype(type, "finfo"))
        if dtype.kind != "f":
            raise TypeError(f"finfo: {dtype} is not a floating dtype; use iinfo for integers")
        info = np.finfo(dtype)
        self.dtype, self.bits, self.eps = str(dtype), int(info.bits), float(info.eps)
        self.max, self.min, self.resolution = float(info.max), float(info.min), 10.0 ** -int(info.precision)
        self.tiny = self.smallest_normal = float(info.smallest_normal)

    def __repr__(self) -> str:
        return (f"finfo(resolution={self.resolution}, min={self.min}, max={self.max}, eps={self.eps}, "
                f"dtype={self.dtype})")


class iinfo:  # noqa: N801
    """An integer dtype's limits, as torch.iinfo: bits, max, min."""

    def __init__(self, type: Any):  # noqa: A002
        dtype = np.dtype(tensor_dtype(type, "iinfo"))
        if dtype.kind not in "iu":
            raise TypeError(f"iinfo: {dtype} is not an integer dtype; use finfo for floats")
        info = np.iinfo(dtype)
        self.dtype, self.bits, self.max, self.min = str(dtype), int(info.bits), int(info.max), int(info.min)

    def __repr__(self) -> str:
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"


def get_default_dtype() -> np.dtype:
    return dtypes.DEFAULT_FLOAT


def _typed(dtype: np.dtype, name: str) -> Any:
    def constructor(*data: Any) -> Tensor:
        return Tensor(*data, dtype=dtype)

    constructor.__name__ = constructor.__qualname__ = name
    constructor.__doc__ = f"torch.{name}: a tensor of dtype {dtype} (from data, or zeros of the given sizes)."
    constructor.dtype = dtype  # so that x.type(torch.ByteTensor) casts, as PyTorch's
    return constructor


FloatTensor = _typed(dtypes.float32, "FloatTensor")
DoubleTensor = _typed(dtypes.float64, "DoubleTensor")
LongTensor = _typed(dtypes.int64, "LongTensor")
IntTensor = _typed(dtypes.int32, "IntTensor")
BoolTensor = _typed(dtypes.bool, "BoolTensor")
ByteTensor = _typed(dtypes.uint8, "ByteTensor")


class cuda:  # noqa: N801  (torch.cuda's name)
    """torch.cuda on a machine without one: is_available() is False, device_count() is 0; `cuda.amp` is
    `ta.amp` (autocast and GradScaler, which change nothing here)."""

    amp = amp

    @staticmethod
    def is_available() -> bool:
        return False

    @staticmethod
    def device_count() -> int:
        return 0

    @staticmethod
    def is_bf16_supported(including_emulation: bool = True) -> bool:
        return False

    @staticmethod
    def manual_seed(seed: int) -> None:
        """Nothing to seed: there is no CUDA generator (ta.manual_seed seeds the one generator)."""

    manual_seed_all = manual_seed


class backends:  # noqa: N801
    """torch.backends on a CPU: the switches programs set (TF32, cuDNN's autotuner) are accepted and change
    nothing, as on a CPU-only PyTorch."""

    class mps:  # noqa: N801
        @staticmethod
        def is_available() -> bool:
            return False

    class cuda:  # noqa: N801
        class matmul:  # noqa: N801
            allow_tf32 = False
            allow_fp16_reduced_precision_reduction = True

        @staticmethod
        def is_built() -> bool:
            return False

    class cudnn:  # noqa: N801
        enabled, benchmark, deterministic, allow_tf32 = True, False, False, True

        @staticmethod
        def is_available() -> bool:
            return False


_compile_noted = False


def compile(model: Any = None, **options: Any) -> Any:  # noqa: A001  (PyTorch's name)
    """torch.compile: there is no compiler to hand a model to, so the model (or function) is returned as it
    is and runs eagerly (the fused kernels are compiled by numba anyway); a note says so once per process."""
    global _compile_noted
    if not _compile_noted:
        _compile_noted = True
        warnings.warn("torch.compile: tinygrad_attn runs the model eagerly (its kernels are already compiled)",
                      stacklevel=2)
    if model is None:  # used as @torch.compile(mode=...)
        return lambda fn: fn
    return model


__all__ = [
    "compile", "BoolTensor", "ByteTensor", "DoubleTensor", "FloatTensor", "IntTensor", "LongTensor", "abs", "add",
    "all",
    "allclose", "div", "eq", "ge", "gt", "le", "lt", "mul", "ne", "neg", "sub",
    "amax", "amin", "any", "argmax", "argmin", "argsort", "backends", "bmm", "chunk", "clamp", "clip", "cos",
    "cuda", "cumsum", "equal", "exp", "flatten", "get_default_dtype", "is_floating_point", "is_tensor", "kthvalue",
    "log", "log_softmax", "logical_and", "logical_not", "logical_or", "masked_fill", "matmul", "max", "maximum",
    "mean", "median", "min", "minimum", "nonzero", "norm", "numel", "permute", "pow", "relu", "reshape", "rsqrt",
    "sigmoid", "sin", "softmax", "sort", "split", "sqrt", "square", "squeeze", "std", "sum", "tanh", "transpose",
    "unique", "unsqueeze", "var",
    "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "cosh", "erf", "exp2", "expm1", "flip", "floor",
    "gather", "isclose", "isfinite", "isinf", "isnan", "lerp", "log10", "log1p", "log2", "logsumexp",
    "masked_select", "outer", "repeat_interleave", "roll", "round", "sign", "sinh", "tan", "trunc", "unbind",
    "unflatten", "einsum", "meshgrid", "prod", "cumprod", "cummax", "cummin", "logcumsumexp", "std_mean",
    "var_mean", "fmod", "copysign", "diagonal",
]
