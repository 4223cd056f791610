"""PyTorch's activation functions (`torch.nn.functional.silu`, `softplus`, `elu`, ...), each composed of Tensor
ops in one or two lines, so each is differentiable to any order with no rule of its own. Formulas and
defaults are PyTorch's."""

from __future__ import annotations

from .checks import check_number, check_tensor, float_tensor
from .tensor import Tensor, where

SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805  # PyTorch's constants


def silu(input: Tensor) -> Tensor:  # noqa: A002  (PyTorch's names)
    """x * sigmoid(x) (swish)."""
    x = float_tensor(input, "silu")
    return x * x.sigmoid()


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:  # noqa: A002
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (where the two agree to rounding)."""
    x = float_tensor(input, "softplus")
    beta = check_number(beta, "beta", "softplus")
    threshold = check_number(threshold, "threshold", "softplus")
    z = x * beta
    safe = where(z > threshold, 0.0, z)  # exp never overflows in the branch that is not taken
    return where(z > threshold, x, safe.exp().log1p() * (1.0 / beta))


def elu(input: Tensor, alpha: float = 1.0) -> Tensor:  # noqa: A002
    """x for x > 0, alpha (exp(x) - 1) below."""
    x = float_tensor(input, "elu")
    alpha = check_number(alpha, "alpha", "elu")
    return where(x > 0, x, where(x > 0, 0.0, x).expm1() * alpha)


def celu(input: Tensor, alpha: float = 1.0) -> Tensor:  # noqa: A002
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1))."""
    x = float_tensor(input, "celu")
    alpha = check_number(alpha, "alpha", "celu")
    if alpha == 0:
        raise ValueError("celu: alpha must not be 0")
    return where(x > 0, x, (where(x > 0, 0.0, x) * (1.0 / alpha)).expm1() * alpha)


def selu(input: Tensor) -> Tensor:  # noqa: A002
    """scale * elu(x, alpha) with PyTorch's fixed alpha and scale."""
    return elu(input, SELU_ALPHA) * SELU_SCALE


def leaky_relu(input: Tensor, negative_slope: float = 0.01) -> Tensor:  # noqa: A002
    """x for x > 0, negative_slope x below."""
    x = float_tensor(input, "leaky_relu")
    slope = check_number(negative_slope, "negative_slope", "leaky_relu")
    return where(x > 0, x, x * slope)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:  # noqa: A002
    """x clamped to [min_val, max_val]."""
    low, high = check_number(min_val, "min_val", "hardtanh"), check_number(max_val, "max_val", "hardtanh")
    if low > high:
        raise ValueError(f"hardtanh: min_val {low} must not exceed max_val {high}")
    return float_tensor(input, "hardtanh").clamp(low, high)


def relu6(input: Tensor) -> Tensor:  # noqa: A002
    return hardtanh(input, 0.0, 6.0)


def hardsigmoid(input: Tensor) -> Tensor:  # noqa: A002
    """clamp(x / 6 + 1 / 2, 0, 1)."""
    return (float_tensor(input, "hardsigmoid") * (1 / 6) + 0.5).clamp(0.0, 1.0)


def hardswish(input: Tensor) -> Tensor:  # noqa: A002
    """x * hardsigmoid(x)."""
    return float_tensor(input, "hardswish") * hardsigmoid(input)


def mish(input: Tensor) -> Tensor:  # noqa: A002
    """x * tanh(softplus(x))."""
    return float_tensor(input, "mish") * softplus(input).tanh()


def logsigmoid(input: Tensor) -> Tensor:  # noqa: A002
    """log(sigmoid(x)) = -softplus(-x), without the log of a rounded-to-0 sigmoid."""
    return -softplus(-float_tensor(input, "logsigmoid"))


def softsign(input: Tensor) -> Tensor:  # noqa: A002
    """x / (1 + |x|)."""
    x = float_tensor(input, "softsign")
    return x / (x.abs() + 1)


def tanhshrink(input: Tensor) -> Tensor:  # noqa: A002
    x = float_tensor(input, "tanhshrink")
    return x - x.tanh()


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:  # noqa: A002
    """input / max(||input||_p, eps) along `dim` (p = 2 only here)."""
    x = check_tensor(input, "normalize")
    if p != 2:
        raise NotImplementedError(f"normalize: only p=2 is supported here, got p={p!r}")
    eps = check_number(eps, "eps", "normalize", 0.0)
    return x / x.norm(2, dim, keepdim=True).clamp(eps, None)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps)) along `dim`, x1 and x2 broadcast, as PyTorch's."""
    a, b = float_tensor(x1, "cosine_similarity", "x1"), float_tensor(x2, "cosine_similarity", "x2")
    eps = check_number(eps, "eps", "cosine_similarity", 0.0)
    return (a / a.norm(2, dim, keepdim=True).clamp(eps, None) * (b / b.norm(2, dim, keepdim=True).clamp(eps, None))
            ).sum(dim)


def glu(input: Tensor, dim: int = -1) -> Tensor:  # noqa: A002
    """a * sigmoid(b), a and b the two halves of input along `dim` (whose size must be even)."""
    x = float_tensor(input, "glu")
    if x.ndim == 0 or x.shape[dim] % 2:
        raise RuntimeError(f"glu: halving dimension must be even, got shape {x.shape} along dim {dim}")
    a, b = x.chunk(2, dim)
    return a * b.sigmoid()


__all__ = ["celu", "cosine_similarity", "elu", "glu", "hardsigmoid", "hardswish", "hardtanh", "leaky_relu",
           "logsigmoid", "mish", "normalize", "relu6", "selu", "silu", "softplus", "softsign", "tanhshrink"]
