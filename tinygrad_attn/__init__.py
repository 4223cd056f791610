"""tinygrad_attn: a small reverse-mode autograd framework for attention on a CPU.

    import tinygrad_attn as ta
    from tinygrad_attn import functional as F

    x = ta.Tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    F.softmax(x, dim=-1)[0, 2].backward()
    x.grad                                  # d p_2 / d x
"""

from . import debug, functional, interop, nn, optim, runtime, tasks, viz
from .creation import (
                       arange,
                       full,
                       multinomial,
                       ones,
                       ones_like,
                       rand,
                       randn,
                       tensor,
                       topk,
                       tril,
                       triu,
                       zeros,
                       zeros_like,
)
from .debug import detect_anomaly, trace_backward
from .engine import Context, Function, Tensor, is_grad_enabled, no_grad
from .functional import sdpa_kernel
from .gradcheck import GradcheckError, gradcheck
from .kernels.parallel import get_num_threads, set_num_threads
from .masks import causal_mask, padding_mask
from .ops import cat, stack, where
from .rng import manual_seed
from .serialization import load, save

__version__ = "0.1.0"

__all__ = [
    "arange",
    "full",
    "multinomial",
    "ones",
    "ones_like",
    "rand",
    "randn",
    "tensor",
    "topk",
    "tril",
    "triu",
    "zeros",
    "zeros_like",
    "engine",
    "Context",
    "Function",
    "GradcheckError",
    "Tensor",
    "cat",
    "debug",
    "detect_anomaly",
    "causal_mask",
    "functional",
    "get_num_threads",
    "gradcheck",
    "interop",
    "is_grad_enabled",
    "load",
    "manual_seed",
    "nn",
    "no_grad",
    "optim",
    "padding_mask",
    "runtime",
    "sdpa_kernel",
    "save",
    "set_num_threads",
    "stack",
    "tasks",
    "trace_backward",
    "viz",
    "where",
]
