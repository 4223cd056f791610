"""tinygrad_attn: a small reverse-mode autograd framework for attention on a CPU.

    import tinygrad_attn as ta
    from tinygrad_attn import functional as F

    x = ta.Tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    F.softmax(x, dim=-1)[0, 2].backward()
    x.grad                                  # d p_2 / d x

PyTorch programs run with `import tinygrad_attn as torch` (and `tinygrad_attn.nn`, `.nn.functional`,
`.optim`, `.utils.data` likewise): the names below are PyTorch's, with PyTorch's semantics.
"""

from . import (
    amp,
    autograd,
    debug,
    distributed,
    dtypes,
    func,
    functional,
    interop,
    losses,
    nn,
    optim,
    runtime,
    tasks,
    utils,
    viz,
)
from .amp import autocast
from .autograd import GradcheckError, gradcheck, gradgradcheck
from .complex_tensor import ComplexTensor, complex, polar, view_as_complex, view_as_real
from .creation import (
    arange,
    as_tensor,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    multinomial,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randn,
    randn_like,
    randperm,
    tensor,
    topk,
    tril,
    triu,
    zeros,
    zeros_like,
)
from .debug import detect_anomaly, trace_backward
from .dtypes import (
    bfloat16,
    bool,  # noqa: A004  (PyTorch's dtype names)
    double,
    float,  # noqa: A004
    float16,
    float32,
    float64,
    half,
    int,  # noqa: A004
    int8,
    int16,
    int32,
    int64,
    long,
    short,
    uint8,
)
from .engine import (
    Context,
    Function,
    RemovableHandle,
    device,
    enable_grad,
    inference_mode,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)
from .functional import sdpa_kernel
from .kernels.parallel import get_num_threads, set_num_threads
from .masks import causal_mask, padding_mask
from .ops import return_types
from .rng import Generator, default_generator, initial_seed, manual_seed, seed
from .serialization import load, save
from .tensor import Tensor, cat, maximum, minimum, stack, where
from .tensor_functions import (
    BoolTensor,
    ByteTensor,
    DoubleTensor,
    FloatTensor,
    IntTensor,
    LongTensor,
    Size,
    abs,  # noqa: A004
    acos,
    acosh,
    add,
    addmm,
    all,  # noqa: A004
    allclose,
    amax,
    amin,
    any,  # noqa: A004
    are_deterministic_algorithms_enabled,
    argmax,
    argmin,
    argsort,
    asin,
    asinh,
    atan,
    atanh,
    backends,
    baddbmm,
    bernoulli,
    bmm,
    ceil,
    chunk,
    clamp,
    clamp_max,
    clamp_min,
    clip,
    compile,
    copysign,
    cos,
    cosh,
    count_nonzero,
    cuda,
    cummax,
    cummin,
    cumprod,
    cumsum,
    diagonal,
    div,
    dot,
    einsum,
    eq,
    equal,
    erf,
    exp,
    exp2,
    expm1,
    finfo,
    flatten,
    flip,
    floor,
    fmod,
    gather,
    ge,
    get_default_dtype,
    get_float32_matmul_precision,
    get_num_interop_threads,
    gt,
    iinfo,
    index_select,
    is_floating_point,
    is_tensor,
    isclose,
    isfinite,
    isinf,
    isnan,
    kthvalue,
    le,
    lerp,
    log,
    log1p,
    log2,
    log10,
    log_softmax,
    logcumsumexp,
    logical_and,
    logical_not,
    logical_or,
    logsumexp,
    lt,
    masked_fill,
    masked_select,
    matmul,
    max,  # noqa: A004
    mean,
    median,
    meshgrid,
    min,  # noqa: A004
    movedim,
    mul,
    narrow,
    ne,
    neg,
    nonzero,
    norm,
    numel,
    outer,
    permute,
    pow,  # noqa: A004
    prod,
    relu,
    repeat_interleave,
    reshape,
    roll,
    round,  # noqa: A004
    rsqrt,
    select,
    set_float32_matmul_precision,
    set_num_interop_threads,
    sigmoid,
    sign,
    sin,
    sinh,
    softmax,
    sort,
    split,
    sqrt,
    square,
    squeeze,
    std,
    std_mean,
    sub,
    sum,  # noqa: A004
    swapaxes,
    swapdims,
    t,
    take_along_dim,
    tan,
    tanh,
    tile,
    transpose,
    trunc,
    unbind,
    unflatten,
    unique,
    unsqueeze,
    use_deterministic_algorithms,
    var,
    var_mean,
)

__version__ = "0.1.0"

# Names PyTorch programs meet that are not here, with what to use instead.
_INSTEAD = {
    "jit": "call the model directly",
    "set_default_dtype": "dtype= on each factory (the default float is float32)",
    "load_state_dict_from_url": "ta.load on a local .npz or .safetensors file",
    "hub": "ta.load on a local .npz or .safetensors file",
    "tensordot": "reshape and matmul",
}


def __getattr__(name: str) -> object:
    """A PyTorch name this library does not have: one AttributeError saying what to use instead."""
    if name.startswith("__"):
        raise AttributeError(name)
    instead = _INSTEAD.get(name, "see docs/api.md for the PyTorch names that are supported")
    raise AttributeError(f"torch.{name} is not supported here (tinygrad_attn.{name} does not exist); use {instead}")


__all__ = ["Generator", "autocast", "default_generator", "initial_seed", "Size", "set_float32_matmul_precision",
           "get_float32_matmul_precision", "use_deterministic_algorithms", "are_deterministic_algorithms_enabled",
           "set_num_interop_threads", "get_num_interop_threads",
           "amp", "compile", "addmm", "baddbmm", "bernoulli", "clamp_max", "clamp_min", "count_nonzero", "dot",
           "finfo", "iinfo",
           "index_select", "movedim", "narrow", "select", "swapaxes", "swapdims", "take_along_dim", "tile",
           "distributed", "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "cosh", "erf",
           "exp2", "expm1", "flip", "floor", "gather", "isclose", "isfinite", "isinf", "isnan", "lerp", "log10",
           "log1p", "log2", "logsumexp", "masked_select", "outer", "repeat_interleave", "roll", "round", "sign",
           "sinh", "tan", "trunc", "unbind", "unflatten", "copysign", "cummax", "cummin", "cumprod", "diagonal",
           "einsum", "fmod", "logcumsumexp", "meshgrid", "prod", "std_mean", "var_mean", "add", "sub", "mul", "div",
           "neg", "eq", "ne", "lt", "le", "gt", "ge", "BoolTensor", "autograd", "ByteTensor", "Context",
           "DoubleTensor", "FloatTensor", "Function", "GradcheckError", "IntTensor", "LongTensor", "RemovableHandle",
           "Tensor", "abs", "all", "allclose", "amax", "amin", "any", "arange", "argmax", "argmin", "argsort",
           "as_tensor", "backends", "bmm", "bool", "cat", "causal_mask", "chunk", "clamp", "clip", "cos", "cuda",
           "cumsum", "debug", "detect_anomaly", "device", "double", "dtypes", "empty", "empty_like", "enable_grad",
           "bfloat16", "equal", "exp", "eye", "flatten", "float", "float16", "float32", "float64", "from_numpy",
           "full", "full_like", "func", "functional", "get_default_dtype", "get_num_threads", "gradcheck",
           "gradgradcheck", "half", "inference_mode", "int", "int8", "int16", "int32", "int64", "interop",
           "is_floating_point", "is_grad_enabled", "is_tensor", "kthvalue", "linspace", "load", "log", "log_softmax",
           "logical_and", "logical_not", "logical_or", "long", "losses", "manual_seed", "masked_fill", "matmul",
           "max", "maximum", "mean", "median", "min", "minimum", "multinomial", "nn", "no_grad", "nonzero", "norm",
           "numel", "ones", "ones_like", "optim", "padding_mask", "permute", "pow", "rand", "rand_like", "randint",
           "randn", "randn_like", "randperm", "relu", "reshape", "return_types", "rsqrt", "runtime", "save",
           "sdpa_kernel", "seed", "set_grad_enabled", "set_num_threads", "short", "sigmoid", "sin", "softmax",
           "sort", "split", "sqrt", "square", "squeeze", "stack", "std", "sum", "tanh", "tasks", "tensor", "topk",
           "t", "trace_backward", "transpose", "tril", "triu", "uint8", "unique", "unsqueeze", "utils", "var", "viz",
           "where", "zeros", "zeros_like", "ComplexTensor", "complex", "polar", "view_as_complex", "view_as_real"]
